"""Running a region's CUDA kernels from the generated program.

    k = compile_region(region_text, "fusion")    # what codegen binds fusion_N to
    outs = k(*tensors)                            # CUDA tensors in, new CUDA tensors out

A call checks the inputs (one CUDA device, the region's shapes and dtypes), picks the variant
for their strides and 16-byte alignment (kernels are written for those, schedule.py), allocates
the outputs with torch.empty on the inputs' device (torch's caching allocator, so CUDA graph
capture puts them in the graph's pool), and launches each kernel of the region on
torch.cuda.current_stream(device) with cuLaunchKernel, its grid computed from the row (or
element) count. PTX is compiled once per (kernel text, chip) and kept in memory and in the
kernel cache on disk (THUNDER_KERNEL_CACHE, lowering/linalg/disk_cache.py); the driver loads it
once per (PTX, device) with cuModuleLoadData (and keeps its own JIT cache of the cubin).

Contexts: torch's runtime API binds the device's primary context to a thread lazily, at the
thread's first runtime call that needs one; the driver calls here need it bound already. torch's
autograd engine runs a CUDA backward on a thread of its own, where the region's kernels may be the
first CUDA work (nanoGPT's backward on the first device run: CUDA_ERROR_INVALID_CONTEXT). So every
region call first makes the primary context of its tensors' device current (Launcher.enter): the
check is one cuCtxGetCurrent (a per-thread flag would not see torch.cuda.set_device switch the
thread's context); a thread with none gets the primary context set (as the runtime would bind it);
a thread with another (another device's, a user's) gets it pushed and popped after the launches.
Modules and functions belong to a context: they are loaded and launched in the primary context
only, hence cached by device index.

Under CUDA graph capture: launches are captured like torch's (same stream); call the function
once before capturing (as torch requires anyway), so that loading modules happens outside it.

The driver is `cuda.bindings.driver` (package cuda-bindings, the `cuda` extra), imported on
the first launch. `Launcher(driver=..., device=...)` takes stand-ins, which the tests use to
check everything up to the driver call without a GPU.
"""
from __future__ import annotations

import ctypes
import hashlib
import re
import threading

import torch

from thunder.dialects.mlir import LOCK
from thunder.lowering.gpu import host_types, module_ptx, region_kernels
from thunder.lowering.linalg import disk_cache
from thunder.lowering.linalg.runtime import torch_dtype
from thunder.lowering.linalg.to_linalg import signature
from thunder.lowering.gpu import ptx as ptx_module

CUDA_SUCCESS = 0


class CudaDriverError(RuntimeError):
    pass


def _import_driver():
    try:
        from cuda.bindings import driver  # optional (the cuda extra): absent on CPU-only installs
    except ImportError as e:
        raise ImportError("thunder: the cuda executor launches kernels with cuda-bindings "
                          "(`from cuda.bindings import driver` failed): pip install 'thunder-mlir[cuda]'") from e
    return driver


class TorchDevice:
    """What the launcher needs to know about a torch CUDA device."""

    _chips = {}  # device index -> "sm_XY" (asked on every region call: torch's query is ~10 us)

    @staticmethod
    def chip(device):
        index = TorchDevice.index(device)
        chip = TorchDevice._chips.get(index)
        if chip is None:
            major, minor = torch.cuda.get_device_capability(index)
            chip = TorchDevice._chips[index] = f"sm_{major}{minor}"
        return chip

    @staticmethod
    def stream(device):
        return torch.cuda.current_stream(device).cuda_stream

    @staticmethod
    def index(device):
        return device.index if device.index is not None else torch.cuda.current_device()


