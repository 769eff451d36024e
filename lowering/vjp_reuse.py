"""VJP rules applied once per signature (thunder-autograd): a model's N identical layers run the
same rule on values of the same metadata N times, recording the same ops under other names. The
first application of a rule to a signature (the op, its arguments' metadata and constants, which
arguments are one value, the cotangents') is recorded as a template: the ops it recorded, each
operand an argument of the rule or a result of an earlier op of the template. The next
applications replay it: the same ops, appended to the trace as the rule's own recording would
(results named by the trace's counter in the same order, the same locations, views linked to
their bases as ops/record.py links them), without running the rule and the ops' meta functions.

A template is kept only where replaying it is exactly what running the rule does: its results got
consecutive counter names and nothing else took a name, it updated nothing in place and renamed
no argument, and every operand is an argument or a result of the template; otherwise the rule
runs each time. The backward is thus the same, name for name, with reuse on or off
(tests/test_repeated_structure.py compares them)."""
import torch

from thunder.core import symbols, trace as tracing
from thunder.core.proxies import TensorProxy, to_refs
from thunder.core.trace import BoundSymbol, Ref

ENABLED = True  # off: every rule runs (tests compare the two)
STATS = {"hits": 0, "misses": 0, "refused": 0}  # replays / templates recorded / not replayable

_PLAIN = (bool, int, float, complex, str, type(None), type(Ellipsis), torch.dtype, torch.device, torch.memory_format,
          torch.layout)
_REFUSED = object()


class _Key:
    """The key of a rule's application and its arguments' proxies (slots), flattened."""

    def __init__(self):
        self.slots = []  # the argument proxies, in order
        self.first = {}  # name -> its first slot
        self.parts = []
        self.ok = True

    def add(self, v):
        if isinstance(v, TensorProxy):
            slot = self.first.setdefault(v.name, len(self.slots))
            self.slots.append(v)
            self.parts.append(("T", tuple(map(_size_key, v.shape)), v.dtype, v.device, v.requires_grad, v.is_view, slot))
        elif isinstance(v, tuple):
            self.parts.append(("(", len(v)))
            for x in v:
                self.add(x)
        elif symbols.is_symbolic(v):  # (a size of a trace with dynamic sizes: its expression)
            self.parts.append(("sym", v.expr))
        elif isinstance(v, _PLAIN) or (isinstance(v, slice) and all(
                type(x) in (int, type(None)) for x in (v.start, v.stop, v.step))):
            # (type and repr: 1, 1.0 and True hash alike; -0.0 and 0.0 too)
            self.parts.append((type(v).__name__, repr(v)))
        else:
            self.ok = False  # (runtime numbers, lists, anything else: the rule runs)


def _size_key(d):
    """A dim in a key: a symbolic size by its expression (two of one value may differ)."""
    return ("sym", d.expr) if symbols.is_symbolic(d) else d


