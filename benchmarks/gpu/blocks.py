"""A Llama-style decoder block (RMSNorm, rotary embedding with cat, grouped-query causal sdpa,
SwiGLU MLP, residuals) as one function of its weights, for benchmarks/gpu/bench.py beside
benchmarks/gpt_block.py's GPT block."""
import torch
import torch.nn.functional as F


def rms_norm(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rotary(x, cos, sin):
    d = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., d:], x[..., :d]), dim=-1) * sin


def llama_block(x, n1, wq, wk, wv, wo, n2, w1, w3, w2, cos, sin, n_head, n_kv):
    B, T, C = x.shape
    hd = C // n_head
    h = rms_norm(x, n1)
    q = (h @ wq).view(B, T, n_head, hd).transpose(1, 2)
    k = (h @ wk).view(B, T, n_kv, hd).transpose(1, 2)
    v = (h @ wv).view(B, T, n_kv, hd).transpose(1, 2)
    q, k = rotary(q, cos, sin), rotary(k, cos, sin)
    k = k.repeat_interleave(n_head // n_kv, dim=1)
    v = v.repeat_interleave(n_head // n_kv, dim=1)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + a.transpose(1, 2).reshape(B, T, C) @ wo
    h = rms_norm(x, n2)
    return x + (F.silu(h @ w1) * (h @ w3)) @ w2


def llama_inputs(batch, seq, width, n_head, n_kv, ffn, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(0)
    hd = width // n_head

    def w(*shape, scale=None):
        return (torch.randn(*shape, generator=g) * (scale or shape[0] ** -0.5)).to(device, dtype).requires_grad_()

    pos = torch.arange(seq, dtype=torch.float32)[:, None] * (10000 ** (-torch.arange(0, hd, 2) / hd))[None]
    ang = torch.cat((pos, pos), -1)
    x = torch.randn(batch, seq, width, generator=g).to(device, dtype).requires_grad_()
    weights = [torch.ones(width, device=device, dtype=dtype).requires_grad_(), w(width, width),
               w(width, n_kv * hd), w(width, n_kv * hd), w(width, width),
               torch.ones(width, device=device, dtype=dtype).requires_grad_(),
               w(width, ffn), w(width, ffn), w(ffn, width)]
    return [x, *weights, ang.cos().to(device, dtype), ang.sin().to(device, dtype), n_head, n_kv]
