"""Indexing ltorch ops: masked_fill, index_select, gather, scatter_add, index_put.

Decompositions: masked_fill -> where; index_select -> take; gather, scatter_add and index_put
index a flattened tensor with linear indices computed from iotas (take, index_add). VJP rules use
ltorch ops (and the take/index_add prims), so torch runs the backward as torch-level calls.

In-place variants (x.masked_fill_, x.scatter_add_, x.index_put_) come from the out-of-place method
names through the proxies' in-place machinery."""
import math
from builtins import slice as pyslice
from dataclasses import dataclass

import torch

from thunder.core.proxies import TensorProxy
from thunder.ops import prims
from thunder.ops.decomp_utils import expand_to, to_dtype
from thunder.ops.meta_utils import broadcast_shapes, canonical_dim, device_of, is_tensor
from thunder.ops.impl import TENSOR_INDEX
from thunder.ops.registry import Bool, Index, Int, OpDef, Tensor, TensorOrNumber, Tensors, ltorch
from thunder.core import trace as tracing
from thunder.core.proxies import data_dependent
from thunder.ops import fallback
from thunder.ops.creation import tensor, to
from thunder.ops.elementwise import _WhereOp, ne, where
from thunder.ops.random_ops import _dtype_name as name
from thunder.ops.reductions import sum_
from thunder.ops.shape import _getitem_decomp, _index_plan, expand, getitem, reshape

_INDEX_DTYPES = (torch.int64, torch.int32)


def _dtype_str(dtype):
    return {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
            torch.uint8: "unsigned char", torch.int8: "signed char", torch.int16: "short", torch.int32: "int",
            torch.int64: "long int", torch.bool: "bool"}.get(dtype, str(dtype).replace("torch.", ""))


def _fill_value(value, dtype):
    """A number as the fill value of a dtype tensor (torch truncates floats into integer tensors)."""
    return bool(value) if dtype is torch.bool else to_dtype(value, dtype)


def _strides(shape):
    """Strides of a contiguous tensor of shape (in elements)."""
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


def _coordinate(shape, d, device):
    """An int64 tensor of shape holding each element's coordinate along dim d."""
    i = prims.iota(shape[d], start=0, step=1, dtype=torch.int64, device=device)
    return prims.broadcast_in_dim(i, tuple(shape), (d,))


def _linear_index(index, dim, target_shape):
    """The flat offsets into a contiguous tensor of target_shape of the elements that gather/scatter
    address: index's values along dim, index's own coordinates along the other dims (1-D, int64)."""
    strides = _strides(target_shape)
    shape = tuple(index.shape)
    lin = prims.mul(to_dtype(index, torch.int64), strides[dim]) if shape else to_dtype(index, torch.int64)
    for k in range(len(shape)):
        if k != dim:
            lin = prims.add(lin, prims.mul(_coordinate(shape, k, index.device), strides[k]))
    return prims.reshape(lin, (index.numel(),))


def _flat(a):
    return prims.reshape(a, (a.numel(),))


# --------------------------------------------------------------------------------------------
# masked_fill


def _masked_fill_check(input, mask, value):
    if mask.dtype is not torch.bool:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype {_dtype_str(mask.dtype)}")
    if is_tensor(value) and value.ndim != 0:
        raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.ndim} dimension(s).")
    if isinstance(value, complex) and not input.dtype.is_complex:
        raise RuntimeError("value cannot be converted to type float without overflow")


@ltorch("torch.masked_fill", methods=("masked_fill",), aliases=(torch.masked_fill, torch.Tensor.masked_fill))
def masked_fill(input: Tensor, mask: Tensor, value: TensorOrNumber):
    """input with value where mask (bool, broadcast with input) is True; value a number or a 0-d
    tensor, converted to input's dtype."""
    _masked_fill_check(input, mask, value)
    return TensorProxy(broadcast_shapes(input.shape, mask.shape), input.dtype, device_of(input, mask))


@masked_fill.decompose
def _(input, mask, value):
    out = masked_fill.meta(input, mask, value)
    v = expand_to(to_dtype(value, out.dtype), out.shape) if is_tensor(value) else _fill_value(value, out.dtype)
    return prims.where(expand_to(mask, out.shape), v, expand_to(input, out.shape))


