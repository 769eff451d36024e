"""The package declares what it needs; `python -m thunder --version` / `--check` say what it runs on."""
import importlib.metadata
import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args):
    return subprocess.run([sys.executable, "-m", "thunder", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def test_version_and_check_print_what_thunder_runs_on():
    run = _run("--version")
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"thunder-mlir {importlib.metadata.version('thunder-mlir')}\n"
    run = _run("--check")
    assert run.returncode == 0, run.stderr
    lines = {line.split("  ")[0]: line.split("  ", 1)[1].strip() for line in run.stdout.splitlines()}
    assert list(lines) == ["thunder-mlir", "torch", "MLIR bindings (torch-mlir)", "llvmlite (CUDA kernels' PTX)",
                           "cuda-bindings (CUDA kernel launches)", "CUDA"]
    assert lines["torch"] == torch.__version__
    assert lines["MLIR bindings (torch-mlir)"] == f"ok {importlib.metadata.version('torch-mlir')}"
    assert lines["llvmlite (CUDA kernels' PTX)"] == f"ok {importlib.metadata.version('llvmlite')}"
    if not torch.cuda.is_available():
        expected = "a CPU build of torch" if torch.version.cuda is None else f"torch built with CUDA {torch.version.cuda}"
        assert lines["CUDA"] == f"unavailable ({expected}, no device visible)"
    else:
        assert lines["CUDA"].startswith(f"ok {torch.version.cuda}: ")


def test_the_distribution_declares_torch_and_the_cuda_extra():
    requires = importlib.metadata.requires("thunder-mlir")
    assert "torch<2.14,>=2.11" in requires
    assert 'llvmlite>=0.50; extra == "cuda"' in requires and 'cuda-bindings; extra == "cuda"' in requires
    eps = importlib.metadata.entry_points(group="torch_dynamo_backends")
    assert [ep.value for ep in eps if ep.name == "thunder"] == ["thunder.dynamo_backend:thunder_backend"]
