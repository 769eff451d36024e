"""Tiered execution of fused CPU regions: a region whose kernel is not compiled yet runs as
torch calls while the kernel compiles in the background; later calls run the kernel.

The compiler passes each generated program's constants through tier() (runtime/compile.py; a
program from the program cache: runtime/persist.py, runtime/portable.py): a linalg region
becomes a TieredRegion over its Kernel (lowering/linalg). Its call, for inputs of strides whose kernel
code is in memory or in the disk cache, runs the kernel; otherwise it submits the compile
(lowering/linalg/background.py: a worker process) and runs the region's ops as torch calls
(torch_region: the region func's Python program, as where the executor policy leaves ops to
torch), until a later call finds the kernel ready. A compile that fails leaves the region to torch
for good, the reason logged (THUNDER_LOGS=kernels) and kept in compile_stats(fn).kernel_failures;
compile_stats(fn).torch_while_compiling counts the calls each region ran as torch calls.

THUNDER_KERNEL_COMPILE=sync (read when a program is compiled) compiles kernels in the first
call, as before; "background" (the default) tiers. Regions holding random ops (none fuse today)
stay synchronous, so both paths draw the same numbers. wait_for_kernels() waits until the
kernels under way are compiled. The tests run with sync (tests/conftest.py).
"""
import os
import threading

import torch

from thunder.core import logs
from thunder.dialects.mlir import LOCK
from thunder.lowering.linalg import Kernel, background
from thunder.lowering.linalg.dynamic_region import DynamicRegion
from thunder.lowering.linalg.to_linalg import parse_region
from thunder.ops import registry
from thunder.runtime.codegen import compile_source, python_source

MODES = ("background", "sync")
log = logs.logger("kernels")
_reporting = threading.local()  # the compile under way in this thread: (function, CompileStats)


def mode():
    """How kernels compile: THUNDER_KERNEL_COMPILE, "background" (default) or "sync"."""
    m = os.environ.get("THUNDER_KERNEL_COMPILE", "").strip().lower() or "background"
    if m not in MODES:
        raise ValueError(f"thunder: THUNDER_KERNEL_COMPILE={m!r}: expected one of {', '.join(MODES)}")
    return m


class reporting_to:
    """Around a compile (runtime/jit.py): the regions bound in it report to fn's CompileStats."""

    def __init__(self, fn, stats):
        self.target = (fn, stats)

    def __enter__(self):
        self.before = getattr(_reporting, "target", None)
        _reporting.target = self.target

    def __exit__(self, *exc):
        _reporting.target = self.before


def reporting_target():
    """The (function, CompileStats) of the compile under way in this thread, or None (what a
    backward compiled later reports to: runtime/autograd.py)."""
    return getattr(_reporting, "target", None)


def tier(constants):
    """Replace, in a generated program's constants (codegen: fusion_N -> the executor's
    compiled region), the linalg regions by TieredRegions (see the module doc). A region with
    dynamic sizes (linalg/dynamic_region.py) tiers its own kernels: its kernel for every size
    compiles in the background (its torch calls at the call's sizes meanwhile), as do those it
    compiles per size; where none compiles for a call's sizes it runs its torch calls."""
    for name, v in list(constants.items()):
        region = getattr(v, "region", None)
        if isinstance(v, Kernel) and isinstance(region, tuple) and len(region) == 2:
            constants[name] = _tiered(v, region[0], region[1], name)
        elif isinstance(v, DynamicRegion):
            v.torch_region = torch_region  # (where the region at a call's sizes compiles no kernel)
            if v.any_size is None and mode() == "background" and not _random(v.text) and background.available():
                v.in_background = True
                v.wrap_per_size = lambda kernel, text, name=name: _tiered(kernel, "linalg", text, name)
    return constants


def _tiered(kernel, executor, text, name):
    """kernel (the executor's compiled region `name`) as the program should call it."""
    if executor != "linalg" or mode() != "background" or _random(text) or not background.available():
        return kernel
    return TieredRegion(kernel, text, name, getattr(_reporting, "target", None))


