"""float32 CPU matrix products through oneDNN where it is faster than torch's own.

torch runs a float32 CPU matmul with its BLAS (MKL in the official wheels). MKL picks its AVX-512
kernels on Intel CPUs only: on an AMD EPYC (Zen 5, AVX-512) it runs ~2.2x slower than oneDNN's
GEMM, which dispatches on the ISA (docs/benchmarks.md, "GPT-style block training": every GEMM of
the GPT block's training step, 1 and 2 threads). torch exposes oneDNN's fp32 GEMM as
`torch.ops.mkldnn._linear_pointwise` (inductor's op for packed linear layers; it also takes plain
strided tensors): the same IEEE float32 products, summed in another order (errors against float64
of the same size as MKL's).

That op has no derivative formula (autograd would silently give no gradient through it), so
generated programs call it only where no autograd history is recorded (codegen's `grad_free`:
the forward and backward of thunder-autograd, which run under torch.no_grad, and programs compiled
for grad mode off or where no tensor requires grad, inputs or results). Which library is faster
is measured once per process and thread count on this machine (`measured_faster`);
THUNDER_CPU_MATMUL=onednn|torch overrides it (`faster`). That decides matmul and mm, and the linears of programs that pack no
weights (a training step's forward); where weights may be packed, the kernel of a float32 linear
or GPT-2 Conv1D product (`addmm`) is chosen among F.linear, MKL's packed, this module's and
oneDNN's packed by one probe that times them all (ops/packed_linear.py `f32_kernel`), with the
same MARGIN for oneDNN.
"""
import contextlib
import functools
import math
import os
import time

import torch

from thunder.core import machine, size_choices

# below ~4M multiply-adds (a few tens of us) oneDNN's fixed cost per call (~15 us) eats the gain
MIN_MACS = 1 << 22
# oneDNN replaces torch's product only where it takes at most this fraction of torch's time: its
# sums come in another order than torch's (other bits), so only for a clear gain (measured: ~0.45
# on an AMD Zen 5, whose MKL skips AVX-512; ~0.75 on a Zen 4 at two threads, ~0.9 at one; ~1 on an
# Intel Xeon)
MARGIN = 0.9
# oneDNN copies a 2-D input that is not contiguous (a weight gradient's g^T, as torch's BLAS reads
# it transposed without a copy): a transposed copy from memory costs up to half the product's time
# (the LM head's weight gradient: 45 ms on a 94 ms product), so oneDNN takes those only where it is
# faster still
COPY_MARGIN = 0.6


def available():
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def linear(input, weight, bias=None):
    """F.linear(input, weight, bias) (weight 2-D, bias 1-D or None) by oneDNN. oneDNN reads the
    bias as contiguous whatever its strides (a strided bias gives wrong sums): made contiguous."""
    if bias is not None:
        bias = bias.contiguous()
    return torch.ops.mkldnn._linear_pointwise(input, weight, bias, "none", [], "")


def addmm(bias, input, weight):
    """torch.addmm(bias, input, weight) (bias 1-D, beta = alpha = 1: a GPT-2 Conv1D's product on
    its [in, out] weight) by oneDNN: `linear` of the view weight^T (oneDNN reads a weight of any
    strides without copying it)."""
    return linear(input, weight.t(), bias)


def matmul(input, other):
    """input @ other for input of 2 or more dims and a matrix other, by oneDNN. oneDNN takes its
    weight (other^T here) with any strides but copies an input that is not contiguous (a weight
    gradient's g^T): where copying other and the result moves fewer elements than copying
    input, it computes (other^T @ input^T)^T (measured: benchmarks/gpt_gemms.py); else torch's
    product reads the input as it is, unless oneDNN's is fast enough to pay for the copy
    (`copy_pays`)."""
    if input.dim() == 2 and not input.is_contiguous():
        m, n = input.shape[0], other.shape[1]
        if (0 if other.t().is_contiguous() else other.numel()) + m * n < input.numel():
            return torch.ops.mkldnn._linear_pointwise(other.t(), input, None, "none", [], "").t().contiguous()
        if not copy_pays():
            return torch.mm(input, other)
    return torch.ops.mkldnn._linear_pointwise(input, other.t(), None, "none", [], "")


def setting():
    """THUNDER_CPU_MATMUL: 'auto' (the default: measured), 'onednn' or 'torch'."""
    choice = os.environ.get("THUNDER_CPU_MATMUL", "auto")
    if choice not in ("auto", "onednn", "torch"):
        raise ValueError(f"thunder: THUNDER_CPU_MATMUL={choice!r}; expected 'auto', 'onednn' or 'torch'")
    return choice


def faster():
    """Whether oneDNN's float32 GEMM is to replace torch's: THUNDER_CPU_MATMUL, or where `auto`,
    `measured_faster`."""
    choice = setting()
    if choice != "auto" or not available():
        return choice == "onednn" and available()
    return measured_faster()


