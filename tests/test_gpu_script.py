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
