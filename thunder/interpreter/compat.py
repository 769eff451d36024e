"""Everything that differs between the supported CPython versions, in one place.

The shared handlers live in ``opcodes.COMMON_HANDLERS``; this module adds the opcodes (or opcode
semantics) specific to 3.11 and to 3.12 and exposes ``HANDLERS``, the table for the running version.
Supporting another version means adding one more ``_PYxxx_HANDLERS`` dict here.
"""
from __future__ import annotations

import sys
from typing import Any

from thunder.interpreter.frame import NULL, Frame
from thunder.interpreter.opcodes import COMMON_HANDLERS, RETURN, load_attr, register, send, subscript

__all__ = ["HANDLERS", "PY_VERSION", "SUPPORTED_VERSIONS"]

PY_VERSION = sys.version_info[:2]
SUPPORTED_VERSIONS = ((3, 11), (3, 12))

_SENTINEL = object()


# ----------------------------------------------------------------------------------------------
# Python 3.11
# ----------------------------------------------------------------------------------------------
_PY311_HANDLERS: dict[str, Any] = {}


def _op311(*names):
    return register(_PY311_HANDLERS, *names)


@_op311("PRECALL")
def _precall(rt, f: Frame, i) -> None:
    pass  # only prepares specialisation in CPython; CALL does all the work here


@_op311("LOAD_ATTR")
def _load_attr_311(rt, f: Frame, i) -> None:
    load_attr(rt, f, i.argval, method=False)


@_op311("LOAD_METHOD")
def _load_method_311(rt, f: Frame, i) -> None:
    load_attr(rt, f, i.argval, method=True)


@_op311("JUMP_IF_TRUE_OR_POP")
def _jump_if_true_or_pop(rt, f: Frame, i) -> None:
    if rt.truth(f.stack[-1], f):
        f.jump(i.argval)
    else:
        f.stack.pop()


@_op311("JUMP_IF_FALSE_OR_POP")
def _jump_if_false_or_pop(rt, f: Frame, i) -> None:
    if not rt.truth(f.stack[-1], f):
        f.jump(i.argval)
    else:
        f.stack.pop()


@_op311("FOR_ITER")
def _for_iter_311(rt, f: Frame, i) -> None:
    value = next(f.stack[-1], _SENTINEL)  # next() with a default swallows StopIteration like FOR_ITER
    if value is _SENTINEL:
        f.stack.pop()
        f.jump(i.argval)
    else:
        f.stack.append(value)


def _send_op(returned):
    """SEND: [receiver, value] -> [receiver, what it yields]; when it returns instead,
    returned(frame, its value) leaves the version's stack and SEND jumps to its target."""
    def handler(rt, f: Frame, i) -> None:
        value = f.stack.pop()
        try:
            f.stack.append(send(f.stack[-1], value))
        except StopIteration as e:
            returned(f, e.value)
            f.jump(i.argval)

    return handler


def sent_returned_311(f: Frame, value) -> None:
    f.stack[-1] = value  # the receiver's place (the target's POP_TOP drops it unless used)


_PY311_HANDLERS["SEND"] = _send_op(sent_returned_311)


@_op311("COPY_DICT_WITHOUT_KEYS")
def _copy_dict_without_keys(rt, f: Frame, i) -> None:
    """match `{**rest}`: [subject, keys] -> [subject, dict(subject) minus keys]."""
    keys = f.stack.pop()
    rest = {}
    rest.update(f.stack[-1])
    for key in keys:
        del rest[key]
    f.stack.append(rest)


# ----------------------------------------------------------------------------------------------
# Python 3.12
# ----------------------------------------------------------------------------------------------
_PY312_HANDLERS: dict[str, Any] = {}

# CALL_INTRINSIC_1 operands (Include/internal/pycore_intrinsics.h)
_INTRINSIC1_STOPITERATION_ERROR = 3
_INTRINSIC1_UNARY_POSITIVE = 5
_INTRINSIC1_LIST_TO_TUPLE = 6


def _op312(*names):
    return register(_PY312_HANDLERS, *names)


