"""Shape ltorch ops: reshapes, permutations, broadcasting and basic indexing (views).

Joining and splitting (cat, stack, split, ...) are in join_split.py; repeating, flipping, rolling,
triangles and padding in repeat_pad.py. They decompose into prims.reshape / transpose /
broadcast_in_dim / slice / cat. Generated code runs view-like ops with reshape-like torch functions
(torch.reshape for view), so they stay correct when a pass changes an input's memory layout
(contiguous() decomposes to the identity)."""

import math
import operator
from builtins import slice as pyslice

import torch

from thunder.core import trace as tracing
from thunder.core.proxies import TensorProxy, meta_of
from thunder.ops import prims
from thunder.ops.decomp_utils import expand_to, to_dtype
from thunder.ops.meta_utils import canonical_dim, canonical_dims
from thunder.ops.registry import Dims, Index, Int, Ints, ltorch, MemoryFormat, Tensor

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
    if tracing.strides_known() and input.is_contiguous(memory_format=memory_format):
        return input  # as eager: `x.contiguous() is x` (record_op passes it through)
    return _like(input, input.shape)


contiguous.decompose(lambda input, *, memory_format=torch.contiguous_format: input)
contiguous.returns_input = True

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


def as_strided_of_eager_storage(input, size, stride, storage_offset=None):
    """torch.as_strided / Tensor.as_strided from user code: a view of the storage input has in
    eager. The program does not lay out tensors and their views as eager does (a product of a
    transposed input comes back transposed, a kernel writes its own layout), so running torch's
    as_strided on the program's tensor read other elements (Longformer's sliding-window chunks);
    here the view is taken of input's root (the tensor it is a view of) laid out in eager's
    memory order and flattened, at eager's storage offset of input."""
    root = input
    while root.base is not None:
        root = root.base
    tracing.strides_decide(input)
    meta, root_meta = meta_of(input), meta_of(root)
    order = sorted(range(root.ndim), key=lambda d: -root_meta.stride(d))
    dense = torch.empty([root.shape[d] for d in order], device="meta").permute(
        sorted(range(root.ndim), key=order.__getitem__))
    if not (root_meta.storage_offset() == 0 and all(
            n == 1 or a == b for n, a, b in zip(root.shape, root_meta.stride(), dense.stride()))
            and (meta is root_meta or torch._C._is_alias_of(meta, root_meta))):
        raise NotImplementedError(
            f"thunder: as_strided{tracing.where()} of a tensor whose memory layout in eager thunder does not know "
            "(a view of a tensor that is not dense, or of one torch gave no layout for). Workaround: call "
            ".contiguous() on the tensor first")
    storage = reshape(contiguous(permute(root, order)), (root.numel(),))
    offset = meta.storage_offset() if storage_offset is None else storage_offset
    return as_strided(storage, tuple(size), tuple(stride), offset)


@ltorch("torch.as_strided_scatter")
def as_strided_scatter(input: Tensor, src: Tensor, size: Ints, stride: Ints, storage_offset: Int):
    """The storage input with src written into its view as_strided(size, stride, storage_offset)."""
    if tuple(src.shape) != tuple(size):
        raise RuntimeError(f"as_strided_scatter: src of shape {list(src.shape)} for a view of shape {list(size)}")
    return _like(input, input.shape)
