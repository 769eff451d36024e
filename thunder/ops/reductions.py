"""Reduction ltorch ops: sum, mean, prod, amax/amin, max/min, argmax/argmin, logsumexp, var/std."""
import math

import torch

from thunder.core import dtypes, symbols
from thunder.core.proxies import TensorProxy
from thunder.ops import prims
from thunder.ops.decomp_utils import keep_dims, opmath_dtype, reduction_dims, to_dtype
from thunder.ops.meta_utils import canonical_dim, canonical_dims, is_tensor, reduced_shape
from thunder.ops.registry import Bool, DType, Dims, Float, Int, OpDef, Tensor, ltorch
from thunder.ops.elementwise import abs_, add, eq, exp, log, maximum, minimum, sub, where


def _aliases(name):
    return (getattr(torch, name), getattr(torch.Tensor, name))


def _result(input, dim, keepdim, dtype):
    dims = canonical_dims(dim, input.ndim)
    return TensorProxy(reduced_shape(input.shape, dims, keepdim), dtype, input.device)


def _accumulate_dtype(input, dtype):
    """sum and prod: integers and bools accumulate in int64 unless dtype says otherwise."""
    if dtype is not None:
        return dtype
    return input.dtype if input.dtype.is_floating_point or input.dtype.is_complex else torch.int64


def _check_nonempty(name, input, dim, full_exc=RuntimeError):
    if input.numel() != 0:
        return
    if dim is None or dim == ():
        raise full_exc(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                       "Specify the reduction dim with the 'dim' argument.")
    for d in canonical_dims(dim, input.ndim):
        if input.ndim and input.shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _reduce(prim, x, dim, keepdim):
    """prim over dim (None or (): all dims), keeping reduced dims as size 1 when keepdim."""
    dims = reduction_dims(dim, x.ndim)
    out = prim(x, dims)
    return keep_dims(out, x.shape, dims) if keepdim else out


def _count(x, dim):
    return math.prod(x.shape[d] for d in reduction_dims(dim, x.ndim))


# --------------------------------------------------------------------------------------------
# any, all: bool results; decomposed as comparisons of counts


def _any_all(name):
    def meta(input: Tensor, dim: Dims | None = None, keepdim: Bool = False):
        return _result(input, dim, keepdim, torch.uint8 if input.dtype is torch.uint8 else torch.bool)

    meta.__name__ = name
    op = ltorch(f"torch.{name}", methods=(name,), aliases=_aliases(name))(meta)

    @op.decompose
    def _(input, dim=None, keepdim=False):
        nonzero = prims.convert_element_type(prims.ne(input, 0 if not input.dtype.is_floating_point else 0.0),
                                             torch.int64)
        count = _reduce(prims.sum, nonzero, dim, keepdim)
        out = prims.gt(count, 0) if name == "any" else prims.eq(count, _count(input, dim))
        return to_dtype(out, torch.uint8) if input.dtype is torch.uint8 else out

    return op


any_ = _any_all("any")
all_ = _any_all("all")


# --------------------------------------------------------------------------------------------
# sum, prod, mean


@ltorch("torch.sum", methods=("sum",), aliases=_aliases("sum"))
def sum_(input: Tensor, dim: Dims | None = None, keepdim: Bool = False, *, dtype: DType | None = None):
    return _result(input, dim, keepdim, _accumulate_dtype(input, dtype))


@sum_.decompose
def _(input, dim=None, keepdim=False, *, dtype=None):
    return _reduce(prims.sum, to_dtype(input, _accumulate_dtype(input, dtype)), dim, keepdim)


@ltorch("impl.prod", methods=("prod",), aliases=_aliases("prod"))
def prod(input: Tensor, dim: Int | None = None, keepdim: Bool = False, *, dtype: DType | None = None):
    return _result(input, dim, keepdim, _accumulate_dtype(input, dtype))


@prod.decompose
def _(input, dim=None, keepdim=False, *, dtype=None):
    return _reduce(prims.prod, to_dtype(input, _accumulate_dtype(input, dtype)), dim, keepdim)


@ltorch("torch.mean", methods=("mean",), aliases=_aliases("mean"))
def mean(input: Tensor, dim: Dims | None = None, keepdim: Bool = False, *, dtype: DType | None = None):
    out = dtype or input.dtype
    if not (out.is_floating_point or out.is_complex):
        what = "Input dtype" if dtype is None else "Optional dtype"
        raise RuntimeError("mean(): could not infer output dtype. "
                           f"{what} must be either a floating point or complex dtype. Got: {out}")
    return _result(input, dim, keepdim, out)


@mean.decompose
def _(input, dim=None, keepdim=False, *, dtype=None):
    # as torch: float16/bfloat16 sum and divide in float32
    out = dtype or input.dtype
    x = to_dtype(to_dtype(input, out), opmath_dtype(out))
    s = _reduce(prims.sum, x, dim, keepdim)
    return to_dtype(prims.div(s, symbols.to_float(_count(x, dim))), out)