class Launcher:
    """Loads PTX with the driver (once per PTX and device) and launches kernels."""

    def __init__(self, driver=None, device=TorchDevice):
        self._driver, self.device = driver, device
        # modules and functions of the device's primary context (the only one they are used in)
        self.functions = {}  # (PTX digest, kernel name, device index) -> CUfunction
        self.modules = {}  # (PTX digest, device index) -> CUmodule (kept loaded)
        self.contexts = {}  # device index -> its primary context (retained, never released)
        self.lock = threading.Lock()
        self._initialized = False

    @property
    def driver(self):
        if self._driver is None:
            self._driver = _import_driver()
        if not self._initialized:
            self._check(self._driver.cuInit(0), "cuInit")
            self._initialized = True
        return self._driver

    def _check(self, result, what):
        """The values after the CUresult of a cuda.bindings call; raise on an error."""
        if not isinstance(result, tuple):
            result = (result,)
        err = result[0]
        if int(err) != CUDA_SUCCESS:
            name = getattr(err, "name", str(err))
            raise CudaDriverError(f"thunder: {what} failed: {name}")
        rest = result[1:]
        return rest[0] if len(rest) == 1 else rest

    def primary(self, index):
        """The primary context of device `index` (the one torch's runtime API uses)."""
        ctx = self.contexts.get(index)
        if ctx is None:
            with self.lock:
                ctx = self.contexts.get(index)
                if ctx is None:
                    d = self.driver
                    dev = self._check(d.cuDeviceGet(index), f"cuDeviceGet({index})")
                    ctx = self.contexts[index] = self._check(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        return ctx

    def enter(self, device):
        """Make the device's primary context current on this thread (module docstring,
        "Contexts"); True where it was pushed over another context: pass it to leave()."""
        d = self.driver
        ctx = self.primary(self.device.index(device))
        current = self._check(d.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if int(current) == int(ctx):
            return False
        if not int(current):  # none bound to this thread (torch's autograd worker, a new thread)
            self._check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            return False
        self._check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        return True

    def leave(self, pushed):
        if pushed:
            self._check(self.driver.cuCtxPopCurrent(), "cuCtxPopCurrent")

    def function(self, ptx, kernel, device, digest=None):
        """The kernel's CUfunction, its module loaded once per device (between enter and leave).
        digest: the PTX's sha256, where the caller keeps it (a Variant: hashing the PTX on each
        launch cost ~20 us a call on the H200's host)."""
        index = self.device.index(device)
        digest = digest or ptx_digest(ptx)
        key = (digest, kernel, index)
        f = self.functions.get(key)
        if f is None:
            with self.lock:
                d = self.driver
                module = self.modules.get((digest, index))
                if module is None:
                    module = self._check(d.cuModuleLoadData(ptx.encode() + b"\0"), "cuModuleLoadData")
                    self.modules[(digest, index)] = module
                f = self._check(d.cuModuleGetFunction(module, kernel.encode()), f"cuModuleGetFunction({kernel})")
                self.functions[key] = f
        return f

    def launch(self, function, grid, block, params, device):
        """Launch with kernel parameters `params`: 64-bit values (data pointers, counts); between
        enter and leave."""
        values = (ctypes.c_uint64 * len(params))(*[p & (2**64 - 1) for p in params])
        base = ctypes.addressof(values)
        pointers = (ctypes.c_void_p * len(params))(*[base + 8 * i for i in range(len(params))])
        d = self.driver
        stream = self.device.stream(device)
        self._check(d.cuLaunchKernel(function, grid, 1, 1, block, 1, 1, 0, d.CUstream(stream),
                                     ctypes.addressof(pointers), 0), "cuLaunchKernel")


_LAUNCHER = None


def launcher():
    global _LAUNCHER
    if _LAUNCHER is None:
        with LOCK:  # (one launcher, one lock over its modules)
            if _LAUNCHER is None:
                _LAUNCHER = Launcher()
    return _LAUNCHER


_PTX = {}  # (gpu.module text, chip) -> PTX


def compile_ptx(module_text, chip):
    """PTX of a gpu.module text for a chip: from memory, the disk cache, or compiled."""
    key = (module_text, chip)
    p = _PTX.get(key)
    if p is None:
        import llvmlite  # optional (the cuda extra): its version keys the PTX cache

        parts = ("ptx", module_text, chip, ptx_module.pipeline(chip), llvmlite.__version__, disk_cache._compiler())
        p = _PTX[key] = disk_cache.cached_text(parts, lambda: module_ptx(module_text, chip), ".ptx")
    return p


def ptx_digest(ptx):
    return hashlib.sha256(ptx.encode()).hexdigest()


class Variant:
    """The kernels of a region for one pattern of input strides and alignments, on one chip."""

    def __init__(self, kernels, ptx):
        self.kernels, self.ptx, self.digest = kernels, ptx, ptx_digest(ptx)


class CudaKernel:
    """A region of thunder prims run as CUDA kernels; call it with the region's inputs."""

    def __init__(self, text, name=None, launcher=None, device_type="cuda"):
        self.text, self.launcher, self.device_type = text, launcher, device_type
        plain = host_types(text, name)
        self.name, ins, outs = signature(plain, name)
        self.inputs = [(t.shape, torch_dtype(t.elt)) for t in ins]
        self.outputs = [(t.shape, torch_dtype(t.elt)) for t in outs]
        self.variants = {}
        # where a region without tensor inputs (a `full`) runs: the device in its types
        m = re.search(rf'"({device_type}(?::\d+)?)"', text)
        self.device = torch.device(m.group(1)) if m else None

    def variant(self, strides, aligned, chip):
        key = (strides, aligned, chip)
        v = self.variants.get(key)
        if v is None:
            with LOCK:  # (a compile at call time: dialects/mlir.py)
                v = self.variants.get(key)
                if v is None:
                    kernels = region_kernels(self.text, self.name, strides, [i for i, a in enumerate(aligned) if a])
                    v = self.variants[key] = Variant(kernels, compile_ptx(kernels.module, chip))
        return v

    def check(self, args):
        if len(args) != len(self.inputs):
            raise TypeError(f"{self.name}: expected {len(self.inputs)} tensors, got {len(args)}")
        device = None
        for i, (a, (shape, dtype)) in enumerate(zip(args, self.inputs)):
            if not isinstance(a, torch.Tensor) or a.device.type != self.device_type:
                raise TypeError(f"{self.name}: input {i} must be a {self.device_type} tensor")
            if device is not None and a.device != device:
                raise TypeError(f"{self.name}: inputs on {device} and {a.device}")
            device = a.device
            if tuple(a.shape) != tuple(shape) or a.dtype != dtype:
                raise TypeError(f"{self.name}: input {i} is {tuple(a.shape)} {a.dtype}, the region "
                                f"was compiled for {shape} {dtype}")
        return device

    def __call__(self, *args):
        device = self.check(args) or self.device or torch.device(self.device_type)
        launcher = self.launcher or globals()["launcher"]()
        # a size-1 dim is never stepped along: its stride does not matter
        strides = tuple(tuple(0 if n == 1 else s for n, s in zip(a.shape, a.stride())) for a in args)
        aligned = tuple(a.data_ptr() % 16 == 0 for a in args)
        v = self.variant(strides, aligned, launcher.device.chip(device))
        outs = tuple(torch.empty(shape, dtype=dtype, device=device) for shape, dtype in self.outputs)
        shapes = [tuple(o.shape) for o in outs]
        pointers = [a.data_ptr() for a in args]
        pushed = launcher.enter(device)
        try:
            for launch in v.kernels.launches:
                n = launch.count(shapes)
                if n == 0:
                    continue
                f = launcher.function(v.ptx, launch.name, device, v.digest)
                params = pointers + [outs[j].data_ptr() for j in launch.outputs] + [n]
                launcher.launch(f, launch.grid(n), launch.threads, params, device)
        finally:
            launcher.leave(pushed)
        return outs


_CACHE = {}


def compile_region(text, name=None) -> CudaKernel:
    """A callable running the region (func `name`) as CUDA kernels (cached by text and name)."""
    key = (text, name)
    k = _CACHE.get(key)
    if k is None:
        k = _CACHE[key] = CudaKernel(text, name)
    return k
