"""Opcode handlers: no-ops, stack manipulation, constants, locals, cells, globals and attributes."""
from __future__ import annotations

import types

from thunder.interpreter.frame import Frame, NULL
from thunder.interpreter.opcodes.table import op


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
    if not rt.stored(value, "attr", i.argval, obj, f):
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
