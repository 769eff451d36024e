"""linalg on tensors -> LLVM dialect: the pass pipeline (upstream passes, textual)."""
from thunder.dialects.mlir import ir, linalg, passmanager

# math ops without an LLVM intrinsic are rewritten in terms of exp/log/... by math-expand-ops
# (tanh -> exp based formula); what is left without an intrinsic (erf, atan2) becomes a libm
# call (convert-math-to-libm), resolved by the JIT from the process (libm is loaded by Python).
EXPAND_MATH = "tanh,sinh,cosh,asinh,acosh,atanh,fpowi,ctlz,exp2"

# LLVM's optimization and code generation level for the kernels: -O2 compiles the GPT block's
# kernels in 0.62 s against -O3's 0.92 s, and they run as fast (fusion.py: within 3%, either way)
OPT_LEVEL = 2

TENSOR_PIPELINE = [
    "linalg-fuse-elementwise-ops",  # producers (broadcasts included) fold into consumers
    "canonicalize",
    # before cse: cse would merge equal tensor.empty + linalg.fill inits of two reductions, and
    # empty-tensor elimination would then let both write one output buffer
    "eliminate-empty-tensors",  # the last op writes straight into the torch-allocated output
    "cse",
    "empty-tensor-to-alloc-tensor",
    "one-shot-bufferize{bufferize-function-boundaries}",
    "canonicalize",
    "buffer-deallocation-pipeline",
    "convert-bufferization-to-memref",
]
FUSE_PASSES = 2  # TENSOR_PIPELINE's fusion passes, after which lower_to_llvm runs write_over_last_reads

LOOPS = {
    # plain scf loops; LLVM's loop vectorizer does the vectorizing
    "loops": ["convert-linalg-to-loops"],
    # affine loops, vectorized by the affine super-vectorizer
    "affine-vector": ["convert-linalg-to-affine-loops",
                      "func.func(affine-super-vectorize{virtual-vector-size=8 vectorize-reductions=true})",
                      "canonicalize"],
}

# f16/bf16 (torch's opmath: computed in f32, rounded to nearest even once per op):
# - math ops on them are extended to f32 (extf, the f32 op, truncf), so no f16/bf16 libm call;
# - bf16 arith ops are emulated in f32 the same way (then keep_roundings), and all bf16
#   extf/truncf are expanded into integer ops by arith-expand (a shift; round to nearest even,
#   nan -> 0x7fc0, as c10::BFloat16). Otherwise LLVM lowers the truncation with vcvtneps2bf16
#   where AVX512-BF16 exists, which flushes denormals to zero, or with a call to __truncsfbf2,
#   which the JIT cannot resolve (libgcc is not among the process's global symbols); the
#   integer form vectorizes everywhere.
# - f16 stays half in LLVM: per-op promotion to float (the same roundings as torch), F16C's
#   vcvtph2ps/vcvtps2ph for the conversions on x86 (a host without F16C would need libgcc's
#   __extendhfsf2/__truncsfhf2, which the JIT does not find either).
LOW_FLOATS = [
    "func.func(math-extend-to-supported-types{target-type=f32})",
    "func.func(arith-emulate-unsupported-floats{source-types=bf16 target-type=f32})",
]

LLVM_PIPELINE = [
    "func.func(arith-expand{include-bf16=true})",
    f"math-expand-ops{{ops={EXPAND_MATH}}}",
    "convert-math-to-funcs",
    "lower-affine",
    "convert-vector-to-scf",
    "convert-scf-to-cf",
    "expand-strided-metadata",
    "lower-affine",
    "convert-math-to-llvm",
    "convert-math-to-libm",
    "convert-vector-to-llvm",
    "convert-arith-to-llvm",
    "convert-cf-to-llvm",
    "convert-ub-to-llvm",
    "finalize-memref-to-llvm",
    "convert-func-to-llvm",
    "convert-index-to-llvm",
    "canonicalize",
    "reconcile-unrealized-casts",
]


def pipeline(loops="loops") -> str:
    """The passes lower_to_llvm runs (it also runs write_over_last_reads after the fusion, copies_to_linalg
    after the tensor passes and keep_roundings after LOW_FLOATS)."""
    passes = TENSOR_PIPELINE + LOOPS[loops] + LOW_FLOATS + LLVM_PIPELINE
    return "builtin.module(" + ",".join(passes) + ")"


