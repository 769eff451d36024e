"""Elementwise ltorch ops: arithmetic, comparisons, unary math, activations."""
import contextlib
import inspect
import math

import torch
import torch.nn.functional as F

from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.ops import prims
from thunder.ops.grad import detach
from thunder.ops.decomp_utils import as_tensor, expand_to, fma_dtype, opmath_dtype, to_dtype, widened
from thunder.ops.meta_utils import broadcast_shapes, device_of, elementwise, is_tensor
from thunder.ops import registry
from thunder.ops.registry import Bool, Float, Int, Number, OpDef, Str, Tensor, TensorOrNumber, ltorch
from thunder.core import trace as tracing
from thunder.core.proxies import data_dependent

# --------------------------------------------------------------------------------------------
# Shared pieces


def _aliases(*names, extra=()):
    """torch.<name> and torch.Tensor.<name> for each name that exists, plus extra callables."""
    found = [getattr(ns, n) for n in names for ns in (torch, torch.Tensor) if hasattr(ns, n)]
    return (*found, *extra)


def _dtype_name(dtype):
    return {torch.bool: "Bool", torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short",
            torch.int32: "Int", torch.int64: "Long", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.float32: "Float", torch.float64: "Double"}.get(dtype, str(dtype))


def _category(dtype):
    return "bool" if dtype is torch.bool else "float" if dtype.is_floating_point or dtype.is_complex else "int"


def _reject(name, dtype, categories, exc=NotImplementedError):
    """Raise torch's error for a dtype the kernel does not support (categories: bool/int/float)."""
    if _category(dtype) in categories:
        raise exc(f'"{name}" not implemented for \'{_dtype_name(dtype)}\'')


def _compute(operands, out, fn, *, upcast=False, dtype=None, widen=False):
    """The body of most decompositions: broadcast the operands to out's shape, convert them to the
    compute dtype (dtype; else out's dtype, or the promoted one for ops with bool results; float32
    for float16/bfloat16 when upcast, as torch's kernels do), apply fn and convert to out's dtype.
    widen: a composite torch computes op by op, each rounded (F.softplus's log1p(exp(x))),
    computed in float64 for float types up to float32 and rounded once (decomp_utils.widened:
    never less accurate than torch's)."""
    common = out.dtype if out.dtype is not torch.bool else dtypes.promote(*operands)
    if dtype is None:
        dtype = common
    if upcast:
        dtype = opmath_dtype(dtype)
    if widen:
        dtype = fma_dtype(out.dtype)
    # (a tensor of another dtype is converted to the common one first, as torch's TensorIterator
    # does before its kernel widens: an int64 tensor added to float16 rounds to float16, inf included)
    operands = [to_dtype(a, common) if is_tensor(a) and dtype is not common and common.is_floating_point
                else a for a in operands]
    with widened(out.dtype) if widen else contextlib.nullcontext():
        args = [expand_to(to_dtype(a, dtype), out.shape) for a in operands]
        return to_dtype(fn(*args), out.dtype)


def _check_any_tensor(name, *args):
    if not any(is_tensor(a) for a in args):
        raise TypeError(f"{name}(): expected at least one tensor argument")


# --------------------------------------------------------------------------------------------
# Unary ops


def _unary(name, fn, *, float_out=False, bool_out=False, upcast=False, reject=(), exc=NotImplementedError,
           dunders=(), extra_aliases=(), method=True, names=(), real_out=False):
    def meta(input: Tensor):
        _reject(name, input.dtype, reject, exc)
        return elementwise(input, int_to_float=float_out, always_bool=bool_out,
                           result_dtype=dtypes.real_dtype(input.dtype) if real_out else None)

    meta.__name__ = name
    methods = (name, *names) if method else ()
    op = ltorch(f"torch.{name}", methods=methods, dunders=dunders, elementwise=True,
                aliases=_aliases(name, *names, extra=extra_aliases))(meta)
    op.decompose(lambda input: _compute([input], op.meta(input), fn, upcast=upcast))
    return op


def _float_only(prim):
    """floor, ceil, trunc: identity on integers."""
    return lambda x: prim(x) if x.dtype.is_floating_point else x


def _is_inf(x):
    if not x.dtype.is_floating_point:
        return prims.full(x.shape, False, dtype=torch.bool, device=x.device)
    return prims.eq(prims.abs(x), math.inf)


def _is_finite(x):
    if not x.dtype.is_floating_point:
        return prims.full(x.shape, True, dtype=torch.bool, device=x.device)
    return prims.lt(prims.abs(x), math.inf)  # false for nan and inf


def _sigmoid(x):
    return prims.reciprocal(prims.add(prims.exp(prims.neg(x)), 1.0))


neg = _unary("neg", prims.neg, reject=("bool",), exc=RuntimeError, dunders=("__neg__",), names=("negative",))
abs_ = _unary("abs", prims.abs, reject=("bool",), dunders=("__abs__",), names=("absolute",),
              real_out=True)  # (|z| of a complex z is real)
