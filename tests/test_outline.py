"""Outlining (runtime/outline.py): repeated runs of statements in a generated program become one
function defined once and called per copy. Values and grads against eager; copies that differ
are not merged; a program without repetition is the inline program byte for byte; a tensor dies
where it died inline."""
import copy
import gc
import re
import weakref

import pytest
import torch

import thunder
from thunder.runtime import codegen, outline
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
from test_models import ATOL, DECODER, RTOL, _hf, _ids  # noqa: E402


def _blocks(source):
    """{block name: the number of its calls} in a program's source."""
    names = re.findall(r"^def (_block_\d+)\(", source, re.M)
    return {n: len(re.findall(rf"(?:= |^  ){n}\(", source, re.M)) for n in names}


def _main_and_blocks(source, fn_name):
    """(the text of def fn_name onwards, the text of the block functions)."""
    at = source.index(f"def {fn_name}(")
    first = source.find("def _block_")
    return source[at:], source[first:at] if 0 <= first < at else ""


def _llama(layers):
    return _hf(transformers.LlamaConfig, transformers.LlamaForCausalLM, **dict(DECODER, num_hidden_layers=layers))


def _step_as_eager(jf, model, reference, ids):
    """A training step of jf (model jitted) against reference's: loss, logits, every grad."""
    out, expected = jf(input_ids=ids, labels=ids), reference(input_ids=ids, labels=ids)
    torch.testing.assert_close(out.loss, expected.loss, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(out.logits, expected.logits, rtol=RTOL, atol=ATOL)
    out.loss.backward()
    expected.loss.backward()
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL, msg=lambda m: f"{name}: {m}")


