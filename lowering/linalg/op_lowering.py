"""Per-prim lowerings to linalg/tensor text (elementwise, broadcast, reductions, reshape, slice, cat, constants), whole or in tile parts, and the _Emitter that collects the text (see to_linalg.py)."""
from __future__ import annotations

import math as _pymath

from thunder.dialects.emit import WIDENED
from thunder.dialects.mlir import ir
from thunder.lowering.linalg.scalar import (Body, convert_scalar, ELEMENTWISE, is_float, literal, opmath, promote,
                                            reduce_combine, reduction_identity, REDUCTIONS, SUPPORTED,
                                            UnsupportedOp)
from thunder.lowering.linalg import approx
from thunder.lowering.linalg.coarse_uses import seen_coarsely
from thunder.lowering.linalg.pick import one_hot_pick
from thunder.lowering.linalg.tiling import _static_shape
from thunder.lowering.linalg.types_and_maps import amap, broadcast_exprs, identity_map, size_text, tensor_t, TensorT

# the prims with an f32 form for values only summed or rounded (approx.SUMMED: math.exp -> exp)
_SUMMED_PRIMS = frozenset(mathop.removeprefix("math.") for mathop, _ in approx.SUMMED)


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
        self.summed = False  # (the op being lowered) its values are only summed: see _lower_op
        # the CPU kernel's forms (lower_region's merge_reductions): one-hot picks as one load a row
        # (pick.py), a sum of everything by rows first (two_step_sum)
        self.cpu_forms = True
        self.syms = {}  # size -> the SSA name of its index value: sizes read at run time (lower_region)

    def fresh(self, base="v"):
        self.n += 1
        return f"%{base}{self.n}"

    def emit(self, text):
        self.lines.append("    " + text)

    def empty(self, t: TensorT):
        e = self.fresh("e")
        dyn = ", ".join(size_text(s) for s in t.shape if not isinstance(s, int))  # (the tile's %n, dynamic sizes)
        self.emit(f"{e} = tensor.empty({dyn}) : {t}")
        return e

    def t(self, ir_type):
        """The TensorT of a value of this type in the kernel (its dynamic sizes named)."""
        return tensor_t(ir_type, self.syms)

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
        once = WIDENED in attrs
        return _map(em, operands, out_t, lambda b, xs, ts: convert_scalar(b, xs[0], ts[0], dst, once), None, dst)
    if kind == "arith":  # f16/bf16: computed in f32 and rounded once, as torch's kernels (opmath)
        ct = opmath(out_t.elt)

        def arith(b, xs, ts):
            b.storage, b.widened, b.summed = out_t.elt, WIDENED in attrs, em.summed
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
    # values only summed (a log-sum-exp's exps) or rounded to bf16/f16 need no correctly rounded
    # math (approx.SUMMED; coarse_uses.py)
    em.summed = name in _SUMMED_PRIMS and seen_coarsely(op.results[0])
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
        sizes = ", ".join(size_text(s) for s in out_t.shape)
        offsets = _offsets(em, starts, steps, t, out_t)
        r = em.fresh()
        em.emit(f"{r} = tensor.extract_slice {ssa}[{', '.join(offsets)}] [{sizes}] "
                f"[{', '.join(map(str, steps))}] : {t} to {out_t}")
        return r
    if name == "cat":  # its parts, written into one tensor when an op reads it whole (_Parts)
        dim = ir.IntegerAttr(attrs["dim"]).value % out_t.rank
        parts, offset = [], 0
        for ssa, t in operands:
            if t.elt != out_t.elt:
                raise UnsupportedOp(f"cat of {t.elt} into {out_t.elt}")
            if t.shape[dim] is None:
                raise UnsupportedOp("cat along a tile's rows")
            if t.shape[dim]:
                parts.append((offset, t.shape[dim], (ssa, t)))
            offset = _index_sum(em, offset, t.shape[dim])
        if not isinstance(offset, int):  # along a size read at run time: written into one tensor
            return _write_parts(em, _Parts(dim, parts), out_t)
        return _Parts(dim, parts)
    if name == "full":
        if operands[0][0] == "scalar":  # (a runtime number: a value computed from the sizes)
            _, v, src = operands[0]
            return em.generic(out_t, [], lambda b, xs, acc: convert_scalar(b, v, src, out_t.elt))
        return _filled(em, out_t, operands[0][1])
    if name == "unslice":
        return _unslice(em, operands[0], out_t, attrs)
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
    if name == "sum" and em.cpu_forms and op.results[0] not in em.reduced:  # a one-hot pick: one load a row
        picked = one_hot_pick(em, op, out_t)
        if picked is not None:
            return picked
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
        elif em.cpu_forms and two_step_sum(name, t.elt, t.rank, dims):  # rows first, with the loop's partial sums
            rows, rows_t = _reduce(em, name, ssa, t, [t.rank - 1], TensorT(t.shape[:-1], t.elt), wide=False)
            r, acc_t = _reduce(em, name, rows, rows_t, dims[:-1], out_t, wide=True)
        else:
            r, acc_t = _reduce(em, name, ssa, t, dims, out_t, wide=wide_sum(name, t.rank, dims))
        if acc_t.elt == out_t.elt:
            return r
        return em.generic(out_t, [(r, acc_t, [f"d{i}" for i in range(out_t.rank)])],
                          lambda b, xs, acc: convert_scalar(b, xs[0], acc_t.elt, out_t.elt))
    raise UnsupportedOp(f"no linalg lowering for {op.name}")


