"""Compile time against depth: what made a compile grow faster than the model (docs/benchmarks.md
"First training step against depth").

- Full garbage collections are deferred while thunder compiles (runtime/gc_pause.py): each one
  walks every object of the process (the model's included), and their number grows with the
  compile's allocations, so a 24-layer Llama's first call paid ~0.5 s for two of them.
- thunder-sink-transposes orders ops by MLIR's block order (lowering/layout/sink_transposes.py): it
  numbered the whole func once per transpose."""
import gc
import random

import pytest
import torch

import thunder
from thunder.dialects.definitions import context
from thunder.dialects.mlir import ir
from thunder.lowering.layout.sink_transposes import _in_order
from thunder.runtime import autograd, gc_pause, generalize



def _spy(monkeypatch, module, name, seen):
    original = getattr(module, name)

    def spy(*args, **kwargs):
        seen.append(gc.get_threshold())
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)


def _blocks(n=3, width=16):
    torch.manual_seed(0)
    layers = []
    for _ in range(n):  # (the same block n times, as a decoder's layers)
        layers += [torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.LayerNorm(width)]
    return torch.nn.Sequential(*layers)


def test_training_step_defers_full_collections(monkeypatch):
    """A 3-block model's training step: the forward's compile and the backward's (on its first
    call) run with full collections deferred, the thresholds are the user's again afterwards, and
    the output and gradients are eager's."""
    model, reference = _blocks(), _blocks()
    x, weights = torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(1))
    seen_forward, seen_backward = [], []
    _spy(monkeypatch, generalize, "compile_entry", seen_forward)
    _spy(monkeypatch, autograd, "specialize_backward", seen_backward)
    before = gc.get_threshold()
    gc.set_threshold(500, 7, 9)  # (the user's, whatever they are)
    try:
        fn = thunder.jit(model, fusion=False)  # (no kernels to compile: what is tested is the compile)
        out = fn(x)
        assert gc.get_threshold() == (500, 7, 9)
        (out * weights).sum().backward()
        assert gc.get_threshold() == (500, 7, 9)
    finally:
        gc.set_threshold(*before)
    assert seen_forward and seen_backward
    for threshold in seen_forward + seen_backward:  # (young generations as the user set them)
        assert threshold[:2] == (500, 7) and threshold[2] >= 1 << 30, threshold
    expected = reference(x)
    (expected * weights).sum().backward()
    # (f32 through three blocks: the backward sums in another order than eager)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    grads = dict(model.named_parameters())
    for name, p in reference.named_parameters():
        torch.testing.assert_close(grads[name].grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)


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
        assert [str(o) for o in _in_order(shuffled)] == [str(o) for o in ops]
