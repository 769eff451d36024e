"""thunder-opt on the command line: traces from thunder.jit, pipelines, errors, exit codes."""
import os
import subprocess
import sys

import torch

import thunder

OPT = os.path.join(os.path.dirname(sys.executable), "thunder-opt")


def run(args, stdin=None):
    return subprocess.run([OPT, *args], input=stdin, capture_output=True, text=True)


def test_trace_from_jit_through_cse_and_canonicalize(tmp_path):
    def f(a, b):
        return (a + b) * (a + b)

    jf = thunder.jit(f)
    jf(torch.randn(2, 2), torch.randn(2, 2))
    path = tmp_path / "trace.mlir"
    path.write_text(thunder.last_traces(jf)[0].to_mlir())
    r = run([str(path), "--pass-pipeline=builtin.module(cse,canonicalize)"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.count('"ltorch.add"') == 1 and r.stdout.count('"ltorch.mul"') == 1


def test_stdin_decompose_and_python_output():
    text = thunder_trace_text()
    r = run(["-", "--pass-pipeline=builtin.module(thunder-decompose,cse)"], stdin=text)
    assert r.returncode == 0, r.stderr
    assert '"thunder.add"' in r.stdout and "ltorch" not in r.stdout
    r = run(["-", "--to-python"], stdin=text)
    assert r.returncode == 0 and "torch.add(" in r.stdout


def thunder_trace_text():
    jf = thunder.jit(lambda a, b: a + b)
    jf(torch.randn(3), torch.randn(3))
    return thunder.last_traces(jf)[0].to_mlir()


def test_list_passes():
    r = run(["--list-passes"])
    assert r.returncode == 0 and "thunder-decompose" in r.stdout


def test_bad_input_gives_the_mlir_diagnostic_and_exit_1():
    r = run(["-"], stdin="func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n  return %b : tensor<2xf32>\n}\n")
    assert r.returncode == 1
    assert "<stdin>:2:" in r.stderr and "undeclared SSA value" in r.stderr
    r = run(["-", "--pass-pipeline=builtin.module(no-such-pass)"], stdin=thunder_trace_text())
    assert r.returncode == 1 and "no-such-pass" in r.stderr
    r = run(["/nonexistent/file.mlir"])
    assert r.returncode == 1 and "cannot read" in r.stderr
