"""thunder prims -> linalg on tensors, as MLIR text (scalar semantics of each prim: scalar.py).

The input is a `func.func` whose body holds `thunder.*` prims (generic form, as printed by
`Trace.to_mlir()` after `thunder-decompose`) and the `arith.constant` numbers they take. It is
parsed in its own context with unregistered dialects allowed, so this module does not depend on
the IRDL definitions; each prim is rewritten into text:

- elementwise prims: one `linalg.generic` with identity maps (numbers become constants inside
  the body, operands are converted to the op's compute type in the body);
- `thunder.broadcast_in_dim`: a `linalg.generic` that only reads its input through a projected
  map (`(d0, d1) -> (d1)`, `(d0, d1) -> (d0, 0)` for size-1 dims); elementwise fusion folds it
  into the consumer's indexing map;
- `thunder.sum/amax/amin/prod`: `linalg.fill` of the identity, then a `linalg.generic` with
  reduction iterators (f16/bf16 accumulate in f32);
- `thunder.reshape`: `tensor.collapse_shape` / `tensor.expand_shape` (through rank 1), or in a
  tile a gather through floordiv/mod maps;
- `thunder.transpose`: a permuted input map; `thunder.slice`: `tensor.extract_slice`;
  `thunder.cat`: `tensor.insert_slice` of each input into a `tensor.empty`.

The generated func is destination-passing: outputs are extra `memref` arguments that the results
are materialized into, and the func returns nothing. `llvm.emit_c_interface` gives it a
`_mlir_ciface_<name>` entry.

Tiling (`tiling`): when all results share their first dim and every op can be computed on a
slice of rows of it (no op reduces over it or reshapes across it; operands without it, such as a
broadcast weight, are read whole), the func takes memrefs whose tiled dim is dynamic plus a row
range (lo, hi), and loops over tiles of `tile_rows` rows (inputs + outputs of a tile are about
TILE_BYTES, so a tile's intermediates stay in cache): each tile is a `memref.subview` of the
inputs, read as tensors, computed, and written into a subview of the outputs. Values read whole
are computed once before the loop. A runtime can give each thread its own row range. Otherwise
the func takes tensors (with a `bufferization.buffer_layout` describing the torch strides they
will be called with) and computes the whole region at once.
"""
from __future__ import annotations

import itertools
import math as _pymath

from thunder.dialects.mlir import ir
from thunder.lowering.linalg.scalar import (ELEMENTWISE, REDUCTIONS, SUPPORTED, Body, UnsupportedOp,  # noqa: F401
                                            convert_scalar, elt_bytes, is_float, literal, opmath, promote,
                                            reduce_combine, reduction_identity, supported)


def _dim(s):
    return "?" if s is None else str(s)


class TensorT:
    """A ranked tensor type: shape (None: the dynamic size of a tile along the tiled axis) and
    element type name; scalar: a runtime number (a func argument of type f64/i64, which the
    kernel takes as a 0-d memref)."""

    def __init__(self, shape, elt, scalar=False):
        self.shape, self.elt = tuple(None if s is None else int(s) for s in shape), elt
        self.scalar = scalar

    @property
    def rank(self):
        return len(self.shape)

    def tile(self, axis):
        """This type as a tile: dynamic along axis (None: unchanged)."""
        if axis is None:
            return self
        return TensorT(self.shape[:axis] + (None,) + self.shape[axis + 1:], self.elt)

    def __str__(self):
        return "tensor<" + "".join(f"{_dim(s)}x" for s in self.shape) + self.elt + ">"

    def memref(self, layout=None):
        s = "memref<" + "".join(f"{_dim(s)}x" for s in self.shape) + self.elt
        return s + (f", {layout}>" if layout else ">")


# the types of the runtime numbers a kernel takes (as 0-d memrefs it reads once)
SCALAR_TYPES = ("f64", "i64")


def tensor_t(t: ir.Type) -> TensorT:
    if not isinstance(t, ir.ShapedType) and str(t) in SCALAR_TYPES:
        return TensorT((), str(t), scalar=True)
    rt = ir.RankedTensorType(t)
    if rt.encoding is not None:
        raise UnsupportedOp(f"tensor with encoding (non-CPU device): {t}")
    return TensorT(rt.shape, str(rt.element_type))


# ---- affine maps
def _dims(n):
    return ", ".join(f"d{i}" for i in range(n))


def amap(n, exprs):
    return f"affine_map<({_dims(n)}) -> ({', '.join(exprs)})>"


def identity_map(n):
    return amap(n, [f"d{i}" for i in range(n)])


def broadcast_exprs(in_shape, out_shape):
    """numpy-style: trailing alignment, size-1 dims read index 0."""
    off = len(out_shape) - len(in_shape)
    if off < 0:
        raise UnsupportedOp(f"cannot broadcast {in_shape} to {out_shape}")
    exprs = []
    for i, s in enumerate(in_shape):
        o = out_shape[off + i]
        if s == o:
            exprs.append(f"d{off + i}")
        elif s == 1:
            exprs.append("0")
        else:
            raise UnsupportedOp(f"cannot broadcast {in_shape} to {out_shape}")
    return exprs


