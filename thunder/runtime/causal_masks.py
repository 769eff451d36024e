"""scaled_dot_product_attention with a constant causal mask runs as is_causal=True, as eager's.

Libraries decide from "am I being compiled?" whether they may read tensor values: transformers'
masking_utils, told yes (runtime/lookup.py answers torch.compiler.is_compiling() with True),
cannot check that the position ids hold no packed sequences, so it builds the causal mask as a
bool tensor (aranges, comparisons, indexing) and passes it to every attention call, where eager,
having read the values, passes no mask and is_causal=True (torch's fused causal kernel, no mask
to build or read).

Here, when the traced program calls scaled_dot_product_attention with a bool attn_mask and
is_causal=False, the mask's recorded computation is followed back: where it reads no input of
the call (no argument, parameter or buffer, no runtime number, no random draw, no write to
memory, no symbolic size), its value is the same on every call this program serves (the sizes
and the Python values it was built from are the program's constants, checked by its cache
entry), so it is computed once, now; where that value is exactly torch's is_causal mask (key
position <= query position, top-left aligned, for every batch and head), the call is recorded
with attn_mask=None, is_causal=True. Anything else (a padding mask from an argument, a mask of
runtime sizes, a sliding window) keeps the mask as traced: the value is proven, never assumed.
The ops that built an unused mask are dead code, which the passes remove.

Not where sizes are symbols, nor in the compiles a program for all sizes is fitted from
(runtime/generalize.py): a value computed at some sizes proves nothing at others (a sliding
window wider than the samples' sequences is causal at their sizes only), and the fitted
program must be traced alike at every size. A program for all sizes keeps the mask."""
import weakref

import torch

from thunder.core import symbols, trace as tracing
from thunder.core.numbers import NumberProxy
from thunder.core.proxies import TensorProxy
from thunder.core.pysource import Name
from thunder.lowering import fuse
from thunder.ops.execute import NAMESPACE
from thunder.runtime.codegen import op_statements

# trace context -> {mask proxy name: whether it is the causal mask} (a model builds one mask
# and passes it to every layer: one evaluation per trace)
_DECIDED = weakref.WeakKeyDictionary()


def sdpa(call, op, *args, **kwargs):
    """call(*args, **kwargs) (op: the sdpa registry entry), the mask replaced by is_causal=True
    where it is a constant causal mask."""
    try:
        bound = op.signature.bind(*args, **kwargs)
    except TypeError:
        return call(*args, **kwargs)  # (torch's error for the bad call, from the op)
    bound.apply_defaults()
    values = dict(bound.arguments)
    mask, query, key = values.get("attn_mask"), values.get("query"), values.get("key")
    if (isinstance(mask, TensorProxy) and mask.dtype is torch.bool and values.get("is_causal") is False
            and isinstance(query, TensorProxy) and isinstance(key, TensorProxy)
            and is_constant_causal(mask, query.shape[-2], key.shape[-2])):
        values["attn_mask"], values["is_causal"] = None, True
        return call(**values)
    return call(*args, **kwargs)


def is_constant_causal(mask, L, S):
    """Whether the traced bool tensor mask is, on every call of the program, torch's is_causal
    mask for L queries and S keys broadcast to its shape."""
    ctx = tracing.current()
    if ctx is None or ctx.sym_shapes or fuse.fitting_sizes() or not all(_plain_int(n) for n in (L, S, *mask.shape)):
        return False
    if mask.ndim < 2 or tuple(mask.shape[-2:]) != (L, S):
        return False
    decided = _DECIDED.setdefault(ctx, {})
    if mask.name not in decided:
        value = _constant_value(ctx, mask.name)
        decided[mask.name] = (value is not None and value.dtype is torch.bool and tuple(value.shape) == tuple(mask.shape)
                              and torch.equal(value, torch.ones(L, S, dtype=torch.bool, device=value.device).tril()
                                              .expand(value.shape)))
    return decided[mask.name]


def _plain_int(n):
    return isinstance(n, int) and not symbols.is_symbolic(n)


def _constant_value(ctx, name):
    """The value of the recorded tensor `name` where its computation reads nothing that may
    change between calls; None where it does."""
    producers = {}
    for i, bsym in enumerate(ctx.symbols):
        for o in bsym.outputs:
            producers[o.name] = i
    needed, pending = set(), [name]
    while pending:
        i = producers.get(pending.pop())
        if i is None:
            return None  # an input of the program (argument, parameter, buffer, runtime number)
        if i in needed:
            continue
        bsym = ctx.symbols[i]
        if bsym.op.random or bsym.op.effects:
            return None
        for v in bsym.args.values():
            names = _reads(v)
            if names is None:
                return None
            pending += names
        needed.add(i)
    lines = []
    for i in sorted(needed):  # (in the order recorded)
        bsym = ctx.symbols[i]
        lines += op_statements(bsym.op, {k: _named(v) for k, v in bsym.args.items()},
                               [_var(o.name) for o in bsym.outputs])
    scope = dict(NAMESPACE)
    try:
        with tracing.not_tracing(), torch.no_grad(), torch.autocast("cpu", enabled=False):
            exec(compile("\n".join(lines) + "\n", "<thunder: a constant attention mask>", "exec"), scope)
    except Exception:  # (an optimization: a mask that cannot be computed here stays, as traced)
        return None
    value = scope[_var(name)]
    return value if isinstance(value, torch.Tensor) else None


def _reads(v):
    """The names of the recorded values an argument reads, None where it holds something whose
    value is not a constant of the program (a runtime number or a symbolic size not recorded as
    a Ref)."""
    if isinstance(v, tracing.Ref):
        return [v.name]
    if isinstance(v, (tuple, list)):
        names = []
        for x in v:
            inner = _reads(x)
            if inner is None:
                return None
            names += inner
        return names
    if isinstance(v, dict):
        return _reads(tuple(v.values()))
    if isinstance(v, (TensorProxy, NumberProxy)) or symbols.is_symbolic(v):
        return None
    return []


def _var(name):
    return f"v_{name}"


def _named(v):
    if isinstance(v, tracing.Ref):
        return Name(_var(v.name), v.shape, v.dtype, v.device)
    if isinstance(v, tuple):
        return tuple(_named(x) for x in v)
    return v
