"""Running a lowered region: ExecutionEngine + ranked memref descriptors built with ctypes from
torch tensors (no copies: the descriptor points at the tensor's storage, with its strides).

The entry `_mlir_ciface_<name>` takes one pointer per memref argument (inputs, then outputs)
to a descriptor `{allocated, aligned, offset, sizes[rank], strides[rank]}`. We call it through
the ExecutionEngine's packed wrapper (`void fn(void **args)`, args[i] pointing at the i-th
argument, i.e. at a descriptor pointer).
"""
import ctypes

import torch

from thunder.core import dtypes
from thunder.dialects.mlir import ExecutionEngine, ir

_DESCRIPTORS = {}


def descriptor_type(rank):
    """The ctypes struct of a ranked memref descriptor."""
    if rank not in _DESCRIPTORS:
        fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
        if rank:
            fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
        _DESCRIPTORS[rank] = type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})
    return _DESCRIPTORS[rank]


def descriptor(t: torch.Tensor):
    rank = t.dim()
    d = descriptor_type(rank)()
    p = t.data_ptr()  # already includes the storage offset
    d.allocated = p
    d.aligned = p
    d.offset = 0
    if rank:
        d.sizes[:] = t.shape
        d.strides[:] = t.stride()
    return d


def torch_dtype(elt: str) -> torch.dtype:
    return dtypes.from_mlir_name(elt)


class CompiledFunction:
    """An ExecutionEngine holding one lowered func; call(tensors) with inputs then outputs."""

    def __init__(self, llvm_module: ir.Module, name: str, opt_level=3):
        self.module = llvm_module  # keep the module (and its context) alive with the engine
        self.engine = ExecutionEngine(llvm_module, opt_level=opt_level)
        addr = self.engine.raw_lookup("_mlir_ciface_" + name)
        if not addr:
            raise RuntimeError(f"no _mlir_ciface_{name} in the compiled module")
        self.fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr)

    def __call__(self, tensors):
        n = len(tensors)
        descs = [descriptor(t) for t in tensors]
        ptrs = (ctypes.c_void_p * n)(*[ctypes.addressof(d) for d in descs])
        base = ctypes.addressof(ptrs)
        size = ctypes.sizeof(ctypes.c_void_p)
        packed = (ctypes.c_void_p * n)(*[base + i * size for i in range(n)])
        self.fn(packed)