# ---- the rewrite
class _Emitter:
    def __init__(self, approx=False):
        self.approx = approx
        self.lines = []
        self.n = 0
        # input ir.Value -> (ssa name, TensorT), ("const", python value, type) or ("scalar", ssa
        # name, type) (a runtime number, loaded once at the kernel's start)
        self.vals = {}
        self.whole, self.read_whole = {}, set()  # (tiled kernels) see operand
        self.reduce_too = None  # (reduction, acc type, dims, filled init): see _generic_and_reduction
        self.reduced = {}  # reduction prim result -> (ssa of its accumulator, acc TensorT)
        self.tiled = False  # (a tiled kernel: values of static shape are computed before the loop)
        self.slices = {}  # (value, dim, offset, size) -> its slice (_slice_value)

    def fresh(self, base="v"):
        self.n += 1
        return f"%{base}{self.n}"

    def emit(self, text):
        self.lines.append("    " + text)

    def empty(self, t: TensorT):
        e = self.fresh("e")
        dyn = "%n" if None in t.shape else ""  # the tile's size along the tiled axis
        self.emit(f"{e} = tensor.empty({dyn}) : {t}")
        return e

    def generic(self, out_t: TensorT, ins, body_fn, iterators=None, init=None, out_map=None):
        """ins: [(ssa, TensorT, input map exprs)]; body_fn(Body, [scalar names], out scalar)
        returns the yielded scalar."""
        if self.reduce_too is not None:  # see _lower_ops
            reduce_too, self.reduce_too = self.reduce_too, None
            return self._generic_and_reduction(out_t, ins, body_fn, *reduce_too)
        n = len(iterators) if iterators else out_t.rank
        iterators = iterators or ["parallel"] * n
        init = init or self.empty(out_t)
        maps = [amap(n, m) for _, _, m in ins] + [out_map or identity_map(n)]
        res = self.fresh()
        b = Body(self.approx)
        args = [f"%in{i}" for i in range(len(ins))]
        y = body_fn(b, args, "%acc")
        head = (f"{res} = linalg.generic {{indexing_maps = [{', '.join(maps)}], "
                f"iterator_types = [{', '.join(repr(i).replace(chr(39), chr(34)) for i in iterators)}]}}")
        if ins:
            head += (f" ins({', '.join(s for s, _, _ in ins)} : {', '.join(str(t) for _, t, _ in ins)})")
        head += f" outs({init} : {out_t}) {{"
        self.emit(head)
        bb = ", ".join([f"{a}: {t.elt}" for a, (_, t, _) in zip(args, ins)] + [f"%acc: {out_t.elt}"])
        self.lines.append(f"    ^bb0({bb}):")
        for line in b.lines:
            self.emit("  " + line)
        self.emit(f"  linalg.yield {y} : {out_t.elt}")
        self.emit(f"}} -> {out_t}")
        return res

    def _generic_and_reduction(self, out_t, ins, body_fn, reduction, acc_t, dims, filled):
        """An elementwise generic that also reduces its result (reduction: the prim's name, over
        dims, accumulated in acc_t from filled): one pass writes the values and their row sums
        (softmax's exps, which the normalization reads again). Returns "%r#0"; "%r#1" holds the
        reduction."""
        n = out_t.rank
        init = self.empty(out_t)
        out_map = amap(n, [f"d{i}" for i in range(n) if i not in dims])
        maps = [amap(n, m) for _, _, m in ins] + [identity_map(n), out_map]
        iters = ", ".join('"reduction"' if i in dims else '"parallel"' for i in range(n))
        res = self.fresh()
        b = Body(self.approx)
        args = [f"%in{i}" for i in range(len(ins))]
        y = body_fn(b, args, "%out")
        x = convert_scalar(b, y, out_t.elt, acc_t.elt)
        r = reduce_combine(reduction)(b, [x, "%acc"], acc_t.elt)
        acc_shape = TensorT([s for i, s in enumerate(out_t.shape) if i not in dims], acc_t.elt)
        head = f"{res}:2 = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{iters}]}}"
        if ins:
            head += f" ins({', '.join(s for s, _, _ in ins)} : {', '.join(str(t) for _, t, _ in ins)})"
        self.emit(head + f" outs({init}, {filled} : {out_t}, {acc_shape}) {{")
        bb = ", ".join([f"{a}: {t.elt}" for a, (_, t, _) in zip(args, ins)] + [f"%out: {out_t.elt}", f"%acc: {acc_t.elt}"])
        self.lines.append(f"    ^bb0({bb}):")
        for line in b.lines:
            self.emit("  " + line)
        self.emit(f"  linalg.yield {y}, {r} : {out_t.elt}, {acc_t.elt}")
        self.emit(f"}} -> ({out_t}, {acc_shape})")
        return f"{res}#0", f"{res}#1"

    # operands of a prim: tensors (ssa, TensorT) or constants; the whole one of a value computed
    # both ways (_propagate) where the op reads it whole
    def operand(self, v):
        vals = self.whole if v in self.read_whole and v in self.whole else self.vals
        value = vals[v]
        if isinstance(value[0], _Parts):  # written into one tensor where an op needs it whole
            value = vals[v] = (_write_parts(self, value[0], value[1]), value[1])
        return value


NUMBERS = ("const", "scalar")  # the kinds of operands that are numbers, not tensors


def _scalar_param(em, i, a, lines):
    """A runtime number argument: a 0-d memref, read once."""
    t = tensor_t(a.type)
    lines.append(f"    %num{i} = memref.load %arg{i}[] : memref<{t.elt}>")
    em.vals[a] = ("scalar", f"%num{i}", t.elt)
    return f"%arg{i}: memref<{t.elt}>"


def _elementwise(em, name, operands, out_t: TensorT, attrs):
    fn, kind = ELEMENTWISE[name]
    if kind == "convert":
        dst = str(ir.TypeAttr(attrs["dtype"]).value)
        return _map(em, operands, out_t, lambda b, xs, ts: convert_scalar(b, xs[0], ts[0], dst), None, dst)
    if kind == "arith":  # f16/bf16: computed in f32 and rounded once, as torch's kernels (opmath)
        ct = opmath(out_t.elt)

        def arith(b, xs, ts):
            b.storage = out_t.elt
            return fn(b, xs, ct)
        return _map(em, operands, out_t, arith, ct, ct)
    if kind == "cmp":
        ct = promote([o[1].elt for o in operands if o[0] not in NUMBERS])
        for o in operands:  # numbers only raise the category (int tensor < 0.5 compares as float)
            if o[0] not in NUMBERS:
                continue
            if ct is None:
                ct = o[2]
            elif is_float(o[2]) and not is_float(ct):
                ct = "f32"
            elif o[2] != "i1" and ct == "i1":
                ct = "i64"
        return _map(em, operands, out_t, lambda b, xs, ts: fn(b, xs, ct), ct, "i1")
    if kind == "isnan":
        return _map(em, operands, out_t, lambda b, xs, ts: fn(b, [xs[0]], ts[0]), None, "i1")
    if kind == "where":
        ct = out_t.elt

        def body(b, xs, ts):
            pred = convert_scalar(b, xs[0], ts[0], "i1")
            a = convert_scalar(b, xs[1], ts[1], ct)
            c = convert_scalar(b, xs[2], ts[2], ct)
            return fn(b, [pred, a, c], ct)
        return _map(em, operands, out_t, body, None, ct)
    raise AssertionError(kind)


