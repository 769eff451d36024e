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
  reduction iterators;
- `thunder.reshape`: `tensor.collapse_shape` / `tensor.expand_shape` (through rank 1);
- `thunder.transpose`: a permuted input map.

The generated func is destination-passing: inputs are tensors (with a
`bufferization.buffer_layout` describing the torch strides they will be called with), outputs
are extra `memref` arguments that the results are materialized into, and the func returns
nothing. `llvm.emit_c_interface` gives it a `_mlir_ciface_<name>` entry.
"""
from __future__ import annotations

from thunder.dialects.mlir import ir
from thunder.lowering.linalg.scalar import (ELEMENTWISE, REDUCTIONS, Body, UnsupportedOp,  # noqa: F401
                                            convert_scalar, is_float, literal, promote,
                                            reduce_combine, reduction_identity, supported)


class TensorT:
    """A ranked tensor type: static shape and element type name."""

    def __init__(self, shape, elt):
        self.shape, self.elt = tuple(int(s) for s in shape), elt

    @property
    def rank(self):
        return len(self.shape)

    def __str__(self):
        return "tensor<" + "".join(f"{s}x" for s in self.shape) + self.elt + ">"

    def memref(self, layout=None):
        s = "memref<" + "".join(f"{s}x" for s in self.shape) + self.elt
        return s + (f", {layout}>" if layout else ">")


def tensor_t(t: ir.Type) -> TensorT:
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
        self.vals = {}  # input ir.Value -> (ssa name, TensorT) or ("const", python value, type)

    def fresh(self, base="v"):
        self.n += 1
        return f"%{base}{self.n}"

    def emit(self, text):
        self.lines.append("    " + text)

    def empty(self, t: TensorT):
        e = self.fresh("e")
        self.emit(f"{e} = tensor.empty() : {t}")
        return e

    def generic(self, out_t: TensorT, ins, body_fn, iterators=None, init=None, out_map=None):
        """ins: [(ssa, TensorT, input map exprs)]; body_fn(Body, [scalar names], out scalar)
        returns the yielded scalar."""
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

    # operands of a prim: tensors (ssa, TensorT) or constants
    def operand(self, v):
        return self.vals[v]


def _elementwise(em, name, operands, out_t: TensorT, attrs):
    fn, kind = ELEMENTWISE[name]
    if kind == "convert":
        dst = str(ir.TypeAttr(attrs["dtype"]).value)
        return _map(em, operands, out_t, lambda b, xs, ts: convert_scalar(b, xs[0], ts[0], dst), None, dst)
    if kind == "arith":
        ct = out_t.elt
        return _map(em, operands, out_t, lambda b, xs, ts: fn(b, xs, ct), ct, ct)
    if kind == "cmp":
        ct = promote([o[1].elt for o in operands if o[0] != "const"])
        for o in operands:  # numbers only raise the category (int tensor < 0.5 compares as float)
            if o[0] != "const":
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
        if o[0] == "const":
            slots.append(("const", o[1], o[2]))
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
    attrs = op.attributes
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
    if name == "full":
        value = operands[0]
        init = em.empty(out_t)
        c = em.fresh("c")
        em.emit(f"{c} = arith.constant {literal(value[1], out_t.elt)} : {out_t.elt}")
        r = em.fresh()
        em.emit(f"{r} = linalg.fill ins({c} : {out_t.elt}) outs({init} : {out_t}) -> {out_t}")
        return r
    if name in REDUCTIONS:
        ssa, t = operands[0]
        dims = sorted(d % max(t.rank, 1) for d in ir.DenseI64ArrayAttr(attrs["dims"]))
        init = em.empty(out_t)
        c = em.fresh("c")
        em.emit(f"{c} = arith.constant {literal(reduction_identity(name, out_t.elt), out_t.elt)} : {out_t.elt}")
        filled = em.fresh()
        em.emit(f"{filled} = linalg.fill ins({c} : {out_t.elt}) outs({init} : {out_t}) -> {out_t}")
        if not dims:  # a copy
            return em.generic(out_t, [(ssa, t, [f"d{i}" for i in range(t.rank)])],
                              lambda b, xs, acc: convert_scalar(b, xs[0], t.elt, out_t.elt))
        iters = ["reduction" if i in dims else "parallel" for i in range(t.rank)]
        out_map = amap(t.rank, [f"d{i}" for i in range(t.rank) if i not in dims])
        combine = reduce_combine(name)

        def body(b, xs, acc):
            x = convert_scalar(b, xs[0], t.elt, out_t.elt)
            return combine(b, [x, acc], out_t.elt)
        return em.generic(out_t, [(ssa, t, [f"d{i}" for i in range(t.rank)])], body,
                          iterators=iters, init=filled, out_map=out_map)
    raise UnsupportedOp(f"no linalg lowering for {op.name}")


def _reshape(em, ssa, t: TensorT, out_t: TensorT):
    if t.shape == out_t.shape:
        return ssa
    n = 1
    for s in t.shape:
        n *= s
    flat_t = TensorT((n,), t.elt)
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


def _constant(op):
    attr = op.attributes["value"]
    t = str(op.results[0].type)
    if isinstance(attr, ir.FloatAttr):
        return ("const", ir.FloatAttr(attr).value, t)
    if isinstance(attr, ir.IntegerAttr):
        v = ir.IntegerAttr(attr).value
        return ("const", bool(v) if t == "i1" else v, t)
    raise UnsupportedOp(f"constant {attr}")


def strided_layout(shape, strides):
    """The memref layout for a tensor with these torch strides (offset 0: we pass the pointer
    to the first element as the aligned pointer)."""
    if strides is None:
        return "strided<[" + ", ".join("?" for _ in shape) + "], offset: ?>"
    return "strided<[" + ", ".join(str(s) for s in strides) + "]>"


def find_func(module: ir.Module, name: str | None):
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if name is not None:
        for f in funcs:
            if ir.StringAttr(f.attributes["sym_name"]).value == name:
                return f
    if len(funcs) == 1:
        return funcs[0]
    raise ValueError(f"no func.func @{name} in the region")


def parse_region(text: str) -> tuple[ir.Context, ir.Module]:
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    with ctx:
        return ctx, ir.Module.parse(text)


def signature(text, name=None):
    """(func name, [input TensorT], [output TensorT]) of the region's func (name None: the
    module's only func)."""
    ctx, module = parse_region(text)
    with ctx:
        f = find_func(module, name)
        ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
        return (ir.StringAttr(f.attributes["sym_name"]).value,
                [tensor_t(t) for t in ftype.inputs], [tensor_t(t) for t in ftype.results])


