"""A concurrency soak: threads calling jitted functions with random shapes (first calls and
cached calls mixed), some calls raising user exceptions while tracing; every result is compared
with eager, and afterwards a new function must still compile.

    .venv/bin/python tests/soak_concurrency.py [--seconds 20] [--threads 8] [--functions 10]

tests/test_concurrency.py runs a short one."""
import argparse
import random
import threading
import time

import torch

import thunder


class Boom(Exception):
    pass


def f_elementwise(x, fail):
    return (x * 1.5 - 0.25).tanh() + x.exp() * 0.1


def f_softmax(x, fail):
    return torch.softmax(x, -1) * 3


def f_norm(x, fail):
    return torch.nn.functional.layer_norm(x, x.shape[-1:]) + 1


def f_matmul(x, fail):
    return torch.relu(x @ x.transpose(0, 1)) - x.sum()


def f_reduce(x, fail):
    return x.abs().amax(-1) + x.mean(0).sum()


def f_shape(x, fail):
    return torch.cat([x, x.flip(0)], 0).reshape(-1)[: x.numel()] * 2


def f_raises(x, fail):
    y = x.sin()
    if fail:  # (a Python value: raised while tracing, every time)
        raise Boom("user exception while tracing")
    return y * 2


def f_raises_on_shape(x, fail):
    if x.shape[0] == 3:
        raise ValueError("three rows are not allowed")
    return x.cos() + 1


def f_where(x, fail):
    return torch.where(x > 0, x.sqrt(), -x) + torch.clamp(x, -0.5, 0.5)


def f_gelu(x, fail):
    return torch.nn.functional.gelu(x) * torch.sigmoid(x)


FUNCTIONS = [f_elementwise, f_softmax, f_norm, f_matmul, f_reduce, f_shape, f_raises, f_raises_on_shape,
             f_where, f_gelu]
ROWS, COLS = (1, 2, 3, 4), (3, 5, 8)


def soak(seconds=20.0, threads=8, functions=10, seed=0):
    """Runs the soak; returns its report (a dict)."""
    fns = FUNCTIONS[:functions] if functions >= 7 else [f_raises] + FUNCTIONS[:functions - 1]
    jitted = [thunder.jit(f, recompile_limit=None) for f in fns]
    deadline = time.monotonic() + seconds
    lock = threading.Lock()
    report = {"calls": 0, "raised": 0, "mismatches": 0, "unexpected": []}

    def work(i):
        rng = random.Random(seed * 1000 + i)
        calls = raised = mismatches = 0
        unexpected = []
        while time.monotonic() < deadline:
            k = rng.randrange(len(fns))
            fn, jf = fns[k], jitted[k]
            x = torch.randn(rng.choice(ROWS), rng.choice(COLS))
            fail = fn is f_raises and rng.random() < 0.5
            try:
                expected = fn(x, fail)
            except Exception as e:  # noqa: BLE001 - eager raises: thunder must raise the same
                expected = e
            try:
                got = jf(x, fail)
            except Exception as e:  # noqa: BLE001
                got = e
            calls += 1
            if isinstance(expected, Exception):
                raised += 1
                if type(got) is not type(expected) or str(got) != str(expected):
                    unexpected.append(f"{fn.__name__}: eager raised {expected!r}, thunder gave {got!r}")
            elif isinstance(got, Exception):
                unexpected.append(f"{fn.__name__}: thunder raised {got!r}")
            else:
                try:
                    torch.testing.assert_close(got, expected)
                except AssertionError:
                    mismatches += 1
        with lock:
            report["calls"] += calls
            report["raised"] += raised
            report["mismatches"] += mismatches
            report["unexpected"] += unexpected[:5]

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    report["compiles"] = sum(thunder.compile_stats(jf).cache_misses for jf in jitted)
    report["cache_hits"] = sum(thunder.compile_stats(jf).cache_hits for jf in jitted)
    late = thunder.jit(lambda x: (x + 2).log())  # the process still compiles
    x = torch.rand(3, 4)
    report["compiles_after"] = bool(torch.allclose(late(x), (x + 2).log()))
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--functions", type=int, default=10)
    args = ap.parse_args()
    t = time.perf_counter()
    report = soak(args.seconds, args.threads, args.functions)
    print(f"soak: {args.threads} threads x {args.functions} functions for {args.seconds:g} s "
          f"({time.perf_counter() - t:.1f} s with the final compile)")
    for k, v in report.items():
        print(f"  {k}: {v}")
    ok = report["mismatches"] == 0 and not report["unexpected"] and report["compiles_after"]
    print("OK" if ok else "FAILED")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