def _map(em, operands, out_t, scalar_fn, ct, res_t):
    """A linalg.generic over out_t's shape. Tensor operands are read through broadcasting maps;
    numbers become constants in the body (of type ct, or their own type); if ct is given, every
    operand is converted to ct first. scalar_fn(body, scalars, their types) returns a scalar of
    type res_t, converted to out_t's element type."""
    ins, slots = [], []
    for o in operands:
        if o[0] in NUMBERS:
            slots.append(o)
        else:
            ssa, t = o
            slots.append(("in", len(ins), t.elt))
            ins.append((ssa, t, broadcast_exprs(t.shape, out_t.shape)))

    def body(b, args, acc):
        xs, ts = [], []
        for s in slots:
            if s[0] == "const":
                t = ct or s[2]
                xs.append(b.const(s[1], t))
                ts.append(t)
            elif s[0] == "scalar":  # (rounded to ct as a constant's literal would be)
                t = ct or s[2]
                xs.append(s[1] if t == s[2] else convert_scalar(b, s[1], s[2], t))
                ts.append(t)
            else:
                v, t = args[s[1]], s[2]
                if ct is not None:
                    v, t = convert_scalar(b, v, t, ct), ct
                xs.append(v)
                ts.append(t)
        return convert_scalar(b, scalar_fn(b, xs, ts), res_t, out_t.elt)

    return em.generic(out_t, ins, body)


def _lower_op(em, op, out_t: TensorT):
    name = op.name.removeprefix("thunder.")
    if name not in SUPPORTED:
        raise UnsupportedOp(f"no linalg lowering for {op.name}")
    if 0 in out_t.shape:  # an empty result holds no data, whatever the op
        return em.empty(out_t)
    attrs = op.attributes
    if name in ELEMENTWISE and em.reduce_too is None:
        parts = _elementwise_parts(em, op, name, out_t, attrs)
        if parts is not None:
            return parts
    operands = [em.operand(v) for v in op.operands]
    if name in ELEMENTWISE:
        return _elementwise(em, name, operands, out_t, attrs)
    if name == "broadcast_in_dim":
        ssa, t = operands[0]
        bdims = list(ir.DenseI64ArrayAttr(attrs["broadcast_dims"]))
        exprs = []
        for i, d in enumerate(bdims):
            exprs.append("0" if t.shape[i] == 1 and out_t.shape[d] != 1 else f"d{d}")
        return em.generic(out_t, [(ssa, t, exprs)], lambda b, xs, acc: xs[0])
    if name == "transpose":
        ssa, t = operands[0]
        perm = list(ir.DenseI64ArrayAttr(attrs["permutation"]))
        inv = [0] * len(perm)
        for i, p in enumerate(perm):
            inv[p] = i
        return em.generic(out_t, [(ssa, t, [f"d{inv[j]}" for j in range(t.rank)])], lambda b, xs, acc: xs[0])
    if name == "reshape":
        ssa, t = operands[0]
        return _reshape(em, ssa, t, out_t)
    if name == "slice":  # a strided view (a tile's dynamic dim is never sliced: _operand_axes)
        ssa, t = operands[0]
        starts, steps = (list(ir.DenseI64ArrayAttr(attrs[k])) for k in ("start_indices", "strides"))
        sizes = ", ".join("%n" if s is None else str(s) for s in out_t.shape)
        r = em.fresh()
        em.emit(f"{r} = tensor.extract_slice {ssa}[{', '.join(map(str, starts))}] [{sizes}] "
                f"[{', '.join(map(str, steps))}] : {t} to {out_t}")
        return r
    if name == "cat":  # its parts, written into one tensor when an op reads it whole (_Parts)
        dim = ir.IntegerAttr(attrs["dim"]).value % out_t.rank
        parts, offset = [], 0
        for ssa, t in operands:
            if t.elt != out_t.elt:
                raise UnsupportedOp(f"cat of {t.elt} into {out_t.elt}")
            if t.shape[dim]:
                parts.append((offset, t.shape[dim], (ssa, t)))
            offset += t.shape[dim]
        return _Parts(dim, parts)
    if name == "full":
        value = operands[0]
        init = em.empty(out_t)
        c = em.fresh("c")
        em.emit(f"{c} = arith.constant {literal(value[1], out_t.elt)} : {out_t.elt}")
        r = em.fresh()
        em.emit(f"{r} = linalg.fill ins({c} : {out_t.elt}) outs({init} : {out_t}) -> {out_t}")
        return r
    if name == "iota":  # start + i * step, i from the loop index (plus the tile's first row %i)
        start, step = (ir.IntegerAttr(attrs[k]).value for k in ("start", "step"))

        def iota_body(b, xs, acc):
            i = b.op("linalg.index 0 : index")
            if out_t.shape[0] is None:
                i = b.op(f"arith.addi {i}, %i : index")
            v = b.op(f"arith.index_cast {i} : index to i64")
            if step != 1:
                v = b.op(f"arith.muli {v}, {b.const(step, 'i64')} : i64")
            if start != 0:
                v = b.op(f"arith.addi {v}, {b.const(start, 'i64')} : i64")
            return convert_scalar(b, v, "i64", out_t.elt)
        return em.generic(out_t, [], iota_body)
    if name in REDUCTIONS:
        ssa, t = operands[0]
        dims = sorted(d % max(t.rank, 1) for d in ir.DenseI64ArrayAttr(attrs["dims"]))
        # no dims, or a 0-d input (whose one element is the result): a copy. A 0-d reduction as
        # a linalg.generic would have no reduction iterator, and elementwise fusion would then
        # merge it into its consumer's loop, accumulating into one buffer across iterations
        if not dims or t.rank == 0:
            return em.generic(out_t, [(ssa, t, [f"d{i}" for i in range(t.rank)])],
                              lambda b, xs, acc: convert_scalar(b, xs[0], t.elt, out_t.elt))
        if op.results[0] in em.reduced:  # computed with its operand (_generic_and_reduction)
            r, acc_t = em.reduced[op.results[0]]
        else:
            acc_t, filled = _reduction_init(em, name, out_t)
            iters = ["reduction" if i in dims else "parallel" for i in range(t.rank)]
            out_map = amap(t.rank, [f"d{i}" for i in range(t.rank) if i not in dims])
            combine = reduce_combine(name)

            def body(b, xs, acc):
                x = convert_scalar(b, xs[0], t.elt, acc_t.elt)
                return combine(b, [x, acc], acc_t.elt)
            r = em.generic(acc_t, [(ssa, t, [f"d{i}" for i in range(t.rank)])], body,
                           iterators=iters, init=filled, out_map=out_map)
        if acc_t.elt == out_t.elt:
            return r
        return em.generic(out_t, [(r, acc_t, [f"d{i}" for i in range(out_t.rank)])],
                          lambda b, xs, acc: convert_scalar(b, xs[0], "f32", out_t.elt))
    raise UnsupportedOp(f"no linalg lowering for {op.name}")


