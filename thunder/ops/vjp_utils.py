"""Helpers that the ltorch ops' VJP rules share (see OpDef.vjp and lowering/autograd.py).

A rule gets the output cotangent g and returns a cotangent per tensor parameter with exactly that
parameter's shape and dtype: `grad_for(x, g)` undoes broadcasting (sum_to_shape) and type
promotion (converts back to x's dtype), and gives None for numbers and integer/bool tensors.

The helpers record ltorch ops (so the backward runs as torch-level calls)."""
import math

import torch

from thunder.ops import fallback, prims
from thunder.ops.creation import to
from thunder.ops.decomp_utils import reduction_dims
from thunder.ops.meta_utils import differentiable, is_tensor, reduced_shape  # noqa: F401  (differentiable: the rules use it from here)
from thunder.ops.reductions import sum_
from thunder.ops.shape import expand, reshape, transpose


def sum_to_shape(g, shape):
    """Undo broadcasting: sum g over its leading dims and over the dims where `shape` has size 1
    and g does not, so that the result has `shape`."""
    shape = tuple(shape)
    # (ranks first: a tuple comparison compares sizes until one differs, and symbolic sizes
    # record each comparison as a decision the program holds under: B != C for a bias)
    if len(g.shape) == len(shape) and tuple(g.shape) == shape:
        return g
    lead = g.ndim - len(shape)
    if lead < 0:
        raise ValueError(f"sum_to_shape: cannot reduce shape {tuple(g.shape)} to {shape}")
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    if dims:
        g = sum_(g, dims)
    return reshape(g, shape) if tuple(g.shape) != shape else g


def convert(g, dtype):
    """g in dtype (nothing recorded when it already is); a complex g of a real value: its real
    part, as torch's autograd takes it (a cast would too, with a warning eager does not give)."""
    if g.dtype == dtype:
        return g
    if g.dtype.is_complex and not dtype.is_complex:
        g = fallback.call(torch.real, g)
    return g if g.dtype == dtype else to(g, dtype)


def grad_for(x, g):
    """The cotangent of x from g (the cotangent of a result x was broadcast and promoted into):
    None for numbers and non-differentiable tensors, else g summed to x's shape in x's dtype."""
    if g is None or not differentiable(x):
        return None
    return convert(sum_to_shape(g, x.shape), x.dtype)


def zeros_like(x, dtype=None):
    dtype = dtype or x.dtype
    return prims.full(tuple(x.shape), 0.0 if dtype.is_floating_point or dtype.is_complex else 0, dtype=dtype,
                      device=x.device)


def zeros(shape, dtype, device):
    return prims.full(tuple(shape), 0.0 if dtype.is_floating_point else 0, dtype=dtype, device=device)


def upcast(x):
    """float16/bfloat16 values in float32 (as torch's backward kernels compute); others as they are."""
    if is_tensor(x) and x.dtype in (torch.float16, torch.bfloat16):
        return convert(x, torch.float32)
    return x


def unreduce(g, input, dim, keepdim):
    """Broadcast the cotangent of a reduction of `input` over `dim` (None or (): all) back to
    input's shape."""
    dims = reduction_dims(dim, input.ndim)
    if not keepdim and dims:
        g = reshape(g, reduced_shape(input.shape, dims, True))
    if tuple(g.shape) != tuple(input.shape):
        g = expand(g, tuple(input.shape))
    return g


def reduction_count(input, dim):
    """How many elements a reduction over `dim` combines into each result."""
    return math.prod(input.shape[d] for d in reduction_dims(dim, input.ndim))


def inverse_permutation(perm):
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return tuple(inverse)


def fill_none(gs, outs):
    """The cotangents of a sequence of results, zeros where a result got none."""
    return tuple(g if g is not None else zeros_like(o) for g, o in zip(gs, outs))


def rows(x, k):
    """x as a matrix of rows of length k (its leading dims folded); as is when already 2-D."""
    return x if x.ndim == 2 and x.shape[1] == k else reshape(x, (x.numel() // k if k else 0, k))


def mT(x):
    """x with its last two dims swapped."""
    return transpose(x, -2, -1)
