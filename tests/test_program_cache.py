"""The program cache on disk (thunder/runtime/persist.py): a second process calls the programs the
first compiled without tracing or running passes; changed code, closure values, torch state and
corrupt entries compile instead (the tests after the first run in this process: a new
thunder.jit of a function has no entry in memory, so its first call reads the disk as another
process's would)."""
import functools
import importlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import thunder
from thunder.runtime import persist

# run as a script in fresh processes: a function with a helper and a closure value, and an
# nn.Module; prints the compile stats of each first call and whether values and grads equal eager
SCRIPT = textwrap.dedent('''
    import json, sys, torch, thunder
    from thunder.runtime import code_objects, persist

    compiled = []  # the generated sources compiled (the loaded programs' code objects are stored with them)
    code_objects.compile = lambda source, name, mode: compiled.append(name) or compile(source, name, mode)


    def helper(x):
        return torch.tanh(x) * 2.0


    def make(k):
        def f(x, w):
            return helper(x @ w).sum(-1) * k + torch.ones(x.shape[0])
        return f


    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.GELU(), torch.nn.Linear(6, 3))
    x = torch.randn(4, 6, requires_grad=True)
    w = torch.randn(6, 6, requires_grad=True)
    report = {}
    for name, fn, args in (("fn", make(2.0), (x, w)), ("module", model, (x,))):
        wrt = [*args, *(model.parameters() if name == "module" else ())]
        jfn = thunder.jit(fn)
        out = jfn(*args)
        grads = torch.autograd.grad(out.sum(), wrt)
        expected = fn(*args)
        eager = torch.autograd.grad(expected.sum(), wrt)
        cs = thunder.compile_stats(jfn)
        report[name] = dict(disk_loads=cs.disk_loads, misses=cs.cache_misses, stages=sorted(cs.last_stage_times),
                            backward_compiles=cs.backward_compiles,
                            same=bool(torch.allclose(out, expected) and all(torch.allclose(a, b)
                                                                            for a, b in zip(grads, eager))))
    report["stats"] = persist.stats
    report["compiled"] = sorted(set(compiled))
    print(json.dumps(report))
''')

COMPILED = ["autograd", "codegen", "interpretation", "mlir emission", "passes"]


