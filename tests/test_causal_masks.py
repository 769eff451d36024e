"""scaled_dot_product_attention with a constant causal mask is traced as is_causal=True, as eager
transformers calls it (runtime/causal_masks.py): only where the mask's value is computed and is
torch's top-left causal mask; values and grads against eager in every case, the mask kept
where it reads an input, is not top-left causal, or sizes are symbols."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import thunder


def sdpa_calls(jf):
    """The scaled_dot_product_attention calls of the trace as acquired (one line each)."""
    return [line for line in str(thunder.last_traces(jf)[0]).splitlines() if "scaled_dot_product_attention(" in line]


def causal_everywhere(jf):
    calls = sdpa_calls(jf)
    return bool(calls) and all(", None, 0.0, True" in c for c in calls)


def check_against_eager(f, q, k, v, *rest, **jit_kwargs):
    """thunder.jit(f) equals f (values, and grads of q, k, v); returns the jitted function."""
    jf = thunder.jit(f, **jit_kwargs)
    ins = [x.detach().requires_grad_() for x in (q, k, v)]
    jins = [x.detach().requires_grad_() for x in (q, k, v)]
    expected, got = f(*ins, *rest), jf(*jins, *rest)
    torch.testing.assert_close(got, expected)
    g = torch.randn_like(expected)
    expected.backward(g)
    got.backward(g)
    for a, b in zip(jins, ins):
        torch.testing.assert_close(a.grad, b.grad)
    return jf


def qkv(L, S):
    torch.manual_seed(0)
    return torch.randn(2, 3, L, 8), torch.randn(2, 3, S, 8), torch.randn(2, 3, S, 8)


def arange_causal(q, k, v):
    L, S = q.shape[-2], k.shape[-2]
    mask = torch.arange(L)[:, None] >= torch.arange(S)[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None].expand(2, 1, L, S))


def tril_top_left(q, k, v):
    L, S = q.shape[-2], k.shape[-2]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(L, S, dtype=torch.bool).tril())


def bottom_right(q, k, v):
    """A decode step's mask: L new queries after S - L cached keys (not torch's is_causal)."""
    L, S = q.shape[-2], k.shape[-2]
    mask = torch.arange(S)[None, :] <= torch.arange(L)[:, None] + (S - L)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def masked_by_argument(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("fn,L,S", [(arange_causal, 6, 6), (tril_top_left, 3, 5), (tril_top_left, 5, 3)])
def test_a_constant_causal_mask_becomes_is_causal(fn, L, S):
    jf = check_against_eager(fn, *qkv(L, S))
    assert causal_everywhere(jf), sdpa_calls(jf)


def test_a_bottom_right_mask_is_kept():
    jf = check_against_eager(bottom_right, *qkv(2, 5))
    assert not causal_everywhere(jf), sdpa_calls(jf)


def test_a_causal_mask_passed_in_is_kept():
    # (its value may differ in the next call: the program reads it)
    jf = check_against_eager(masked_by_argument, *qkv(4, 4), torch.ones(4, 4, dtype=torch.bool).tril())
    assert not causal_everywhere(jf)
    q, k, v = qkv(4, 4)
    other = torch.ones(4, 4, dtype=torch.bool)
    torch.testing.assert_close(jf(q, k, v, other), masked_by_argument(q, k, v, other))


def test_symbolic_sizes_keep_the_mask():
    jf = check_against_eager(arange_causal, *qkv(6, 6), cache="symbolic values")
    assert not causal_everywhere(jf)
    q, k, v = qkv(9, 9)
    torch.testing.assert_close(jf(q, k, v), arange_causal(q, k, v))


# ---- transformers: the causal mask its masking_utils builds when told it is being compiled
transformers = pytest.importorskip("transformers", reason="transformers is not installed")


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return transformers.LlamaForCausalLM(config).eval()


def test_transformers_prefill_uses_is_causal(llama):
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    jm = thunder.jit(llama)
    with torch.no_grad():
        torch.testing.assert_close(jm(input_ids=ids, use_cache=False).logits, llama(input_ids=ids, use_cache=False).logits)
    assert causal_everywhere(jm), sdpa_calls(jm)
    # training: loss and grads
    jm = thunder.jit(llama)
    got = jm(input_ids=ids, labels=ids, use_cache=False).loss
    got.backward()
    grads = {n: p.grad for n, p in llama.named_parameters()}
    llama.zero_grad(set_to_none=True)
    expected = llama(input_ids=ids, labels=ids, use_cache=False).loss
    expected.backward()
    torch.testing.assert_close(got, expected)
    for n, p in llama.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, msg=n)
    llama.zero_grad(set_to_none=True)
    assert causal_everywhere(jm), sdpa_calls(jm)


def test_transformers_padding_mask_is_kept(llama):
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(2))
    attention_mask = torch.ones(2, 7, dtype=torch.long)
    attention_mask[0, :3] = 0  # left padding
    jm = thunder.jit(llama)
    with torch.no_grad():
        got = jm(input_ids=ids, attention_mask=attention_mask, use_cache=False).logits
        expected = llama(input_ids=ids, attention_mask=attention_mask, use_cache=False).logits
    torch.testing.assert_close(got, expected)
    assert not causal_everywhere(jm)


def test_transformers_decode_step_keeps_its_mask(llama):
    """Two new tokens after five cached ones (q_len 2, kv_len 7): eager and thunder alike."""
    ids = torch.randint(0, 64, (1, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        caches = []
        for _ in range(2):
            cache = transformers.DynamicCache(config=llama.config)
            llama(input_ids=ids[:, :5], past_key_values=cache, use_cache=True)
            caches.append(cache)
        jm = thunder.jit(llama)
        got = jm(input_ids=ids[:, 5:], past_key_values=caches[0], use_cache=True).logits
        expected = llama(input_ids=ids[:, 5:], past_key_values=caches[1], use_cache=True).logits
    torch.testing.assert_close(got, expected)
    assert sdpa_calls(jm)
