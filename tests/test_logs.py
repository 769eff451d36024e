"""THUNDER_LOGS / logging.getLogger("thunder.<area>"): exact messages at the events."""
import logging
import os
import subprocess
import sys

import torch

import thunder
from thunder.core import logs


def _messages(caplog, area):
    return [r.getMessage() for r in caplog.records if r.name == f"thunder.{area}"]


def test_recompiles_log_each_cache_miss_with_its_reason(caplog):
    caplog.set_level(logging.INFO, logger="thunder.recompiles")

    def scale(x):
        return x * 2

    jf = thunder.jit(scale)
    jf(torch.ones(2))
    jf(torch.ones(2))
    jf(torch.ones(3))
    assert _messages(caplog, "recompiles") == [
        "test_recompiles_log_each_cache_miss_with_its_reason.<locals>.scale: compiling (cache miss 1): first call",
        "test_recompiles_log_each_cache_miss_with_its_reason.<locals>.scale: compiling (cache miss 2): "
        "tensor argument 0: shape changed (((2,), torch.float32, device(type='cpu'), False, (1,)) -> "
        "((3,), torch.float32, device(type='cpu'), False, (1,)))"]


def test_splits_and_fusion_regions_are_logged(caplog):
    caplog.set_level(logging.INFO, logger="thunder.splits")
    caplog.set_level(logging.INFO, logger="thunder.fusion")

    def f(x):
        if x.sum() > 0:
            return torch.tanh(x * 2 + 1)
        return x

    jf = thunder.jit(f, fusion="always")
    x = torch.ones(4, 8)
    torch.testing.assert_close(jf(x), f(x))
    line = f.__code__.co_firstlineno + 1
    assert _messages(caplog, "splits") == [
        f"test_splits_and_fusion_regions_are_logged.<locals>.f: program split at {__file__}:{line}: "
        "bool() of t1 = True (another value compiles another program)"]
    assert _messages(caplog, "fusion") == [
        "test_splits_and_fusion_regions_are_logged.<locals>.f: fusion_0 -> linalg executor: 2 ops "
        "(thunder.sum, thunder.gt)",
        "test_splits_and_fusion_regions_are_logged.<locals>.f: fusion_1 -> linalg executor: 3 ops "
        "(thunder.mul, thunder.add, thunder.tanh)"]


def test_progress_of_a_long_compile(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="thunder.progress")
    monkeypatch.setattr(logs, "PROGRESS_AFTER_S", 0.0)  # (every compile counts as long)

    def g(x, y):  # (constants no other test uses: its kernels are not in memory already)
        return torch.tanh(x * 3.0625 + 1), torch.exp(y) * 5.0625 - 1

    x = torch.randn(4, 8)
    jg = thunder.jit(g, fusion="always")
    torch.testing.assert_close(jg(x, x.t()), g(x, x.t()))
    msgs = _messages(caplog, "progress")
    name = "test_progress_of_a_long_compile.<locals>.g"
    assert [m.split(" (")[0] for m in msgs[:-1]] == [f"{name}: kernels compiled 1/2", f"{name}: kernels compiled 2/2"]
    assert msgs[-1].startswith(f"{name}: compiled 2 kernels in ") and msgs[-1].endswith(" s")


def test_thunder_logs_environment_variable_prints_on_stderr():
    code = "import torch, thunder\nthunder.jit(lambda x: x + 1)(torch.ones(2))\n"
    env = {**os.environ, "THUNDER_LOGS": "recompiles"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stderr == "[thunder.recompiles] <lambda>: compiling (cache miss 1): first call\n"
    env["THUNDER_LOGS"] = "recompiles,nonsense"
    run = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert "unknown log areas 'nonsense' (THUNDER_LOGS); expected some of recompiles, splits, fusion, " \
           "graph_breaks, progress" in run.stderr