# --------------------------------------------------------------------------------------------
# index_select


def _index_select_check(input, dim, index):
    d = canonical_dim(dim, input.ndim)
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in _INDEX_DTYPES:
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    return d


@ltorch("torch.index_select", methods=("index_select",), aliases=(torch.index_select, torch.Tensor.index_select))
def index_select(input: Tensor, dim: Int, index: Tensor):
    """The slices of input along dim at index (a vector or a 0-d tensor of int32/int64)."""
    d = _index_select_check(input, dim, index)
    shape = list(input.shape)
    if shape:
        shape[d] = index.numel()
    return TensorProxy(shape, input.dtype, input.device)


@index_select.decompose
def _(input, dim, index):
    d = _index_select_check(input, dim, index)
    idx = index if index.ndim == 1 else prims.reshape(index, (1,))
    if input.ndim == 0:
        return prims.reshape(prims.take(prims.reshape(input, (1,)), 0, idx), ())
    return prims.take(input, d, idx)


# --------------------------------------------------------------------------------------------
# gather, scatter_add


def _gather_check(name, input, dim, index, src=None):
    d = canonical_dim(dim, input.ndim)
    if index.dtype not in _INDEX_DTYPES:
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")
    if index.ndim != input.ndim and not (index.ndim <= 1 and input.ndim <= 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    for k in range(index.ndim):
        if k != d and index.shape[k] > input.shape[k]:
            raise RuntimeError(f"Size does not match at dimension {k} expected index {list(index.shape)} to be no "
                               f"larger than self {list(input.shape)} apart from dimension {d}")
    if src is not None:
        if src.dtype != input.dtype:
            raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
        for k in range(index.ndim):
            if index.shape[k] > src.shape[k]:
                raise RuntimeError(f"Size does not match at dimension {k} expected index {list(index.shape)} to be "
                                   f"no larger than src {list(src.shape)}")
    return d


@ltorch("torch.gather", methods=("gather",), aliases=(torch.gather, torch.Tensor.gather))
def gather(input: Tensor, dim: Int, index: Tensor, *, sparse_grad: Bool = False):
    """out[i][j] = input[index[i][j]][j] (dim 0) and so on: index's shape, input's dtype."""
    _gather_check("gather", input, dim, index)
    return TensorProxy(index.shape, input.dtype, input.device)


@gather.decompose
def _(input, dim, index, *, sparse_grad=False):
    d = _gather_check("gather", input, dim, index)
    if index.ndim == 0 or input.ndim == 0:
        lin = prims.reshape(to_dtype(index, torch.int64), (index.numel(),))
    else:
        lin = _linear_index(index, d, input.shape)
    return prims.reshape(prims.take(_flat(input), 0, lin), tuple(index.shape))


@ltorch("torch.scatter_add", methods=("scatter_add",), aliases=(torch.scatter_add, torch.Tensor.scatter_add))
def scatter_add(input: Tensor, dim: Int, index: Tensor, src: Tensor):
    """input with src[i][j] added at [index[i][j]][j] (dim 0) and so on (gather's transpose)."""
    _gather_check("scatter", input, dim, index, src)
    return TensorProxy(input.shape, input.dtype, input.device)


def _src_part(src, index):
    """The part of src that scatter reads: its leading index.shape block."""
    if tuple(src.shape) == tuple(index.shape):
        return src
    return prims.slice(src, (0,) * src.ndim, tuple(index.shape), (1,) * src.ndim)


@scatter_add.decompose
def _(input, dim, index, src):
    d = _gather_check("scatter", input, dim, index, src)
    if index.ndim == 0 or input.ndim == 0:
        lin = prims.reshape(to_dtype(index, torch.int64), (index.numel(),))
    else:
        lin = _linear_index(index, d, input.shape)
    s = _flat(_src_part(src, index)) if src.ndim else prims.reshape(src, (1,))
    out = prims.index_add(_flat(input), 0, lin, s)
    return prims.reshape(out, tuple(input.shape))


# --------------------------------------------------------------------------------------------
# index_put


def _index_put_check(input, indices, values):
    if not indices:
        raise RuntimeError("index_put(): needs at least one index tensor")
    if len(indices) > input.ndim:
        raise IndexError(f"too many indices for tensor of dimension {input.ndim} (got {len(indices)})")
    for i in indices:
        if i.dtype in (torch.bool, torch.uint8):
            raise NotImplementedError("thunder: index_put with bool/byte mask indices is not supported (the number "
                                      "of selected elements depends on the data). Workaround: torch.where")
        if i.dtype not in _INDEX_DTYPES:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    _check_same_dtype(input, values)
    k = len(indices)
    target = (*broadcast_shapes(*(i.shape for i in indices)), *input.shape[k:])
    try:
        if broadcast_shapes(values.shape, target) != tuple(target):
            raise RuntimeError
    except RuntimeError:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                           f"indexing result of shape {list(target)}") from None
    return target