exp = _unary("exp", prims.exp, float_out=True)
exp2 = _unary("exp2", lambda x: prims.pow(2.0, x), float_out=True, upcast=True)
expm1 = _unary("expm1", prims.expm1, float_out=True)
log = _unary("log", prims.log, float_out=True)
log2 = _unary("log2", prims.log2, float_out=True)  # (not log(x) / log(2): that rounds twice)
log10 = _unary("log10", prims.log10, float_out=True)
log1p = _unary("log1p", prims.log1p, float_out=True)
sqrt = _unary("sqrt", prims.sqrt, float_out=True)
rsqrt = _unary("rsqrt", prims.rsqrt, float_out=True)
sin = _unary("sin", prims.sin, float_out=True)
cos = _unary("cos", prims.cos, float_out=True)
tan = _unary("tan", lambda x: prims.div(prims.sin(x), prims.cos(x)), float_out=True, upcast=True)
tanh = _unary("tanh", prims.tanh, float_out=True)
sigmoid = _unary("sigmoid", _sigmoid, float_out=True, upcast=True, extra_aliases=(F.sigmoid,))
erf = _unary("erf", prims.erf, float_out=True)
reciprocal = _unary("reciprocal", prims.reciprocal, float_out=True)
floor = _unary("floor", _float_only(prims.floor), reject=("bool",))
ceil = _unary("ceil", _float_only(prims.ceil), reject=("bool",))
trunc = _unary("trunc", _float_only(prims.trunc), reject=("bool",), names=("fix",))
sign = _unary("sign", prims.sign)
isnan = _unary("isnan", prims.isnan, bool_out=True)
isinf = _unary("isinf", _is_inf, bool_out=True)
isfinite = _unary("isfinite", _is_finite, bool_out=True)
bitwise_not = _unary("bitwise_not", prims.bitwise_not, reject=("float",), dunders=("__invert__",))


@ltorch("torch.square", methods=("square",), aliases=_aliases("square"), elementwise=True)
def square(input: Tensor):
    """input * input (bool inputs give int64, as torch.pow(input, 2))."""
    return TensorProxy.like(input, dtype=torch.int64 if input.dtype is torch.bool else input.dtype)


@square.decompose
def _(input):
    return _compute([input], square.meta(input), lambda x: prims.mul(x, x))


@ltorch("torch.round", methods=("round",), aliases=_aliases("round"), elementwise=True)
def round_(input: Tensor, *, decimals: Int = 0):
    _reject("round", input.dtype, ("bool",) if decimals == 0 else ("bool", "int"))
    return TensorProxy.like(input)


@round_.decompose
def _(input, *, decimals=0):
    def fn(x):
        if not x.dtype.is_floating_point:
            return x
        if decimals == 0:
            return prims.round(x)
        scale = 10.0 ** abs(decimals)  # as torch: nearbyint(x * 10^d) / 10^d, or the reverse for d < 0
        if decimals > 0:
            return prims.div(prims.round(prims.mul(x, scale)), scale)
        return prims.mul(prims.round(prims.div(x, scale)), scale)

    # torch scales in float32 for float16/bfloat16 (x * 100 of a float16 x overflows in float16)
    return _compute([input], round_.meta(input, decimals=decimals), fn, upcast=decimals != 0)


@ltorch("torch.logical_not", methods=("logical_not",), aliases=_aliases("logical_not"), elementwise=True)
def logical_not(input: Tensor):
    return TensorProxy.like(input, dtype=torch.bool)


@logical_not.decompose
def _(input):
    return prims.bitwise_not(to_dtype(input, torch.bool))


# --------------------------------------------------------------------------------------------
# Binary ops


@ltorch("torch.add", methods=("add",), dunders=("__add__",), rdunders=("__radd__",),
        aliases=(torch.add, torch.Tensor.add), elementwise=True, numbers_are_operands=True)
def add(input: TensorOrNumber, other: TensorOrNumber, *, alpha: Number = 1):
    _check_any_tensor("add", input, other)
    return _check_alpha(elementwise(input, other), alpha)


@add.decompose
def _(input, other, *, alpha=1):
    out = add.meta(input, other, alpha=alpha)
    return _with_alpha(prims.add, input, other, alpha, out)


def _check_alpha(out, alpha):
    if isinstance(alpha, float) and not (out.dtype.is_floating_point or out.dtype.is_complex):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    return out


def _alpha_dtype(out, alpha):
    """The dtype a + alpha * b computes in: torch's kernel rounds it once (a fused multiply-add,
    in float32 for float16/bfloat16), which float64 gives for float types up to float32."""
    return fma_dtype(out.dtype) if alpha != 1 else None


def _with_alpha(prim, input, other, alpha, out):
    """prim(input, alpha * other). With alpha != 1 torch's kernel converts alpha and a number
    operand to the result's dtype first (add(x, 0.1, alpha=0.3) on float16 computes with
    0.0999755859375 and 0.2998046875, in float32), then rounds a + alpha * b once."""
    if alpha != 1 and out.dtype.is_floating_point:
        input, other, alpha = (_in_dtype(v, out.dtype) for v in (input, other, alpha))
    return _compute([input, other], out, lambda a, b: prim(a, _scaled(b, alpha)), dtype=_alpha_dtype(out, alpha))


