"""scaled_dot_product_attention trained on CUDA: torch's fused attention kernels (flash or
memory-efficient) forward and backward through impl.sdpa_flash, never the decomposed backward's
[B, H, L, S] float32 probabilities (tests/lit/autograd_sdpa_cuda.mlir checks the traces without
a GPU)."""
import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.ops import impl


@pytest.mark.parametrize("dtype, head_dim, causal, L, S, capability, expected", [
    (torch.bfloat16, 64, True, 1024, 1024, (9, 0), "flash"),
    (torch.float16, 256, False, 7, 9, (8, 0), "flash"),
    (torch.float32, 64, True, 16, 16, (9, 0), "efficient"),  # flash has no f32 kernel
    (torch.bfloat16, 64, False, 16, 16, (7, 5), "efficient"),  # flash needs sm80
    (torch.bfloat16, 64, True, 8, 16, (9, 0), "efficient"),  # flash's causal mask is bottom-right aligned
])
def test_cuda_backend_choice(dtype, head_dim, causal, L, S, capability, expected):
    assert impl.sdpa_cuda_backend(dtype, head_dim, causal, L, S, capability) == expected


def _attention(qkv, k_extra, causal):
    """q, k, v split from one projection (strided, as in a GPT block), keys longer than queries
    where k_extra > 0."""
    b, s, three_e = qkv.shape
    q, k, v = (t.reshape(b, s, 2, three_e // 6).transpose(1, 2) for t in qkv.split(three_e // 3, -1))
    if k_extra:
        k, v = torch.cat([k, k[:, :, :k_extra]], 2), torch.cat([v, v[:, :, :k_extra]], 2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("k_extra", [0, 8])
def test_sdpa_training_on_cuda_equals_eager(dtype, k_extra):
    torch.manual_seed(0)
    qkv = torch.randn(2, 48, 3 * 128, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(2, 2, 48, 64, device="cuda", dtype=dtype)
    jf = thunder.jit(_attention)
    out = jf(qkv, k_extra, True)
    (grad,) = torch.autograd.grad(out, qkv, g)
    expected = _attention(qkv, k_extra, True)
    (expected_grad,) = torch.autograd.grad(expected, qkv, g)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype is torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out, expected, **tol)
    torch.testing.assert_close(grad, expected_grad, **tol)
    fwd, bwd = str(thunder.last_traces(jf)[-1]), str(thunder.last_backward_traces(jf)[-1])
    assert "impl.sdpa_flash(" in fwd and "impl.sdpa_flash_backward(" in bwd
    assert "48, 48]" not in bwd and "48, 56]" not in bwd  # no [B, H, L, S] tensor
