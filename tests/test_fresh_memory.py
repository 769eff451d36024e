"""Large tensors on fresh huge pages (core/fresh_memory.py) and the ops that make them there
(impl casts and zeros_index_add, kernel outputs, ops/large_outputs.py products): the same values
as torch's own calls, and a bf16 autocast training step with a large LM head keeps eager's values
and grads while its program writes the large products into fresh pages."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from thunder.core import fresh_memory
from thunder.ops import impl, large_outputs


@pytest.fixture
def small_threshold(monkeypatch):
    """Tensors of 64 KiB and more count as large (the test's tensors stay small)."""
    monkeypatch.setattr(fresh_memory, "MIN_BYTES", 1 << 16)


def _on_fresh_pages(t):
    """Whether t's storage is a fresh_memory mapping (torch's own storages are resizable)."""
    return not t.untyped_storage().resizable()


def test_empty_and_zeros(small_threshold):
    for make in (fresh_memory.empty, fresh_memory.zeros):
        t = make((300, 100), torch.float32)
        assert t.shape == (300, 100) and t.dtype == torch.float32 and t.is_contiguous() and t.is_cpu
        assert _on_fresh_pages(t) == fresh_memory.enabled()
        if fresh_memory.enabled():
            assert t.data_ptr() % (2 << 20) == 0  # (huge pages back only aligned 2 MiB ranges)
    assert torch.equal(fresh_memory.zeros((300, 100), torch.float32), torch.zeros(300, 100))
    small = fresh_memory.empty((10, 10), torch.float32)
    assert small.untyped_storage().resizable()


def test_mapping_reused_only_when_its_tensors_are_gone(small_threshold):
    if not fresh_memory.enabled():
        pytest.skip("no transparent huge pages on this system")
    a = fresh_memory.empty((300, 100), torch.float32)
    a.fill_(7)
    at = a.data_ptr()
    view = a[1:]
    del a
    b = fresh_memory.empty((300, 100), torch.float32)
    assert b.data_ptr() != at  # (a view still holds the first one)
    del view
    z = fresh_memory.zeros((300, 100), torch.float32)
    assert z.data_ptr() == at and torch.equal(z, torch.zeros(300, 100))  # reused, and filled
    assert b.data_ptr() != z.data_ptr()


def test_large_cast_and_zeros_index_add_as_torch(small_threshold):
    g = torch.randn(400, 64).to(torch.bfloat16)
    for cast in (impl.to(g, torch.float32), impl.convert_element_type(g, torch.float32)):
        assert cast.dtype == torch.float32 and torch.equal(cast, g.float())
        assert _on_fresh_pages(cast) == fresh_memory.enabled()
    assert impl.to(g, torch.bfloat16) is g  # (no cast: torch's `to` returns the tensor itself)
    t = g.t()  # not contiguous: torch's `to`, which keeps the strides
    assert impl.to(t, torch.float32).stride() == t.float().stride()
    index = torch.tensor([3, 7, 3, 399])
    rows = torch.randn(4, 64)
    got = impl.zeros_index_add((400, 64), 0, index, rows)
    assert torch.equal(got, torch.zeros(400, 64).index_add_(0, index, rows))
    assert _on_fresh_pages(got) == fresh_memory.enabled()


def test_logits_sized_bf16_tensors_are_large():
    """At the default threshold a tensor below glibc's largest mmap threshold but large enough
    for its heap to trim (a Llama's [512, 32000] bf16 logits, 31.25 MiB) is on the reused
    mappings: the next step's equal tensor gets the same pages."""
    if not fresh_memory.enabled():
        pytest.skip("no transparent huge pages on this system")
    x = torch.randn(512, 32000)
    first = impl.to(x, torch.bfloat16)
    assert torch.equal(first, x.to(torch.bfloat16)) and _on_fresh_pages(first)
    at = first.data_ptr()
    del first
    again = impl.to(x, torch.bfloat16)
    assert again.data_ptr() == at and torch.equal(again, x.to(torch.bfloat16))
    small = impl.to(torch.randn(512, 2048), torch.bfloat16)  # 2 MiB: glibc's heap
    assert not _on_fresh_pages(small)


def test_large_products_bitwise_as_torch(small_threshold):
    torch.manual_seed(0)
    x = torch.randn(2, 40, 64, dtype=torch.bfloat16)
    w = torch.randn(500, 64, dtype=torch.bfloat16)
    b = torch.randn(500, dtype=torch.bfloat16)
    assert torch.equal(large_outputs.linear(x, w), F.linear(x, w))
    assert torch.equal(large_outputs.linear(x, w, b), F.linear(x, w, b))
    dy = torch.randn(80, 500, dtype=torch.bfloat16)
    rows = torch.randn(80, 64, dtype=torch.bfloat16)
    assert torch.equal(large_outputs.matmul(dy.t(), rows), torch.matmul(dy.t(), rows))  # (a weight gradient)
    assert torch.equal(large_outputs.matmul(x, w.t()), torch.matmul(x, w.t()))


class LM(nn.Module):
    def __init__(self, vocab=700, dim=64, tied=False):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        if tied:
            self.head.weight = self.emb.weight
        self.vocab = vocab

    def forward(self, ids, labels):
        logits = self.head(torch.tanh(self.proj(self.emb(ids))))
        return F.cross_entropy(logits.view(-1, self.vocab).float(), labels.view(-1))


@pytest.mark.parametrize("tied", [False, True])
def test_bf16_autocast_step_with_large_head_as_eager(small_threshold, tied):
    torch.manual_seed(0)
    model = LM(tied=tied)
    eager = copy.deepcopy(model)
    ids = torch.randint(0, 700, (2, 60))
    labels = torch.randint(0, 700, (2, 60))
    jm = thunder.jit(model)
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, expected = jm(ids, labels), eager(ids, labels)
        loss.backward()
        expected.backward()
        torch.testing.assert_close(loss, expected, rtol=1e-2, atol=1e-2)
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=2e-2, atol=2e-2, msg=name)
        head_grad = model.head.weight.grad
        model.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
    forward = str(thunder.last_traces(jm)[-1])
    backward = str(thunder.last_backward_traces(jm)[-1])
    assert "impl.large_linear(" in forward  # the logits, [2, 60, 700] bf16 (82 KiB)
    assert "impl.large_matmul(" in backward  # the head's weight gradient, [700, 64] bf16
    if fresh_memory.enabled():
        assert _on_fresh_pages(head_grad)  # (a cast, or tied: the kernel adding the embedding's rows)
