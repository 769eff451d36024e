"""thunder-opt on the command line: traces from thunder.jit, pipelines, errors, exit codes."""
import io
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


def _no_traceback(r):
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Error:" not in r.stderr.split(": error:")[0], r.stderr


def run_here(args, stdin, monkeypatch, capsys):
    """thunder-opt's main in this process (a subprocess costs ~2 s of imports): an uncaught
    exception fails the test as a traceback would; (returncode, stdout, stderr) otherwise."""
    from types import SimpleNamespace

    from thunder.tools import opt

    data = stdin.encode() if isinstance(stdin, str) else stdin
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code = opt.main(args)
    out = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)


def test_non_utf8_input_is_a_diagnostic(tmp_path):
    path = tmp_path / "latin1.mlir"
    path.write_bytes("// caf\xe9\n".encode("latin-1") + thunder_trace_text().encode())
    r = subprocess.run([OPT, str(path)], capture_output=True, text=True)
    _no_traceback(r)
    assert r.stderr == f"{path}:1:7: error: not UTF-8 text (byte 0xe9)\n"

def test_non_utf8_stdin(monkeypatch, capsys):
    r = run_here(["-"], b"// ok\n\n  \xff\xfe", monkeypatch, capsys)
    assert r.returncode == 1 and r.stderr == "<stdin>:3:3: error: not UTF-8 text (byte 0xff)\n"


SCALAR_FUNC = """func.func @f(%a: f32, %b: f32) -> f32 {
  %0 = arith.addf %a, %b : f32
  return %0 : f32
}
"""

ARITH_ON_TENSORS = """func.func @g(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = arith.addf %a, %a : tensor<2xf32>
  return %0 : tensor<2xf32>
}
"""

SCF_IF = """func.func @h(%a: tensor<2xf32>) -> tensor<2xf32> {
  %c = arith.constant true
  %0 = scf.if %c -> tensor<2xf32> {
    scf.yield %a : tensor<2xf32>
  } else {
    scf.yield %a : tensor<2xf32>
  }
  return %0 : tensor<2xf32>
}
"""


def test_to_python_of_ops_it_cannot_print(monkeypatch, capsys):
    r = run_here(["-", "--to-python"], SCALAR_FUNC, monkeypatch, capsys)
    _no_traceback(r)
    assert r.stderr == ("<stdin>:1:1: error: cannot print @f as Python: codegen: @f has an argument of type f32: "
                        "its Python program takes tensors and runtime numbers (f64, i64, i1) only\n")
    for text, line, op in [(ARITH_ON_TENSORS, 2, "arith.addf"), (SCF_IF, 3, "scf.if")]:
        r = run_here(["-", "--to-python"], text, monkeypatch, capsys)
        _no_traceback(r)
        assert r.stderr.startswith(f"<stdin>:{line}:8: error: cannot print @") and \
            f"codegen: {op} is not an ltorch or thunder op" in r.stderr, r.stderr
        assert r.stdout == ""
        # the module itself is fine: printed as MLIR it round-trips
        r = run_here(["-"], text, monkeypatch, capsys)
        assert r.returncode == 0 and op in r.stdout


def test_unwritable_output(tmp_path, monkeypatch, capsys):
    text = thunder_trace_text()
    for target, reason in [(tmp_path / "no" / "such" / "dir.mlir", "No such file or directory"),
                           (tmp_path, "Is a directory")]:
        r = run_here(["-", "-o", str(target)], text, monkeypatch, capsys)
        _no_traceback(r)
        assert r.stderr == f"thunder-opt: cannot write {target}: {reason}\n"
    out = tmp_path / "out.mlir"
    r = run_here(["-", "-o", str(out)], text, monkeypatch, capsys)
    assert r.returncode == 0 and r.stdout == "" and '"ltorch.add"' in out.read_text()


def test_number_operand_given_a_tensor_is_rejected(monkeypatch, capsys):
    text = """func.func @f(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "ltorch.add"(%a, %b, %a) : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
"""
    for extra in ([], ["--to-python"]):
        r = run_here(["-", *extra], text, monkeypatch, capsys)
        _no_traceback(r)
        assert r.stderr == ("<stdin>:2:8: error: 'ltorch.add' op invalid operands: operand 'alpha' (Number) "
                            "must be a number, not a value of type tensor<2xf32>\n")


def test_to_linalg_of_a_region_without_a_linalg_form(monkeypatch, capsys):
    text = """module {
  func.func private @fusion_0(%a: tensor<2x2xf32>) -> tensor<2x2xf32> attributes {thunder.executor = "linalg"} {
    %0 = "thunder.matmul"(%a, %a) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    return %0 : tensor<2x2xf32>
  }
}
"""
    r = run_here(["-", "--to-linalg"], text, monkeypatch, capsys)
    _no_traceback(r)
    assert r.stderr == "<stdin>:2:3: error: @fusion_0 has no linalg form: no linalg lowering for thunder.matmul\n"
