"""Opcode handlers: iteration and jumps."""
from __future__ import annotations

from thunder.interpreter.frame import Frame
from thunder.interpreter.opcodes.table import op, RETURN


# ----------------------------------------------------------------------------------------------
# iteration and jumps
# ----------------------------------------------------------------------------------------------
@op("GET_ITER")
def _get_iter(rt, f: Frame, i) -> None:
    obj = f.stack.pop()
    if type(obj) in (list, tuple):
        f.stack.append(rt.items(obj, f))
        return
    fn = rt.python_slot(obj, "__iter__")
    if fn is None:
        f.stack.append(iter(obj))
        return
    it = rt.call(fn, (obj,), {}, f)
    if not hasattr(type(it), "__next__"):
        raise TypeError(f"iter() returned non-iterator of type '{type(it).__name__}'")
    f.stack.append(it)


@op("GET_LEN")
def _get_len(rt, f: Frame, i) -> None:
    f.stack.append(len(f.stack[-1]))


@op("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT")
def _jump(rt, f: Frame, i) -> None:
    f.jump(i.argval)


# Direction is irrelevant once dis has resolved the target, so 3.11's FORWARD/BACKWARD variants and
# 3.12's direction-less names share handlers. Truthiness is rt.truth: a Python __bool__ is interpreted.
@op("POP_JUMP_IF_TRUE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE")
def _pop_jump_if_true(rt, f: Frame, i) -> None:
    if rt.truth(f.stack.pop(), f):
        f.jump(i.argval)


@op("POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE")
def _pop_jump_if_false(rt, f: Frame, i) -> None:
    if not rt.truth(f.stack.pop(), f):
        f.jump(i.argval)


@op("POP_JUMP_IF_NONE", "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE")
def _pop_jump_if_none(rt, f: Frame, i) -> None:
    if f.stack.pop() is None:
        f.jump(i.argval)


@op("POP_JUMP_IF_NOT_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE")
def _pop_jump_if_not_none(rt, f: Frame, i) -> None:
    if f.stack.pop() is not None:
        f.jump(i.argval)


@op("RETURN_VALUE")
def _return_value(rt, f: Frame, i):
    f.return_value = f.stack.pop()
    return RETURN
