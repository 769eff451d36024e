"""A tied weight (one parameter read as an embedding and as the LM head's weight): one value of
the trace (runtime/state.py: the second path reads the first's proxy), its two gradients summed
in the backward with the embedding rows added into the head's GEMM result (lowering/index_add_into.py); values and grads as eager's,
and untying it later compiles again."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.head = nn.Linear(16, 50, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids, labels):
        logits = self.head(torch.tanh(self.emb(ids)))
        return F.cross_entropy(logits.view(-1, 50), labels.view(-1))


def _setup():
    """(a TiedLM, eager's copy of it, the jitted model, ids, labels)."""
    torch.manual_seed(0)
    model = TiedLM()
    eager = copy.deepcopy(model)
    ids = torch.randint(0, 50, (2, 12))
    labels = torch.randint(0, 50, (2, 12))
    return model, eager, thunder.jit(model), ids, labels


def _step(fn, model, ids, labels):
    loss = fn(ids, labels)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters(remove_duplicate=False)}
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def test_tied_weight_one_value_grads_as_eager_and_untying_compiles_again():
    model, eager, jm, ids, labels = _setup()
    got, got_grads = _step(jm, model, ids, labels)
    want, want_grads = _step(eager, eager, ids, labels)
    torch.testing.assert_close(got, want)
    assert got_grads.keys() == want_grads.keys()
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], msg=name)
    backward = str(thunder.last_backward_traces(jm)[-1])
    # the embedding rows go into the head's weight gradient: no zeros of the weight's size, no sum
    assert "impl.index_add_into(" in backward and "zeros_index_add" not in backward, backward
    assert "is not" in str(thunder.last_prologue_traces(jm)[-1])  # (the paths checked to read one tensor)

    # untied (the head gets its own weight): the prologue misses, the new program is right too
    model.head.weight = nn.Parameter(model.emb.weight.detach().clone())
    eager.head.weight = nn.Parameter(eager.emb.weight.detach().clone())
    misses = thunder.cache_misses(jm)
    got, got_grads = _step(jm, model, ids, labels)
    want, want_grads = _step(eager, eager, ids, labels)
    assert thunder.cache_misses(jm) == misses + 1
    torch.testing.assert_close(got, want)
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], msg=name)
    assert "zeros_index_add" in str(thunder.last_backward_traces(jm)[-1])  # (two weights: two gradients)


def test_tied_weight_under_bf16_autocast_rows_added_into_the_cast_gemm_result():
    """Under bf16 autocast the head's weight gradient is a bf16 GEMM cast to float32: the embedding
    rows go into the cast's result (no zeros of the weight's size, no sum); grads as eager's."""
    model, eager, jm, ids, labels = _setup()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, got_grads = _step(jm, model, ids, labels)
        want, want_grads = _step(eager, eager, ids, labels)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    for name in want_grads:
        assert got_grads[name].dtype == want_grads[name].dtype == torch.float32
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=2e-2, atol=2e-2, msg=name)
    backward = str(thunder.last_backward_traces(jm)[-1])
    assert "impl.index_add_into(" in backward and "zeros_index_add" not in backward, backward
