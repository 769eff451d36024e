"""torch.vmap as batched ops: the function is interpreted once, on the first example, and the ops
it recorded are recorded again on the whole batch (the batch dim first) by a batching rule per
kind of op, so the trace holds one copy of the body whatever the batch size.

Rules: elementwise ops (batched operands get singleton dims after the batch dim up to the
result's rank, so they broadcast as the examples did), matmul (1-d batched operands made
matrices, operands padded to a common rank), reductions and softmax-like ops along dims (shifted
by one; "all dims" spelled out), linear and layer_norm on a batched input, *_like, to, clone,
shape ops (reshape/view, expand, squeeze/unsqueeze, transpose/permute/t, flatten), and any op
whose operands are all unbatched (recorded as it was). A rule's result must have the example's
shape after the batch dim, else the body is unrolled.

Where an op has no rule, the body draws random numbers, writes into a tensor (an in-place update
rebinds a value) or returns something other than tensors, batch() answers None and vmap unrolls
(torch_func.py): the first example's trace is kept and the others are interpreted. Nested vmaps
batch from the inside out (an enclosing recording is told which ops the inner batching replaced)."""
from thunder.core.proxies import TensorProxy
from thunder.ops import prims
from thunder.ops.record import record_op
from thunder.ops.registry import OPS


class _Unbatchable(Exception):
    pass


class Recording:
    """The ops recorded while it is installed on the trace (ctx.on_record), with the names their
    tensor values had then (an in-place update later renames a proxy: then no batching)."""

    def __init__(self, ctx):
        self.ctx, self.calls, self.start = ctx, [], len(ctx.symbols)

    def __enter__(self):
        self.previous = self.ctx.on_record
        self.ctx.on_record = self._record
        return self

    def __exit__(self, *exc):
        self.ctx.on_record = self.previous

    def _record(self, op, values, outs):
        if self.previous is not None:
            self.previous(op, values, outs)
        named = {id(p): p.name for v in values.values() for p in (v if isinstance(v, tuple) else (v,))
                 if isinstance(p, TensorProxy)}
        self.calls.append((op, dict(values), named, [(o, getattr(o, "name", None), getattr(o, "shape", None))
                                                     for o in outs]))


def _op(name, *args, **kwargs):
    return OPS[f"ltorch.{name}"](*args, **kwargs)


def _pad(p, rank):
    """A batched proxy (batch dim first) with singleton dims after the batch dim, to rank + 1."""
    n = rank + 1 - p.ndim
    return p if n <= 0 else _op("reshape", p, (p.shape[0], *([1] * n), *p.shape[1:]))


def _shift(dims, rank):
    """Per-example reduction dims as dims of the batched tensor (None and (): all of them)."""
    if dims is None or dims == ():
        if rank == 0:
            raise _Unbatchable("a reduction of a 0-d example")
        return tuple(range(1, rank + 1))
    if isinstance(dims, int):
        return dims + 1 if dims >= 0 else dims
    return tuple(d + 1 if d >= 0 else d for d in dims)


def _elementwise(op, values, batched, out_shapes):
    rank = len(out_shapes[0])
    return record_op(op, {k: _pad(v, rank) if k in batched else v for k, v in values.items()})


def _matmul(op, values, batched, out_shapes):
    a, b = values["input"], values["other"]
    ra, rb = a.ndim - ("input" in batched), b.ndim - ("other" in batched)
    col = row = False  # (a batched vector made a matrix: its dim squeezed out after)
    if "other" in batched and rb == 1:
        b, rb, col = _op("unsqueeze", b, -1), 2, True
    if "input" in batched and ra == 1 and rb >= 2:
        a, ra, row = _op("unsqueeze", a, 1), 2, True
    rank = max(ra, rb)
    out = record_op(op, {"input": _pad(a, rank) if "input" in batched else a,
                         "other": _pad(b, rank) if "other" in batched else b})
    if col:
        out = _op("squeeze", out, -1)
    if row:
        out = _op("squeeze", out, -1 if col else -2)
    return out


def _along(*params):
    """A rule for ops acting along dims given by params of a batched `input`."""
    def rule(op, values, batched, out_shapes):
        if batched != {"input"}:
            raise _Unbatchable(op.qualname)
        rank = values["input"].ndim - 1
        return record_op(op, {k: _shift(v, rank) if k in params else v for k, v in values.items()})
    return rule


def _as_is(op, values, batched, out_shapes):
    """Ops on the trailing dims of a batched `input` only (linear, layer_norm), or on its elements
    whatever its shape (ones_like, to, clone): called as they were."""
    if batched != {"input"}:
        raise _Unbatchable(op.qualname)
    return record_op(op, values)


def _expand(op, values, batched, out_shapes):
    x, size = values["input"], tuple(values["size"])
    return record_op(op, {**values, "input": _pad(x, len(size)), "size": (x.shape[0], *size)})


def _squeeze(op, values, batched, out_shapes):
    x, dim = values["input"], values["dim"]
    if dim is None:  # (all size-1 dims of the example, not the batch dim)
        dim = tuple(i for i, n in enumerate(x.shape[1:]) if n == 1)
    return record_op(op, {**values, "dim": _shift(dim, x.ndim - 1) if dim != () else ()})


def _permute(op, values, batched, out_shapes):
    rank = values["input"].ndim - 1
    return record_op(op, {**values, "dims": (0, *(d % rank + 1 for d in values["dims"]))})


def _t(op, values, batched, out_shapes):
    x = values["input"]
    return _op("transpose", x, 1, 2) if x.ndim == 3 else x


def _reshape(op, values, batched, out_shapes):
    return record_op(op, {**values, "shape": (values["input"].shape[0], *values["shape"])})


