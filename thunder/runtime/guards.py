"""Guards: what a cache entry assumes about everything its trace read from outside its arguments.

A guard is (expr, check, expected): `expr` is Python source the prologue evaluates at call time
over the entry's constants, `check` names how its value is compared with `expected` (a key of
CHECKS), `what` says in words what was read (for miss reasons). state.StateTracker makes one for
every value the trace read from a global, closure cell, attribute, container item or default
and treated as a constant, and for the ambient torch state the trace consulted (AMBIENT).
Later work (symbolic values, data-dependent splits) adds kinds of checks to CHECKS."""
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import torch

from thunder.core.dtypes import is_numpy_scalar


@dataclass(frozen=True)
class Guard:
    expr: str
    check: str
    expected: object
    what: str = ""


@dataclass(frozen=True)
class Check:
    rank: int  # the prologue evaluates cheaper checks first
    # source of the condition under which the prologue MISSes; const(value) names a constant
    miss_source: Callable[[str, object, Callable], str]
    holds: Callable[[object, object], bool]  # the same check in Python (miss reasons)
    reason: Callable[[str, object, object], str] = None  # (what, expected, value now) -> why it missed

    def why(self, what, expected, value):
        if self.reason is not None:
            return self.reason(what, expected, value)
        return f"{what} changed ({describe(expected)} -> {describe(value)})"


# ------------------------------------------------------------------------------------------------
# exact values: the type and the value, with -0.0 != 0.0, nan == nan, True != 1 != 1.0
def same_value(a, b):
    if type(a) is not type(b):
        return False
    if is_numpy_scalar(a):
        a, b = a.item(), b.item()
    if type(a) is complex:
        return same_value(a.real, b.real) and same_value(a.imag, b.imag)
    if type(a) is float:
        if a != a or b != b:
            return a != a and b != b
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def has_literal(v):
    """Whether repr(v) is Python source that evaluates to exactly v (type and value)."""
    if v is None or type(v) in (bool, int, str, bytes):
        return True
    if type(v) is float:
        return math.isfinite(v) and v != 0.0
    return False


def _value_miss(expr, v, const):
    if type(v) is bool or v is None:
        return f"{expr} is not {v!r}"
    if has_literal(v):
        return f"type(_v := {expr}) is not {type(v).__name__} or _v != {v!r}"
    return f"not same_value({expr}, {const(v)})"


# ------------------------------------------------------------------------------------------------
# snapshots of containers: their structure and items, compared without calling user __eq__
def snapshot(value, pin, _open=()):
    """A copy of what a container holds for `same`: items that are objects are kept by identity
    (pin(obj) is called for each, so later reads through them have a path), numbers and strings
    by value, tensors only as 'a tensor' (they are read by the prologue where used). A container
    that holds itself is kept by identity where it recurs."""
    if isinstance(value, torch.Tensor):
        return ("tensor",)
    if value is None or type(value) is bool:
        return ("is", value)
    if is_plain_value(value):
        return ("value", value)
    tp = type(value)
    if id(value) not in _open:
        inner = (*_open, id(value))
        if tp in (list, tuple, torch.Size) or tp is not tuple and isinstance(value, tuple) and hasattr(tp, "_fields"):
            return ("seq", tp, tuple(snapshot(v, pin, inner) for v in value))
        if tp in (dict, OrderedDict):
            # (a copy first: a dict that weak references' callbacks shrink, dynamo's registry of
            # the modules made, can lose entries while the snapshot's allocations run the GC)
            items = value.copy()
            return ("map", tp, list(items), tuple(snapshot(v, pin, inner) for v in items.values()))
        if tp in (set, frozenset):
            return ("set", tp, frozenset(value))
    pin(value)
    return ("is", value)


def _items_same(values, snaps):
    for v, s in zip(values, snaps):
        if not same(v, s):
            return False
    return True


def same(value, snap):
    kind = snap[0]
    if kind == "is":
        return value is snap[1]
    if kind == "value":
        return same_value(value, snap[1])
    if kind == "tensor":
        return isinstance(value, torch.Tensor)
    if type(value) is not snap[1]:
        return False
    if kind == "seq":
        return len(value) == len(snap[2]) and _items_same(value, snap[2])
    if kind == "map":
        return list(value) == snap[2] and _items_same(value.values(), snap[3])
    return value == snap[2]  # sets of hashable values


def same_array(value, copy):
    """Whether value is a numpy array of copy's type, dtype and shape with the same bytes (nan
    equal to the same nan): an array read from state whose values the trace computed with."""
    return type(value) is type(copy) and value.dtype == copy.dtype and value.shape == copy.shape and \
        value.tobytes() == copy.tobytes()


def is_plain_value(v):
    """Numbers, strings and the other values compared by type and value."""
    return type(v) in (int, float, complex, str, bytes, torch.device) or is_numpy_scalar(v)