def _filled(em, out_t, value):
    init = em.empty(out_t)
    c = em.fresh("c")
    em.emit(f"{c} = arith.constant {literal(value, out_t.elt)} : {out_t.elt}")
    r = em.fresh()
    em.emit(f"{r} = linalg.fill ins({c} : {out_t.elt}) outs({init} : {out_t}) -> {out_t}")
    return r


def _unslice(em, operand, out_t, attrs):
    """Zeros with the operand where slice(start, end, strides) reads (a slice's gradient): with
    unit strides and one dim sliced, parts along it (the operand and fills of zeros), so the
    ops of it compute part by part (a rotary embedding's backward adds two such halves); else
    the operand written into zeros."""
    ssa, t = operand
    starts, steps = (list(ir.DenseI64ArrayAttr(attrs[k])) for k in ("start_indices", "strides"))
    padded = [d for d in range(out_t.rank) if t.shape[d] != out_t.shape[d]]
    if any(x.shape[d] is None for d in padded for x in (t, out_t)):
        raise UnsupportedOp("unslice along a tile's rows")
    dynamic = any(not isinstance(x.shape[d], int) for d in padded for x in (t, out_t))
    if all(s == 1 for s in steps) and len(padded) == 1 and not dynamic:
        d = padded[0]
        spans = [(0, starts[d]), (starts[d], t.shape[d]), (starts[d] + t.shape[d], out_t.shape[d] - starts[d] - t.shape[d])]
        parts = []
        for offset, size in spans:
            if size == 0:
                continue
            if offset == starts[d]:
                parts.append((offset, size, (ssa, t)))
            else:
                part_t = TensorT(out_t.shape[:d] + (size,) + out_t.shape[d + 1:], out_t.elt)
                parts.append((offset, size, (_filled(em, part_t, 0), part_t)))
        return _Parts(d, parts)
    r = em.fresh()
    sizes = ", ".join(size_text(s) for s in t.shape)
    offsets = _offsets(em, starts, steps, out_t, t)
    em.emit(f"{r} = tensor.insert_slice {ssa} into {_filled(em, out_t, 0)}[{', '.join(offsets)}] [{sizes}] "
            f"[{', '.join(map(str, steps))}] : {t} into {out_t}")
    return r


def _index_value(em, x):
    """The SSA name of an index value: x's own (a size read at run time), or a constant's."""
    if isinstance(x, str):
        return x
    k = em.fresh("k")
    em.emit(f"{k} = arith.constant {x} : index")
    return k


