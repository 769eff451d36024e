"""docs/dialect.md is generated from the registry and must be current; the README demo runs."""
import os
import subprocess
import sys

import thunder.ops  # noqa: F401
from thunder.tools.gen_dialect_doc import render


def test_dialect_doc_is_up_to_date():
    path = os.path.join(os.path.dirname(__file__), "..", "docs", "dialect.md")
    with open(path) as f:
        assert f.read() == render(), "docs/dialect.md is stale: run python -m thunder.tools.gen_dialect_doc"


def test_every_op_is_documented_with_its_torch_name():
    text = render()
    for op in thunder.ops.registry.OPS.values():
        assert f"`{op.qualname}`" in text and f"`{op.torch_name}`" in text


def test_the_readme_demo_runs():
    # (the README's first command runs it on a fresh machine: it must not break)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, os.path.join(root, "examples", "demo.py")], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "thunder.jit result matches eager: (8, 128, 128) torch.float32" in run.stdout
    assert "func.func private @fusion_0" in run.stdout and "us/call" in run.stdout


def test_no_merge_conflict_markers():
    # (a merge resolved in a hurry once left them in docs/benchmarks.md)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True).stdout.split()
    if not files:  # (not a git checkout: an installed copy of the tests)
        files = [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
                 if ".git" not in d and ".venv" not in d]
    marked = []
    for name in files:
        if not name.endswith((".py", ".md", ".mlir", ".toml", ".sh", ".txt", ".cfg")):
            continue
        with open(os.path.join(root, name), errors="replace") as f:
            for i, line in enumerate(f, 1):
                if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line.rstrip("\n") == "=======":
                    marked.append(f"{name}:{i}")
    assert not marked, marked
