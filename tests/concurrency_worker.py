"""A process of tests/test_concurrency.py's kernel-cache tests: compiles FUNCTIONS (fused CPU
kernels) with the disk cache at $THUNDER_KERNEL_CACHE, checks each against eager and prints one
JSON line: {"ok": true, "stats": disk_cache.stats}.

    python concurrency_worker.py BARRIER_DIR N [--fail-define K]

BARRIER_DIR, N: the process waits until N processes have imported thunder (a file each in
BARRIER_DIR), so that they compile at the same time. --fail-define K: the K-th op definition of
the first dialect load raises first (a compile that fails part way through the process's first
definition of the dialects), then compiles as usual: the failure must leave nothing behind."""
import json
import os
import sys
import time

import torch

import thunder
from thunder.dialects import definitions
from thunder.lowering.linalg import disk_cache


def f1(x, y):
    return torch.tanh(x * y + 1.0) - x.exp() * 0.5


def f2(x, y):
    return (x - y).abs().sqrt() * torch.sigmoid(y) + 0.5


FUNCTIONS = (f1, f2)


def barrier(directory, n, timeout=120):
    open(os.path.join(directory, f"ready-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + timeout
    while sum(name.startswith("ready-") for name in os.listdir(directory)) < n:
        if time.monotonic() > deadline:
            raise TimeoutError("the other processes did not start")
        time.sleep(0.01)


def fail_define_once(k):
    define, count = definitions._define, [0]

    def failing(op):
        count[0] += 1
        if count[0] == k:
            raise RuntimeError("injected failure while defining the dialects")
        return define(op)

    definitions._define = failing
    try:
        thunder.jit(f1)(torch.ones(2, 3), torch.ones(2, 3))
    except RuntimeError as e:
        assert "injected failure" in str(e), e
    else:
        raise AssertionError("the injected failure did not happen")
    finally:
        definitions._define = define


def main():
    directory, n = sys.argv[1], int(sys.argv[2])
    if "--fail-define" in sys.argv:
        fail_define_once(int(sys.argv[sys.argv.index("--fail-define") + 1]))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 40, generator=g), torch.randn(16, 40, generator=g)
    barrier(directory, n)
    for fn in FUNCTIONS:
        jf = thunder.jit(fn)
        torch.testing.assert_close(jf(x, y), fn(x, y))
        torch.testing.assert_close(jf(y, x), fn(y, x))  # (the cached program)
    print(json.dumps({"ok": True, "stats": disk_cache.stats}))


if __name__ == "__main__":
    main()
