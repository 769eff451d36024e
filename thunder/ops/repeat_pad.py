"""Repeating and padding ltorch ops: repeat, repeat_interleave, flip, roll, diff, tril/triu and F.pad.

They decompose into prims (slices, cat, broadcasts, gathers, where)."""

import functools
import inspect

import torch

from thunder.core import trace as tracing
from thunder.core.proxies import data_dependent, TensorProxy
from thunder.ops import prims, registry
from thunder.ops.decomp_utils import as_tensor, expand_to, to_dtype
from thunder.ops.meta_utils import canonical_dim, canonical_dims, is_tensor
from thunder.ops.registry import Dims, Int, Ints, ltorch, Number, OpDef, Str, Tensor, TensorOrNumber
from thunder.ops.shape import _like, _reshape, _slice_dim, reshape, t

T = torch.Tensor


# --------------------------------------------------------------------------------------------
# repeating, flipping, rolling, differences, triangles

def _repeat_sizes(input, repeats):
    """input's shape with leading 1s to the length of repeats."""
    if len(repeats) < input.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    sizes = (1,) * (len(repeats) - input.ndim) + tuple(input.shape)
    out = [r * s for r, s in zip(repeats, sizes)]
    if any(r < 0 for r in repeats):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(out)}: {out}")
    return sizes, tuple(out)


@ltorch("torch.Tensor.repeat", methods=("repeat",), varargs="repeats", aliases=(T.repeat,))
def repeat(input: Tensor, repeats: Ints):
    """input tiled repeats[i] times along dim i (leading repeats add dims)."""
    return _like(input, _repeat_sizes(input, repeats)[1])


@repeat.decompose
def _(input, repeats):
    sizes, out = _repeat_sizes(input, repeats)
    x = _reshape(input, sizes)
    wide = tuple(v for r, s in zip(repeats, sizes) for v in (r, s))  # (r0, s0, r1, s1, ...)
    return _reshape(prims.broadcast_in_dim(x, wide, tuple(range(1, len(wide), 2))), out)


def _repeat_interleave_shape(input, repeats, dim, output_size):
    if is_tensor(repeats):
        if repeats.ndim > 1 or repeats.dtype not in (torch.int64, torch.int32):
            raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
        if output_size is None:
            data_dependent("torch.repeat_interleave with a tensor of repeats",
                           "pass output_size=..., or repeats as a Python int")
        n = output_size
    else:
        if repeats < 0:
            raise RuntimeError("Repeats must be non-negative")
        n = None
    if dim is None:
        return (n if n is not None else input.numel() * repeats,)
    d = canonical_dim(dim, input.ndim)
    shape = list(input.shape) or [1]
    shape[d] = n if n is not None else shape[d] * repeats
    return tuple(shape)


class _RepeatInterleaveOp(OpDef):
    """torch.repeat_interleave(repeats, output_size=n): the indices 0.. repeated repeats[i] times."""

    def __call__(self, *args, **kwargs):
        if tracing.values_known() and kwargs.get("output_size") is None:  # tensor repeats: their total is read
            bound = inspect.signature(repeat_interleave.meta).bind_partial(*args, **kwargs)
            r = bound.arguments.get("repeats", bound.arguments.get("input"))
            if is_tensor(r) and r.dtype in (torch.int64, torch.int32) and r.ndim <= 1:
                x, dim = bound.arguments.get("input"), bound.arguments.get("dim")
                if "repeats" in bound.arguments and r.numel() == 1:  # one count for every element
                    size = x.numel() if dim is None else (x.shape[canonical_dim(dim, x.ndim)] if x.ndim else 1)
                    total = reshape(r, ()) * size
                else:
                    total = r.sum()
                kwargs = {**kwargs, "output_size": tracing.read_int(total, f"the repeats {r.name}",
                                                                    "the result size of torch.repeat_interleave")}
        if len(args) == 1 and "repeats" not in kwargs:
            r = args[0]
            if kwargs.get("output_size") is None:
                _repeat_interleave_shape(r, r, None, None)  # the data-dependent error
            # (torch.arange: ops/creation.py, which imports this module, defines it)
            arange = registry.OPS["ltorch.arange"]
            return super().__call__(arange(r.shape[0] if r.ndim else 1, device=r.device), r, **kwargs)
        return super().__call__(*args, **kwargs)