_RANDOM_NAMES = None


def _random(text):
    """Whether the region holds a random op (by name: a false positive only keeps it synchronous)."""
    global _RANDOM_NAMES
    if _RANDOM_NAMES is None:
        _RANDOM_NAMES = tuple(name for name, op in registry.OPS.items() if op.random)
    return any(name in text for name in _RANDOM_NAMES)


class TieredRegion:
    """A fused CPU region: its kernel where compiled, else torch calls while it compiles."""

    def __init__(self, kernel, text, name, target=None):
        self.kernel, self.text, self.name = kernel, text, name
        self.region = ("linalg", text)  # (what runtime/portable.py and runtime/symbolic.py read)
        self.fn, self.stats = target if target is not None else (None, None)
        self.ready = set()  # input strides whose kernel runs
        self.jobs = {}  # input strides -> its background job (pending, or failed)
        self._torch = None

    def __call__(self, *args):
        kernel = self.kernel
        outs = kernel.call_as_last(args)  # (armed only by a call that ran the kernel)
        if outs is not None:
            return outs
        strides = kernel.strides(args)
        if strides in self.ready:
            return kernel.call(args, strides)
        return self._not_ready(args, strides)

    def _not_ready(self, args, strides):
        job = self.jobs.get(strides)
        if job is None:
            job = background.submit(self.kernel, strides)
            if job is None:  # (its code is here now, or it compiles in this call)
                self.ready.add(strides)
                return self.kernel.call(args, strides)
            self.jobs[strides] = job
        if job.ready:
            self.ready.add(strides)
            log.info("%s: %s runs its kernel (compiled in the background in %.2f s)", self._who(), self.name,
                     job.seconds)
            return self.kernel.call(args, strides)
        if job.failed:
            self._report_failure(job)
        elif self.stats is not None:
            counts = self.stats.torch_while_compiling
            if self.name not in counts:
                log.info("%s: %s runs as torch calls while its kernel compiles in the background",
                         self._who(), self.name)
            counts[self.name] = counts.get(self.name, 0) + 1
        return self.run_torch(args)

    def _report_failure(self, job):
        if self.stats is not None and self.name not in self.stats.kernel_failures:
            self.stats.kernel_failures[self.name] = job.error
            log.info("%s: %s's kernel failed to compile (%s): it runs as torch calls", self._who(), self.name,
                     job.error)

    def _who(self):
        return getattr(self.fn, "__qualname__", None) or type(self.fn).__name__ if self.fn is not None else "thunder"

    def run_torch(self, args):
        """The region's ops as torch calls, results laid out as the kernel's (row-major, new
        tensors: no result is an input or a view of one, or of another result)."""
        if self._torch is None:
            self._torch = torch_region(self.text)
        with torch.no_grad():  # (a kernel's results have no autograd history either)
            outs = self._torch(*args)
            seen = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
            fresh = []
            for o in outs:
                ptr = o.untyped_storage().data_ptr()
                if ptr in seen or not o.is_contiguous():
                    o = o.clone(memory_format=torch.contiguous_format)
                    ptr = o.untyped_storage().data_ptr()
                seen.add(ptr)
                fresh.append(o)
        return tuple(fresh)


_TORCH_REGIONS = {}  # region text -> torch_region's callable (every layer's region: one codegen)


def torch_region(text):
    """A callable running the region func @fusion's ops as torch calls (codegen of the func)."""
    run = _TORCH_REGIONS.get(text)
    if run is not None:
        return run
    with LOCK:  # (parsing uses the dialects' shared context)
        _, module = parse_region(text)
        fn = compile_source(python_source(module, "fusion", comments=False), "fusion")

    def run(*args):
        out = fn(*args)
        return out if isinstance(out, tuple) else (out,)

    return _TORCH_REGIONS.setdefault(text, run)


def wait_for_kernels(timeout=None):
    """Wait until the kernels compiling in the background are compiled (or failed); whether
    they all are (False: timeout seconds passed first). The next call of each region runs its
    kernel."""
    return background.wait(timeout)
