"""Demo: jit a small transformer-style MLP block, print its traces, time it against eager.

    python examples/demo.py
"""
import timeit

import torch
import torch.nn.functional as F

import thunder


def mlp_block(x, ln_w, ln_b, w1, b1, w2, b2):
    h = F.layer_norm(x, (x.shape[-1],), ln_w, ln_b)
    h = F.gelu(F.linear(h, w1, b1), approximate="tanh")
    h = F.linear(h, w2, b2)
    return torch.softmax(x + h, dim=-1)


def main():
    torch.manual_seed(0)
    d = 128  # (sizes where a fused kernel beats torch's calls: smaller regions stay with torch)
    args = (torch.randn(8, 128, d), torch.ones(d), torch.zeros(d), torch.randn(4 * d, d) * 0.05,
            torch.zeros(4 * d), torch.randn(d, 4 * d) * 0.05, torch.zeros(d))
    # persist=False: every stage in last_traces on every run (a program loaded from the disk cache
    # holds only the one that ran, docs/api.md)
    jblock = thunder.jit(mlp_block, persist=False)
    out = jblock(*args)
    expected = mlp_block(*args)
    torch.testing.assert_close(out, expected)
    print("thunder.jit result matches eager:", tuple(out.shape), out.dtype)

    traces = thunder.last_traces(jblock)
    print("\n=== acquired trace as MLIR (ltorch dialect) ===")
    print(traces[0].to_mlir())
    print("=== execution trace (the Python program that runs) ===")
    print(traces[-1])
    print("=== fusion_0: the residual add + softmax, a region of thunder prims compiled to a CPU "
          "kernel through linalg (docs/fusion.md) ===")
    mlir = traces[-1].to_mlir()
    start = mlir.find("func.func private @fusion_0")
    if start < 0:  # (the cost model kept torch's calls on this machine)
        print("(no region fused: the cost model expects torch's calls to be as fast here)\n")
    else:
        print(mlir[start:].split("\n  }")[0] + "\n  }\n")
    print("=== the whole block decomposed into thunder prims (thunder-opt pass thunder-decompose) ===")
    jdecomp = thunder.jit(mlp_block, transforms=["thunder-decompose"], executors=["torch"], persist=False)
    torch.testing.assert_close(jdecomp(*args), expected, rtol=1e-4, atol=1e-5)
    print("\n".join(thunder.last_traces(jdecomp)[-2].to_mlir().splitlines()[:12]) + "\n  ...")

    stats = thunder.compile_stats(jblock)
    print(f"\ncompile time {stats.last_compile_time * 1e3:.1f} ms: "
          + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in stats.last_stage_times.items()))
    n = 200
    # (the first calls ran fusion_0 as torch calls while its kernel compiled in the background)
    thunder.wait_for_kernels()
    t_eager = min(timeit.repeat(lambda: mlp_block(*args), number=n, repeat=5)) / n * 1e6
    t_thunder = min(timeit.repeat(lambda: jblock(*args), number=n, repeat=5)) / n * 1e6
    print(f"eager {t_eager:.1f} us/call, thunder.jit {t_thunder:.1f} us/call "
          f"({t_eager / t_thunder:.2f}x eager's speed)")


if __name__ == "__main__":
    main()