def _in_dtype(v, dtype):
    """A Python number (known while tracing) as the nearest value of dtype; others as they are."""
    if type(v) in (int, float):
        return torch.tensor(float(v), dtype=dtype).item()
    return v


def _scaled(b, alpha):
    """alpha * b in b's dtype (b is a tensor or a number converted to the compute dtype)."""
    if alpha == 1:
        return b
    if not is_tensor(b):
        return type(b)(b * alpha)
    return prims.mul(b, to_dtype(alpha, b.dtype))


def _binary(name, fn, *, float_out=False, bool_out=False, upcast=False, check=None, dunders=(), rdunders=(),
            names=(), tensors_only=False, torch_name=None):
    """input <op> other with broadcasting and type promotion. check(operands, out_dtype) raises
    torch's error for unsupported inputs."""
    def meta(input: TensorOrNumber, other: TensorOrNumber):
        _check_any_tensor(name, input, other)
        out = elementwise(input, other, int_to_float=float_out, always_bool=bool_out)
        if check is not None:
            check(name, (input, other), out.dtype)
        return out

    meta.__name__ = name
    if tensors_only:
        meta.__annotations__ = {"input": Tensor, "other": Tensor}
    op = ltorch(torch_name or f"torch.{name}", methods=(name, *names), dunders=dunders, rdunders=rdunders,
                aliases=_aliases(name, *names), elementwise=True, numbers_are_operands=True)(meta)
    op.decompose(lambda input, other: _compute([input, other], op.meta(input, other), fn, upcast=upcast))
    return op


def _no_bool_result(name, operands, dtype):
    _reject(name, dtype, ("bool",))


def _no_float_result(name, operands, dtype):
    _reject(name, dtype, ("float",))


def _no_bool_operand(name, operands, dtype):
    if any(a is not None and (a.dtype is torch.bool if is_tensor(a) else isinstance(a, bool)) for a in operands):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.")


def _trivial_exponent(base, exponent):
    """Whether torch's pow(tensor, number) short-circuits: exponent 0 fills ones, 1 copies (any
    dtype, bool included)."""
    return is_tensor(base) and not is_tensor(exponent) and not isinstance(exponent, complex) and exponent in (0, 1)


def _pow_check(name, operands, dtype):
    base, exponent = operands
    if not _trivial_exponent(base, exponent):
        _reject(name, dtype, ("bool",))
    if (is_tensor(base) and not (base.dtype.is_floating_point or base.dtype.is_complex) and not is_tensor(exponent)
            and not isinstance(exponent, float) and exponent < 0):
        raise RuntimeError("Integers to negative integer powers are not allowed.")


def _div_trunc(a, b):
    q = prims.div(a, b)
    return prims.trunc(q) if q.dtype.is_floating_point else q


def _div_floor(a, b):
    """Python's floor division, as torch computes it (c10::div_floor_floating / div_floor_integer)."""
    like = a if is_tensor(a) else b
    a, b = as_tensor(a, like), as_tensor(b, like)
    if not a.dtype.is_floating_point:
        q = prims.div(a, b)  # truncates
        r = prims.sub(a, prims.mul(q, b))
        fix = prims.bitwise_and(prims.ne(r, 0), prims.ne(prims.lt(r, 0), prims.lt(b, 0)))
        return prims.where(fix, prims.sub(q, 1), q)
    q = prims.div(prims.sub(a, prims.remainder(a, b)), b)  # an integer up to rounding
    f = prims.floor(q)
    f = prims.where(prims.gt(prims.sub(q, f), 0.5), prims.add(f, 1.0), f)
    signed_zero = prims.mul(prims.div(a, b), 0.0)  # torch: copysign(0, a / b)
    f = prims.where(prims.eq(q, 0.0), signed_zero, f)
    # a finite a over an infinite b: -1 where their signs differ, else a signed zero (remainder
    # is +-inf there, not a, so q would be NaN)
    differ = prims.bitwise_and(prims.ne(a, 0.0), prims.ne(prims.lt(b, 0.0), prims.lt(a, 0.0)))
    by_inf = prims.bitwise_and(prims.eq(prims.abs(b), math.inf), prims.lt(prims.abs(a), math.inf))
    f = prims.where(by_inf, prims.where(differ, -1.0, signed_zero), f)
    return prims.where(prims.eq(b, 0.0), prims.div(a, b), f)


mul = _binary("mul", prims.mul, dunders=("__mul__",), rdunders=("__rmul__",), names=("multiply",))
floor_divide = _binary("floor_divide", _div_floor, upcast=True, check=_no_bool_result, dunders=("__floordiv__",))
remainder = _binary("remainder", prims.remainder, check=_no_bool_result, dunders=("__mod__",))
maximum = _binary("maximum", prims.maximum, tensors_only=True)
minimum = _binary("minimum", prims.minimum, tensors_only=True)
atan2 = _binary("atan2", prims.atan2, float_out=True, tensors_only=True, names=("arctan2",))
bitwise_and = _binary("bitwise_and", prims.bitwise_and, check=_no_float_result,
                      dunders=("__and__",), rdunders=("__rand__",))
