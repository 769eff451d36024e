"""Opcode handlers: generators (runtime.Runtime.generator drives their frames)."""
from __future__ import annotations

import inspect
import types

from thunder.interpreter.frame import Frame
from thunder.interpreter.opcodes.table import op, SUSPEND, UNSUPPORTED_HINTS


# ----------------------------------------------------------------------------------------------
# generators (runtime.Runtime.generator drives their frames)
# ----------------------------------------------------------------------------------------------
@op("RETURN_GENERATOR")
def _return_generator(rt, f: Frame, i) -> None:
    if not f.code.co_flags & inspect.CO_GENERATOR:  # a coroutine or an async generator
        raise rt.unsupported(f, "unsupported bytecode RETURN_GENERATOR", UNSUPPORTED_HINTS["RETURN_GENERATOR"])
    f.stack.append(None)  # the value the first resumption sends (popped by the POP_TOP after it)


@op("YIELD_VALUE")
def _yield_value(rt, f: Frame, i):
    f.yielded = f.stack.pop()
    return SUSPEND


@op("GET_YIELD_FROM_ITER")
def _get_yield_from_iter(rt, f: Frame, i) -> None:
    obj = f.stack[-1]
    if not isinstance(obj, types.GeneratorType):
        f.stack[-1] = iter(obj)


def send(receiver, value):
    """What SEND does with its receiver: next() for None (iterators), else its send()."""
    if value is None and not isinstance(receiver, types.GeneratorType):
        return next(receiver)
    return receiver.send(value)
