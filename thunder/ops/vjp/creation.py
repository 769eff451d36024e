"""The VJP rules of the ops of thunder/ops/creation.py (registered on them with OpDef.vjp)."""
from thunder.ops.creation import clone, to, to_bfloat16, to_double, to_float, to_half, type_
from thunder.ops.vjp_utils import differentiable as _differentiable

# VJP rules: a conversion's cotangent is converted back to the input's dtype (and device)


def _convert_back(g, out, input, *args, **kwargs):
    if not _differentiable(input):
        return {"input": None}
    if g.dtype == input.dtype and g.device == input.device:
        return {"input": g}
    return {"input": to(g, input.dtype, device=input.device if g.device != input.device else None)}


for _op in (to, type_, to_float, to_double, to_half, to_bfloat16):
    _op.vjp(_convert_back)


@clone.vjp
def _(g, out, input, *, memory_format=None):
    return {"input": g}
