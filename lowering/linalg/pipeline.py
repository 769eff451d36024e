"""linalg on tensors -> LLVM dialect: the pass pipeline (upstream passes, textual)."""
from thunder.dialects.mlir import passmanager

# math ops without an LLVM intrinsic are rewritten in terms of exp/log/... by math-expand-ops
# (tanh -> exp based formula); what is left without an intrinsic (erf, atan2) becomes a libm
# call (convert-math-to-libm), resolved by the JIT from the process (libm is loaded by Python).
EXPAND_MATH = "tanh,sinh,cosh,asinh,acosh,atanh,fpowi,ctlz,exp2"

TENSOR_PIPELINE = [
    "linalg-fuse-elementwise-ops",  # producers (broadcasts included) fold into consumers
    "canonicalize",
    "cse",
    "eliminate-empty-tensors",  # the last op writes straight into the torch-allocated output
    "empty-tensor-to-alloc-tensor",
    "one-shot-bufferize{bufferize-function-boundaries}",
    "canonicalize",
    "buffer-deallocation-pipeline",
    "convert-bufferization-to-memref",
]

LOOPS = {
    # plain scf loops; LLVM -O3's loop vectorizer does the vectorizing
    "loops": ["convert-linalg-to-loops"],
    # affine loops, vectorized by the affine super-vectorizer
    "affine-vector": ["convert-linalg-to-affine-loops",
                      "func.func(affine-super-vectorize{virtual-vector-size=8 vectorize-reductions=true})",
                      "canonicalize"],
}

LLVM_PIPELINE = [
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
    return "builtin.module(" + ",".join(TENSOR_PIPELINE + LOOPS[loops] + LLVM_PIPELINE) + ")"


def lower_to_llvm(module, loops="loops", dump=None):
    """Run the pipeline on module in place. dump: a callable getting (stage, text) for debugging."""
    with module.context:
        if dump is None:
            passmanager.PassManager.parse(pipeline(loops)).run(module.operation)
            return module
        stages = [("tensor", TENSOR_PIPELINE), ("loops", LOOPS[loops]), ("llvm", LLVM_PIPELINE)]
        for stage, passes in stages:
            passmanager.PassManager.parse("builtin.module(" + ",".join(passes) + ")").run(module.operation)
            dump(stage, str(module))
    return module
