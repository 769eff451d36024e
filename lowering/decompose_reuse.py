"""An op's decomposition run once per signature (decompose.decompose_op, inside `shared()`): a
model's N identical layers decompose the same op (the same attributes, operand and result types,
constant operands: definitions._signature) N times, recording the same prims under names derived
from the op's (`t5` -> `t5_0`, `t5_1`). The first decomposition of a signature is kept as a
template (its ops, each name as its number after the op's name); the next ones emit the template
under their op's name, without running the decomposition and its meta functions.

A template is kept only where every name the decomposition made is the op's name and a number
(no name from a hint: that would not follow the op's) and each operand it read is one of the op's
operands; otherwise the decomposition runs each time. The module is thus the same, name for
name, as without sharing (tests/test_repeated_structure.py compares them)."""
import contextvars

from thunder.core.trace import Ref
from thunder.dialects import attrs
from thunder.dialects.definitions import _signature
from thunder.core.scoped import scoped

ENABLED = True  # off: every decomposition runs (tests and benchmarks/compile_depth.py compare the two)
STATS = {"hits": 0, "misses": 0, "refused": 0}  # emitted from a template / templates kept / not kept
_ACTIVE = contextvars.ContextVar("thunder_shared_decompositions", default=None)
_REFUSED = object()


def shared():
    """Decompositions shared by signature inside (one compile's passes: what a decomposition
    records may depend on ambient state such as the default dtype, constant within one)."""
    return scoped(_ACTIVE, {})


def lookup(operation):
    """(key, template) of operation where sharing is on: template None where none was kept yet,
    _REFUSED where it cannot be; (None, None) where sharing is off or the op has no signature."""
    templates = _ACTIVE.get()
    if templates is None or not ENABLED:
        return None, None
    key = _signature(operation)
    return (key, templates.get(key)) if key is not None else (None, None)


def refused(template):
    return template is _REFUSED


def replay(template, operation, base):
    """(the ops to emit as BoundSymbol-like tuples (op, args, outputs, widened), the result
    names, values: name -> ir.Value of the operands) of the template under the op's name base."""
    prefix = f"{base}_"
    operands = list(operation.operands)
    values = {prefix + k: operands[i] for k, i in template.operands}

    def renamed(v):
        if isinstance(v, Ref):
            return Ref(prefix + v.name, v.shape, v.dtype, v.device)
        if isinstance(v, tuple):
            return tuple(renamed(x) for x in v)
        return v

    steps = [(op, {k: renamed(v) for k, v in args.items()}, [renamed(o) for o in outputs], widened)
             for op, args, outputs, widened in template.steps]
    STATS["hits"] += 1
    return steps, [prefix + n for n in template.results], values


class _Template:
    def __init__(self, operands, steps, results):
        self.operands = operands  # (the number after the op's name, the operand's index)
        self.steps = steps  # (op, args, outputs, widened), names as their numbers
        self.results = results


def record(key, operation, base, symbols, outs, values):
    """Keep the template of a decomposition that ran (symbols: what it recorded, outs: its results'
    proxies, values: proxy name -> the ir.Value of an operand)."""
    templates = _ACTIVE.get()
    if templates is None or key is None:
        return
    templates[key] = _template(operation, base, symbols, outs, values) or _REFUSED
    STATS["misses" if templates[key] is not _REFUSED else "refused"] += 1


def _template(operation, base, symbols, outs, values):
    prefix = f"{base}_"
    operands = list(operation.operands)

    def suffix(name):  # (the number after prefix; a regex compiled per op cost more than the rest)
        if not name.startswith(prefix):
            return None
        k = name[len(prefix):]
        return k if k.isdecimal() else None  # (isdecimal: what \d+ matches, and not empty)

    # decode_op made one proxy per operand that is not a constant, in order (a list operand, or
    # a size's, has no signature): by position, not by value (mul(x, x) is not mul(x, y))
    read = [i for i, o in enumerate(operands) if not attrs.is_constant(o)]
    if len(read) != len(values):
        return None
    inputs = []
    for (name, v), at in zip(values.items(), read):
        k = suffix(name)
        if k is None or operands[at] != v:
            return None
        inputs.append((k, at))
    made = set(values)
    ok = [True]

    def stripped(v):
        if isinstance(v, Ref):
            k = suffix(v.name)
            if k is None or v.name not in made:
                ok[0] = False
            return Ref(k, v.shape, v.dtype, v.device)
        if isinstance(v, tuple):
            return tuple(stripped(x) for x in v)
        if isinstance(v, (list, dict, set)):  # (mutable: emit_symbol reads it; refused to be safe)
            ok[0] = False
        return v

    steps = []
    for b in symbols:
        args = {k: stripped(v) for k, v in b.args.items()}
        made.update(o.name for o in b.outputs)
        steps.append((b.op, args, [stripped(o) for o in b.outputs], b.widened))
    results = [suffix(getattr(o, "name", "")) or "" for o in outs]
    if not ok[0] or not all(results) or any(getattr(o, "name", None) not in made for o in outs):
        return None
    return _Template(inputs, steps, results)
