"""Part (d) of benchmarks/gpu/run.sh: CUDA graphs capture of a jitted decode step.

One decode step of a GPT-style layer against a static KV cache (one new token per sequence:
layer norm, q/k/v projections, attention over the cache through a mask, output projection, MLP),
thunder.jit with the cuda executor. Called once (module loading happens outside the capture, as
docs/cuda.md says), captured with torch.cuda.graph, replayed on new inputs copied into the
captured ones; the replay's output must equal eager's. Times: eager, the jitted call, the replay.
Dry run: the CPU, the jitted step against eager (no graphs there)."""
import math

from common import Results, close, executors, parse, seconds

import torch
import torch.nn.functional as F

import thunder


def decode_step(x, k_cache, v_cache, mask, ln_w, ln_b, w_qkv, w_o, w_fc, w_proj):
    B, _, C = x.shape
    H = k_cache.shape[1]
    h = F.layer_norm(x, (C,), ln_w, ln_b)
    q, k, v = (h @ w_qkv).split(C, dim=-1)
    q = q.view(B, 1, H, C // H).transpose(1, 2)
    att = (q @ k_cache.transpose(-2, -1)) * (1.0 / math.sqrt(C // H)) + mask
    y = torch.softmax(att, -1) @ v_cache
    x = x + y.transpose(1, 2).reshape(B, 1, C) @ w_o
    return x + F.gelu(F.layer_norm(x, (C,), ln_w, ln_b) @ w_fc, approximate="tanh") @ w_proj, k, v


def inputs(a, seed):
    B, H, T, C = (16, 16, 1024, 1024) if not a.dry_run else (2, 2, 8, 16)
    g = torch.Generator().manual_seed(seed)

    def r(*s, scale=1.0):
        return (torch.randn(*s, generator=g) * scale).to(a.device)

    mask = torch.zeros(B, 1, 1, T)
    mask[:, :, :, T // 2:] = float("-inf")  # positions not filled yet
    return [r(B, 1, C), r(B, H, T, C // H), r(B, H, T, C // H), mask.to(a.device), 1 + r(C, scale=0.1), r(C, scale=0.1),
            r(C, 3 * C, scale=C ** -0.5), r(C, C, scale=C ** -0.5), r(C, 4 * C, scale=C ** -0.5),
            r(4 * C, C, scale=(4 * C) ** -0.5)]


def run(a):
    jf = thunder.jit(decode_step, executors=executors(a))
    static = inputs(a, 0)
    with torch.no_grad():
        for o, e in zip(jf(*static), decode_step(*static), strict=True):  # also loads the modules
            close(o, e, torch.float32)
        out = dict(fusion_calls=str(thunder.last_traces(jf)[-1]).count(" = fusion_"))
        reps = dict(reps=20, warmup=3) if not a.dry_run else dict(reps=2, warmup=1)
        t_eager = seconds(lambda: decode_step(*static), a.device, **reps)
        t_jit = seconds(lambda: jf(*static), a.device, **reps)
        out["times_ms"] = dict(eager=t_eager * 1e3, thunder=t_jit * 1e3)
        if a.device != "cuda":
            out["graphs"] = "skipped: no CUDA device (dry run)"
            return out
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up on a side stream, as torch's docs do before capture
            for _ in range(2):
                jf(*static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = jf(*static)
        fresh = inputs(a, 1)
        for s, f in zip(static, fresh):
            s.copy_(f)
        graph.replay()
        torch.cuda.synchronize()
        for o, e in zip(captured, decode_step(*fresh), strict=True):
            close(o, e, torch.float32)
        t_graph = seconds(graph.replay, a.device, **reps)
        out["times_ms"]["thunder_graph_replay"] = t_graph * 1e3
        out["graphs"] = "captured and replayed, equal to eager"
    return out


def main():
    a = parse(__doc__)
    res = Results("graphs", a)
    res.run(f"jitted decode step, CUDA graph capture on {a.device}", lambda: run(a))


if __name__ == "__main__":
    main()
