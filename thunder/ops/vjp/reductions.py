"""The VJP rules of the ops of thunder/ops/reductions.py (registered on them with OpDef.vjp)."""
import math

from thunder.core import symbols
from thunder.ops import prims, vjp_utils as _vjp
from thunder.ops.decomp_utils import reduction_dims
from thunder.ops.elementwise import div, eq, exp, isnan, mul, sub, where
from thunder.ops.indexing import scatter_add
from thunder.ops.reductions import (amax, amin, cumsum, logsumexp, max_, mean, min_, prod, sort, std, sum_, topk,
                                    var)
from thunder.ops.repeat_pad import flip
from thunder.ops.shape import unsqueeze
from thunder.ops.vjp.prims import prod_grad

# VJP rules (g: the result's cotangent, out: the result)


@sum_.vjp
def _(g, out, input, dim=None, keepdim=False, *, dtype=None):
    return {"input": _vjp.grad_for(input, _vjp.unreduce(g, input, dim, keepdim))}


@prod.vjp
def _(g, out, input, dim=None, keepdim=False, *, dtype=None):
    # torch tells a whole-tensor product from one over dims (vjp/prims.py prod_grad)
    if input.ndim == 0:
        return {"input": _vjp.grad_for(input, g)}
    x = _vjp.convert(input, out.dtype)
    gx = prod_grad(_vjp.unreduce(g, input, dim, keepdim), _vjp.unreduce(out, input, dim, keepdim), x,
                         reduction_dims(dim, input.ndim), whole=dim is None)
    return {"input": _vjp.grad_for(input, gx)}


@mean.vjp
def _(g, out, input, dim=None, keepdim=False, *, dtype=None):
    n = _vjp.reduction_count(input, dim)
    return {"input": _vjp.grad_for(input, div(_vjp.unreduce(g, input, dim, keepdim), symbols.to_float(n)))}


def _var_std_vjp(is_std):
    def rule(g, out, input, dim=None, unbiased=True, keepdim=False, *, correction=None):
        c = int(unbiased) if correction is None else correction
        n = _vjp.reduction_count(input, dim)
        dims = reduction_dims(dim, input.ndim)
        if is_std:  # d std = d var / (2 std), zero where std is zero (as torch)
            g = where(eq(out, 0), 0.0, div(g, mul(out, 2.0)))
        centered = sub(input, mean(input, dims, True)) if dims else sub(input, input)
        scale = 2.0 / (n - c) if n - c > 0 else math.inf
        return {"input": _vjp.grad_for(input, mul(mul(_vjp.unreduce(g, input, dim, keepdim), centered), scale))}

    return rule


var.vjp(_var_std_vjp(False))


std.vjp(_var_std_vjp(True))


def _extremum_vjp(g, out, input, dim=(), keepdim=False):
    """amax/amin: the cotangent is shared evenly by the elements equal to the extremum (as torch)."""
    dims = reduction_dims(dim, input.ndim)
    if not dims:  # (a 0-d input: g where it equals itself, nan for nan (0 / 0), as torch)
        mask = _vjp.convert(eq(input, out), g.dtype)
        return {"input": _vjp.grad_for(input, div(mul(g, mask), mask))}
    mask = _vjp.convert(eq(input, _vjp.unreduce(out, input, dim, keepdim)), g.dtype)
    count = sum_(mask, dims, True)
    return {"input": _vjp.grad_for(input, div(mul(_vjp.unreduce(g, input, dim, keepdim), mask), count))}


amax.vjp(_extremum_vjp)


@logsumexp.vjp
def _(g, out, input, dim, keepdim=False):
    """g * softmax(input), as torch: g * exp(input - out), from the saved result (one elementwise
    pass over input, no second reduction)."""
    gx = mul(_vjp.unreduce(g, input, dim, keepdim), exp(sub(input, _vjp.unreduce(out, input, dim, keepdim))))
    return {"input": _vjp.grad_for(input, gx)}


amin.vjp(_extremum_vjp)


def _to_indices(g, out, input, dim, keepdim=True):
    """The cotangent g of values picked from input along dim at the indices out[1], sent back to
    those elements (zeros elsewhere)."""
    gv, idx = g[0], out[1]
    if gv is None or not _vjp.differentiable(input):
        return {"input": None}
    if input.ndim == 0:
        return {"input": _vjp.grad_for(input, gv)}

    if not keepdim:
        gv, idx = unsqueeze(gv, dim), unsqueeze(idx, dim)
    return {"input": _vjp.grad_for(input, scatter_add(_vjp.zeros_like(input, gv.dtype), dim, idx, gv))}


def _max_min_vjp(g, out, input, dim=None, keepdim=False):
    """max/min, as torch: a full reduction shares g evenly among the elements equal to the result
    (the NaNs when it is NaN); with dim, g goes to the element at the returned index only (one
    element per row even with ties)."""
    if dim is not None:
        return _to_indices(g, out, input, dim, keepdim)
    gv = g[0]
    if gv is None or not _vjp.differentiable(input):
        return {"input": None}
    value = out[0]
    mask = where(isnan(value), isnan(input), eq(input, value))
    count = sum_(_vjp.convert(mask, gv.dtype))
    return {"input": _vjp.grad_for(input, where(mask, div(gv, count), 0.0))}


max_.vjp(_max_min_vjp)


min_.vjp(_max_min_vjp)


@cumsum.vjp
def _(g, out, input, dim, *, dtype=None):
    """Running sums from the end (as torch: flip, cumsum, flip)."""
    if not _vjp.differentiable(input):
        return {"input": None}
    if input.ndim == 0:
        return {"input": _vjp.grad_for(input, g)}

    return {"input": _vjp.grad_for(input, flip(cumsum(flip(g, (dim,)), dim), (dim,)))}


topk.vjp(lambda g, out, input, k, dim=-1, largest=True, sorted=True: _to_indices(g, out, input, dim))


sort.vjp(lambda g, out, input, dim=-1, descending=False, *, stable=False: _to_indices(g, out, input, dim))
