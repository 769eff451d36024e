"""bf16 autocast through fused kernels: the causal-LM loss as transformers computes it
(`logits.float().view(-1, vocab)`, lowering/conversion_reshapes.py) is one fused cross-entropy
kernel reading the bf16 logits, forward and backward, with no float32 copy of the logits; a chain
of bf16 elementwise ops (GPT-2's gelu_new) keeps its intermediates in f32 inside the kernel,
rounding once (lowering/linalg/bf16_intermediates.py). Values and grads against eager's autocast."""
import math
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from thunder.lowering.linalg import to_linalg

# logits [16, 8192]: 256 KiB in bf16, over fuse.UNTILED_MAX_BYTES in float32 (unfused before)
B, T, D, V = 2, 8, 32, 8192


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.proj = nn.Linear(D, D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, ids, labels):
        logits = self.head(torch.tanh(self.proj(self.embed(ids))))
        # transformers' ForCausalLMLoss
        labels = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
        loss = F.cross_entropy(logits.float().view(-1, V), labels.view(-1), ignore_index=-100)
        return loss, logits


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    model = Head()
    ids = torch.randint(0, V, (B, T))
    jm = thunder.jit(model)
    results = []
    for fn in (model, jm):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, logits = fn(ids, ids)
        loss.backward()
        results.append((loss, logits, {n: p.grad for n, p in model.named_parameters()}))
        model.zero_grad(set_to_none=True)
    return results, jm


def test_causal_lm_loss_under_autocast_matches_eager(trained):
    (e_loss, e_logits, e_grads), (t_loss, t_logits, t_grads) = trained[0]
    assert (t_loss.dtype, t_logits.dtype) == (e_loss.dtype, e_logits.dtype) == (torch.float32, torch.bfloat16)
    torch.testing.assert_close(t_loss, e_loss, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(t_logits, e_logits, rtol=2e-2, atol=2e-2)
    for name, g in e_grads.items():
        assert t_grads[name].dtype == g.dtype == torch.float32, name
        scale = g.abs().max().item()
        torch.testing.assert_close(t_grads[name] / scale, g / scale, rtol=3e-2, atol=3e-2, msg=name)


def test_causal_lm_loss_reads_bf16_logits_in_one_kernel(trained):
    jm = trained[1]
    fwd = str(thunder.last_traces(jm)[-1])
    bwd = str(thunder.last_backward_traces(jm)[-1])
    for text in (fwd, bwd):
        lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
        logits_sized = [ln for ln in lines if re.search(rf"(\[{B * T}, {V}\]|\[{B}, {T}, {V}\])", ln.split("#", 1)[-1])]
        # no float32 tensor of the logits' size is made: no copy, no unfused pass over them
        assert not [ln for ln in logits_sized if "float32" in ln], "\n".join(logits_sized)
    # forward: the head's matmul, a view, then the loss kernel reads the bf16 logits; backward:
    # one kernel writes the bf16 gradient of the logits ([rows, V]) that the head's matmuls read
    fwd_logits = [ln for ln in fwd.splitlines() if re.search(rf"bfloat16\[{B * T}, {V}\]", ln)]
    assert len(fwd_logits) == 1 and "torch.reshape(" in fwd_logits[0], fwd_logits
    logits_view = fwd_logits[0].split("=")[0].strip()
    assert re.search(rf"= fusion_\d+\(.*\b{logits_view}\b", fwd)
    assert len(re.findall(rf"= fusion_\d+\(.*# cpu bfloat16\[{B * T}, {V}\]", bwd)) == 1, bwd


def gelu_new(x):  # transformers' NewGELUActivation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def test_bf16_elementwise_chain_rounds_once():
    x = torch.randn(64, 256).bfloat16()
    jf = thunder.jit(gelu_new, fusion="always")
    got = jf(x)
    exact = gelu_new(x.double())
    assert got.dtype == torch.bfloat16
    # rounded once: within half a bf16 ulp (plus f32 math) of the exact result, no worse than eager
    assert (got.double() - exact).abs().max() <= (gelu_new(x).double() - exact).abs().max()
    torch.testing.assert_close(got, gelu_new(x), rtol=1.6e-2, atol=1e-2)
    module = thunder.last_traces(jf)[-1].to_mlir()
    name = re.search(r"(fusion_\d+)\(", str(thunder.last_traces(jf)[-1])).group(1)
    linalg = to_linalg(str(module), name)
    assert len(re.findall(r"arith\.truncf .* to bf16", linalg)) == 1, linalg
