"""Per-call overhead of a cached thunder.jit function against eager PyTorch and torch.compile,
measured in one run: `python benchmarks/overhead.py` (add --no-compile to skip torch.compile).

The workload is `lambda a, b: a + b` on 2x2 CPU tensors: the kernel takes about a microsecond,
so the difference to eager is the cost of thunder's cache lookup (the generated prologue)."""
import argparse
import platform

import torch

import thunder
from timing import best_seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    a, b = torch.randn(2, 2), torch.randn(2, 2)

    def fn(a, b):
        return a + b

    jfn = thunder.jit(fn)
    rows = [("eager", best_seconds(lambda: fn(a, b), number=args.number, repeat=7, warmup=1) * 1e6),
            ("thunder.jit", best_seconds(lambda: jfn(a, b), number=args.number, repeat=7, warmup=1) * 1e6)]
    if not args.no_compile:
        try:
            cfn = torch.compile(fn)
            rows.append(("torch.compile", best_seconds(lambda: cfn(a, b), number=args.number, repeat=7, warmup=1) * 1e6))
        except Exception as e:  # inductor needs a C++ compiler; report instead of failing
            print(f"torch.compile unavailable: {e}")
    eager = rows[0][1]
    print(f"cached call of a + b on 2x2 tensors ({platform.processor() or platform.machine()}, "
          f"torch {torch.__version__})")
    print(f"{'':16s}{'us/call':>10s}{'over eager':>12s}{'x eager':>9s}")
    for name, us in rows:
        print(f"{name:16s}{us:10.2f}{us - eager:12.2f}{us / eager:9.2f}")


if __name__ == "__main__":
    main()
