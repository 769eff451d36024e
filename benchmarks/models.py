"""The model suite of tests/test_models.py (random weights, built from configs): the cached eval
forward (no_grad) of each under thunder.jit against eager and torch.compile, in one run, with
the first-call (compile) time of each. Checks thunder's outputs against eager before timing.

    .venv/bin/python benchmarks/models.py [NAME ...] [--threads 2] [--no-compile]
"""
import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import test_models as suite  # noqa: E402  (the models and inputs the tests use)

import thunder  # noqa: E402
from timing import best_seconds  # noqa: E402


def models():
    ids = suite._ids(batch=4, seq=32)
    yield "gpt2", lambda: suite._language_model("gpt2"), dict(input_ids=ids, use_cache=False)
    yield "llama", lambda: suite._language_model("llama"), dict(input_ids=ids, use_cache=False)
    yield "mistral", lambda: suite._language_model("mistral"), dict(input_ids=ids, use_cache=False)
    yield "qwen2", lambda: suite._language_model("qwen2"), dict(input_ids=ids, use_cache=False)
    yield "bert", lambda: suite._language_model("bert"), dict(input_ids=ids)
    t = suite.transformers
    vit = lambda: suite._hf(t.ViTConfig, t.ViTForImageClassification, image_size=32, patch_size=4,  # noqa: E731
                            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                            num_labels=5)
    yield "vit", vit, dict(pixel_values=torch.randn(8, 3, 32, 32))
    yield "resnet", suite.ResNet, dict(x=torch.randn(16, 3, 32, 32), target=torch.randint(0, 10, (16,)))
    yield "lstm", suite.LSTMTagger, dict(tokens=torch.randint(0, 50, (8, 32)), tags=torch.randint(0, 7, (8, 32)))
    yield "nanogpt", suite.NanoGPT, dict(idx=torch.randint(0, 64, (8, 16)), targets=torch.randint(0, 64, (8, 16)))


def first_call(fn, kwargs):
    t = time.perf_counter()
    out = fn(**kwargs)
    return out, time.perf_counter() - t


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows, speedups = [], {"eager": [], "inductor": []}
    print("| model | eager ms | torch.compile ms | thunder ms | x eager | x inductor | thunder first call s |"
          " inductor first call s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, make, kwargs in models():
        if args.names and not any(n in name for n in args.names):
            continue
        torch.manual_seed(0)
        model = make().eval()
        with torch.no_grad():
            expected = model(**kwargs)
            jitted = thunder.jit(model)
            out, thunder_first = first_call(jitted, kwargs)
            for a, b in zip(suite._outputs(out), suite._outputs(expected), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
            eager = best_seconds(lambda: model(**kwargs), number=5, repeat=5)
            ours = best_seconds(lambda: jitted(**kwargs), number=5, repeat=5)
            compiled_ms, inductor_first = float("nan"), float("nan")
            if not args.no_compile:
                torch._dynamo.reset()
                compiled = torch.compile(model)
                _, inductor_first = first_call(compiled, kwargs)
                compiled_ms = best_seconds(lambda: compiled(**kwargs), number=5, repeat=5) * 1e3
        speedups["eager"].append(eager / ours)
        if not math.isnan(compiled_ms):
            speedups["inductor"].append(compiled_ms / 1e3 / ours)
        print(f"| {name} | {eager * 1e3:.3f} | {compiled_ms:.3f} | {ours * 1e3:.3f} | {eager / ours:.2f} | "
              f"{compiled_ms / 1e3 / ours:.2f} | {thunder_first:.2f} | {inductor_first:.2f} |", flush=True)
    for k, v in speedups.items():
        if v:
            print(f"geometric mean x {k}: {math.exp(sum(map(math.log, v)) / len(v)):.2f}")


if __name__ == "__main__":
    main()