bitwise_or = _binary("bitwise_or", prims.bitwise_or, check=_no_float_result, dunders=("__or__",), rdunders=("__ror__",))
bitwise_xor = _binary("bitwise_xor", prims.bitwise_xor, check=_no_float_result,
                      dunders=("__xor__",), rdunders=("__rxor__",))
eq = _binary("eq", prims.eq, bool_out=True, dunders=("__eq__",))
ne = _binary("ne", prims.ne, bool_out=True, dunders=("__ne__",), names=("not_equal",))
lt = _binary("lt", prims.lt, bool_out=True, dunders=("__lt__",), names=("less",))
le = _binary("le", prims.le, bool_out=True, dunders=("__le__",), names=("less_equal",))
gt = _binary("gt", prims.gt, bool_out=True, dunders=("__gt__",), names=("greater",))
ge = _binary("ge", prims.ge, bool_out=True, dunders=("__ge__",), names=("greater_equal",))


def _logical(name, prim):
    def meta(input: Tensor, other: Tensor):
        return elementwise(input, other, always_bool=True)

    meta.__name__ = name
    op = ltorch(f"torch.{name}", methods=(name,), aliases=_aliases(name), elementwise=True,
                numbers_are_operands=True)(meta)
    op.decompose(lambda input, other: _compute([input, other], op.meta(input, other), prim, dtype=torch.bool))
    return op


logical_and = _logical("logical_and", prims.bitwise_and)
logical_or = _logical("logical_or", prims.bitwise_or)
logical_xor = _logical("logical_xor", prims.bitwise_xor)


@ltorch("torch.sub", methods=("sub", "subtract"), dunders=("__sub__",), aliases=_aliases("sub", "subtract"),
        elementwise=True, numbers_are_operands=True)
def sub(input: TensorOrNumber, other: TensorOrNumber, *, alpha: Number = 1):
    _check_any_tensor("sub", input, other)
    _no_bool_operand("sub", (input, other, alpha), None)
    return _check_alpha(elementwise(input, other), alpha)


@sub.decompose
def _(input, other, *, alpha=1):
    out = sub.meta(input, other, alpha=alpha)
    return _with_alpha(prims.sub, input, other, alpha, out)


@ltorch("torch.rsub", rdunders=("__rsub__",), aliases=(torch.rsub,), elementwise=True, numbers_are_operands=True)
def rsub(input: TensorOrNumber, other: TensorOrNumber, *, alpha: Number = 1):
    """other - alpha * input (Python's `number - tensor`)."""
    return sub.meta(other, input, alpha=alpha)


@rsub.decompose
def _(input, other, *, alpha=1):
    return sub(other, input, alpha=alpha)


