"""Opcode handlers shared by the supported Python versions.

A handler is ``handler(rt, frame, instr)``: ``rt`` is the Runtime (calls, loads, exception state),
``frame`` the executing Frame and ``instr`` the ``dis.Instruction``. Handlers that leave the function
return ``RETURN``; jumps set ``frame.idx`` via ``frame.jump(offset)`` (``dis`` already resolved every
jump oparg to an absolute target offset in ``instr.argval``).

Version-specific handlers live in ``compat.py``, which assembles the table actually used.
"""
from __future__ import annotations

import collections.abc
import inspect
import operator
import types
from typing import Any, Callable
import sys

from thunder.core import symbols
from thunder.interpreter.binding import function_str
from thunder.interpreter.frame import NULL, Frame

__all__ = ["COMMON_HANDLERS", "RETURN", "register", "UNSUPPORTED_HINTS"]

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


# ----------------------------------------------------------------------------------------------
# no-ops
# ----------------------------------------------------------------------------------------------
@op("NOP", "RESUME", "CACHE", "EXTENDED_ARG")
def _nop(rt, f: Frame, i) -> None:
    pass


# ----------------------------------------------------------------------------------------------
# stack manipulation
# ----------------------------------------------------------------------------------------------
@op("POP_TOP")
def _pop_top(rt, f: Frame, i) -> None:
    f.stack.pop()


@op("PUSH_NULL")
def _push_null(rt, f: Frame, i) -> None:
    f.stack.append(NULL)


@op("COPY")
def _copy(rt, f: Frame, i) -> None:
    f.stack.append(f.stack[-i.arg])


@op("SWAP")
def _swap(rt, f: Frame, i) -> None:
    s = f.stack
    s[-1], s[-i.arg] = s[-i.arg], s[-1]


# ----------------------------------------------------------------------------------------------
# constants, locals, cells, globals
# ----------------------------------------------------------------------------------------------
def _unbound_local(name: str) -> UnboundLocalError:
    return UnboundLocalError(f"cannot access local variable '{name}' where it is not associated with a value")


@op("LOAD_CONST")
def _load_const(rt, f: Frame, i) -> None:
    f.stack.append(i.argval)


@op("LOAD_FAST", "LOAD_FAST_CHECK")
def _load_fast(rt, f: Frame, i) -> None:
    try:
        f.stack.append(f.locals[i.argval])
    except KeyError:
        raise _unbound_local(i.argval) from None


@op("STORE_FAST")
def _store_fast(rt, f: Frame, i) -> None:
    v = f.stack.pop()
    if v is NULL:  # 3.12 inlined comprehensions restore a previously-unbound local this way
        f.locals.pop(i.argval, None)
    else:
        f.locals[i.argval] = v


@op("DELETE_FAST")
def _delete_fast(rt, f: Frame, i) -> None:
    try:
        del f.locals[i.argval]
    except KeyError:
        raise _unbound_local(i.argval) from None


@op("MAKE_CELL")
def _make_cell(rt, f: Frame, i) -> None:
    name = i.argval
    # An argument captured by an inner function starts as a plain local; move it into its cell.
    f.cells[name] = types.CellType(f.locals.pop(name)) if name in f.locals else types.CellType()
    rt.own_cells[id(f.cells[name])] = f.cells[name]


@op("COPY_FREE_VARS")
def _copy_free_vars(rt, f: Frame, i) -> None:
    closure = f.fn.__closure__ or ()
    for name, cell in zip(f.code.co_freevars, closure):
        f.cells[name] = cell


def _unbound_deref(f: Frame, name: str) -> Exception:
    if name in f.code.co_freevars:
        return NameError(f"cannot access free variable '{name}' where it is not associated with a value "
                         f"in enclosing scope", name=name)
    return _unbound_local(name)


@op("LOAD_DEREF")
def _load_deref(rt, f: Frame, i) -> None:
    name = i.argval
    cell = f.cells[name]
    try:
        value = cell.cell_contents
    except ValueError:
        raise _unbound_deref(f, name) from None
    # a variable of interpreted code (its cell made by MAKE_CELL) is not a value from outside
    f.stack.append(value if rt.own_cells.get(id(cell)) is cell else rt.loaded(value, "closure", name, cell, f))


@op("LOAD_CLOSURE")
def _load_closure(rt, f: Frame, i) -> None:
    f.stack.append(f.cells[i.argval])  # the cell itself, for building an inner function's closure