class _Parts:
    """A value held as parts along one dim, each a tensor: a cat, and the elementwise ops of it
    computed part by part (_elementwise_parts), so a rotary embedding's halves are computed from
    slices of their inputs, without a buffer holding the cat. Written into one tensor
    (_write_parts) where an op reads it whole, and for the region's results."""

    def __init__(self, dim, parts):
        self.dim, self.parts = dim, parts  # parts: [(offset, size, (ssa, TensorT))]

    def layout(self):
        return self.dim, tuple((offset, size) for offset, size, _ in self.parts)


def _write_parts(em, value, out_t):
    """tensor.insert_slice of each part into a tensor.empty (a tile: of the tile's rows)."""
    r = em.empty(out_t)
    for offset, _, (ssa, t) in value.parts:
        offsets = [offset if i == value.dim else 0 for i in range(out_t.rank)]
        sizes = ", ".join("%n" if s is None else str(s) for s in t.shape)
        new = em.fresh()
        em.emit(f"{new} = tensor.insert_slice {ssa} into {r}[{', '.join(map(str, offsets))}] [{sizes}] "
                f"[{', '.join('1' for _ in offsets)}] : {t} into {out_t}")
        r = new
    return r


def _elementwise_parts(em, op, name, out_t, attrs):
    """An elementwise op of values held as parts (one layout, full shape) computed part by part
    (the other operands sliced: _slice_value), as a _Parts; None when it does not apply."""
    layouts = set()
    for v in op.operands:
        value = em.vals.get(v)
        if value is not None and isinstance(value[0], _Parts) and v not in em.read_whole:
            if value[1].shape != out_t.shape:
                return None  # (broadcast)
            layouts.add(value[0].layout())
    if len(layouts) != 1:
        return None
    dim, spans = layouts.pop()
    parts = []
    for j, (offset, size) in enumerate(spans):
        part_t = TensorT(out_t.shape[:dim] + (size,) + out_t.shape[dim + 1:], out_t.elt)
        operands = []
        for v in op.operands:
            value = em.vals[v]
            if value[0] in NUMBERS:
                operands.append(value)
            elif isinstance(value[0], _Parts) and v not in em.read_whole:
                operands.append(value[0].parts[j][2])
            else:
                t = value[1]
                e = dim - (out_t.rank - t.rank)  # (numpy-style broadcasting)
                operands.append(em.operand(v) if e < 0 or t.shape[e] == 1 else _slice_value(em, v, e, offset, size))
        parts.append((offset, size, (_elementwise(em, name, operands, part_t, attrs), part_t)))
    return _Parts(dim, parts)


def _slice_value(em, v, e, offset, size):
    """(ssa, TensorT) of v's elements offset .. offset + size along its dim e: an elementwise op
    or a broadcast computed again on slices of its operands (in a tiled kernel, when it is
    computed in the loop), else a tensor.extract_slice."""
    key = (v, e, offset, size)
    if key in em.slices:
        return em.slices[key]
    ssa, t = em.operand(v)
    part_t = TensorT(t.shape[:e] + (size,) + t.shape[e + 1:], t.elt)
    owner = v.owner
    name = owner.name.removeprefix("thunder.") if not isinstance(owner, ir.Block) else None
    in_loop = not em.tiled or None in t.shape
    if in_loop and name in ELEMENTWISE and v not in em.whole:
        operands = []
        for u in owner.operands:
            value = em.vals[u]
            if value[0] in NUMBERS:
                operands.append(value)
                continue
            ut = value[1]
            eu = e - (t.rank - ut.rank)
            operands.append(em.operand(u) if eu < 0 or ut.shape[eu] == 1 else _slice_value(em, u, eu, offset, size))
        result = (_elementwise(em, name, operands, part_t, owner.attributes), part_t)
    elif in_loop and name == "broadcast_in_dim" and v not in em.whole:
        y = owner.operands[0]
        bdims = list(ir.DenseI64ArrayAttr(owner.attributes["broadcast_dims"]))
        yt = em.operand(y)[1]
        i = bdims.index(e) if e in bdims else None
        ys, yt = _slice_value(em, y, i, offset, size) if i is not None and yt.shape[i] != 1 else em.operand(y)
        exprs = ["0" if yt.shape[k] == 1 and part_t.shape[d] != 1 else f"d{d}" for k, d in enumerate(bdims)]
        result = (em.generic(part_t, [(ys, yt, exprs)], lambda b, xs, acc: xs[0]), part_t)
    else:
        r = em.fresh()
        offsets = ", ".join(str(offset) if d == e else "0" for d in range(t.rank))
        sizes = ", ".join("%n" if s is None else str(s) for s in part_t.shape)
        em.emit(f"{r} = tensor.extract_slice {ssa}[{offsets}] [{sizes}] [{', '.join('1' for _ in t.shape)}] "
                f": {t} to {part_t}")
        result = (r, part_t)
    em.slices[key] = result
    return result


