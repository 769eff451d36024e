"""Training steps where some outputs get no gradient (a model's logits beside its loss, a KV cache
it returns): the backward that runs then is specialized to the cotangents present (no zeros made
or added for the others, lowering/absent_cotangents.py); gradients against eager for every set
of outputs backpropagated; also the embedding's gradient (index_add into zeros made for it) and
tied weights."""
import re

import pytest
import torch
import torch.nn.functional as F

import thunder

DT = torch.float64


def _lm(x, w, target):
    logits = torch.tanh(x) @ w
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), target.view(-1))
    return loss, logits, logits.exp()


JLM = thunder.jit(_lm)


def _inputs():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, dtype=DT, generator=gen).requires_grad_()
    w = torch.randn(4, 5, dtype=DT, generator=gen).requires_grad_()
    return x, w, torch.randint(0, 5, (2, 3), generator=gen)


def _grads(fn, backprop):
    x, w, target = _inputs()
    outs = fn(x, w, target)
    backprop(outs, (x, w))
    return outs, (x.grad, w.grad)


def _grad_outputs(which):
    """Backprop through outputs `which` with torch.autograd.grad and fixed cotangents."""
    def backprop(outs, inputs):
        gen = torch.Generator().manual_seed(1)
        cts = [torch.randn(outs[i].shape, dtype=DT, generator=gen) for i in which]
        grads = torch.autograd.grad([outs[i] for i in which], inputs, cts, allow_unused=True)
        for a, g in zip(inputs, grads):
            a.grad = g
    return backprop


def _retained(outs, inputs):
    outs[1].sum().backward(retain_graph=True)
    outs[0].backward()


CASES = {
    "loss only": lambda outs, inputs: outs[0].backward(),
    "loss + logits.sum()": lambda outs, inputs: (outs[0] + outs[1].sum()).backward(),
    "grad_outputs for logits only": _grad_outputs([1]),
    "grad_outputs for the last two": _grad_outputs([1, 2]),
    "retain_graph, then the loss": _retained,
}


@pytest.mark.parametrize("case", list(CASES))
def test_grads_equal_eager_for_each_set_of_outputs_backpropagated(case):
    expected_outs, expected = _grads(_lm, CASES[case])
    outs, grads = _grads(JLM, CASES[case])
    for a, b in zip(outs, expected_outs):
        torch.testing.assert_close(a, b)
    for g, e in zip(grads, expected):
        assert (g is None) == (e is None)
        if e is not None:
            torch.testing.assert_close(g, e)


def test_no_zeros_are_made_for_outputs_without_gradient():
    _grads(JLM, CASES["loss only"])
    traces = thunder.last_backward_traces(JLM)
    full = [t for t in traces if "no cotangent" not in t.name][-1]
    variant = [t for t in traces if "no cotangent for outputs 1, 2" in t.name]
    assert variant, [t.name for t in traces]
    params = str(full).split("def backward(")[1].split(")")[0].split(", ")
    g_logits, g_exp = params[-2], params[-1]
    # the full backward reads the cotangents of logits and of its exp; the specialized one reads
    # neither and makes no zeros in their place
    uses = lambda name, text: re.search(rf"\b{name}\b", text) is not None  # noqa: E731
    assert uses(g_logits, _body(full)) and uses(g_exp, _body(full))
    body = _body(variant[-1])
    assert not uses(g_logits, body) and not uses(g_exp, body)
    assert "zeros" not in body and "impl.full" not in body


def test_backward_compiles_on_its_first_call_once_per_set_of_cotangents():
    # the forward's compile makes no backward; the first backward call compiles the one for its
    # cotangents (here: the loss only, not logits and their exp) and nothing else; later calls
    # with the same set reuse it, another set compiles its own once
    jf = thunder.jit(_lm)
    x, w, target = _inputs()
    outs = jf(x, w, target)
    stats = thunder.compile_stats(jf)
    assert stats.backward_compiles == 0
    assert [t.name for t in thunder.last_backward_traces(jf)] == ["thunder-autograd (backward)"]
    outs[0].backward()
    assert stats.backward_compiles == 1
    names = [t.name for t in thunder.last_backward_traces(jf)]
    assert len(names) == 2 and names[1].endswith("(backward; no cotangent for outputs 1, 2)"), names
    for _ in range(2):
        jf(x, w, target)[0].backward()
    assert stats.backward_compiles == 1 and stats.cache_misses == 1
    expected = torch.autograd.grad(_lm(x, w, target)[0], (x, w))
    got = torch.autograd.grad(jf(x, w, target)[0], (x, w))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    outs = jf(x, w, target)
    torch.autograd.grad(outs[0] + outs[1].sum() + outs[2].sum(), (x, w))  # (every output: the full backward)
    assert stats.backward_compiles == 2 and len(thunder.last_backward_traces(jf)) == 3


