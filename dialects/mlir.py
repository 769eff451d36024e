"""The one place that imports the MLIR Python bindings (from the torch-mlir wheel), so the
provider can be swapped for upstream `mlir` packages later."""
from torch_mlir import ir, passmanager  # noqa: F401
from torch_mlir.dialects import arith, ext, func  # noqa: F401
from torch_mlir.dialects import complex as complex_  # noqa: F401  (complex number constants)
# native CPU lowering (lowering/linalg): linalg on tensors -> LLVM, JIT-compiled by the
# upstream ExecutionEngine
from torch_mlir.dialects import bufferization, linalg, math, memref, tensor  # noqa: F401
from torch_mlir.execution_engine import ExecutionEngine  # noqa: F401

# The bindings look up a Python module per dialect namespace (torch_mlir.dialects.<ns>) each time
# they wrap an op, and do not remember a failed import: ~15 us per op of our dialects. Empty
# modules for them make the lookup succeed once (their ops stay generic OpViews).
import sys as _sys  # noqa: E402
import threading as _threading  # noqa: E402
import types as _types  # noqa: E402

for _ns in ("thunder", "ltorch"):
    _sys.modules.setdefault(f"torch_mlir.dialects.{_ns}", _types.ModuleType(f"torch_mlir.dialects.{_ns}"))

# One thread at a time uses MLIR: the dialects' context and the lowering's shared contexts
# (parsing, verification) are process-wide, and the bindings' objects for one context are not
# safe to use from two threads at once. Held by every compile (runtime/jit.py's cache miss, a
# kernel's first compile for new strides or sizes) and by whatever builds or reads a shared
# context; never on a cached call's path. Reentrant: a compile may compile (a jitted function
# called while tracing). docs/architecture.md "Threads and processes".
LOCK = _threading.RLock()

# The address of the MLIR operation a handle names, read without touching the operation (an
# op's Python hash reads its contents). The bindings give each lookup its own handle, and erasing
# an op through one leaves the others dangling: reading through one is a use after free, so a
# pass that erases ops while holding others' handles compares addresses taken while all lived.
import ctypes as _ctypes  # noqa: E402

_capsule_name = _ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = _ctypes.c_char_p, [_ctypes.py_object]
_capsule_pointer = _ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = _ctypes.c_void_p, [_ctypes.py_object, _ctypes.c_char_p]


def address(operation):
    capsule = operation._CAPIPtr
    return _capsule_pointer(capsule, _capsule_name(capsule))


def module_of(ops, loc, attributes=None):
    """A new module holding clones of ops, in order, with the given module attributes (a mapping,
    e.g. another module op's `attributes`). The insertion point is explicit: given none, the
    bindings' clone inserts at the caller's active one."""
    module = ir.Module.create(loc=loc)
    for name in attributes or ():
        module.operation.attributes[name] = attributes[name]
    at = ir.InsertionPoint(module.body)
    for op in ops:
        op.operation.clone(ip=at)
    return module