def test_llama_training_and_inference_call_one_block_per_layer():
    model = _llama(4)
    reference = copy.deepcopy(model)
    ids = _ids()
    jf = thunder.jit(model)
    _step_as_eager(jf, model, reference, ids)
    forward = str(thunder.last_traces(jf)[-1])
    backward = str(thunder.last_backward_traces(jf)[-1])
    for source, fn_name in ((forward, "forward"), (backward, "backward")):
        calls = _blocks(source)
        assert len(calls) == 1 and min(calls.values()) >= 3, (calls, source)
        _check_dels(*_main_and_blocks(source, fn_name))

    with torch.no_grad():
        got, want = jf(input_ids=ids).logits, reference(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
    calls = _blocks(str(thunder.last_traces(jf)[-1]))
    assert len(calls) == 1 and min(calls.values()) >= 3, calls


def _check_dels(main, block):
    """The caller deletes only names it passes, before the call (what died inside the copy
    inline), some copy does, and the block deletes each argument after its last use."""
    dying = 0
    for m in re.finditer(r"^  _args = \[(.*)\]\n(?:  del (.*)\n)?.*_block_0\(_args\)$", main, re.M):
        if m.group(2):
            assert set(m.group(2).split(", ")) <= set(m.group(1).split(", ")), m.group()
            dying += 1
    assert dying, main
    lines = block.splitlines()
    params = lines[1].split(" = ")[0].strip().split(", ")
    for p in params:
        uses = [i for i, ln in enumerate(lines[3:], 3) if re.search(rf"\b{p}\b", ln.split("  #")[0])]
        assert lines[uses[-1]].startswith("  del ") and uses[-2] == uses[-1] - 1, (p, block)


class _Layer(torch.nn.Module):
    def __init__(self, scale, dim):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
        self.scale, self.dim = scale, dim

    def forward(self, x):
        h = self.a(x).reshape(2, 4, 4, 4).transpose(1, 2)
        h = torch.softmax(h * self.scale, dim=self.dim)
        h = torch.tanh(h.transpose(1, 2).reshape(2, 4, 16))
        h = torch.relu(self.b(h)).reshape(2, 4, 4, 4).permute(0, 2, 1, 3).reshape(2, 4, 16)
        return x + torch.sigmoid(h) * x.exp().log()


def test_layers_differing_in_a_float_or_an_int_are_not_merged():
    """Four layers that look alike but scale by 1.0, 2.0, 1.0, 3.0 and one takes its softmax over
    another dim: every op is a statement (torch executor), values and grads as eager, and no block
    holds an op that differs between the layers it would be called for."""
    torch.manual_seed(0)
    layers = torch.nn.ModuleList([_Layer(1.0, -1), _Layer(2.0, -1), _Layer(1.0, -2), _Layer(3.0, -1),
                                  _Layer(1.0, -1), _Layer(1.0, -1)])

    def fn(x):
        for layer in layers:
            x = layer(x)
        return x

    x = torch.randn(2, 4, 16)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    jf = thunder.jit(fn, executors=["torch"])
    out, ref = jf(xa), fn(xb)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(ref)
    params = list(layers.parameters())
    got = torch.autograd.grad(out, [xa, *params], g)
    want = torch.autograd.grad(ref, [xb, *params], g)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    forward = str(thunder.last_traces(jf)[-1])
    main, blocks = _main_and_blocks(forward, "forward")
    assert blocks, forward  # (the last two layers are the first's copies)
    for literal in ("2.0)", "3.0)", "dim=-2", ", -2)"):
        assert literal not in blocks, (literal, blocks)
    assert "2.0)" in main and "3.0)" in main


def _run_records(n_layers, swap=None):
    """A synthetic program of n_layers copies of 9 statements as records (each layer reads the
    previous layer's x and a weight w_k; layer `swap` passes two operands the other way), with
    the `del` lines codegen's _Dels writes; a string literal naming locals, the same in every
    layer); (records, params, local names)."""
    params = ["x0"] + [f"w{k}" for k in range(n_layers)]
    stmts = []
    for k in range(n_layers):
        x, w = f"x{k}", f"w{k}"
        a, b, c, d, e, f_, g, h = (f"{v}{k}" for v in "abcdefgh")
        sub = f"op({w}, {a})" if k == swap else f"op({a}, {w})"
        stmts += [f"{a} = op({x})", f"{b} = {sub}", f"{c} = op({b}, {x})", f"{d} = op({c})", f"{e} = op({d}, {a})",
                  f"{f_} = op({e}, scale=2)", f"{g} = op({f_}, 'x1 a1')", f"{h} = op({g}, {b})",
                  f"x{k + 1} = op({h}, {x})"]
    stmts.append(f"return x{n_layers}")
    return _records(stmts, params)


def _records(stmts, params):
    """Records of statements `name = op(...)` (the last the return) with the `del` lines
    codegen's _Dels writes; (records, params, local names)."""
    bound = set(params) | {s.split(" = ")[0] for s in stmts if " = " in s}
    uses = [[n for n in re.findall(r"\w+", re.sub(r"'[^']*'", "", s.split(" = ", 1)[-1])) if n in bound]
            for s in stmts]
    last = {}
    for i, u in enumerate(uses):
        for name in u:
            last[name] = i
    records = []
    for i, s in enumerate(stmts):
        records.append(outline.Stmt(s, fixed=s.startswith("return")))
        defined = [s.split(" = ")[0]] if " = " in s else []
        dead = [v for v in defined + uses[i] if last.get(v, -1) <= i and v not in params and i < len(stmts) - 1]
        outline.add_dels(records, list(dict.fromkeys(dead)))
    return records, params, bound


def _execute(records, params, local_names, enabled):
    """The events (ops and frees, in order) of running the records' program, outlined or inline."""
    found = outline.outline(records, params, local_names, lambda n: None, set()) if enabled else None
    blocks, body = found if found else ([], outline.inline_lines(records))
    source = "\n".join(blocks + [f"def run({', '.join(params)}):"] + body) + "\n"
    events, counter = [], [0]

    class Obj:
        def __init__(self):
            counter[0] += 1
            self.id = counter[0]

        def __del__(self):
            events.append(f"free {self.id}")

    def op(*args, **kwargs):
        events.append(f"op {[a.id for a in args if isinstance(a, Obj)]}")
        return Obj()

    ns = {"op": op}
    exec(source, ns)  # noqa: S102 - the program under test
    inputs = [Obj() for _ in params]
    result = ns["run"](*inputs)
    del inputs
    out = result.id
    del result
    return events, out, source


def test_tensors_die_where_they_died_inline():
    """Every value of the synthetic program is freed at the same point of the run outlined as
    inline (the caller deletes what dies inside a copy before the call; the block deletes it at
    its last use); the text says so too."""
    records, params, local_names = _run_records(4)
    inline, out_inline, _ = _execute(records, params, local_names, False)
    events, out, source = _execute(records, params, local_names, True)
    assert _blocks(source) == {"_block_0": 4}, source
    assert (events, out) == (inline, out_inline)
    # x1 dies inside the second copy: deleted by the caller before the call, by the block after its last use
    main, blocks = _main_and_blocks(source, "run")
    assert re.search(r"_args = \[x1, w1\]\n  del x1\n  x2, = _block_0\(_args\)", main), main
    assert "x1 = op(h0, x0)\n  del h0, x0\n" in blocks, blocks


def test_copy_with_other_dataflow_is_not_merged():
    """Layer 2 passes two operands the other way: its statements erase to the same key as the
    others', but it is no renaming of them, so it stays inline; the run is the inline run."""
    records, params, local_names = _run_records(5, swap=2)
    events, out, source = _execute(records, params, local_names, True)
    main, blocks = _main_and_blocks(source, "run")
    assert "b2 = op(w2, a2)" in main, source
    assert "_args = [x2, w2]" not in main, source
    assert (events, out) == _execute(records, params, local_names, False)[:2]


def test_program_without_repetition_is_the_inline_program(monkeypatch):
    def fn(x, w):
        y = torch.nn.functional.linear(x, w).reshape(4, 2, 8).transpose(0, 1)
        z = torch.softmax(y, -1).sum(0).cumsum(0)
        s = torch.tanh(z).flip(0).roll(1, 0)
        return torch.cat([s, z], 1).mean(1).sigmoid().exp().log1p().sqrt().neg().abs().unsqueeze(0)

    x, w = torch.randn(4, 16), torch.randn(16, 16)
    texts = []
    for enabled in (True, False):
        monkeypatch.setattr(outline, "ENABLED", enabled)
        jf = thunder.jit(fn, executors=["torch"])
        torch.testing.assert_close(jf(x, w), fn(x, w))
        texts.append(str(thunder.last_traces(jf)[-1]))
    assert texts[0] == texts[1]
    assert texts[0].count("\n") > 2 * outline.MIN_PERIOD  # (long enough to be searched)


class _Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.qkv, self.proj = torch.nn.LayerNorm(16), torch.nn.Linear(16, 48), torch.nn.Linear(16, 16)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, 2, C // 2).transpose(1, 2) for t in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(y.transpose(1, 2).reshape(B, T, C))


def test_symbolic_values_program_with_blocks_compiles_once():
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[_Attention() for _ in range(4)])
    jm = thunder.jit(model, cache="symbolic values")
    for T in (5, 9, 12):
        x = torch.randn(2, T, 16)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, ref = jm(xa), model(xb)
        torch.testing.assert_close(out, ref)
        g = torch.randn_like(ref)
        got = torch.autograd.grad(out, [xa, *model.parameters()], g)
        want = torch.autograd.grad(ref, [xb, *model.parameters()], g)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert thunder.compile_stats(jm).cache_misses == 1, thunder.compile_stats(jm).last_generalization
    backward = str(thunder.last_backward_traces(jm)[-1])
    # (compiled once with its symbols: the blocks take them in their _args as the other free names)
    assert re.search(r"^def _block_0\(_args\):\n  .*\b_sym0, _sym1\b.* = _args$", backward, re.M), backward
    assert min(_blocks(backward).values()) >= 3, backward


