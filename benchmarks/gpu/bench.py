"""Part (c) of benchmarks/gpu/run.sh: speed on the device against eager and torch.compile
(inductor: Triton on CUDA), each result checked against eager before it is timed.

1. A device-to-device copy (bytes read + written per second): the bandwidth the fusion cases are
   measured against.
2. benchmarks/fusion.py's cases (its own bench(), as `fusion.py --device cuda` runs them): times,
   and for thunder the bytes of inputs + outputs per second as a fraction of the copy's.
3. Training steps (forward + backward of the output's sum) of the GPT block
   (benchmarks/gpt_block.py) and a Llama block (blocks.py), bf16 then f32; the grads of thunder
   and of eager both measured against the step in float64 (common.close).
Items run in that order of priority (bf16 blocks before the fusion cases' long tail) until the
budget is spent; the JSON says what was left out. Dry run: the CPU, tiny sizes, torch.compile
replaced by eager (inductor's C++ compile would take minutes there), 2 timed calls.
"""
import sys
import time

from common import Results, close, executors, parse, seconds, sync

import torch

import thunder


def copy_bandwidth(a):
    n = (1 << 28) if not a.dry_run else (1 << 22)  # 1 GiB of f32 on the GPU
    x = torch.randn(n, device=a.device)
    y = torch.empty_like(x)
    t = seconds(lambda: y.copy_(x), a.device, reps=10 if not a.dry_run else 3)
    return dict(bytes_per_s=2 * x.nbytes / t, gb_per_s=round(2 * x.nbytes / t / 1e9, 1))


def fusion_case(a, name, copy_bps):
    import fusion

    fn, make, training = fusion.CASES[name]
    args = make()
    try:
        r = fusion.bench(name, a.dry_run)
    except SystemExit as e:  # fusion.check's way of stopping on a result that differs from eager's
        raise AssertionError(str(e)) from None
    t_eager, t_compile, t_thunder = r["times"]
    out = {"times_ms": dict(eager=t_eager * 1e3, torch_compile=t_compile * 1e3, thunder=t_thunder * 1e3),
           "thunder_vs_eager": t_eager / t_thunder, "thunder_vs_compile": t_compile / t_thunder,
           "thunder_first_call_s": r["thunder_first"]}
    if not training:
        with torch.no_grad():
            result = fn(*args)
        moved = sum(t.nbytes for t in args if isinstance(t, torch.Tensor)) + result.nbytes
        out["thunder_fraction_of_copy"] = moved / t_thunder / copy_bps
        out["eager_fraction_of_copy"] = moved / t_eager / copy_bps
    return out


def block_step(a, which, dtype):
    from gpt_block import gpt_block, make_inputs
    from blocks import llama_block, llama_inputs

    if which == "gpt":
        size = (8, 1024, 1024, 16) if not a.dry_run else (2, 16, 32, 4)
        args = [t.detach().to(a.device, dtype).requires_grad_() for t in make_inputs(*size[:3])] + [size[3]]
        fn = gpt_block
    else:
        size = (8, 1024, 1024, 16, 4, 2816) if not a.dry_run else (2, 16, 32, 4, 2, 64)
        args = llama_inputs(*size, dtype=dtype, device=a.device)
        fn = llama_block
    leaves = [t for t in args if isinstance(t, torch.Tensor) and t.requires_grad]

    def step(f):
        def run():
            f(*args).sum().backward()
            grads = [t.grad for t in leaves]
            for t in leaves:
                t.grad = None
            return grads
        return run

    expected = step(fn)()
    jf = thunder.jit(fn, executors=executors(a))
    t0 = time.perf_counter()
    got = step(jf)()
    sync(a.device)
    first = time.perf_counter() - t0
    # thunder's grads and eager's, both against the step in float64 (common.close: thunder's SDPA
    # backward is f32 matmuls where eager's is a fused kernel; neither is float64's)
    wide = [t.detach().double().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t for t in args]
    fn(*wide).sum().backward()
    reference = [t.grad for t in wide if isinstance(t, torch.Tensor) and t.requires_grad]
    errors = {}
    for i, (g, e, r) in enumerate(zip(got, expected, reference, strict=True)):
        err_t, err_e = ((x.double() - r).norm() / r.norm().clamp_min(1e-300) for x in (g, e))
        errors[i] = (float(err_t), float(err_e))  # relative (norm) errors: thunder's, eager's
        try:
            close(g, e, dtype, r)
        except AssertionError as err:
            raise AssertionError(f"grad {i}: {err}") from None
    compiled = torch.compile(fn) if not a.dry_run else fn
    reps = dict(reps=10, warmup=3) if not a.dry_run else dict(reps=2, warmup=1)
    t = {k: seconds(step(f), a.device, **reps) * 1e3 for k, f in (("eager", fn), ("torch_compile", compiled), ("thunder", jf))}
    return dict(size=size, times_ms=t, thunder_vs_eager=t["eager"] / t["thunder"],
                thunder_vs_compile=t["torch_compile"] / t["thunder"], thunder_first_call_s=first,
                grad_errors_vs_f64=errors)