def _check_rounding_mode(rounding_mode):
    if rounding_mode not in (None, "trunc", "floor"):
        raise RuntimeError("div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                           f"but found '{rounding_mode}'")


@ltorch("torch.div", methods=("div", "divide"), dunders=("__truediv__",), aliases=_aliases("div", "divide"),
        elementwise=True, numbers_are_operands=True)
def div(input: TensorOrNumber, other: TensorOrNumber, *, rounding_mode: Str | None = None):
    _check_any_tensor("div", input, other)
    _check_rounding_mode(rounding_mode)
    out = elementwise(input, other, int_to_float=rounding_mode is None)
    _reject(f"div_{rounding_mode}", out.dtype, ("bool",))
    return out


@div.decompose
def _(input, other, *, rounding_mode=None):
    fn = {None: prims.div, "trunc": _div_trunc, "floor": _div_floor}[rounding_mode]
    # float16/bfloat16: torch floors in float32, and truncates in float32 the quotient by a number,
    # but rounds the quotient by a tensor to the dtype before truncating it
    return _compute([input, other], div.meta(input, other, rounding_mode=rounding_mode), fn,
                    upcast=rounding_mode == "floor" or (rounding_mode == "trunc" and not is_tensor(other)))


@ltorch("torch.true_divide", methods=("true_divide",), aliases=_aliases("true_divide"), elementwise=True,
        numbers_are_operands=True)
def true_divide(dividend: TensorOrNumber, divisor: TensorOrNumber):
    return div.meta(dividend, divisor)


@true_divide.decompose
def _(dividend, divisor):
    return _compute([dividend, divisor], div.meta(dividend, divisor), prims.div)


@ltorch("torch.pow", methods=("pow",), dunders=("__pow__",), aliases=_aliases("pow"), elementwise=True)
def pow_(input: TensorOrNumber, exponent: TensorOrNumber):
    _check_any_tensor("pow", input, exponent)
    out = elementwise(input, exponent)
    _pow_check("pow", (input, exponent), out.dtype)
    return out


@pow_.decompose
def _(input, exponent):
    out = pow_.meta(input, exponent)
    if out.dtype is torch.bool:  # (x ** True, x ** False: no bool pow kernel, torch's short cuts)
        return prims.eq(input, True) if exponent else prims.eq(input, input)  # (a copy; ones)
    return _compute([input, exponent], out, prims.pow)


# Reflected operators: Python calls them for `number <op> tensor`; the proxy comes first.
def _reflected(name, torch_name, rdunder, forward):
    def meta(input: TensorOrNumber, other: TensorOrNumber):
        return forward.meta(other, input)

    meta.__doc__ = f"other {rdunder} input"
    meta.__name__ = name
    op = ltorch(torch_name, rdunders=(rdunder,))(meta)
    op.decompose(lambda input, other: forward(other, input))
    return op


rfloordiv = _reflected("rfloordiv", "torch.Tensor.__rfloordiv__", "__rfloordiv__", floor_divide)
rmod = _reflected("rmod", "torch.Tensor.__rmod__", "__rmod__", remainder)
rpow = _reflected("rpow", "torch.Tensor.__rpow__", "__rpow__", pow_)


@ltorch("torch.Tensor.__rtruediv__", rdunders=("__rtruediv__",))
def rtruediv(input: Tensor, other: TensorOrNumber):
    """other / input, computed as torch does: input.reciprocal() * other."""
    return elementwise(reciprocal.meta(input), other)


@rtruediv.decompose
def _(input, other):
    return mul(reciprocal(input), other)


# --------------------------------------------------------------------------------------------
# Selection and clamping


class _WhereOp(OpDef):
    """torch.where(condition) alone is torch.nonzero(condition, as_tuple=True)."""

    # the index tensors of a mask's True elements: ops/indexing.py installs its mask_indices
    mask_indices = None

    def __call__(self, *args, **kwargs):
        if len(args) + len(kwargs) == 1:
            condition = (*args, *kwargs.values())[0]
            if tracing.values_known() and isinstance(condition, TensorProxy) and condition.ndim:
                return tuple(_WhereOp.mask_indices(condition))  # (the number of True elements is read: a split)

            data_dependent("torch.where(condition) (the indices of the True elements)",
                           "use torch.where(condition, input, other) or a mask (x * condition)")
        return super().__call__(*args, **kwargs)


@ltorch("torch.where", aliases=(torch.where,), elementwise=True, numbers_are_operands=True)
def where(condition: Tensor, input: TensorOrNumber, other: TensorOrNumber):
    if condition.dtype not in (torch.bool, torch.uint8):
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                           f"{_dtype_name(condition.dtype)}")
    shape = broadcast_shapes(*(a.shape for a in (condition, input, other) if is_tensor(a)))
    return TensorProxy(shape, dtypes.promote(input, other), device_of(condition, input, other))


@where.decompose
def _(condition, input, other):
    out = where.meta(condition, input, other)
    cond = expand_to(to_dtype(condition, torch.bool), out.shape)
    a, b = (expand_to(to_dtype(x, out.dtype), out.shape) for x in (input, other))
    if not is_tensor(a) and not is_tensor(b):
        a = as_tensor(a, out)
    return prims.where(cond, a, b)


where.__class__ = _WhereOp
registry.method("where", lambda self, condition, other: where(condition, self, other))  # x.where(cond, y)


def _clamp_meta(name, input, min, max):
    if min is None and max is None:
        raise RuntimeError(f"torch.{name}: At least one of 'min' or 'max' must not be None")
    out = elementwise(input, *(b for b in (min, max) if b is not None))
    # bool: eager's kernels with one tensor bound work (clamp(b, min=t) runs clamp_min(b, t));
    # both bounds or number bounds raise, naming the kernel
    both = min is not None and max is not None
    kernel = name if not both else "clamp"
    if both and (is_tensor(min) or is_tensor(max)):
        _reject("clamp_cpu", out.dtype, ("bool",))
    elif both or not is_tensor(min) and not is_tensor(max):
        _reject(f"{kernel if both else ('clamp_min' if max is None else 'clamp_max')}_scalar_cpu", out.dtype, ("bool",))
    return out


def _clamp_decomp(input, min, max, out):
    bounds = [b for b in (min, max) if b is not None]

    def fn(x, *bs):
        bs = iter(bs)
        if min is not None:
            x = prims.maximum(x, as_tensor(next(bs), x))
        if max is not None:
            x = prims.minimum(x, as_tensor(next(bs), x))
        return x

    return _compute([input, *bounds], out, fn)


@ltorch("torch.clamp", methods=("clamp", "clip"), aliases=_aliases("clamp", "clip"), elementwise=True)
def clamp(input: Tensor, min: TensorOrNumber | None = None, max: TensorOrNumber | None = None):
    return _clamp_meta("clamp", input, min, max)


@clamp.decompose
def _(input, min=None, max=None):
    return _clamp_decomp(input, min, max, clamp.meta(input, min, max))


@ltorch("torch.clamp_min", methods=("clamp_min",), aliases=_aliases("clamp_min"), elementwise=True)
def clamp_min(input: Tensor, min: TensorOrNumber):
    return _clamp_meta("clamp_min", input, min, None)


