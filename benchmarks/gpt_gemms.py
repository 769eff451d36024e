"""Each GEMM of the GPT block's training step (benchmarks/gpt_block.py, B8 T128 C256), alone,
with the shapes and strides thunder's programs pass, and the alternatives that compute the same
products: torch's (MKL) through F.linear / torch.matmul / a flattened 2-D mm or addmm / the other
operand order, and oneDNN (thunder/ops/onednn.py) with transposed views or contiguous copies.
Best of 3 x 20 calls (ms); in parentheses the error against float64 relative to the largest
value. The table of docs/benchmarks.md ("GPT-style block training") comes from this script.

    python benchmarks/gpt_gemms.py [--threads 1]
"""
import argparse
import time

import torch
import torch.nn.functional as F

from thunder.ops import onednn

T = 1024  # batch 8 x seq 128 rows


def best_ms(f, number=20, repeat=3):
    for _ in range(3):
        f()
    best = float("inf")
    for _ in range(repeat):
        for _ in range(number):
            t = time.perf_counter()
            f()
            best = min(best, time.perf_counter() - t)
    return best * 1e3


def row(name, fns, reference):
    cells = []
    for label, f in fns.items():
        err = (f().double() - reference).abs().max().item() / reference.abs().max().item()
        cells.append(f"{label} {best_ms(f):.2f} ({err:.0e})")
    print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    torch.set_num_threads(ap.parse_args().threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, oneDNN faster here: {onednn.faster()}")
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    layers = (("qkv", 256, 768), ("attn out", 256, 256), ("fc", 256, 1024), ("proj", 1024, 256))
    print("forward: x[8,128,K] @ W[N,K]^T + b")
    for name, k, n in layers:
        x, w, b = r(8, 128, k), r(n, k), r(n)
        x2 = x.view(T, k)
        row(f"{name} K{k} N{n}", {"F.linear": lambda: F.linear(x, w, b),
                                  "addmm 2-D": lambda: torch.addmm(b, x2, w.t()).view(8, 128, n),
                                  "oneDNN": lambda: onednn.linear(x, w, b)},
            F.linear(x.double(), w.double(), b.double()))
    print("backward, input grad: g[8,128,N] @ W[N,K]")
    for name, k, n in layers:
        gr, w = r(8, 128, n), r(n, k)
        row(f"{name} K{k} N{n}", {"matmul 3-D": lambda: torch.matmul(gr, w),
                                  "mm 2-D": lambda: torch.mm(gr.view(T, n), w).view(8, 128, k),
                                  "oneDNN (W^T view)": lambda: onednn.matmul(gr, w),
                                  "oneDNN (W^T copy)": lambda: onednn.linear(gr, w.t().contiguous())},
            gr.double() @ w.double())
    print("backward, weight grad: g^T[N,T] @ x[T,K] (g, x contiguous rows)")
    for name, k, n in layers:
        gr, x = r(T, n), r(T, k)
        row(f"{name} K{k} N{n}", {"g^T @ x": lambda: torch.matmul(gr.t(), x),
                                  "(x^T @ g)^T, contiguous": lambda: torch.mm(x.t(), gr).t().contiguous(),
                                  "oneDNN": lambda: onednn.matmul(gr.t(), x),
                                  "oneDNN, (x^T @ g)^T contiguous": lambda: onednn.matmul(x.t(), gr).t().contiguous()},
            gr.double().t() @ x.double())


if __name__ == "__main__":
    main()
