"""Native CPU kernels for regions of thunder prims, through linalg.

    kernel = compile_region(func_text_or_module, name)
    outs = kernel(*tensors)          # a tuple of new torch tensors, one per func result

- scalar.py:     the scalar semantics of each prim (types, conversions, math; approx.py: polynomials)
- to_linalg.py:  thunder prims -> linalg on tensors (destination-passing func, text); a region
                 whose results share their first dim loops over tiles of rows of it, the row
                 range being two more arguments, so the rows can be split over threads
                 (the per-prim lowerings: op_lowering.py; the tiling analysis: tiling.py;
                 TensorT and affine maps: types_and_maps.py)
- pipeline.py:   linalg -> LLVM dialect (upstream passes)
- runtime.py:    ExecutionEngine + memref descriptors over torch storage (no copies), threads
- disk_cache.py: compiled kernels as shared libraries on disk, for the next process
- any_size.py:   one kernel for every size of a region whose sizes change (cache="symbolic
                 values", automatic dynamic): sizes read from the arguments at run time

Kernels are cached by (region text, name, options); each kernel compiles one variant per
combination of input strides it is called with (static strided layouts let LLVM vectorize),
or a single variant with dynamic strides when specialize_strides=False. Compiled code is shared
by linalg text, which names the func "kernel" and leaves the row count of a tiled region
dynamic: regions that differ only in name or number of rows compile once; a kernel given the
sizes that change (`sizes`) leaves them dynamic too wherever the lowering can.
"""
import math
import threading
import time

import torch

from thunder.core import fresh_memory, logs
from thunder.dialects.mlir import LOCK, ir
from thunder.lowering.linalg import disk_cache
from thunder.lowering.linalg.last_call import LastCall
from thunder.lowering.linalg.pipeline import OPT_LEVEL, lower_to_llvm, pipeline  # noqa: F401
from thunder.lowering.linalg.runtime import CallFrame, CompiledFunction, torch_dtype
from thunder.lowering.linalg.scalar import UnsupportedOp, supported  # noqa: F401
from thunder.lowering.linalg.tiling import row_major_strides  # noqa: F401
from thunder.lowering.linalg.to_linalg import lower_region, signature, to_linalg  # noqa: F401

_CACHE = {}
# (kernel name, seconds, how) for every kernel this process compiled ("compiled") or loaded from
# the disk cache ("disk", disk_cache.py); benchmarks read it to report compile time per region
COMPILE_LOG = []


def _text(func_op_text_or_module):
    if isinstance(func_op_text_or_module, str):
        return func_op_text_or_module
    op = getattr(func_op_text_or_module, "operation", func_op_text_or_module)
    return op.get_asm(print_generic_op_form=False, enable_debug_info=False)


# compiled code by linalg text: the text names the func "kernel" and leaves a tiled region's row
# count dynamic, so regions that differ only in name or in their number of rows share one compile
_ENGINES = {}
# a tiled kernel splits its rows over threads when its tensors hold at least this many bytes
PARALLEL_MIN_BYTES = 1 << 19
# row ranges per thread: the threads take the next one until none is left (runtime.CallFrame)
RANGES_PER_THREAD = 4