@op("STORE_DEREF")
def _store_deref(rt, f: Frame, i) -> None:
    cell, value = f.cells[i.argval], f.stack.pop()
    if rt.own_cells.get(id(cell)) is not cell:  # a variable captured from outside the interpreted code
        rt.stored(value, "closure", i.argval, cell, f)
    cell.cell_contents = value


@op("DELETE_DEREF")
def _delete_deref(rt, f: Frame, i) -> None:
    try:
        del f.cells[i.argval].cell_contents
    except ValueError:
        raise _unbound_deref(f, i.argval) from None


def load_global(rt, f: Frame, i, name: str) -> None:
    """Shared by LOAD_GLOBAL; the low oparg bit asks for a NULL below the value (call setup)."""
    if i.arg & 1:
        f.stack.append(NULL)
    try:
        value = f.globals[name]
    except KeyError:
        try:
            value = f.builtins[name]  # builtins are not reported to on_load
        except KeyError:
            raise NameError(f"name '{name}' is not defined", name=name) from None
    else:
        value = rt.loaded(value, "global", name, f.globals, f)
    f.stack.append(value)


@op("LOAD_GLOBAL")
def _load_global(rt, f: Frame, i) -> None:
    load_global(rt, f, i, i.argval)


@op("STORE_GLOBAL")
def _store_global(rt, f: Frame, i) -> None:
    value = f.stack.pop()
    rt.stored(value, "global", i.argval, f.globals, f)
    f.globals[i.argval] = value


@op("DELETE_GLOBAL")
def _delete_global(rt, f: Frame, i) -> None:
    try:
        del f.globals[i.argval]
    except KeyError:
        raise NameError(f"name '{i.argval}' is not defined", name=i.argval) from None


# ----------------------------------------------------------------------------------------------
# attributes
# ----------------------------------------------------------------------------------------------
@op("STORE_ATTR")
def _store_attr(rt, f: Frame, i) -> None:
    obj = f.stack.pop()
    value = f.stack.pop()
    rt.stored(value, "attr", i.argval, obj, f)
    setattr(obj, i.argval, value)


@op("DELETE_ATTR")
def _delete_attr(rt, f: Frame, i) -> None:
    delattr(f.stack.pop(), i.argval)


def load_attr(rt, f: Frame, name: str, method: bool) -> None:
    """Attribute load; with ``method`` pushes NULL first so CALL sees [NULL, bound attr]. CPython pushes
    [function, self] for methods instead, but calling the bound method is equivalent."""
    obj = f.stack.pop()
    value = rt.load_attribute(obj, name, f)
    if method:
        f.stack.append(NULL)
    f.stack.append(value)


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
    f.stack.append((lhs is not rhs) if i.arg else (lhs is rhs))


@op("CONTAINS_OP")
def _contains_op(rt, f: Frame, i) -> None:
    container = f.stack.pop()
    item = f.stack.pop()
    fn = rt.python_slot(container, "__contains__")
    res = bool(rt.call(fn, (container, item), {}, f)) if fn is not None else operator.contains(container, item)
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
        container[key] = value


@op("DELETE_SUBSCR")
def _delete_subscr(rt, f: Frame, i) -> None:
    key = f.stack.pop()
    container = f.stack.pop()
    del container[key]


# ----------------------------------------------------------------------------------------------
# building containers / strings
# ----------------------------------------------------------------------------------------------
@op("BUILD_TUPLE")
def _build_tuple(rt, f: Frame, i) -> None:
    f.stack.append(tuple(f.popn(i.arg)))


@op("BUILD_LIST")
def _build_list(rt, f: Frame, i) -> None:
    f.stack.append(f.popn(i.arg))


@op("BUILD_SET")
def _build_set(rt, f: Frame, i) -> None:
    f.stack.append(set(f.popn(i.arg)))


@op("BUILD_MAP")
def _build_map(rt, f: Frame, i) -> None:
    items = f.popn(2 * i.arg)
    d = {}
    for k, v in zip(items[::2], items[1::2]):
        d[k] = v
    f.stack.append(d)


@op("BUILD_CONST_KEY_MAP")
def _build_const_key_map(rt, f: Frame, i) -> None:
    keys = f.stack.pop()
    values = f.popn(i.arg)
    f.stack.append(dict(zip(keys, values)))