@ltorch("torch.repeat_interleave", methods=("repeat_interleave",),
        aliases=(torch.repeat_interleave, T.repeat_interleave))
def repeat_interleave(input: Tensor, repeats: TensorOrNumber, dim: Int | None = None, *,
                      output_size: Int | None = None):
    """Each element (each slice along dim; of the flattened input without dim) repeated. Tensor
    repeats need output_size (else the result's size depends on their values)."""
    return _like(input, _repeat_interleave_shape(input, repeats, dim, output_size))


repeat_interleave.__class__ = _RepeatInterleaveOp


@repeat_interleave.decompose
def _(input, repeats, dim=None, *, output_size=None):
    shape = _repeat_interleave_shape(input, repeats, dim, output_size)
    x = _reshape(input, (input.numel(),)) if dim is None else _reshape(input, input.shape or (1,))
    d = 0 if dim is None else canonical_dim(dim, x.ndim)
    if is_tensor(repeats):
        return _reshape(prims.take(x, d, _repeated_indices(repeats, x.shape[d], output_size)), shape)
    wide = (*x.shape[:d + 1], repeats, *x.shape[d + 1:])
    x = prims.broadcast_in_dim(x, wide, tuple(i for i in range(len(wide)) if i != d + 1))
    return _reshape(x, shape)


def _repeated_indices(repeats, n, length):
    """0..n-1, index k repeated repeats[k] times, as `length` int64 indices: index j is the number
    of k whose running total of repeats is <= j (integer counts, so exact)."""
    dev = repeats.device
    r = prims.convert_element_type(repeats if repeats.ndim else prims.reshape(repeats, (1,)), torch.int64)
    r = prims.broadcast_in_dim(r, (n,), (0,)) if r.shape[0] != n else r
    k = prims.iota(n, start=0, step=1, dtype=torch.int64, device=dev)
    upto = prims.le(prims.broadcast_in_dim(k, (n, n), (1,)), prims.broadcast_in_dim(k, (n, n), (0,)))  # k' <= k
    zeros = prims.full((n, n), 0, dtype=torch.int64, device=dev)
    totals = prims.sum(prims.where(upto, prims.broadcast_in_dim(r, (n, n), (1,)), zeros), (1,))
    j = prims.iota(length, start=0, step=1, dtype=torch.int64, device=dev)
    passed = prims.le(prims.broadcast_in_dim(totals, (length, n), (1,)), prims.broadcast_in_dim(j, (length, n), (0,)))
    return prims.sum(prims.convert_element_type(passed, torch.int64), (1,))


def _flip_dims(input, dims):
    return tuple(d for d in canonical_dims(tuple(dims), input.ndim) if d < input.ndim)


@ltorch("torch.flip", methods=("flip",), varargs="dims", aliases=(torch.flip, T.flip))
def flip(input: Tensor, dims: Ints):
    _flip_dims(input, dims)
    return _like(input, input.shape)


@flip.decompose
def _(input, dims):
    x = input
    for d in _flip_dims(input, dims):
        n = x.shape[d]
        if n > 1:
            x = prims.take(x, d, prims.iota(n, start=n - 1, step=-1, dtype=torch.int64, device=x.device))
    return x


def _roll_pairs(input, shifts, dims):
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(f"`shifts` required to be of size 1 when `dims` is not specified, got "
                               f"{len(shifts)}")
        return shifts, None
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    return shifts, tuple(canonical_dim(d, input.ndim) for d in dims)


@ltorch("torch.roll", methods=("roll",), aliases=(torch.roll, T.roll))
def roll(input: Tensor, shifts: Dims, dims: Dims | None = None):
    """Elements shifted along dims (of the flattened input without dims), wrapping around."""
    _roll_pairs(input, shifts, dims)
    return _like(input, input.shape)


