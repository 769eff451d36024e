"""The VJP rules of the ops of thunder/ops/attention.py (registered on them with OpDef.vjp)."""
from thunder.ops.attention import _sdpa_grads, scaled_dot_product_attention, sdpa_flash, sdpa_flash_backward


@scaled_dot_product_attention.vjp
def _(g, out, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    if dropout_p > 0:
        raise NotImplementedError(
            "thunder: the gradient of scaled_dot_product_attention with dropout_p > 0 is not supported (the "
            "dropout mask is drawn inside the fused kernel and backward cannot see it). Workaround: train with "
            "dropout_p=0.0, or compute the attention with matmul/softmax/F.dropout")
    return _sdpa_grads(g, query, key, value, attn_mask, is_causal, scale, enable_gqa)


@sdpa_flash.vjp
def _(g, out, query, key, value, is_causal=False, *, scale=None):
    g_out, g_lse = g
    if g_lse is not None:
        raise NotImplementedError("thunder: sdpa_flash's logsumexp is not differentiable")
    gq, gk, gv = sdpa_flash_backward(g_out, query, key, value, out[0], out[1], is_causal, scale=scale)
    return {"query": gq, "key": gk, "value": gv}