def _check_same_dtype(input, values):
    if values.dtype != input.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{_dtype_name(input.dtype)} for the destination and {_dtype_name(values.dtype)} for the "
                           f"source.")


def _dtype_name(dtype):
    return name(dtype)


@ltorch("torch.index_put", methods=("index_put",), aliases=(torch.index_put, torch.Tensor.index_put))
def index_put(input: Tensor, indices: Tensors, values: Tensor, accumulate: Bool = False):
    """input[indices] = values (accumulate=False) or += (True), out of place. indices: a tuple of
    int32/int64 tensors (broadcast together) for input's leading dims; negative indices count from
    the end. Not supported: None entries (eager's index_put refuses them too) and bool masks.
    Duplicate indices without accumulate: eager leaves which value wins undefined; the decomposition
    writes their sum."""
    _index_put_check(input, indices, values)
    return TensorProxy(input.shape, input.dtype, input.device)


def _index_put_linear(input, indices):
    """(flat offsets into input's first len(indices) dims (1-D, int64), broadcast index shape)."""
    k = len(indices)
    bshape = broadcast_shapes(*(i.shape for i in indices))
    strides = _strides(tuple(input.shape[:k]))
    lin = None
    for j, i in enumerate(indices):
        i = expand_to(to_dtype(i, torch.int64), bshape)
        i = prims.where(prims.lt(i, 0), prims.add(i, input.shape[j]), i)  # negative: from the end
        term = prims.mul(i, strides[j]) if strides[j] != 1 else i
        lin = term if lin is None else prims.add(lin, term)
    return prims.reshape(lin, (math.prod(bshape),)), bshape


def _rows(a, k):
    """a with its first k dims folded into one."""
    return prims.reshape(a, (math.prod(a.shape[:k]), *a.shape[k:]))


@index_put.decompose
def _(input, indices, values, accumulate=False):
    target = _index_put_check(input, indices, values)
    k = len(indices)
    lin, bshape = _index_put_linear(input, indices)
    vals = prims.reshape(expand_to(values, target), (lin.shape[0], *input.shape[k:]))
    rows = _rows(input, k)
    zeros = prims.full(tuple(rows.shape), _fill_value(0, input.dtype), dtype=input.dtype, device=input.device)
    if accumulate:
        out = prims.index_add(rows, 0, lin, vals)
    else:
        put = prims.index_add(zeros, 0, lin, vals)
        ones = prims.full((lin.shape[0],), 1, dtype=torch.int64, device=input.device)
        count = prims.index_add(prims.full((rows.shape[0],), 0, dtype=torch.int64, device=input.device), 0, lin, ones)
        touched = prims.gt(count, 0)
        if rows.ndim > 1:
            touched = prims.broadcast_in_dim(touched, tuple(rows.shape), (0,))
        out = prims.where(touched, put, rows)
    return prims.reshape(out, tuple(input.shape))