# --------------------------------------------------------------------------------------------
# amax, amin, max, min, argmax, argmin


def _extremum(name, prim):
    def meta(input: Tensor, dim: Dims = (), keepdim: Bool = False):
        _check_nonempty(name, input, dim)
        return _result(input, dim, keepdim, input.dtype)

    meta.__name__ = name
    op = ltorch(f"torch.{name}", methods=(name,), aliases=_aliases(name))(meta)
    op.decompose(lambda input, dim=(), keepdim=False: _reduce(prim, input, dim, keepdim))
    return op


amax = _extremum("amax", prims.amax)
amin = _extremum("amin", prims.amin)


def _reversed_order(x):
    """A tensor whose order is the reverse of x's (so argmin(x) == argmax of it): -x on floats
    (nan stays nan), ~x on integers and bools (no overflow)."""
    return prims.neg(x) if x.dtype.is_floating_point else prims.bitwise_not(x)


def _arg(x, dim, keepdim, smallest):
    if x.dtype is torch.bool:
        x = to_dtype(x, torch.uint8)
    if smallest:
        x = _reversed_order(x)
    if dim is None or x.ndim == 0:
        idx = prims.argmax(prims.reshape(x, (x.numel(),)), 0)
        return prims.reshape(idx, (1,) * x.ndim) if keepdim and x.ndim else idx
    d = canonical_dim(dim, x.ndim)
    idx = prims.argmax(x, d)
    return keep_dims(idx, x.shape, (d,)) if keepdim else idx


def _argextremum(name, smallest):
    def meta(input: Tensor, dim: Int | None = None, keepdim: Bool = False):
        if input.dtype is torch.bool:
            raise RuntimeError(f"{name}(): does not support bool input")
        _check_nonempty(name, input, dim, full_exc=IndexError)
        return _result(input, dim, keepdim, torch.int64)

    meta.__name__ = name
    op = ltorch(f"torch.{name}", methods=(name,), aliases=_aliases(name))(meta)
    op.decompose(lambda input, dim=None, keepdim=False: _arg(input, dim, keepdim, smallest))
    return op


argmax = _argextremum("argmax", False)
argmin = _argextremum("argmin", True)


# --------------------------------------------------------------------------------------------
# logsumexp


@ltorch("torch.logsumexp", methods=("logsumexp",), aliases=_aliases("logsumexp"))
def logsumexp(input: Tensor, dim: Dims, keepdim: Bool = False):
    """log(sum(exp(input))) over dim; integers and bools give the default float dtype (as torch)."""
    if dim == () and input.ndim:
        raise RuntimeError(f"logsumexp(): dim=() reduces no dim of a {input.ndim}-d tensor; name the dims to reduce")
    dtype = input.dtype if input.dtype.is_floating_point else torch.get_default_dtype()
    return _result(input, dim, keepdim, dtype)


logsumexp.torch_composite = True  # torch's runs amax, sub, exp, sum, log and add: a kernel each


@logsumexp.decompose
def _(input, dim, keepdim=False):
    # as torch's: max + log(sum(exp(x - max))), the max taken as 0 where it is +-inf (no inf - inf)
    x = input if input.dtype.is_floating_point else to_dtype(input, torch.get_default_dtype())
    dims = reduction_dims(dim, x.ndim)
    if _count(x, dims) == 0:  # log(0)
        return prims.full(reduced_shape(x.shape, dims, keepdim), -math.inf, dtype=x.dtype, device=x.device)
    m = amax(x, dims, True)
    m = where(eq(abs_(m), math.inf), 0.0, m)
    out = add(log(sum_(exp(sub(x, m)), dims, True)), m)
    return out if keepdim or not dims else prims.reshape(out, reduced_shape(x.shape, dims, False))


class _ExtremumOp(OpDef):
    """torch.max(a, b) of two tensors is torch.maximum (and min minimum): the overload of the
    reduction's second argument."""

    def __call__(self, *args, **kwargs):
        other = args[1] if len(args) > 1 else kwargs.get("other")
        if is_tensor(other):
            rest = {k: v for k, v in kwargs.items() if k != "other"}
            return (maximum if self.name == "max" else minimum)(args[0], other, **rest)
        return super().__call__(*args, **kwargs)


