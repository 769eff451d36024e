"""Attention ltorch ops: scaled_dot_product_attention (torch's flash kernel where it applies), the
attention probabilities' gradients, nn.MultiheadAttention's native fast path. Split from nn.py;
their VJP rules: thunder/ops/vjp/attention.py."""

import torch
import torch.nn.functional as F

from thunder.core import symbols, trace as tracing
from thunder.core.proxies import TensorProxy
from thunder.ops import prims, vjp_utils as _vjp
from thunder.ops.decomp_utils import expand_to, to_dtype
from thunder.ops.elementwise import add, eq, mul, ne, sub, where
from thunder.ops.indexing import masked_fill
from thunder.ops.meta_utils import broadcast_shapes
from thunder.ops.nn import _compute_dtype, _dropout, _keep, _softmax_decomp, linear, matmul, softmax
from thunder.ops.reductions import all_, mean, sum_
from thunder.ops.registry import Bool, Float, Int, ltorch, OpDef, Tensor
from thunder.ops.join_split import chunk
from thunder.ops.shape import expand, reshape, transpose


def _sdpa_check(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
    if min(query.ndim, key.ndim, value.ndim) < 2:
        raise RuntimeError(f"Expected query, key, and value to all be  at least 2 dimensional, but got query.dim: "
                           f"{query.ndim} key.dim: {key.ndim} and value.dim: {value.ndim} instead.")
    if not query.dtype == key.dtype == value.dtype:
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got query.dtype: "
                           f"{query.dtype} key.dtype: {key.dtype} and value.dtype: {value.dtype} instead.")
    if attn_mask is not None and attn_mask.dtype not in (torch.bool, query.dtype):
        raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                           f"attn_mask.dtype: {attn_mask.dtype} and  query.dtype: {query.dtype} instead.")
    if attn_mask is not None and is_causal:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"scaled_dot_product_attention: incompatible shapes query {list(query.shape)}, key "
                           f"{list(key.shape)}, value {list(value.shape)}")
    groups = 1
    if enable_gqa and query.ndim >= 3:
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hk != hv or hq % hk:
            raise RuntimeError("Number of heads in key and value must divide the number of heads in query")
        groups = hq // hk
    kv_batch = [(*x.shape[:-3], x.shape[-3] * groups) if x.ndim >= 3 else () for x in (key, value)]
    batch = broadcast_shapes(query.shape[:-2], *kv_batch)
    L, S = query.shape[-2], key.shape[-2]
    if attn_mask is not None:
        broadcast_shapes(attn_mask.shape, (*batch, L, S))
    return batch, groups


