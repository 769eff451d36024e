"""Running a lowered region: ExecutionEngine + ranked memref descriptors built with ctypes from
torch tensors (no copies: the descriptor points at the tensor's storage, with its strides).

The entry `_mlir_ciface_<name>` takes one pointer per memref argument (inputs, then outputs)
to a descriptor `{allocated, aligned, offset, sizes[rank], strides[rank]}`. A runtime number
argument (f64/i64) is a 0-d memref over a buffer of the frame that each call writes. We call it through
the ExecutionEngine's packed wrapper (`void fn(void **args)`, args[i] pointing at the i-th
argument, i.e. at a descriptor pointer).
"""
import concurrent.futures
import ctypes
import os

import torch

from thunder.core import dtypes
from thunder.dialects.mlir import LOCK, ExecutionEngine, ir
from thunder.lowering.linalg.pipeline import OPT_LEVEL

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

    def __init__(self, llvm_module: ir.Module, name: str, opt_level=OPT_LEVEL):
        self.module = llvm_module  # keep the module (and its context) alive with the engine
        self.engine = ExecutionEngine(llvm_module, opt_level=opt_level)
        addr = self.engine.raw_lookup("_mlir_ciface_" + name)
        if not addr:
            raise RuntimeError(f"no _mlir_ciface_{name} in the compiled module")
        self.fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr)

    def __call__(self, tensors, row_ranges=None):
        """Run once on tensors (inputs, then outputs); row_ranges as in CallFrame."""
        CallFrame(self, [tuple(x.shape) for x in tensors], [x.stride() for x in tensors], row_ranges)(tensors)


# The row ranges of a kernel's call run on the OpenMP threads torch runs its own ops on (one pool:
# no thread of ours competes with torch's): GOMP_parallel (libgomp's entry for `#pragma omp
# parallel`, which LLVM's libomp also provides) runs this function on each thread; each takes the
# next range (an atomic counter) until none is left, so a thread that gets no core (a shared
# machine) delays nothing. Its argument is {kernel entry, its packed argument arrays, their
# count, the counter}, passed the way a packed entry takes one pointer argument.
_RANGE_RUNNER = """
llvm.func @run_ranges(%d: !llvm.ptr) {
  %one = llvm.mlir.constant(1 : i64) : i64
  %fn = llvm.load %d : !llvm.ptr -> !llvm.ptr
  %arrays_at = llvm.getelementptr %d[1] : (!llvm.ptr) -> !llvm.ptr, i64
  %arrays = llvm.load %arrays_at : !llvm.ptr -> !llvm.ptr
  %n_at = llvm.getelementptr %d[2] : (!llvm.ptr) -> !llvm.ptr, i64
  %n = llvm.load %n_at : !llvm.ptr -> i64
  %next = llvm.getelementptr %d[3] : (!llvm.ptr) -> !llvm.ptr, i64
  llvm.br ^take
^take:
  %k = llvm.atomicrmw add %next, %one seq_cst : !llvm.ptr, i64
  %left = llvm.icmp "slt" %k, %n : i64
  llvm.cond_br %left, ^run, ^done
^run:
  %args_at = llvm.getelementptr %arrays[%k] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr
  %args = llvm.load %args_at : !llvm.ptr -> !llvm.ptr
  llvm.call %fn(%args) : !llvm.ptr, (!llvm.ptr) -> ()
  llvm.br ^take
^done:
  llvm.return
}
"""
_OPENMP = None  # (GOMP_parallel, the runner's packed entry, its engine), False: not available


def _openmp_libraries():
    if "OpenMP" not in torch.__config__.parallel_info().split("parallel backend:", 1)[-1].split("\n", 1)[0]:
        return  # torch's threads are not OpenMP's: ranges go to the Python pool
    for name in ("libgomp.so.1", "libomp.so", "libiomp5.so", "libomp.dylib", "libiomp5.dylib"):
        try:  # RTLD_NOLOAD: the runtime torch loaded, never a second one
            yield ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except (OSError, AttributeError):
            continue


def openmp():
    """(GOMP_parallel, the range runner's entry) of torch's OpenMP runtime, or None."""
    if _OPENMP is None:
        with LOCK:  # (once; another thread waits for the answer rather than taking the pool)
            _find_openmp()
    return _OPENMP[:2] if _OPENMP else None


