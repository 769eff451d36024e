"""The VJP rules of the ops of thunder/ops/prims.py (registered on them with OpDef.vjp)."""
import math

import torch

from thunder.ops.elementwise import _div_floor  # (floor division built from prims)
from thunder.ops.layers import conv_grads
from thunder.ops.meta_utils import canonical_dims, is_tensor
from thunder.ops.vjp import complex_numbers
from thunder.ops.prims import (abs, adaptive_avg_pool2d, adaptive_avg_pool2d_backward, add, amax, amin, atan2,
                               avg_pool2d, avg_pool2d_backward, bitwise_and, broadcast_in_dim, cat, ceil,
                               convert_element_type, convolution, cos, div, eq, erf, exp, expm1, floor, full, ge, gt,
                               index_add, log, log10, log1p, log2, lt, matmul, max_pool2d_backward, max_pool2d_with_indices,
                               maximum, minimum, mul, neg, pow, prod, reciprocal, remainder, reshape, round, rsqrt,
                               sign, sin, slice, sqrt, sub, sum, take, tanh, transpose, trunc, unslice, where,
                               zeros_index_add)

# VJP rules: g is the output's cotangent, out the output; each returns {param: cotangent}.


def _zeros_like(t):
    return full(tuple(t.shape), 0.0 if t.dtype.is_floating_point else 0, dtype=t.dtype, device=t.device)


def _num(x, like):
    """A Python number in like's dtype category (prims take numbers beside tensors)."""
    return float(x) if like.dtype.is_floating_point or like.dtype.is_complex else x


def _unary_vjp(op, rule):
    op.vjp(lambda g, out, a: {"a": rule(g, out, a)})


_unary_vjp(abs, lambda g, out, a: mul(g, complex_numbers.sgn(a) if a.dtype.is_complex else sign(a)))


_unary_vjp(neg, lambda g, out, a: neg(g))


_unary_vjp(exp, lambda g, out, a: mul(g, out))


_unary_vjp(expm1, lambda g, out, a: mul(g, add(out, _num(1, out))))


_unary_vjp(log, lambda g, out, a: div(g, a))


_unary_vjp(log1p, lambda g, out, a: div(g, add(a, _num(1, a))))
_unary_vjp(log2, lambda g, out, a: div(g, mul(a, _num(math.log(2), a))))
_unary_vjp(log10, lambda g, out, a: div(g, mul(a, _num(math.log(10), a))))


_unary_vjp(sqrt, lambda g, out, a: div(g, mul(out, _num(2, out))))


# -0.5 * out**3 (as torch), not out / a: a division by the input is -inf instead of inf at -0.
_unary_vjp(rsqrt, lambda g, out, a: mul(g, mul(mul(mul(out, out), out), _num(-0.5, out))))


_unary_vjp(sin, lambda g, out, a: mul(g, cos(a)))


_unary_vjp(cos, lambda g, out, a: neg(mul(g, sin(a))))


_unary_vjp(tanh, lambda g, out, a: mul(g, sub(_num(1, out), mul(out, out))))


_unary_vjp(erf, lambda g, out, a: mul(g, mul(exp(neg(mul(a, a))), 1.1283791670955126)))


_unary_vjp(reciprocal, lambda g, out, a: neg(mul(g, mul(out, out))))


for _op in (floor, ceil, round, trunc, sign):
    _unary_vjp(_op, lambda g, out, a: _zeros_like(a))


def _binary_vjp(op, rule):
    def vjp(g, out, a, b):
        ga, gb = rule(g, out, a, b)
        return {"a": ga if is_tensor(a) else None, "b": gb if is_tensor(b) else None}

    op.vjp(vjp)


def _split_ties(g, a, b, a_loses, b_loses):
    # as torch: half the gradient to each side where the inputs are equal, none to the side that
    # loses, all of it to both where they are unordered (a NaN, which the result propagates)
    full = where(eq(a, b), mul(g, 0.5), g)
    return where(a_loses, _num(0, g), full), where(b_loses, _num(0, g), full)