def run_script(path, cache):
    env = dict(os.environ, THUNDER_KERNEL_CACHE=str(cache / "kernels"), THUNDER_PROGRAM_CACHE=str(cache / "programs"),
               OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_second_process_runs_the_stored_programs(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    first = run_script(script, tmp_path)
    for name in ("fn", "module"):  # (the backward compiled on the first backward call, the entry stored again)
        assert first[name] == dict(disk_loads=0, misses=1, stages=COMPILED, backward_compiles=1, same=True)
    assert first["stats"]["stored"] == 2 and first["stats"]["updated"] == 2
    assert len(entries(tmp_path / "programs")) == 2  # (an entry's file replaced when stored again)
    assert first["compiled"] == ["<thunder prologue>", "<thunder>"]
    second = run_script(script, tmp_path)
    for name in ("fn", "module"):  # no trace, no pass: the programs from disk (the backward too), as eager
        assert second[name] == dict(disk_loads=1, misses=1, stages=["program cache"], backward_compiles=0, same=True)
    assert second["stats"] == dict(loaded=2, stored=0, updated=0, rejected=0, unportable=0)
    assert second["compiled"] == []  # (nor any compile(): the code objects stored with the programs)


def make(k):
    def f(x):
        return torch.sin(x) * k + torch.zeros(x.shape)  # (torch.zeros: reads the default dtype)
    return f


@pytest.fixture
def program_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("THUNDER_PROGRAM_CACHE", str(tmp_path))
    before = dict(persist.stats)
    yield tmp_path, lambda: {k: persist.stats[k] - before[k] for k in before}


def first_call(fn, *args, **options):
    jfn = thunder.jit(fn, **options)
    out = jfn(*args)
    torch.testing.assert_close(out, fn(*args), rtol=0, atol=0)
    return thunder.compile_stats(jfn)


def entries(folder):
    return sorted(os.path.join(d, f) for d, _, files in os.walk(folder) for f in files if f.endswith(".entry"))


def test_closure_value_and_default_dtype_miss(program_cache):
    folder, counts = program_cache
    x = torch.randn(5)
    assert first_call(make(2.0), x).disk_loads == 0 and counts()["stored"] == 1
    assert first_call(make(2.0), x).disk_loads == 1  # the same closure value: loaded
    cs = first_call(make(3.0), x)  # another value in the cell: the prologue refuses the entry
    assert cs.disk_loads == 0 and "interpretation" in cs.last_stage_times
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        cs = first_call(make(2.0), x)
        assert cs.disk_loads == 0 and "interpretation" in cs.last_stage_times
        assert thunder.last_traces  # (the float64 program ran: assert_close checked its dtype)
    finally:
        torch.set_default_dtype(default)
    assert counts()["rejected"] == 0 and len(entries(folder)) == 3


def test_a_loaded_program_reads_as_mlir(program_cache):
    # (the README's demo prints the execution trace's MLIR: it raised when run a second time)
    x = torch.randn(64, 64)
    f = lambda x: torch.softmax(x + 1, -1)  # noqa: E731
    stored = thunder.jit(f, fusion="always")
    expected = stored(x)
    torch.testing.assert_close(expected, f(x))
    loaded = thunder.jit(f, fusion="always")
    torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)
    assert thunder.compile_stats(loaded).disk_loads == 1
    want, got = thunder.last_traces(stored)[-1], thunder.last_traces(loaded)[-1]
    assert "func.func private @fusion_0" in got.to_mlir() and got.to_mlir() == want.to_mlir()
    assert got.to_mlir(debug_info=True) == want.to_mlir(debug_info=True) and str(got) == str(want)


def loss_and_logits(x, w):
    logits = torch.tanh(x @ w)
    return (logits * logits).sum(), logits


def test_backward_for_absent_cotangents_is_stored_and_loaded(program_cache, monkeypatch):
    # the backward for the loss alone (no cotangent for the logits), compiled on the first
    # backward call, is stored with the entry; a new process loads it rather than compiling it.
    # Stored again then, the entry's prologue and description are not described again (only
    # its constants, the autograd program among them)
    folder, counts = program_cache
    described = []
    real = persist._fixed_payload
    monkeypatch.setattr(persist, "_fixed_payload", lambda *a: described.append(a) or real(*a))
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 6, generator=g, requires_grad=True), torch.randn(6, 3, generator=g, requires_grad=True)
    expected = torch.autograd.grad(loss_and_logits(x, w)[0], (x, w))
    for process in range(2):
        jf = thunder.jit(loss_and_logits)
        loss, logits = jf(x, w)
        for got, e in zip(torch.autograd.grad(loss, (x, w)), expected):
            torch.testing.assert_close(got, e)
        cs = thunder.compile_stats(jf)
        assert (cs.disk_loads, cs.backward_compiles) == ((0, 1) if process == 0 else (1, 0))
    assert any("(backward; no cotangent for outputs 1) (from the program cache)" in t.name
               for t in thunder.last_backward_traces(jf))
    assert counts() == dict(loaded=1, stored=1, updated=1, rejected=0, unportable=0)
    assert len(entries(folder)) == 1 and len(described) == 1


def test_an_object_met_twice_is_described_once(monkeypatch):
    from types import SimpleNamespace

    from thunder.runtime import portable

    seen = []
    real = portable.Describer._describe
    monkeypatch.setattr(portable.Describer, "_describe", lambda self, v, depth: seen.append(v) or real(self, v, depth))
    cd = SimpleNamespace(fn=loss_and_logits, module=None)
    inner = (torch.float32, 3)
    shared = [inner, {"k": inner}]
    d = portable.Describer(cd)
    got = d.describe({"a": shared, "b": (shared, torch.tanh, shared)})
    once = ("list", (("tuple", (("v", torch.float32), ("v", 3))), ("dict", ((("v", "k"), ("tuple", (("v", torch.float32), ("v", 3)))),))))
    assert got == ("dict", ((("v", "a"), once), (("v", "b"), ("tuple", (once, ("import", "torch", "tanh", None, 0), once)))))
    assert sum(v is shared for v in seen) == 1 and sum(v is inner for v in seen) == 1


def make_act(k):
    act = lambda x: torch.relu(x) * k  # noqa: E731 - (a function made inside another, read through f's closure)

    def f(x):
        return act(x) + 1
    return f


def test_function_made_in_a_closure(program_cache):
    folder, counts = program_cache
    x = torch.randn(5)
    first_call(make_act(2.0), x)
    assert counts()["stored"] == 1
    assert first_call(make_act(2.0), x).disk_loads == 1
    cs = first_call(make_act(3.0), x)  # (the value in the lambda's cell differs: the prologue refuses)
    assert cs.disk_loads == 0 and "interpretation" in cs.last_stage_times


