"""The VJP rules of the ops of thunder/ops/shape.py, join_split.py and repeat_pad.py (registered on them with OpDef.vjp)."""
import math

import torch

from thunder.ops import prims, vjp_utils as _vjp
from thunder.ops.meta_utils import canonical_dim, is_tensor
from thunder.ops.reductions import sum_
from thunder.ops.registry import OPS
from thunder.ops.join_split import (_chunk_pieces, _narrow_range, _select_key, _split_pieces, _stack_check,
                                    _unbind_pieces, cat, chunk, narrow, select, split, stack, unbind)
from thunder.ops.repeat_pad import _repeated_indices, flip, repeat_interleave, roll
from thunder.ops.shape import (_index_plan, _movedim_perm, _permutation, _reshape, as_strided, as_strided_scatter,
                               broadcast_to, contiguous, expand, expand_as, flatten, getitem, movedim, permute,
                               reshape, reshape_as, squeeze, t, transpose, unflatten, unsqueeze, view, view_as)

# VJP rules (g: the result's cotangent, out: the result): shape ops move the cotangent back


def _reshape_back(g, out, input, *args, **kwargs):
    return {"input": _reshape(g, input.shape) if _vjp.differentiable(input) else None}


for _op in (reshape, view, reshape_as, view_as, flatten, unflatten, squeeze, unsqueeze, contiguous):
    _op.vjp(_reshape_back)


@permute.vjp
def _(g, out, input, dims):
    return {"input": _permute_decomp_ltorch(g, _vjp.inverse_permutation(_permutation(input, dims)))}


def _permute_decomp_ltorch(g, perm):
    return g if perm == tuple(range(g.ndim)) else permute(g, perm)


@transpose.vjp
def _(g, out, input, dim0, dim1):
    return {"input": transpose(g, dim0, dim1)}


@t.vjp
def _(g, out, input):
    return {"input": t(g)}


@movedim.vjp
def _(g, out, input, source, destination):
    return {"input": _permute_decomp_ltorch(g, _vjp.inverse_permutation(_movedim_perm(input, source, destination)))}


def _unbroadcast(g, out, input, *args, **kwargs):
    return {"input": _vjp.grad_for(input, g)}


for _op in (expand, broadcast_to, expand_as):
    _op.vjp(_unbroadcast)


