"""The work around the GEMMs of the realistic models (benchmarks/realistic.py, width 512, 2 x 256
rows for a prefill or training step, 1 row for a decode step), each alone: what thunder runs
today against one oneDNN call doing the same (issue 27, docs/benchmarks.md "Work around the
GEMMs"). Thread CPU time (robust to a loaded machine's descheduling, not to its cache
pressure), best of --repeat interleaved calls, ms.

1. Epilogues: GPT-2's c_fc + gelu_new (addmm, then thunder's fused kernel), Llama's gate + silu,
   up * (silu(gate)) and down + residual, against `torch.ops.mkldnn._linear_pointwise` with the
   activation as a post-op (gelu tanh, swish) or its .binary overload (mul, add).
2. bfloat16 products: F.linear against oneDNN with the weight as stored and with the weight
   packed (`_reorder_linear_weight`, thunder/ops/packed_linear.py), at each model's shapes, and
   whether the results are bitwise F.linear's.

    python benchmarks/gemm_epilogues.py [--threads 1] [--repeat 15]
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

import thunder

mkldnn = torch.ops.mkldnn


def gelu_new(x):  # transformers' NewGELUActivation (GPT-2)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def best_ms(fns, repeat):
    """{name: best thread time in ms}, the functions called in turns."""
    best = dict.fromkeys(fns, float("inf"))
    for f in fns.values():
        f()
        f()
    for _ in range(repeat):
        for name, f in fns.items():
            t = time.thread_time()
            f()
            best[name] = min(best[name], time.thread_time() - t)
    return {k: v * 1e3 for k, v in best.items()}


def epilogues(repeat):
    print("| rows | dtype | epilogue | thunder ms | oneDNN post-op ms | GEMM alone ms |")
    print("| ---: | --- | --- | ---: | ---: | ---: |")
    for rows in (512, 1):
        for dtype in (torch.float32, torch.bfloat16):
            g = torch.Generator().manual_seed(0)
            rnd = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
            x, r = rnd(rows, 512), rnd(rows, 512)
            w_fc, b_fc = rnd(512, 2048) / 512 ** 0.5, rnd(2048)  # GPT-2 Conv1D: [in, out]
            w_gate, up = rnd(1536, 512) / 512 ** 0.5, rnd(rows, 1536)
            w_down, h = rnd(512, 1536) / 1536 ** 0.5, rnd(rows, 1536)
            cases = {
                "addmm + gelu_new (GPT-2 c_fc)": (
                    lambda x, w, b: gelu_new(torch.addmm(b, x, w)), (x, w_fc, b_fc),
                    lambda: mkldnn._linear_pointwise(x, w_fc.t(), b_fc, "gelu", [], "tanh"),
                    lambda: torch.addmm(b_fc, x, w_fc)),
                "linear + silu (Llama gate)": (
                    lambda x, w: F.silu(F.linear(x, w)), (x, w_gate),
                    lambda: mkldnn._linear_pointwise(x, w_gate, None, "swish", [], ""),
                    lambda: F.linear(x, w_gate)),
                "linear * tensor (Llama up)": (
                    lambda x, w, u: F.linear(x, w) * u, (x, w_gate, up),
                    lambda: mkldnn._linear_pointwise.binary(x, up, w_gate, None, "mul"),
                    lambda: F.linear(x, w_gate)),
                "linear + residual (Llama down)": (
                    lambda h, w, r: r + F.linear(h, w), (h, w_down, r),
                    lambda: mkldnn._linear_pointwise.binary(h, r, w_down, None, "add"),
                    lambda: F.linear(h, w_down)),
            }
            with torch.no_grad():
                for name, (fn, args, onednn, gemm) in cases.items():
                    jf = thunder.jit(fn)
                    torch.testing.assert_close(onednn().float(), fn(*args).float(),
                                               **({} if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)))
                    t = best_ms({"thunder": lambda: jf(*args), "onednn": onednn, "gemm": gemm}, repeat)
                    print(f"| {rows} | {str(dtype)[6:]} | {name} | {t['thunder']:.3f} | {t['onednn']:.3f} | "
                          f"{t['gemm']:.3f} |", flush=True)


def packed_products(repeat):
    print("\n| rows | in x out | F.linear ms | oneDNN ms | oneDNN packed ms | packed x F.linear | bitwise F.linear's |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | --- |")
    shapes = ((512, 512), (512, 1536), (1536, 512), (512, 2048), (2048, 512), (512, 32000))
    for rows in (1, 512):
        for k, n in shapes:
            g = torch.Generator().manual_seed(0)
            x = torch.randn(rows, k, generator=g).bfloat16()
            w = torch.randn(n, k, generator=g).bfloat16()
            packed = mkldnn._reorder_linear_weight(w, rows)
            fns = {"torch": lambda: F.linear(x, w), "onednn": lambda: mkldnn._linear_pointwise(x, w, None, "none", [], ""),
                   "packed": lambda: mkldnn._linear_pointwise(x, packed, None, "none", [], "")}
            with torch.no_grad():
                same = torch.equal(fns["packed"](), fns["torch"]())
                t = best_ms(fns, repeat if n < 32000 else max(3, repeat // 3))
            print(f"| {rows} | {k} x {n} | {t['torch']:.3f} | {t['onednn']:.3f} | {t['packed']:.3f} | "
                  f"{t['torch'] / t['packed']:.2f} | {same} |", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    with open("/proc/cpuinfo") as f:
        name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    print(f"CPU: {name}; torch {torch.__version__}; threads {args.threads}\n")
    epilogues(args.repeat)
    packed_products(args.repeat)


if __name__ == "__main__":
    main()
