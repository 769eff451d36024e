"""The opcode handler table: register/op, the RETURN and SUSPEND markers and the hints for unsupported opcodes."""
from __future__ import annotations

from typing import Any, Callable

from thunder.interpreter.frame import Frame

RETURN = object()  # returned by handlers that end the frame (value in frame.return_value)
SUSPEND = object()  # returned by YIELD_VALUE: a generator frame stops there until resumed (frame.yielded)

Handler = Callable[[Any, Frame, Any], Any]
COMMON_HANDLERS: dict[str, Handler] = {}


def register(table: dict[str, Handler], *names: str):
    def deco(fn: Handler) -> Handler:
        for name in names:
            table[name] = fn
        return fn

    return deco


def op(*names: str):
    return register(COMMON_HANDLERS, *names)


# Hints appended to InterpreterError messages for opcodes that are deliberately not implemented.
_ASYNC_HINT = "coroutines, async generators and await are not supported by the thunder interpreter"
UNSUPPORTED_HINTS = {
    "RETURN_GENERATOR": _ASYNC_HINT,
    "GET_AWAITABLE": _ASYNC_HINT, "GET_AITER": _ASYNC_HINT, "GET_ANEXT": _ASYNC_HINT,
    "BEFORE_ASYNC_WITH": _ASYNC_HINT, "END_ASYNC_FOR": _ASYNC_HINT, "ASYNC_GEN_WRAP": _ASYNC_HINT,
    "GEN_START": _ASYNC_HINT,
    "PREP_RERAISE_STAR": "except* (exception groups) is not supported by the thunder interpreter",
    "CHECK_EG_MATCH": "except* (exception groups) is not supported by the thunder interpreter",
    "SETUP_ANNOTATIONS": "module/class bodies are not interpreted",
    "LOAD_CLASSDEREF": "module/class bodies are not interpreted",
    "IMPORT_STAR": "module/class bodies are not interpreted",
    "PRINT_EXPR": "interactive-mode code is not interpreted",
}
