"""Opcode handlers: calls and function creation."""
from __future__ import annotations

import sys
import types

from thunder.interpreter.binding import function_str
from thunder.interpreter.frame import Frame, NULL
from thunder.interpreter.opcodes.containers import _is_iterable_type
from thunder.interpreter.opcodes.table import op


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
