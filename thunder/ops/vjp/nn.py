"""The VJP rules of the ops of thunder/ops/nn.py (registered on them with OpDef.vjp)."""
import math

from thunder.ops import prims, vjp_utils as _vjp
from thunder.ops.elementwise import (abs_, add, clamp_min, div, eq, exp, ge, mul, ne, neg, pow_, sign, sqrt, sub,
                                     where)
from thunder.ops.meta_utils import broadcast_shapes, canonical_dim
from thunder.ops.nn import (addmm, baddbmm, bmm, embedding, layer_norm, layer_norm_backward, linear, log_softmax,
                            matmul, mm, native_layer_norm, native_layer_norm_backward, normalize, rmatmul, softmax)
from thunder.ops.reductions import amax, amin, sum_
from thunder.ops.shape import reshape, unsqueeze


def _matmul_vjp(g, a, b):
    """Cotangents (of a, of b) of torch.matmul(a, b), with torch's 1-D and batch-broadcasting
    rules; None for a side that is not differentiable."""
    a2 = a if a.ndim > 1 else reshape(a, (1, a.shape[0]))
    b2 = b if b.ndim > 1 else reshape(b, (b.shape[0], 1))
    batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    g2 = reshape(g, (*batch, m, n)) if tuple(g.shape) != (*batch, m, n) else g
    ga = gb = None
    if _vjp.differentiable(a):
        if b2.ndim == 2 and batch:  # (..., m, k) @ (k, n): one matmul with b's transpose
            ga = matmul(g2, _vjp.mT(b2))
        else:
            ga = _vjp.sum_to_shape(matmul(g2, _vjp.mT(b2)), a2.shape)
        ga = _vjp.convert(reshape(ga, tuple(a.shape)) if tuple(ga.shape) != tuple(a.shape) else ga, a.dtype)
    if _vjp.differentiable(b):
        if b2.ndim == 2 and a2.ndim > 2:  # fold a's batch dims into its rows: one 2-D matmul
            gb = matmul(_vjp.mT(_vjp.rows(a2, k)), _vjp.rows(g2, n))
        else:
            gb = _vjp.sum_to_shape(matmul(_vjp.mT(a2), g2), b2.shape)
        gb = _vjp.convert(reshape(gb, tuple(b.shape)) if tuple(gb.shape) != tuple(b.shape) else gb, b.dtype)
    return ga, gb


@matmul.vjp
def _(g, out, input, other):
    gi, go = _matmul_vjp(g, input, other)
    return {"input": gi, "other": go}


@rmatmul.vjp
def _(g, out, input, other):  # other @ input
    go, gi = _matmul_vjp(g, other, input)
    return {"input": gi, "other": go}


@mm.vjp
def _(g, out, input, mat2):
    return {"input": mm(g, _vjp.mT(mat2)), "mat2": mm(_vjp.mT(input), g)}


@bmm.vjp
def _(g, out, input, mat2):
    return {"input": bmm(g, _vjp.mT(mat2)), "mat2": bmm(_vjp.mT(input), g)}


def _addmm_vjp(product):
    def rule(g, out, input, a, b, beta=1, alpha=1):
        ga = product(g, _vjp.mT(b)) if _vjp.differentiable(a) else None
        gb = product(_vjp.mT(a), g) if _vjp.differentiable(b) else None
        if alpha != 1:
            ga, gb = (mul(x, alpha) if x is not None else None for x in (ga, gb))
        gi = None
        if _vjp.differentiable(input):
            gi = _vjp.grad_for(input, g if beta == 1 else mul(g, beta))
        return gi, ga, gb

    return rule


@addmm.vjp
def _(g, out, input, mat1, mat2, *, beta=1, alpha=1):
    gi, g1, g2 = _addmm_vjp(mm)(g, out, input, mat1, mat2, beta, alpha)
    return {"input": gi, "mat1": g1, "mat2": g2}


@baddbmm.vjp
def _(g, out, input, batch1, batch2, *, beta=1, alpha=1):
    gi, g1, g2 = _addmm_vjp(bmm)(g, out, input, batch1, batch2, beta, alpha)
    return {"input": gi, "batch1": g1, "batch2": g2}


@linear.vjp
def _(g, out, input, weight, bias=None):
    k = input.shape[-1]
    mm_shape = (*input.shape[:-1], *weight.shape[:weight.ndim - 1])
    gm = _vjp.sum_to_shape(g, mm_shape)  # a bias can broadcast the result beyond input @ weight.T
    gi = gw = None
    if weight.ndim == 2:
        n = weight.shape[0]
        if _vjp.differentiable(input):
            gi = matmul(gm, weight)
        if _vjp.differentiable(weight):  # fold the batch dims: (n, rows) @ (rows, k)
            gw = matmul(_vjp.mT(_vjp.rows(gm, n)), _vjp.rows(input, k))
    else:
        if _vjp.differentiable(input):
            gi = mul(unsqueeze(gm, -1), weight)
        if _vjp.differentiable(weight):
            gw = reshape(matmul(reshape(gm, (1, gm.numel())), _vjp.rows(input, k)), (k,))
    return {"input": _vjp.grad_for(input, gi), "weight": _vjp.grad_for(weight, gw),
            "bias": _vjp.grad_for(bias, g)}


