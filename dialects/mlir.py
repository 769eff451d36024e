"""The one place that imports the MLIR Python bindings (from the torch-mlir wheel), so the
provider can be swapped for upstream `mlir` packages later."""
from torch_mlir import ir, passmanager  # noqa: F401
from torch_mlir.dialects import arith, ext, func  # noqa: F401
# native CPU lowering (lowering/linalg): linalg on tensors -> LLVM, JIT-compiled by the
# upstream ExecutionEngine
from torch_mlir.dialects import bufferization, linalg, math, memref, tensor  # noqa: F401
from torch_mlir.execution_engine import ExecutionEngine  # noqa: F401
