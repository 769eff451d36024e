"""Compile time against depth: what made a compile grow faster than the model (docs/benchmarks.md
"First training step against depth").

- Full garbage collections are deferred while thunder compiles (runtime/gc_pause.py): each one
  walks every object of the process (the model's included), and their number grows with the
  compile's allocations, so a 24-layer first call paid ~0.5 s for two of them.
- thunder-sink-transposes orders ops by MLIR's block order (lowering/sink_transposes.py): it
  numbered the whole func once per transpose."""
import gc
import random

import pytest
import torch

import thunder
from thunder.dialects.definitions import context
from thunder.dialects.mlir import ir
from thunder.lowering import sink_transposes
from thunder.runtime import autograd, gc_pause, generalize

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
from test_models import ATOL, DECODER, RTOL, _hf, _ids  # noqa: E402


def _spy(monkeypatch, module, name, seen):
    original = getattr(module, name)

    def spy(*args, **kwargs):
        seen.append(gc.get_threshold())
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)


def test_llama_training_step_defers_full_collections(monkeypatch):
    """A 2-layer Llama's training step: the forward's compile and the backward's (on its first
    call) run with full collections deferred, the thresholds are the user's again afterwards, and
    loss and gradients are eager's."""
    t = transformers
    model = _hf(t.LlamaConfig, t.LlamaForCausalLM, **DECODER)
    reference = _hf(t.LlamaConfig, t.LlamaForCausalLM, **DECODER)
    ids = _ids()
    seen_forward, seen_backward = [], []
    _spy(monkeypatch, generalize, "compile_entry", seen_forward)
    _spy(monkeypatch, autograd, "specialize_backward", seen_backward)
    before = gc.get_threshold()
    gc.set_threshold(500, 7, 9)  # (the user's, whatever they are)
    try:
        fn = thunder.jit(model, fusion=False)  # (fusion is not what is tested: cheaper)
        loss = fn(input_ids=ids, labels=ids, use_cache=False).loss
        assert gc.get_threshold() == (500, 7, 9)
        loss.backward()
        assert gc.get_threshold() == (500, 7, 9)
    finally:
        gc.set_threshold(*before)
    assert seen_forward and seen_backward
    for threshold in seen_forward + seen_backward:  # (young generations as the user set them)
        assert threshold[:2] == (500, 7) and threshold[2] >= 1 << 30, threshold
    expected = reference(input_ids=ids, labels=ids, use_cache=False).loss
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=RTOL, atol=ATOL)
    grads = dict(model.named_parameters())
    for name, p in reference.named_parameters():
        torch.testing.assert_close(grads[name].grad, p.grad, rtol=RTOL, atol=ATOL, msg=name)


def test_full_collections_deferred_nests_and_restores_on_error():
    before = gc.get_threshold()
    gc.set_threshold(600, 8, 11)
    try:
        with pytest.raises(RuntimeError, match="inner"):
            with gc_pause.full_collections_deferred():
                assert gc.get_threshold()[:2] == (600, 8) and gc.get_threshold()[2] >= 1 << 30
                with gc_pause.full_collections_deferred():  # (a backward compiled in a forward's compile)
                    pass
                assert gc.get_threshold()[2] >= 1 << 30  # (the outer one still runs)
                raise RuntimeError("inner")
        assert gc.get_threshold() == (600, 8, 11)
    finally:
        gc.set_threshold(*before)


def test_ops_in_block_order():
    """_in_order gives a func's ops in their block's order, whatever order they come in."""
    text = "func.func @f(%a: i64) -> i64 {\n" + "".join(
        f"  %v{i} = arith.addi %{'a' if i == 0 else f'v{i - 1}'}, %a : i64\n" for i in range(12)) + \
        "  return %v11 : i64\n}"
    with context():
        module = ir.Module.parse(text)
        f = module.body.operations[0]
        ops = [o.operation for o in f.regions[0].blocks[0].operations][:-1]
        shuffled = ops[:]
        random.Random(0).shuffle(shuffled)
        assert shuffled != ops
        assert [str(o) for o in sink_transposes._in_order(shuffled)] == [str(o) for o in ops]
