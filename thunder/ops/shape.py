"""Shape ltorch ops: reshapes, permutations, broadcasting, joining, splitting and basic indexing.

They decompose into prims.reshape / transpose / broadcast_in_dim / slice / cat. Generated code runs
view-like ops with reshape-like torch functions (torch.reshape for view), so they stay correct when
a pass changes an input's memory layout (contiguous() decomposes to the identity)."""
import functools
import inspect
import math
import operator
from builtins import slice as pyslice

import torch

from thunder.core.proxies import TensorProxy
from thunder.ops import prims
from thunder.ops.decomp_utils import as_tensor, expand_to, to_dtype
from thunder.ops.meta_utils import canonical_dim, canonical_dims, is_tensor
from thunder.ops import registry
from thunder.ops.registry import (Dims, Index, Int, Ints, MemoryFormat, Number, OpDef, Str, Tensor, TensorOrNumber,
                                  Tensors, ltorch)
from thunder.core import trace as tracing
from thunder.core.proxies import data_dependent

T = torch.Tensor

# --------------------------------------------------------------------------------------------
# helpers


def _like(a, shape):
    return TensorProxy(shape, a.dtype, a.device)


def _infer_shape(shape, numel):
    """shape with its -1 filled in, with torch's errors for shapes that do not fit numel."""
    shape = list(shape)
    free = [i for i, s in enumerate(shape) if s == -1]
    if len(free) > 1:
        raise RuntimeError("only one dimension can be inferred")
    for i, s in enumerate(shape):
        if s < -1:
            raise RuntimeError(f"invalid shape dimension {s} at index {i} of shape {shape}")
    known = math.prod(s for s in shape if s != -1)
    if free:
        if known == 0:
            raise RuntimeError(f"cannot reshape tensor of {numel} elements into shape {shape} because the "
                               "unspecified dimension size -1 can be any value and is ambiguous")
        if numel % known == 0:
            shape[free[0]] = numel // known
    if math.prod(shape) != numel or any(s < 0 for s in shape):
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return tuple(shape)


def _reshape(a, shape):
    """prims.reshape, skipped when the shape does not change."""
    return a if tuple(a.shape) == tuple(shape) else prims.reshape(a, tuple(shape))


def _slice_dim(a, dim, start, stop, step=1):
    starts, stops, steps = [0] * a.ndim, list(a.shape), [1] * a.ndim
    starts[dim], stops[dim], steps[dim] = start, stop, step
    return prims.slice(a, tuple(starts), tuple(stops), tuple(steps))


def _perm_transpose(ndim, d0, d1):
    if ndim == 0:
        return ()
    perm = list(range(ndim))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return tuple(perm)


# --------------------------------------------------------------------------------------------
# reshapes


def _reshape_meta(input, shape):
    return _like(input, _infer_shape(shape, input.numel()))


def _reshape_decomp(input, shape):
    return _reshape(input, _infer_shape(shape, input.numel()))


@ltorch("torch.reshape", methods=("reshape",), varargs="shape", view=True, strided=True,
        aliases=(torch.reshape, T.reshape))
def reshape(input: Tensor, shape: Ints):
    return _reshape_meta(input, shape)


# view runs as torch.reshape: the same values, and no stride errors after layout-changing passes
# (eager's stride error is raised while tracing, by record_op running torch's meta kernel)
@ltorch("torch.reshape", methods=("view",), varargs="shape", view=True, strided=True, aliases=(T.view,))
def view(input: Tensor, shape: Ints):
    return _reshape_meta(input, shape)


reshape.decompose(_reshape_decomp)
view.decompose(_reshape_decomp)


@ltorch("torch.Tensor.reshape_as", methods=("reshape_as",), view=True, strided=True, aliases=(T.reshape_as,))
def reshape_as(input: Tensor, other: Tensor):
    return _reshape_meta(input, other.shape)


@ltorch("torch.Tensor.reshape_as", methods=("view_as",), view=True, strided=True, aliases=(T.view_as,))
def view_as(input: Tensor, other: Tensor):
    return _reshape_meta(input, other.shape)