@_op312("LOAD_ATTR")
def _load_attr_312(rt, f: Frame, i) -> None:
    load_attr(rt, f, i.argval, method=bool(i.arg & 1))  # low bit = method load (old LOAD_METHOD)


@_op312("FOR_ITER")
def _for_iter_312(rt, f: Frame, i) -> None:
    value = next(f.stack[-1], _SENTINEL)
    if value is _SENTINEL:
        # The target is the END_FOR after the loop; CPython pops the iterator and skips that END_FOR.
        f.stack.pop()
        f.jump(i.argval)
        f.idx += 1
    else:
        f.stack.append(value)


@_op312("END_FOR")
def _end_for(rt, f: Frame, i) -> None:
    del f.stack[-2:]


@_op312("RETURN_CONST")
def _return_const(rt, f: Frame, i):
    f.return_value = i.argval
    return RETURN


@_op312("LOAD_FAST_AND_CLEAR")
def _load_fast_and_clear(rt, f: Frame, i) -> None:
    # Inlined comprehensions save (and later restore via STORE_FAST) a shadowed local; NULL if unbound.
    f.stack.append(f.locals.pop(i.argval, NULL))


@_op312("BINARY_SLICE")
def _binary_slice(rt, f: Frame, i) -> None:
    stop = f.stack.pop()
    start = f.stack.pop()
    container = f.stack.pop()
    f.stack.append(subscript(rt, f, container, slice(start, stop)))


@_op312("STORE_SLICE")
def _store_slice(rt, f: Frame, i) -> None:
    stop = f.stack.pop()
    start = f.stack.pop()
    container = f.stack.pop()
    value = f.stack.pop()
    container[start:stop] = value


@_op312("CALL_INTRINSIC_1")
def _call_intrinsic_1(rt, f: Frame, i) -> None:
    if i.arg == _INTRINSIC1_UNARY_POSITIVE:
        f.stack.append(+f.stack.pop())
    elif i.arg == _INTRINSIC1_LIST_TO_TUPLE:
        f.stack.append(tuple(f.stack.pop()))
    elif i.arg == _INTRINSIC1_STOPITERATION_ERROR:  # a StopIteration leaving a generator's body
        exc = f.stack.pop()
        if isinstance(exc, StopIteration):
            new = RuntimeError("generator raised StopIteration")
            new.__cause__ = new.__context__ = exc
            exc = new
        f.stack.append(exc)
    else:
        raise rt.unsupported(f, f"bytecode CALL_INTRINSIC_1 ({i.argrepr})")


def sent_returned_312(f: Frame, value) -> None:
    f.stack.append(value)  # above the receiver (the target's END_SEND drops the receiver)


_PY312_HANDLERS["SEND"] = _send_op(sent_returned_312)


@_op312("END_SEND")
def _end_send(rt, f: Frame, i) -> None:
    del f.stack[-2]


@_op312("LOAD_SUPER_ATTR")
def _load_super_attr(rt, f: Frame, i) -> None:
    """Stack: [super, class, self]; oparg bit 1 = two-argument form, bit 0 = method load."""
    self_ = f.stack.pop()
    cls = f.stack.pop()
    global_super = f.stack.pop()
    sup = rt.call(global_super, (cls, self_) if i.arg & 2 else (), {}, f)
    f.stack.append(sup)
    load_attr(rt, f, i.argval, method=bool(i.arg & 1))


_VERSION_HANDLERS = {(3, 11): _PY311_HANDLERS, (3, 12): _PY312_HANDLERS}
# what a SEND whose receiver returned leaves on the stack (a throw() into a delegating generator)
SENT_RETURNED = sent_returned_311 if PY_VERSION == (3, 11) else sent_returned_312

# Unknown (newer) versions get the 3.12 table: unsupported opcodes then fail with a clear InterpreterError.
HANDLERS: dict[str, Any] = {**COMMON_HANDLERS, **_VERSION_HANDLERS.get(PY_VERSION, _PY312_HANDLERS)}
