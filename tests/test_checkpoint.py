"""Activation checkpointing inside jitted functions (thunder/ops/checkpoint.py, lowering/remat.py):
torch.utils.checkpoint.checkpoint and Hugging Face's gradient_checkpointing_enable() against eager:
values, grads, dropout masks, and fewer saved bytes than the same program without checkpointing."""
import copy
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint as cp

import thunder
from thunder.runtime import outline


def _block(a, w, *, scale=1.0):
    return (torch.tanh(a @ w) @ w).sin().exp() * scale


def _with(use_reentrant, **kw):
    def f(a, w):
        return (cp.checkpoint(_block, a, w, use_reentrant=use_reentrant, **kw) @ w).sum()
    return f


def _without(a, w):
    return (_block(a, w) @ w).sum()


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(16, 32, generator=g, requires_grad=True), torch.randn(32, 32, generator=g, requires_grad=True)


def _grads(fn, args):
    out = fn(*args)
    out.sum().backward()  # (not autograd.grad: eager's reentrant checkpoint refuses it)
    grads = [a.grad for a in args]
    for a in args:
        a.grad = None
    return (out, *grads)


@pytest.mark.parametrize("executors", [None, ["torch"]], ids=["fused", "unfused"])
@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_values_grads_and_saved_bytes(use_reentrant, executors):
    args = _inputs()
    f = _with(use_reentrant)
    jf, jplain = thunder.jit(f, executors=executors), thunder.jit(_without, executors=executors)
    for a, b in zip(_grads(jf, args), _grads(f, args), strict=True):
        torch.testing.assert_close(a, b)
    _grads(jplain, args)
    saved = thunder.compile_stats(jf).last_saved_bytes["saved_after"]
    plain = thunder.compile_stats(jplain).last_saved_bytes["saved_after"]
    # the block's activations (two matmuls, which remat saves otherwise, tanh, sin, exp) are
    # recomputed: only a, w and the block's result (the last matmul's input) may be saved
    assert saved <= (16 * 32 + 32 * 32 + 16 * 32) * 4 < plain


def test_checkpoint_keyword_arguments_and_preserve_rng_state():
    args = _inputs()
    f = _with(False, scale=0.5, preserve_rng_state=False)
    for a, b in zip(_grads(thunder.jit(f), args), _grads(f, args), strict=True):
        torch.testing.assert_close(a, b)


def test_checkpoint_dropout_mask_equals_eager():
    x = torch.randn(16, 16, requires_grad=True)

    def inner(a):
        return F.dropout(a.sin(), 0.5, training=True) * 2

    def f(a):
        return cp.checkpoint(inner, a, use_reentrant=False)

    torch.manual_seed(3)
    expected = _grads(f, (x,))
    torch.manual_seed(3)
    got = _grads(thunder.jit(f), (x,))
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)
    assert (got[0] == 0).any()  # (a mask was drawn)