def _index_sum(em, a, b):
    """a + b, each a number or the SSA name of an index value (a size read at run time)."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if a == 0 or b == 0:
        return b if a == 0 else a
    r = em.fresh("o")
    em.emit(f"{r} = arith.addi {_index_value(em, a)}, {_index_value(em, b)} : index")
    return r


def _offsets(em, starts, steps, whole, part):
    """The offsets (text) of a slice `part` of `whole` at starts. Along a dim whose size is read
    at run time (kernels for every size): a part of size m (a number or such a size) reaching
    the whole's end (`x[:, -k:]`: start T - k; `x[:, T // 2:]`: T - (T - T // 2)) starts at that
    size minus m, computed in the kernel; a start that is such a size, at it. Else the start as
    written (a start that changes with the sizes otherwise leaves the texts at the family's sizes
    different: per-size kernels then)."""
    size_at = {name: size for size, name in em.syms.items()}
    offsets = []
    for start, step, n, m in zip(starts, steps, whole.shape, part.shape):
        m_value = size_at.get(m) if isinstance(m, str) else m
        if isinstance(n, str) and m_value is not None and step == 1 and start + m_value == size_at[n] and start:
            o = em.fresh("o")
            em.emit(f"{o} = arith.subi {n}, {_index_value(em, m)} : index")
            offsets.append(o)
        elif start in em.syms:  # (a cat's second part: it starts at the first's size)
            offsets.append(em.syms[start])
        else:
            offsets.append(str(start))
    return offsets


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
        sizes = ", ".join(size_text(s) for s in t.shape)
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
        sizes = ", ".join(size_text(s) for s in part_t.shape)
        em.emit(f"{r} = tensor.extract_slice {ssa}[{offsets}] [{sizes}] [{', '.join('1' for _ in t.shape)}] "
                f": {t} to {part_t}")
        result = (r, part_t)
    em.slices[key] = result
    return result


def wide_sum(name, rank, dims):
    """Whether a sum over dims of a rank-`rank` f32 tensor accumulates in f64: one over other
    dims than the last alone (a bias gradient over B*T rows), whose loops add a result's terms
    one by one where eager's kernels keep partial sums (f32 was up to 6x further from the exact
    sum than eager). Reducing the last dim, the vectorized loop keeps partial sums itself and
    stays f32 (an f64 accumulator would halve the vector width of the math fused before it: LLVM
    sizes vectors by the widest type)."""
    return name == "sum" and rank - 1 not in dims


def two_step_sum(name, elt, rank, dims):
    """Whether an f32 sum over the last dim and others (a sum of everything) reduces the rows
    first (f32, vector partial sums, the math before it fused in), then the rest in f64: in one
    loop the rows' results were added one by one in f32, up to 100x further from the exact sum
    than eager. (CPU kernels: the CUDA writer reduces a whole region's sum in a block's tree.)"""
    return name == "sum" and elt == "f32" and rank - 1 in dims and len(dims) > 1


def _reduce(em, name, ssa, t, dims, out_t, wide):
    """The reduction of (ssa, t) over dims, unrounded: (its SSA name, the accumulator type)."""
    acc_t, filled = _reduction_init(em, name, out_t, wide)
    iters = ["reduction" if i in dims else "parallel" for i in range(t.rank)]
    out_map = amap(t.rank, [f"d{i}" for i in range(t.rank) if i not in dims])
    combine = reduce_combine(name)

    def body(b, xs, acc):
        return combine(b, [convert_scalar(b, xs[0], t.elt, acc_t.elt), acc], acc_t.elt)
    return em.generic(acc_t, [(ssa, t, [f"d{i}" for i in range(t.rank)])], body,
                      iterators=iters, init=filled, out_map=out_map), acc_t


def _reduction_init(em, name, out_t, wide):
    """(accumulator type, its init filled with the reduction's identity): f16/bf16 accumulate in
    f32, rounded once at the end (as torch's reductions); f32 in f64 where wide (wide_sum)."""
    widened = {"f16": "f32", "bf16": "f32", "f32": "f64" if wide else "f32"}
    acc_t = TensorT(out_t.shape, widened.get(out_t.elt, out_t.elt))
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
    if two_step_sum(name, str(ir.RankedTensorType(r.type).element_type), rank, dims):
        return None  # (two loops)
    return (first, name, dims) if dims and rank else None


def _reshape(em, ssa, t: TensorT, out_t: TensorT):
    """Through rank 1 (collapse_shape/expand_shape), or for a tile, a gather."""
    if t.shape == out_t.shape:
        return ssa
    if any(isinstance(s, str) for s in t.shape + out_t.shape):
        return _reshape_dynamic(em, ssa, t, out_t)
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


def _reshape_dynamic(em, ssa, t: TensorT, out_t: TensorT):
    """A reshape of dynamic sizes that keeps each of them a dim of its own, in order, and
    reshapes the static dims between them among themselves ([B, T, 256] -> [B, T, 4, 64],
    [B, 4, T, 64] -> [B, 2, 2, T, 64], [B, T] -> [B, T, 1]): a linalg.generic reading each input
    dim at the output's indices (a static run's row-major index, split by floordiv/mod)."""
    def runs(shape):  # the dynamic dims (their index) and the runs of static dims between them
        out, run = [], []
        for d, s in enumerate(shape):
            if s is None or isinstance(s, str):
                out += [run, d]
                run = []
            else:
                run.append(d)
        return out + [run]

    exprs = [None] * t.rank
    ins, outs = runs(t.shape), runs(out_t.shape)
    if len(ins) != len(outs):
        return _reshape_across_sizes(em, ssa, t, out_t)
    for a, b in zip(ins, outs):
        if isinstance(a, int) or isinstance(b, int):
            if not (isinstance(a, int) and isinstance(b, int) and t.shape[a] == out_t.shape[b]):
                return _reshape_across_sizes(em, ssa, t, out_t)
            exprs[a] = f"d{b}"
            continue
        if _pymath.prod(t.shape[i] for i in a) != _pymath.prod(out_t.shape[j] for j in b):
            return _reshape_across_sizes(em, ssa, t, out_t)
        terms = []
        for k, j in enumerate(b):
            step = _pymath.prod(out_t.shape[m] for m in b[k + 1:])
            terms.append(f"d{j}" if step == 1 else f"d{j} * {step}")
        index = " + ".join(terms) or "0"
        for k, i in enumerate(a):
            step = _pymath.prod(t.shape[m] for m in a[k + 1:])
            e = f"({index})" if step == 1 else f"(({index}) floordiv {step})"
            exprs[i] = "0" if t.shape[i] == 1 else e if k == 0 else f"{e} mod {t.shape[i]}"
    return em.generic(out_t, [(ssa, t, exprs)], lambda b, xs, acc: xs[0])


def _reshape_across_sizes(em, ssa, t: TensorT, out_t: TensorT):
    """A reshape that merges or splits dynamic sizes ([B, T, C] -> [B * T, C], [B, T, C] ->
    [B, T * C] in a tile of rows of B): the dims that both shapes start and end with kept, those
    between collapsed into one and expanded, the output's sizes given by their SSA values (a
    size that no argument has is computed from those read: to_linalg._derived_size)."""
    head = 0
    while head < min(t.rank, out_t.rank) and t.shape[head] == out_t.shape[head]:
        head += 1
    tail = 0
    while tail < min(t.rank, out_t.rank) - head and t.shape[-1 - tail] == out_t.shape[-1 - tail]:
        tail += 1
    mid_in, mid_out = t.shape[head:t.rank - tail], out_t.shape[head:out_t.rank - tail]
    if not mid_in or not mid_out or None in mid_in + mid_out:
        raise UnsupportedOp("reshape of a dynamic size")

    def groups(rank, mid):  # reassociation: the kept dims alone, the middle ones as one group
        kept = [[i] for i in range(head)] + [list(range(head, head + mid))]
        return "[" + ", ".join(f"[{', '.join(map(str, g))}]" for g in kept + [[i] for i in range(head + mid, rank)]) + "]"

    flat_t = TensorT(t.shape[:head] + ("?",) + t.shape[t.rank - tail:], t.elt)
    flat = ssa
    if len(mid_in) > 1:
        flat = em.fresh()
        em.emit(f"{flat} = tensor.collapse_shape {ssa} {groups(t.rank, len(mid_in))} : {t} into {flat_t}")
    if len(mid_out) == 1:
        return flat
    r = em.fresh()
    em.emit(f"{r} = tensor.expand_shape {flat} {groups(out_t.rank, len(mid_out))} "
            f"output_shape [{', '.join(size_text(s) for s in out_t.shape)}] : {flat_t} into {out_t}")
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


def _constant(op, syms=None):
    """The operand of a number constant; where it is one of the sizes read at run time (syms:
    {size: SSA name}, lower_region's `dynamic`) and only elementwise ops take it, that size's
    value (a comparison with the sequence length: the code must not hold the number)."""
    value = _literal_constant(op)
    v, t = value[1], value[2]
    if syms and t in ("i64", "f64") and type(v) in (int, float) and _pymath.isfinite(v) and v == int(v) \
            and int(v) in syms and all(
            u.owner.name.removeprefix("thunder.") in ELEMENTWISE for u in op.results[0].uses):
        return ("scalar", f"{syms[int(v)]}_{t}", t)
    return value


def _literal_constant(op):
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
