"""Part (a) of benchmarks/gpu/run.sh: the op harness on CUDA with the cuda executor.

1. The op test files (tests/test_ops_*.py) with THUNDER_TEST_DEVICE=cuda: every check()'s
   arguments on the GPU, eager there, and the fused variant's regions as the cuda executor's real
   kernels (tests/op_harness.py); one pytest per file (a junit report each, so a part stopped by
   its timeout keeps the files done), pytest-xdist's workers where it is installed.
2. Values and grads against eager, f32 and bf16: the fused patterns of tests/test_cuda.py's
   CASES and of benchmarks/fusion.py's cases, under thunder.jit with the cuda executor, a
   training step each (backward of a weighted sum of the outputs).
Dry run: the CPU, one op test file narrowed with -k (the emulated CUDA variant), a few patterns.
"""
import glob
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from common import ROOT, Results, close, executors, parse

import torch

import thunder


def pytest_file(a, path, budget_s, extra):
    env = dict(os.environ, THUNDER_TEST_DEVICE=a.device, PYTHONUNBUFFERED="1")
    junit = os.path.join("/tmp", f"junit-{os.path.basename(path)}.xml")
    # -P: the current folder (the checkout) is not put on sys.path: thunder comes from run.sh's links
    cmd = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", path, *extra]
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, timeout=budget_s, capture_output=True, text=True)
        tail = r.stdout[-1500:]
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"{path} ran past {budget_s:.0f} s") from None
    tests = ET.parse(junit).getroot().iter("testcase")
    failed = []
    total = 0
    for t in tests:
        total += 1
        bad = t.find("failure") if t.find("failure") is not None else t.find("error")
        if bad is not None:
            failed.append(f"{t.get('name')}: {(bad.get('message') or '')[:300]}")
    print(tail, flush=True)
    if failed:
        raise AssertionError(f"{len(failed)} of {total} failed: " + " | ".join(failed[:15]))
    return dict(tests=total)


def _grad_cases(dry):
    import test_cuda
    import fusion

    cases = {f"test_cuda {k}": (fn, make) for k, (fn, make) in test_cuda.CASES.items()
             if all(t.is_floating_point() for t in make())}
    if not dry:
        fusion.DEVICE = "cpu"  # (inputs are made on the CPU, moved below)
        for name, (fn, make, training) in fusion.CASES.items():
            if not name.startswith("gpt block") and "cross-entropy" not in name:
                cases[f"fusion {name}"] = (fn, make)
    else:
        cases = {k: v for k, v in cases.items() if "rotary_cat" in k}
    return cases


def grads(a, fn, make, dtype):
    gen = torch.Generator().manual_seed(0)
    inputs = [t.to(a.device, dtype) for t in make()]
    leaves = [t.detach().requires_grad_() for t in inputs]
    ref = [t.detach().requires_grad_() for t in inputs]
    jf = thunder.jit(fn, executors=executors(a))
    out, expected = jf(*leaves), fn(*ref)
    outs = out if isinstance(out, tuple) else (out,)
    exps = expected if isinstance(expected, tuple) else (expected,)
    for o, e in zip(outs, exps, strict=True):
        close(o, e, dtype)
    weights = [torch.randn(e.shape, generator=gen).to(a.device, e.dtype) for e in exps]
    sum((o * w).sum() for o, w in zip(outs, weights)).backward()
    sum((e * w).sum() for e, w in zip(exps, weights)).backward()
    for i, (x, y) in enumerate(zip(leaves, ref)):
        if y.grad is not None:
            close(x.grad, y.grad, dtype)
    return dict(regions=sum(" = fusion_" in line for line in str(thunder.last_traces(jf)[-1]).splitlines()))


def main():
    a = parse(__doc__, lambda ap: ap.add_argument("--budget", type=float, default=150))
    res = Results("ops", a)
    deadline = time.time() + a.budget
    if a.dry_run:
        files, extra = [os.path.join(ROOT, "tests", "test_ops_shape.py")], ["-k", "matches_eager and (cat_same or pad_types)"]
    else:
        files = sorted(glob.glob(os.path.join(ROOT, "tests", "test_ops_*.py")))
        import importlib.util
        extra = ["-n", "8"] if importlib.util.find_spec("xdist") else []
    grads_share = 0.2 if not a.dry_run else 0.4
    per_file = (a.budget * (1 - grads_share)) / len(files)
    for path in files:
        left = deadline - time.time() - a.budget * grads_share
        res.run(f"pytest {os.path.relpath(path, ROOT)} on {a.device}",
                lambda: pytest_file(a, path, max(10.0, min(left, per_file * 2)), extra))
    for name, (fn, make) in _grad_cases(a.dry_run).items():
        for dtype in (torch.float32, torch.bfloat16):
            if time.time() > deadline:
                res.set(truncated="out of time before " + name)
                return
            res.run(f"values+grads {name} {str(dtype)[6:]}", lambda: grads(a, fn, make, dtype))


if __name__ == "__main__":
    main()
