"""Joining and splitting ltorch ops: cat, stack, split, chunk, unbind, narrow, select.

They decompose into prims.cat / slice / reshape; the split family are views (see shape.py)."""

import functools
from builtins import slice as pyslice

import torch

from thunder.core.proxies import TensorProxy
from thunder.ops import prims
from thunder.ops.decomp_utils import to_dtype
from thunder.ops.meta_utils import canonical_dim
from thunder.ops.registry import Dims, Int, ltorch, OpDef, Tensor, Tensors
from thunder.ops.shape import _getitem_decomp, _like, _reshape, _slice_dim, _unsqueeze_shape, getitem, squeeze

T = torch.Tensor


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