def to_linalg(text: str, name: str, input_strides=None, approx_math=True) -> str:
    """Rewrite the region's func into a destination-passing linalg func @name (MLIR text).

    input_strides: per input, the element strides it will be called with (a static layout),
    or None for a fully dynamic strided layout. approx_math: f32 exp/tanh as polynomials
    (approx.py) instead of libm calls."""
    ctx, module = parse_region(text)
    with ctx:
        f = find_func(module, name)
        block = f.regions[0].blocks[0]
        em = _Emitter(approx_math)
        in_types = [tensor_t(a.type) for a in block.arguments]
        params = []
        for i, (a, t) in enumerate(zip(block.arguments, in_types)):
            ssa = f"%arg{i}"
            em.vals[a] = (ssa, t)
            strides = None if input_strides is None else input_strides[i]
            attr = (f" {{bufferization.buffer_layout = {strided_layout(t.shape, strides)}}}"
                    if t.rank else "")
            params.append(f"{ssa}: {t}{attr}")
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
                out_t = tensor_t(op.results[0].type)
                em.vals[op.results[0]] = (_lower_op(em, op, out_t), out_t)
            else:
                raise UnsupportedOp(f"no linalg lowering for {op.name}")
        out_types = []
        for j, r in enumerate(results):
            o = em.vals[r]
            if o[0] == "const":
                raise UnsupportedOp("a number as a region result")
            ssa, t = o
            out_types.append(t)
            params.append(f"%out{j}: {t.memref()}")
            em.emit(f"bufferization.materialize_in_destination {ssa} in restrict writable %out{j} "
                    f": ({t}, {t.memref()}) -> ()")
        em.emit("return")
        head = f"  func.func @{name}({', '.join(params)}) attributes {{llvm.emit_c_interface}} {{"
        return "module {\n" + head + "\n" + "\n".join(em.lines) + "\n  }\n}\n"