@op("BUILD_STRING")
def _build_string(rt, f: Frame, i) -> None:
    f.stack.append("".join(f.popn(i.arg)))


@op("BUILD_SLICE")
def _build_slice(rt, f: Frame, i) -> None:
    f.stack.append(slice(*f.popn(i.arg)))


@op("LIST_APPEND")
def _list_append(rt, f: Frame, i) -> None:
    v = f.stack.pop()
    f.stack[-i.arg].append(v)


@op("SET_ADD")
def _set_add(rt, f: Frame, i) -> None:
    v = f.stack.pop()
    f.stack[-i.arg].add(v)


@op("MAP_ADD")
def _map_add(rt, f: Frame, i) -> None:
    value = f.stack.pop()
    key = f.stack.pop()
    f.stack[-i.arg][key] = value


def _is_iterable_type(obj: Any) -> bool:
    tp = type(obj)
    return getattr(tp, "__iter__", None) is not None or hasattr(tp, "__getitem__")


@op("LIST_EXTEND")
def _list_extend(rt, f: Frame, i) -> None:
    iterable = f.stack.pop()
    if not _is_iterable_type(iterable):
        raise TypeError(f"Value after * must be an iterable, not {type(iterable).__name__}")
    f.stack[-i.arg].extend(iterable)


@op("SET_UPDATE")
def _set_update(rt, f: Frame, i) -> None:
    iterable = f.stack.pop()
    f.stack[-i.arg].update(iterable)


@op("DICT_UPDATE")
def _dict_update(rt, f: Frame, i) -> None:
    update = f.stack.pop()
    if not hasattr(update, "keys"):
        raise TypeError(f"'{type(update).__name__}' object is not a mapping")
    f.stack[-i.arg].update(update)


@op("DICT_MERGE")
def _dict_merge(rt, f: Frame, i) -> None:
    """``f(**a, **b)``: like DICT_UPDATE but duplicate keys are an error naming the callee."""
    update = f.stack.pop()
    target = f.stack[-i.arg]
    callee = f.stack[-(i.arg + 2)]
    if not hasattr(update, "keys"):
        raise TypeError(f"{function_str(callee)} argument after ** must be a mapping, "
                        f"not {type(update).__name__}")
    for key in update.keys():
        if key in target:
            raise TypeError(f"{function_str(callee)} got multiple values for keyword argument '{key}'")
        target[key] = update[key]


@op("LIST_TO_TUPLE")
def _list_to_tuple(rt, f: Frame, i) -> None:
    f.stack.append(tuple(f.stack.pop()))


_CONVERSIONS = {1: str, 2: repr, 3: ascii}


@op("FORMAT_VALUE")
def _format_value(rt, f: Frame, i) -> None:
    spec = f.stack.pop() if (i.arg & 0x04) else ""
    value = f.stack.pop()
    conv = _CONVERSIONS.get(i.arg & 0x03)
    if conv is not None:
        value = conv(value)
    f.stack.append(format(value, spec))


# ----------------------------------------------------------------------------------------------
# unpacking (CPython's unpack_iterable, with its messages)
# ----------------------------------------------------------------------------------------------
def _unpack(seq: Any, before: int, after: int | None) -> list[Any]:
    """Returns the unpacked items in source order; ``after`` is None for plain (non-starred) unpacking."""
    try:
        it = iter(seq)
    except TypeError:
        if not _is_iterable_type(seq):
            raise TypeError(f"cannot unpack non-iterable {type(seq).__name__} object") from None
        raise
    items = []
    for n in range(before):
        try:
            items.append(next(it))
        except StopIteration:
            if after is None:
                raise ValueError(f"not enough values to unpack (expected {before}, got {n})") from None
            raise ValueError(f"not enough values to unpack (expected at least {before + after}, got {n})") from None
    if after is None:
        try:
            next(it)
        except StopIteration:
            return items
        raise ValueError(f"too many values to unpack (expected {before})")
    rest = list(it)
    if len(rest) < after:
        raise ValueError(f"not enough values to unpack (expected at least {before + after}, "
                         f"got {before + len(rest)})")
    split = len(rest) - after
    return items + [rest[:split]] + rest[split:]


@op("UNPACK_SEQUENCE")
def _unpack_sequence(rt, f: Frame, i) -> None:
    seq = f.stack.pop()
    if type(seq) in (tuple, list) and len(seq) == i.arg:
        items = list(rt.items(seq, f))
    else:
        items = _unpack(seq, i.arg, None)
    f.stack.extend(reversed(items))  # first item ends up on top


