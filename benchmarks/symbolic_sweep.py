"""A sweep over 20 sequence lengths of the GPT block (benchmarks/gpt_block.py), eval forward under
no_grad and a training step (forward + backward), under cache="constant values" (the default:
automatic dynamic, a size that changes becomes a symbol; and with automatic_dynamic=False, one
program per size) and cache="symbolic values" (symbols from the first call), against eager and
torch.compile (its default: a recompile with dynamic
shapes after the first size change) in one run. Per option: the time of the first call at each
length summed over the sweep (compiles included; kernels compiling in the background meanwhile),
the number of compiles, and, once every length had its first call and the background kernels
are compiled (the steady state), the cached call at each length relative to eager's (geometric
mean over the lengths).

A KV-cache decode loop (--decode): a small transformers GPT-2 (2 layers, width 64) decoding 20
tokens greedily after an 8-token prompt, the DynamicCache it returns passed back each step:
the loop's total time, the compiles, and the median of the last 10 steps against eager's.

A transformers Llama's training step (--llama: width 256, 2 layers, vocab 1000, batch 2, the
loss from labels and its backward) over the same 20 lengths, as the GPT block's sweep.

Training steps over 10 image sizes (--vision): a ResNet-style CNN (batch norm in training mode,
strided convs, a max pool) and a ViT-style model (a patch conv, a class token, attention over
the tokens), batch 8, as the Llama's sweep.

    .venv/bin/python benchmarks/symbolic_sweep.py [--threads 2] [--no-compile] [--decode] [--llama] [--vision]
"""
import argparse
import math
import time

import torch

import thunder
from gpt_block import gpt_block, make_inputs
from timing import best_seconds

LENGTHS = list(range(16, 96, 4))  # 20 sequence lengths


def run(fn, args, train):
    if train:
        out = fn(*args)
        out.sum().backward()
        return out
    with torch.no_grad():
        return fn(*args)


def sweep(name, make_fn, train, eager_times):
    fn = make_fn()
    first, inputs = 0.0, []
    for T in LENGTHS:
        args = make_inputs(4, T, 128) + [4]
        if not train:
            args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
        t = time.perf_counter()
        out = run(fn, args, train)
        first += time.perf_counter() - t
        ref = run(gpt_block, args, False)
        torch.testing.assert_close(out.detach(), ref.detach(), atol=1e-4, rtol=1e-4)
        inputs.append(args)
    thunder.wait_for_kernels()  # (those compiling in the background: the cached calls are the steady state)
    ratios = [eager / best_seconds(lambda: run(fn, args, train), number=5, repeat=3, warmup=1)
              for args, eager in zip(inputs, eager_times)]
    compiles = thunder.compile_stats(fn).cache_misses if isinstance(fn, thunder.ThunderFunction) else None
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return name, first, compiles, geo


