"""thunder.jit (fusion on, its default on CPU) against eager PyTorch and torch.compile (inductor,
default mode), float32 on CPU, in one process: elementwise/reduction cases and a GPT-style block
(benchmarks/gpt_block.py) forward and training step. Checks thunder's results (and grads) against
eager before timing; prints a markdown table and the geometric means of the speedups.

    .venv/bin/python benchmarks/fusion.py [CASE ...] [--threads 2] [--quick] [--warm-disk-cache] [--reuse-memory]
                                          [--device cuda]

--device cuda: the same cases on the GPU, thunder with the cuda executor (docs/cuda.md), each
timed call synchronized.

CASE: keep the cases whose name contains one of these strings (e.g. `gpt`). thunder's kernel disk
cache (THUNDER_KERNEL_CACHE) and inductor's (TORCHINDUCTOR_CACHE_DIR) point at a fresh temporary
directory, so both first-call times include compiling; --warm-disk-cache keeps the usual caches
(which may hold kernels of earlier runs).

--reuse-memory: glibc malloc keeps freed blocks (mallopt: no mmap threshold, no trimming), so no
call pays page faults for its outputs and temporaries. By default a large tensor freed by one call
may go back to the system and the next call faults its pages in again, which on this VM costs
eager (more temporaries) up to 4x on some runs and not on others; with it the times are those of
the kernels.
"""
import argparse
import atexit
import math
import os
import shutil
import sys
import tempfile
import time

if "--reuse-memory" in sys.argv:  # before the first large allocation
    import ctypes

    _libc = ctypes.CDLL("libc.so.6")
    _libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: keep the heap's free memory
    _libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: large blocks from the heap, reused

FRESH_CACHE = None if "--warm-disk-cache" in sys.argv else tempfile.mkdtemp(prefix="fusion-bench-cache-")
if FRESH_CACHE:  # before torch and thunder are imported; removed at exit
    atexit.register(shutil.rmtree, FRESH_CACHE, True)
    os.environ["THUNDER_KERNEL_CACHE"] = os.path.join(FRESH_CACHE, "thunder")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(FRESH_CACHE, "inductor")

import torch
import torch.nn.functional as F

import thunder
from thunder.lowering.linalg import COMPILE_LOG
from gpt_block import gpt_block, make_inputs
from timing import interleaved_best_seconds

GEN = torch.Generator().manual_seed(0)
DEVICE = "cpu"
EXECUTORS = {"cpu": None, "cuda": ["cuda", "linalg", "torch"]}


def randn(*shape):
    return torch.randn(*shape, generator=GEN).to(DEVICE)


def bias_gelu_residual(x, b, r):
    return F.gelu(x + b, approximate="tanh") + r


def residual_layer_norm(x, r, w, b):
    return F.layer_norm(x + r, (512,), w, b)


def scale_mask_softmax(x, mask):
    return torch.softmax(x * 0.125 + mask, -1)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def swiglu(x, w1, w3):
    return F.silu(x @ w1) * (x @ w3)


def rotary(x, cos, sin):
    d = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., d:], x[..., :d]), dim=-1) * sin


def cross_entropy(logits, target):
    return F.cross_entropy(logits, target)


def causal_mask(n):
    return torch.full((n, n), float("-inf")).triu(1).to(DEVICE)


def gpt_args():
    args = [a.detach().to(DEVICE).requires_grad_() for a in make_inputs(8, 128, 256)]
    return args + [4]  # batch, seq, width; heads


# name -> (fn, its inputs, training step?)
CASES = {
    "bias+gelu(tanh)+residual 2048x1024":
        (bias_gelu_residual, lambda: [randn(2048, 1024), randn(1024), randn(2048, 1024)], False),
    "residual+layer_norm 4096x512":
        (residual_layer_norm, lambda: [randn(4096, 512), randn(4096, 512), randn(512), randn(512)], False),
    "scale+mask+softmax 64x128x128": (scale_mask_softmax, lambda: [randn(64, 128, 128), causal_mask(128)], False),
    "rmsnorm 4096x512": (rms_norm, lambda: [randn(4096, 512), randn(512)], False),
    "rotary embedding 4x16x512x64": (rotary, lambda: [randn(4, 16, 512, 64), randn(512, 64), randn(512, 64)], False),
    "cross-entropy 2048x4096":
        (cross_entropy, lambda: [randn(2048, 4096), torch.randint(0, 4096, (2048,), generator=GEN).to(DEVICE)], False),
    "swiglu 1024x512 -> 1376":
        (swiglu, lambda: [randn(1024, 512), randn(512, 1376) * 0.05, randn(512, 1376) * 0.05], False),
    "gpt block forward (no_grad)": (gpt_block, gpt_args, False),
    "gpt block training step": (gpt_block, gpt_args, True),
}


def runner(fn, args, training):
    """A no-argument call of fn: the forward under no_grad, or forward + backward of out.sum()
    (grads reset to None). Returns the output and the grads."""
    tensors = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]

    def run():
        if not training:
            with torch.no_grad():
                out, grads = fn(*args), []
        else:
            out = fn(*args)
            out.sum().backward()
            grads = [t.grad for t in tensors]
            for t in tensors:
                t.grad = None
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        return out, grads
    return run