@clamp_min.decompose
def _(input, min):
    return _clamp_decomp(input, min, None, clamp_min.meta(input, min))


@ltorch("torch.clamp_max", methods=("clamp_max",), aliases=_aliases("clamp_max"), elementwise=True)
def clamp_max(input: Tensor, max: TensorOrNumber):
    return _clamp_meta("clamp_max", input, None, max)


@clamp_max.decompose
def _(input, max):
    return _clamp_decomp(input, None, max, clamp_max.meta(input, max))


@ltorch("torch.lerp", methods=("lerp",), aliases=_aliases("lerp"), elementwise=True)
def lerp(input: Tensor, end: Tensor, weight: TensorOrNumber):
    for n, t in (("end", end), ("weight", weight)):
        if is_tensor(t) and t.dtype != input.dtype:
            raise RuntimeError(f"expected dtype {str(input.dtype)[6:]} for `{n}` but got dtype {str(t.dtype)[6:]}")
    _reject("lerp_kernel_scalar", input.dtype, ("bool", "int"))
    out = elementwise(input, end, weight)
    return TensorProxy(out.shape, input.dtype, out.device)


@lerp.decompose
def _(input, end, weight):
    def fn(x, e, w):
        # as torch: |w| < 0.5 ? x + w * (e - x) : e - (e - x) * (1 - w)
        d = prims.sub(e, x)
        low = prims.add(x, prims.mul(w, d))
        high = prims.sub(e, prims.mul(d, prims.sub(1.0, w) if is_tensor(w) else 1.0 - w))
        if not is_tensor(w):
            return low if abs(w) < 0.5 else high
        return prims.where(prims.lt(prims.abs(w), 0.5), low, high)

    # torch computes it with one fused multiply-add (no rounding, no overflow of (e - x) * (1 - w)
    # before the sum): float64 gives that for float types up to float32
    out = lerp.meta(input, end, weight)
    return _compute([input, end, weight], out, fn, dtype=fma_dtype(out.dtype))


def _addc(name, input, tensor1, tensor2, value):
    """The result of torch.addcmul/addcdiv: floating tensors only (torch's call decides the others,
    and its errors: addcdiv of integers); `value` a number or a one-element tensor, whose value
    torch reads as a number (Adam's step size while compiled)."""
    out = elementwise(input, tensor1, tensor2)
    if is_tensor(value) and value.requires_grad:  # (eager's parser takes no such tensor for a number)
        raise TypeError(f"{name}(): argument 'value' must be Number, not Tensor")
    if not out.dtype.is_floating_point or is_tensor(value) and (value.numel() != 1 or value.dtype.is_complex):
        raise NotImplementedError(f"thunder: {name} of {out.dtype} tensors, value {value!r}, runs as torch's call")
    return TensorProxy(out.shape, out.dtype, out.device)


def _addc_value(value, dtype, shape):
    """value as torch's kernel takes it: a number of the compute dtype (a tensor's value read as
    a number: no gradient flows to it, as none does in eager), as a tensor of shape where it is one."""
    if not is_tensor(value):
        return value
    return expand_to(to_dtype(prims.reshape(detach(value), ()), dtype), shape)


@ltorch("torch.addcmul", methods=("addcmul",), aliases=_aliases("addcmul"), elementwise=True)
def addcmul(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: TensorOrNumber = 1):
    return _addc("addcmul", input, tensor1, tensor2, value)


@addcmul.decompose
def _(input, tensor1, tensor2, *, value=1):
    # as torch's kernel: t = value * tensor1 rounded in the compute dtype, then input + t * tensor2
    # rounded once (a fused multiply-add: float64 gives it for float types up to float32)
    out = addcmul.meta(input, tensor1, tensor2, value=value)
    c, w = opmath_dtype(out.dtype), fma_dtype(out.dtype)
    v = _addc_value(value, c, out.shape)
    return _compute([input, tensor1, tensor2], out,
                    lambda x, a, b: prims.add(x, prims.mul(to_dtype(prims.mul(to_dtype(a, c), v), w), b)), dtype=w)


@ltorch("torch.addcdiv", methods=("addcdiv",), aliases=_aliases("addcdiv"), elementwise=True)
def addcdiv(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: TensorOrNumber = 1):
    return _addc("addcdiv", input, tensor1, tensor2, value)


@addcdiv.decompose
def _(input, tensor1, tensor2, *, value=1):
    # as torch's kernel: input + value * tensor1 / tensor2, op by op in the compute dtype
    out = addcdiv.meta(input, tensor1, tensor2, value=value)
    v = _addc_value(value, opmath_dtype(out.dtype), out.shape)
    return _compute([input, tensor1, tensor2], out, lambda x, a, b: prims.add(x, prims.div(prims.mul(a, v), b)),
                    upcast=True)


# --------------------------------------------------------------------------------------------
# Activations (torch.nn.functional). inplace=True (and torch.relu_ and friends) is handled for
# every op with an `inplace` flag by OpDef.__call__: the op is recorded with inplace=False and its
# result assigned to the input.