class VjpReuse:
    """The templates of one thunder-autograd run (ctx: the backward's trace being recorded)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.templates = {}

    def apply(self, op, g, out, kwargs, needing_grad=None):
        """op.vjp_rule(g, out, **kwargs), replayed from a template where one fits; needing_grad:
        which arguments need a gradient (tracing.inputs_needing_grad while the rule runs)."""
        def run():
            with tracing.needing_grad_in_rule(needing_grad):
                return op.vjp_rule(g, out, **kwargs)

        key = (op.qualname, tuple(kwargs), None if needing_grad is None else tuple(needing_grad.items()))
        return self._run(key, run, (g, out, *kwargs.values()))

    def call(self, op, *args):
        """op(*args), an op recorded outside a rule (the sum of two cotangents of one value),
        replayed from a template where one fits."""
        return self._run((op.qualname,), lambda: op(*args), args)

    def _run(self, what, run, values):
        """run() (it records ops in the current trace), replayed from the template of (what, the
        metadata of values: run's arguments) where one fits."""
        ctx = self.ctx
        if not ENABLED or ctx is None or tracing.current() is not ctx or ctx.on_record is not None or (
                ctx.track_grad_mode or ctx.track_strides or ctx.reader is not None or ctx.checkpoint is not None):
            # (recording that does more than append the ops: autocast, eager's strides, reads)
            return run()
        key = _Key()
        for v in values:
            key.add(v)
        if not key.ok:
            return run()
        # (where the ops are recorded from: the user's line while interpreting, torch.func's
        # rules; widened: inside a float64 decomposition)
        k = (what, tuple(key.parts), tracing.current_location(), ctx.widened)
        template = self.templates.get(k)
        if template is _REFUSED:
            return run()
        if template is not None:
            STATS["hits"] += 1
            return template.replay(self.ctx, key.slots)
        result, template = _record(self.ctx, run, key)
        self.templates[k] = template if template is not None else _REFUSED
        STATS["misses" if template is not None else "refused"] += 1
        return result


_CONST, _SLOT, _MADE, _OTHER = range(4)


class _Template:
    def __init__(self, steps, result):
        # per step: op, its arguments as (name, kind, what: the constant, the slot or result
        # index, or for _OTHER the _maker of the template value), [(shape, dtype, device)],
        # location, widened, [(is_view, the _maker of its base or None)]
        self.steps = [(op, [(name, kind, _maker(what) if kind == _OTHER else what)
                            for name, kind, what in ((name, *_kind(v)) for name, v in args.items())],
                       metas, location, widened, [(is_view, base if base is None else _maker(base))
                                                  for is_view, base in views])
                      for op, args, metas, location, widened, views in steps]
        self.result = _maker(result)  # the rule's result (its proxies ("e", slot) / ("i", index))

    def replay(self, ctx, slots):
        made, made_refs, slot_refs = [], [], {}
        symbols = ctx.symbols
        for op, args, metas, location, widened, views in self.steps:
            values, refs = {}, {}
            for name, kind, what in args:
                if kind == _MADE:
                    values[name], refs[name] = made[what], made_refs[what]
                elif kind == _SLOT:
                    values[name] = p = slots[what]
                    r = slot_refs.get(what)
                    refs[name] = r if r is not None else slot_refs.setdefault(what, tracing.ref(p))
                elif kind == _CONST:
                    values[name] = refs[name] = what
                else:
                    values[name] = v = what(slots, made)
                    refs[name] = to_refs(v)
            outs = []
            for shape, dtype, device in metas:
                o = TensorProxy(shape, dtype, device, name=ctx.new_name())
                outs.append(o)
                made_refs.append(Ref(o.name, shape, dtype, device))
            for i, (o, (is_view, base)) in enumerate(zip(outs, views)):
                if is_view:  # (as record_op links a view to its base)
                    o.is_view = True
                    if base is not None:
                        o.base, o.recipe = base(slots, made), (op, dict(values), i)
                        o.base.views.append(o)
            symbols.append(BoundSymbol(op, refs, made_refs[len(made):], location, widened))
            made.extend(outs)
        return self.result(slots, made)


def _maker(v):
    """A function (slots, made) -> the value v stands for in a template (see _abstract): its
    proxies the arguments' (("e", slot)) and the results made (("i", index)), its lists tuples."""
    if _is_ref(v):
        k = v[1]
        return (lambda slots, made: slots[k]) if v[0] == "e" else (lambda slots, made: made[k])
    if isinstance(v, list):  # (a tuple of the rule: a list in the template)
        parts = [_maker(x) for x in v]
        return lambda slots, made: tuple(p(slots, made) for p in parts)
    if isinstance(v, dict):
        items = [(name, _maker(x)) for name, x in v.items()]
        return lambda slots, made: {name: p(slots, made) for name, p in items}
    constant = v[1]  # ("c", constant)
    return lambda slots, made: constant


def _is_ref(v):
    """Whether v is a template's proxy: ("e", an argument's slot) or ("i", a result's index)."""
    return isinstance(v, tuple) and len(v) == 2 and v[0] in ("e", "i") and type(v[1]) is int


def _kind(v):
    """(kind, what) of a template's argument value (see _Template.steps)."""
    if _is_ref(v):
        return (_SLOT if v[0] == "e" else _MADE), v[1]
    if isinstance(v, tuple) and v[0] == "c" and not isinstance(v[1], tuple):
        return _CONST, v[1]  # (a tuple: to_refs reads its items)
    return _OTHER, v


def _record(ctx, run, key):
    """(run()'s result, its template or None where a replay could differ from running it)."""
    start, counter, used, numbers = len(ctx.symbols), ctx._counter, len(ctx._used), ctx._numbers
    names = [p.name for p in key.slots]
    recorded = []
    ctx.on_record = lambda o, values, outs: recorded.append((values, outs))
    try:
        result = run()
    finally:
        ctx.on_record = None
    new = ctx.symbols[start:]
    out_names = [o.name for b in new for o in b.outputs]
    if (len(recorded) != len(new) or ctx._numbers != numbers or names != [p.name for p in key.slots]
            or out_names != [f"{ctx._prefix}{i}" for i in range(counter, ctx._counter)]
            or len(ctx._used) - used != len(out_names)):
        return result, None
    index = {}  # id of a result proxy -> ("i", its index among the template's results)
    for (values, outs), b in zip(recorded, new):
        if values.get("inplace") is True or b.op.name.endswith("_") or len(outs) != len(b.outputs) or any(
                not isinstance(o, TensorProxy) or o.name != r.name or not _plain_proxy(o)
                for o, r in zip(outs, b.outputs)):
            return result, None
        for o in outs:
            index[id(o)] = ("i", len(index))
    steps = []
    for (values, outs), b in zip(recorded, new):
        args = {}
        for name, v in values.items():
            args[name] = _abstract(v, index, key)
            if args[name] is None:
                return result, None
        views = []
        for o in outs:
            base = None
            if o.base is not None:
                base = index.get(id(o.base)) or _slot(o.base, key)
                if base is None:
                    return result, None
            views.append((o.is_view, base))
        if [to_refs(v) for v in values.values()] != list(b.args.values()):
            return result, None
        steps.append((b.op, args, [(r.shape, r.dtype, r.device) for r in b.outputs], b.location, b.widened, views))
    abstract = _abstract(result, index, key)
    if abstract is None:
        return result, None
    return result, _Template(steps, abstract)


def _plain_proxy(o):
    """o has nothing a replay's new proxy lacks (its views, taken by later ops of the template, are replayed)."""
    return not (o.requires_grad or o.is_input or o.meta is not None or o.inference or o.no_grad_view
                or o.is_parameter or o.stride_deps or o.input_name is not None)


def _slot(p, key):
    """("e", slot) of an argument proxy (the very object), None for another."""
    return ("e", key.first[p.name]) if any(s is p for s in key.slots) else None


def _abstract(v, index, key):
    """v with proxies as ("e", slot) / ("i", index), tuples as lists, constants as ("c", v); None
    where a proxy is neither an argument nor a result of the template, or v is something else."""
    if isinstance(v, TensorProxy):
        return index.get(id(v)) or _slot(v, key)
    if isinstance(v, tuple):
        parts = [_abstract(x, index, key) for x in v]
        return None if any(x is None for x in parts) else parts
    if isinstance(v, dict):
        parts = {k: _abstract(x, index, key) for k, x in v.items()}
        return None if any(x is None for x in parts.values()) else parts
    if isinstance(v, (*_PLAIN, slice)):  # (a slice: a rule's argument, read by no op here)
        return ("c", v)
    return None