@op("UNPACK_EX")
def _unpack_ex(rt, f: Frame, i) -> None:
    items = _unpack(f.stack.pop(), i.arg & 0xFF, i.arg >> 8)
    f.stack.extend(reversed(items))


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


# ----------------------------------------------------------------------------------------------
# calls and function creation
# ----------------------------------------------------------------------------------------------
@op("KW_NAMES")
def _kw_names(rt, f: Frame, i) -> None:
    # dis does not resolve this oparg (a co_consts index) in every version
    f.kw_names = i.argval if isinstance(i.argval, tuple) else f.code.co_consts[i.arg]


@op("CALL")
def _call(rt, f: Frame, i) -> None:
    """Stack (3.11, 3.12): [NULL, callable, *args] or [function, self, *args]."""
    args = f.popn(i.arg)
    second = f.stack.pop()
    first = f.stack.pop()
    if first is NULL:
        fn = second
    else:
        fn = first
        args.insert(0, second)
    kwargs = {}
    if f.kw_names:
        n = len(f.kw_names)
        kwargs = dict(zip(f.kw_names, args[-n:]))
        del args[-n:]
        f.kw_names = ()
    f.stack.append(rt.call(fn, tuple(args), kwargs, f))


@op("CALL_FUNCTION_EX")
def _call_function_ex(rt, f: Frame, i) -> None:
    """Stack: [NULL, callable, args, (kwargs if oparg & 1)]."""
    kwargs = f.stack.pop() if i.arg & 1 else {}
    args = f.stack.pop()
    fn = f.stack.pop()
    if f.stack.pop() is not NULL:
        raise rt.unsupported(f, "unexpected stack layout at CALL_FUNCTION_EX (interpreter bug)")
    if not isinstance(args, tuple):
        if not _is_iterable_type(args):
            raise TypeError(f"{function_str(fn)} argument after * must be an iterable, "
                            f"not {type(args).__name__}")
        args = tuple(args)
    if not isinstance(kwargs, dict):
        if not hasattr(kwargs, "keys"):
            raise TypeError(f"{function_str(fn)} argument after ** must be a mapping, "
                            f"not {type(kwargs).__name__}")
        kwargs = {k: kwargs[k] for k in kwargs.keys()}
    f.stack.append(rt.call(fn, args, kwargs, f))


@op("MAKE_FUNCTION")
def _make_function(rt, f: Frame, i) -> None:
    """Creates a real function object, so it can equally be interpreted or run natively later."""
    code = f.stack.pop()
    flags = i.arg
    closure = f.stack.pop() if flags & 0x08 else None
    annotations = f.stack.pop() if flags & 0x04 else None
    kwdefaults = f.stack.pop() if flags & 0x02 else None
    defaults = f.stack.pop() if flags & 0x01 else None
    fn = types.FunctionType(code, f.globals, code.co_name, defaults, closure)
    if kwdefaults is not None:
        fn.__kwdefaults__ = kwdefaults
    if annotations is not None:
        if isinstance(annotations, tuple):  # the compiler emits (name, value, name, value, ...)
            annotations = dict(zip(annotations[::2], annotations[1::2]))
        fn.__annotations__ = annotations
    if hasattr(code, "co_qualname"):
        fn.__qualname__ = code.co_qualname
    f.stack.append(fn)


@op("LOAD_BUILD_CLASS")
def _load_build_class(rt, f: Frame, i) -> None:
    # Class bodies run natively: __build_class__ is called like any builtin.
    try:
        f.stack.append(f.builtins["__build_class__"])
    except KeyError:
        raise NameError("__build_class__ not found") from None


@op("IMPORT_NAME")
def _import_name(rt, f: Frame, i) -> None:
    fromlist = f.stack.pop()
    level = f.stack.pop()
    try:
        importer = f.builtins["__import__"]
    except KeyError:
        raise ImportError("__import__ not found") from None
    f.stack.append(importer(i.argval, f.globals, None, fromlist, level))


