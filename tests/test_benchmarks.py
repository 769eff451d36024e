"""benchmarks/realistic.py runs (its --quick mode: tiny models, one round, torch.compile left
out), so the script cannot rot: every model and workload, thunder's results checked against
eager's by the script itself (it exits on a mismatch)."""
import os
import sys

import pytest

pytest.importorskip("transformers", reason="transformers is not installed")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import realistic  # noqa: E402


def test_realistic_benchmark_quick_mode(capsys):
    ratios = realistic.main(["--quick", "--no-compile"])
    out = capsys.readouterr().out
    assert "CPU: " in out and "avx512f=" in out and "amx_bf16=" in out
    assert set(ratios) == set(realistic.WORKLOADS)
    for workload, rows in ratios.items():
        assert len(rows) == len(realistic.MODELS)
        assert all(vs_eager > 0 for vs_eager, _ in rows)
        for model in realistic.MODELS:
            assert f"| {model} | {workload}" in out


def test_optimizer_step_benchmark_quick_mode(capsys):
    import optimizer_step  # (the script checks thunder's parameters against eager's itself)

    ratios = optimizer_step.main(["--quick", "--no-compile"])
    assert set(ratios) == set(optimizer_step.OPTIMIZERS) and all(r > 0 for r in ratios.values())
    assert "CPU: " in capsys.readouterr().out


def test_train_step_benchmark_quick_mode(capsys):
    import train_step  # (the script checks every engine's losses against eager's itself)

    result = train_step.main(["--quick", "--no-compile"])
    assert set(result) == set(realistic.MODELS)
    assert all(ms[k] > 0 for ms in result.values() for k in ("eager", "thunder step", "thunder model"))
    assert "CPU: " in capsys.readouterr().out