def _reduction_init(em, name, out_t):
    """(accumulator type, its init filled with the reduction's identity): f16/bf16 accumulate in
    f32, rounded once at the end (as torch's reductions)."""
    acc_t = TensorT(out_t.shape, "f32") if out_t.elt in ("f16", "bf16") else out_t
    init = em.empty(acc_t)
    c = em.fresh("c")
    em.emit(f"{c} = arith.constant {literal(reduction_identity(name, acc_t.elt), acc_t.elt)} : {acc_t.elt}")
    filled = em.fresh()
    em.emit(f"{filled} = linalg.fill ins({c} : {acc_t.elt}) outs({init} : {acc_t}) -> {acc_t}")
    return acc_t, filled


def _reduction_with_operand(op, lines_for, dual):
    """The reduction prim to compute in the same pass as op's elementwise result (its first user,
    when it has others, which read the result again: softmax's exps), or None."""
    r = op.results[0]
    users = []
    for u in r.uses:
        if u.owner not in users:
            users.append(u.owner)
    if len(users) < 2 or r in dual or 0 in _static_shape(r):
        return None
    block_ops = list(op.block.operations)
    first = min(users, key=lambda u: block_ops.index(u))
    name = first.name.removeprefix("thunder.")
    if name not in REDUCTIONS or first.operands[0] != r or first.results[0] in dual or \
            lines_for(first.results[0]) is not lines_for(r):
        return None
    rank = len(_static_shape(r))
    dims = sorted(d % max(rank, 1) for d in ir.DenseI64ArrayAttr(first.attributes["dims"]))
    return (first, name, dims) if dims and rank else None


def _reshape(em, ssa, t: TensorT, out_t: TensorT):
    """Through rank 1 (collapse_shape/expand_shape), or for a tile, a gather."""
    if t.shape == out_t.shape:
        return ssa
    if None in t.shape:
        return _reshape_tile(em, ssa, t, out_t)
    flat_t = TensorT((_pymath.prod(t.shape),), t.elt)
    # to rank 1
    if t.rank == 0:
        flat = em.fresh()
        em.emit(f"{flat} = tensor.expand_shape {ssa} [] output_shape [1] : {t} into {flat_t}")
    elif t.rank == 1:
        flat = ssa
    else:
        flat = em.fresh()
        em.emit(f"{flat} = tensor.collapse_shape {ssa} [[{', '.join(str(i) for i in range(t.rank))}]] "
                f": {t} into {flat_t}")
    # from rank 1
    if out_t.rank == 1:
        return flat
    r = em.fresh()
    if out_t.rank == 0:
        em.emit(f"{r} = tensor.collapse_shape {flat} [] : {flat_t} into {out_t}")
    else:
        em.emit(f"{r} = tensor.expand_shape {flat} [[{', '.join(str(i) for i in range(out_t.rank))}]] "
                f"output_shape [{', '.join(str(s) for s in out_t.shape)}] : {flat_t} into {out_t}")
    return r


def _reshape_tile(em, ssa, t: TensorT, out_t: TensorT):
    """A tile's reshape as a linalg.generic reading the input through floordiv/mod index maps:
    the tiled axes (None) split both shapes into dims before and after it that reshape among
    themselves (see _operand_axes). (A collapse/expand of a strided tile would need a copy.)"""
    d, e = out_t.shape.index(None), t.shape.index(None)

    def linear(dims):  # the row-major linear index over these output dims
        terms = []
        for j in dims:
            step = _pymath.prod(out_t.shape[j + 1:dims[-1] + 1])
            terms.append(f"d{j}" if step == 1 else f"d{j} * {step}")
        return " + ".join(terms) or "0"

    def delinear(index, in_dims):  # that index as indices of these input dims
        exprs = []
        for k, m in enumerate(in_dims):
            step = _pymath.prod(t.shape[m + 1:in_dims[-1] + 1])
            x = f"({index})" if step == 1 else f"(({index}) floordiv {step})"
            exprs.append(x if k == 0 else f"{x} mod {t.shape[m]}")
        return exprs

    before = delinear(linear(list(range(d))), list(range(e))) if e else []
    after = delinear(linear(list(range(d + 1, out_t.rank))), list(range(e + 1, t.rank))) if e + 1 < t.rank else []
    return em.generic(out_t, [(ssa, t, before + [f"d{d}"] + after)], lambda b, xs, acc: xs[0])


def _constant(op):
    attr = op.attributes["value"]
    t = str(op.results[0].type)
    if isinstance(attr, ir.FloatAttr):
        return ("const", ir.FloatAttr(attr).value, t)
    if isinstance(attr, ir.BoolAttr):
        return ("const", ir.BoolAttr(attr).value, t)
    if isinstance(attr, ir.IntegerAttr):
        v = ir.IntegerAttr(attr).value
        return ("const", bool(v) if t == "i1" else v, t)
    raise UnsupportedOp(f"constant {attr}")


def strided_layout(shape, strides):
    """The memref layout for a tensor with these torch strides (offset 0: we pass the pointer
    to the first element as the aligned pointer)."""
    if strides is None:
        return "strided<[" + ", ".join("?" for _ in shape) + "], offset: ?>"
    return "strided<[" + ", ".join(_dim(s) for s in strides) + "]>"  # (None: a dynamic stride)


def find_func(module: ir.Module, name: str | None):
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if name is not None:
        for f in funcs:
            if ir.StringAttr(f.attributes["sym_name"]).value == name:
                return f
    if len(funcs) == 1:
        return funcs[0]
    raise ValueError(f"no func.func @{name} in the region")


_PARSE_CONTEXT = None


def parse_region(text: str) -> tuple[ir.Context, ir.Module]:
    """The region parsed in a context shared by all regions (creating one costs ~5 ms)."""
    global _PARSE_CONTEXT
    if _PARSE_CONTEXT is None:
        _PARSE_CONTEXT = ir.Context()
        _PARSE_CONTEXT.allow_unregistered_dialects = True
    with _PARSE_CONTEXT:
        return _PARSE_CONTEXT, ir.Module.parse(text)