def decode_loop(fn, prompt, steps):
    """Greedy decoding, the cache passed back: (tokens, seconds per call)."""
    times, tokens = [], []
    with torch.no_grad():
        t = time.perf_counter()
        out = fn(input_ids=prompt, use_cache=True)
        times.append(time.perf_counter() - t)
        for _ in range(steps):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(nxt.item())
            t = time.perf_counter()
            out = fn(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
            times.append(time.perf_counter() - t)
    return tokens, times


def decode(opts):
    import transformers  # (optional: only this part of the benchmark needs it)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=96, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)).eval()
    prompt = torch.randint(0, 96, (1, 8), generator=torch.Generator().manual_seed(1))
    steps = 20
    decode_loop(model, prompt, 3)  # (warm-up)
    expected, eager = decode_loop(model, prompt, steps)
    rows = [("eager", None, eager)]
    for name, make in (("thunder default", lambda: thunder.jit(model)),
                       ("thunder symbolic values", lambda: thunder.jit(model, cache="symbolic values"))) + (
            () if opts.no_compile else (("torch.compile", lambda: torch.compile(model)),)):
        fn = make()
        tokens, times = decode_loop(fn, prompt, steps)
        assert tokens == expected, name
        compiles = thunder.cache_misses(fn) if name.startswith("thunder") else None
        rows.append((name, compiles, times))
    print(f"\nGPT-2 (2 layers, width 64) greedy decode, 8-token prompt + {steps} steps, DynamicCache")
    print(f"{'':26s} {'loop total':>11s} {'compiles':>9s} {'step (median of last 10)':>25s} {'vs eager':>9s}")
    eager_step = sorted(eager[-10:])[5]
    for name, compiles, times in rows:
        step = sorted(times[-10:])[5]
        print(f"{name:26s} {sum(times):10.2f}s {compiles if compiles is not None else '-':>9} "
              f"{1e3 * step:23.2f}ms {eager_step / step:8.2f}x")


def training_sweep(title, model, inputs, step, opts):
    """step(fn, x) (a training step's loss, backward done) at each input of inputs {label: x}
    under each cache option and torch.compile: first calls' total time, compiles, cached calls
    against eager's (geometric mean over the inputs); each loss checked against eager's."""
    eager = [best_seconds(lambda: step(model, x), number=3, repeat=3, warmup=1) for x in inputs.values()]
    rows = []
    for name, make in (("thunder default", lambda: thunder.jit(model)),
                       ("thunder no auto dynamic", lambda: thunder.jit(model, automatic_dynamic=False)),
                       ("thunder symbolic values", lambda: thunder.jit(model, cache="symbolic values"))) + (
            () if opts.no_compile else (("torch.compile", lambda: torch.compile(model)),)):
        fn, first, done = make(), 0.0, 0
        try:
            for x in inputs.values():
                t = time.perf_counter()
                loss = step(fn, x)
                first += time.perf_counter() - t
                torch.testing.assert_close(loss, step(model, x), atol=1e-4, rtol=1e-4)
                done += 1
        except Exception as e:  # noqa: BLE001 - torch.compile's own failures, reported in the table
            if name.startswith("thunder"):
                raise
            rows.append((name, f"failed at size {done + 1}: {type(e).__name__}: {str(e).splitlines()[0][:120]}"))
            continue
        thunder.wait_for_kernels()  # (those compiling in the background: the cached calls are the steady state)
        ratios = [e / best_seconds(lambda: step(fn, x), number=3, repeat=3, warmup=1)
                  for x, e in zip(inputs.values(), eager)]
        compiles = thunder.cache_misses(fn) if name.startswith("thunder") else None
        rows.append((name, first, compiles, math.exp(sum(map(math.log, ratios)) / len(ratios))))
    model.zero_grad()
    print(f"\n{title}: {len(inputs)} sizes ({', '.join(map(str, inputs))}), eager mean "
          f"{1e3 * sum(eager) / len(eager):.2f} ms")
    print(f"{'':26s} {'first calls, total':>19s} {'compiles':>9s} {'cached vs eager':>16s}")
    for name, *row in rows:
        if len(row) == 1:
            print(f"{name:26s} {row[0]}")
            continue
        first, compiles, geo = row
        print(f"{name:26s} {first:18.2f}s {compiles if compiles is not None else '-':>9} {geo:15.2f}x")


def llama(opts):
    import transformers  # (optional: only this part of the benchmark needs it)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=1000, max_position_embeddings=128))
    ids = {T: torch.randint(0, 1000, (2, T), generator=torch.Generator().manual_seed(T)) for T in LENGTHS}

    def step(fn, x):
        out = fn(input_ids=x, labels=x)
        out.loss.backward()
        return out.loss.detach()

    training_sweep("Llama (width 256, 2 layers, vocab 1000) training step, batch 2, T", model, ids, step, opts)


# image sizes (H, W) of the vision sweeps: none equal to another or to a parameter's size
IMAGES = [(96, 80), (112, 72), (88, 120), (100, 100), (76, 92), (120, 104), (84, 68), (108, 116), (92, 84),
          (70, 110)]


def vision(opts):
    """A ResNet-style CNN (batch norm in training mode, strided convs, a max pool) and a
    ViT-style model (a patch conv, a class token, attention over the tokens), training steps
    over 10 image sizes."""
    import torch.nn as nn
    import torch.nn.functional as F

    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) \
                if stride != 1 or cin != cout else nn.Identity()

        def forward(self, x):
            return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.down(x))

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, N, C = x.shape
            q, k, v = self.qkv(self.n1(x)).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
            x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, C))
            return x + self.fc2(F.gelu(self.fc1(self.n2(x))))

    class ViT(nn.Module):
        def __init__(self, d=128, patch=8, depth=4):
            super().__init__()
            self.patch = nn.Conv2d(3, d, patch, stride=patch)
            self.cls = nn.Parameter(torch.zeros(1, 1, d))
            self.blocks = nn.Sequential(*[Block(d, 4) for _ in range(depth)])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 10)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)
            return self.head(self.norm(self.blocks(x))[:, 0])

    torch.manual_seed(0)
    resnet = nn.Sequential(nn.Conv2d(3, 32, 7, 2, 3, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                           Basic(32, 32, 1), Basic(32, 64, 2), Basic(64, 128, 2), nn.AdaptiveAvgPool2d(1),
                           nn.Flatten(), nn.Linear(128, 10))
    images = {hw: torch.randn(8, 3, *hw, generator=torch.Generator().manual_seed(hw[0] * 1000 + hw[1]))
              for hw in IMAGES}
    labels = torch.arange(8) % 10

    def step(fn, x):
        loss = F.cross_entropy(fn(x), labels)
        loss.backward()
        return loss.detach()

    training_sweep("ResNet-style CNN (stem, max pool, 3 basic blocks to width 128) training step, batch 8, "
                   "(H, W)", resnet, images, step, opts)
    training_sweep("ViT-style model (patch 8, width 128, 4 blocks) training step, batch 8, (H, W)", ViT(), images,
                   step, opts)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--decode", action="store_true", help="the KV-cache decode loop only")
    parser.add_argument("--llama", action="store_true", help="a transformers Llama's training sweep only")
    parser.add_argument("--vision", action="store_true", help="a CNN's and a ViT's sweeps over image sizes only")
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    if opts.decode:
        return decode(opts)
    if opts.llama:
        return llama(opts)
    if opts.vision:
        return vision(opts)
    for train in (False, True):
        eager_times = []
        for T in LENGTHS:
            args = make_inputs(4, T, 128) + [4]
            if not train:
                args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
            eager_times.append(best_seconds(lambda: run(gpt_block, args, train), number=5, repeat=3, warmup=1))
        rows = [sweep("thunder default", lambda: thunder.jit(gpt_block), train, eager_times),
                sweep("thunder no auto dynamic", lambda: thunder.jit(gpt_block, automatic_dynamic=False), train,
                      eager_times),
                sweep("thunder symbolic values", lambda: thunder.jit(gpt_block, cache="symbolic values"), train,
                      eager_times)]
        if not opts.no_compile:
            rows.append(sweep("torch.compile", lambda: torch.compile(gpt_block), train, eager_times))
        print(f"\nGPT block B4 C128 4 heads, {'training step' if train else 'eval forward (no_grad)'}, "
              f"T = {LENGTHS[0]}..{LENGTHS[-1]} ({len(LENGTHS)} lengths), eager mean "
              f"{1e3 * sum(eager_times) / len(eager_times):.2f} ms")
        print(f"{'':26s} {'first calls, total':>19s} {'compiles':>9s} {'cached vs eager':>16s}")
        for name, first, compiles, geo in rows:
            print(f"{name:26s} {first:18.2f}s {compiles if compiles is not None else '-':>9} {geo:15.2f}x")


if __name__ == "__main__":
    main()
