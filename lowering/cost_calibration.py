"""The linalg executor's cost model measured on the CPU at hand (issue 27: choices made by
measurement on the machine, never by vendor).

thunder-fuse's policy "auto" (fuse.worth_fusing) weighs a torch op's fixed cost, a kernel call's
fixed cost, the bytes per second memory-bound ops move and torch's math per element. The first
use in a process runs a short probe (~0.1-0.3 s) of those quantities with torch's thread count at
that time, and stores the result next to the kernel cache (core/machine.py measured_here), keyed by
the CPU (model name, family, model, ISA flags), the thread count and torch's version: the next
process on that CPU reads the file instead of probing. The process then keeps that cost model
for good, so its fusion decisions do not change between compiles.

- op_seconds: the best time of torch.add/mul/exp/sum(dim) on 64-element tensors, their median;
- call_seconds: the best time of a call of a compiled region (x * y + x on 64 elements), as the
  program calls it;
- bytes_per_second: x + y, x * 2 and x.sum(-1) into preallocated results on 4 MiB float32
  tensors (out=: no page faults), bytes read and written per second, their median;
- torch's math per element of the prims (exp, tanh, log, log1p, expm1, erf: torch.exp(x) minus
  x * 2 on 64 Ki elements) and of its tanh GELU kernel, its backward and its softmax. Our kernels' math per
  element (the `in_kernel` column) stays the fixed one: measuring it compiles a kernel per prim.

Each measured constant is kept within a factor MAX_FACTOR of the fixed one (a probe disturbed by
another process does not make the model absurd). benchmarks/cost_model.py measures the same
quantities at the fixed constants' sizes, more slowly.

THUNDER_COST_MODEL: "fixed" pins the constants in lowering/executors.py (the test suite sets it,
for decisions that do not depend on the machine's load); unset or "calibrated": measured as
above. The file: `cost-model-<key>.json` in the kernel cache's folder; a corrupt, truncated or
foreign file is ignored, measured again and replaced; writes go to a temporary file renamed into
place (os.replace), so concurrent processes are safe (each writes a whole file). Without a disk
cache (THUNDER_KERNEL_CACHE=off) each process probes once.
"""
import logging
import math
import os
import statistics
import threading
import timeit

import torch

from thunder.core import machine
from thunder.lowering.linalg import compile_region

FORMAT = "thunder-mlir-cost-model-1"
ENV = "THUNDER_COST_MODEL"
MAX_FACTOR = 8.0
_MODES = ("fixed", "calibrated")

# a region of two prims on 64 elements: a kernel call's fixed cost
_CALL_REGION = """module {
  func.func @cost_probe(%arg0: tensor<8x8xf32>, %arg1: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %0 = "thunder.mul"(%arg0, %arg1) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = "thunder.add"(%0, %arg0) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
}
"""
_MATH = {"thunder.exp": torch.exp, "thunder.tanh": torch.tanh, "thunder.log": torch.log,
         "thunder.log1p": torch.log1p, "thunder.expm1": torch.expm1, "thunder.erf": torch.erf}

# counters for tests: probes run, files read, files rejected
stats = {"probed": 0, "read": 0, "rejected": 0}
log = logging.getLogger(__name__)
_LOCK = threading.Lock()
_CHOSEN = {}  # fixed CostModel -> the cost model this process uses


def mode():
    value = os.environ.get(ENV, "calibrated").strip().lower() or "calibrated"
    if value not in _MODES:
        raise ValueError(f"thunder: {ENV}={value!r}; expected one of {', '.join(map(repr, _MODES))} "
                         "(fixed: the built-in cost model; calibrated: measured on this CPU)")
    return value


def cost_model(fixed):
    """The cost model this process uses for an executor whose built-in constants are `fixed`
    (a CostModel): chosen at the first call, then the same for the process's life."""
    chosen = _CHOSEN.get(fixed)
    if chosen is None:
        with _LOCK:
            chosen = _CHOSEN.get(fixed)
            if chosen is None:
                chosen = _CHOSEN[fixed] = fixed if mode() == "fixed" else _calibrated_or_fixed(fixed)
    return chosen


def _calibrated_or_fixed(fixed):
    try:
        return calibrated(fixed)
    except Exception as e:  # noqa: BLE001 - a probe that fails (its kernel does not compile here): fixed
        log.warning("thunder: measuring the cost model failed (%s: %s); using the fixed constants",
                    type(e).__name__, e)
        return fixed


def calibrated(fixed, directory=None, quick=False):
    """fixed with the constants of this CPU: read from its file in `directory` (default: the
    kernel cache's), or measured (and stored there): core/machine.py measured_here."""
    measured = machine.measured_here("cost-model", key_parts(), lambda: measure(quick=quick), _valid,
                                     directory=directory, counts=stats)
    return apply(fixed, measured)


