"""The same block applied N times compiles the same kernels whatever N: thunder-fuse keeps a
value shared by every layer (a Llama model's attention mask) from growing one region with a
copy of every layer, so a 4-layer model's training step calls the kernels of a 2-layer one, more
often. Values and gradients against eager."""
import contextlib
import copy
import re

import pytest
import torch

import thunder
from thunder.dialects.definitions import context
from thunder.dialects.mlir import ir
from thunder.lowering.fuse import fusion_callees, region_text

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
from test_models import ATOL, DECODER, RTOL, _hf, _ids  # noqa: E402

ALWAYS = ["thunder-fuse{policy=always}"]  # (tiny tensors: policy auto would fuse little)


def _kernels(jitted):
    """(the distinct kernels of the last training program, their names normalized; the number
    of fusion calls in it)."""
    fused = [t for t in thunder.last_traces(jitted) if t.producer == "thunder-fuse (forward)"]
    assert fused, [t.producer for t in thunder.last_traces(jitted)]
    text = fused[-1].to_mlir()
    with context():
        module = ir.Module.parse(text)  # (kept alive while its ops are read)
        callees = fusion_callees(module.operation)
        kernels = {re.sub(r"@fusion_\d+", "@fusion", region_text(f)) for f in callees.values()}
    return kernels, len(re.findall(r"call @fusion_\d+", text))


def _llama(layers):
    config = dict(DECODER, num_hidden_layers=layers)
    return _hf(transformers.LlamaConfig, transformers.LlamaForCausalLM, **config)


def _train_step(model, ids):
    """One training step of model under thunder.jit (every region fused) against eager: the
    loss and every gradient. The jitted function."""
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model, transforms=ALWAYS)
    loss, expected = jitted(input_ids=ids, labels=ids).loss, reference(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(loss, expected, rtol=RTOL, atol=ATOL)
    loss.backward()
    expected.backward()
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL, msg=lambda m: f"{name}: {m}")
    return jitted


def test_llama_kernels_do_not_grow_with_depth(monkeypatch):
    """... and thunder-fuse asks the executor whether it takes a region (which lowers it to
    linalg) once per region text: the 4-layer model asks nothing the 2-layer one did not."""
    from thunder.lowering import executors, fuse

    asked = []
    linalg = executors.get("linalg")
    monkeypatch.setitem(executors.EXECUTORS, "linalg", type(linalg)(**{
        **linalg.__dict__, "accepts": lambda text, name: asked.append(text) or linalg.accepts(text, name)}))
    monkeypatch.setattr(fuse, "_ANSWERS", {})
    ids = _ids()
    k2, calls2 = _kernels(_train_step(_llama(2), ids))
    asked2 = len(asked)
    k4, calls4 = _kernels(_train_step(_llama(4), ids))
    assert k2, "no fusion region at all"
    assert k4 == k2  # the same kernels, called more often
    assert calls4 > calls2
    assert asked2 and len(asked) == asked2



def test_identical_regions_decomposed_once(monkeypatch):
    """thunder-fuse decomposes each region text once (lowering/region_reuse.py): the regions of
    the second layer are copies of the first's, with the value names and source lines that
    decomposing them gives (the module is the same as with every region decomposed); and
    outlines each region signature once (region_reuse.Outcome: kept or not, edge ops, split
    tail), the module again the same as with every region outlined anew."""
    from thunder.lowering import decompose_reuse, region_reuse
    from thunder.lowering.fuse import fuse_module

    jitted = _train_step(_llama(2), _ids())
    before = [t for t in thunder.last_traces(jitted) if t.producer == "thunder-remat (forward)"][-1]
    texts, made = [], []

    class Recorded(region_reuse.Decomposed):
        def __init__(self, context):
            super().__init__(context)
            made.append(self)

    for reuse, outcomes, ops_shared in ((True, True, False), (True, False, False), (False, False, False),
                                        (False, False, True)):
        # (ops_shared: each op's decomposition run once per signature, lowering/decompose_reuse.py)
        monkeypatch.setattr(region_reuse, "Decomposed", Recorded if reuse else lambda context: None)
        monkeypatch.setattr(region_reuse, "OUTCOMES", outcomes)
        hits, misses = region_reuse.STATS["hits"], region_reuse.STATS["misses"]
        decomposed, replayed = decompose_reuse.STATS["hits"], region_reuse.OUTCOME_STATS["hits"]
        runs = len(made)
        with context(), decompose_reuse.shared() if ops_shared else contextlib.nullcontext():
            module = ir.Module.parse(before.to_mlir(debug_info=True))
            fuse_module(module.operation, "always", "linalg")
            texts.append(module.operation.get_asm(enable_debug_info=True))
        assert (decompose_reuse.STATS["hits"] > decomposed) == ops_shared
        assert (region_reuse.STATS["hits"] > hits) == reuse
        assert (region_reuse.OUTCOME_STATS["hits"] > replayed) == outcomes
        if reuse:  # every region of a text decomposed before is a copy (a value name on two
            # ops, a view named as the op it views, included): one decomposition per text
            assert region_reuse.STATS["misses"] - misses == sum(len(d.funcs) for d in made[runs:])
    assert texts[0] == texts[1] == texts[2] == texts[3]
    assert "call @fusion_" in texts[0]


