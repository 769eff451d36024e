"""Part (a) of benchmarks/gpu/run.sh: the op harness on CUDA with the cuda executor.

1. The op test files (tests/test_ops_*.py) with THUNDER_TEST_DEVICE=cuda: every check()'s
   arguments on the GPU, eager there, and the fused variant's regions as the cuda executor's real
   kernels (tests/op_harness.py); one verbose pytest (pytest-xdist's workers where installed)
   whose per-test lines are read back, also when the budget stops it.
2. Values and grads against eager, f32 and bf16: the fused patterns of tests/test_cuda.py's
   CASES and of benchmarks/fusion.py's cases, under thunder.jit with the cuda executor, a
   training step each (backward of a weighted sum of the outputs).
Dry run: the CPU, one op test file narrowed with -k (the emulated CUDA variant), a few patterns.
"""
import glob
import os
import re
import subprocess
import sys
import time

from common import ROOT, Results, close, executors, parse

import torch

import thunder


RESULT = re.compile(r"\b(PASSED|FAILED|ERROR)\b")
TEST_ID = re.compile(r"(tests/\S+::\S+)")


def op_tests(a, paths, budget_s, extra):
    """One pytest over the files (verbose: a line per test, read back even when the budget stops
    it, so a timeout keeps the tests done)."""
    env = dict(os.environ, THUNDER_TEST_DEVICE=a.device, PYTHONUNBUFFERED="1")
    # -P: the current folder (the checkout) is not put on sys.path: thunder comes from run.sh's links
    cmd = [sys.executable, "-P", "-m", "pytest", "-v", "-p", "no:cacheprovider", "--tb=line", *paths, *extra]
    timed_out = False
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, timeout=budget_s, capture_output=True, text=True)
        text = r.stdout
    except subprocess.TimeoutExpired as e:
        timed_out = True
        text = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    counts, failed = {"PASSED": 0, "FAILED": 0, "ERROR": 0}, []
    for line in text.splitlines():
        m, t = RESULT.search(line), TEST_ID.search(line)
        if m and t and "::" in line and not line.startswith(("FAILED ", "ERROR ")):
            counts[m.group(1)] += 1
            if m.group(1) != "PASSED":
                failed.append(t.group(1))
    if timed_out and re.search(r"^=+ .*\bin [\d.]+s", text, re.M):
        timed_out = False  # every test had run: only the interpreter's exit was slow
    reasons = [line for line in text.splitlines() if line.startswith(("FAILED ", "ERROR ", "E "))][:40]
    print(text[-3000:], flush=True)
    out = dict(passed=counts["PASSED"], failed=failed[:200], errors=counts["ERROR"], reasons=reasons,
               timed_out=timed_out)
    if failed and not timed_out:  # the failures again, with their tracebacks (the notes name the variant)
        try:
            again = subprocess.run([*cmd[:cmd.index("-v")], "-q", "--tb=short", *failed[:25]], cwd=ROOT, env=env,
                                   timeout=60, capture_output=True, text=True).stdout
        except subprocess.TimeoutExpired as e:
            again = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        print(again[-20000:], flush=True)
        out["failures"] = again[-12000:]
    if failed or timed_out or not counts["PASSED"]:
        raise AssertionError(f"{counts['PASSED']} passed, {len(failed)} failed"
                             + (f", stopped after {budget_s:.0f} s" if timed_out else "")
                             + (": " + " | ".join(failed[:12]) if failed else "") + f" [{out}]")
    return out


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
        extra = ["-n", "12"] if importlib.util.find_spec("xdist") else []
    res.run(f"op tests ({len(files)} file(s)) on {a.device}",
            lambda: op_tests(a, files, a.budget * (0.75 if not a.dry_run else 0.6), extra))
    for name, (fn, make) in _grad_cases(a.dry_run).items():
        for dtype in (torch.float32, torch.bfloat16):
            if time.time() > deadline:
                res.set(truncated="out of time before " + name)
                return
            res.run(f"values+grads {name} {str(dtype)[6:]}", lambda: grads(a, fn, make, dtype))


if __name__ == "__main__":
    main()
