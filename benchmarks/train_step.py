"""A whole training step in one function: forward with labels, `loss.backward()`,
`clip_grad_norm_`, AdamW's `step()` and `zero_grad()`, on benchmarks/realistic.py's models
(transformers Llama- and GPT-2-style, ~50M parameters, f32, batch 2 x 256). Engines, in one run:

- eager: the function as it is;
- thunder step: `thunder.jit(step)`, the whole function one program (runtime/inner_autograd.py);
- thunder model: `thunder.jit(model)` inside the eager function (backward, clipping and the
  optimizer eager): what a script gets by jitting the model only;
- torch.compile: `torch.compile(step)` (graph breaks at the backward; the optimizer compiled).

Each engine trains its own copy of the model from the same weights; after the timed steps the
losses of every step are checked against eager's. Time per step: median over the rounds after
two untimed steps (both compile) and thunder's kernels compiled, the engines taking turns.

    .venv/bin/python benchmarks/train_step.py [--models llama gpt2] [--rounds 5] [--no-compile] [--quick]
"""
import argparse
import copy
import statistics
import time

import torch

import thunder
from realistic import FULL, MODELS, QUICK, cpu_description, make_model


# untimed calls: the first step compiles, the second too (the optimizer's state, empty in the first,
# is found from the second on: another program)
WARMUP = 2


def make_step(model, forward=None):
    """The training step of model; forward: what computes the loss (default the model itself;
    its thunder.jit for the "thunder model" engine)."""
    forward = forward or model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def step(ids):
        loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        return loss.detach()
    return step


def engines(model, compile_too):
    """Each engine's step, on its own copy of model."""
    made = {"eager": make_step(copy.deepcopy(model)), "thunder step": thunder.jit(make_step(copy.deepcopy(model)))}
    m = copy.deepcopy(model)
    made["thunder model"] = make_step(m, thunder.jit(m))
    if compile_too:
        made["torch.compile"] = torch.compile(make_step(copy.deepcopy(model)))
    return made


def bench(name, args):
    sizes = QUICK if args.quick else FULL
    model = make_model(name, args.quick)
    model.train()
    vocab = model.config.vocab_size
    made = engines(model, not args.no_compile)
    batches = [torch.randint(0, vocab, (sizes["batch"], sizes["seq"]), generator=torch.Generator().manual_seed(i))
               for i in range(args.rounds + WARMUP)]
    losses = {k: [] for k in made}
    times = {k: [] for k in made}
    firsts = {}
    for i, ids in enumerate(batches):
        for k, step in made.items():
            t = time.perf_counter()
            losses[k].append(step(ids).item())
            elapsed = time.perf_counter() - t
            if i < WARMUP:
                firsts[k] = firsts.get(k, 0.0) + elapsed
            else:
                times[k].append(elapsed)
        if i == WARMUP - 1:
            thunder.wait_for_kernels()  # (those compiled in the background: the timed calls run them)
    for k in made:  # (each engine's copy trained on the same batches: the same losses)
        for a, b in zip(losses[k], losses["eager"]):
            assert abs(a - b) <= 1e-3 * max(1.0, abs(b)), (name, k, losses[k], losses["eager"])
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}, firsts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--quick", action="store_true", help="tiny models, two rounds: only checks the script runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds = 2
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_description()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    names = ["eager", "thunder step", "thunder model"] + ([] if args.no_compile else ["torch.compile"])
    print("| model | " + " | ".join(f"{n} ms" for n in names) + " | thunder step x eager | thunder step x "
          "thunder model | thunder step x torch.compile | thunder step first two calls s |")
    print("| --- |" + " ---: |" * (len(names) + 4))
    result = {}
    for name in args.models:
        ms, firsts = bench(name, args)
        tc = ms.get("torch.compile", float("nan"))
        step = ms["thunder step"]
        print(f"| {name} | " + " | ".join(f"{ms[n]:.1f}" for n in names) + f" | {ms['eager'] / step:.2f} | "
              f"{ms['thunder model'] / step:.2f} | {tc / step:.2f} | {firsts['thunder step']:.1f} |")
        result[name] = ms
    return result


if __name__ == "__main__":
    main()