def test_regions_outlined_once_per_signature_under_policy_auto(monkeypatch):
    """thunder-fuse outlines each region signature once (lowering/region_reuse.py's Outcome):
    under policy auto, a width-256 Llama's later layers get the first layer's decisions (regions
    the cost model drops, edge views and tails left to torch, kernels split from their tail),
    replayed without the cost model, the edge rules and the executor's questions. Forward and
    backward fuse to the same module, byte for byte, as with every region outlined anew."""
    from thunder.lowering import fuse, region_reuse

    config = transformers.LlamaConfig(vocab_size=128, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(1))
    jitted = thunder.jit(model, executors=["torch"])  # (unfused: only the traces thunder-fuse gets)
    jitted(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    unfused = [t.to_mlir(debug_info=True) for t in thunder.last_traces(jitted) + thunder.last_backward_traces(jitted)
               if t.producer in ("thunder-remat (forward)", "thunder-autograd (backward)")]
    assert len(unfused) == 2
    replayed = []
    replay = fuse._replay
    monkeypatch.setattr(fuse, "_replay", lambda f, graph, ops, name, outcome, *a: replayed.append(
        (len(ops), outcome)) or replay(f, graph, ops, name, outcome, *a))
    texts = []
    for on in (True, False):
        monkeypatch.setattr(region_reuse, "OUTCOMES", on)
        hits = region_reuse.OUTCOME_STATS["hits"]
        with context():
            for text in unfused:
                module = ir.Module.parse(text)
                fuse.fuse_module(module.operation, "auto", "linalg")
                texts.append(module.operation.get_asm(enable_debug_info=True))
        assert (region_reuse.OUTCOME_STATS["hits"] > hits) == on
    assert texts[:2] == texts[2:]
    assert all("call @fusion_" in t for t in texts)
    assert any(outcome.split is not None for _, outcome in replayed)  # (a kernel whose tail torch runs)
    assert any(len(outcome.positions) < n for n, outcome in replayed)  # (edge ops left to torch)


def _all_traces(jitted):
    """Every trace of the last call and backward: Python and MLIR with locations."""
    traces = thunder.last_traces(jitted) + thunder.last_backward_traces(jitted)
    return [(t.producer, str(t), t.to_mlir(debug_info=True)) for t in traces]


@pytest.mark.parametrize("layers", [2, 4])
def test_identical_work_of_the_autograd_stage_done_once(monkeypatch, layers):
    """thunder-autograd runs a VJP rule once per signature (lowering/vjp_reuse.py) and the
    compile's passes decompose an op once per signature (lowering/decompose_reuse.py): the layers
    after the first replay what the first recorded, renamed. Every trace of the training step
    (forward, backward, the generated programs) is the same, byte for byte, with the sharing on
    and off; the loss and gradients are eager's. So with thunder-fuse outlining each region
    signature once (lowering/region_reuse.py's Outcome), forward's and backward's."""
    from thunder.lowering import decompose_reuse, region_reuse, vjp_reuse

    ids, runs = _ids(), []
    for enabled in (True, False):
        monkeypatch.setattr(vjp_reuse, "ENABLED", enabled)
        monkeypatch.setattr(decompose_reuse, "ENABLED", enabled)
        monkeypatch.setattr(region_reuse, "OUTCOMES", enabled)
        hits, decomposed = vjp_reuse.STATS["hits"], decompose_reuse.STATS["hits"]
        replayed = region_reuse.OUTCOME_STATS["hits"]
        runs.append(_all_traces(_train_step(_llama(layers), ids)))
        assert (vjp_reuse.STATS["hits"] > hits) == enabled
        assert (decompose_reuse.STATS["hits"] > decomposed) == enabled
        assert (region_reuse.OUTCOME_STATS["hits"] > replayed) == enabled
    assert [p for p, _, _ in runs[0]] == [p for p, _, _ in runs[1]]
    for (producer, python, mlir), (_, python_off, mlir_off) in zip(*runs):
        assert python == python_off, producer
        assert mlir == mlir_off, producer


def test_shared_decomposition_reads_operands_by_position():
    """An op's decomposition shared by signature (lowering/decompose_reuse.py) reads the operands
    of the op it is emitted for by position: y * z after x * x of the same types is not y * y."""
    def fn(x, y, z):
        return torch.cos(x * x) + torch.sin(y * z) + torch.tanh(z * y)

    x, y, z = (torch.randn(4, 5, generator=torch.Generator().manual_seed(i)) for i in range(3))
    for p in (x, y, z):
        p.requires_grad_()
    jitted = thunder.jit(fn, transforms=ALWAYS)
    out, expected = jitted(x, y, z), fn(x, y, z)
    torch.testing.assert_close(out, expected)
    grads = torch.autograd.grad(out.sum(), (x, y, z))
    torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), (x, y, z)))