def copies_to_linalg(module):
    """memref.copy -> linalg.copy (a loop nest). Bufferization copies between buffers whose
    layouts are strided (a tile of an input into a tile of an output) lower to a call of the
    MLIR runtime's `memrefCopy`, which is not in the process."""
    for op in _ops_named(module, "memref.copy"):
        with ir.InsertionPoint(op), op.location:
            linalg.copy(op.operands[0], outs=[op.operands[1]])
        op.erase()


def write_over_last_reads(module):
    """An elementwise linalg.generic whose init is a tensor.empty writes into an input it reads
    last instead (same type, read at the same index, produced by another linalg op, no other
    use): no temporary buffer for its result. In a tiled softmax the exps' pass then writes the
    output tile itself (eliminate-empty-tensors makes that pass's buffer the output), as torch's
    softmax does: the output's cache misses fall in the exps' arithmetic, not in the cheap last
    pass (a 4096x1000 softmax from memory, one thread: 0.74x -> 0.97x torch's; docs/benchmarks.md
    "Branch smax2"). One-shot bufferization still decides: writing in place where it may."""
    for op in _ops_named(module, "linalg.generic"):
        n_in, n_out = ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])
        iterators = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        if n_out != 1 or any("parallel" not in a for a in iterators):
            continue
        init = op.operands[n_in]
        if _producer(init) != "tensor.empty":
            continue
        maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
        for i in range(n_in):
            v = op.operands[i]
            if (v.type == init.type and maps[i] == maps[n_in] and maps[i].is_permutation
                    and _producer(v).startswith("linalg.")
                    and len(list(v.uses)) == 1):
                op.operands[n_in] = v
                break


def merge_siblings(module):
    """Two linalg.generics of one block that read a common input at every index of one iteration
    space become one generic with the results of both, where one of them is elementwise (all
    loops parallel, identity maps) and the other reads that input with the identity map too (it
    may also reduce: a bias gradient's row sum). The merged generic is placed at the first; the
    second's operands are all made before it. Linalg's elementwise fusion pulls a shared
    producer into each consumer: a training region's two results computed from one tanh (GELU's
    output recomputed for the next linear's weight gradient, and GELU's gradient) were two
    loops, each computing the tanh; in one loop body LLVM computes it once and reads the input
    once (tests/test_sibling_loops.py)."""
    ops = [op for op in _ops_named(module, "linalg.generic")
           if all(len(o.regions) == 0 for o in op.regions[0].blocks[0].operations)]
    for i in range(len(ops)):
        j = i + 1
        while j < len(ops):  # (the merged generic may take later ones too)
            moved = _mergeable(ops[i], ops[j]) if ops[j].block == ops[i].block else None
            if moved is not None:
                ops[i] = _merge(ops[i], ops.pop(j), moved)
            else:
                j += 1


def _segments(op):
    return list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))