# --------------------------------------------------------------------------------------------
# x[key] and x[key] = v with tensors, lists and masks in the key (advanced indexing)
#
# As torch: ints, slices, None and Ellipsis index first (a view); then the index tensors
# (broadcast together) pick along the dims they stand at. Their broadcast shape replaces those
# dims where they are adjacent, else it goes first. A Python bool next to index tensors is an
# index of a new dim of size 1 ([0] or []). A list is a constant index tensor; a list of bools
# the indices of its True entries. A bool tensor mask gives a data-dependent shape in x[mask]:
# inside thunder.jit the number of its True entries is read (a split, runtime/reads.py) and the
# mask becomes the index tensors eager makes of it (its nonzero() columns); x[mask] = v is a
# where, unless v has one value per masked element (then the same index tensors). Without values
# (decompositions, passes) x[mask] is refused.


class _IndexOp(OpDef):
    """x[k] and x[k0, k1] are both calls with a tuple key: the Index attribute is a tuple."""

    def bind(self, args, kwargs):
        if len(args) >= 2 and not isinstance(args[1], tuple):
            args = (args[0], as_key(args[1]), *args[2:])
        if "key" in kwargs and not isinstance(kwargs["key"], tuple):
            kwargs = {**kwargs, "key": as_key(kwargs["key"])}
        return super().bind(args, kwargs)


def _is_index_tensor(e):
    return isinstance(e, (TensorProxy, torch.Tensor))


def as_key(key):
    """A key as a tuple of indices, as torch reads it: a list holding tensors, sequences, slices,
    None or Ellipsis is a tuple of indices; any other list is one index."""
    if isinstance(key, tuple):
        return key
    if isinstance(key, list) and len(key) < 32 and any(
            _is_index_tensor(e) or isinstance(e, (list, tuple, pyslice)) or e is None or e is Ellipsis for e in key):
        return tuple(key)
    return (key,)


def is_advanced(key):
    return any(_is_index_tensor(e) or isinstance(e, (list, tuple)) for e in key)


def _consumed(key, tensors):
    """How many input dims a key indexes (a mask as many as it has)."""
    it = iter(tensors)
    n = 0
    for e in key:
        if e is TENSOR_INDEX:
            t = next(it)
            n += t.ndim if t.dtype in (torch.bool, torch.uint8) else 1
        elif isinstance(e, (int, pyslice)) and not isinstance(e, bool):
            n += 1
    return n


def _check_mask(mask, input, dim):
    """A boolean mask (a tensor or a nested list made one) covering input's dims from dim: the
    IndexErrors eager raises for it."""
    if dim + mask.ndim > input.ndim:
        raise IndexError(f"too many indices for tensor of dimension {input.ndim}")
    for k in range(mask.ndim):
        if mask.shape[k] != input.shape[dim + k]:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {k} does not match the shape "
                             f"of the indexed tensor {list(input.shape)} at index {dim + k}")


def _materialize(input, key, masks=False):
    """(key with TENSOR_INDEX for each tensor, the tensors): lists become constant int64 tensors
    (a list of bools: one index tensor per dim it covers, its True entries), checked against
    input's shape as eager checks them. masks: bool/uint8 tensors become the index tensors of
    their True entries (_mask_indices) where values can be read."""
    out, tensors, dim = [], [], 0
    ellipsis = input.ndim - sum(1 if isinstance(e, (list, tuple)) or _is_index_tensor(e) else
                                (1 if isinstance(e, (int, pyslice)) and not isinstance(e, bool) else 0) for e in key)
    for e in key:
        if isinstance(e, (list, tuple)):
            t = torch.tensor(e, device="cpu")  # (read here, whatever the default device)
            if t.dtype is torch.bool:
                _check_mask(t, input, dim)
                for idx in t.nonzero(as_tuple=True):
                    out.append(TENSOR_INDEX)
                    tensors.append(tensor(tuple(idx.tolist()), dtype=torch.int64, device=input.device))
                dim += t.ndim
                continue
            t = t.long()  # as eager: a list that is not all bools indexes with its values as int64
            if dim >= input.ndim:
                raise IndexError(f"too many indices for tensor of dimension {input.ndim}")
            n = input.shape[dim]
            bad = t[(t < -n) | (t >= n)]
            if bad.numel():
                raise IndexError(f"index {bad.view(-1)[0].item()} is out of bounds for dimension {dim} with size {n}")
            out.append(TENSOR_INDEX)
            tensors.append(tensor(_as_nested(t.tolist()), dtype=torch.int64, device=input.device))
            dim += 1
        elif _is_index_tensor(e) and e.dtype in (torch.bool, torch.uint8) and masks and _values_known():
            _check_mask(e, input, dim)
            for idx in mask_indices(e):
                out.append(TENSOR_INDEX)
                tensors.append(idx)
            dim += e.ndim
        elif _is_index_tensor(e):
            out.append(TENSOR_INDEX)
            tensors.append(e)
            dim += e.ndim if e.dtype in (torch.bool, torch.uint8) else 1
        else:
            out.append(e)
            if e is Ellipsis:
                dim, ellipsis = dim + ellipsis, 0
            elif isinstance(e, (int, pyslice)) and not isinstance(e, bool):
                dim += 1
    return tuple(out), tensors


