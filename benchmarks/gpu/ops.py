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


OUTCOMES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
# a test's result line, pytest-xdist's ("[gw3] [ 45%] PASSED tests/x.py::t[a b]") or pytest's
# ("tests/x.py::t[a b] PASSED [ 45%]"); a test id may hold spaces (its parameters)
XDIST_LINE = re.compile(rf"^\[gw\d+\] \[\s*\d+%\] ({'|'.join(OUTCOMES)}) (tests/\S.*?::.*?)\s*$")
PLAIN_LINE = re.compile(rf"^(tests/\S.*?::.*?) ({'|'.join(OUTCOMES)})(?:\s+\[\s*\d+%\])?\s*$")
SELECTED = [re.compile(r"\bworkers? \[(\d+) items?\]"),  # pytest-xdist (after -k)
            re.compile(r"^collected \d+ items? / \d+ deselected / (\d+) selected", re.M),
            re.compile(r"^collected (\d+) items?\s*$", re.M)]


def read_results(text):
    """{outcome: [test ids]} of pytest -v's output, and the number of tests selected (None where
    the output does not say)."""
    results = {k: [] for k in OUTCOMES}
    for line in text.splitlines():
        m = XDIST_LINE.match(line)
        if m:
            results[m.group(1)].append(m.group(2))
            continue
        m = PLAIN_LINE.match(line)
        if m:
            results[m.group(2)].append(m.group(1))
    selected = next((int(m.group(1)) for r in SELECTED for m in [r.search(text)] if m), None)
    return results, selected


def op_tests(a, paths, budget_s, rerun_s, extra):
    """One pytest over the files (verbose: a line per test, read back even when the budget stops
    it, so a timeout keeps the tests done: the tests without a result, the one running when it
    stopped included, are `not_run`); the failures run again (up to rerun_s seconds) for their
    tracebacks."""
    env = dict(os.environ, THUNDER_TEST_DEVICE=a.device, PYTHONUNBUFFERED="1")
    # -P: the current folder (the checkout) is not put on sys.path: thunder comes from run.sh's links
    cmd = [sys.executable, "-P", "-m", "pytest", "-p", "no:cacheprovider"]
    timed_out = False
    try:
        r = subprocess.run([*cmd, "-v", "--tb=line", *paths, *extra], cwd=ROOT, env=env, timeout=budget_s,
                           capture_output=True, text=True)
        text = r.stdout
    except subprocess.TimeoutExpired as e:
        timed_out = True
        text = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    results, selected = read_results(text)
    failed = results["FAILED"] + results["ERROR"]
    done = sum(len(v) for v in results.values())
    not_run = None if selected is None else max(0, selected - done)
    if timed_out and re.search(r"^=+ .*\bin [\d.]+s", text, re.M):
        timed_out = False  # every test had run: only the interpreter's exit was slow
    reasons = [line for line in text.splitlines() if line.startswith(("FAILED ", "ERROR ", "E "))][:40]
    print(text[-3000:], flush=True)
    out = dict(passed=len(results["PASSED"]), failed=failed[:200], skipped=len(results["SKIPPED"]),
               not_run=not_run, selected=selected, timed_out=timed_out, reasons=reasons)
    if failed:  # again, with their tracebacks (the notes name the variant), also after a timeout
        one = ["-n", "0"] if "-n" in extra else []  # (one process: no workers to start for a few tests)
        try:
            again = subprocess.run([*cmd, *one, "-q", "--tb=short", *failed[:25]], cwd=ROOT, env=env,
                                   timeout=rerun_s, capture_output=True, text=True).stdout
        except subprocess.TimeoutExpired as e:
            again = (e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")) + \
                f"\n(the rerun stopped after {rerun_s:.0f} s)"
        print(again[-20000:], flush=True)
        out["failures"] = again[-12000:]
    if failed or timed_out or not results["PASSED"]:
        stopped = f", {not_run if not_run is not None else 'some'} not run (the budget stopped pytest after {budget_s:.0f} s)"
        raise AssertionError(f"{len(results['PASSED'])} passed, {len(failed)} failed"
                             + (stopped if timed_out else "")
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
    """thunder's values and grads of a weighted sum of the outputs against eager's, both measured
    against the same step in float64 from the same inputs (common.close)."""
    gen = torch.Generator().manual_seed(0)
    inputs = [t.to(a.device, dtype) for t in make()]
    leaves = [t.detach().requires_grad_() for t in inputs]
    ref = [t.detach().requires_grad_() for t in inputs]
    wide = [t.detach().double().requires_grad_() for t in inputs]
    jf = thunder.jit(fn, executors=executors(a))
    out, expected, reference = jf(*leaves), fn(*ref), fn(*wide)
    outs, exps, refs = ((x if isinstance(x, tuple) else (x,)) for x in (out, expected, reference))
    for o, e, r in zip(outs, exps, refs, strict=True):
        close(o, e, dtype, r.to(torch.float64))
    weights = [torch.randn(e.shape, generator=gen).to(a.device, e.dtype) for e in exps]
    for results in (outs, exps, refs):
        sum((o * w.to(o.dtype)).sum() for o, w in zip(results, weights)).backward()
    for x, y, z in zip(leaves, ref, wide):
        if y.grad is not None:
            close(x.grad, y.grad, dtype, z.grad)
    return dict(regions=sum(" = fusion_" in line for line in str(thunder.last_traces(jf)[-1]).splitlines()))


def main():
    a = parse(__doc__, lambda ap: ap.add_argument("--budget", type=float, default=130))
    res = Results("ops", a)
    deadline = time.time() + a.budget
    only = os.environ.get("GPU_RUN_OPS_FILES", "").split()  # (a rerun of some test files, nothing else)
    if a.dry_run:
        files, extra = [os.path.join(ROOT, "tests", "test_ops_shape.py")], ["-k", "matches_eager and (cat_same or pad_types)"]
    elif only:
        files, extra = [os.path.join(ROOT, f) for f in only], []
    else:
        # the op files and the cuda executor's own device tests (launches from autograd's thread)
        files = sorted(glob.glob(os.path.join(ROOT, "tests", "test_ops_*.py"))) + [os.path.join(ROOT, "tests", "test_cuda_device.py")]
        import importlib.util
        # tests handed out one by one (pyproject's `--dist loadfile` gave test_ops_elementwise.py's
        # 440 tests to one process, which the first device run's budget stopped)
        extra = ["-n", "12", "--dist", "load"] if importlib.util.find_spec("xdist") else []
    res.run(f"op tests ({len(files)} file(s)) on {a.device}",
            lambda: op_tests(a, files, a.budget * 0.6, min(30, a.budget * 0.15), extra))
    for name, (fn, make) in ({} if only else _grad_cases(a.dry_run)).items():
        for dtype in (torch.float32, torch.bfloat16):
            if time.time() > deadline:
                res.set(truncated="out of time before " + name)
                return
            res.run(f"values+grads {name} {str(dtype)[6:]}", lambda: grads(a, fn, make, dtype))


if __name__ == "__main__":
    main()