def _maps(op):
    return [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _pointwise(op):
    iterators = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    maps = _maps(op)
    return all("parallel" in a for a in iterators) and all(m == ir.AffineMap.get_identity(len(iterators))
                                                           for m in maps)


def _before(v, anchor):
    """Whether value v is available at op anchor (made before it in its block, or outside it)."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        return True  # (the block's own arguments, or an enclosing block's)
    owner = owner.operation
    return owner.block != anchor.block or owner.is_before_in_block(anchor)


def _mergeable(a, b):
    """The inits to move before a (_hoisted) where a and b can be one generic, else None."""
    if not (_pointwise(a) or _pointwise(b)):
        return None
    (n_a, _), (n_b, _) = _segments(a), _segments(b)
    maps_a, maps_b = _maps(a), _maps(b)
    if maps_a[0].n_dims != maps_b[0].n_dims:
        return None
    identity = ir.AffineMap.get_identity(maps_a[0].n_dims)
    # (a common input read with the identity map by both: the same iteration space)
    if not any(v == w and maps_a[i] == identity and maps_b[j] == identity
               for i, v in enumerate(list(a.operands)[:n_a]) for j, w in enumerate(list(b.operands)[:n_b])):
        return None
    return _hoisted(b, a)


INITS = ("tensor.empty", "linalg.fill")  # (what makes an init: moved before the first where made between)


def _hoisted(b, a):
    """The ops made between a and b that b's operands need, all inits (INITS) of values known
    before a, in order; None where b needs another value made after a."""
    moved = []

    def need(v):
        if _before(v, a):
            return True
        owner = v.owner.operation
        if owner.name not in INITS or len(list(v.uses)) != 1:
            return False
        if not all(need(x) for x in owner.operands):
            return False
        moved.append(owner)
        return True
    return moved if all(need(v) for v in b.operands) else None


def _merge(a, b, moved):
    for op in moved:
        op.move_before(a)
    (n_a, _), (n_b, _) = _segments(a), _segments(b)
    maps_a, maps_b = _maps(a), _maps(b)
    blocks = [op.regions[0].blocks[0] for op in (a, b)]
    args = [list(blk.arguments) for blk in blocks]
    # the inputs (one block argument per distinct value and map), then the inits
    ins, in_maps, in_args, alias = [], [], [], []
    for v, m, arg in zip(list(a.operands)[:n_a] + list(b.operands)[:n_b], maps_a[:n_a] + maps_b[:n_b],
                         args[0][:n_a] + args[1][:n_b]):
        same = next((j for j, (w, k) in enumerate(zip(ins, in_maps)) if w == v and k == m), None)
        if same is None:
            ins.append(v)
            in_maps.append(m)
            in_args.append(arg)
        else:
            alias.append((arg, same))
    outs = list(a.operands)[n_a:] + list(b.operands)[n_b:]
    maps = in_maps + maps_a[n_a:] + maps_b[n_b:]
    iterators = (b if _pointwise(a) else a).attributes["iterator_types"]
    order = in_args + args[0][n_a:] + args[1][n_b:]
    with ir.InsertionPoint(a), b.location:
        new = ir.Operation.create(
            "linalg.generic", results=[r.type for r in a.results] + [r.type for r in b.results],
            operands=ins + outs, regions=1,
            attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                        "iterator_types": iterators,
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(ins), len(outs)])})
    body = new.regions[0].blocks.append(*[x.type for x in order], arg_locs=[x.location for x in order])
    for old, fresh in zip(order, body.arguments):
        old.replace_all_uses_with(fresh)
    for old, j in alias:
        old.replace_all_uses_with(body.arguments[j])
    yields = [list(blk.operations)[-1] for blk in blocks]
    with ir.InsertionPoint(body), b.location:
        end = ir.Operation.create("linalg.yield", operands=[v for y in yields for v in y.operands])
    for blk, y in zip(blocks, yields):
        for o in list(blk.operations):
            if o.operation != y.operation:
                o.operation.move_before(end)
    for old, fresh in zip(list(a.results) + list(b.results), list(new.results)):
        old.replace_all_uses_with(fresh)
    a.erase()
    b.erase()
    return new


def _ops_named(module, name):
    """The ops of module named name, in walk order (collected first: the callers rewrite them)."""
    ops = []

    def visit(op):
        if op.name == name:
            ops.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return ops


def _producer(v):
    """The name of the op whose result v is ("" for a block argument)."""
    return "" if isinstance(v.owner, ir.Block) else v.owner.operation.name


def keep_roundings(module):
    """Drop the `contract` flag that arith-emulate-unsupported-floats puts on the extf/truncf
    it wraps each emulated op in: with it, folding (arith-expand's, canonicalize's) removes a
    truncf -> extf pair between two ops, so `a * b + c` on bf16 would round once instead of
    after each op as torch does."""
    none = ir.Attribute.parse("#arith.fastmath<none>")

    def visit(op):
        if op.name in ("arith.extf", "arith.truncf") and "fastmath" in op.attributes:
            op.attributes["fastmath"] = none
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


def lower_to_llvm(module, loops="loops", dump=None):
    """Run the pipeline on module in place. dump: a callable getting (stage, text) for debugging."""
    with module.context:
        stages = [("fuse", TENSOR_PIPELINE[:FUSE_PASSES]), ("tensor", TENSOR_PIPELINE[FUSE_PASSES:]),
                  ("loops", LOOPS[loops]), ("low-floats", LOW_FLOATS), ("llvm", LLVM_PIPELINE)]
        for stage, passes in stages:
            passmanager.PassManager.parse("builtin.module(" + ",".join(passes) + ")").run(module.operation)
            if stage == "fuse":
                write_over_last_reads(module)
                merge_siblings(module)
            if stage == "tensor":
                copies_to_linalg(module)
            if stage == "low-floats":
                keep_roundings(module)
            if dump is not None:
                dump(stage, str(module))
    return module