class Kernel:
    def __init__(self, text, name, loops="loops", specialize_strides=True, opt_level=OPT_LEVEL, sizes=()):
        self.text, self.name, self.loops = text, name, loops
        # cache="symbolic values": the sizes that change between calls; the kernel is tiled along
        # them where it can be, reads them from its arguments' sizes (lower_region's `dynamic`)
        # and takes the strides that depend on them dynamically, so its code is shared by all
        # sizes (the engine cache is keyed by the lowered text)
        self.sizes = tuple(sizes)
        self.dynamic = bool(self.sizes)  # (False where the lowering or compile refused them)
        self.specialize, self.opt_level = specialize_strides, opt_level
        self.name, ins, outs = signature(text, name)
        self.inputs = [(t.shape, torch_dtype(t.elt)) for t in ins]
        # runtime numbers (Python floats / ints the kernel takes as 0-d memrefs): index -> type
        self.scalars = {i: t.elt for i, t in enumerate(ins) if t.scalar}
        self.outputs = [(t.shape, torch_dtype(t.elt)) for t in outs]
        self.bytes = sum(math.prod(s) * d.itemsize for s, d in self.inputs + self.outputs)
        self.variants = {}
        self.frames = {}  # thread id -> {input strides: CallFrame}
        self.last_call = None  # the LastCall of the last full call (a kernel without runtime numbers)
        if not specialize_strides:
            self._variant(None)  # compile now: errors show at compile_region

    def lowered(self, input_strides=None):
        # the affine super-vectorizer needs affine loop bounds: no tile loop (whose tiles have a
        # dynamic size) in that variant
        tile = self.loops == "loops"
        if self.dynamic:
            try:
                return lower_region(self.text, self.name, input_strides, tile=tile, out_name="kernel",
                                    prefer=self.sizes, dynamic=self.sizes)
            except UnsupportedOp:  # (an op needs such a size as a number: code for these sizes)
                self.dynamic = False
        return lower_region(self.text, self.name, input_strides, tile=tile, out_name="kernel", prefer=self.sizes)

    def linalg_text(self, input_strides=None):
        return self.lowered(input_strides).text

    def _variant(self, key):
        v = self.variants.get(key)
        if v is None:
            with LOCK:  # (MLIR's shared contexts; a thread that waited uses the other's compile)
                return self._compile_variant(key)
        return v

    def engine_key(self, key):
        """(the lowered region of variant key, the key of its code in _ENGINES); under LOCK."""
        lowered = self.lowered(key)
        return lowered, (lowered.text, self.loops, self.opt_level)

    def _compile_variant(self, key):
        v = self.variants.get(key)
        if v is None:
            lowered, _ = self.engine_key(key)
            try:
                fn = engine(lowered, self.name, self.loops, self.opt_level)
            except Exception:  # noqa: BLE001 - the dynamic sizes' code did not compile: these sizes'
                if not self.dynamic:
                    raise
                self.dynamic = False
                return self._compile_variant(key)
            v = self.variants[key] = (fn, lowered)
        return v

    def row_ranges(self, lowered):
        """row_ranges of a call of this variant."""
        return row_ranges(lowered.rows, lowered.tile_rows, self.bytes)

    def _key(self, strides):
        """The variant for inputs with these strides."""
        if self.specialize and self.sizes:  # unit and zero strides static, the others dynamic
            return tuple(tuple(0 if n == 1 or s == 0 else 1 if s == 1 else None for n, s in zip(shape, st))
                         for (shape, _), st in zip(self.inputs, strides))
        if self.specialize:  # a size-1 dim is never stepped along: its stride does not matter
            return tuple(tuple(0 if n == 1 else s for n, s in zip(shape, st))
                         for (shape, _), st in zip(self.inputs, strides))
        return None

    def has_code(self, strides):
        """Whether a call with inputs of these strides runs without compiling: this process
        compiled the same lowered code already (a kernel for other sizes along its tiled axis)."""
        key = self._key(strides)
        if key in self.variants:
            return True
        with LOCK:
            lowered = self.lowered(key)
        return (lowered.text, self.loops, self.opt_level) in _ENGINES

    def _frame(self, strides):
        """The CallFrame for inputs with these strides at torch's thread count now (per thread:
        frames hold pointers)."""
        frames = self.frames.get(threading.get_ident())
        if frames is None:
            frames = self.frames[threading.get_ident()] = {}
        key = (strides, torch.get_num_threads())  # (torch.set_num_threads between calls holds)
        frame = frames.get(key)
        if frame is None:
            fn, lowered = self._variant(self._key(strides))
            shapes = [s for s, _ in self.inputs + self.outputs]
            out_strides = [tuple(row_major_strides(s)) for s, _ in self.outputs]  # torch.empty's
            ranges, threads = (None, 1) if lowered.rows is None else self.row_ranges(lowered)
            frame = frames[key] = CallFrame(fn, shapes, list(strides) + out_strides, ranges, self.scalars, threads)
        return frame

    def strides(self, args):
        """The strides of the tensors among a call's arguments (() for its runtime numbers)."""
        return tuple(() if i in self.scalars else a.stride() for i, a in enumerate(args))

    def __call__(self, *args):
        last = self.last_call  # (call_as_last written out: a decode step makes ~25 such calls)
        if last is not None and len(args) == len(self.inputs) and last.matches(args):
            return last.run(args)
        return self.call(args, None)

    def call_as_last(self, args):
        """The outputs of a call whose tensors match the last full call's in this thread exactly
        (last_call.py: one C++ check), run on that call's frame; None for any other call."""
        last = self.last_call
        if last is None or len(args) != len(self.inputs) or not last.matches(args):
            return None
        return last.run(args)

    def call(self, args, strides=None):
        """__call__ with the inputs' strides when the caller has them (self.strides(args))."""
        if len(args) != len(self.inputs):
            raise TypeError(f"{self.name}: expected {len(self.inputs)} tensors, got {len(args)}")
        for i, (a, (shape, dtype)) in enumerate(zip(args, self.inputs)):
            if i in self.scalars:
                if not isinstance(a, (int, float)) or isinstance(a, float) and self.scalars[i] != "f64":
                    raise TypeError(f"{self.name}: input {i} must be a Python number ({self.scalars[i]})")
                continue
            if not isinstance(a, torch.Tensor) or not a.is_cpu:  # (is_cpu: no torch.device made, ~1 us a tensor less)
                raise TypeError(f"{self.name}: input {i} must be a CPU tensor")
            if a.shape != shape or a.dtype != dtype:
                raise TypeError(f"{self.name}: input {i} is {tuple(a.shape)} {a.dtype}, the region "
                                f"was compiled for {shape} {dtype}")
        strides = self.strides(args) if strides is None else strides
        frame = self._frame(strides)
        outs = tuple(fresh_memory.empty(shape, dtype) for shape, dtype in self.outputs)  # (CPU, any default device)
        frame(args + outs)
        if not self.scalars:  # (a call with the same tensors next takes call_as_last)
            self.last_call = LastCall.arm(args, strides, frame, self.outputs)
        return outs


