"""The timing every benchmark uses: best of `repeat` runs of `number` calls, after warm-up calls
(compilation, caches), garbage collection off while timing (timeit)."""
import timeit


def best_seconds(fn, *args, number=20, repeat=5, warmup=3):
    """Seconds per call of fn(*args)."""
    for _ in range(warmup):
        fn(*args)
    call = (lambda: fn(*args)) if args else fn  # no extra layer for a closure (overhead benchmarks)
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number