def test_changed_source_misses(program_cache, tmp_path, monkeypatch):
    folder, counts = program_cache
    source = tmp_path / "pc_helpers.py"
    source.write_text("import torch\n\ndef helper(x):\n    return torch.cos(x) * 2.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    helpers = importlib.import_module("pc_helpers")
    monkeypatch.setitem(sys.modules, "pc_helpers", helpers)  # (removed after the test)

    def f(x):
        return helpers.helper(x) + 1

    x = torch.randn(5)
    first_call(f, x)
    assert first_call(f, x).disk_loads == 1
    source.write_text("import torch\n\ndef helper(x):\n    return torch.cos(x) * 3.5\n")
    importlib.reload(helpers)  # the same names, another body: the stored program is stale
    cs = first_call(f, x)
    assert cs.disk_loads == 0 and "interpretation" in cs.last_stage_times and counts()["rejected"] == 1


def test_corrupt_entries_are_ignored(program_cache):
    folder, counts = program_cache
    x = torch.randn(5)
    first_call(make(4.0), x)
    (path,) = entries(folder)
    blob = open(path, "rb").read()
    for damaged in (blob[: len(blob) // 2], blob[:100] + bytes([blob[100] ^ 1]) + blob[101:], b""):
        with open(path, "wb") as f:
            f.write(damaged)
        cs = first_call(make(4.0), x)  # ignored: compiled (and stored again), the right values
        assert cs.disk_loads == 0 and "interpretation" in cs.last_stage_times
        assert open(path, "rb").read() == blob
    assert counts()["rejected"] == 3
    assert first_call(make(4.0), x).disk_loads == 1


def test_turned_off(program_cache, monkeypatch):
    folder, counts = program_cache
    x = torch.randn(5)
    first_call(make(5.0), x, persist=False)
    assert entries(folder) == [] and counts()["stored"] == 0
    monkeypatch.setenv("THUNDER_PROGRAM_CACHE", "off")
    first_call(make(5.0), x)
    assert entries(folder) == []
    with pytest.raises(ValueError, match="persist must be True or False"):
        thunder.jit(make(5.0), persist="yes")


class Cfg:
    def __init__(self, scale):
        self.scale = scale


class Scaled(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.cfg = Cfg(scale)  # (a config object: found through the module, compared by what it holds)
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * self.cfg.scale


def test_config_object_read_through_the_module(program_cache):
    folder, counts = program_cache
    x = torch.randn(2, 3)
    first_call(Scaled(2.0), x)
    assert counts()["stored"] == 1
    assert first_call(Scaled(2.0), x).disk_loads == 1  # another instance holding the same: loaded
    cs = first_call(Scaled(3.0), x)  # (its config holds another scale)
    assert cs.disk_loads == 0 and "interpretation" in cs.last_stage_times and counts()["rejected"] == 1


SCALE_BY_TWO = functools.partial(torch.mul, other=2.0)


def test_unportable_objects_are_not_persisted(program_cache):
    folder, counts = program_cache
    # a partial's function and arguments are C fields no guard reads: not found by its name
    first_call(lambda x: SCALE_BY_TWO(x) + 1, torch.randn(3))
    assert entries(folder) == [] and counts()["unportable"] == 1

    class Config:  # an object the trace reads: no name another process could find it by
        scale = 3.0

    cfg = Config()

    def f(x):
        return x * cfg.scale

    first_call(f, torch.randn(3))
    assert entries(folder) == [] and counts()["unportable"] == 2


def test_a_size_change_generalizes_rather_than_load_per_size_programs(program_cache):
    # another process compiled a program per length (automatic_dynamic=False) and stored them;
    # under the default, the second length here makes T a symbol (automatic dynamic) instead of
    # loading that length's program, so later lengths run the program for all lengths
    def f(x):
        return torch.sin(x) * x.shape[1]

    xs = [torch.randn(2, T) for T in (5, 6, 7, 8)]
    fixed = thunder.jit(f, automatic_dynamic=False)
    for x in xs:
        fixed(x)
    _, counts = program_cache
    assert counts()["stored"] == 4
    jf = thunder.jit(f)
    for x in xs:
        torch.testing.assert_close(jf(x), f(x))
    cs = thunder.compile_stats(jf)
    assert (cs.disk_loads, cs.cache_misses, cs.cache_hits) == (1, 2, 2)
    assert cs.generalizations[-1].startswith("generalized (automatic dynamic")


def _doubled_no_grad_view(x):
    with torch.no_grad():
        v = x.view(-1)  # (requires grad, as x does, and sends it no gradient)
    return v * 2


def test_a_stored_training_program_keeps_which_results_require_grad(program_cache):
    x = torch.randn(3, 4, requires_grad=True)
    for loads in (0, 1):
        jfn = thunder.jit(_doubled_no_grad_view)
        out = jfn(x)
        assert thunder.compile_stats(jfn).disk_loads == loads
        assert out.requires_grad and out.grad_fn is not None
        out.sum().backward()
        assert x.grad is None
