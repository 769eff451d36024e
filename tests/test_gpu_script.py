"""benchmarks/gpu/run.sh, the device run of the CUDA path (docs/cuda.md), in its dry-run mode on
the CPU: the same steps (thunder through the links that stand in for an install, the four parts
under their timeouts, one JSON each, the summary) at tiny sizes, so that the script is ready to
run unchanged on a GPU machine. Every item of every part must pass."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ["ops", "models", "bench", "graphs", "hotspots"]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout")
def test_dry_run(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), PYTHON=sys.executable)
    r = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "gpu", "run.sh"), "--dry-run"], env=env,
                       capture_output=True, text=True, timeout=600)
    log = (tmp_path / "run.log").read_text()
    assert r.returncode == 0, log[-6000:]
    assert "thunder from the checkout" in log
    for part in PARTS:
        doc = json.loads((tmp_path / f"{part}.json").read_text())
        assert doc["dry_run"] and doc["device"] == "cpu" and doc["status"] == "exit 0", doc
        assert doc["items"] and all(item["ok"] for item in doc["items"]), doc["items"]
        assert "left_out" not in doc and "truncated" not in doc, doc
    summary = (tmp_path / "summary.md").read_text()
    assert "0 failed item(s)" in summary
    # what comes back from the tool's $OUT: at most 8 files
    assert sorted(os.listdir(tmp_path)) == sorted(["run.log", "summary.md"] + [f"{p}.json" for p in PARTS])


def test_op_test_results_read_back():
    """The ops part reads pytest's per-test lines back (also from a run its budget stopped): test ids
    with spaces, pytest-xdist's and pytest's formats; what has no result line is not run."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "gpu"))
    try:
        import ops
    finally:
        sys.path.pop(0)
    xdist = ("created: 12/12 workers\n12 workers [5 items]\n\ntests/test_ops_nn.py::test_matches_eager[einsum_int] \n"
             "[gw1] [ 20%] FAILED tests/test_ops_nn.py::test_matches_eager[einsum_int] \n"
             "[gw0] [ 40%] PASSED tests/test_ops_elementwise.py::test_fused_broadcasting[((4, 1, 3), (5, 1))] \n"
             "[gw2] [ 60%] SKIPPED tests/test_cuda_device.py::test_region_called_from_a_new_thread \n"
             "tests/test_ops_elementwise.py::test_fused_float_special_values[dtype1] \n")
    results, selected = ops.read_results(xdist)
    assert selected == 5 and results["FAILED"] == ["tests/test_ops_nn.py::test_matches_eager[einsum_int]"]
    assert results["PASSED"] == ["tests/test_ops_elementwise.py::test_fused_broadcasting[((4, 1, 3), (5, 1))]"]
    assert len(results["SKIPPED"]) == 1 and sum(map(len, results.values())) == 3  # 2 not run
    plain = ("collected 231 items / 228 deselected / 3 selected\n\n"
             "tests/test_ops_shape.py::test_matches_eager[cat_same] PASSED                  [ 33%]\n"
             "tests/test_ops_shape.py::test_matches_eager[pad_types] ERROR                  [ 66%]\n"
             "FAILED tests/test_ops_shape.py::test_matches_eager[pad_types] - AssertionError\n")
    results, selected = ops.read_results(plain)
    assert selected == 3 and results["PASSED"] == ["tests/test_ops_shape.py::test_matches_eager[cat_same]"]
    assert results["ERROR"] == ["tests/test_ops_shape.py::test_matches_eager[pad_types]"] and not results["FAILED"]


def test_close_measures_thunder_and_eager_against_float64():
    """The parts' check with a float64 reference: thunder's error at most eager's own (plus a few
    units of the dtype). A bf16 weight grad whose input eager rounds (x + r, an op of its own)
    differs from one that keeps it in f32 by many units at its small elements, both as close to
    float64: accepted. A column sum accumulated in bf16, and one wrong element: refused."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "gpu"))
    try:
        from common import close
    finally:
        sys.path.pop(0)
    g = torch.Generator().manual_seed(0)
    x, r, up = (torch.randn(4096, 64, generator=g, dtype=torch.float64).bfloat16().double() for _ in range(3))
    h = x + r

    def weight_grad(h):  # layer norm's weight grad: sum over rows of up * (h - mean) * rstd
        return (up * (h - h.mean(-1, keepdim=True)) * torch.rsqrt(h.var(-1, unbiased=False, keepdim=True) + 1e-5)).sum(0)

    reference = weight_grad(h)
    eager = weight_grad(h.bfloat16().double()).bfloat16()  # x + r rounded, then f32-exact, rounded once
    kept = weight_grad(h).bfloat16()  # x + r kept exact, rounded once
    assert (eager.double() - kept.double()).abs().max() > 0.05  # beyond a fixed bf16 tolerance at small elements
    close(kept, eager, torch.bfloat16, reference)
    terms = (up * (h - h.mean(-1, keepdim=True)) * torch.rsqrt(h.var(-1, unbiased=False, keepdim=True) + 1e-5)).bfloat16()
    acc = torch.zeros(64, dtype=torch.bfloat16)
    for row in terms:  # accumulated in bf16: every add rounded
        acc = acc + row
    with pytest.raises(AssertionError, match="further from float64"):
        close(acc, eager, torch.bfloat16, reference)
    wrong = kept.clone()
    wrong[7] += 16  # (a quarter of the typical element)
    with pytest.raises(AssertionError, match="first at flat index 7"):
        close(wrong, eager, torch.bfloat16, reference)
    # float32: exact results stay exact (eager's error 0: a few units of rounding only)
    y = torch.randn(100, 3, generator=g)
    close(y * 2, y * 2, torch.float32, y.double() * 2)
    with pytest.raises(AssertionError):
        close(y * 2 * (1 + 1e-5), y * 2, torch.float32, y.double() * 2)