def signature(text, name=None):
    """(func name, [input TensorT], [output TensorT]) of the region's func (name None: the
    module's only func)."""
    ctx, module = parse_region(text)
    with ctx:
        f = find_func(module, name)
        ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
        return (ir.StringAttr(f.attributes["sym_name"]).value,
                [tensor_t(t) for t in ftype.inputs], [tensor_t(t) for t in ftype.results])


# ---- tiling: the region runs as a loop over tiles of rows of its outputs' first dim
WHOLE = "whole"  # a value every tile reads in full (computed once, before the loop)
TILE_BYTES = 64 * 1024  # inputs + outputs of one tile: about L2-sized, so a tile's values stay in cache
# the largest row (of results, along the tiled dim) preferred: tiles of whole rows of an outer
# dim read contiguous memory; tiles along an inner dim are strided (a 64x128x128 softmax tiled
# along its second dim reads 64 pieces 64 KiB apart, which share cache sets)
ROW_BYTES = 128 * 1024
MIN_PIECE_BYTES = 2 * 1024  # see _tiled
DUAL_BYTES = 64 * 1024  # the largest value computed both whole and tile by tile (see _propagate)


def _static_shape(v):
    return tuple(ir.RankedTensorType(v.type).shape)


def _is_number(v):
    return not isinstance(v.type, ir.ShapedType)


def _operand_axes(op, a):
    """[(operand, its tiled axis or WHOLE)] for the tensor operands of op when its result is
    tiled along axis a (or read WHOLE); None if op cannot be computed tile by tile."""
    name = op.name.removeprefix("thunder.")
    tensors = [v for v in op.operands if not _is_number(v)]
    if a == WHOLE:
        return [(v, WHOLE) for v in tensors]
    out = _static_shape(op.results[0])
    if name in ELEMENTWISE:  # numpy-style broadcasting: an operand without the axis is read whole
        axes = []
        for v in tensors:
            s = _static_shape(v)
            e = a - (len(out) - len(s))
            axes.append((v, e if e >= 0 and s[e] == out[a] else WHOLE))
        return axes
    x = tensors[0] if tensors else None
    if name == "broadcast_in_dim":
        bdims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dims"]))
        if a in bdims and _static_shape(x)[bdims.index(a)] == out[a]:
            return [(x, bdims.index(a))]
        return [(x, WHOLE)]
    if name == "transpose":
        return [(x, list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))[a])]
    if name == "slice":  # tiles of rows of the result are tiles of the input's if the axis is not sliced
        starts, steps = (list(ir.DenseI64ArrayAttr(op.attributes[k])) for k in ("start_indices", "strides"))
        return [(x, a)] if starts[a] == 0 and steps[a] == 1 and _static_shape(x)[a] == out[a] else None
    if name == "cat":  # tiles of rows of every input, unless the rows are what is concatenated
        if a == ir.IntegerAttr(op.attributes["dim"]).value % len(out):
            return None
        return [(v, a) for v in tensors]
    if name == "reshape":  # the axis must be a dim of both, with as many elements before it
        s = _static_shape(x)
        before = _pymath.prod(out[:a])
        for e, size in enumerate(s):
            if _pymath.prod(s[:e]) == before and size == out[a]:
                return [(x, e)]
        return None
    if name in REDUCTIONS:
        rank = len(_static_shape(x))
        dims = {d % max(rank, 1) for d in ir.DenseI64ArrayAttr(op.attributes["dims"])}
        return [(x, [i for i in range(rank) if i not in dims][a])]
    if name in ("full", "iota"):  # no operands (a tile of iota starts at the tile's first row)
        return []
    return None