reshape_as.decompose(lambda input, other: _reshape_decomp(input, other.shape))
view_as.decompose(lambda input, other: _reshape_decomp(input, other.shape))


def _flatten_shape(input, start_dim, end_dim):
    s, e = canonical_dim(start_dim, input.ndim), canonical_dim(end_dim, input.ndim)
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if input.ndim == 0:
        return (1,)
    return (*input.shape[:s], math.prod(input.shape[s:e + 1]), *input.shape[e + 1:])


@ltorch("torch.flatten", methods=("flatten",), view=True, strided=True, aliases=(torch.flatten, T.flatten))
def flatten(input: Tensor, start_dim: Int = 0, end_dim: Int = -1):
    return _like(input, _flatten_shape(input, start_dim, end_dim))


@flatten.decompose
def _(input, start_dim=0, end_dim=-1):
    return _reshape(input, _flatten_shape(input, start_dim, end_dim))


@ltorch("torch.unflatten", methods=("unflatten",), view=True, strided=True, aliases=(torch.unflatten, T.unflatten))
def unflatten(input: Tensor, dim: Int, sizes: Ints):
    return _like(input, _unflatten_shape(input, dim, sizes))


def _unflatten_shape(input, dim, sizes):
    d = canonical_dim(dim, input.ndim)
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    inner = _infer_shape(sizes, input.shape[d])
    return (*input.shape[:d], *inner, *input.shape[d + 1:])


unflatten.decompose(lambda input, dim, sizes: _reshape(input, _unflatten_shape(input, dim, sizes)))


def _squeeze_shape(input, dim):
    dims = range(input.ndim) if dim is None else canonical_dims(dim, input.ndim)
    return tuple(s for i, s in enumerate(input.shape) if not (i in dims and s == 1))


@ltorch("impl.squeeze", methods=("squeeze",), view=True, aliases=(torch.squeeze, T.squeeze))
def squeeze(input: Tensor, dim: Dims | None = None):
    return _like(input, _squeeze_shape(input, dim))


squeeze.decompose(lambda input, dim=None: _reshape(input, _squeeze_shape(input, dim)))


def _unsqueeze_shape(input, dim):
    d = canonical_dim(dim, input.ndim + 1)
    return (*input.shape[:d], 1, *input.shape[d:])


@ltorch("torch.unsqueeze", methods=("unsqueeze",), view=True, aliases=(torch.unsqueeze, T.unsqueeze))
def unsqueeze(input: Tensor, dim: Int):
    return _like(input, _unsqueeze_shape(input, dim))


unsqueeze.decompose(lambda input, dim: _reshape(input, _unsqueeze_shape(input, dim)))


@ltorch("torch.Tensor.contiguous", methods=("contiguous",), view=True, strided=True, aliases=(T.contiguous,))
def contiguous(input: Tensor, *, memory_format: MemoryFormat = torch.contiguous_format):
    """eager's strides for memory_format (the input itself where it has them already)."""
    return _like(input, input.shape)


contiguous.decompose(lambda input, *, memory_format=torch.contiguous_format: input)

# --------------------------------------------------------------------------------------------
# permutations


def _permutation(input, dims):
    if len(dims) != input.ndim:
        raise RuntimeError("permute(sparse_coo): number of dimensions in the tensor input does not match the "
                           "length of the desired ordering of dimensions i.e. input.dim() = "
                           f"{input.ndim} is not equal to len(dims) = {len(dims)}")
    perm = tuple(canonical_dim(d, input.ndim) for d in dims)
    if len(set(perm)) != len(perm):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return perm


def _transposition(input, dim0, dim1):
    return _perm_transpose(input.ndim, canonical_dim(dim0, input.ndim), canonical_dim(dim1, input.ndim))


def _t_dims(input):
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return tuple(reversed(range(input.ndim)))


def _permuted(input, perm):
    return _like(input, tuple(input.shape[p] for p in perm))