def large_case(a, fn, make, copy_bps):
    """A fusion case at a GPU's size (hundreds of MB moved): no_grad forward, times and the
    bytes moved per second as a fraction of the copy's."""
    args = make()
    with torch.no_grad():
        expected = fn(*args)
        jf = thunder.jit(fn, executors=executors(a))
        t0 = time.perf_counter()
        got = jf(*args)
        sync(a.device)
        first = time.perf_counter() - t0
        # against float64 from the same inputs (common.close): a bf16 rotary embedding's two rounded
        # products cancel, so eager itself is a few bf16 units off there (the first H200 run)
        reference = fn(*[x.double() if x.is_floating_point() else x for x in args])
        close(got, expected, expected.dtype, reference)
        compiled = torch.compile(fn) if not a.dry_run else fn
        reps = dict(reps=10, warmup=3) if not a.dry_run else dict(reps=2, warmup=1)
        t = {k: seconds(lambda f=f: f(*args), a.device, **reps) * 1e3 for k, f in (("eager", fn), ("torch_compile", compiled), ("thunder", jf))}
    moved = sum(x.nbytes for x in args if isinstance(x, torch.Tensor)) + expected.nbytes
    return dict(times_ms=t, thunder_vs_eager=t["eager"] / t["thunder"], thunder_vs_compile=t["torch_compile"] / t["thunder"],
                **{f"{k}_fraction_of_copy": moved / (v / 1e3) / copy_bps for k, v in t.items()},
                thunder_first_call_s=first, mbytes_moved=moved / 2**20)


def large_cases(a):
    """name -> (fn, make): benchmarks/fusion.py's functions at a GPU's sizes (dry run: tiny)."""
    import fusion

    n, w = (16384, 4096) if not a.dry_run else (64, 32)

    def r(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=a.device, dtype=dtype)

    cases = {}
    for dt, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        cases[f"bias+gelu(tanh)+residual {n}x{w} {tag}"] = (fusion.bias_gelu_residual, lambda dt=dt: [r(n, w, dtype=dt), r(w, dtype=dt), r(n, w, dtype=dt)])
        cases[f"rmsnorm {n}x{w} {tag}"] = (fusion.rms_norm, lambda dt=dt: [r(n, w, dtype=dt), r(w, dtype=dt)])
    s = 1024 if not a.dry_run else 16
    cases[f"scale+mask+softmax 64x{s}x{s} bf16"] = (
        fusion.scale_mask_softmax, lambda: [r(64, s, s, dtype=torch.bfloat16),
                                            torch.full((s, s), float("-inf"), device=a.device).triu(1).bfloat16()])
    cases[f"rotary embedding 8x32x{s * 2}x128 bf16"] = (
        fusion.rotary, lambda: [r(8, 32, s * 2, 128, dtype=torch.bfloat16), r(s * 2, 128, dtype=torch.bfloat16),
                                r(s * 2, 128, dtype=torch.bfloat16)])
    v = 32000 if not a.dry_run else 64
    cases[f"cross-entropy {n // 2}x{v} f32"] = (
        fusion.cross_entropy, lambda: [r(n // 2, v), torch.randint(0, v, (n // 2,), device=a.device)])
    return cases


def main():
    a = parse(__doc__, lambda ap: ap.add_argument("--budget", type=float, default=150))
    deadline = time.time() + a.budget
    res = Results("bench", a)
    import fusion

    fusion.DEVICE = a.device
    if a.dry_run:  # (see the docstring)
        torch.compile = lambda f, *args, **kw: f
    cp = res.run("device-to-device copy", lambda: copy_bandwidth(a))
    copy_bps = cp.get("bytes_per_s") or float("nan")
    blocks = ("gpt", "llama") if not a.dry_run else ("llama",)
    items = [(f"{w} block training step bfloat16", lambda w=w: block_step(a, w, torch.bfloat16)) for w in blocks]
    large = large_cases(a)
    if a.dry_run:
        large = {k: v for k, v in large.items() if "rmsnorm" in k}
    items += [(f"large {k}", lambda fn=fn, make=make: large_case(a, fn, make, copy_bps)) for k, (fn, make) in large.items()]
    names = [n for n in fusion.CASES if not n.startswith("gpt block")]
    if a.dry_run:
        names = ["rotary embedding 4x16x512x64"]
    items += [(f"fusion.py {n}", lambda n=n: fusion_case(a, n, copy_bps)) for n in names]
    items += [(f"{w} block training step float32", lambda w=w: block_step(a, w, torch.float32)) for w in blocks]
    for i, (name, fn) in enumerate(items):
        if time.time() > deadline:
            res.set(left_out=[n for n, _ in items[i:]])
            print(f"out of time: left out {[n for n, _ in items[i:]]}", file=sys.stderr)
            return
        res.run(name, fn)


if __name__ == "__main__":
    main()
