"""A one-hot pick lowered as one indexed load per row.

nll_loss and cross_entropy decompose (thunder/ops/losses.py) the target's entry of each row as
`sum(where(eq(broadcast(iota), broadcast(target)), x, 0), class_dim)`: prims that fuse, but
lowered as written they compare every class index with the target, a full pass over each row
(4.9 of cross-entropy's 11 ms at 2048x4096). Here such a sum becomes a linalg.generic over the
rows that reads x at each row's target with a tensor.extract (one load a row, as inductor's
gather). x is a region input (a tile of it in a tiled kernel, read by the tile's own indices),
or a broadcast (nll_loss's weight[target]) or an element-type conversion (bf16 logits read in
f32) of one; anything else keeps the one-hot form. A target outside [0, classes) (ignore_index:
out-of-range ones raised before the kernel, in check_targets) picks 0, as the one-hot sum did,
and is never loaded. The compare, the where and the broadcasts are left unused and removed."""
from thunder.dialects.mlir import ir
from thunder.lowering.linalg.scalar import convert_scalar

NUMBERS = ("const", "scalar")


def _owner(v, name):
    """v's defining thunder op if it is `thunder.<name>`, else None."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        return None
    owner = owner.operation if hasattr(owner, "operation") else owner
    return owner if owner.name == f"thunder.{name}" else None


def _bdims(op):
    return list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dims"]))


def _is_zero(em, v):
    value = em.vals.get(v)
    if value is not None and value[0] == "const":
        return value[1] == 0
    full = _owner(v, "full")
    if full is None:
        return False
    value = em.vals.get(full.operands[0])
    return value is not None and value[0] == "const" and value[1] == 0


def _target(em, hot, dim, rank):
    """The target tensor (ssa, TensorT) of a one-hot `hot` along dim, or None."""
    eq = _owner(hot, "eq")
    if eq is None:
        return None
    a, b = eq.operands
    for classes, target in ((a, b), (b, a)):
        bc, bt = _owner(classes, "broadcast_in_dim"), _owner(target, "broadcast_in_dim")
        if bc is None or bt is None or _bdims(bc) != [dim] or \
                _bdims(bt) != [d for d in range(rank) if d != dim]:
            continue
        iota = _owner(bc.operands[0], "iota")
        if iota is None or any(ir.IntegerAttr(iota.attributes[k]).value != v for k, v in (("start", 0), ("step", 1))):
            continue
        value = em.vals.get(bt.operands[0])
        if value is None or value[0] in NUMBERS or not isinstance(value[0], str) or \
                value[1].elt not in ("i64", "i32"):
            continue
        return value
    return None


def _source(em, x, shape):
    """How to read x (of the tile shape `shape`) at given indices, without computing x whole:
    (ssa, TensorT, [(index of x's dims -> index of the source's dims)], [conversions]); None."""
    convert = _owner(x, "convert_element_type")
    if convert is not None:
        found = _source(em, convert.operands[0], shape)
        if found is None:
            return None
        ssa, t, remap, conversions = found
        return ssa, t, remap, conversions + [str(ir.RankedTensorType(x.type).element_type)]
    bcast = _owner(x, "broadcast_in_dim")
    if bcast is not None:
        y = bcast.operands[0]
        value = em.vals.get(y)
        if value is None or not isinstance(value[0], str) or not isinstance(y.owner, ir.Block):
            return None
        ssa, t = value
        bdims = _bdims(bcast)
        for i, d in enumerate(bdims):
            if t.shape[i] != 1 and t.shape[i] != shape[d]:
                return None  # (read whole where x is a tile along that dim)
        return ssa, t, [lambda ix, i=i, d=d: "0" if t.shape[i] == 1 else ix[d] for i, d in enumerate(bdims)], []
    if not isinstance(x.owner, ir.Block):
        return None
    value = em.vals.get(x)
    if value is None or not isinstance(value[0], str) or tuple(value[1].shape) != tuple(shape):
        return None
    ssa, t = value
    return ssa, t, [lambda ix, k=k: ix[k] for k in range(t.rank)], []


def one_hot_pick(em, op, out_t):
    """The linalg text of `op`, a thunder.sum, as an indexed load per row (see the module's
    docstring); None where op is not such a pick."""
    dims = list(ir.DenseI64ArrayAttr(op.attributes["dims"]))
    w = op.operands[0]
    where = _owner(w, "where")
    wt = em.vals.get(w)
    if len(dims) != 1 or where is None or wt is None or not isinstance(wt[0], str):
        return None
    shape, rank = wt[1].shape, wt[1].rank
    dim = dims[0] % rank
    hot, x, zero = where.operands
    if not _is_zero(em, zero) or not isinstance(shape[dim], int):
        return None
    target = _target(em, hot, dim, rank)
    source = _source(em, x, shape)
    if target is None or source is None or tuple(target[1].shape) != tuple(out_t.shape):
        return None
    t_ssa, tt = target
    ssa, st, remap, conversions = source
    classes = shape[dim]

    def body(b, xs, acc):
        idx = convert_scalar(b, xs[0], tt.elt, "i64")
        inside = b.op(f"arith.cmpi ult, {idx}, {b.const(classes, 'i64')} : i64")  # (negative: huge)
        safe = b.op(f"arith.select {inside}, {idx}, {b.const(0, 'i64')} : i64")
        ix = []
        for j in range(rank):
            if j == dim:
                ix.append(b.op(f"arith.index_cast {safe} : i64 to index"))
            else:
                ix.append(b.op(f"linalg.index {j - (j > dim)} : index"))
        v = b.op(f"tensor.extract {ssa}[{', '.join(f(ix) for f in remap)}] : {st}")
        elt = st.elt
        for c in conversions:
            v, elt = convert_scalar(b, v, elt, c), c
        v = convert_scalar(b, v, elt, out_t.elt)
        return b.op(f"arith.select {inside}, {v}, {b.const(0, out_t.elt)} : {out_t.elt}")
    return em.generic(out_t, [(t_ssa, tt, [f"d{i}" for i in range(out_t.rank)])], body)