def _values_known():
    return tracing.values_known()


def mask_indices(mask):
    """The index tensors eager makes of a mask (mask.nonzero(as_tuple=True)): one int64 tensor
    per mask dim, the positions of its nonzero entries in row-major order. Their length, the
    number of nonzero entries, is read from the tensor (a split: the program checks it); the
    rest are ops (torch.nonzero_static)."""
    n = tracing.read_int(sum_(mask if mask.dtype is torch.bool else ne(mask, 0)), f"the mask {mask.name}",
                         "the number of True elements")
    idx = fallback.dispatch(torch.nonzero_static, mask, size=n)
    return [getitem(idx, (pyslice(None), k)) for k in range(mask.ndim)]


_WhereOp.mask_indices = staticmethod(mask_indices)  # torch.where(condition) (ops/elementwise.py)


def _as_nested(v):
    return tuple(_as_nested(x) for x in v) if isinstance(v, list) else v


@dataclass
class _Plan:
    basic: tuple  # the key of the view that ints, slices, None and Ellipsis take (tensors: slice(None))
    view_shape: tuple
    picks: list  # (view dim, index tensor or Python bool or bool mask, kind "index"/"bool"/"mask")
    bshape: tuple  # the broadcast shape of the index tensors
    dims: list  # the view dims they index
    front: bool  # they are not adjacent: their broadcast dims go first
    out_shape: tuple


def _plan(input, key, tensors, masks=False):
    if _consumed(key, tensors) > input.ndim:
        raise IndexError(f"too many indices for tensor of dimension {input.ndim}")
    it = iter(tensors)
    basic, picks, vdim, ellipsis = [], [], 0, True
    for e in key:
        if e is TENSOR_INDEX:
            t = next(it)
            if t.dtype in (torch.bool, torch.uint8):
                basic += [pyslice(None)] * t.ndim
                picks.append((vdim, t, "mask"))
                vdim += t.ndim
                continue
            if t.dtype not in _INDEX_DTYPES:
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
            basic.append(pyslice(None))
            picks.append((vdim, t, "index"))
            vdim += 1
        elif isinstance(e, bool):
            basic.append(None)
            picks.append((vdim, e, "bool"))
            vdim += 1
        elif e is Ellipsis:
            basic.append(e)
            if ellipsis:
                vdim, ellipsis = vdim + input.ndim - _consumed(key, tensors), False
        elif e is None or isinstance(e, pyslice):
            basic.append(e)
            vdim += 1
        else:
            basic.append(e)
    basic = tuple(basic)
    view_shape = _index_plan(input, basic)[1]
    if any(kind == "mask" for _, _, kind in picks):
        if not masks:
            data_dependent("indexing with a bool mask (x[mask])", "use torch.where(mask, x, other), or multiply by "
                           "the mask, and reduce over it")
        if len(picks) != 1:
            data_dependent("a bool mask together with other index tensors", "index with the mask alone")
        d, mask, _ = picks[0]
        for k, n in enumerate(mask.shape):
            if view_shape[d + k] != n:
                raise IndexError(f"The shape of the mask {list(mask.shape)} at index {k} does not match the shape of "
                                 f"the indexed tensor {list(view_shape)} at index {d + k}")
        return _Plan(basic, view_shape, picks, None, list(range(d, d + mask.ndim)), False, None)
    shapes = [tuple(t.shape) if kind == "index" else ((1,) if t else (0,)) for _, t, kind in picks]
    try:
        bshape = broadcast_shapes(*shapes)
    except RuntimeError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                         + ", ".join(str(list(s)) for s in shapes)) from None
    dims = [d for d, _, _ in picks]
    front = dims != list(range(dims[0], dims[0] + len(dims)))
    rest = [n for d, n in enumerate(view_shape) if d not in dims]
    if front:
        out = (*bshape, *rest)
    else:
        out = (*view_shape[:dims[0]], *bshape, *view_shape[dims[-1] + 1:])
    return _Plan(basic, view_shape, picks, bshape, dims, front, out)