def _same_miss(expr, snap, const):
    kind = snap[0]
    if kind == "map" and not snap[3]:
        return f"type(_v := {expr}) is not {const(snap[1])} or _v"  # an empty dict (hooks): still empty
    return f"not same({expr}, {const(snap)})"


CHECKS = {
    "is": Check(0, lambda e, v, const: f"{e} is not {v!r}" if v is None or type(v) is bool
                else f"{e} is not {const(v)}", lambda x, v: x is v),
    "absent": Check(1, lambda e, name, const: f"{name!r} in {e}.__dict__",
                    lambda x, name: name not in getattr(x, "__dict__", {}),
                    lambda what, name, x: f"{what}: an instance attribute '{name}' now shadows it"),
    "hasattr": Check(1, lambda e, v, const: f"{'not ' if v[1] else ''}hasattr({e}, {v[0]!r})",
                     lambda x, v: hasattr(x, v[0]) == v[1],
                     lambda what, v, x: f"{what} changed ({v[1]} -> {not v[1]})"),
    "value": Check(2, _value_miss, same_value),
    "method": Check(3, lambda e, v, const: f"(_v := {e}).__func__ is not {const(v[0])} or _v.__self__ is not "
                                           f"{const(v[1])}",
                    lambda x, v: getattr(x, "__func__", None) is v[0] and getattr(x, "__self__", None) is v[1]),
    "type": Check(3, lambda e, t, const: f"type({e}) is not {const(t)}", lambda x, t: type(x) is t),
    "same": Check(4, _same_miss, same),
    "array": Check(5, lambda e, v, const: f"not same_array({e}, {const(v)})", same_array,
                   lambda what, v, x: f"{what}: the values of the array changed"),
}



def value_changed_reason(e):
    """The miss reason of an impl.ValueChanged (a value the program was specialized on while
    tracing differs in this call), worded as the value guards word theirs."""
    return CHECKS["value"].why(e.what, e.expected, e.got)


# names the prologue's conditions use
NAMESPACE = {"same": same, "same_value": same_value, "same_array": same_array}


# ------------------------------------------------------------------------------------------------
# ambient torch state: name -> the prologue's source that reads it. The trace records what it
# consulted (tracing.consult); the prologue checks that against its value when tracing started
AMBIENT_NAMESPACE = {"is_grad_enabled": torch.is_grad_enabled,
                     "is_inference_mode_enabled": torch.is_inference_mode_enabled,
                     "get_default_dtype": torch.get_default_dtype, "get_default_device": torch.get_default_device,
                     "are_deterministic_algorithms_enabled": torch.are_deterministic_algorithms_enabled,
                     "is_autocast_enabled": torch.is_autocast_enabled, "get_autocast_dtype": torch.get_autocast_dtype}
AMBIENT = {
    "grad_enabled": "is_grad_enabled()",
    "inference_mode": "is_inference_mode_enabled()",
    "default_dtype": "get_default_dtype()",
    "default_device": "get_default_device()",
    "deterministic": "are_deterministic_algorithms_enabled()",
    # an autocast region around the call changes the program (its casts are traced)
    "autocast_cpu": "is_autocast_enabled('cpu')",
    "autocast_cpu_dtype": "get_autocast_dtype('cpu')",
    "autocast_cuda": "is_autocast_enabled('cuda')",
    "autocast_cuda_dtype": "get_autocast_dtype('cuda')",
}
_AMBIENT_CODE = {name: compile(src, "<ambient>", "eval") for name, src in AMBIENT.items()}

# torch functions whose answer is ambient state: calling one while tracing consults it
QUERIES = {torch.is_grad_enabled: "grad_enabled", torch.is_inference_mode_enabled: "inference_mode",
           torch.get_default_dtype: "default_dtype", torch.get_default_device: "default_device",
           torch.are_deterministic_algorithms_enabled: "deterministic"}


def ambient_snapshot():
    return {name: eval(code, AMBIENT_NAMESPACE) for name, code in _AMBIENT_CODE.items()}


def ambient_guards(consulted, start):
    """Guards for the ambient state the trace consulted, against its value at the trace's start
    (a state set inside the function, `with torch.no_grad():`, is then still one entry)."""
    return [Guard(AMBIENT[name], "value" if name == "default_device" else "is", start[name], f"torch state {name}")
            for name in AMBIENT if name in consulted]  # (a torch.device is made anew by each query)


def describe(value):
    """A short repr for miss reasons."""
    if isinstance(value, tuple) and value and value[0] in ("is", "value", "tensor", "seq", "map", "set"):
        return "<the container as it was>"
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def failing(guards, consts):
    """The first guard that does not hold now, with the value read (slow path: miss reasons)."""
    ns = {**NAMESPACE, **AMBIENT_NAMESPACE, **consts}
    for g in guards:
        try:
            value = eval(g.expr, ns)
        except Exception as e:  # noqa: BLE001 - whatever reading it raises, it changed
            return g, f"<unreadable: {type(e).__name__}>"
        if not CHECKS[g.check].holds(value, g.expected):
            return g, value
    return None
