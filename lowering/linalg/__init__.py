"""Native CPU kernels for regions of thunder prims, through linalg.

    kernel = compile_region(func_text_or_module, name)
    outs = kernel(*tensors)          # a tuple of new torch tensors, one per func result

- to_linalg.py: thunder prims -> linalg on tensors (destination-passing func, text)
- pipeline.py:  linalg -> LLVM dialect (upstream passes)
- runtime.py:   ExecutionEngine + memref descriptors over torch storage (no copies)

Kernels are cached by (region text, name, options); each kernel compiles one variant per
combination of input strides it is called with (static strided layouts let LLVM vectorize),
or a single variant with dynamic strides when specialize_strides=False.
"""
import time

import torch

from thunder.dialects.mlir import ir
from thunder.lowering.linalg.pipeline import lower_to_llvm, pipeline  # noqa: F401
from thunder.lowering.linalg.runtime import CompiledFunction, torch_dtype
from thunder.lowering.linalg.to_linalg import UnsupportedOp, signature, supported, to_linalg  # noqa: F401

_CACHE = {}
# (kernel name, seconds, how) for every variant compiled in this process, how being "compiled"
# or "disk" (loaded from the disk cache); benchmarks read it to report compile time per region
COMPILE_LOG = []


def _text(func_op_text_or_module):
    if isinstance(func_op_text_or_module, str):
        return func_op_text_or_module
    op = getattr(func_op_text_or_module, "operation", func_op_text_or_module)
    return op.get_asm(print_generic_op_form=False, enable_debug_info=False)


class Kernel:
    def __init__(self, text, name, loops="loops", specialize_strides=True, opt_level=3):
        self.text, self.name, self.loops = text, name, loops
        self.specialize, self.opt_level = specialize_strides, opt_level
        self.name, ins, outs = signature(text, name)
        self.inputs = [(t.shape, torch_dtype(t.elt)) for t in ins]
        self.outputs = [(t.shape, torch_dtype(t.elt)) for t in outs]
        self.variants = {}
        if not specialize_strides:
            self._variant(None)  # compile now: errors show at compile_region

    def linalg_text(self, input_strides=None):
        return to_linalg(self.text, self.name, input_strides)

    def _variant(self, key):
        fn = self.variants.get(key)
        if fn is None:
            t0 = time.perf_counter()
            ctx = ir.Context()
            with ctx, ir.Location.unknown():
                module = ir.Module.parse(self.linalg_text(key))
                lower_to_llvm(module, self.loops)
            fn = self.variants[key] = CompiledFunction(module, self.name, self.opt_level)
            COMPILE_LOG.append((self.name, time.perf_counter() - t0, "compiled"))
        return fn

    def __call__(self, *args):
        if len(args) != len(self.inputs):
            raise TypeError(f"{self.name}: expected {len(self.inputs)} tensors, got {len(args)}")
        key = [] if self.specialize else None
        for i, (a, (shape, dtype)) in enumerate(zip(args, self.inputs)):
            if not isinstance(a, torch.Tensor) or a.device.type != "cpu":
                raise TypeError(f"{self.name}: input {i} must be a CPU tensor")
            if tuple(a.shape) != shape or a.dtype != dtype:
                raise TypeError(f"{self.name}: input {i} is {tuple(a.shape)} {a.dtype}, the region "
                                f"was compiled for {shape} {dtype}")
            if key is not None:
                # a size-1 dim is never stepped along: its stride does not matter
                key.append(tuple(0 if n == 1 else s for n, s in zip(a.shape, a.stride())))
        fn = self._variant(tuple(key) if key is not None else None)
        args = [a.resolve_conj().resolve_neg() if (a.is_conj() or a.is_neg()) else a for a in args]
        outs = tuple(torch.empty(shape, dtype=dtype) for shape, dtype in self.outputs)
        fn(list(args) + list(outs))
        return outs


def compile_region(func_op_text_or_module, name=None, *, loops="loops", specialize_strides=True,
                   opt_level=3) -> Kernel:
    """A callable running the func (of thunder prims) `name` natively. The first call with a
    new combination of input strides compiles (when specialize_strides)."""
    text = _text(func_op_text_or_module)
    key = (text, name, loops, specialize_strides, opt_level)
    k = _CACHE.get(key)
    if k is None:
        k = _CACHE[key] = Kernel(text, name, loops, specialize_strides, opt_level)
    return k
