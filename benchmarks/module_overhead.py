"""Per-call overhead of a cached ThunderModule as the parameter count grows: nn.Sequential of
1, 10 and 50 Linear(64, 64) on an (8, 64) input, against eager and torch.compile in one run.

    python benchmarks/module_overhead.py [--no-compile]
"""
import argparse

import torch

import thunder
from timing import best_seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--grad", action="store_true", help="parameters require grad (training mode call)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"{'layers':>6s}{'eager us':>10s}{'thunder us':>12s}{'overhead':>10s}"
          + ("" if a.no_compile else f"{'compile us':>12s}"))
    for n in (1, 10, 50):
        torch.manual_seed(0)
        m = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(n)])
        if not a.grad:
            m.requires_grad_(False)
        x = torch.randn(8, 64)
        tm = thunder.jit(m)
        torch.testing.assert_close(tm(x), m(x))
        number = max(200, 20000 // n)
        eager = best_seconds(lambda: m(x), number=number, repeat=5, warmup=2) * 1e6
        th = best_seconds(lambda: tm(x), number=number, repeat=5, warmup=2) * 1e6
        row = f"{n:6d}{eager:10.1f}{th:12.1f}{th - eager:10.1f}"
        if not a.no_compile:
            cm = torch.compile(m)
            row += f"{best_seconds(lambda: cm(x), number=number, repeat=5, warmup=2) * 1e6:12.1f}"
        print(row)


if __name__ == "__main__":
    main()