def _softmax_vjp(log):
    def rule(g, out, input, dim, dtype=None, *, _stacklevel=3):
        d = canonical_dim(dim, input.ndim)
        g32, o = _vjp.upcast(g), _vjp.upcast(out)
        if log:  # g - exp(out) * sum(g)
            gx = sub(g32, mul(exp(o), sum_(g32, d, True)))
        else:  # out * (g - sum(g * out))
            gx = mul(o, sub(g32, sum_(mul(g32, o), d, True)))
        return {"input": _vjp.grad_for(input, gx)}

    return rule


softmax.vjp(_softmax_vjp(False))


log_softmax.vjp(_softmax_vjp(True))


@native_layer_norm.vjp
def _(g, out, input, normalized_shape, weight, bias, eps):
    if any(x is not None for x in g[1:]):
        raise NotImplementedError("thunder: the mean and rstd of native_layer_norm are not differentiable")
    gx, gw, gb = native_layer_norm_backward(g[0], input, normalized_shape, out[1], out[2], weight, bias)
    return {"input": gx, "weight": gw if weight is not None else None, "bias": gb if bias is not None else None}


@layer_norm.vjp
def _(g, out, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    gx, gw, gb = layer_norm_backward(g, input, normalized_shape, weight, bias, eps)
    return {"input": gx, "weight": gw if weight is not None else None, "bias": gb if bias is not None else None}


@embedding.vjp
def _(g, out, input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
      sparse=False):
    """A dense gradient: the rows of g added at their indices; none for padding_idx; divided by
    the index's count with scale_grad_by_freq. (sparse=True of a weight that requires grad is
    recorded as torch's call, whose gradient is sparse: ops/nn.py embedding.)"""
    num, dim = weight.shape
    idx = reshape(input, (input.numel(),))
    rows = reshape(g, (input.numel(), dim))
    if padding_idx is not None:
        rows = where(unsqueeze(ne(idx, padding_idx % num), -1), rows, 0.0)
    if scale_grad_by_freq:
        ones = prims.full((input.numel(),), 1.0, dtype=g.dtype, device=g.device)
        counts = prims.index_add(_vjp.zeros((num,), g.dtype, g.device), 0, idx, ones)
        rows = div(rows, unsqueeze(prims.take(counts, 0, idx), -1))
    return {"weight": _vjp.grad_for(weight, prims.zeros_index_add(tuple(weight.shape), 0, idx, rows))}


@normalize.vjp
def _(g, out, input, p=2.0, dim=1, eps=1e-12):
    """As eager's composite input / norm(input).clamp_min(eps): the division's rule, clamp_min's
    (no gradient to the norm below eps) and the norm's (zero where the norm is 0)."""
    if not _vjp.differentiable(input):
        return {"input": None}
    d = canonical_dim(dim, input.ndim) if input.ndim else None  # a 0-d input is its own norm's vector
    x, g32 = _vjp.upcast(input), _vjp.upcast(g)
    a = abs_(x)

    def over_dim(v, reduce=sum_):
        return reduce(v, d, True) if d is not None else v

    if p == 2:
        norm = sqrt(over_dim(mul(x, x)))
    elif p == 1:
        norm = over_dim(a)
    elif p in (math.inf, -math.inf):
        norm = over_dim(a, amax if p > 0 else amin)
    elif p == 0:
        norm = over_dim(_vjp.convert(ne(x, 0.0), x.dtype))
    else:
        norm = pow_(over_dim(pow_(a, float(p))), 1.0 / p)
    norm = _vjp.upcast(_vjp.convert(norm, input.dtype))  # eager's norm has input's dtype
    denom = clamp_min(norm, eps)
    gx = div(g32, denom)
    gnorm = where(ge(norm, eps), neg(over_dim(div(mul(g32, x), mul(denom, denom)))), 0.0)
    if p == 2:
        gx = add(gx, where(eq(norm, 0.0), 0.0, mul(x, div(gnorm, norm))))
    elif p == 1:
        gx = add(gx, mul(sign(x), gnorm))
    elif p in (math.inf, -math.inf):
        hit = _vjp.convert(eq(a, norm), x.dtype)
        gx = add(gx, div(mul(mul(sign(x), gnorm), hit), over_dim(hit)))
    elif p != 0:
        scale = where(eq(norm, 0.0), 0.0, div(gnorm, pow_(norm, float(p - 1))))
        gx = add(gx, mul(mul(x, pow_(a, float(p - 2))), scale))
    return {"input": _vjp.grad_for(input, gx)}
