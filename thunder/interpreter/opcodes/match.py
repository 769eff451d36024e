"""Opcode handlers: match statements."""
from __future__ import annotations

import collections.abc
from typing import Any

from thunder.interpreter.frame import Frame
from thunder.interpreter.opcodes.table import op


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
