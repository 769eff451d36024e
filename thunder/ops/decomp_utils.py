"""Helpers that decompositions share: make broadcasting and type promotion explicit in prims."""
import contextlib

import torch

from thunder.core import dtypes, symbols
from thunder.core import trace as tracing
from thunder.core.numbers import NumberProxy
from thunder.ops import prims
from thunder.ops.meta_utils import broadcast_shapes, is_tensor
from thunder.ops.meta_utils import canonical_dims, reduced_shape


def to_dtype(a, dtype):
    if is_tensor(a):
        return a if a.dtype is dtype else prims.convert_element_type(a, dtype)
    if isinstance(a, NumberProxy) and dtype is not None and not dtype.is_complex and a.python_type in (
            (bool, int, float) if dtype.is_floating_point else (bool,) if dtype is torch.bool else (bool, int)):
        return a  # a runtime number of the dtype's kind or a lower one: the prim converts it
    kind = float if dtype is not None and dtype.is_floating_point else int if (
        dtype is not None and dtype is not torch.bool and not dtype.is_complex) else None
    if kind is not None and symbols.is_symbolic(a):
        return symbols.convert(a, kind)  # (a size keeps its expression: dialects/symbolic_lift.py)
    return kind(a) if kind is not None else a


def expand_to(a, shape):
    """broadcast_in_dim a (right-aligned, numpy rules) to shape; numbers pass through."""
    if not is_tensor(a) or tuple(a.shape) == tuple(shape):
        return a
    offset = len(shape) - a.ndim
    return prims.broadcast_in_dim(a, tuple(shape), tuple(range(offset, len(shape))))


def elementwise_args(*args, compute_dtype=None):
    """Broadcast the tensor args to one shape and convert everything to one dtype (the promoted
    dtype unless compute_dtype is given). Returns (converted args, shape, dtype)."""
    shape = broadcast_shapes(*(a.shape for a in args if is_tensor(a)))
    dtype = compute_dtype or dtypes.promote(*args)
    return [expand_to(to_dtype(a, dtype), shape) for a in args], shape, dtype


def opmath_dtype(dtype):
    """The dtype torch's kernels compute float16/bfloat16 math in (float32); others compute as is."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def fma_dtype(dtype):
    """The dtype a decomposition computes in where torch's kernel rounds a * b + c once (a fused
    multiply-add; in float32 for float16/bfloat16): float64 for the float types up to float32 (the
    product and the sum of their values, rounded to float64, then once to the dtype), else dtype."""
    return torch.float64 if dtype in (torch.float16, torch.bfloat16, torch.float32) else dtype


@contextlib.contextmanager
def widened(dtype):
    """Around a decomposition computing in fma_dtype(dtype): where that widens float32 (float16,
    bfloat16) to float64, the ops it records are marked (dialects/emit.py WIDENED): their float64
    math only has to be accurate to well below float32's rounding (the kernels' polynomials,
    lowering/linalg/approx.py, are; unmarked float64 math must be float64-accurate)."""
    ctx = tracing.current()
    if ctx is None or fma_dtype(dtype) is dtype or ctx.widened:
        yield
        return
    ctx.widened = True
    try:
        yield
    finally:
        ctx.widened = False


def as_tensor(x, like):
    """x as a tensor of like's shape, dtype and device (prims such as maximum take no numbers)."""
    if is_tensor(x):
        return x
    return prims.full(tuple(like.shape), to_dtype(x, like.dtype), dtype=like.dtype, device=like.device)


def reduction_dims(dim, ndim):
    """The dims a reduction over `dim` (None or () for all) reduces, without dims a 0-d tensor lacks."""
    return tuple(d for d in canonical_dims(dim, ndim) if d < ndim)


def keep_dims(a, shape, dims):
    """Reshape a reduction result to the keepdim=True shape (size 1 at the reduced dims)."""
    kept = reduced_shape(shape, dims, True)
    return a if tuple(a.shape) == kept else prims.reshape(a, kept)