@ltorch("impl.index")
def index(input: Tensor, key: Index, indices: Tensors):
    """input[key] for a key with index tensors (advanced indexing; a copy, not a view): key holds
    TENSOR_INDEX where each of indices goes; bools next to them index new dims of size 1."""
    return TensorProxy(_plan(input, key, indices).out_shape, input.dtype, input.device)


def advanced_getitem(input, key):
    key, tensors = _materialize(input, key, masks=True)
    return index(input, key, tuple(tensors))


def _linear_offsets(plan, index_of):
    """The offsets (1-D, int64) into view's indexed dims (folded into one, in order) of the
    elements the index tensors pick; negative indices count from the end."""
    sizes = [plan.view_shape[d] for d in plan.dims]
    strides = _strides(tuple(sizes))
    lin = None
    for (d, t, kind), n, stride in zip(plan.picks, sizes, strides):
        i = index_of(t, kind)
        i = expand_to(i, plan.bshape)
        i = prims.where(prims.lt(i, 0), prims.add(i, n), i)
        term = prims.mul(i, stride) if stride != 1 else i
        lin = term if lin is None else prims.add(lin, term)
    return prims.reshape(lin, (math.prod(plan.bshape),))


def _index_tensor(device):
    def index_of(t, kind):
        if kind == "bool":  # True: [0] of a new dim of size 1; False: []
            return prims.full((1,) if t else (0,), 0, dtype=torch.int64, device=device)
        return to_dtype(t, torch.int64)

    return index_of


def _layout(plan):
    """(the permutation putting the indexed view dims first, the rest's sizes, the permutation
    moving the picked elements' dims from the front to where they go)."""
    rank = len(plan.view_shape)
    rest = [d for d in range(rank) if d not in plan.dims]
    first = tuple(plan.dims + rest)
    nb, d0 = len(plan.bshape), plan.dims[0]
    if plan.front or d0 == 0:
        place = None
    else:  # (B..., rest before d0..., rest after...) -> (rest before d0..., B..., rest after...)
        place = (*range(nb, nb + d0), *range(nb), *range(nb + d0, nb + len(rest)))
    return first, [plan.view_shape[d] for d in rest], place


@index.decompose
def _(input, key, indices):
    plan = _plan(input, key, indices)
    view = _getitem_decomp(input, plan.basic)
    first, rest, place = _layout(plan)
    v = prims.transpose(view, first) if first != tuple(range(view.ndim)) else view
    v = prims.reshape(v, (math.prod(plan.view_shape[d] for d in plan.dims), *rest))
    out = prims.take(v, 0, _linear_offsets(plan, _index_tensor(input.device)))
    out = prims.reshape(out, (*plan.bshape, *rest))
    return prims.transpose(out, place) if place else out


# setitem: x[key] = value as a new tensor; torch runs it (eager's order of duplicate writes)


@ltorch("impl.setitem")
def setitem(input: Tensor, key: Index, value: TensorOrNumber, *, indices: Tensors = ()):
    """input with input[key] = value, as a new tensor (x[key] = v is recorded as this); key holds
    TENSOR_INDEX where each of indices goes."""
    if indices:
        target = _plan(input, key, indices).out_shape
    else:
        target = _index_plan(input, key)[1]
    if is_tensor(value):
        try:
            fits = broadcast_shapes(_without_leading_ones(value.shape, len(target)), target) == tuple(target)
        except RuntimeError:
            fits = False
        if not fits:
            raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.shape)} cannot be broadcast "
                               f"to indexing result of shape {list(target)}")
    return TensorProxy(input.shape, input.dtype, input.device)