@roll.decompose
def _(input, shifts, dims=None):
    shifts, dims = _roll_pairs(input, shifts, dims)
    x = input if dims is not None else _reshape(input, (input.numel(),))
    for shift, d in zip(shifts, dims if dims is not None else (0,)):
        n = x.shape[d]
        s = shift % n if n else 0
        if s:
            x = prims.cat((_slice_dim(x, d, n - s, n), _slice_dim(x, d, 0, n - s)), d)
    return _reshape(x, input.shape)


def _diff_check(input, n, dim, prepend, append):
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    d = canonical_dim(dim, input.ndim)
    for t in (prepend, append):
        if t is None:
            continue
        if t.ndim != input.ndim:
            raise RuntimeError("diff expects prepend or append to be the same dimension as input")
        for i in range(input.ndim):
            if i != d and t.shape[i] != input.shape[i]:
                raise RuntimeError(f"diff expects the shape of tensor to prepend or append to match that of input "
                                   f"except along the differencing dimension; input.size({i}) = {input.shape[i]}, "
                                   f"but got tensor.size({i}) = {t.shape[i]}")
    return d


@ltorch("torch.diff", methods=("diff",), aliases=(torch.diff, T.diff))
def diff(input: Tensor, n: Int = 1, dim: Int = -1, prepend: Tensor | None = None, append: Tensor | None = None):
    """The n-th forward difference along dim (!= for bool), of input with prepend/append joined."""
    d = _diff_check(input, n, dim, prepend, append)
    parts = [t for t in (prepend, input, append) if t is not None]
    shape = list(input.shape)
    shape[d] = max(sum(t.shape[d] for t in parts) - n, 0) if n else shape[d]
    return TensorProxy(shape, functools.reduce(torch.promote_types, [t.dtype for t in parts]), input.device)


@diff.decompose
def _(input, n=1, dim=-1, prepend=None, append=None):
    d = _diff_check(input, n, dim, prepend, append)
    if n == 0:
        return input
    out = diff.meta(input, n, dim, prepend, append)
    parts = [to_dtype(t, out.dtype) for t in (prepend, input, append) if t is not None]
    x = parts[0] if len(parts) == 1 else prims.cat(tuple(parts), d)
    for _ in range(n):
        m = x.shape[d]
        if m <= 1:
            return prims.full(tuple(out.shape), to_dtype(0, out.dtype), dtype=out.dtype, device=out.device)
        hi, lo = _slice_dim(x, d, 1, m), _slice_dim(x, d, 0, m - 1)
        x = prims.ne(hi, lo) if x.dtype is torch.bool else prims.sub(hi, lo)
    return x


def _triangle(name, keep):
    def meta(input: Tensor, diagonal: Int = 0):
        if input.ndim < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        return _like(input, input.shape)

    def decomposition(input, diagonal=0):
        meta(input, diagonal)
        m, n = input.shape[-2:]
        rows = prims.broadcast_in_dim(prims.iota(m, start=0, step=1, dtype=torch.int64, device=input.device), (m, n), (0,))
        cols = prims.broadcast_in_dim(prims.iota(n, start=-diagonal, step=1, dtype=torch.int64, device=input.device),
                                      (m, n), (1,))
        mask = expand_to(keep(cols, rows), input.shape)  # col - diagonal <= row (tril), >= (triu)
        zero = prims.full(tuple(input.shape), to_dtype(0, input.dtype) if input.dtype is not torch.bool else False,
                          dtype=input.dtype, device=input.device)
        return prims.where(mask, input, zero)

    meta.__name__ = name
    meta.__doc__ = f"input with the elements {'above' if name == 'tril' else 'below'} the diagonal-th diagonal zeroed"
    op = ltorch(f"torch.{name}", methods=(name,), aliases=(getattr(torch, name), getattr(T, name)))(meta)
    op.decompose(decomposition)
    return op