@op("IMPORT_FROM")
def _import_from(rt, f: Frame, i) -> None:
    module = f.stack[-1]
    name = i.argval
    try:
        value = getattr(module, name)
    except AttributeError:
        # Submodule that is being imported circularly: look it up in sys.modules like CPython does.
        pkgname = getattr(module, "__name__", None)
        fullname = f"{pkgname}.{name}" if isinstance(pkgname, str) else None
        if fullname is not None and fullname in sys.modules:
            value = sys.modules[fullname]
        else:
            origin = getattr(module, "__file__", None) or "unknown location"
            raise ImportError(f"cannot import name '{name}' from '{pkgname}' ({origin})",
                              name=pkgname, path=getattr(module, "__file__", None)) from None
    f.stack.append(value)


# ----------------------------------------------------------------------------------------------
# exceptions
# ----------------------------------------------------------------------------------------------
@op("PUSH_EXC_INFO")
def _push_exc_info(rt, f: Frame, i) -> None:
    exc = f.stack.pop()
    f.stack.append(rt.handled_exc)  # restored by POP_EXCEPT when the handler finishes
    rt.handled_exc = exc
    f.stack.append(exc)


@op("POP_EXCEPT")
def _pop_except(rt, f: Frame, i) -> None:
    rt.handled_exc = f.stack.pop()


def _exception_matches(exc: BaseException, match: Any) -> bool:
    """PyErr_GivenExceptionMatches: plain MRO check, no __subclasscheck__/__instancecheck__ hooks."""
    if isinstance(match, tuple):
        return any(_exception_matches(exc, m) for m in match)
    return match in type(exc).__mro__


def _check_except_type(match: Any) -> None:
    items = match if isinstance(match, tuple) else (match,)
    for m in items:
        if not (isinstance(m, type) and issubclass(m, BaseException)):
            raise TypeError("catching classes that do not inherit from BaseException is not allowed")


@op("CHECK_EXC_MATCH")
def _check_exc_match(rt, f: Frame, i) -> None:
    match = f.stack.pop()
    _check_except_type(match)
    f.stack.append(_exception_matches(f.stack[-1], match))


def _raise(exc: BaseException):
    """Raises exc without a local of the raising frame holding it (a cycle through the traceback
    would keep the frames, and the tensors they hold, alive until the next garbage collection)."""
    try:
        raise exc
    finally:
        del exc


@op("RERAISE")
def _reraise(rt, f: Frame, i) -> None:
    f.reraising = f.keep_traceback = True  # keep the exception's context/traceback as they are
    _raise(f.stack.pop())


@op("RAISE_VARARGS")
def _raise_varargs(rt, f: Frame, i) -> None:
    cause = f.stack.pop() if i.arg == 2 else None
    if i.arg == 0:  # bare `raise`
        exc = rt.handled_exc
        if exc is None:
            raise RuntimeError("No active exception to reraise")
        f.reraising = f.keep_traceback = True
        del exc
        _raise(rt.handled_exc)
    exc = f.stack.pop()
    if isinstance(exc, type) and issubclass(exc, BaseException):
        cls = exc
        exc = cls()
        if not isinstance(exc, BaseException):
            raise TypeError(f"calling {cls!r} should have returned an instance of BaseException, "
                            f"not {type(exc).__name__}")
    elif not isinstance(exc, BaseException):
        raise TypeError("exceptions must derive from BaseException")
    if i.arg == 2:
        if isinstance(cause, type) and issubclass(cause, BaseException):
            cause = cause()
        elif cause is not None and not isinstance(cause, BaseException):
            raise TypeError("exception causes must derive from BaseException")
        exc.__cause__ = cause  # also sets __suppress_context__
    rt.set_context(exc, overwrite=True)
    f.reraising = True  # context already set above
    try:
        raise exc
    finally:
        del exc, cause  # see _raise


@op("LOAD_ASSERTION_ERROR")
def _load_assertion_error(rt, f: Frame, i) -> None:
    f.stack.append(AssertionError)


# ----------------------------------------------------------------------------------------------
# with-statements
# ----------------------------------------------------------------------------------------------
def _lookup_special(obj: Any, name: str) -> Any:
    """_PyObject_LookupSpecial: look the name up on the type and bind it (instance dict is ignored)."""
    for klass in type(obj).__mro__:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            get = getattr(type(attr), "__get__", None)
            return get(attr, obj, type(obj)) if get is not None else attr
    return None


