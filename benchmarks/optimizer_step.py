"""An optimizer's step on the parameters of a model of realistic size: eager `opt.step()`, the
step jitted by thunder (`thunder.jit(opt.step)`: one program of fused elementwise kernels over
all parameters, writing the parameters and the state in place) and torch.compile(opt.step), in
one run. The parameters are those of benchmarks/realistic.py's Llama-style model (~60M, f32),
their gradients random; each step's parameters are checked against eager's (torch's compiled
path, which thunder's is, computes Adam's bias corrections in float32: equal within rounding).

    .venv/bin/python benchmarks/optimizer_step.py [--threads 2] [--no-compile] [--optimizers adamw sgd]

Prints the CPU, then per optimizer: ms per step for each and the ratios against eager and
torch.compile.
"""
import argparse
import copy
import time

import torch

import thunder
from realistic import cpu_description, make_model
from timing import best_seconds

OPTIMIZERS = {
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.01),
    "adamw_foreach": lambda p: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.01, foreach=True),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-4),
    "sgd": lambda p: torch.optim.SGD(p, lr=1e-3, momentum=0.9),
}


def _params(model):
    params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    gen = torch.Generator().manual_seed(0)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen) * 1e-3
    return params


def measure(name, base, compilers, number, repeat):
    """{compiler: (ms per step, the parameters after the timed steps)}."""
    out = {}
    for compiler in compilers:
        params = [p.detach().clone().requires_grad_() for p in base]
        for p, b in zip(params, base):
            p.grad = b.grad.clone()
        opt = OPTIMIZERS[name](params)
        step = {"eager": opt.step, "thunder": thunder.jit(opt.step),
                "torch.compile": torch.compile(opt.step)}[compiler]
        start = time.perf_counter()
        step()
        first = time.perf_counter() - start
        seconds = best_seconds(step, number=number, repeat=repeat, warmup=2)
        out[compiler] = (seconds * 1e3, first, params)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS), choices=list(OPTIMIZERS))
    parser.add_argument("--quick", action="store_true", help="a tiny model, few steps (the test)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_description()}; torch {torch.__version__}, {args.threads} threads")
    model = make_model("llama", quick=args.quick)
    base = _params(model)
    print(f"{sum(p.numel() for p in base) / 1e6:.1f}M parameters in {len(base)} tensors, float32")
    compilers = ["eager", "thunder"] + ([] if args.no_compile else ["torch.compile"])
    number, repeat = (2, 2) if args.quick else (5, 5)
    print("| optimizer | eager ms | thunder ms | torch.compile ms | thunder x eager | thunder x torch.compile | "
          "thunder first call s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    ratios = {}
    for name in args.optimizers:
        r = measure(name, base, compilers, number, repeat)
        for p, q in zip(r["thunder"][2], r["eager"][2], strict=True):  # (the same number of steps)
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        eager, mine = r["eager"][0], r["thunder"][0]
        tc = r.get("torch.compile", (float("nan"),))[0]
        ratios[name] = eager / mine
        print(f"| {name} | {eager:.2f} | {mine:.2f} | {tc:.2f} | {eager / mine:.2f} | {tc / mine:.2f} | "
              f"{r['thunder'][1]:.2f} |")
    return ratios


if __name__ == "__main__":
    main()
