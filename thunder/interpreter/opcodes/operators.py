"""Opcode handlers: binary/unary/compare operators and subscripting."""
from __future__ import annotations

import collections
import operator
from typing import Any

from thunder.core import symbols
from thunder.interpreter.frame import Frame
from thunder.interpreter.opcodes.table import op


# ----------------------------------------------------------------------------------------------
# operators: always the operator-module functions, so dunder methods (and their errors) apply
# ----------------------------------------------------------------------------------------------
# Indexed by BINARY_OP's oparg (NB_* order; in-place variants follow the 13 binary ones).
BINARY_OPS = [
    operator.add, operator.and_, operator.floordiv, operator.lshift, operator.matmul, operator.mul,
    operator.mod, operator.or_, operator.pow, operator.rshift, operator.sub, operator.truediv, operator.xor,
    operator.iadd, operator.iand, operator.ifloordiv, operator.ilshift, operator.imatmul, operator.imul,
    operator.imod, operator.ior, operator.ipow, operator.irshift, operator.isub, operator.itruediv,
    operator.ixor,
]

SYMBOLIC = (symbols.SymInt, symbols.SymFloat)

COMPARE_OPS = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq,
    "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
}


@op("BINARY_OP")
def _binary_op(rt, f: Frame, i) -> None:
    rhs = f.stack.pop()
    lhs = f.stack.pop()
    if type(lhs) is float and type(rhs) is symbols.SymInt:
        # float's own method takes any int and drops the symbol (1.0 / T: SymInt is no float
        # subclass, so Python does not try its reflected method first): the symbol's, then
        name = BINARY_OPS[i.arg % 13].__name__.rstrip("_")  # (operator.and_: and; in-place: the binary one)
        reflected = getattr(symbols.SymInt, f"__r{name}__", None)
        result = NotImplemented if reflected is None else reflected(rhs, lhs)
        if result is not NotImplemented:
            f.stack.append(result)
            return
    f.stack.append(BINARY_OPS[i.arg](lhs, rhs))


@op("COMPARE_OP")
def _compare_op(rt, f: Frame, i) -> None:
    rhs = f.stack.pop()
    lhs = f.stack.pop()
    result = COMPARE_OPS[i.argval](lhs, rhs)
    if type(lhs) in SYMBOLIC or type(rhs) in SYMBOLIC:  # a decision on a symbolic size: a guard
        symbols.compared(lhs, i.argval, rhs, result)
    f.stack.append(result)


@op("IS_OP")
def _is_op(rt, f: Frame, i) -> None:
    rhs = f.stack.pop()
    lhs = f.stack.pop()
    same = rt.same(lhs, rhs)
    f.stack.append(not same if i.arg else same)


@op("CONTAINS_OP")
def _contains_op(rt, f: Frame, i) -> None:
    container = f.stack.pop()
    item = f.stack.pop()
    fn = rt.python_slot(container, "__contains__")
    res = bool(rt.call(fn, (container, item), {}, f)) if fn is not None else \
        operator.contains(container, rt.key(container, item))
    f.stack.append(not res if i.arg else res)


@op("UNARY_POSITIVE")
def _unary_positive(rt, f: Frame, i) -> None:
    f.stack.append(operator.pos(f.stack.pop()))


@op("UNARY_NEGATIVE")
def _unary_negative(rt, f: Frame, i) -> None:
    f.stack.append(operator.neg(f.stack.pop()))


@op("UNARY_INVERT")
def _unary_invert(rt, f: Frame, i) -> None:
    f.stack.append(operator.invert(f.stack.pop()))


@op("UNARY_NOT")
def _unary_not(rt, f: Frame, i) -> None:
    f.stack.append(not rt.truth(f.stack.pop(), f))


def subscript(rt, f: Frame, container: Any, key: Any) -> Any:
    """container[key]: a Python __getitem__ is interpreted; items of lists, tuples and dicts are
    reported to on_load (kind "item": owner the container, name the key)."""
    fn = rt.python_slot(container, "__getitem__")
    if fn is not None:
        return rt.call(fn, (container, key), {}, f)
    if isinstance(container, (list, tuple, str, range)):  # an item picked by a symbolic size: specialized
        key = _concrete_key(key)
    looked_up = rt.key(container, key)
    if not isinstance(container, collections.defaultdict) or looked_up in container:
        key = looked_up
    elif key not in container:  # (a missing key of a defaultdict: its factory's value is stored)
        key = rt.key(container, key, write=True)
        rt.stored((key,), "item", key, container, f)
    value = container[key]
    if rt.on_load is not None and isinstance(container, (list, tuple, dict)) and type(key) is not slice:
        value = rt.loaded(value, "item", key, container, f)
    return value


def _concrete_key(key):
    if type(key) is slice:
        return slice(*map(symbols.concrete, (key.start, key.stop, key.step)))
    return symbols.concrete(key)


@op("BINARY_SUBSCR")
def _binary_subscr(rt, f: Frame, i) -> None:
    key = f.stack.pop()
    container = f.stack.pop()
    f.stack.append(subscript(rt, f, container, key))


@op("STORE_SUBSCR")
def _store_subscr(rt, f: Frame, i) -> None:
    key = f.stack.pop()
    container = f.stack.pop()
    value = f.stack.pop()
    fn = rt.python_slot(container, "__setitem__")
    if fn is not None:
        rt.call(fn, (container, key, value), {}, f)
    else:
        key = rt.key(container, key, write=True)
        rt.stored((key, value), "item", key, container, f)
        container[key] = value


@op("DELETE_SUBSCR")
def _delete_subscr(rt, f: Frame, i) -> None:
    key = f.stack.pop()
    container = f.stack.pop()
    rt.stored((key,), "item", key, container, f)
    del container[key]
