"""The VJP rules of the ops of thunder/ops/elementwise.py (registered on them with OpDef.vjp)."""
import cmath
import math

import torch

from thunder.ops import fallback, vjp_utils as _vjp
from thunder.ops.vjp import complex_numbers
from thunder.ops.elementwise import (abs_, add, clamp, clamp_max, clamp_min, div, eq, exp, ge, gelu, gt,
                                     hardsigmoid, hardswish, hardtanh, hardtanh_backward, le, leaky_relu,
                                     leaky_relu_backward, log, logical_and, logical_or, lt, maximum, minimum,
                                     mish, mul, neg, pow_, reciprocal, relu, relu6, rpow, rsqrt, rsub,
                                     rtruediv, sigmoid, sign, silu, softplus, sqrt, square, sub, tanh,
                                     threshold, threshold_backward, true_divide, where)
from thunder.ops.meta_utils import is_tensor
from thunder.ops.nn import gelu_backward
from thunder.ops.vjp_utils import differentiable as _diff, grad_for as _grad


@add.vjp
def _(g, out, input, other, *, alpha=1):
    return {"input": _grad(input, g), "other": _grad(other, g if alpha == 1 else mul(g, alpha))}


@sub.vjp
def _(g, out, input, other, *, alpha=1):
    return {"input": _grad(input, g), "other": _grad(other, neg(g) if alpha == 1 else mul(g, -alpha))}


@rsub.vjp
def _(g, out, input, other, *, alpha=1):  # other - alpha * input
    return {"input": _grad(input, neg(g) if alpha == 1 else mul(g, -alpha)), "other": _grad(other, g)}


@mul.vjp
def _(g, out, input, other):
    return {"input": _grad(input, mul(g, other)) if _diff(input) else None,
            "other": _grad(other, mul(g, input)) if _diff(other) else None}


def _div_rule(g, out, a, b, rounding_mode=None):
    """Cotangents of a / b: (g / b, -g * (out / b)), rounded as torch's (out / b first: g * out
    can overflow where out / b does not); zero with a rounding mode (as torch)."""
    if rounding_mode is not None:
        return (_vjp.zeros_like(a) if _diff(a) else None), (_vjp.zeros_like(b) if _diff(b) else None)
    return (_grad(a, div(g, b)) if _diff(a) else None,
            _grad(b, neg(mul(g, div(out, b)))) if _diff(b) else None)


@div.vjp
def _(g, out, input, other, *, rounding_mode=None):
    gi, go = _div_rule(g, out, input, other, rounding_mode)
    return {"input": gi, "other": go}


@true_divide.vjp
def _(g, out, dividend, divisor):
    gi, go = _div_rule(g, out, dividend, divisor)
    return {"dividend": gi, "divisor": go}


@rtruediv.vjp
def _(g, out, input, other):
    """input.reciprocal() * other differentiated as torch does (its reciprocal and mul backward),
    so the roundings are torch's"""
    r = reciprocal(input)
    gi = neg(mul(mul(g, other), mul(r, r))) if _diff(input) else None
    return {"input": _grad(input, gi) if gi is not None else None,
            "other": _grad(other, mul(g, r)) if _diff(other) else None}


def _pow_rule(g, out, base, exponent):
    """Cotangents (of base, of exponent) of base ** exponent, as torch's pow_backward*."""
    gb = ge_ = None
    if _diff(base):
        if is_tensor(exponent):
            d = mul(exponent, pow_(base, sub(exponent, 1)))
            gb = where(eq(exponent, 0), 0.0, mul(g, d))
        elif exponent == 0:
            gb = _vjp.zeros_like(g)
        else:
            gb = mul(g, mul(pow_(base, exponent - 1), exponent))
        gb = _grad(base, gb)
    if _diff(exponent):
        if is_tensor(base):
            # (the base in the result's dtype: the log of a negative base is complex for a complex power)
            wide = base if base.dtype is out.dtype else _vjp.convert(base, out.dtype)
            r = where(logical_and(eq(base, 0), _at_least_zero(exponent)), 0.0, mul(out, log(wide)))
        elif out.dtype.is_complex:
            r = mul(out, cmath.log(base) if base != 0 else -math.inf)
            if base == 0:
                r = where(_at_least_zero(exponent), 0.0, r)
        else:
            log_base = math.log(base) if base > 0 else (-math.inf if base == 0 else math.nan)
            r = mul(out, log_base)
            if base == 0:
                r = where(ge(exponent, 0), 0.0, r)
        ge_ = _grad(exponent, mul(g, r))
    return gb, ge_