def apply(fixed, measured):
    """fixed (a CostModel) with the measured constants, each within MAX_FACTOR of its fixed value."""
    def near(value, default):
        return min(max(value, default / MAX_FACTOR), default * MAX_FACTOR)

    torch_math = measured["element_seconds"]
    op_math = measured["op_element_seconds"]
    return type(fixed)(
        near(measured["op_seconds"], fixed.op_seconds), near(measured["call_seconds"], fixed.call_seconds),
        near(measured["bytes_per_second"], fixed.bytes_per_second),
        tuple((prim, near(torch_math[prim], on_torch) if prim in torch_math else on_torch, in_kernel)
              for prim, on_torch, in_kernel in fixed.element_seconds),
        tuple((name, attrs, near(op_math[name], on_torch) if name in op_math else on_torch)
              for name, attrs, on_torch in fixed.op_element_seconds))


# ------------------------------------------------------------------------------------------------
# the key and the file
def key_parts():
    """What the constants depend on besides the CPU and torch (core/machine.py key)."""
    return FORMAT, f"threads={torch.get_num_threads()}"


def key():
    """The hex digest naming this CPU's, thread count's and torch version's file."""
    return machine.key("cost-model", key_parts())


def _valid(measured):
    try:
        scalars = [measured[k] for k in ("op_seconds", "call_seconds", "bytes_per_second")]
        scalars += list(measured["element_seconds"].values()) + list(measured["op_element_seconds"].values())
    except (KeyError, TypeError, AttributeError):
        return False
    return all(type(v) is float and math.isfinite(v) and v >= 0 for v in scalars) and min(scalars[:3]) > 0


# ------------------------------------------------------------------------------------------------
# the probe
def _best(fn, number, repeat):
    """The best of many short timings: on a machine shared with other processes, a short window
    is likely to run without being descheduled."""
    fn()  # (warm-up: first-call allocations, lazy initialization)
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def measure(quick=False):
    """The constants on this CPU (see the module's doc), with one torch thread as the fixed ones
    were measured (a machine shared with other processes makes a multi-threaded timing of a
    small op wait for a descheduled thread), and the bytes per second also with torch's thread
    count now: the faster of the two. quick: fewer and smaller timings (tests)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        measured = _measure(quick)
    finally:
        torch.set_num_threads(threads)
    if threads > 1:
        measured["bytes_per_second"] = max(measured["bytes_per_second"], _bandwidth(quick))
    return measured


def _bandwidth(quick):
    rows = 128 if quick else 1024  # (4 MiB: beyond the L2 of the CPUs in use)
    x, y, out, row_out = torch.ones(rows, 1024), torch.ones(rows, 1024), torch.empty(rows, 1024), torch.empty(rows)
    nbytes = x.numel() * 4
    big = [(lambda: torch.add(x, y, out=out), 3 * nbytes), (lambda: torch.mul(x, 2, out=out), 2 * nbytes),
           (lambda: torch.sum(x, -1, out=row_out), nbytes)]
    return statistics.median(moved / _best(f, 1, 3 if quick else 5) for f, moved in big)


def _measure(quick):
    small_timing, big_timing = (20, 5 if quick else 15), (1, 3 if quick else 5)  # (calls, repeats)
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    small = [lambda: torch.add(x, y), lambda: torch.mul(x, y), lambda: torch.exp(x), lambda: torch.sum(x, -1)]
    op = statistics.median(_best(f, *small_timing) for f in small)
    kernel = compile_region(_CALL_REGION, "cost_probe")
    call = _best(lambda: kernel(x, y), *small_timing)
    side = 128 if quick else 256
    xs = torch.rand(side, side) + 0.5  # (log's domain)
    gs, res = torch.randn(side, side), torch.empty(side, side)
    ref = _best(lambda: torch.mul(xs, 2, out=res), *big_timing)
    elements = {prim: max(0.0, _best(lambda: fn(xs, out=res), *big_timing) - ref) / xs.numel() for prim, fn in _MATH.items()}
    gelu = max(0.0, _best(lambda: torch.nn.functional.gelu(xs, approximate="tanh"), *big_timing) - ref) / xs.numel()
    softmax = max(0.0, _best(lambda: torch.softmax(xs, -1, out=res), *big_timing) - ref) / xs.numel()
    ref_binary = _best(lambda: torch.add(gs, xs, out=res), *big_timing)
    backward = max(0.0, _best(lambda: torch.ops.aten.gelu_backward(gs, xs, approximate="tanh"), *big_timing)
                   - ref_binary) / xs.numel()
    return {"op_seconds": op, "call_seconds": call, "bytes_per_second": _bandwidth(quick), "element_seconds": elements,
            "op_element_seconds": {"ltorch.gelu": gelu, "ltorch.gelu_backward": backward, "ltorch.softmax": softmax}}