def _permute_decomp(input, perm):
    return input if perm == tuple(range(input.ndim)) else prims.transpose(input, perm)


def _movedim_perm(input, source, destination):
    src, dst = canonical_dims(source, input.ndim), canonical_dims(destination, input.ndim)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} dims) should "
                           f"contain the same number of dims as destination ({list(dst)} dims)")
    perm = [None] * input.ndim
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(i for i in range(input.ndim) if i not in src)
    return tuple(p if p is not None else next(rest) for p in perm)


@ltorch("torch.permute", methods=("permute",), varargs="dims", view=True, aliases=(torch.permute, T.permute))
def permute(input: Tensor, dims: Ints):
    return _permuted(input, _permutation(input, dims))


@ltorch("torch.transpose", methods=("transpose", "swapdims"), view=True,
        aliases=(torch.transpose, T.transpose, torch.swapdims, T.swapdims))
def transpose(input: Tensor, dim0: Int, dim1: Int):
    return _permuted(input, _transposition(input, dim0, dim1))


@ltorch("torch.t", methods=("t",), view=True, aliases=(torch.t, T.t))
def t(input: Tensor):
    return _permuted(input, _t_dims(input))


@ltorch("torch.movedim", methods=("movedim", "moveaxis"), view=True,
        aliases=(torch.movedim, T.movedim, torch.moveaxis, T.moveaxis))
def movedim(input: Tensor, source: Dims, destination: Dims):
    return _permuted(input, _movedim_perm(input, source, destination))


permute.decompose(lambda input, dims: _permute_decomp(input, _permutation(input, dims)))
transpose.decompose(lambda input, dim0, dim1: _permute_decomp(input, _transposition(input, dim0, dim1)))
t.decompose(lambda input: _permute_decomp(input, _t_dims(input)))
movedim.decompose(lambda input, source, destination: _permute_decomp(input, _movedim_perm(input, source, destination)))

# --------------------------------------------------------------------------------------------
# broadcasting


def _expand_shape(input, size):
    size = tuple(size)
    if len(size) < input.ndim:
        raise RuntimeError(f"expand(torch.{input.dtype}{{{list(input.shape)}}}, size={list(size)}): the number of "
                           f"sizes provided ({len(size)}) must be greater or equal to the number of dimensions "
                           f"in the tensor ({input.ndim})")
    lead = len(size) - input.ndim
    out = []
    for i, s in enumerate(size):
        if i < lead:
            if s < 0:
                raise RuntimeError(f"The expanded size of the tensor ({s}) isn't allowed in a leading, "
                                   f"non-existing dimension {i}")
            out.append(s)
            continue
        have = input.shape[i - lead]
        if s == -1:
            s = have
        if have != s and have != 1 or s < 0:
            raise RuntimeError(f"The expanded size of the tensor ({s}) must match the existing size ({have}) at "
                               f"non-singleton dimension {i}.  Target sizes: {list(size)}.  Tensor sizes: "
                               f"{list(input.shape)}")
        out.append(s)
    return tuple(out)


@ltorch("torch.Tensor.expand", methods=("expand",), varargs="size", view=True, aliases=(T.expand,))
def expand(input: Tensor, size: Ints):
    return _like(input, _expand_shape(input, size))


expand.decompose(lambda input, size: expand_to(input, _expand_shape(input, size)))


@ltorch("torch.broadcast_to", methods=("broadcast_to",), varargs="size", view=True,
        aliases=(torch.broadcast_to, T.broadcast_to))
def broadcast_to(input: Tensor, size: Ints):
    return _like(input, _expand_shape(input, size))


broadcast_to.decompose(lambda input, size: expand_to(input, _expand_shape(input, size)))


@ltorch("torch.Tensor.expand_as", methods=("expand_as",), view=True, aliases=(T.expand_as,))
def expand_as(input: Tensor, other: Tensor):
    return _like(input, _expand_shape(input, other.shape))


expand_as.decompose(lambda input, other: expand_to(input, _expand_shape(input, other.shape)))