def row_ranges(rows, tile, nbytes):
    """(the row ranges of a tiled kernel's call of `rows` rows in tiles of `tile` rows, whose
    tensors hold nbytes, the threads that compute them): one range for one thread, else
    RANGES_PER_THREAD per thread, whole tiles each."""
    tiles = -(-rows // tile)
    threads = max(1, min(torch.get_num_threads(), tiles)) if nbytes >= PARALLEL_MIN_BYTES else 1
    n = 1 if threads == 1 else min(tiles, threads * RANGES_PER_THREAD)
    bounds = [min(rows, (tiles * k // n) * tile) for k in range(n + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or [(0, 0)], threads


def engine(lowered, name, loops, opt_level):
    """The compiled code of a lowered region (to_linalg.Lowered): this process's, the disk
    cache's, or compiled now; under LOCK."""
    key = (lowered.text, loops, opt_level)
    fn = _ENGINES.get(key)
    if fn is None:
        t0 = time.perf_counter()

        def build():
            ctx = ir.Context()
            with ctx, ir.Location.unknown():
                module = ir.Module.parse(lowered.text)
                lower_to_llvm(module, loops)
            return CompiledFunction(module, "kernel", opt_level)

        fn, how = disk_cache.compiled_function(lowered.text, "kernel", build, loops=loops, opt_level=opt_level)
        _ENGINES[key] = fn
        COMPILE_LOG.append((name, time.perf_counter() - t0, how))
        logs.kernel_compiled()
    return fn


def compile_region(func_op_text_or_module, name=None, *, loops="loops", specialize_strides=True,
                   opt_level=OPT_LEVEL, sizes=()) -> Kernel:
    """A callable running the func (of thunder prims) `name` natively. The first call with a
    new combination of input strides compiles (when specialize_strides). sizes: see Kernel."""
    with LOCK:
        text = _text(func_op_text_or_module)
        key = (text, name, loops, specialize_strides, opt_level, tuple(sizes))
        k = _CACHE.get(key)
        if k is None:
            k = _CACHE[key] = Kernel(text, name, loops, specialize_strides, opt_level, sizes)
        return k
