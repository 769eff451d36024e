"""Runs the MLIR trace tests in tests/lit (thunder-opt + filecheck) with lit."""
import os
import subprocess
import sys


def test_lit_suite():
    here = os.path.dirname(__file__)
    lit = os.path.join(os.path.dirname(sys.executable), "lit")
    r = subprocess.run([lit, "-v", os.path.join(here, "lit")], capture_output=True, text=True)
    print(r.stdout[-20000:], r.stderr[-5000:])
    assert r.returncode == 0, "lit tests failed:\n" + r.stdout[-20000:]
    assert "Passed" in r.stdout