def _body(trace):
    """The program's statements (no header, signature or comments)."""
    lines = str(trace).split("def backward(", 1)[1].splitlines()[1:]
    return "\n".join(line.split("  #")[0] for line in lines if not line.lstrip().startswith("#"))


class TiedLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(11, 6, dtype=DT)
        self.lm_head = torch.nn.Linear(6, 11, bias=False, dtype=DT)
        self.lm_head.weight = self.wte.weight  # (tied, as GPT-2's)

    def forward(self, ids):
        h = torch.tanh(self.wte(ids))
        logits = self.lm_head(h)
        loss = F.cross_entropy(logits.view(-1, 11), ids.view(-1))
        return loss, logits


@pytest.mark.parametrize("through_logits", [False, True])
def test_tied_weights_and_embedding_grad_equal_eager(through_logits):
    torch.manual_seed(0)
    model = TiedLM()
    ids = torch.tensor([[1, 3, 3, 0], [10, 2, 1, 1]])
    jm = thunder.jit(model)
    grads = []
    for fn in (model, jm):
        model.zero_grad(set_to_none=True)
        loss, logits = fn(ids)
        (loss + logits.sum() if through_logits else loss).backward()
        grads.append(model.wte.weight.grad.clone())
    torch.testing.assert_close(grads[1], grads[0])
    # the embedding's gradient: index_add in place (the tied weight's: into the head's GEMM
    # result, lowering/index_add_into.py), no out-of-place index_add
    text = str(thunder.last_backward_traces(jm)[-1])
    assert "impl.index_add_into(" in text and "torch.index_add(" not in text


def test_addmm_is_saved_not_recomputed():
    # (GPT-2's Conv1D runs addmm: thunder-remat must not recompute a GEMM in the backward)
    def f(b, x, w):
        return torch.tanh(torch.addmm(b, x, w)).sum()

    b, x, w = (torch.randn(*s, dtype=DT, requires_grad=True) for s in ((5,), (3, 4), (4, 5)))
    jf = thunder.jit(f)
    jf(b, x, w).backward()
    grads = [t.grad for t in (b, x, w)]
    for t in (b, x, w):
        t.grad = None
    f(b, x, w).backward()
    for g, t in zip(grads, (b, x, w)):
        torch.testing.assert_close(g, t.grad)
    assert "addmm" not in str(thunder.last_backward_traces(jf)[-1])


def test_kernel_writes_the_transposed_layout_a_reshape_reads():
    # x.transpose(1, 2).reshape(B, S, H * D) of a fused result: the kernel writes the transposed
    # value row-major, so the reshape is a view (left to torch, the transpose's view made it copy)
    def f(x, w):
        y = torch.exp(x * 2.0 + 1.0)
        return y.transpose(1, 2).reshape(2, 4, 3 * 8) @ w

    x, w = torch.randn(2, 3, 4, 8), torch.randn(24, 5)
    jf = thunder.jit(f, fusion="always")
    torch.testing.assert_close(jf(x, w), f(x, w))
    text = str(thunder.last_traces(jf)[-1])
    fused = [line for line in text.splitlines() if "fusion_" in line and "=" in line]
    assert len(fused) == 1 and "float32[2, 4, 3, 8]" in fused[0], text
    assert "torch.transpose(" not in text


def test_transpose_of_a_0d_tensor_in_a_training_program():
    # (the fused-transpose layout check read the permutation modulo the rank: 0 for a 0-d tensor)
    def f(x):
        return x.transpose(0, -1) * 2

    x, y = torch.tensor(3.0, requires_grad=True), torch.tensor(3.0, requires_grad=True)
    out = thunder.jit(f, fusion="always")(x)
    expected = f(y)
    torch.testing.assert_close(out, expected)
    out.backward()
    expected.backward()
    torch.testing.assert_close(x.grad, y.grad)


def _many(x, w, idx):
    """Outputs whose cotangents reach ops no rule covers (gather's scatter, where, an index's
    index_add, a cumsum): without them the specialized backward makes zeros for those ops."""
    logits = torch.tanh(x) @ w
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), idx.view(-1))
    return (loss, logits.gather(-1, idx.clamp(max=3).unsqueeze(-1)), torch.where(x > 0, x, w[0, 0]),
            x[:, :, [0, 2, 2]], F.pad(logits, (1, 1)).cumsum(-1))