def _at_least_zero(exponent):
    """exponent >= 0 as torch's pow backward reads it (a complex one: real and >= 0)."""
    if not exponent.dtype.is_complex:
        return ge(exponent, 0)
    # (torch.real/imag: torch calls, the registry has no such ops)
    return logical_and(eq(fallback.call(torch.imag, exponent), 0), ge(fallback.call(torch.real, exponent), 0))


@pow_.vjp
def _(g, out, input, exponent):
    gi, ge_ = _pow_rule(g, out, input, exponent)
    return {"input": gi, "exponent": ge_}


@rpow.vjp
def _(g, out, input, other):  # other ** input
    go, gi = _pow_rule(g, out, other, input)
    return {"input": gi, "other": go}


@where.vjp
def _(g, out, condition, input, other):
    return {"input": _grad(input, where(condition, g, 0.0)) if _diff(input) else None,
            "other": _grad(other, where(condition, 0.0, g)) if _diff(other) else None}


def _extremum_rule(loses):
    """maximum/minimum: the cotangent goes to the winner, half to each on ties (as torch)."""
    def rule(g, out, input, other):
        ties = eq(input, other)
        half = mul(g, 0.5)
        gi = where(loses(input, other), 0.0, where(ties, half, g))
        go = where(loses(other, input), 0.0, where(ties, half, g))
        return {"input": _grad(input, gi), "other": _grad(other, go)}

    return rule


maximum.vjp(_extremum_rule(lt))


minimum.vjp(_extremum_rule(gt))


def _clamp_rule(g, input, min, max):
    """Cotangents (input, min, max) of clamp, as torch's clamp_backward and clamp_backward_min_max:
    the input gets g where min <= input <= max, a tensor bound where it clamps."""
    if min is not None and max is not None:
        inside = logical_and(ge(input, min), le(input, max))
    elif min is not None:
        inside = ge(input, min)
    else:
        inside = le(input, max)
    gi = _grad(input, where(inside, g, 0.0)) if _diff(input) else None
    gmin = gmax = None
    if _diff(min):
        below = lt(input, min) if max is None else logical_and(lt(input, min), lt(min, max))
        gmin = _grad(min, where(below, g, 0.0))
    if _diff(max):
        above = gt(input, max) if min is None else logical_or(gt(input, max), lt(max, min))
        gmax = _grad(max, where(above, g, 0.0))
    return gi, gmin, gmax


@clamp.vjp
def _(g, out, input, min=None, max=None):
    gi, gmin, gmax = _clamp_rule(g, input, min, max)
    return {"input": gi, "min": gmin, "max": gmax}


@clamp_min.vjp
def _(g, out, input, min):
    gi, gmin, _ = _clamp_rule(g, input, min, None)
    return {"input": gi, "min": gmin}


@clamp_max.vjp
def _(g, out, input, max):
    gi, _, gmax = _clamp_rule(g, input, None, max)
    return {"input": gi, "max": gmax}


def _unary_rule(op, rule):
    """A rule for a one-tensor op: rule(g, out, input) -> the cotangent in out's shape."""
    @op.vjp
    def _(g, out, input, **kw):
        return {"input": _grad(input, rule(g, out, input, **kw)) if _diff(input) else None}


_unary_rule(neg, lambda g, out, x: neg(g))


_unary_rule(abs_, lambda g, out, x: mul(g, complex_numbers.sgn(x) if x.dtype.is_complex else sign(x)))


_unary_rule(exp, lambda g, out, x: mul(g, out))


_unary_rule(log, lambda g, out, x: div(g, x))


_unary_rule(sqrt, lambda g, out, x: div(g, mul(out, 2.0)))


_unary_rule(rsqrt, lambda g, out, x: mul(mul(g, -0.5), pow_(out, 3.0)))  # as torch: -0.5 * g * out.pow(3)


