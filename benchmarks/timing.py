"""The timing every benchmark uses: best of `repeat` runs of `number` calls, after warm-up calls
(compilation, caches; the kernels thunder compiles in the background ready), garbage collection
off while timing (timeit)."""
import sys
import timeit


def wait_for_kernels():
    """Where thunder is in use, wait for the kernels it compiles in the background (the calls
    before them ran their regions as torch calls: docs/fusion.md); whether it did."""
    thunder = sys.modules.get("thunder")
    return thunder is not None and thunder.wait_for_kernels()


def best_seconds(fn, *args, number=20, repeat=5, warmup=3):
    """Seconds per call of fn(*args)."""
    for _ in range(warmup):
        fn(*args)
    if wait_for_kernels():
        fn(*args)  # (the kernels' first calls)
    call = (lambda: fn(*args)) if args else fn  # no extra layer for a closure (overhead benchmarks)
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number


def interleaved_best_seconds(fns, number=20, rounds=7, warmup=3):
    """Seconds per call of each of fns (no-argument callables), timed in turns: each round times
    `number` calls of every fn, the order rotated between rounds, and each fn's best round is
    kept. On a shared host whose speed drifts over seconds (another tenant's load, the memory
    bandwidth it takes), timing one fn's rounds after the other's gives whichever ran in the
    quiet stretch the better time; in turns, each gets the same stretches."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    if wait_for_kernels():
        for fn in fns:
            fn()
    best = [float("inf")] * len(fns)
    for r in range(rounds):
        for k in range(len(fns)):
            i = (k + r) % len(fns)
            best[i] = min(best[i], timeit.timeit(fns[i], number=number))
    return [b / number for b in best]