def _unslice(g, input, ranges):
    """Zeros of input's shape with g (of the slice's shape, up to size-1 dims) where the slice
    `ranges` (start, stop, step per dim) reads."""
    # (len(range(...)) by arithmetic: range() reads a symbolic size as a plain number)
    sliced = tuple(max((stop - start + step - 1) // step, 0) for start, stop, step in ranges)
    if math.prod(sliced) == 0:
        return _vjp.zeros_like(input)
    g = _reshape(g, sliced)
    if all(r == (0, n, 1) for r, n in zip(ranges, input.shape)):
        return g
    return prims.unslice(g, tuple(input.shape), *(tuple(r[i] for r in ranges) for i in range(3)))


@getitem.vjp
def _(g, out, input, key):
    key = key if isinstance(key, tuple) else (key,)
    return {"input": _unslice(g, input, _index_plan(input, key)[0])}


@select.vjp
def _(g, out, input, dim, index):
    return {"input": _unslice(g, input, _index_plan(input, _select_key(input, dim, index))[0])}


@narrow.vjp
def _(g, out, input, dim, start, length):
    d, lo, hi = _narrow_range(input, dim, start, length)
    ranges = [(0, n, 1) for n in input.shape]
    ranges[d] = (lo, hi, 1)
    return {"input": _unslice(g, input, ranges)}


@cat.vjp
def _(g, out, tensors, dim=0):
    skipped = [x.ndim == 1 and x.shape[0] == 0 for x in tensors]
    ref = next((x for x, s in zip(tensors, skipped) if not s), tensors[0])
    d = canonical_dim(dim, ref.ndim)
    grads, offset = [], 0
    for x, skip in zip(tensors, skipped):
        if skip or not _vjp.differentiable(x):
            grads.append(None if not _vjp.differentiable(x) else _vjp.zeros_like(x))
            offset += 0 if skip else x.shape[d]
            continue
        piece = g if x.shape[d] == g.shape[d] else narrow(g, d, offset, x.shape[d])
        grads.append(_vjp.convert(piece, x.dtype))
        offset += x.shape[d]
    return {"tensors": tuple(grads)}


@stack.vjp
def _(g, out, tensors, dim=0):
    d = _stack_check(tensors, dim)
    pieces = unbind(g, d) if len(tensors) > 1 else (_reshape(g, tensors[0].shape),)
    return {"tensors": tuple(_vjp.convert(p, x.dtype) if _vjp.differentiable(x) else None
                             for p, x in zip(pieces, tensors))}


def _join_pieces(gs, outs, input, d, squeeze=False):
    """The input's cotangent from its pieces' cotangents (zeros for pieces that got none)."""
    if not _vjp.differentiable(input):
        return None
    gs = _vjp.fill_none(gs, outs)
    if len(gs) == 1:
        return _reshape(gs[0], input.shape)
    return stack(gs, d) if squeeze else cat(gs, d)


@split.vjp
def _(g, out, tensor, split_size_or_sections, dim=0):
    d, _pieces = _split_pieces(tensor, split_size_or_sections, dim)
    return {"tensor": _join_pieces(g, out, tensor, d)}


@chunk.vjp
def _(g, out, input, chunks, dim=0):
    d, _pieces = _chunk_pieces(input, chunks, dim)
    return {"input": _join_pieces(g, out, input, d)}


@unbind.vjp
def _(g, out, input, dim=0):
    d, _pieces = _unbind_pieces(input, dim)
    return {"input": _join_pieces(g, out, input, d, squeeze=True)}


@as_strided.vjp
def _(g, out, input, size, stride, storage_offset):
    if not _may_overlap(size, stride):  # (the views of aliased inputs: structure.alias_groups)
        return {"input": as_strided_scatter(OPS["ltorch.zeros_like"](input), g, size, stride, storage_offset)}
    # elements sharing a storage location (Longformer's overlapping chunks) add their gradients
    flat = None
    for d, (n, st) in enumerate(zip(size, stride)):
        at = prims.iota(n, start=0, step=st, dtype=torch.int64, device=g.device)
        at = reshape(at, tuple(n if k == d else 1 for k in range(len(size))))
        flat = at if flat is None else flat + at
    index = reshape(expand(flat + storage_offset, tuple(size)), (math.prod(size),)) if size else \
        prims.full((1,), storage_offset, dtype=torch.int64, device=g.device)
    return {"input": prims.zeros_index_add(tuple(input.shape), 0, index, reshape(g, (math.prod(size),)))}


def _may_overlap(size, stride):
    """Whether two elements of a view of this size and stride may share a storage location (a
    sufficient test: each dim's stride passes the extent of the dims of smaller stride)."""
    extent = 0
    for n, st in sorted(((n, abs(st)) for n, st in zip(size, stride) if n > 1), key=lambda d: d[1]):
        if st <= extent:
            return True
        extent += (n - 1) * st
    return False


@as_strided_scatter.vjp
def _(g, out, input, src, size, stride, storage_offset):
    # (src fills a view that does not overlap itself: what as_strided's in-place updates write)
    return {"input": as_strided_scatter(g, OPS["ltorch.zeros_like"](src), size, stride, storage_offset),
            "src": as_strided(g, size, stride, storage_offset)}


@flip.vjp
def _(g, out, input, dims):
    return {"input": flip(g, dims) if _vjp.differentiable(input) else None}


@roll.vjp
def _(g, out, input, shifts, dims=None):
    back = -shifts if isinstance(shifts, int) else tuple(-s for s in shifts)
    return {"input": roll(g, back, dims) if _vjp.differentiable(input) else None}


@repeat_interleave.vjp
def _(g, out, input, repeats, dim=None, *, output_size=None):
    """The cotangents of an element's copies add up: a sum over the repeats (int), or index_add at
    the repeated indices (tensor repeats)."""
    if not _vjp.differentiable(input):
        return {"input": None, "repeats": None}

    shape = (input.numel(),) if dim is None else (tuple(input.shape) or (1,))
    d = 0 if dim is None else canonical_dim(dim, len(shape))
    if is_tensor(repeats):
        idx = _repeated_indices(repeats, shape[d], output_size)
        gx = prims.zeros_index_add(shape, d, idx, g)
    else:
        gx = sum_(reshape(g, (*shape[:d + 1], repeats, *shape[d + 1:])), d + 1)
    return {"input": _vjp.grad_for(input, reshape(gx, tuple(input.shape))), "repeats": None}