tril = _triangle("tril", prims.le)
triu = _triangle("triu", prims.ge)


# --------------------------------------------------------------------------------------------
# F.pad: constant (negative pads crop), reflect, replicate, circular


_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_pairs(input, pad, mode, value):
    """[(dim, before, after)] for the padded dims (pad lists the last dim first), checked as torch."""
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    k = len(pad) // 2
    if k > input.ndim:
        raise RuntimeError(f"Padding length should be less than or equal to two times the input dimension but got "
                           f"padding length {len(pad)} and input of dimension {input.ndim}")
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if mode != "constant":
        if value is not None and value != 0:
            raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
        if not (k in (1, 2, 3) and input.ndim in (k + 1, k + 2)):
            raise NotImplementedError(f"Padding size {len(pad)} is not supported for {input.ndim}D input tensor. "
                                      "Supported combinations for non-constant padding: 2D or 3D input with padding "
                                      "size 2, 3D or 4D input with size 4, 4D or 5D input with size 6")
    pairs = [(input.ndim - 1 - i, pad[2 * i], pad[2 * i + 1]) for i in range(k)]
    for d, lo, hi in pairs:
        n = input.shape[d]
        if n + lo + hi < 0 or lo < -n or hi < -n:
            raise RuntimeError("narrow(): length must be non-negative.")
        if mode == "reflect" and (lo >= n or hi >= n):
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, "
                               f"but got: padding ({lo}, {hi}) at dimension {d} of input {list(input.shape)}")
        if mode == "circular" and (lo > n or hi > n):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if mode == "replicate" and n == 0 and lo + hi > 0:
            raise RuntimeError(f"input tensor must have non-zero size at dimension {d} to be padded")
    return pairs


@ltorch("torch.nn.functional.pad", aliases=(torch.nn.functional.pad,))
def pad(input: Tensor, pad: Ints, mode: Str = "constant", value: Number | None = None):
    """pad[2i], pad[2i + 1]: elements before and after the i-th last dim."""
    shape = list(input.shape)
    for d, lo, hi in _pad_pairs(input, pad, mode, value):
        shape[d] += lo + hi
    return _like(input, shape)


def _pad_indices(n, lo, hi, mode, device):
    """For reflect and replicate: which input element each output element along a dim copies."""
    i = prims.iota(n + lo + hi, start=-lo, step=1, dtype=torch.int64, device=device)
    if mode == "replicate":
        return prims.minimum(prims.maximum(i, as_tensor(0, i)), as_tensor(n - 1, i))
    i = prims.abs(i)  # reflect: -i before the start, 2 (n - 1) - i after the end
    return prims.where(prims.ge(i, n), prims.sub(2 * (n - 1), i), i)


@pad.decompose
def _(input, pad, mode="constant", value=None):
    x = input
    for d, lo, hi in _pad_pairs(input, pad, mode, value):
        n = x.shape[d]
        if mode in ("reflect", "replicate"):
            if (lo, hi) != (0, 0):
                x = prims.take(x, d, _pad_indices(n, lo, hi, mode, x.device))
            continue
        x = _slice_dim(x, d, max(-lo, 0), n - max(-hi, 0)) if lo < 0 or hi < 0 else x  # negative pads crop
        m, lo, hi = x.shape[d], max(lo, 0), max(hi, 0)
        if mode == "circular":  # the last lo elements before, the first hi after
            parts = [_slice_dim(x, d, m - lo, m)] if lo else []
            parts += [x] + ([_slice_dim(x, d, 0, hi)] if hi else [])
        else:
            fill = to_dtype(0 if value is None else value, x.dtype)

            def block(size):
                shape = tuple(size if i == d else s for i, s in enumerate(x.shape))
                return prims.full(shape, bool(fill) if x.dtype is torch.bool else fill, dtype=x.dtype, device=x.device)

            parts = ([block(lo)] if lo else []) + [x] + ([block(hi)] if hi else [])
        if len(parts) > 1:
            x = prims.cat(tuple(parts), d)
    return x