def _attended(x, w, idx):
    """An attention's output: its backward (an op of several results) reads the cotangent (the
    lifting path)."""
    q = torch.tanh(x).unsqueeze(1)
    return (x @ w).sum(), F.scaled_dot_product_attention(q, q * 2, q)


def _sliced(x, w, idx):
    """Slices of the logits beside the loss: their absent cotangents meet in a chain of adds
    (g + unslice(0) + unslice(0)), each made the value it adds to (ProphetNet's n-gram streams;
    the second was made the first add's result, which was erased: the func crashed MLIR)."""
    logits = torch.tanh(x) @ w
    first, second = logits[:, 0], logits[:, 1]  # (before the loss: their cotangents are added last)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx.view(-1))
    return loss, first, second


@pytest.mark.parametrize("fn, which", [(_many, [0]), (_many, [1, 2]), (_many, [0, 4]), (_many, [3]),
                                       (_attended, [0]), (_attended, [1]), (_sliced, [0])])
def test_backward_specialized_in_place_is_the_lifted_one(monkeypatch, fn, which):
    """The backward for the cotangents present, made by editing only the ops that read a zero
    (absent_cotangents.specialize_func), is the program lifting the whole backward makes
    (specialize: MLIR and Python alike), a list of cotangents goes the lifting way; the
    gradients are eager's."""
    from thunder.lowering import absent_cotangents
    from thunder.runtime import autograd, backward_variants

    calls, paths = [], []
    real_specialize, real_in_place = backward_variants.specialize_backward, absent_cotangents.specialize_func

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real_specialize(*args, **kwargs)

    def in_place(*args):
        kept = real_in_place(*args)
        paths.append(kept is not None)
        return kept

    monkeypatch.setattr(autograd, "specialize_backward", spy)
    monkeypatch.setattr(backward_variants, "specialize_func", in_place)
    x, w, idx = _inputs()
    outs = thunder.jit(fn)(x, w, idx)
    grads = torch.autograd.grad([outs[i] for i in which], (x, w), [torch.ones_like(outs[i]) for i in which],
                                allow_unused=True)
    expected_outs = fn(x, w, idx)
    expected = torch.autograd.grad([expected_outs[i] for i in which], (x, w),
                                   [torch.ones_like(expected_outs[i]) for i in which], allow_unused=True)
    for g, e in zip(grads, expected):
        assert (g is None) == (e is None)
        if e is not None:
            torch.testing.assert_close(g, e)
    ((args, kwargs),) = calls
    assert paths == [fn is not _attended or which == [1]]
    in_place_variant = real_specialize(*args, **kwargs)
    monkeypatch.setattr(backward_variants, "specialize_func", lambda *a: None)
    lifted = real_specialize(*args, **kwargs)
    assert in_place_variant.source == lifted.source and in_place_variant.grad_of == lifted.grad_of
    texts = []
    for v in (in_place_variant, lifted):
        with v.module.context:
            lines = v.module.operation.get_asm(enable_debug_info=True).splitlines()
        # (the same MLIR but for the order of the constants canonicalize gathers at the top)
        texts.append(([line for line in lines if "arith.constant" not in line],
                      sorted(line for line in lines if "arith.constant" in line)))
    assert texts[0] == texts[1]
    if fn is _many and which == [3]:  # (the index's gradient reads zeros made for the others' ops)
        assert "_zeros" in lifted.source


def test_a_wrong_in_place_specialization_does_not_verify(monkeypatch):
    """The backward edited in place is verified (runtime/backward_variants.py): an edit that leaves
    the func's type and its return apart fails there, not in the program. (Verifying the return
    op alone passes: MLIR checks it against the func only when the func is verified.)"""
    from thunder.dialects import attrs
    from thunder.dialects.mlir import ir
    from thunder.lowering import absent_cotangents
    from thunder.runtime import backward_variants

    real = absent_cotangents.specialize_func

    def wrong(func_op, *args):
        kept = real(func_op, *args)
        ftype = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
        with func_op.location:
            wrong = [attrs.tensor_type((7,), DT, torch.device("cpu"), False) for _ in ftype.results]
            func_op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs), wrong))
        return kept

    monkeypatch.setattr(backward_variants, "specialize_func", wrong)
    x, w, target = _inputs()
    loss, _, _ = thunder.jit(_lm)(x, w, target)  # (a fresh jit: the logits get no cotangent)
    with pytest.raises(ir.MLIRError, match="func.return"):
        loss.backward()