def test_reentrant_checkpoint_without_grad_inputs_has_no_grad_as_eager():
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(4, 4)

    def f(a):
        return cp.checkpoint(lambda t: t @ w, a, use_reentrant=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager's "none of the inputs have requires_grad=True"
        expected, got = f(x), thunder.jit(f)(x)
    torch.testing.assert_close(got, expected)
    assert got.requires_grad == expected.requires_grad == False  # noqa: E712


def test_reentrant_checkpoint_refuses_keywords_as_eager():
    x, w = _inputs()
    f = _with(True, scale=2.0)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale") as expected:
        f(x, w)
    with pytest.raises(ValueError, match=str(expected.value)):
        thunder.jit(f)(x, w)


transformers = pytest.importorskip("transformers", reason="transformers is not installed")


def _llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=96, max_position_embeddings=32, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    return transformers.LlamaForCausalLM(config).train()


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_hf_gradient_checkpointing_trains_as_eager_with_fewer_saved_bytes(use_reentrant):
    ids = torch.randint(0, 96, (2, 8), generator=torch.Generator().manual_seed(1))
    plain = _llama()
    jplain = thunder.jit(plain)
    jplain(input_ids=ids, labels=ids).loss.backward()
    model = _llama()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (gradient_checkpointing_enable is deprecated in favour of a new name)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
        reference = copy.deepcopy(model)
        jitted = thunder.jit(model)
        loss, expected = jitted(input_ids=ids, labels=ids).loss, reference(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(loss, expected)
    loss.backward(), expected.backward()
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"{name}: {m}")
    saved = thunder.compile_stats(jitted).last_saved_bytes["saved_after"]
    assert saved < 0.85 * thunder.compile_stats(jplain).last_saved_bytes["saved_after"]
    # an evaluation step under no_grad (the hook enable_input_require_grads put on the embedding
    # calls requires_grad_(True) on its result there too)
    with torch.no_grad():
        torch.testing.assert_close(jitted(input_ids=ids).logits, reference(input_ids=ids).logits)


def test_checkpoint_region_is_marked_in_the_mlir():
    x, w = _inputs()
    jf = thunder.jit(_with(False))
    jf(x, w)
    text = thunder.last_traces(jf)[0].to_mlir(debug_info=True)
    # the block's ops carry a location fused with "checkpoint N" (aliases: #locK = loc(...))
    fused = set(re.findall(r'^(#loc\d+) = loc\(fused<"checkpoint \d+">', text, re.M))
    named = {m[0] for m in re.findall(r'^(#loc\d+) = loc\("\w+"\((#loc\d+)\)\)', text, re.M) if m[1] in fused}
    marked = [op for op, loc in re.findall(r'"ltorch\.(\w+)".* loc\((#loc\d+)\)$', text, re.M) if loc in named]
    assert len(fused) == 1
    assert marked == ["matmul", "tanh", "matmul", "sin", "exp", "mul"]  # the block's ops, not the outer ones


def test_locations_read_back():
    """What dialects/emit.location() writes (a value name, the user's line, a checkpoint region)
    reads back from each kind of location, and nothing from the others."""
    from thunder.dialects.definitions import context
    from thunder.dialects.emit import loc_file_line, loc_names, location
    from thunder.dialects.mlir import ir

    with context():
        f = ir.Location.file("a.py", 3, 0)
        cases = [(location("t5"), ["t5"], None), (location("t5,t6", ("a.py", 3)), ["t5", "t6"], ("a.py", 3)),
                 (location("t7", ("a.py", 3, 2)), ["t7"], ("a.py", 3, 2)), (f, [], ("a.py", 3)),
                 (ir.Location.unknown(), [], None), (ir.Location.fused([f], metadata=ir.StringAttr.get("x")), [], None),
                 (ir.Location.fused([f], metadata=ir.StringAttr.get("checkpoint 4")), [], ("a.py", 3, 4)),
                 (ir.Location.name("n", childLoc=ir.Location.callsite(f, [f])), ["n"], None)]
        for loc, names, where in cases:
            assert (loc_names(loc), loc_file_line(loc)) == (names, where), str(loc)


def test_recomputation_is_placed_before_its_first_use(monkeypatch):
    # the backward recomputes h1 and h2 (cheap, from the saved matmul results); each comes right
    # before the op that first reads it, so layer 1's h1 after layer 3's backward matmul (read in
    # the program's statement order: written inline, without blocks for its repeated layers)
    monkeypatch.setattr(outline, "ENABLED", False)
    import torch.nn.functional as F

    def f(x, w1, w2, w3):
        h1 = F.gelu(x @ w1) * 2
        h2 = F.gelu(h1 @ w2) * 2
        return (h2 @ w3).sum()

    args = [torch.randn(8, 16, requires_grad=True)] + [torch.randn(16, 16, requires_grad=True) for _ in range(3)]
    jf = thunder.jit(f)
    jf(*args).backward()
    got = [a.grad for a in args]
    for a in args:
        a.grad = None
    f(*args).backward()
    for g, a in zip(got, args):
        torch.testing.assert_close(g, a.grad)
    lines = [line.strip() for line in str(thunder.last_backward_traces(jf)[0]).splitlines()]
    gelus = [i for i, line in enumerate(lines) if "functional.gelu(" in line]
    matmuls = [i for i, line in enumerate(lines) if "torch.matmul(" in line]
    assert len(gelus) == 2 and matmuls[0] < gelus[0] < matmuls[1] < matmuls[2] < gelus[1] < matmuls[3], lines