# --------------------------------------------------------------------------------------------
# joining


def _cat_meta(tensors, dim):
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, x in enumerate(tensors):
        if x.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    skipped = [x.ndim == 1 and x.shape[0] == 0 for x in tensors]  # legacy: 1-d empty tensors
    kept = [x for x, skip in zip(tensors, skipped) if not skip] or [tensors[0]]
    ref = kept[0]
    d = canonical_dim(dim, ref.ndim)
    for i, x in enumerate(tensors):
        if skipped[i]:
            continue
        if x.ndim != ref.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.ndim} and {x.ndim}")
        for j in range(ref.ndim):
            if j != d and x.shape[j] != ref.shape[j]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size "
                                   f"{ref.shape[j]} but got size {x.shape[j]} for tensor number {i} in the list.")
    shape = list(ref.shape)
    shape[d] = sum(x.shape[d] for x in kept)
    dtype = functools.reduce(torch.promote_types, [x.dtype for x in tensors])
    return TensorProxy(shape, dtype, ref.device), kept, d


@ltorch("torch.cat", aliases=(torch.cat, torch.concat))
def cat(tensors: Tensors, dim: Int = 0):
    return _cat_meta(tensors, dim)[0]


@cat.decompose
def _(tensors, dim=0):
    out, kept, d = _cat_meta(tensors, dim)
    kept = [to_dtype(x, out.dtype) for x in kept]
    return kept[0] if len(kept) == 1 else prims.cat(tuple(kept), d)


def _stack_check(tensors, dim):
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, x in enumerate(tensors):
        if x.shape != tensors[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} at "
                               f"entry 0 and {list(x.shape)} at entry {i}")
    return canonical_dim(dim, tensors[0].ndim + 1)


@ltorch("torch.stack", aliases=(torch.stack,))
def stack(tensors: Tensors, dim: Int = 0):
    d = _stack_check(tensors, dim)
    shape = list(tensors[0].shape)
    shape.insert(d, len(tensors))
    return TensorProxy(shape, functools.reduce(torch.promote_types, [x.dtype for x in tensors]), tensors[0].device)


@stack.decompose
def _(tensors, dim=0):
    out = stack.meta(tensors, dim)
    d = _stack_check(tensors, dim)
    parts = [_reshape(to_dtype(x, out.dtype), _unsqueeze_shape(x, d)) for x in tensors]
    return parts[0] if len(parts) == 1 else prims.cat(tuple(parts), d)


# --------------------------------------------------------------------------------------------
# splitting: _*_pieces give (dim, [(start, stop) of each piece])


def _split_pieces(tensor, split_size_or_sections, dim):
    d = canonical_dim(dim, tensor.ndim)
    n = tensor.shape[d]
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
        if s < 0:
            raise RuntimeError(f"split expects split_size be non-negative, but got split_size={s}")
        if s == 0 and n != 0:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}")
        sizes = [s] * (n // s) + ([n % s] if n % s else []) if s else []
        sizes = sizes or [n]
    else:
        sizes = list(split_size_or_sections)
        if any(s < 0 for s in sizes):
            raise RuntimeError(f"split_with_sizes expects split_sizes have only non-negative entries, but got "
                               f"split_sizes={sizes}")
        if sum(sizes) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                               f"dimension {d}), but got split_sizes={sizes}")
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return d, [(st, st + s) for st, s in zip(starts, sizes)]