def first_call(run):
    t0 = time.perf_counter()
    result = run()
    return result, time.perf_counter() - t0


def check(name, got, expected, training):
    """thunder's output (and grads) against eager's, with torch's float32 tolerances (grads, sums
    over the batch in another order: 1e-4); aborts the benchmark on a mismatch."""
    try:
        torch.testing.assert_close(got, expected, **(dict(rtol=1e-4, atol=1e-4) if training else {}))
    except AssertionError as e:
        sys.exit(f"\nABORT: thunder's result differs from eager's on {name!r}:\n{e}")


def bench(name, quick):
    """One row of the table: times in seconds, first calls, kernels compiled."""
    fn, make, training = CASES[name]
    args = make()
    eager = runner(fn, args, training)
    log_start = len(COMPILE_LOG)
    jfn = thunder.jit(fn, executors=EXECUTORS[DEVICE])
    thunder_run = runner(jfn, args, training)
    result, thunder_first = first_call(thunder_run)
    check(name, result, eager(), training)
    kernels = COMPILE_LOG[log_start:]
    torch._dynamo.reset()  # torch.compile's first call compiles from scratch in every case
    compiled_run = runner(torch.compile(fn), args, training)
    _, compile_first = first_call(compiled_run)
    reps = dict(number=2, rounds=1, warmup=1) if quick else {}
    times = interleaved_best_seconds([eager, compiled_run, thunder_run], **reps)
    return dict(times=times, thunder_first=thunder_first, kernels=kernels, compile_first=compile_first,
                trace_compile=thunder.compile_stats(jfn).last_compile_time)


def row(name, r):
    t_eager, t_compile, t_thunder = r["times"]
    n_disk = sum(how == "disk" for _, _, how in r["kernels"])
    kernels = f"{len(r['kernels'])}, {sum(s for _, s, _ in r['kernels']):.2f} s"
    kernels += f" ({n_disk} from disk)" if n_disk else ""
    cells = [name, f"{t_eager * 1e3:.3f}", f"{t_compile * 1e3:.3f}", f"{t_thunder * 1e3:.3f}",
             f"{t_eager / t_thunder:.2f}x", f"{t_compile / t_thunder:.2f}x",
             f"{r['thunder_first']:.2f} (trace {r['trace_compile']:.2f})", kernels, f"{r['compile_first']:.2f}"]
    return "| " + " | ".join(cells) + " |"


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", help="substrings of case names to run (default: all)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2: this machine's cores)")
    ap.add_argument("--quick", action="store_true", help="1 warm-up + 2 timed calls: only checks the script runs")
    ap.add_argument("--warm-disk-cache", action="store_true", help="keep thunder's and inductor's disk caches")
    ap.add_argument("--reuse-memory", action="store_true", help="glibc malloc keeps freed memory (no page faults)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    names = [n for n in CASES if not a.cases or any(c in n for c in a.cases)]
    if not names:
        sys.exit(f"no case matches {a.cases}; cases: {', '.join(CASES)}")
    torch.set_num_threads(a.threads)
    caches = f"fresh, empty ({FRESH_CACHE})" if FRESH_CACHE else "as they are (may be warm)"
    where = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU"
    print(f"float32, {where}, torch {torch.__version__}, torch.set_num_threads({a.threads}); thunder and inductor "
          f"disk caches: {caches}" + ("; malloc keeps freed memory" if a.reuse_memory else "") +
          (" -- QUICK: timings meaningless" if a.quick else ""))
    results = {}
    for name in names:
        print(f"  {name} ...", file=sys.stderr, flush=True)
        results[name] = bench(name, a.quick)
    print()
    print("| case | eager ms | torch.compile ms | thunder ms | thunder x eager | thunder vs inductor "
          "| thunder first call s | kernels compiled (n, s) | torch.compile first call s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, r in results.items():
        print(row(name, r))
    vs_eager = geomean([r["times"][0] / r["times"][2] for r in results.values()])
    vs_inductor = geomean([r["times"][1] / r["times"][2] for r in results.values()])
    print(f"\ngeometric mean over {len(results)} case(s): thunder {vs_eager:.2f}x eager, {vs_inductor:.2f}x inductor "
          "(speedup = other's time / thunder's; > 1: thunder faster)")
    fusion = [r for name, r in results.items() if not name.startswith("gpt block")]
    if fusion and len(fusion) < len(results):
        print(f"geometric mean over the {len(fusion)} fusion case(s) (the GPT block left out): thunder "
              f"{geomean([r['times'][0] / r['times'][2] for r in fusion]):.2f}x eager, "
              f"{geomean([r['times'][1] / r['times'][2] for r in fusion]):.2f}x inductor")
    print("thunder first call: the whole first call (trace compile in parentheses, then kernel compiles); kernels "
          "compiled: COMPILE_LOG entries during it (kernels already compiled by an earlier case in this process are "
          "reused, not counted)")


if __name__ == "__main__":
    main()