@ltorch("torch.nn.functional.scaled_dot_product_attention", random=True, aliases=(F.scaled_dot_product_attention,))
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: Float = 0.0, is_causal: Bool = False, *, scale: Float | None = None,
                                 enable_gqa: Bool = False):
    """Random only with dropout_p > 0."""
    batch, _ = _sdpa_check(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    if dropout_p > 0 and _needs_grad(query, key, value, attn_mask):
        # the dropout mask is drawn inside torch's kernel, where a backward of ours cannot see it:
        # the fallback records torch's own call, whose gradient replays the same draw
        raise NotImplementedError("thunder: scaled_dot_product_attention with dropout_p > 0 in training runs as "
                                  "torch's call")
    return TensorProxy((*batch, query.shape[-2], value.shape[-1]), query.dtype, query.device)


def _needs_grad(*tensors):
    """Whether the call is traced with grad enabled (whether a gradient will flow through these
    tensors is known only after tracing)."""
    return tracing.current() is not None and tracing.grad_enabled()


def _repeat_heads(x, groups):
    """repeat_interleave(x, groups, dim=-3)."""
    if groups == 1:
        return x
    *b, h, s, e = x.shape
    x = prims.broadcast_in_dim(x, (*b, h, groups, s, e), (*range(len(b) + 1), len(b) + 2, len(b) + 3))
    return prims.reshape(x, (*b, h * groups, s, e))


def _sdpa_scores(query, key, value, attn_mask, is_causal, scale, batch, groups):
    """q k^T * scale + mask in the compute dtype (prims), and v, both broadcast over batch."""
    cdt = _compute_dtype(query.dtype)
    q, k, v = (to_dtype(x, cdt) for x in (query, key, value))
    k, v = _repeat_heads(k, groups), _repeat_heads(v, groups)
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    q, k, v = (expand_to(x, (*batch, *x.shape[-2:])) for x in (q, k, v))
    n = len(batch)
    scores = prims.matmul(q, prims.transpose(k, (*range(n), n + 1, n)))
    scale = 1.0 / symbols.sqrt(E) if scale is None else scale
    scores = prims.mul(scores, symbols.to_float(scale))
    shape = tuple(scores.shape)
    if is_causal:
        attn_mask = _causal_mask(L, S, q.device)
    if attn_mask is not None:
        mask = expand_to(attn_mask, shape)
        if mask.dtype is torch.bool:
            scores = prims.where(mask, scores, float("-inf"))
        else:
            scores = prims.add(scores, to_dtype(mask, cdt))
    return scores, v


def _causal_mask(L, S, device):
    """True where key position <= query position (torch's top-left aligned causal mask)."""
    rows = prims.iota(L, start=0, step=1, dtype=torch.int64, device=device)
    cols = prims.iota(S, start=0, step=1, dtype=torch.int64, device=device)
    return prims.le(prims.broadcast_in_dim(cols, (L, S), (1,)), prims.broadcast_in_dim(rows, (L, S), (0,)))


@scaled_dot_product_attention.decompose
def _(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    batch, groups = _sdpa_check(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    scores, v = _sdpa_scores(query, key, value, attn_mask, is_causal, scale, batch, groups)
    shape, S = tuple(scores.shape), key.shape[-2]
    probs = _softmax_decomp(scores, -1, None, log=False)
    if attn_mask is not None:  # as torch's _safe_softmax: rows masked out entirely attend to nothing (0, not nan)
        masked = prims.eq(scores, float("-inf"))
        full_rows = prims.eq(prims.sum(prims.convert_element_type(masked, torch.int64), (len(shape) - 1,)), S)
        zeros = prims.full(shape, 0.0, dtype=probs.dtype, device=probs.device)
        probs = prims.where(prims.broadcast_in_dim(full_rows, shape, tuple(range(len(shape) - 1))), zeros, probs)
    if dropout_p > 0:
        probs = _dropout(probs, dropout_p)
    out = prims.matmul(probs, v)
    return to_dtype(out, query.dtype)


def _flash_applies(query, key, value, attn_mask, dropout_p, enable_gqa):
    """Whether one of torch's fused attention kernels computes this sdpa and its backward from
    the output and the logsumexp (impl.sdpa_flash): 4-d tensors of one floating dtype on one
    device with equal batch, heads and head dims, no attn_mask, no dropout. On the CPU torch's
    flash kernel (as eager's dispatch picks it); on CUDA flash attention or the memory-efficient
    kernel (impl.sdpa_cuda_backend), never the [B, H, L, S] probabilities in float32 of the
    decomposed backward: head dims a multiple of 8 up to 256 (what both kernels take)."""
    devices = {x.device.type for x in (query, key, value)}
    if not (all(x.ndim == 4 for x in (query, key, value)) and len(devices) == 1
            and query.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16)
            and attn_mask is None and dropout_p == 0.0
            and query.shape[:2] == key.shape[:2] == value.shape[:2]
            and query.shape[-1] == key.shape[-1] == value.shape[-1]
            and query.shape[-2] > 0 and key.shape[-2] > 0 and query.shape[-1] > 0):
        return False
    if devices == {"cpu"}:
        return True
    return devices == {"cuda"} and query.dtype is not torch.float64 and query.shape[-1] % 8 == 0 \
        and query.shape[-1] <= 256


@scaled_dot_product_attention.trains_as
def _(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
    if not _flash_applies(query, key, value, attn_mask, dropout_p, enable_gqa):
        return None
    return sdpa_flash, dict(query=query, key=key, value=value, is_causal=is_causal, scale=scale)


@ltorch("impl.sdpa_flash", returns_sequence=True)
def sdpa_flash(query: Tensor, key: Tensor, value: Tensor, is_causal: Bool = False, *, scale: Float | None = None):
    """scaled_dot_product_attention (no mask, no dropout) with the logsumexp of each row of the
    scaled scores, as torch's fused attention kernels compute them (the CPU flash kernel; on CUDA
    the one impl.sdpa_cuda_backend picks): sdpa's form in @forward
    (the backward kernel reads q, k, v, the output and the logsumexp instead of recomputing
    the attention probabilities)."""
    batch, _ = _sdpa_check(query, key, value, None, 0.0, is_causal, False)
    return (TensorProxy((*batch, query.shape[-2], value.shape[-1]), query.dtype, query.device),
            TensorProxy((*batch, query.shape[-2]), _compute_dtype(query.dtype), query.device))


@sdpa_flash.decompose
def _(query, key, value, is_causal=False, *, scale=None):
    batch, _ = _sdpa_check(query, key, value, None, 0.0, is_causal, False)
    scores, v = _sdpa_scores(query, key, value, None, is_causal, scale, batch, 1)
    m = prims.amax(scores, (scores.ndim - 1,))
    shifted = prims.sub(scores, _keep(m, scores.shape, (scores.ndim - 1,)))
    e = prims.exp(shifted)
    total = prims.sum(e, (scores.ndim - 1,))
    probs = prims.div(e, _keep(total, scores.shape, (scores.ndim - 1,)))
    out = to_dtype(prims.matmul(probs, v), query.dtype)
    return out, prims.add(m, prims.log(total))


@ltorch("impl.sdpa_flash_backward", returns_sequence=True)
def sdpa_flash_backward(grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor, out: Tensor, logsumexp: Tensor,
                        is_causal: Bool = False, *, scale: Float | None = None):
    """The query, key and value cotangents of sdpa_flash (the backward of torch's fused attention
    kernel that computed it)."""
    return tuple(TensorProxy(x.shape, x.dtype, x.device) for x in (query, key, value))


@sdpa_flash_backward.decompose
def _(grad_out, query, key, value, out, logsumexp, is_causal=False, *, scale=None):
    grads = _sdpa_grads(grad_out, query, key, value, None, is_causal, scale, False)
    return grads["query"], grads["key"], grads["value"]


class _NativeMHAOp(OpDef):
    """Without need_weights the second result is None, as eager's."""

    def __call__(self, *args, **kwargs):
        out = super().__call__(*args, **kwargs)
        return out if len(out) == 2 else (out[0], None)


@ltorch("impl.native_multi_head_attention", aliases=(torch._native_multi_head_attention,), returns_sequence=True)
def native_multi_head_attention(query: Tensor, key: Tensor, value: Tensor, embed_dim: Int, num_head: Int,
                                qkv_weight: Tensor, qkv_bias: Tensor, proj_weight: Tensor, proj_bias: Tensor,
                                mask: Tensor | None = None, need_weights: Bool = True,
                                average_attn_weights: Bool = True, mask_type: Int | None = None):
    """nn.MultiheadAttention's inference fast path (batch first): (output, attention weights
    averaged over heads or per head; None without need_weights). Mask entries that are nonzero
    (True) are masked out, float masks too (as eager's kernel)."""
    b, l, e = query.shape
    s = key.shape[1]
    if e != embed_dim or embed_dim % num_head or tuple(qkv_weight.shape) != (3 * e, e):
        raise RuntimeError(f"_native_multi_head_attention: query of shape {list(query.shape)}, embed_dim {embed_dim}, "
                           f"{num_head} heads and qkv_weight of shape {list(qkv_weight.shape)} do not fit")
    out = TensorProxy((b, l, proj_weight.shape[0]), query.dtype, query.device)
    if not need_weights:
        return (out,)
    return out, TensorProxy((b, l, s) if average_attn_weights else (b, num_head, l, s), query.dtype, query.device)


native_multi_head_attention.__class__ = _NativeMHAOp


@native_multi_head_attention.decompose
def _(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias, mask=None,
      need_weights=True, average_attn_weights=True, mask_type=None):
    b, l, e = query.shape
    s, hd = key.shape[1], embed_dim // num_head
    wq, wk, wv = chunk(qkv_weight, 3)
    bq, bk, bv = chunk(qkv_bias, 3)

    def heads(x, w, bias, n):  # (b, n, e) -> (b, heads, n, head dim)
        return transpose(reshape(linear(x, w, bias), (b, n, num_head, hd)), 1, 2)

    q = heads(query, wq, bq, l)
    k, v = heads(key, wk, bk, s), heads(value, wv, bv, s)
    scores = matmul(mul(q, 1.0 / symbols.sqrt(hd)), transpose(k, -2, -1))
    if mask is not None:
        m = mask if mask.dtype is torch.bool else ne(mask, 0)
        if mask_type == 0:
            m = reshape(m, (1, 1, l, s))
        elif mask_type == 1:
            m = reshape(m, (b, 1, 1, s))
        scores = masked_fill(scores, m, float("-inf"))
    p = softmax(scores, -1)
    out = linear(reshape(transpose(matmul(p, v), 1, 2), (b, l, e)), proj_weight, proj_bias)
    if not need_weights:
        return (out,)
    return out, (mean(p, 1) if average_attn_weights else p)


def _sdpa_grads(g, query, key, value, attn_mask, is_causal, scale, enable_gqa):
    """sdpa's cotangents: recomputes the attention probabilities P (one matmul and a softmax)
    and differentiates softmax(q k^T * scale + mask) v directly."""
    batch, groups = _sdpa_check(query, key, value, attn_mask, 0.0, is_causal, enable_gqa)
    q, k, v = (_vjp.upcast(x) for x in (query, key, value))
    if groups > 1:
        k, v = _repeat_heads(k, groups), _repeat_heads(v, groups)
    k_heads, v_heads = tuple(k.shape), tuple(v.shape)  # after repeating heads, before broadcasting
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    q, k, v = (x if tuple(x.shape[:-2]) == tuple(batch) else expand(x, (*batch, *x.shape[-2:])) for x in (q, k, v))
    scale = 1.0 / symbols.sqrt(E) if scale is None else symbols.to_float(scale)
    scores = mul(matmul(q, _vjp.mT(k)), scale)
    if is_causal:
        attn_mask = _causal_mask(L, S, q.device)
    if attn_mask is not None:
        if attn_mask.dtype is torch.bool:
            scores = where(attn_mask, scores, float("-inf"))
        else:
            scores = add(scores, _vjp.upcast(attn_mask))
    p = softmax(scores, -1)
    if attn_mask is not None:  # rows masked out entirely: probabilities 0 (torch's _safe_softmax)

        p = where(all_(eq(scores, float("-inf")), -1, True), 0.0, p)
    g32 = _vjp.upcast(g)
    gv = matmul(_vjp.mT(p), g32)
    gp = matmul(g32, _vjp.mT(v))
    gs = mul(p, sub(gp, sum_(mul(gp, p), -1, True)))  # softmax's VJP
    gq = mul(matmul(gs, k), scale)
    gk = mul(matmul(_vjp.mT(gs), q), scale)

    def unrepeat(gx, heads):
        gx = _vjp.sum_to_shape(gx, heads)
        if groups > 1:  # the query heads that shared a key/value head add up
            *b, h, s, e = heads
            gx = sum_(reshape(gx, (*b, h // groups, groups, s, e)), len(b) + 1)
        return gx

    return {"query": _vjp.grad_for(query, gq), "key": _vjp.grad_for(key, unrepeat(gk, k_heads)),
            "value": _vjp.grad_for(value, unrepeat(gv, v_heads)),
            "attn_mask": _vjp.grad_for(attn_mask, gs) if attn_mask is not None and not is_causal else None}