def _pow_vjp(g, out, a, b):
    """Cotangents of a ** b, as torch's pow_backward_self / pow_backward_exponent: no gradient
    to the base where the exponent is 0, none to the exponent where the base is 0 and the exponent
    >= 0 (where out * log(a) would be 0 * -inf)."""
    ga = gb = None
    if is_tensor(a):
        if is_tensor(b):
            d = mul(b, pow(a, sub(b, _num(1, out))))
            ga = where(eq(b, _num(0, b)), _num(0, out), mul(g, d))
        elif b == 0:
            ga = _zeros_like(g)
        else:
            ga = mul(g, mul(pow(a, _num(b - 1, out)), _num(b, out)))
    if is_tensor(b):
        if is_tensor(a):
            base_zero = bitwise_and(eq(a, _num(0, a)), ge(b, _num(0, b)))
            gb = where(base_zero, _num(0, out), mul(g, mul(out, log(a))))
        else:
            log_a = math.log(a) if a > 0 else (-math.inf if a == 0 else math.nan)
            gb = mul(g, mul(out, log_a))
            if a == 0:
                gb = where(ge(b, _num(0, b)), _num(0, out), gb)
    return ga, gb


def _atan2_vjp(g, out, a, b):
    """As torch: 1 / (a^2 + b^2) taken as 0 where it is infinite (at the origin), so the
    gradient there is 0, not NaN."""
    d = add(mul(a, a), mul(b, b))
    r = where(eq(d, _num(0, d)), _num(0, d), reciprocal(d))
    return mul(mul(g, b), r), neg(mul(mul(g, a), r))


_binary_vjp(add, lambda g, out, a, b: (g, g))


_binary_vjp(sub, lambda g, out, a, b: (g, neg(g)))


_binary_vjp(mul, lambda g, out, a, b: (mul(g, b), mul(g, a)))


_binary_vjp(div, lambda g, out, a, b: (div(g, b), neg(mul(g, div(out, b)))))  # as torch: out / b first


_binary_vjp(pow, _pow_vjp)


def _remainder_vjp(g, out, a, b):
    """As torch: (g, -g * a.div(b, rounding_mode="floor")), torch's floor division (NaN for an
    infinite a, where floor(a / b) would be +-inf)."""
    return g, (neg(mul(g, _div_floor(a, b))) if is_tensor(b) else None)


_binary_vjp(remainder, _remainder_vjp)


_binary_vjp(maximum, lambda g, out, a, b: _split_ties(g, a, b, lt(a, b), lt(b, a)))


_binary_vjp(minimum, lambda g, out, a, b: _split_ties(g, a, b, gt(a, b), gt(b, a)))


_binary_vjp(atan2, _atan2_vjp)


@where.vjp
def _(g, out, pred, a, b):
    zero = _zeros_like(g)
    return {"a": where(pred, g, zero) if is_tensor(a) else None,
            "b": where(pred, zero, g) if is_tensor(b) else None}


@convert_element_type.vjp
def _(g, out, a, dtype):
    return {"a": convert_element_type(g, a.dtype) if g.dtype is not a.dtype else g}


@broadcast_in_dim.vjp
def _(g, out, a, shape, broadcast_dims):
    reduce = tuple(d for d in range(len(shape)) if d not in broadcast_dims)
    keep_ones = tuple(d for i, d in enumerate(broadcast_dims) if a.shape[i] == 1 and shape[d] != 1)
    dims = tuple(sorted(reduce + keep_ones))
    r = sum(g, dims) if dims else g
    return {"a": reshape(r, tuple(a.shape)) if tuple(r.shape) != tuple(a.shape) else r}


@reshape.vjp
def _(g, out, a, shape):
    return {"a": reshape(g, tuple(a.shape))}


@transpose.vjp
def _(g, out, a, permutation):
    inverse = [0] * len(permutation)
    for i, p in enumerate(permutation):
        inverse[p] = i
    return {"a": transpose(g, tuple(inverse))}


@slice.vjp
def _(g, out, a, start_indices, end_indices, strides):
    return {"a": unslice(g, tuple(a.shape), start_indices, end_indices, strides)}


@cat.vjp
def _(g, out, tensors, dim):
    grads, offset = [], 0
    d = dim % g.ndim
    for t in tensors:
        start = [0] * g.ndim
        end = list(g.shape)
        start[d], end[d] = offset, offset + t.shape[d]
        offset += t.shape[d]
        grads.append(slice(g, tuple(start), tuple(end), (1,) * g.ndim))
    return {"tensors": tuple(grads)}


def _unreduce(g, a, dims):
    """Broadcast a reduction's cotangent back to the input's shape."""
    kept = tuple(i for i in range(a.ndim) if i not in dims)
    return broadcast_in_dim(g, tuple(a.shape), kept)


def _dims(a, dims):
    return canonical_dims(dims, a.ndim) if dims else ()


