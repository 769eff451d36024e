"""Time a bias + GELU(tanh) chain (2M elements, float32) compiled through linalg to native
code (thunder.lowering.linalg) against eager PyTorch. Prints only.

    .venv/bin/python benchmarks/linalg_kernel.py [--loops loops|affine-vector] [--rows 2048 --cols 1024]
"""
import argparse
import time

import torch

import thunder
from thunder.lowering.linalg import compile_region
from timing import best_seconds


def bias_gelu(x, b):
    return torch.nn.functional.gelu(x + b, approximate="tanh")


def region_of(fn, *args):
    jf = thunder.jit(fn, transforms=["thunder-decompose"], executors=["torch"])
    jf(*args)
    return str(thunder.last_traces(jf)[-2].to_mlir())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loops", default="loops")
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    x, b = torch.randn(a.rows, a.cols), torch.randn(a.cols)
    text = region_of(bias_gelu, x, b)
    t0 = time.perf_counter()
    k = compile_region(text, "computation", loops=a.loops)
    out, = k(x, b)
    compile_s = time.perf_counter() - t0
    ref = bias_gelu(x, b)
    err = (out - ref).abs().max().item()
    t_k = best_seconds(k, x, b)
    t_e = best_seconds(bias_gelu, x, b)
    jf = thunder.jit(bias_gelu)
    t_j = best_seconds(jf, x, b)
    print(f"bias+gelu(tanh) {a.rows}x{a.cols} f32, loops={a.loops}, torch threads={torch.get_num_threads()}")
    print(f"  compile + first call {compile_s * 1e3:.0f} ms, max abs err vs eager {err:.2e}")
    print(f"  linalg kernel  {t_k * 1e3:8.3f} ms")
    print(f"  eager torch    {t_e * 1e3:8.3f} ms")
    print(f"  thunder.jit    {t_j * 1e3:8.3f} ms (torch executor)")

    # a reduction region: softmax over the last dim (amax, sub, exp, sum, div)
    def softmax(x):
        return torch.softmax(x, -1)
    ks = compile_region(region_of(softmax, x), "computation", loops=a.loops)
    err = (ks(x)[0] - softmax(x)).abs().max().item()
    print(f"softmax {a.rows}x{a.cols} f32 (max abs err {err:.2e})")
    print(f"  linalg kernel  {best_seconds(ks, x) * 1e3:8.3f} ms")
    print(f"  eager torch    {best_seconds(softmax, x) * 1e3:8.3f} ms")

    # per-call overhead on a tiny region (descriptors, ctypes call, torch.empty)
    s, sb = torch.randn(4, 8), torch.randn(8)
    kt = compile_region(region_of(bias_gelu, s, sb), "computation", loops=a.loops)
    print(f"bias+gelu 4x8: linalg kernel {best_seconds(kt, s, sb, number=2000) * 1e6:.1f} us, "
          f"eager {best_seconds(bias_gelu, s, sb, number=2000) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
