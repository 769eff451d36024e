"""Opcode handlers: building containers and strings, and unpacking."""
from __future__ import annotations

from typing import Any

from thunder.interpreter.binding import function_str
from thunder.interpreter.frame import Frame
from thunder.interpreter.opcodes.table import op


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