@op("BEFORE_WITH")
def _before_with(rt, f: Frame, i) -> None:
    mgr = f.stack.pop()
    enter = _lookup_special(mgr, "__enter__")
    if enter is None:
        raise TypeError(f"'{type(mgr).__name__}' object does not support the context manager protocol")
    exit_ = _lookup_special(mgr, "__exit__")
    if exit_ is None:
        raise TypeError(f"'{type(mgr).__name__}' object does not support the context manager protocol "
                        f"(missed __exit__ method)")
    f.stack.append(exit_)  # called later by CALL (normal exit) or WITH_EXCEPT_START
    # __enter__/__exit__ go through rt.call like explicit calls: lookup may intercept, Python ones are interpreted.
    f.stack.append(rt.call(enter, (), {}, f))


@op("WITH_EXCEPT_START")
def _with_except_start(rt, f: Frame, i) -> None:
    """Stack: [__exit__, lasti, previous exc, exc] -> calls __exit__(type, exc, tb) and pushes its result."""
    exc = f.stack[-1]
    exit_ = f.stack[-4]
    f.stack.append(rt.call(exit_, (type(exc), exc, exc.__traceback__), {}, f))


# ----------------------------------------------------------------------------------------------
# match statements
# ----------------------------------------------------------------------------------------------
_MATCH_SELF_TYPES = (bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple)
_MISSING = object()


@op("MATCH_MAPPING")
def _match_mapping(rt, f: Frame, i) -> None:
    f.stack.append(isinstance(f.stack[-1], collections.abc.Mapping))


@op("MATCH_SEQUENCE")
def _match_sequence(rt, f: Frame, i) -> None:
    subject = f.stack[-1]
    f.stack.append(isinstance(subject, collections.abc.Sequence)
                   and not isinstance(subject, (str, bytes, bytearray)))


@op("MATCH_KEYS")
def _match_keys(rt, f: Frame, i) -> None:
    """Stack: [subject, keys] -> pushes a tuple of the values, or None if a key is missing."""
    keys = f.stack[-1]
    subject = f.stack[-2]
    if not keys:
        f.stack.append(())
        return
    get = subject.get
    seen = []
    values = []
    for key in keys:
        if key in seen:
            raise ValueError(f"mapping pattern checks duplicate key ({key!r})")
        seen.append(key)
        value = get(key, _MISSING)
        if value is _MISSING:
            f.stack.append(None)
            return
        values.append(value)
    f.stack.append(tuple(values))


def _match_class_attr(subject: Any, cls: type, name: str, seen: set) -> Any:
    if name in seen:
        raise TypeError(f"{cls.__name__}() got multiple sub-patterns for attribute {name!r}")
    seen.add(name)
    try:
        return getattr(subject, name)
    except AttributeError:
        return _MISSING


@op("MATCH_CLASS")
def _match_class(rt, f: Frame, i) -> None:
    """Stack: [subject, cls, kw_names] -> pushes a tuple of extracted attributes, or None."""
    kw_names = f.stack.pop()
    cls = f.stack.pop()
    subject = f.stack.pop()
    nargs = i.arg
    if not isinstance(cls, type):
        _native_match_class(subject, cls)  # raises the version's own TypeError
        raise TypeError("called match pattern must be a type")
    if not isinstance(subject, cls):
        f.stack.append(None)
        return
    attrs: list[Any] = []
    seen: set = set()
    if nargs:
        match_self = False
        match_args = getattr(cls, "__match_args__", _MISSING)
        if match_args is _MISSING:
            match_self = issubclass(cls, _MATCH_SELF_TYPES)
            match_args = ()
        elif not isinstance(match_args, tuple):
            raise TypeError(f"{cls.__name__}.__match_args__ must be a tuple (got {type(match_args).__name__})")
        allowed = 1 if match_self else len(match_args)
        if allowed < nargs:
            s = "" if allowed == 1 else "s"
            raise TypeError(f"{cls.__name__}() accepts {allowed} positional sub-pattern{s} ({nargs} given)")
        if match_self:
            attrs.append(subject)
        else:
            for k in range(nargs):
                name = match_args[k]
                if not isinstance(name, str):
                    raise TypeError(f"__match_args__ elements must be strings (got {type(name).__name__})")
                value = _match_class_attr(subject, cls, name, seen)
                if value is _MISSING:
                    f.stack.append(None)
                    return
                attrs.append(value)
    for name in kw_names:
        value = _match_class_attr(subject, cls, name, seen)
        if value is _MISSING:
            f.stack.append(None)
            return
        attrs.append(value)
    f.stack.append(tuple(attrs))


def _native_match_class(subject: Any, cls: Any) -> None:
    match subject:
        case cls():
            pass