# as torch's tanh_backward kernel: in float32 for float16/bfloat16, rounded once
_unary_rule(tanh, lambda g, out, x: mul(_vjp.upcast(g), rsub(mul(_vjp.upcast(out), _vjp.upcast(out)), 1.0)))


def _sigmoid_grad(g, out, x):
    # as torch's sigmoid_backward kernel: (g * (1 - out)) * out, in float32 for bfloat16 but
    # rounded per op in float16
    if out.dtype is torch.bfloat16:
        g, out = _vjp.upcast(g), _vjp.upcast(out)
    return mul(mul(g, rsub(out, 1.0)), out)


_unary_rule(sigmoid, _sigmoid_grad)


# torch's threshold_backward of the result: zero where out <= 0, so a NaN result passes g on
# (NaN > 0 would not)
_unary_rule(relu, lambda g, out, x, inplace=False: threshold_backward(g, out, 0.0))


_unary_rule(threshold, lambda g, out, x, threshold, value, inplace=False: threshold_backward(g, x, threshold))


_unary_rule(leaky_relu, lambda g, out, x, negative_slope=0.01, inplace=False:
            leaky_relu_backward(g, x, negative_slope, False))


_unary_rule(square, lambda g, out, x: mul(g, mul(x, 2.0)))


def _silu_grad(g, out, x, inplace=False):
    x, g32 = _vjp.upcast(x), _vjp.upcast(g)
    s = sigmoid(x)
    return mul(mul(g32, s), add(mul(x, rsub(s, 1.0)), 1.0))  # torch's silu_backward order


def _softplus_grad(g, out, x, beta=1.0, threshold=20.0):
    x, g32 = _vjp.upcast(x), _vjp.upcast(g)
    xb = mul(x, float(beta))
    return where(gt(xb, float(threshold)), g32, mul(g32, sigmoid(xb)))  # z / (z + 1), z = exp(x * beta)


_unary_rule(gelu, lambda g, out, x, approximate="none": gelu_backward(g, x, approximate=approximate))


_unary_rule(silu, _silu_grad)


_unary_rule(softplus, _softplus_grad)


def _hardswish_grad(g, out, x, inplace=False):
    x, g32 = _vjp.upcast(x), _vjp.upcast(g)  # as torch: 0 up to -3, g from 3, g * (x / 3 + 0.5) between
    return where(le(x, -3.0), 0.0, where(lt(x, 3.0), mul(g32, add(div(x, 3.0), 0.5)), g32))


def _hardsigmoid_grad(g, out, x, inplace=False):
    return where(logical_and(gt(x, -3.0), lt(x, 3.0)), mul(_vjp.upcast(g), 1 / 6), 0.0)


def _mish_grad(g, out, x, inplace=False):
    # as torch's mish_backward: no exp(x) / (1 + exp(x)) that overflows to nan
    x, g32 = _vjp.upcast(x), _vjp.upcast(g)
    t = tanh(softplus(x))
    return mul(g32, add(t, mul(mul(x, sigmoid(x)), rsub(mul(t, t), 1.0))))


# (zero at the bounds too, as torch's hardtanh_backward: maximum/minimum would split ties)
_unary_rule(hardtanh, lambda g, out, x, min_val=-1.0, max_val=1.0, inplace=False:
            hardtanh_backward(g, x, min_val, max_val))


_unary_rule(relu6, lambda g, out, x, inplace=False: hardtanh_backward(g, x, 0.0, 6.0))


def _backward_op_rule(op):
    """The rule of a piecewise-linear activation's backward op: the same op of the cotangent for
    grad_output, zeros for input (torch's `self: zeros_like(grad)`)."""
    @op.vjp
    def _(g, out, grad_output, input, **kw):
        return {"grad_output": _grad(grad_output, op(g, input, **kw)) if _diff(grad_output) else None,
                "input": _vjp.zeros_like(input) if _diff(input) else None}


for _op in (threshold_backward, leaky_relu_backward, hardtanh_backward):
    _backward_op_rule(_op)


_unary_rule(hardswish, _hardswish_grad)


_unary_rule(hardsigmoid, _hardsigmoid_grad)


_unary_rule(mish, _mish_grad)
