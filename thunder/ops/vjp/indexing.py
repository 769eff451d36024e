"""The VJP rules of the ops of thunder/ops/indexing.py (registered on them with OpDef.vjp)."""
import math

from thunder.ops import prims, vjp_utils as _vjp
from thunder.ops.elementwise import where
from thunder.ops.indexing import (_index_put_linear, _index_tensor, _layout, _linear_offsets, _plan,
                                  _without_leading_ones, gather, index, index_put, index_select, masked_fill,
                                  scatter_add, setitem)
from thunder.ops.meta_utils import canonical_dim
from thunder.ops.shape import _index_plan, getitem, reshape
from thunder.ops.vjp.shape import _unslice
from thunder.ops.vjp_utils import differentiable as _diff, grad_for as _grad

# VJP rules


@masked_fill.vjp
def _(g, out, input, mask, value):
    return {"input": _grad(input, where(mask, 0.0, g)) if _diff(input) else None,
            "value": _grad(value, where(mask, g, 0.0)) if _diff(value) else None}


@index_select.vjp
def _(g, out, input, dim, index):
    if not _diff(input):
        return {"input": None}

    idx = index if index.ndim == 1 else reshape(index, (1,))
    if input.ndim == 0:
        gi = reshape(prims.index_add(_vjp.zeros((1,), g.dtype, g.device), 0, idx, reshape(g, (1,))), ())
    else:
        gi = prims.zeros_index_add(tuple(input.shape), canonical_dim(dim, input.ndim), idx, g)
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
        k = len(indices)
        lin, bshape = _index_put_linear(g, indices)
        picked = prims.take(reshape(g, (math.prod(g.shape[:k]), *g.shape[k:])), 0, lin)
        gv = _grad(values, reshape(picked, (*bshape, *g.shape[k:])))
    return {"input": _grad(input, gi), "indices": None, "values": gv}


@index.vjp
def _(g, out, input, key, indices):
    """The picked elements' cotangents added back where they came from (index_add), then through
    the view's slicing."""
    if not _diff(input):
        return {"input": None, "indices": None}

    plan = _plan(input, key, indices)
    first, rest, place = _layout(plan)
    if place:
        g = prims.transpose(g, _vjp.inverse_permutation(place))
    g = prims.reshape(g, (math.prod(plan.bshape), *rest))
    sizes = [plan.view_shape[d] for d in plan.dims]
    acc = prims.zeros_index_add((math.prod(sizes), *rest), 0, _linear_offsets(plan, _index_tensor(g.device)), g)
    acc = prims.reshape(acc, (*sizes, *rest))
    if first != tuple(range(len(first))):
        acc = prims.transpose(acc, _vjp.inverse_permutation(first))
    return {"input": _grad(input, _unslice(acc, input, _index_plan(input, plan.basic)[0])), "indices": None}


@setitem.vjp
def _(g, out, input, key, value, *, indices=()):
    """The written elements get no cotangent; the value gets theirs (each duplicate's, as eager)."""
    gv = None
    if _diff(value):
        picked = index(g, key, indices) if indices else _basic_getitem(g, key)
        gv = _vjp.sum_to_shape(picked, _without_leading_ones(value.shape, picked.ndim))
        gv = _grad(value, reshape(gv, tuple(value.shape)) if tuple(gv.shape) != tuple(value.shape) else gv)
    zero = 0.0 if g.dtype.is_floating_point else 0
    return {"input": setitem(g, key, zero, indices=indices), "value": gv, "indices": None}


def _basic_getitem(x, key):
    return getitem(x, key)