@ltorch("torch.nn.functional.relu", methods=("relu",), aliases=_aliases("relu", extra=(F.relu,)), elementwise=True)
def relu(input: Tensor, inplace: Bool = False):
    _reject("relu", input.dtype, ("bool",), RuntimeError)
    return TensorProxy.like(input)


@relu.decompose
def _(input, inplace=False):
    zero = to_dtype(0, input.dtype)
    return prims.where(prims.lt(input, zero), zero, input)  # keeps nan, as clamp_min(x, 0) does


@ltorch("torch.nn.functional.gelu", aliases=(F.gelu,), elementwise=True)
def gelu(input: Tensor, *, approximate: Str = "none"):
    _reject("GeluKernelImpl", input.dtype, ("bool", "int"))
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")
    return TensorProxy.like(input)


@gelu.decompose
def _(input, *, approximate="none"):
    def fn(x):
        if approximate == "tanh":  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            inner = prims.mul(prims.add(x, prims.mul(prims.mul(prims.mul(x, x), x), 0.044715)),
                              math.sqrt(2 / math.pi))
            return prims.mul(prims.mul(x, 0.5), prims.add(prims.tanh(inner), 1.0))
        return prims.mul(prims.mul(x, 0.5), prims.add(prims.erf(prims.mul(x, math.sqrt(0.5))), 1.0))

    return _compute([input], gelu.meta(input, approximate=approximate), fn, upcast=True)


@ltorch("torch.nn.functional.silu", aliases=(F.silu,), elementwise=True)
def silu(input: Tensor, inplace: Bool = False):
    _reject("silu", input.dtype, ("bool", "int"))
    return TensorProxy.like(input)


@silu.decompose
def _(input, inplace=False):
    fn = lambda x: prims.div(x, prims.add(prims.exp(prims.neg(x)), 1.0))  # noqa: E731
    return _compute([input], silu.meta(input), fn, upcast=True)


@ltorch("torch.nn.functional.softplus", aliases=(F.softplus,), elementwise=True)
def softplus(input: Tensor, beta: Float = 1.0, threshold: Float = 20.0):
    _reject("softplus", input.dtype, ("bool", "int"))
    return TensorProxy.like(input)


@softplus.decompose
def _(input, beta=1.0, threshold=20.0):
    def fn(x):  # x * beta > threshold ? x : log1p(exp(x * beta)) / beta
        xb = prims.mul(x, float(beta))
        return prims.where(prims.gt(xb, float(threshold)), x, prims.div(prims.log1p(prims.exp(xb)), float(beta)))

    return _compute([input], softplus.meta(input), fn, widen=True)


@ltorch("torch.nn.functional.leaky_relu", aliases=(F.leaky_relu,), elementwise=True)
def leaky_relu(input: Tensor, negative_slope: Float = 0.01, inplace: Bool = False):
    _reject("leaky_relu", input.dtype, ("bool", "int"))
    return TensorProxy.like(input)


@leaky_relu.decompose
def _(input, negative_slope=0.01, inplace=False):
    fn = lambda x: prims.where(prims.gt(x, 0.0), x, prims.mul(x, float(negative_slope)))  # noqa: E731
    return _compute([input], leaky_relu.meta(input), fn, upcast=True)


@ltorch("torch.nn.functional.hardtanh", aliases=(F.hardtanh,), elementwise=True)
def hardtanh(input: Tensor, min_val: Float = -1.0, max_val: Float = 1.0, inplace: Bool = False):
    _reject("hardtanh", input.dtype, ("bool",), RuntimeError)
    if input.dtype is torch.uint8 and (min_val < 0 or max_val < 0):
        raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
    return TensorProxy.like(input)


@hardtanh.decompose
def _(input, min_val=-1.0, max_val=1.0, inplace=False):
    def fn(x):
        x = prims.maximum(x, as_tensor(to_dtype(min_val, x.dtype), x))
        return prims.minimum(x, as_tensor(to_dtype(max_val, x.dtype), x))

    return _compute([input], hardtanh.meta(input), fn)


@ltorch("torch.nn.functional.relu6", aliases=(F.relu6,), elementwise=True)
def relu6(input: Tensor, inplace: Bool = False):
    """hardtanh(input, 0, 6)."""
    return hardtanh.meta(input, 0.0, 6.0)


relu6.decompose(lambda input, inplace=False: hardtanh(input, 0.0, 6.0))


def _float_activation(name, fn, *params, kernel=None, widen=False):
    """An activation of floating-point inputs (float16/bfloat16 computed in float32), with the
    parameters `params` ((name, kind, default) before `inplace`); fn(x, **params) in prims."""
    def meta(input, **kw):
        _reject(kernel or f"{name}_cpu", input.dtype, ("bool", "int"))
        return TensorProxy.like(input)

    sig = [inspect.Parameter("input", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Tensor)]
    sig += [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=k, default=d) for n, k, d in params]
    sig.append(inspect.Parameter("inplace", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Bool, default=False))
    meta.__signature__ = inspect.Signature(sig)
    meta.__name__ = name
    f = getattr(F, name)
    op = ltorch(f"torch.nn.functional.{name}", aliases=(f,), elementwise=True)(meta)

    @op.decompose
    def _(input, *args, inplace=False, **kw):
        kw.update(zip((n for n, _, _ in params), args))
        return _compute([input], TensorProxy.like(input), lambda x: fn(x, **kw), upcast=True, widen=widen)

    return op


