"""Indexing ltorch ops: masked_fill, index_select, gather, scatter_add, index_put.

Decompositions: masked_fill -> where; index_select -> take; gather, scatter_add and index_put
index a flattened tensor with linear indices computed from iotas (take, index_add). VJP rules use
ltorch ops (and the take/index_add prims), so torch runs the backward as torch-level calls.

In-place variants (x.masked_fill_, x.scatter_add_, x.index_put_) come from the out-of-place method
names through the proxies' in-place machinery."""
import math

import torch

from thunder.core.proxies import TensorProxy
from thunder.ops import prims
from thunder.ops.decomp_utils import expand_to, to_dtype
from thunder.ops.meta_utils import broadcast_shapes, canonical_dim, device_of, is_tensor
from thunder.ops.registry import Bool, Int, Tensor, TensorOrNumber, Tensors, ltorch

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
    if values.dtype != input.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{_dtype_name(input.dtype)} for the destination and {_dtype_name(values.dtype)} for the "
                           f"source.")
    k = len(indices)
    target = (*broadcast_shapes(*(i.shape for i in indices)), *input.shape[k:])
    try:
        if broadcast_shapes(values.shape, target) != tuple(target):
            raise RuntimeError
    except RuntimeError:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                           f"indexing result of shape {list(target)}") from None
    return target


def _dtype_name(dtype):
    from thunder.ops.random_ops import _dtype_name as name

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
# VJP rules

from thunder.ops import vjp_utils as _vjp  # noqa: E402
from thunder.ops.vjp_utils import differentiable as _diff, grad_for as _grad  # noqa: E402


@masked_fill.vjp
def _(g, out, input, mask, value):
    from thunder.ops.elementwise import where

    return {"input": _grad(input, where(mask, 0.0, g)) if _diff(input) else None,
            "value": _grad(value, where(mask, g, 0.0)) if _diff(value) else None}


@index_select.vjp
def _(g, out, input, dim, index):
    if not _diff(input):
        return {"input": None}
    from thunder.ops.shape import reshape

    idx = index if index.ndim == 1 else reshape(index, (1,))
    if input.ndim == 0:
        gi = reshape(prims.index_add(_vjp.zeros((1,), g.dtype, g.device), 0, idx, reshape(g, (1,))), ())
    else:
        gi = prims.index_add(_vjp.zeros_like(input, g.dtype), canonical_dim(dim, input.ndim), idx, g)
    return {"input": _grad(input, gi)}


@gather.vjp
def _(g, out, input, dim, index, *, sparse_grad=False):
    if not _diff(input):
        return {"input": None}
    return {"input": _grad(input, scatter_add(_vjp.zeros_like(input, g.dtype), dim, index, g))}


@scatter_add.vjp
def _(g, out, input, dim, index, src):
    gsrc = None
    if _diff(src):
        gsrc = gather(g, dim, index)
        if tuple(gsrc.shape) != tuple(src.shape):  # src larger than index: no gradient to the rest
            gsrc = prims.unslice(gsrc, tuple(src.shape), (0,) * src.ndim, tuple(index.shape), (1,) * src.ndim)
    return {"input": _grad(input, g), "src": _grad(src, gsrc)}


@index_put.vjp
def _(g, out, input, indices, values, accumulate=False):
    gi = gv = None
    if _diff(input):
        gi = g if accumulate else index_put(g, indices, _vjp.zeros((), g.dtype, g.device))
    if _diff(values):
        from thunder.ops.shape import reshape

        k = len(indices)
        lin, bshape = _index_put_linear(g, indices)
        picked = prims.take(reshape(g, (math.prod(g.shape[:k]), *g.shape[k:])), 0, lin)
        gv = _grad(values, reshape(picked, (*bshape, *g.shape[k:])))
    return {"input": _grad(input, gi), "indices": None, "values": gv}