def _find_openmp():
    global _OPENMP
    if _OPENMP is None:
        found = False
        for lib in _openmp_libraries():
            fn = getattr(lib, "GOMP_parallel", None)
            if fn is None:
                continue
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
            fn.restype = None
            with ir.Context(), ir.Location.unknown():
                engine = ExecutionEngine(ir.Module.parse(_RANGE_RUNNER), opt_level=OPT_LEVEL)
            found = (fn, engine.raw_lookup("run_ranges"), engine)  # (the packed entry: _mlir_run_ranges)
            break
        _OPENMP = found


class CallFrame:
    """The ctypes arguments of one kernel for fixed sizes and strides: the memref descriptors
    (sizes and strides written once) and the packed argument arrays. A call only writes the
    tensors' data pointers. row_ranges: for a tiled kernel, the (lo, hi) row ranges to compute;
    with threads > 1, the ranges run on torch's OpenMP threads (_RANGE_RUNNER), or where torch has
    none, the caller and threads - 1 Python pool threads take the next range until none is left
    (ctypes releases the GIL during each). Not shared between threads."""

    def __init__(self, fn, shapes, strides, row_ranges=None, scalars=None, threads=1):
        self.threads = threads
        self.fn = fn.fn
        scalars = scalars or {}  # argument index -> "f64" / "i64": runtime numbers
        words, self.slots = [], []
        self.tensor_slots, self.scalar_slots = [], []
        for i, (shape, st) in enumerate(zip(shapes, strides)):
            self.slots.append(len(words))
            if i in scalars:
                buf = (ctypes.c_double if scalars[i] == "f64" else ctypes.c_int64)()
                self.scalar_slots.append((i, buf))
                words += [ctypes.addressof(buf)] * 2 + [0]
            else:
                self.tensor_slots.append((i, len(words)))
                words += [0, 0, 0, *shape, *st]  # allocated, aligned, offset, sizes, strides
        bounds = len(words)
        for lo, hi in row_ranges or ():
            words += [lo, hi]
        self.words = (ctypes.c_int64 * max(1, len(words)))(*words)
        base = ctypes.addressof(self.words)
        n = len(shapes)
        self.descs = (ctypes.c_void_p * max(1, n))(*[base + 8 * s for s in self.slots])
        arg_ptrs = [ctypes.addressof(self.descs) + 8 * i for i in range(n)]
        if row_ranges is None:
            self.packed = [(ctypes.c_void_p * max(1, n))(*arg_ptrs)]
        else:
            self.packed = [(ctypes.c_void_p * (n + 2))(*arg_ptrs, base + 8 * (bounds + 2 * k),
                                                       base + 8 * (bounds + 2 * k + 1))
                           for k in range(len(row_ranges))]
        self.parallel = None
        # the packed entry's argument of a frame run as one call with no runtime numbers
        self.single = ctypes.addressof(self.packed[0]) if len(self.packed) == 1 and not self.scalar_slots else None
        omp = openmp() if threads > 1 and len(self.packed) > 1 else None
        if omp is not None:
            arrays = (ctypes.c_void_p * len(self.packed))(*map(ctypes.addressof, self.packed))
            work = (ctypes.c_int64 * 4)(ctypes.cast(self.fn, ctypes.c_void_p).value, ctypes.addressof(arrays),
                                        len(self.packed), 0)
            at = ctypes.c_void_p(ctypes.addressof(work))  # the packed entry's one argument: &work
            args = (ctypes.c_void_p * 1)(ctypes.addressof(at))
            self.parallel = (*omp, work, ctypes.addressof(args))
            self._keep = (arrays, at, args)  # (what the addresses point at)

    def __call__(self, tensors):
        words = self.words
        for i, s in self.tensor_slots:
            words[s] = words[s + 1] = tensors[i].data_ptr()  # already includes the storage offset
        if self.single is not None:  # (one call on this thread, no runtime numbers: the common case)
            self.fn(self.single)
            return
        for i, buf in self.scalar_slots:
            buf.value = tensors[i]
        packed = self.packed
        if self.parallel is not None:
            gomp_parallel, runner, work, arg = self.parallel
            work[3] = 0
            gomp_parallel(runner, arg, self.threads, 0)
            return
        if len(packed) == 1 or self.threads == 1:
            for p in packed:
                self.fn(p)
            return
        ranges = iter(packed)  # (next() of a list iterator is atomic under the GIL)

        def work():
            for p in ranges:
                self.fn(p)

        futures = [_pool().submit(work) for _ in range(self.threads - 1)]
        work()
        for f in futures:
            if not f.cancel():  # (one that has not started has nothing left to do)
                f.result()


_POOL = None


def _pool():
    global _POOL
    if _POOL is not None:
        return _POOL
    with LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(max(1, (os.cpu_count() or 2) - 1),
                                                          thread_name_prefix="thunder-kernel")
    return _POOL