def _elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    """torch's elu kernel: x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale."""
    neg = prims.mul(prims.expm1(prims.mul(x, float(input_scale)) if input_scale != 1 else x), float(alpha * scale))
    return prims.where(prims.le(x, 0.0), neg, prims.mul(x, float(scale)) if scale != 1 else x)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _relu6_shifted(x):
    """min(max(x + 3, 0), 6)"""
    return prims.minimum(prims.maximum(prims.add(x, 3.0), as_tensor(0.0, x)), as_tensor(6.0, x))


elu = _float_activation("elu", lambda x, alpha: _elu(x, alpha), ("alpha", Float, 1.0), kernel="elu_cpu", widen=True)
selu = _float_activation("selu", lambda x: _elu(x, _SELU_ALPHA, _SELU_SCALE), kernel="elu_cpu", widen=True)
celu = _float_activation("celu", lambda x, alpha: _elu(x, alpha, 1.0, 1.0 / alpha), ("alpha", Float, 1.0),
                         kernel="elu_cpu", widen=True)
mish = _float_activation("mish", lambda x: prims.mul(x, prims.tanh(prims.log1p(prims.exp(x)))), widen=True)
hardsigmoid = _float_activation("hardsigmoid", lambda x: prims.div(_relu6_shifted(x), 6.0))
hardswish = _float_activation("hardswish", lambda x: prims.div(prims.mul(x, _relu6_shifted(x)), 6.0))


@ltorch("torch.nn.functional.threshold", aliases=(F.threshold, torch.threshold), elementwise=True)
def threshold(input: Tensor, threshold: Float, value: Float, inplace: Bool = False):
    """input <= threshold ? value : input (nan stays)."""
    _reject("threshold_cpu", input.dtype, ("bool",))
    return TensorProxy.like(input)


@threshold.decompose
def _(input, threshold, value, inplace=False):
    return _compute([input], TensorProxy.like(input),
                    lambda x: prims.where(prims.le(x, to_dtype(threshold, x.dtype)),
                                          as_tensor(to_dtype(value, x.dtype), x), x))


# The VJPs of the piecewise-linear activations as eager's backward ops (their rules:
# ops/vjp/elementwise.py). As ops, a gradient of their gradient is eager's too: torch's formulas
# give the input a zero gradient (`self: zeros_like(grad)`), not none, so a bias before a ReLU
# gets zeros from a gradient penalty alone (an optimizer steps it, as eager's).


@ltorch("torch.ops.aten.threshold_backward",
        aliases=(torch.ops.aten.threshold_backward, torch.ops.aten.threshold_backward.default), elementwise=True)
def threshold_backward(grad_output: Tensor, input: Tensor, threshold: Float):
    """grad_output where input > threshold, else 0 (relu's with its result as input)."""
    return elementwise(grad_output, input)


@threshold_backward.decompose
def _(grad_output, input, threshold):
    return _compute([grad_output, input], elementwise(grad_output, input),
                    lambda g, x: prims.where(prims.le(x, to_dtype(threshold, x.dtype)), as_tensor(0.0, g), g))


@ltorch("torch.ops.aten.leaky_relu_backward",
        aliases=(torch.ops.aten.leaky_relu_backward, torch.ops.aten.leaky_relu_backward.default), elementwise=True)
def leaky_relu_backward(grad_output: Tensor, input: Tensor, negative_slope: Float, self_is_result: Bool):
    """grad_output where input > 0, else grad_output * negative_slope."""
    return elementwise(grad_output, input)


@leaky_relu_backward.decompose
def _(grad_output, input, negative_slope, self_is_result):
    return _compute([grad_output, input], elementwise(grad_output, input),
                    lambda g, x: prims.where(prims.gt(x, 0.0), g, prims.mul(g, float(negative_slope))), upcast=True)


@ltorch("torch.ops.aten.hardtanh_backward",
        aliases=(torch.ops.aten.hardtanh_backward, torch.ops.aten.hardtanh_backward.default), elementwise=True)
def hardtanh_backward(grad_output: Tensor, input: Tensor, min_val: Float, max_val: Float):
    """0 where input <= min_val or input >= max_val (the bounds too), else grad_output."""
    return elementwise(grad_output, input)


@hardtanh_backward.decompose
def _(grad_output, input, min_val, max_val):
    def fn(g, x):
        out = prims.bitwise_or(prims.le(x, to_dtype(min_val, x.dtype)), prims.ge(x, to_dtype(max_val, x.dtype)))
        return prims.where(out, as_tensor(0.0, g), g)
    return _compute([grad_output, input], elementwise(grad_output, input), fn)
