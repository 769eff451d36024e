"""A GPT-style block (layer norm, qkv linear, split, causal sdpa, GELU MLP, residuals):
bytes saved for backward (thunder without and with remat, and eager's saved tensors), the first
training step under thunder.jit (trace, passes and kernel compiles: thunder's kernel disk cache
points at a fresh directory unless --warm-disk-cache) and the time of one training step
(forward + backward), against eager and torch.compile in one run.

    python benchmarks/gpt_block.py [--batch 8 --seq 128 --width 256] [--threads 1] [--no-compile]
                                   [--warm-disk-cache]
"""
import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time

if __name__ == "__main__" and "--warm-disk-cache" not in sys.argv:  # before thunder is imported
    _fresh = tempfile.mkdtemp(prefix="gpt-block-kernels-")
    atexit.register(shutil.rmtree, _fresh, True)
    os.environ["THUNDER_KERNEL_CACHE"] = _fresh

import torch
import torch.nn.functional as F

import thunder


def gpt_block(x, ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_fc, b_fc, w_proj, b_proj, n_head):
    B, T, C = x.shape
    h = F.layer_norm(x, (C,), ln1_w, ln1_b)
    q, k, v = F.linear(h, w_qkv, b_qkv).split(C, dim=2)
    q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
    k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
    v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    a = a.transpose(1, 2).reshape(B, T, C)
    x = x + F.linear(a, w_o, b_o)
    h = F.layer_norm(x, (C,), ln2_w, ln2_b)
    h = F.gelu(F.linear(h, w_fc, b_fc), approximate="tanh")
    return x + F.linear(h, w_proj, b_proj)


def make_inputs(batch, seq, width, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)

    def p(*shape, scale=0.02):
        return (torch.randn(*shape, generator=g, dtype=dtype) * scale).requires_grad_()

    C = width
    params = [torch.ones(C, dtype=dtype).requires_grad_(), torch.zeros(C, dtype=dtype).requires_grad_(),
              p(3 * C, C), p(3 * C), p(C, C), p(C),
              torch.ones(C, dtype=dtype).requires_grad_(), torch.zeros(C, dtype=dtype).requires_grad_(),
              p(4 * C, C), p(4 * C), p(C, 4 * C), p(C)]
    x = torch.randn(batch, seq, C, generator=g, dtype=dtype).requires_grad_()
    return [x, *params]


def eager_saved_bytes(fn, args):
    """Bytes of the distinct tensors eager autograd saves for backward."""
    seen = {}

    def pack(t):
        seen[(t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    del out
    return sum(seen.values())


def step_time(fn, args, repeat):
    def step():
        out = fn(*args)
        out.sum().backward()
        for a in args[:-1]:
            a.grad = None

    step()
    thunder.wait_for_kernels()  # (the kernels compiled in the background: the steady state)
    step()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return min(times) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--warm-disk-cache", action="store_true", help="keep thunder's kernel disk cache")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    from thunder.lowering.linalg import COMPILE_LOG

    args = make_inputs(a.batch, a.seq, a.width) + [a.heads]
    jblock = thunder.jit(gpt_block)
    t0 = time.perf_counter()
    out = jblock(*args)
    out.sum().backward()
    first = time.perf_counter() - t0
    grads = [x.grad for x in args[:-1]]
    for x in args[:-1]:
        x.grad = None
    expected = gpt_block(*args)
    expected.sum().backward()
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(grads, [x.grad for x in args[:-1]], rtol=1e-4, atol=1e-4)
    for x in args[:-1]:
        x.grad = None
    saved = thunder.compile_stats(jblock).last_saved_bytes
    eager = eager_saved_bytes(gpt_block, args)
    mb = 1 / 2**20
    print(f"GPT block batch {a.batch}, seq {a.seq}, width {a.width}, {a.heads} heads, float32, "
          f"{torch.get_num_threads()} threads")
    print(f"saved for backward: eager {eager * mb:.2f} MiB, thunder without remat "
          f"{saved['saved_before'] * mb:.2f} MiB, with remat {saved['saved_after'] * mb:.2f} MiB")
    thunder.wait_for_kernels()
    compiled = [s for _, s, how in COMPILE_LOG if how in ("compiled", "background")]
    print(f"first training step under thunder.jit: {first:.2f} s (trace "
          f"{thunder.compile_stats(jblock).last_compile_time:.2f} s; kernels: {len(compiled)} compiled in "
          f"{sum(compiled):.2f} s, {sum(how == 'background' for _, _, how in COMPILE_LOG)} of them in the background "
          f"while {len(thunder.compile_stats(jblock).torch_while_compiling)} regions ran as torch calls, "
          f"{len(COMPILE_LOG) - len(compiled)} loaded from disk)")
    rows = [("eager", step_time(gpt_block, args, a.repeat)), ("thunder.jit", step_time(jblock, args, a.repeat))]
    if not a.no_compile:
        try:
            cblock = torch.compile(gpt_block)
            rows.append(("torch.compile", step_time(cblock, args, a.repeat)))
        except Exception as e:  # inductor needs a working C++ toolchain
            print(f"torch.compile unavailable: {e}")
    print(f"{'training step':16s}{'ms':>9s}{'speedup over eager':>20s}")
    for name, ms in rows:
        print(f"{name:16s}{ms:9.2f}{rows[0][1] / ms:19.2f}x")


if __name__ == "__main__":
    main()
