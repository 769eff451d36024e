"""How an in-place update of a view op's result reaches its base (OpDef.unview rules, applied by
core/proxies.py assign): the shape ops' views (thunder/ops/shape.py, join_split.py), written back with
reshape/permute/... or with setitem (thunder/ops/indexing.py); x.view(dtype) (dtype_views.py), read
back as the base's dtype."""
from builtins import slice as pyslice

from thunder.core import trace as tracing
from thunder.ops.dtype_views import view_dtype
from thunder.ops.grad import no_grad_update
from thunder.ops.indexing import setitem
from thunder.ops.join_split import (_chunk_pieces, _narrow_range, _select_key, _split_pieces, _unbind_pieces,
                                    chunk, narrow, select, split, unbind)
from thunder.ops.shape import (as_strided, as_strided_scatter, broadcast_to, contiguous, expand, expand_as, flatten,
                               getitem,
                               movedim, permute, reshape, reshape_as, squeeze, t, transpose, unflatten, unsqueeze,
                               view, view_as)


as_strided.unview(lambda base, value, out_index, size, stride, storage_offset:
                  as_strided_scatter(base, value, size, stride, storage_offset))


def _reshape_unview(base, value, out_index, **args):
    return reshape(value, tuple(base.shape))


def _expand_unview(base, value, out_index, **args):
    if tuple(value.shape) == tuple(base.shape):
        return value
    raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                       "single memory location. Please clone() the tensor before performing the operation.")


def _dim_key(d, entry):
    return (pyslice(None),) * d + (entry,)


def _pieces_unview(pieces_of, squeeze=False):
    def rule(base, value, out_index, **args):
        d, pieces = pieces_of(base, **args)
        lo, hi = pieces[out_index]
        return setitem(base, _dim_key(d, lo if squeeze else pyslice(lo, hi)), value)

    return rule


def _inverse(perm):
    n = len(perm)
    return tuple(sorted(range(n), key=lambda i: perm[i] % n))


for _op in (reshape, view, reshape_as, view_as, flatten, unflatten, squeeze, unsqueeze):
    _op.unview(_reshape_unview)


for _op in (expand, broadcast_to, expand_as):
    _op.unview(_expand_unview)


permute.unview(lambda base, value, out_index, dims: permute(value, _inverse(dims)))


transpose.unview(lambda base, value, out_index, dim0, dim1: transpose(value, dim0, dim1))


t.unview(lambda base, value, out_index: t(value))


movedim.unview(lambda base, value, out_index, source, destination: movedim(value, destination, source))


getitem.unview(lambda base, value, out_index, key: setitem(base, key, value))


select.unview(lambda base, value, out_index, dim, index: setitem(base, _select_key(base, dim, index), value))


narrow.unview(lambda base, value, out_index, dim, start, length: setitem(
    base, _dim_key(*_narrow_range(base, dim, start, length)[:1], pyslice(*_narrow_range(base, dim, start, length)[1:])),
    value))


split.unview(_pieces_unview(lambda b, split_size_or_sections, dim=0: _split_pieces(b, split_size_or_sections, dim)))


chunk.unview(_pieces_unview(lambda b, chunks, dim=0: _chunk_pieces(b, chunks, dim)))


unbind.unview(_pieces_unview(lambda b, dim=0: _unbind_pieces(b, dim), squeeze=True))


def _view_dtype_unview(base, value, out_index, dtype):
    # the same bytes read as the base's dtype (of another element size from a dense value: eager's
    # view(dtype) wants the last dim's stride 1, which values computed by other ops may not have).
    # The view is not differentiable: in eager the base keeps its autograd history, as if unchanged
    if dtype.itemsize != base.dtype.itemsize:
        value = contiguous(value)
    new = view_dtype(value, base.dtype)
    ctx = tracing.current()
    if ctx is not None and ctx.differentiable and (base.dtype.is_floating_point or base.dtype.is_complex):
        new = no_grad_update(base, new)
    return new


view_dtype.unview(_view_dtype_unview)
