"""Binding call arguments to a function's parameters, the way CPython's ``initialize_locals`` does,
including its TypeError messages (so a bad call fails identically interpreted or not)."""
from __future__ import annotations

import inspect
import types
from typing import Any, Callable

__all__ = ["bind_arguments", "function_str"]

_VARIADIC = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS


def function_str(fn: Any) -> str:
    """``_PyObject_FunctionStr``: how CPython names a callable in call-related error messages."""
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(qualname, str):
        return str(fn)
    module = getattr(fn, "__module__", None)
    if isinstance(module, str) and module != "builtins":
        return f"{module}.{qualname}()"
    return f"{qualname}()"


def _format_missing(qualname: str, kind: str, names: list[str]) -> TypeError:
    names = [repr(n) for n in names]
    if len(names) == 1:
        listed = names[0]
    elif len(names) == 2:
        listed = f"{names[0]} and {names[1]}"
    else:
        listed = ", ".join(names[:-2]) + f", {names[-2]}, and {names[-1]}"
    s = "" if len(names) == 1 else "s"
    return TypeError(f"{qualname}() missing {len(names)} required {kind} argument{s}: {listed}")


def bind_arguments(fn: types.FunctionType, args: tuple, kwargs: dict[str, Any],
                   load_default: Callable[[str, Any], Any] | None = None) -> dict[str, Any]:
    """Returns the initial fast locals of a call to ``fn`` (name -> value). A parameter that takes
    its default gets ``load_default(name, value)`` when given (values read from the function)."""
    code = fn.__code__
    if (not kwargs and not code.co_flags & _VARIADIC and not code.co_kwonlyargcount
            and len(args) == code.co_argcount):
        return dict(zip(code.co_varnames, args))  # (the plain call: every parameter given by position)
    qualname = fn.__qualname__
    argcount = code.co_argcount
    posonly = code.co_posonlyargcount
    kwonly = code.co_kwonlyargcount
    varnames = code.co_varnames
    total = argcount + kwonly
    has_varargs = bool(code.co_flags & inspect.CO_VARARGS)
    has_varkw = bool(code.co_flags & inspect.CO_VARKEYWORDS)

    bound: dict[str, Any] = {}
    kwdict: dict[str, Any] | None = None
    if has_varkw:
        kwdict = {}
        bound[varnames[total + has_varargs]] = kwdict

    nargs = len(args)
    n = min(nargs, argcount)
    for i in range(n):
        bound[varnames[i]] = args[i]
    if has_varargs:
        bound[varnames[total]] = tuple(args[n:])

    if kwargs:
        kw_params = varnames[posonly:total]
        posonly_as_kw: list[str] = []
        for key, value in kwargs.items():
            if not isinstance(key, str):
                raise TypeError(f"{qualname}() keywords must be strings")
            if key in kw_params:
                if key in bound:
                    raise TypeError(f"{qualname}() got multiple values for argument '{key}'")
                bound[key] = value
            elif kwdict is not None:
                kwdict[key] = value
            elif key in varnames[:posonly]:
                posonly_as_kw.append(key)
            else:
                raise TypeError(f"{qualname}() got an unexpected keyword argument '{key}'")
        if posonly_as_kw:
            raise TypeError(f"{qualname}() got some positional-only arguments passed as keyword arguments: "
                            f"'{', '.join(posonly_as_kw)}'")

    if nargs > argcount and not has_varargs:
        defaults = fn.__defaults__ or ()
        kwonly_given = sum(1 for name in varnames[argcount:total] if name in bound)
        if defaults:
            sig, plural = f"from {argcount - len(defaults)} to {argcount}", True
        else:
            sig, plural = f"{argcount}", argcount != 1
        kwonly_sig = ""
        if kwonly_given:
            kwonly_sig = (f" positional argument{'s' if nargs != 1 else ''} (and {kwonly_given} "
                          f"keyword-only argument{'s' if kwonly_given != 1 else ''})")
        was = "was" if nargs == 1 and not kwonly_given else "were"
        raise TypeError(f"{qualname}() takes {sig} positional argument{'s' if plural else ''} "
                        f"but {nargs}{kwonly_sig} {was} given")

    if nargs < argcount:
        defaults = fn.__defaults__ or ()
        first_default = argcount - len(defaults)
        missing = [varnames[i] for i in range(nargs, first_default) if varnames[i] not in bound]
        if missing:
            raise _format_missing(qualname, "positional", missing)
        for i in range(max(nargs, first_default), argcount):
            if varnames[i] not in bound:
                value = defaults[i - first_default]
                bound[varnames[i]] = value if load_default is None else load_default(varnames[i], value)

    if kwonly:
        kwdefaults = fn.__kwdefaults__ or {}
        missing = []
        for name in varnames[argcount:total]:
            if name not in bound:
                if name in kwdefaults:
                    value = kwdefaults[name]
                    bound[name] = value if load_default is None else load_default(name, value)
                else:
                    missing.append(name)
        if missing:
            raise _format_missing(qualname, "keyword-only", missing)
    return bound