def _without_leading_ones(shape, ndim):
    """A value's shape without the leading size-1 dims beyond ndim (eager's x[key] = v drops them)."""
    shape = tuple(shape)
    while len(shape) > ndim and shape[0] == 1:
        shape = shape[1:]
    return shape


class _SetItemOp(_IndexOp):
    """x[key] = v: keys with lists or index tensors record setitem with indices; a bool mask
    (alone among the key's tensors) is a where on the indexed view."""

    def __call__(self, input, key, value, **kwargs):
        key = as_key(key)
        if kwargs or not is_advanced(key):
            return super().__call__(input, key, value, **kwargs)
        original = key
        key, tensors = _materialize(input, key)
        plan = _plan(input, key, tensors, masks=True)
        if plan.picks[0][2] != "mask":
            return super().__call__(input, key, value, indices=tuple(tensors))
        if is_tensor(value) and value.dtype != input.dtype and not (math.prod(value.shape) == 1 and value.device.type == "cpu"):
            _check_same_dtype(input, value)  # eager: only a one-element CPU value takes masked_fill's way
        if _per_element(plan, value) and _values_known():  # x[mask] = v, one value per masked element
            key, tensors = _materialize(input, original, masks=True)
            return super().__call__(input, key, value, indices=tuple(tensors))
        return _masked_setitem(self, input, plan, value)


def _per_element(plan, value):
    """Whether x[mask] = value has a value per masked element (value's dim at the mask's place is
    not 1), which a where cannot express."""
    if not is_tensor(value):
        return False
    d, mask, _ = plan.picks[0]
    rank = len(plan.view_shape) - mask.ndim + 1
    shape = (1,) * (rank - value.ndim) + tuple(value.shape)
    return value.ndim <= rank and shape[d] != 1


def _masked_setitem(op, input, plan, value):
    d, mask, _ = plan.picks[0]
    m, view_shape = mask.ndim, plan.view_shape
    view = getitem(input, plan.basic)
    mask = _broadcast_to(mask, view_shape, tuple(range(d, d + m)))
    if is_tensor(value):
        mask = ne(mask, 0) if mask.dtype is not torch.bool else mask  # (a number: masked_fill refuses uint8)
        # value broadcasts to x[mask]'s shape (view dims before d, the count of True, dims after)
        rank = len(view_shape) - m + 1
        if value.ndim > rank:
            raise RuntimeError(f"shape mismatch: value tensor of shape {list(value.shape)} cannot be broadcast to "
                               f"indexing result of rank {rank}")
        shape = (1,) * (rank - value.ndim) + tuple(value.shape)
        if shape[d] != 1:
            data_dependent("x[mask] = value with a value per masked element", "use torch.where(mask, value, x) "
                           "with value shaped like x")
        value = reshape(to(value, input.dtype), (*shape[:d], *(1,) * m, *shape[d + 1:]))
        new = where(mask, value, view)
    else:
        new = masked_fill(view, mask, value)
    if all(isinstance(e, pyslice) and e == pyslice(None) or e is Ellipsis for e in plan.basic):
        return new
    return op(input, plan.basic, new)


def _broadcast_to(x, shape, dims):
    """x (whose dims are dims of shape) broadcast to shape, recorded as ltorch ops."""
    full = [1] * len(shape)
    for i, d in enumerate(dims):
        full[d] = x.shape[i]
    return expand(reshape(x, tuple(full)), tuple(shape))


setitem.__class__ = _SetItemOp


# getitem (ops/shape.py: basic indexing, a view) takes tensors and lists too: advanced indexing
class _GetItemOp(_IndexOp):
    """Keys with tensors or lists are advanced indexing: a copy (ltorch.index), not a view."""

    def __call__(self, input, key):
        key = as_key(key)
        return advanced_getitem(input, key) if is_advanced(key) else super().__call__(input, key)


getitem.__class__ = _GetItemOp
