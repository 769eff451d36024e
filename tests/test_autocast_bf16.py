"""Training under torch.autocast("cpu", torch.bfloat16): a tiny Llama-style block (RMSNorm,
q/k/v/o projections, causal SDPA, SwiGLU MLP, residuals, head, cross-entropy of the upcast logits),
thunder.jit against eager's autocast: the loss, the logits and every grad in eager's dtype and
within bf16 tolerance, and the weights' bf16 casts made once (in the forward, saved for the
backward as eager's autocast does), not again in the backward (lowering/remat.py)."""
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder

D, H, F_MLP, V, T, B = 32, 4, 64, 48, 8, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.Parameter(torch.ones(D) + 0.1 * torch.randn(D))
        self.norm2 = nn.Parameter(torch.ones(D) + 0.1 * torch.randn(D))
        self.q, self.k, self.v, self.o = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(D, F_MLP, bias=False), nn.Linear(D, F_MLP, bias=False)
        self.down = nn.Linear(F_MLP, D, bias=False)
        self.embed = nn.Embedding(V, D)
        self.head = nn.Linear(D, V, bias=False)

    @staticmethod
    def rms(x, w):
        x32 = x.float()
        return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

    def forward(self, ids, labels):
        x = self.embed(ids)
        h = self.rms(x, self.norm1)
        q, k, v = (p(h).view(B, T, H, D // H).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, D))
        h = self.rms(x, self.norm2)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        logits = self.head(x)
        return F.cross_entropy(logits.float().view(-1, V), labels.view(-1)), logits


@pytest.fixture(scope="module")
def trained():
    """(eager's and thunder's (loss, logits, grads), the jitted block), one compile for the module."""
    torch.manual_seed(0)
    block = Block()
    ids = torch.randint(0, V, (B, T))
    labels = torch.randint(0, V, (B, T))
    jb = thunder.jit(block)
    results = []
    for fn in (block, jb):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, logits = fn(ids, labels)
        loss.backward()
        results.append((loss, logits, {n: p.grad for n, p in block.named_parameters()}))
        block.zero_grad(set_to_none=True)
    return results, jb


def test_autocast_training_matches_eager(trained):
    (e_loss, e_logits, e_grads), (t_loss, t_logits, t_grads) = trained[0]
    assert (t_loss.dtype, t_logits.dtype) == (e_loss.dtype, e_logits.dtype) == (torch.float32, torch.bfloat16)
    torch.testing.assert_close(t_loss, e_loss, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(t_logits, e_logits, rtol=5e-2, atol=5e-2)
    assert e_grads.keys() == t_grads.keys()
    for name, g in e_grads.items():
        assert t_grads[name] is not None, name
        assert t_grads[name].dtype == g.dtype == torch.float32, name
        scale = g.abs().max().item() or 1.0
        torch.testing.assert_close(t_grads[name] / scale, g / scale, rtol=5e-2, atol=5e-2, msg=name)


def test_autocast_weight_casts_saved_not_recomputed(trained):
    jb = trained[1]
    fwd = str(thunder.last_traces(jb)[-1])
    bwd = str(thunder.last_backward_traces(jb)[-1])
    weights = ("q", "k", "v", "o", "gate", "up", "down", "head")
    for w in weights:  # cast once, in the forward ...
        assert len(re.findall(rf"impl\.to\(\w*{w}_weight, torch\.bfloat16", fwd)) == 1, w
    # ... and not again in the backward, which gets the casts (bf16) among the saved values
    assert not re.search(r"impl\.to\(\w*_weight, torch\.bfloat16", bwd), bwd
    saved_bf16_2d = re.findall(r"^  # \w+: cpu bfloat16\[\d+, \d+\]$", bwd, re.M)
    assert len(saved_bf16_2d) >= len(weights)


def _casts(fn, calls, *args):
    """aten::_to_copy calls of `calls` calls of fn inside one no_grad bf16 autocast region."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.profiler.profile() as prof:
            outs = [fn(*args) for _ in range(calls)]
    return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy"), outs


def test_autocast_weight_casts_once_per_region_like_eager():
    """A decoding loop: eager's autocast casts each weight once per region (its cache), so does
    the program, which leaves those casts to autocast (runtime/autocast_casts.py)."""
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(D, F_MLP), nn.SiLU(), nn.Linear(F_MLP, D))
    x = torch.randn(2, D)
    jm = thunder.jit(mlp)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        jm(x)  # (compiled)
    src = str(thunder.last_traces(jm)[-1])
    assert not re.search(r"impl\.to\(\w*weight", src), src
    assert re.search(r"torch\.nn\.functional\.linear\(\w+, \w*0_weight, ", src), src
    eager_casts, expected = _casts(mlp, 3, x)
    casts, got = _casts(jm, 3, x)
    assert casts == eager_casts == 4 + 3  # two weights and two biases once, the input on each call
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype == torch.bfloat16
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    # outside a region the program is another (the ambient autocast is part of the cache key)
    torch.testing.assert_close(jm(x), mlp(x))


def test_autocast_training_call_then_eager_use_in_one_region():
    """A weight whose cast a training call does not save (its input needs no grad), used again
    by eager code in the same region: eager's later use still gets a cast with history, and the
    weight's grad both uses' parts (runtime/autocast_casts.py leaves no cast of a training
    program to autocast's cache)."""
    torch.manual_seed(0)
    lin = nn.Linear(D, D)
    x = torch.randn(2, D)
    grads = []
    for first in (lin, thunder.jit(lin)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = first(x)
            b = lin(x)
        (a.float().sum() + 2 * b.float().sum()).backward()
        grads.append((lin.weight.grad, lin.bias.grad))
        lin.zero_grad(set_to_none=True)
    for g, e in zip(grads[1], grads[0]):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e, rtol=2e-2, atol=2e-2)