def _getitem(op, values, batched, out_shapes):
    key = values["key"]
    return record_op(op, {**values, "key": (slice(None), *(key if isinstance(key, tuple) else (key,)))})


# ops whose result depends on a batched input's dtype and device only: one result for the batch
_SHARED = ("ltorch.new_zeros", "ltorch.new_ones", "ltorch.new_empty", "ltorch.new_full")

_RULES = {
    "ltorch.matmul": _matmul,
    "ltorch.sum": _along("dim"), "ltorch.mean": _along("dim"), "ltorch.amax": _along("dim"),
    "ltorch.amin": _along("dim"), "ltorch.var": _along("dim"), "ltorch.std": _along("dim"),
    "ltorch.softmax": _along("dim"), "ltorch.log_softmax": _along("dim"),
    "ltorch.transpose": _along("dim0", "dim1"),
    "ltorch.flatten": _along("start_dim", "end_dim"),
    **{f"ltorch.{n}": _as_is for n in ("linear", "layer_norm", "ones_like", "zeros_like", "full_like", "clone",
                                       "contiguous", "detach", "to")},
    "ltorch.reshape": _reshape, "ltorch.view": _reshape, "ltorch.expand": _expand, "ltorch.squeeze": _squeeze,
    "ltorch.permute": _permute, "ltorch.t": _t,
    "ltorch.unsqueeze": lambda op, values, batched, out_shapes: record_op(
        op, {**values, "dim": values["dim"] + 1 if values["dim"] >= 0 else values["dim"]}),
    "ltorch.getitem": _getitem,
    **{n: lambda op, values, batched, out_shapes: record_op(op, values) for n in _SHARED},
}




def _elementwise_prim(op, values, batched, out_shapes):
    """thunder's elementwise prims take operands of one shape: the unbatched ones are expanded."""
    def full(k, v):
        if k in batched or not isinstance(v, TensorProxy):
            return v
        size = next(values[b].shape[0] for b in batched)
        return _op("expand", _op("unsqueeze", v, 0), (size, *v.shape))
    return record_op(op, {k: full(k, v) for k, v in values.items()})


def _rule(op):
    if op.qualname in _RULES:
        return _RULES[op.qualname]
    if op.elementwise and not op.returns_sequence:
        return _elementwise
    if op.dialect == "thunder" and op.name in prims.ELEMENTWISE:
        return _elementwise_prim
    return None


def batch(recording, mark, examples, inputs, outputs, size):
    """The batched values (batch dim first) of the leaves `outputs` of the body recorded from the
    `examples` (proxies of the first example), given `inputs` ((batched argument, its batch dim),
    one per example); None where the body cannot be batched (the trace is left as it was).
    On success the ops recorded from `mark` (the examples' selects, then the body) are replaced
    by the batched ops."""
    ctx = recording.ctx
    if len(recording.calls) != len(ctx.symbols) - recording.start:
        return None  # (something recorded outside record_op: not seen here)
    body = ctx.symbols[mark:]
    # an enclosing vmap's recording (nested vmaps) sees the replaced ops go and the batched ones come
    parent = getattr(recording.previous, "__self__", None)
    parent = parent if isinstance(parent, Recording) else None
    seen = len(parent.calls) if parent is not None else 0
    del ctx.symbols[mark:]
    try:
        env = {e.name: (x if d == 0 else _op("movedim", x, d, 0), True) for e, (x, d) in zip(examples, inputs)}
        for op, values, named, outs in recording.calls:
            _record_batched(op, values, named, outs, env, size)
        results = []
        for o in outputs:
            if not isinstance(o, TensorProxy) or o.name not in env:
                raise _Unbatchable("a result that is not a tensor of the body")
            x, is_batched = env[o.name]
            results.append(x if is_batched else _op("expand", _op("unsqueeze", x, 0), (size, *x.shape)))
        if parent is not None:
            del parent.calls[mark - parent.start:mark - parent.start + len(body)]
        return results
    except _Unbatchable:
        del ctx.symbols[mark:]
        ctx.symbols += body
        if parent is not None:
            del parent.calls[seen:]
        return None


def _record_batched(op, values, named, outs, env, size):
    if op.random or op.effects:
        raise _Unbatchable(op.qualname)
    if any(not isinstance(o, TensorProxy) or o.name != name for o, name, _ in outs):
        raise _Unbatchable("a number result, or a value renamed by an in-place update")
    mapped, batched = {}, set()

    def value_of(p):
        name = named[id(p)]
        if name in env:
            x, b = env[name]
            return x, b
        if p.name != name:  # (an outer tensor updated in place since)
            raise _Unbatchable("an in-place update")
        return p, False

    for k, v in values.items():
        if isinstance(v, TensorProxy):
            mapped[k], b = value_of(v)
            if b:
                batched.add(k)
        elif isinstance(v, tuple) and any(isinstance(x, TensorProxy) for x in v):
            raise _Unbatchable("a tensor list")
        else:
            mapped[k] = v
    if not batched:
        result = record_op(op, mapped)
    else:
        rule = _rule(op)
        if rule is None:
            raise _Unbatchable(op.qualname)
        try:
            result = rule(op, mapped, batched, [s for _, _, s in outs])
        except _Unbatchable:
            raise
        except Exception as e:  # noqa: BLE001 - a case the rule does not cover (unrolling decides)
            raise _Unbatchable(op.qualname) from e
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(results) != len(outs):
        raise _Unbatchable(op.qualname)
    out_batched = bool(batched) and op.qualname not in _SHARED
    for r, (o, name, shape) in zip(results, outs):
        want = (size, *shape) if out_batched else tuple(shape)
        if not isinstance(r, TensorProxy) or tuple(r.shape) != want or r.dtype != o.dtype:
            raise _Unbatchable(op.qualname)
        env[name] = (r, out_batched)