@sum.vjp
def _(g, out, a, dims):
    return {"a": _unreduce(g, a, _dims(a, dims))}


def _exclusive_cumprod(x, reverse=False):
    """Along the last dim: the product of the elements before (reverse: after) each one, by
    doubling (log2(n) steps of shifted products, ones shifted in)."""
    lead, n = tuple(x.shape[:-1]), x.shape[-1]
    zeros = (0,) * len(lead)
    if n == 1:
        return full(tuple(x.shape), _num(1, x), dtype=x.dtype, device=x.device)

    def shifted(y, k):  # y moved k places along the last dim (reverse: back), ones filling in
        ones = full((*lead, k), _num(1, y), dtype=y.dtype, device=y.device)
        if reverse:
            return cat((slice(y, (*zeros, k), (*lead, n), (1,) * y.ndim), ones), y.ndim - 1)
        return cat((ones, slice(y, (*zeros, 0), (*lead, n - k), (1,) * y.ndim)), y.ndim - 1)

    y, k = shifted(x, 1), 1
    while k < n:
        y = mul(y, shifted(y, k))
        k *= 2
    return y


def prod_grad(g, out, a, dims, whole=False):
    """The cotangent of a's product over dims (g and out broadcast back to a's shape), as torch's
    prod_backward: g * out / a while a holds no zero; else g times the product of the other
    elements of each one's slice (exclusive products from both sides), so that a zero gets the
    product of the others instead of 0 / 0; a whole-tensor product (whole) with two or more
    zeros: 0 (torch's shortcut, which differs from the products of others if a holds inf/NaN)."""
    kept = tuple(i for i in range(a.ndim) if i not in dims)
    perm = kept + tuple(dims)  # the reduced dims last, as one dim of n elements
    n = math.prod(a.shape[i] for i in dims)
    if n == 0:
        return g
    moved = tuple(a.shape[i] for i in perm)
    rows = reshape(transpose(a, perm), (*moved[:len(kept)], n))
    others = mul(_exclusive_cumprod(rows), _exclusive_cumprod(rows, reverse=True))
    others = transpose(reshape(others, moved), tuple(perm.index(i) for i in range(a.ndim)))
    zeros = sum(convert_element_type(eq(a, _num(0, a)), torch.int64), tuple(range(a.ndim)))
    safe = mul(g, others)
    if whole:
        safe = where(broadcast_in_dim(gt(zeros, 1), tuple(a.shape), ()), _num(0, g), safe)
    return where(broadcast_in_dim(gt(zeros, 0), tuple(a.shape), ()), safe, mul(g, div(out, a)))


@prod.vjp
def _(g, out, a, dims):
    d = _dims(a, dims)
    return {"a": prod_grad(_unreduce(g, a, d), _unreduce(out, a, d), a, d) if d else g}


def _extremum_vjp(g, out, a, dims):
    d = _dims(a, dims)
    mask = eq(a, _unreduce(out, a, d))
    m = convert_element_type(mask, g.dtype)
    count = _unreduce(sum(m, d) if d else m, a, d)
    return {"a": div(mul(_unreduce(g, a, d), m), count)}


amax.vjp(_extremum_vjp)


amin.vjp(_extremum_vjp)


@matmul.vjp
def _(g, out, a, b):
    perm = tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2)
    return {"a": matmul(g, transpose(b, perm)), "b": matmul(transpose(a, perm), g)}


@take.vjp
def _(g, out, a, dim, index):
    return {"a": zeros_index_add(tuple(a.shape), dim, index, g) if g.dtype == a.dtype
            else index_add(_zeros_like(a), dim, index, g)}


@convolution.vjp
def _(g, out, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    conf = (stride, padding, dilation, transposed, output_padding, groups)
    gx, gw = conv_grads(g, input, weight, conf)
    return {"input": gx, "weight": gw, "bias": sum(g, (0, *range(2, g.ndim))) if bias is not None else None}


@max_pool2d_with_indices.vjp
def _(g, out, input, kernel_size, stride, padding, dilation, ceil_mode):
    return {"input": max_pool2d_backward(g[0], input, kernel_size, stride, padding, dilation, ceil_mode, out[1])}


@avg_pool2d.vjp
def _(g, out, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return {"input": avg_pool2d_backward(g, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                         divisor_override)}


@adaptive_avg_pool2d.vjp
def _(g, out, input, output_size):
    return {"input": adaptive_avg_pool2d_backward(g, input)}
