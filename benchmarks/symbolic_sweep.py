"""A sweep over 20 sequence lengths of the GPT block (benchmarks/gpt_block.py), eval forward under
no_grad and a training step (forward + backward), under cache="constant values" (the default:
automatic dynamic, a size that changes becomes a symbol; and with automatic_dynamic=False, one
program per size) and cache="symbolic values" (symbols from the first call), against eager and
torch.compile (its default: a recompile with dynamic
shapes after the first size change) in one run. Per option: the time of the first call at each
length summed over the sweep (compiles included), the number of compiles, and the cached call
at each length relative to eager's (geometric mean over the lengths).

    .venv/bin/python benchmarks/symbolic_sweep.py [--threads 2] [--no-compile]
"""
import argparse
import math
import time

import torch

import thunder
from gpt_block import gpt_block, make_inputs
from timing import best_seconds

LENGTHS = list(range(16, 96, 4))  # 20 sequence lengths


def run(fn, args, train):
    if train:
        out = fn(*args)
        out.sum().backward()
        return out
    with torch.no_grad():
        return fn(*args)


def sweep(name, make_fn, train, eager_times):
    fn = make_fn()
    first, ratios = 0.0, []
    for T, eager in zip(LENGTHS, eager_times):
        args = make_inputs(4, T, 128) + [4]
        if not train:
            args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
        t = time.perf_counter()
        out = run(fn, args, train)
        first += time.perf_counter() - t
        ref = run(gpt_block, args, False)
        torch.testing.assert_close(out.detach(), ref.detach(), atol=1e-4, rtol=1e-4)
        ratios.append(eager / best_seconds(lambda: run(fn, args, train), number=5, repeat=3, warmup=1))
    compiles = thunder.compile_stats(fn).cache_misses if isinstance(fn, thunder.ThunderFunction) else None
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return name, first, compiles, geo


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    for train in (False, True):
        eager_times = []
        for T in LENGTHS:
            args = make_inputs(4, T, 128) + [4]
            if not train:
                args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
            eager_times.append(best_seconds(lambda: run(gpt_block, args, train), number=5, repeat=3, warmup=1))
        rows = [sweep("thunder default", lambda: thunder.jit(gpt_block), train, eager_times),
                sweep("thunder no auto dynamic", lambda: thunder.jit(gpt_block, automatic_dynamic=False), train,
                      eager_times),
                sweep("thunder symbolic values", lambda: thunder.jit(gpt_block, cache="symbolic values"), train,
                      eager_times)]
        if not opts.no_compile:
            rows.append(sweep("torch.compile", lambda: torch.compile(gpt_block), train, eager_times))
        print(f"\nGPT block B4 C128 4 heads, {'training step' if train else 'eval forward (no_grad)'}, "
              f"T = {LENGTHS[0]}..{LENGTHS[-1]} ({len(LENGTHS)} lengths), eager mean "
              f"{1e3 * sum(eager_times) / len(eager_times):.2f} ms")
        print(f"{'':26s} {'first calls, total':>19s} {'compiles':>9s} {'cached vs eager':>16s}")
        for name, first, compiles, geo in rows:
            print(f"{name:26s} {first:18.2f}s {compiles if compiles is not None else '-':>9} {geo:15.2f}x")


if __name__ == "__main__":
    main()