def test_fusion_shortcuts_agree_with_the_full_work(monkeypatch):
    """What the compile of a training step does once or skips gives what the full work gives
    (a small Llama's step, every region fused, forward and backward; a function of lists):
    thunder-fuse's merge_ok walks from the joining op's preds alone where it joins one region,
    answering as the walk from every op of the set; the kernel texts thunder-fuse hands code
    generation for its replayed regions (fuse_module's texts) are the callees' own, printed;
    the outputs each forward input reaches (AutogradProgram.reaches) read from the MLIR are
    those of the lifted forward."""
    from thunder.lowering import fuse
    from thunder.runtime import autograd

    reached = []

    def reaches_of(func_op):
        found = reaches_of_mlir(func_op)
        assert found is not None and found == autograd._reaches_lifted(autograd.lift(func_op))
        reached.append(found)
        return found

    reaches_of_mlir = autograd._reaches_of
    monkeypatch.setattr(autograd, "_reaches_of", reaches_of)
    ids = _ids()
    jitted = thunder.jit(_llama(2), executors=["torch"])  # (unfused: only the traces thunder-fuse gets)
    jitted(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    unfused = [t.to_mlir(debug_info=True) for t in thunder.last_traces(jitted) + thunder.last_backward_traces(jitted)
               if t.producer in ("thunder-remat (forward)", "thunder-autograd (backward)")]
    assert len(unfused) == 2

    def lists(x, y):  # (a list read by cat, a list returned by split)
        a, b = torch.split(torch.cat([x, y.sin()]) * 2, 3)
        return a, b.cos(), y

    x, y = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    out = thunder.jit(lists, executors=["torch"])(x, y)
    torch.testing.assert_close(out, lists(x, y))
    assert len(reached) == 2 and all(r >= {0, 1} for r in reached[1])  # (both reach a and b; then saved values)

    answers = []
    merge_ok = fuse._Graph.merge_ok

    def checked(graph, roots, i):
        answer = merge_ok(graph, roots, i)
        assert answer == graph.no_path_back(roots, i, single=False)
        answers.append((len(roots), answer))
        return answer

    monkeypatch.setattr(fuse._Graph, "merge_ok", checked)
    with context():
        for text in unfused:
            module = ir.Module.parse(text)
            texts = {}
            fuse.fuse_module(module.operation, "auto", "linalg", texts=texts)
            callees = fusion_callees(module.operation)
            assert texts and set(texts) < set(callees)
            for name, kernel in texts.items():
                assert kernel == fuse.kernel_text(callees[name], name), name
    assert {n for n, _ in answers} >= {1, 2}
