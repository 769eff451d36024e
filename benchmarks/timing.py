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
