"""bf16 values computed and used inside a fused region stay in f32: rounded only where stored.

torch's eager kernels compute each bf16 op in f32 and round its result to bf16 (opmath), so a
chain of bf16 elementwise ops (GPT-2's gelu_new under autocast: 8 ops) rounds 8 times; emulated
(the integer rounding of pipeline.py's arith-expand) those roundings cost several times the
pass itself. In a region, an elementwise prim with a bf16 result is rewritten to compute its
f32 result from the f32 values of its bf16 operands (the unrounded result of an op rewritten
before it, else its operand extended); the bf16 value is made (one rounding) only where
something other than such a prim reads it: a region output, a reduction, a shape op, a
conversion to a wider type; then every reader reads that rounded value (a value is used at one
precision: `rsqrt(|x|) / x` from f32 and `+ 2 rsqrt(|x|)` computed in f64 from the rounded
value made errors up to 16x eager's where the sum cancels). This is
what torch.compile's inductor does by default: results differ from eager's by the roundings
skipped (within bf16 tolerance: each is at most half a bf16 ulp of an intermediate), and are
closer to the exact value. Only bf16: its range is f32's, so no intermediate overflows where
eager's would not (f16's would: 65504). Explicit conversions (x.to(torch.bfloat16)) stay roundings, and so does
every value a discontinuous op reads, directly or through other ops (a comparison, floor, ceil,
round, trunc, sign: a truncating division's quotient, a mask): there an ulp could change the
result by more than bf16's tolerance, so those values are eager's, rounded after each op."""
from thunder.dialects.mlir import ir
from thunder.lowering.linalg.scalar import ELEMENTWISE

_KINDS = ("arith", "where")
_DISCONTINUOUS = {"floor", "ceil", "round", "trunc", "sign"}


def _elt(value):
    t = value.type
    return str(ir.RankedTensorType(t).element_type) if isinstance(t, ir.RankedTensorType) else None


def _convert(value, elt_type, loc):
    t = ir.RankedTensorType(value.type)
    return ir.Operation.create("thunder.convert_element_type",
                               results=[ir.RankedTensorType.get(t.shape, elt_type, t.encoding)], operands=[value],
                               attributes={"dtype": ir.TypeAttr.get(elt_type)}, loc=loc).results[0]


def _widened(operation):
    name = operation.name.removeprefix("thunder.")
    return (operation.name.startswith("thunder.") and ELEMENTWISE.get(name, (None, None))[1] in _KINDS
            and len(operation.results) == 1 and _elt(operation.results[0]) == "bf16"
            and all(_elt(v) in (None, "bf16", "i1") for v in operation.operands))  # (numbers; where's mask)


def _as_eager(ops):
    """The ops whose results a discontinuous op reads, directly or through other ops."""
    eager = set()
    for op in reversed(ops):
        name = op.name.removeprefix("thunder.")
        kind = ELEMENTWISE.get(name, (None, None))[1]
        if op in eager or name in _DISCONTINUOUS or (kind is not None and kind not in _KINDS + ("convert",)):
            eager.update(v.owner.operation for v in op.operands if not isinstance(v.owner, ir.Block))
    return eager


def keep_bf16_in_f32(block):
    """Rewrite the region's block (a func body of thunder prims) in place."""
    f32 = ir.F32Type.get()
    unrounded = {}  # bf16 value -> its f32 value (the result of the rewritten op)
    ops = [o.operation for o in block.operations]
    eager = _as_eager(ops)
    for op in [o for o in ops if _widened(o) and o not in eager]:
        with ir.InsertionPoint(op), op.location:
            operands = []
            for v in op.operands:
                if _elt(v) == "bf16":
                    if v not in unrounded:
                        unrounded[v] = _convert(v, f32, op.location)
                    operands.append(unrounded[v])
                else:
                    operands.append(v)
            t = ir.RankedTensorType(op.results[0].type)
            new = ir.Operation.create(op.name, results=[ir.RankedTensorType.get(t.shape, f32, t.encoding)],
                                      operands=operands, attributes={k: op.attributes[k] for k in op.attributes},
                                      loc=op.location)
        old = op.results[0]
        readers = [u.owner for u in old.uses if not _widened(u.owner) or u.owner.operation in eager]
        if readers:  # rounded once, after the op, for what reads the bf16 value
            with ir.InsertionPoint(op), op.location:
                rounded = _convert(new.results[0], ir.BF16Type.get(), op.location)
            # (the ops rewritten next read it rounded too, extended as an operand: one value at
            # one precision; read in f32 by them and rounded by an op computing wider, add with
            # alpha's f64, its error where the two met and cancelled was up to 16x eager's)
            old.replace_all_uses_with(rounded)
        else:
            unrounded[old] = new.results[0]  # (the ops rewritten next read that)
    for op in reversed([o for o in ops if _widened(o) and o not in eager]):
        op.erase()  # (the rewritten ops: last first, each then unused)