def _chunk_pieces(input, chunks, dim):
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = canonical_dim(dim, input.ndim)
    n = input.shape[d]
    if n == 0:
        return d, [(0, 0)] * chunks
    return _split_pieces(input, -(-n // chunks), d)


def _unbind_pieces(input, dim):
    if input.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    d = canonical_dim(dim, input.ndim)
    return d, [(i, i + 1) for i in range(input.shape[d])]


def _pieces_meta(input, d, pieces, squeeze=False):
    shapes = [(*input.shape[:d], *(() if squeeze else (hi - lo,)), *input.shape[d + 1:]) for lo, hi in pieces]
    return tuple(_like(input, s) for s in shapes)


def _pieces_decomp(input, d, pieces, squeeze=False):
    outs = _pieces_meta(input, d, pieces, squeeze)
    return tuple(_reshape(_slice_dim(input, d, lo, hi), o.shape) for (lo, hi), o in zip(pieces, outs))


@ltorch("torch.split", methods=("split",), returns_sequence=True, view=True, aliases=(torch.split, T.split))
def split(tensor: Tensor, split_size_or_sections: Dims, dim: Int = 0):
    return _pieces_meta(tensor, *_split_pieces(tensor, split_size_or_sections, dim))


@ltorch("torch.chunk", methods=("chunk",), returns_sequence=True, view=True, aliases=(torch.chunk, T.chunk))
def chunk(input: Tensor, chunks: Int, dim: Int = 0):
    return _pieces_meta(input, *_chunk_pieces(input, chunks, dim))


@ltorch("torch.unbind", methods=("unbind",), returns_sequence=True, view=True, aliases=(torch.unbind, T.unbind))
def unbind(input: Tensor, dim: Int = 0):
    return _pieces_meta(input, *_unbind_pieces(input, dim), squeeze=True)


class _SplitOp(OpDef):
    """x.split(split_size=...): Tensor.split names the argument split_size."""

    def bind(self, args, kwargs):
        if "split_size" in kwargs:
            kwargs = {**kwargs, "split_size_or_sections": kwargs["split_size"]}
            del kwargs["split_size"]
        return super().bind(args, kwargs)


split.__class__ = _SplitOp
split.decompose(lambda tensor, split_size_or_sections, dim=0:
                _pieces_decomp(tensor, *_split_pieces(tensor, split_size_or_sections, dim)))
chunk.decompose(lambda input, chunks, dim=0: _pieces_decomp(input, *_chunk_pieces(input, chunks, dim)))
unbind.decompose(lambda input, dim=0: _pieces_decomp(input, *_unbind_pieces(input, dim), squeeze=True))


def _narrow_range(input, dim, start, length):
    if input.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    d = canonical_dim(dim, input.ndim)
    n = input.shape[d]
    if not -n <= start <= n:
        raise IndexError(f"start out of range (expected to be in range of [{-n}, {n}], but got {start})")
    start = start + n if start < 0 else start
    if length < 0 or start + length > n:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return d, start, start + length


@ltorch("torch.narrow", methods=("narrow",), view=True, aliases=(torch.narrow, T.narrow))
def narrow(input: Tensor, dim: Int, start: Int, length: Int):
    d, _, _ = _narrow_range(input, dim, start, length)
    shape = list(input.shape)
    shape[d] = length
    return _like(input, shape)


narrow.decompose(lambda input, dim, start, length: _slice_dim(input, *_narrow_range(input, dim, start, length)))


@ltorch("torch.select", methods=("select",), view=True, aliases=(torch.select, T.select))
def select(input: Tensor, dim: Int, index: Int):
    return getitem.meta(input, _select_key(input, dim, index))


def _select_key(input, dim, index):
    if input.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    return (pyslice(None),) * canonical_dim(dim, input.ndim) + (index,)


select.decompose(lambda input, dim, index: _getitem_decomp(input, _select_key(input, dim, index)))

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


# --------------------------------------------------------------------------------------------
# basic indexing: x[1, ::2, None, ..., -1]


def _index_plan(input, key):
    """(per input dim: (start, stop, step), result shape) of a basic-indexing key."""
    for e in key:  # tensors and lists: thunder/ops/indexing.py
        if not (e is None or e is Ellipsis or isinstance(e, (int, pyslice))):
            raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables "
                             "are valid indices")
    consumed = sum(1 for e in key if isinstance(e, pyslice) or (isinstance(e, int) and not isinstance(e, bool)))
    if consumed > input.ndim:
        if input.ndim == 0:
            raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in Python or `tensor.item<T>()` "
                             "in C++ to convert a 0-dim tensor to a number")
        raise IndexError(f"too many indices for tensor of dimension {input.ndim}")
    ranges, shape, dim = [], [], 0
    ellipsis_dims = input.ndim - consumed  # as in torch, a second ellipsis stands for no dims
    for e in key:
        if e is Ellipsis:
            ranges += [(0, n, 1) for n in input.shape[dim:dim + ellipsis_dims]]
            shape += input.shape[dim:dim + ellipsis_dims]
            dim, ellipsis_dims = dim + ellipsis_dims, 0
        elif e is None or isinstance(e, bool):
            shape.append(1 if e is None or e else 0)
        elif isinstance(e, int):
            n = input.shape[dim]
            if not -n <= e < n:
                raise IndexError(f"index {e} is out of bounds for dimension {dim} with size {n}")
            ranges.append((e % n, e % n + 1, 1))
            dim += 1
        else:
            if e.step is not None and e.step <= 0:
                raise ValueError("step must be greater than zero")
            start, stop, step = _slice_indices(e, input.shape[dim])
            stop = max(start, stop)
            ranges.append((start, stop, step))
            shape.append((stop - start + step - 1) // step)
            dim += 1
    for d in range(dim, input.ndim):
        ranges.append((0, input.shape[d], 1))
        shape.append(input.shape[d])
    return ranges, tuple(shape)


def _slice_indices(s, n):
    """slice.indices(n) for a step > 0, by comparisons: a size that is a symbol
    (cache="symbolic values") keeps its expression and the clamping is recorded."""
    step = 1 if s.step is None else s.step

    def bound(v, default):
        if v is None:
            return default
        v = operator.index(v) if not isinstance(v, int) else v
        if v < 0:
            v = v + n
            return 0 if v < 0 else v
        return n if v > n else v

    return bound(s.start, 0), bound(s.stop, n), step


@ltorch("operator.getitem", dunders=("__getitem__",), view=True, aliases=(T.__getitem__,))
def getitem(input: Tensor, key: Index):
    """Basic indexing: ints, slices (positive steps), None, Ellipsis and bools."""
    key = key if isinstance(key, tuple) else (key,)
    return _like(input, _index_plan(input, key)[1])


@getitem.decompose
def _getitem_decomp(input, key):
    key = key if isinstance(key, tuple) else (key,)
    ranges, shape = _index_plan(input, key)
    if math.prod(shape) == 0 and input.numel() != 0:
        return prims.full(shape, to_dtype(0, input.dtype), dtype=input.dtype, device=input.device)
    if any(r != (0, n, 1) for r, n in zip(ranges, input.shape)):
        input = prims.slice(input, *(tuple(r[i] for r in ranges) for i in range(3)))
    return _reshape(input, shape)


# --------------------------------------------------------------------------------------------
# inputs that share memory (runtime/structure.py Inputs): each is a view of its storage, a 1-d
# tensor over the whole storage, so an in-place update of one reaches the others. Not reachable
# from user code: torch.as_strided's storage offsets need the storage, which proxies do not have.


@ltorch("torch.as_strided", view=True)
def as_strided(input: Tensor, size: Ints, stride: Ints, storage_offset: Int):
    """A view of the storage input (1-d, contiguous, offset 0)."""
    if input.ndim != 1:
        raise ValueError("as_strided: the input must be a storage (1-d)")
    if size and storage_offset + sum((n - 1) * s for n, s in zip(size, stride)) >= input.shape[0]:
        raise RuntimeError("as_strided: the view does not fit in the storage")
    return _like(input, tuple(size))


@ltorch("torch.as_strided_scatter")
def as_strided_scatter(input: Tensor, src: Tensor, size: Ints, stride: Ints, storage_offset: Int):
    """The storage input with src written into its view as_strided(size, stride, storage_offset)."""
    if tuple(src.shape) != tuple(size):
        raise RuntimeError(f"as_strided_scatter: src of shape {list(src.shape)} for a view of shape {list(size)}")
    return _like(input, input.shape)