def measured_faster():
    """Whether oneDNN's float32 GEMM beats torch's on this machine at the thread count in use:
    oneDNN in at most MARGIN of torch's time (`measured_ratio`)."""
    return measured_ratio(torch.get_num_threads()) < MARGIN


def copy_pays():
    """Whether oneDNN's GEMM is fast enough here to pay for copying an input it cannot read as it
    is (`matmul`): under THUNDER_CPU_MATMUL=onednn always, else where it takes less than
    COPY_MARGIN of torch's time."""
    return setting() == "onednn" or measured_ratio(torch.get_num_threads()) < COPY_MARGIN


@functools.lru_cache(maxsize=None)
def measured_ratio(threads):
    """oneDNN's time over torch's for a float32 PROBE product at `threads` threads: the programs
    run with the process's threads, and the libraries scale differently (an AMD EPYC Zen 4: ~0.9
    at one thread, 0.72-0.87 at two, MKL's second thread gaining less). `best_times`; measured
    once per process and thread count, and kept on disk for the next processes on this CPU
    (core/machine.py measured_here, the best of PROBES_KEPT processes' probes: ~0.3 s each on two
    cores, most of a warm-started first step)."""
    def measure():
        g = torch.Generator().manual_seed(0)
        rows, k, n = PROBE
        a, b = torch.randn(rows, k, generator=g), torch.randn(n, k, generator=g)
        return best_times({"torch": lambda: torch.mm(a, b.t()), "onednn": lambda: linear(a, b)}, threads)

    best = machine.measured_here("onednn-f32", (PROBE, f"threads={threads}"), measure, _two_times,
                                 samples=PROBES_KEPT, merge=machine.best_of)
    return best["onednn"] / best["torch"]


# processes whose probes are merged (the best time of each library) before the next ones only read
# them: the first, alone, may run beside another process's load (two threads' GEMM timed while the
# other core compiled: 0.91 where an idle Zen 4 measures 0.72-0.87)
PROBES_KEPT = 3


def _two_times(best):
    return set(best) == {"torch", "onednn"} and all(type(t) is float and math.isfinite(t) and t > 0
                                                   for t in best.values())


# the product the library probes time (rows, K, N): a prefill's or a training step's MLP product
# (batch 2 x 256 rows, width 512, 4x wider); the gain grows with the weight (MKL slows where it
# leaves the caches: 0.63 on a 50257-wide LM head on a Zen 4), so a smaller probe undersells it
PROBE = (512, 512, 2048)
# a context in which no kernel compiles in the background (lowering/linalg/background.py installs
# its `quiet`): a compile on the other core would decide a two-thread GEMM's time
quiet = contextlib.nullcontext


def best_times(runs, threads, rounds=7):
    """{name: its best wall-clock time} of the callables in runs, called in turn `rounds` times
    (after three calls each: the libraries set up their kernels and threads) with `threads` torch
    threads, grad mode off and no kernel compiling in the background (`quiet`). Interleaved and
    the best of each: a busy core slows some calls, not the best."""
    best = dict.fromkeys(runs, float("inf"))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad(), quiet():
            for _ in range(3):  # (the first calls of a library in a process run slower)
                for f in runs.values():
                    f()
            for _ in range(rounds):
                for name, f in runs.items():
                    t = time.perf_counter()
                    f()
                    best[name] = min(best[name], time.perf_counter() - t)
    finally:
        torch.set_num_threads(before)
    return best


def used_in(source):
    """Whether a generated program calls oneDNN (it must then record no autograd history): here
    or from packed weights (ops/packed_linear.py)."""
    return "impl.onednn_" in source or "impl.packed_" in source or "impl.by_size_" in source


def _float32_cpu(*names, dynamic=False):
    """Whether these tensors (Names) are float32 CPU tensors of static shapes (dynamic: or of
    `?` dims, in a program for all sizes that chooses at every call)."""
    return all(n.device is not None and n.device.type == "cpu" and n.dtype == torch.float32
               and (dynamic or all(s >= 0 for s in n.shape)) for n in names if n is not None)


def matmul_source(a_param, b_param):
    """Statements for ltorch.matmul / ltorch.mm (a @ b, b a matrix) in a grad-free program, or None.
    In the compiles of a program for all sizes, a call that chooses by its sizes at every call
    (ops/gemm_by_size.py)."""
    def source(values, outs):
        a, b = values[a_param], values[b_param]
        if not (hasattr(a, "shape") and hasattr(b, "shape")) or len(a.shape) < 2 or len(b.shape) != 2:
            return None
        if not (_float32_cpu(a, b, dynamic=size_choices.fitting()) and faster()):
            return None
        if size_choices.fitting():
            return [f"{outs[0]} = impl.by_size_matmul({a.name}, {b.name})"]
        if not size_choices.choose("onednn: product large enough", math.prod(a.shape) * b.shape[1] >= MIN_MACS):
            return None
        return [f"{outs[0]} = impl.onednn_matmul({a.name}, {b.name})"]
    return source