def _max_min(name, prim, smallest):
    """torch.max(x) (a full reduction), torch.max(x, dim, keepdim) -> (values, indices) and
    torch.max(x, other) (torch.maximum)."""
    def meta(input: Tensor, dim: Int | None = None, keepdim: Bool = False):
        if dim is None:
            if keepdim:
                raise TypeError(f"{name}(): keepdim needs dim")
            _check_nonempty(name, input, None)
            return TensorProxy((), input.dtype, input.device)
        _check_nonempty(name, input, dim)
        return _result(input, dim, keepdim, input.dtype), _result(input, dim, keepdim, torch.int64)

    def decomposition(input, dim=None, keepdim=False):
        if dim is None:
            return prim(input, reduction_dims(None, input.ndim))
        return _reduce(prim, input, (dim,), keepdim), _arg(input, dim, keepdim, smallest)

    meta.__name__ = name
    meta.__doc__ = _max_min.__doc__.replace("max", name)
    op = ltorch(f"impl.{name}_reduction", methods=(name,), aliases=_aliases(name), returns_sequence=True,
                name=name, return_type=getattr(torch.return_types, name))(meta)
    op.__class__ = _ExtremumOp
    op.decompose(decomposition)
    return op


max_ = _max_min("max", prims.amax, False)
min_ = _max_min("min", prims.amin, True)


# --------------------------------------------------------------------------------------------
# topk, sort, argsort: no decomposition (prims do not sort); the gradient goes back to the
# elements the indices name


def _sorted_shape(input, dim, k=None):
    d = canonical_dim(dim, input.ndim)
    shape = list(input.shape)
    if k is not None:
        if not 0 <= k <= (shape[d] if shape else 1):
            raise RuntimeError("selected index k out of range")
        if shape:
            shape[d] = k
    return tuple(shape)


@ltorch("torch.topk", methods=("topk",), aliases=_aliases("topk"), returns_sequence=True,
        return_type=torch.return_types.topk)
def topk(input: Tensor, k: Int, dim: Int = -1, largest: Bool = True, sorted: Bool = True):
    """The k largest (smallest) elements along dim and their indices."""
    if input.dtype is torch.bool:
        raise RuntimeError("topk does not support bool dtypes on CPU")
    shape = _sorted_shape(input, dim, k)
    return TensorProxy(shape, input.dtype, input.device), TensorProxy(shape, torch.int64, input.device)


@ltorch("impl.sort", methods=("sort",), aliases=_aliases("sort"), returns_sequence=True,
        return_type=torch.return_types.sort)
def sort(input: Tensor, dim: Int = -1, descending: Bool = False, *, stable: Bool = False):
    shape = _sorted_shape(input, dim)
    return TensorProxy(shape, input.dtype, input.device), TensorProxy(shape, torch.int64, input.device)


@ltorch("impl.argsort", methods=("argsort",), aliases=_aliases("argsort"))
def argsort(input: Tensor, dim: Int = -1, descending: Bool = False, *, stable: Bool = False):
    return TensorProxy(_sorted_shape(input, dim), torch.int64, input.device)


# --------------------------------------------------------------------------------------------
# cumsum: no decomposition (prims have no scan; sums in another order would round differently)


@ltorch("torch.cumsum", methods=("cumsum",), aliases=_aliases("cumsum"))
def cumsum(input: Tensor, dim: Int, *, dtype: DType | None = None):
    """Running sums along dim (integers and bools in int64 unless dtype says otherwise)."""
    canonical_dim(dim, input.ndim)
    return TensorProxy(input.shape, _accumulate_dtype(input, dtype), input.device)


# --------------------------------------------------------------------------------------------
# var, std


def _var_std(name, sqrt):
    def meta(input: Tensor, dim: Dims | None = None, unbiased: Bool = True, keepdim: Bool = False, *,
             correction: Float | None = None):
        if not (input.dtype.is_floating_point or input.dtype.is_complex):
            raise RuntimeError("std and var only support floating point and complex dtypes")
        # (of a complex tensor: real, the mean of |x - mean|^2)
        return _result(input, dim, keepdim, dtypes.real_dtype(input.dtype))

    def decomposition(input, dim=None, unbiased=True, keepdim=False, *, correction=None):
        if input.dtype.is_complex:  # (prims hold no |z|^2; torch runs it: no executor fuses complex tensors)
            raise NotImplementedError(f"thunder: {name} of a complex tensor has no decomposition into prims")
        # two passes in float64 (torch accumulates in double too)
        c = int(unbiased) if correction is None else correction
        x = to_dtype(input, torch.float64)
        dims = reduction_dims(dim, x.ndim)
        n = _count(x, dim)
        m = prims.div(prims.sum(x, dims), symbols.to_float(n))
        m = prims.broadcast_in_dim(m, tuple(x.shape), tuple(i for i in range(x.ndim) if i not in dims))
        d = prims.sub(x, m)
        v = prims.div(prims.sum(prims.mul(d, d), dims), symbols.to_float(max(n - c, 0)))
        v = prims.sqrt(v) if sqrt else v
        v = keep_dims(v, x.shape, dims) if keepdim else v
        return to_dtype(v, input.dtype)

    meta.__name__ = name
    op = ltorch(f"impl.{name}", methods=(name,), aliases=_aliases(name))(meta)
    op.decompose(decomposition)
    return op


var = _var_std("var", False)
std = _var_std("std", True)