def tiling(block, prefer=()):
    """(rows, {value: axis or WHOLE}, {values also read whole}: see _propagate) when every region result can be computed tile by tile
    along one of its dims of a common size `rows` (the first result's first such dim that works,
    dims whose rows hold at most TILE_BYTES / 2 of results first,
    each other result's too; no op reduces over or reshapes across it; not the last dim of a
    result of rank 2 or more), else None."""
    ops = [o.operation for o in block.operations if o.operation.name != "arith.constant"]
    results = list(ops[-1].operands)
    if any(0 in _static_shape(v) for op in ops for v in [*op.operands, *op.results] if not _is_number(v)):
        return None  # empty tensors: nothing to tile (and no valid subview of a 0-sized dim)
    shapes = [_static_shape(r) for r in results]
    if not shapes or not all(shapes):
        return None
    # the outermost dim whose rows are small enough that a tile of a few of them stays in cache,
    # before the others (tiles of one 16x512x64 row of a 4x16x512x64 tensor would not)
    out_bytes = sum(_pymath.prod(s) * elt_bytes(str(ir.RankedTensorType(r.type).element_type))
                    for r, s in zip(results, shapes))
    # (prefer: sizes to tile along first, cache="symbolic values"'s sizes: a kernel tiled along
    # them does not depend on them)
    order = sorted(range(len(shapes[0])), key=lambda d: (shapes[0][d] not in prefer,
                                                         out_bytes // max(shapes[0][d], 1) > ROW_BYTES))
    for d0 in order:
        rows = shapes[0][d0]
        if rows < 2:
            continue
        if d0 == len(shapes[0]) - 1 > 0:
            continue  # tiles of columns of a matrix: short, strided inner loops; not worth it
        choices = [[d for d, s in enumerate(shape) if s == rows and not d == len(shape) - 1 > 0]
                   for shape in shapes[1:]]
        for combo in itertools.islice(itertools.product(*choices), 16):
            axes = _propagate(ops[:-1], results, (d0, *combo))
            if axes is not None:
                return rows, *axes
    return None


def _propagate(ops, results, result_axes):
    """({value: axis or WHOLE}, {values also read whole}) from the results' axes back to the
    inputs, or None on a conflict. A value of at most DUAL_BYTES that some ops read whole and
    others tile by tile is computed both ways (the whole one before the loop): a mask over the
    rows that is summed (a loss's count of kept targets) and used row by row."""
    axes, dual = {}, set()

    def need(v, a):
        if _is_number(v):
            return True
        b = axes.setdefault(v, a)
        if b == a or v in dual:
            return b == a or a == WHOLE
        if WHOLE not in (a, b) or _value_bytes(v) > DUAL_BYTES:
            return False
        axes[v] = b if a == WHOLE else a
        dual.add(v)
        return True

    if not all(need(r, a) for r, a in zip(results, result_axes)):
        return None
    for op in reversed(ops):
        r = op.results[0]
        if r not in axes:
            return None
        for a in [axes[r]] + ([WHOLE] if r in dual else []):
            operand_axes = _operand_axes(op, a)
            if operand_axes is None or not all(need(v, b) for v, b in operand_axes):
                return None
    return axes, dual


def _value_bytes(v):
    t = ir.RankedTensorType(v.type)
    return _pymath.prod(t.shape) * elt_bytes(str(t.element_type))


def row_major_strides(shape):
    strides, n = [], 1
    for s in reversed(shape):
        strides.append(n)
        n *= s
    return list(reversed(strides))


def _subview(src, src_type, t: TensorT, axis, strides):
    """memref.subview of one tile (rows %i .. %i + %n along axis) of src (of type src_type,
    with these element strides, None entries dynamic); returns (op text, the tile's type)."""
    offsets = ", ".join("%i" if d == axis else "0" for d in range(t.rank))
    sizes = ", ".join("%n" if d == axis else str(s) for d, s in enumerate(t.shape))
    ones = ", ".join("1" for _ in range(t.rank))
    offset = "0" if strides[axis] == 0 else "?"  # an input expanded along the axis: every tile starts at 0
    tile_type = t.tile(axis).memref("strided<[" + ", ".join(_dim(s) for s in strides) + f"], offset: {offset}>")
    return f"memref.subview {src}[{offsets}] [{sizes}] [{ones}] : {src_type} to {tile_type}", tile_type


class Lowered:
    """A region as linalg text. Tiled (rows is not None): the func takes two more arguments,
    the first and last row (lo, hi: index) of the outputs' first dim to compute, looping over
    tiles of `tile_rows` rows; input i is sliced along axes[i] (None: read whole)."""

    def __init__(self, text, rows=None, tile_rows=None, axes=None):
        self.text, self.rows, self.tile_rows, self.axes = text, rows, tile_rows, axes


def lower_region(text: str, name: str, input_strides=None, approx_math=True, tile=True,
                 out_name=None, prefer=(), merge_reductions=True) -> Lowered:
    """Rewrite the region's func into a destination-passing linalg func @out_name (default
    name).

    input_strides: per input, the element strides it will be called with (a static layout),
    or None for a fully dynamic strided layout. approx_math: f32 exp/tanh/... as polynomials
    (approx.py) instead of libm calls. tile: loop over tiles of rows when the region allows it
    (`tiling`); the tiled axis has a dynamic size in the func's types, so the kernel does not
    depend on the number of rows. prefer: sizes to tile along first (see tiling).
    merge_reductions: an elementwise result used again after its first user, a reduction, is
    computed in that reduction's pass (_generic_and_reduction; the CUDA kernel writer does not
    read such multi-result generics)."""
    ctx, module = parse_region(text)
    with ctx:
        f = find_func(module, name)
        block = f.regions[0].blocks[0]
        tiled = tiling(block, prefer) if tile else None
        if tiled is None:
            return Lowered(_untiled(block, out_name or name, input_strides, approx_math, merge_reductions))
        return _tiled(block, out_name or name, input_strides, approx_math, merge_reductions, *tiled)


def _lower_ops(em, block, out_type, lines_for, axes=None, dual=(), merge_reductions=True):
    """Lower the block's ops into em: each op's result of type out_type(value), into the lines
    lines_for(value); the values in dual a second time, whole, into lines_for(None) (axes: the
    tiled kernel's, to know which operands an op reads whole). Returns the returned values."""
    results = None
    for op in block.operations:
        op = op.operation
        if op.name == "arith.constant":
            em.vals[op.results[0]] = _constant(op)
        elif op.name == "func.return":
            results = list(op.operands)
        elif op.name.startswith("thunder."):
            if len(op.results) != 1:
                raise UnsupportedOp(f"{op.name} with {len(op.results)} results")
            r = op.results[0]
            if r in dual:
                em.lines, em.read_whole = lines_for(None), set(op.operands)
                em.whole[r] = (_lower_op(em, op, tensor_t(r.type)), tensor_t(r.type))
            if axes is not None:
                em.read_whole = {v for v, a in _operand_axes(op, axes[r]) or () if a == WHOLE}
            out_t = out_type(r)
            em.lines = lines_for(r)
            red = _reduction_with_operand(op, lines_for, dual) \
                if merge_reductions and op.name.removeprefix("thunder.") in ELEMENTWISE else None
            if red is not None:
                first, name, dims = red
                acc_t, filled = _reduction_init(em, name, out_type(first.results[0]))
                em.reduce_too = (name, acc_t, dims, filled)
            value = _lower_op(em, op, out_t)
            em.reduce_too = None
            if isinstance(value, tuple):
                value, em.reduced[red[0].results[0]] = value[0], (value[1], acc_t)
            em.vals[r] = (value, out_t)
        else:
            raise UnsupportedOp(f"no linalg lowering for {op.name}")
    return results


def _func(name, params, lines):
    head = f"  func.func @{name}({', '.join(params)}) attributes {{llvm.emit_c_interface}} {{"
    return "module {\n" + head + "\n" + "\n".join(lines) + "\n  }\n}\n"


def _untiled(block, name, input_strides, approx_math, merge_reductions):
    em = _Emitter(approx_math)
    params = []
    lines = []
    for i, a in enumerate(block.arguments):
        t = tensor_t(a.type)
        if t.scalar:
            params.append(_scalar_param(em, i, a, lines))
            continue
        ssa = f"%arg{i}"
        em.vals[a] = (ssa, t)
        strides = None if input_strides is None else input_strides[i]
        attr = (f" {{bufferization.buffer_layout = {strided_layout(t.shape, strides)}}}"
                if t.rank else "")
        params.append(f"{ssa}: {t}{attr}")
    results = _lower_ops(em, block, lambda v: tensor_t(v.type), lambda v: lines, merge_reductions=merge_reductions)
    em.lines, em.read_whole = lines, set()
    for j, r in enumerate(results):
        if em.vals[r][0] in NUMBERS:
            raise UnsupportedOp("a number as a region result")
        ssa, t = em.operand(r)
        params.append(f"%out{j}: {t.memref()}")
        em.emit(f"bufferization.materialize_in_destination {ssa} in restrict writable %out{j} "
                f": ({t}, {t.memref()}) -> ()")
    em.emit("return")
    return _func(name, params, lines)


def _tiled(block, name, input_strides, approx_math, merge_reductions, rows, axes, dual):
    # inputs with dynamic strides (cache="symbolic values"' kernels): outputs get them too
    dynamic_outer = input_strides is not None and any(s is None for st in input_strides for s in st)
    em = _Emitter(approx_math)
    em.tiled = True
    pre, loop, slices = [], [], []
    params = []
    row_bytes = 0
    input_axes = []
    for i, a in enumerate(block.arguments):
        t = tensor_t(a.type)
        if t.scalar:
            params.append(_scalar_param(em, i, a, pre))
            input_axes.append(None)
            continue
        axis = axes.get(a, WHOLE)
        axis = None if axis == WHOLE else axis
        input_axes.append(axis)
        strides = None if input_strides is None else list(input_strides[i])
        arg_t = t.tile(axis)
        layout = strided_layout(t.shape, strides) if t.rank else None
        params.append(f"%arg{i}: {arg_t.memref(layout)}")
        ssa = f"%a{i}"
        if axis is None:
            pre.append(f"    {ssa} = bufferization.to_tensor %arg{i} restrict : {arg_t.memref(layout)} to {t}")
            em.vals[a] = (ssa, t)
        else:
            view, view_t = _subview(f"%arg{i}", arg_t.memref(layout), t, axis, strides or [None] * t.rank)
            slices.append(f"      %sv{i} = {view}")
            slices.append(f"      {ssa} = bufferization.to_tensor %sv{i} restrict : {view_t} to {arg_t}")
            em.vals[a] = (ssa, arg_t)
            row_bytes += elt_bytes(t.elt) * _pymath.prod(t.shape) // rows
            if a in dual:  # also read whole
                pre.append(f"    %w{i} = bufferization.to_tensor %arg{i} restrict : {arg_t.memref(layout)} to {arg_t}")
                pre.append(f"    %aw{i} = tensor.cast %w{i} : {arg_t} to {t}")
                em.whole[a] = (f"%aw{i}", t)

    def out_type(v):
        axis = axes[v]
        return tensor_t(v.type).tile(None if axis == WHOLE else axis)

    results = _lower_ops(em, block, out_type, lambda v: pre if v is None or axes[v] == WHOLE else loop, axes, dual,
                         merge_reductions)
    stores = []
    for j, r in enumerate(results):
        if em.vals[r][0] in NUMBERS:
            raise UnsupportedOp("a number as a region result")
        em.lines, em.read_whole = loop, set()  # (parts are written into one tensor in the loop)
        ssa, tile_t = em.operand(r)
        if isinstance(r.owner, ir.Block):  # an input returned as is: copy it with a loop nest
            em.lines = loop                  # (a memref.copy of strided tiles is a runtime call)
            init, copied = em.empty(tile_t), em.fresh()
            em.emit(f"{copied} = linalg.copy ins({ssa} : {tile_t}) outs({init} : {tile_t}) -> {tile_t}")
            ssa = copied
        full_t = tensor_t(r.type)
        # torch allocates outputs contiguous: row-major strides, which do not depend on the row
        # count when the tiled axis is the first dim (then it stays dynamic)
        axis = axes[r]
        out_strides = row_major_strides(full_t.shape)
        if axis == 0:
            out_type = full_t.tile(0).memref()
        elif dynamic_outer and axis != WHOLE:  # the strides before the axis depend on its size
            out_strides = [None] * axis + out_strides[axis:]
            out_type = full_t.tile(axis).memref(strided_layout(full_t.shape, out_strides))
        else:
            out_type = full_t.memref()
        params.append(f"%out{j}: {out_type}")
        view, view_t = _subview(f"%out{j}", out_type, full_t, axis, out_strides)
        stores.append(f"      %ov{j} = {view}")
        stores.append(f"      bufferization.materialize_in_destination {ssa} in restrict writable %ov{j} "
                      f": ({tile_t}, {view_t}) -> ()")
        row_bytes += elt_bytes(full_t.elt) * _pymath.prod(full_t.shape) // rows
    params += ["%lo: index", "%hi: index"]
    tile_rows = max(1, TILE_BYTES // max(row_bytes, 1))
    # along an inner axis a tile is one piece per index of the dims before it: pieces of at least
    # MIN_PIECE_BYTES, so that each is a stream the hardware prefetches (a 4x16x512x64 rotary
    # embedding tiled along its positions: 1 position a tile, 64 pieces of 256 bytes, 0.76 ms;
    # 8 positions, 0.54 ms), in tiles of at most 8 * TILE_BYTES
    first = tensor_t(results[0].type)
    axis = axes[results[0]]
    if axis not in (0, WHOLE) and _pymath.prod(first.shape[:axis]) > 1:
        piece_row = elt_bytes(first.elt) * _pymath.prod(first.shape[axis + 1:])
        longer = min(rows, -(-MIN_PIECE_BYTES // max(piece_row, 1)), 8 * TILE_BYTES // max(row_bytes, 1))
        tile_rows = max(tile_rows, longer)
    lines = [f"    %T = arith.constant {tile_rows} : index"] + pre
    lines.append("    scf.for %i = %lo to %hi step %T {")
    lines.append("      %rem = arith.subi %hi, %i : index")
    lines.append("      %n = arith.minsi %rem, %T : index")
    lines += slices
    lines += ["  " + line for line in loop]
    lines += stores
    lines += ["    }", "    return"]
    return Lowered(_func(name, params, lines), rows, tile_rows, input_axes)


def to_linalg(text: str, name: str, input_strides=None, approx_math=True, tile=True) -> str:
    """lower_region's text."""
    return lower_region(text, name, input_strides, approx_math, tile).text
