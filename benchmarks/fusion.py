"""thunder.jit(fn, transforms=["thunder-decompose", "thunder-fuse"]) against eager PyTorch and
against thunder.jit without fusion, on bias + GELU (2M elements) and residual + layer_norm
(4096x512), float32 on CPU. Prints only (timings vary by machine).

    .venv/bin/python benchmarks/fusion.py [--threads N] [--reps 20]
"""
import argparse
import time

import torch
import torch.nn.functional as F

import thunder
from timing import best_seconds

FUSE = ["thunder-decompose", "thunder-fuse"]


def bias_gelu(x, b):
    return F.gelu(x + b)


def bias_gelu_tanh(x, b):
    return F.gelu(x + b, approximate="tanh")


def residual_layer_norm(x, r, w, b):
    return F.layer_norm(x + r, (x.shape[-1],), w, b)


def case(name, fn, args, reps):
    fused = thunder.jit(fn, transforms=FUSE)
    t0 = time.perf_counter()
    out = fused(*args)  # trace, passes, codegen, kernel compilation
    first = time.perf_counter() - t0
    err = (out - fn(*args)).abs().max().item()
    unfused = thunder.jit(fn, transforms=["thunder-decompose"])
    t_e, t_f, t_u = (best_seconds(f, *args, number=reps) for f in (fn, fused, unfused))
    n_fusions = str(thunder.last_traces(fused)[-1]).count("= fusion_")
    print(f"{name}: {n_fusions} fusion(s), first call {first * 1e3:.0f} ms, max abs err {err:.1e}")
    print(f"  eager            {t_e * 1e3:8.3f} ms")
    print(f"  thunder (prims)  {t_u * 1e3:8.3f} ms")
    print(f"  thunder-fuse     {t_f * 1e3:8.3f} ms   ({t_e / t_f:.2f}x eager)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(f"torch threads={torch.get_num_threads()} (the fused kernels run on one thread)")
    x, b = torch.randn(2048, 1024), torch.randn(1024)
    case("bias+gelu (erf) 2048x1024", bias_gelu, (x, b), a.reps)
    case("bias+gelu (tanh) 2048x1024", bias_gelu_tanh, (x, b), a.reps)
    x, r, w, b = torch.randn(4096, 512), torch.randn(4096, 512), torch.randn(512), torch.randn(512)
    case("residual+layer_norm 4096x512", residual_layer_norm, (x, r, w, b), a.reps)


if __name__ == "__main__":
    main()