def test_python_source_switch_gives_the_inline_program(monkeypatch):
    """The outlined Llama forward and the inline one are two sources of one module: with the
    switch off python_source writes no block, and more lines."""
    jf = thunder.jit(_llama(3))
    ids = _ids()
    jf(input_ids=ids, labels=ids)
    trace = next(t for t in thunder.last_traces(jf) if t.producer == "thunder-fuse (forward)")
    module = trace.module()
    outlined = codegen.python_source(module, "forward")
    monkeypatch.setattr(outline, "ENABLED", False)
    inline = codegen.python_source(module, "forward")
    assert _blocks(outlined) and not _blocks(inline) and "_args" not in inline
    assert len(inline.splitlines()) > len(_main_and_blocks(outlined, "forward")[0].splitlines())


def test_program_cache_stores_and_loads_outlined_programs(tmp_path, monkeypatch):
    """A stored program with blocks (its source exec'd whole: the blocks and the function) runs
    as eager when another jit loads it from the disk."""
    monkeypatch.setenv("THUNDER_PROGRAM_CACHE", str(tmp_path))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[_Attention() for _ in range(4)])
    x = torch.randn(2, 6, 16)
    expected = torch.autograd.grad(model(x).sum(), list(model.parameters()))
    for process in range(2):
        jm = thunder.jit(model)
        out = jm(x)
        torch.testing.assert_close(out, model(x))
        for a, b in zip(torch.autograd.grad(out.sum(), list(model.parameters())), expected, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
        assert thunder.compile_stats(jm).disk_loads == process
        sources = [str(thunder.last_backward_traces(jm)[-1])]
        if process == 0:  # (the execution trace of a loaded program holds its entry alone)
            sources.append(str(thunder.last_traces(jm)[-1]))
        for source in sources:
            assert min(_blocks(source).values(), default=0) >= 3, source


def test_statement_reading():
    """A statement's key erases the local names it binds and reads, not a keyword argument's
    name that is also a local's, nor a string's text, nor an attribute after a dot; a fusion
    callee becomes its kernel's identity."""
    local = {"t5", "weight", "dim", "x"}
    p = outline._parse("t5 = fusion_3(torch.sum(x, dim=dim), 'x weight', weight.T)", local,
                       lambda n: 7 if n == "fusion_3" else None)
    assert (p.defs, p.uses, p.names) == (["t5"], ["x", "dim", "weight"], ["t5", "x", "dim", "weight"])
    assert p.key == "\0 = \x017\x01(torch.sum(\0, dim=\0), 'x weight', \0.T)"


def test_two_kinds_of_blocks():
    """Three layers of one kind, then three of another (statements repeated within a layer too):
    the second search finds the second kind."""
    params = ["x0", "w"]
    stmts, k = [], 0
    for kind, ops in (("a", 9), ("b", 11)):
        for _ in range(3):
            x = f"x{k}"
            names = [f"{kind}{k}_{i}" for i in range(ops)]
            stmts.append(f"{names[0]} = op({x}, w)")
            stmts += [f"{names[i]} = op({names[i - 1]}{', x' + str(k) if i % 3 == 0 else ''}, '{kind}')"
                      for i in range(1, ops)]
            stmts.append(f"x{k + 1} = op({names[-1]}, {x})")
            k += 1
    stmts.append(f"return x{k}")
    records, params, local_names = _records(stmts, params)
    events, out, source = _execute(records, params, local_names, True)
    calls = _blocks(source)  # (the first search's windows may take a statement of the other kind)
    assert len(calls) == 2 and min(calls.values()) >= 2 and sum(calls.values()) >= 5, source
    assert (events, out) == _execute(records, params, local_names, False)[:2]


class _Frees(TorchDispatchMode):
    """The aten ops run and, after each, the tensors (numbered as made) freed before the next."""

    def __init__(self):
        super().__init__()
        self.events, self.made = [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.events.append((str(func), set()))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.made += 1
                weakref.finalize(t, lambda n=self.made: self.events[-1][1].add(n))
        return out


def _step_frees(monkeypatch, enabled):
    monkeypatch.setattr(outline, "ENABLED", enabled)
    model, ids = _llama(4), _ids()
    jf = thunder.jit(model)
    for _ in range(2):  # (the forward and the backward compiled with the switch set so)
        model.zero_grad(set_to_none=True)
        jf(input_ids=ids, labels=ids).loss.backward()
    model.zero_grad(set_to_none=True)
    frees = _Frees()
    gc.collect()
    gc.disable()  # (a collection would free at a point of its own)
    try:
        with frees:
            loss = jf(input_ids=ids, labels=ids).loss
            loss.backward()
            del loss
            events = [(op, frozenset(freed)) for op, freed in frees.events]
    finally:
        gc.enable()
    return events, _blocks(str(thunder.last_backward_traces(jf)[-1]))


def test_llama_step_frees_each_tensor_where_the_inline_program_does(monkeypatch):
    """A training step of the 4-layer Llama under a dispatch mode: the same aten ops in the same
    order, and after each the same tensors freed, outlined as inline (no tensor here is
    returned by a block for another copy only)."""
    outlined, blocks = _step_frees(monkeypatch, True)
    inline, no_blocks = _step_frees(monkeypatch, False)
    assert blocks and min(blocks.values()) >= 3 and not no_blocks
    assert [op for op, _ in outlined] == [op for op, _ in inline]
    for i, (a, b) in enumerate(zip(outlined, inline)):
        assert a == b, (i, a, b)


def test_symbolic_values_llama_with_blocks():
    """The 4-layer Llama's training step at four sequence lengths: one compile with its symbols
    (batch and length, passed on to the blocks), loss, logits and grads as eager at each."""
    model = _llama(4)
    reference = copy.deepcopy(model)
    jf = thunder.jit(model, cache="symbolic values")
    for T in (8, 11, 13, 17):
        ids = torch.randint(0, 96, (2, T), generator=torch.Generator().manual_seed(T))
        _step_as_eager(jf, model, reference, ids)
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
    stats = thunder.compile_stats(jf)
    assert stats.cache_misses == 1, stats.last_generalization
    assert stats.last_symbolic_compile == "compiled once with symbolic sizes"
    backward = str(thunder.last_backward_traces(jf)[-1])
    assert len(re.findall(r"= _block_0\(_args\)$", backward, re.M)) >= 3, backward
    assert len(re.findall(r"^  _args = \[.*, _sym0, _sym1, .*\]$", backward, re.M)) >= 3, backward


def test_a_program_compiled_once_with_its_symbols_has_blocks():
    # (runtime/symbolic_program.py: the program reads its symbols from the arguments' sizes
    # before its body; the outliner took them for names used before bound and outlined nothing)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[_Attention() for _ in range(4)])
    jm = thunder.jit(model, cache="symbolic values")
    with torch.no_grad():
        for T in (5, 9, 12):
            x = torch.randn(2, T, 16)
            torch.testing.assert_close(jm(x), model(x))
    stats = thunder.compile_stats(jm)
    assert stats.cache_misses == 1 and stats.last_symbolic_compile == "compiled once with symbolic sizes"
    program = str(thunder.last_traces(jm)[-1])
    assert "  _sym1 = input.shape[1]\n" in program and min(_blocks(program).values()) >= 3, program
