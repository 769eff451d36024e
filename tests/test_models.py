"""Real models, built from configs with random weights (no downloads): Hugging Face transformers'
GPT-2, Llama, BERT, Mistral, Qwen2 (loss from `labels=` inside the model) and ViT, a
torchvision-style ResNet (in-place ReLUs, BatchNorm), an nn.LSTM model and a nanoGPT with
F.cross_entropy inside. Each: the eval forward, and one training step (the loss and every
gradient, BatchNorm's running statistics) against eager."""
import copy
import math
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder

RTOL, ATOL = 1e-4, 1e-5


def _outputs(out):
    """The tensors of a model's output (a ModelOutput, a tuple, a tensor), in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [v for v in out.values() if isinstance(v, torch.Tensor)]
    return [v for v in out if isinstance(v, torch.Tensor)]


def _loss(out):
    if isinstance(out, dict):
        return out["loss"]
    return out if isinstance(out, torch.Tensor) else out[0]


def check_model(model, kwargs, loss_fn=_loss, compile=thunder.jit, grad_atol=ATOL):
    """compile(model) (thunder.jit; tests/test_dynamo_backend.py: torch.compile with thunder's
    backend) against eager: eval forward under no_grad, then one training step. grad_atol: for
    gradients whose float32 rounding (eager's own, against float64) exceeds ATOL."""
    torch.manual_seed(0)
    reference = copy.deepcopy(model)
    jitted = compile(model)

    model.eval(), reference.eval()
    with torch.no_grad():
        expected, out = reference(**kwargs), jitted(**kwargs)
    assert type(out) is type(expected)
    for a, b in zip(_outputs(out), _outputs(expected), strict=True):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)

    model.train(), reference.train()
    expected_loss = loss_fn(reference(**kwargs))
    loss = loss_fn(jitted(**kwargs))
    torch.testing.assert_close(loss, expected_loss, rtol=RTOL, atol=ATOL)
    expected_loss.backward()
    loss.backward()
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), name
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=grad_atol, msg=lambda m: f"{name}: {m}")
    for (name, b), (_, c) in zip(model.named_buffers(), reference.named_buffers(), strict=True):
        torch.testing.assert_close(b, c, rtol=RTOL, atol=ATOL, msg=lambda m: f"buffer {name}: {m}")
    return jitted


# --------------------------------------------------------------------------------------------
# Hugging Face transformers

transformers = pytest.importorskip("transformers", reason="transformers is not installed")

TOKENS = dict(vocab_size=96, max_position_embeddings=32)
DECODER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, attention_dropout=0.0, **TOKENS)


def _ids(batch=2, seq=8, vocab=96):
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(1))


def _hf(config_cls, model_cls, **config):
    torch.manual_seed(0)
    return model_cls(config_cls(**config))


def _language_model(name):
    t = transformers
    if name == "gpt2":
        return _hf(t.GPT2Config, t.GPT2LMHeadModel, vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    if name == "llama":
        return _hf(t.LlamaConfig, t.LlamaForCausalLM, **DECODER)
    if name == "mistral":
        return _hf(t.MistralConfig, t.MistralForCausalLM, sliding_window=4, **DECODER)
    if name == "qwen2":
        return _hf(t.Qwen2Config, t.Qwen2ForCausalLM, **DECODER)
    if name == "bert":
        return _hf(t.BertConfig, t.BertForMaskedLM, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **TOKENS)
    raise ValueError(name)


@pytest.mark.parametrize("name", ["gpt2", "llama", "mistral", "qwen2", "bert"])
def test_language_model_with_labels(name):
    ids = _ids()
    labels = ids.clone()
    labels[0, :2] = -100  # ignored positions, as a padded batch has
    check_model(_language_model(name), dict(input_ids=ids, labels=labels))


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_language_model_with_padding_mask(name):
    ids = _ids()
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding of the second sequence
    labels = ids.masked_fill(mask == 0, -100)
    check_model(_language_model(name), dict(input_ids=ids, attention_mask=mask, labels=labels))


def _more_models(name):
    """Models the issue does not name: other attention/MLP variants, an encoder-decoder, a
    sequence classifier (dropout 0: thunder's dropout mask is its own draw under grad)."""
    t, ids = transformers, _ids()
    if name == "gemma":
        return _hf(t.GemmaConfig, t.GemmaForCausalLM, head_dim=8, **DECODER), dict(input_ids=ids, labels=ids)
    if name == "phi3":
        return _hf(t.Phi3Config, t.Phi3ForCausalLM, pad_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                   **DECODER), dict(input_ids=ids, labels=ids)
    if name == "t5":
        return (_hf(t.T5Config, t.T5ForConditionalGeneration, vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                    num_heads=4, decoder_start_token_id=0, dropout_rate=0.0), dict(input_ids=ids, labels=ids))
    if name == "distilbert":
        return (_hf(t.DistilBertConfig, t.DistilBertForSequenceClassification, vocab_size=96, dim=32, hidden_dim=64,
                    n_layers=2, n_heads=4, max_position_embeddings=32, dropout=0.0, attention_dropout=0.0,
                    seq_classif_dropout=0.0), dict(input_ids=ids, labels=torch.tensor([0, 1])))
    if name == "llama4":  # (complex rotary embedding, chunked attention mask, MoE)
        return _hf(t.Llama4TextConfig, t.Llama4ForCausalLM, head_dim=8, num_local_experts=2, num_experts_per_tok=1,
                   intermediate_size_mlp=64, interleave_moe_layer_step=1, **DECODER), dict(input_ids=ids, labels=ids)
    if name == "mamba":  # (a state-space model: torch's associative_scan, as under torch.compile)
        return (_hf(t.MambaConfig, t.MambaForCausalLM, vocab_size=96, hidden_size=32, num_hidden_layers=2,
                    state_size=4, expand=2, conv_kernel=4), dict(input_ids=ids, labels=ids))
    if name == "reformer":  # (reversible layers: a torch.autograd.Function whose backward runs autograd;
        # LSH attention, its random rotations seeded by hash_seed)
        return (_hf(t.ReformerConfig, t.ReformerModelWithLMHead, vocab_size=96, hidden_size=32, num_attention_heads=2,
                    attention_head_size=16, feed_forward_size=64, attn_layers=["local", "lsh"], axial_pos_shape=(4, 4),
                    axial_pos_embds_dim=(16, 16), max_position_embeddings=16, local_attn_chunk_length=4,
                    lsh_attn_chunk_length=4, num_buckets=4, is_decoder=True, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, lsh_attention_probs_dropout_prob=0.0,
                    local_attention_probs_dropout_prob=0.0, hash_seed=0), dict(input_ids=_ids(seq=16), labels=_ids(seq=16)))
    if name == "longformer":  # (sliding-window chunks by as_strided of views)
        return (_hf(t.LongformerConfig, t.LongformerForMaskedLM, vocab_size=96, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=64, attention_window=4, max_position_embeddings=40,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
                dict(input_ids=_ids(seq=16), labels=_ids(seq=16)))
    if name == "bigbird":  # (block-sparse attention: numpy's random blocks, unsqueeze_ of products under no_grad)
        return (_hf(t.BigBirdConfig, t.BigBirdForMaskedLM, vocab_size=96, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, attention_type="block_sparse", block_size=2, num_random_blocks=2),
                dict(input_ids=_ids(seq=32), labels=_ids(seq=32)))
    raise ValueError(name)


@pytest.mark.parametrize("name", ["gemma", "phi3", "t5", "distilbert", "mamba", "llama4", "reformer", "longformer",
                                  "bigbird"])
def test_models_not_named_in_the_issue(name):
    model, kwargs = _more_models(name)
    check_model(model, kwargs)


def test_vit_with_labels():
    t = transformers
    model = _hf(t.ViTConfig, t.ViTForImageClassification, image_size=16, patch_size=4, hidden_size=32,
                num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, num_labels=5,
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    check_model(model, dict(pixel_values=pixels, labels=torch.tensor([1, 4])))


def test_wav2vec2_for_ctc_with_labels():
    # (speech recognition fine-tuning: F.ctc_loss inside the model, padded labels)
    t = transformers
    model = _hf(t.Wav2Vec2Config, t.Wav2Vec2ForCTC, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2, vocab_size=12, hidden_dropout=0.0,
                attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0,
                mask_time_prob=0.0, final_dropout=0.0, pad_token_id=0)
    audio = torch.randn(2, 400, generator=torch.Generator().manual_seed(2))
    labels = torch.tensor([[3, 4, 5, 2, -100], [6, 7, 8, 9, 10]])
    # (a CTC loss of 155 summed over frames: eager's own lm_head gradients are 7e-5 from float64's
    # at a scale of 18, more than ATOL; thunder's, its weight-norm convolution traced, 4e-5)
    check_model(model, dict(input_values=audio, labels=labels), grad_atol=2e-4)


# --------------------------------------------------------------------------------------------
# torchvision-style ResNet (BasicBlock, in-place ReLUs, BatchNorm in training mode)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x, target):
        logits = self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))
        return F.cross_entropy(logits, target), logits


def test_resnet_style_cnn():
    torch.manual_seed(0)
    x = torch.randn(4, 3, 16, 16)
    check_model(ResNet(), dict(x=x, target=torch.tensor([0, 3, 9, 3])))


# --------------------------------------------------------------------------------------------
# nn.LSTM


class LSTMTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 12)
        self.lstm = nn.LSTM(12, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(32, 7)

    def forward(self, tokens, tags):
        out, (h, c) = self.lstm(self.embed(tokens))
        logits = self.head(out)
        return F.cross_entropy(logits.flatten(0, 1), tags.flatten()), logits, h, c


def test_lstm_model():
    torch.manual_seed(0)
    tokens = torch.randint(0, 50, (3, 6))
    check_model(LSTMTagger(), dict(tokens=tokens, tags=torch.randint(0, 7, (3, 6))))


# --------------------------------------------------------------------------------------------
# nanoGPT (Karpathy's model, written the same way: fused qkv, sdpa with is_causal, tied weights)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, vocab=64, block_size=16, n_embd=32, n_head=4, n_layer=2):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd), wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)]), ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx, targets):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return loss, logits


def test_nanogpt():
    torch.manual_seed(0)
    idx = torch.randint(0, 64, (2, 16))
    targets = torch.roll(idx, -1, 1)
    targets[:, -1] = -1
    check_model(NanoGPT(), dict(idx=idx, targets=targets))


def _greedy(fn, prompt, steps):
    """Greedy decoding with the model's KV cache: (tokens, logits of each call, the last cache)."""
    out = fn(input_ids=prompt, use_cache=True)
    tokens, logits = [], [out.logits]
    for _ in range(steps):
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(nxt.item())
        out = fn(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
        logits.append(out.logits)
    return tokens, logits, out.past_key_values


def _greedy_matches_eager(jitted, model, steps):
    """Greedy decoding from a 5-token prompt, jitted and eager: the same tokens, close logits.
    Returns the two final caches (jitted, eager)."""
    prompt = _ids(batch=1, seq=5)
    with torch.no_grad():
        expected_tokens, expected_logits, expected_cache = _greedy(model, prompt, steps)
        tokens, logits, cache = _greedy(jitted, prompt, steps)
    assert tokens == expected_tokens
    for a, b in zip(logits, expected_logits, strict=True):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)
    return cache, expected_cache


def test_gpt2_greedy_generation_with_kv_cache_compiles_prefill_and_decode():
    # the jitted model is called once per token with the DynamicCache it returned (its tensors
    # grow by one position each step); under the default cache option the first decode step
    # compiles with the cache's length a symbol (the cache's tensors are read from state that the
    # prefill filled: runtime/carried.py), so every later step runs that program (Llama:
    # tests/test_generate.py)
    model = _language_model("gpt2").eval()
    jitted = thunder.jit(model)
    cache, expected_cache = _greedy_matches_eager(jitted, model, 6)
    stats = thunder.compile_stats(jitted)
    assert (stats.cache_misses, stats.cache_hits) == (2, 5)  # the prompt, then one decode program
    assert stats.last_generalization.startswith("generalized (automatic dynamic: the first call of its structure; "
                                                "the sizes of the tensors it reads from state that the call before "
                                                "did not (a cache it filled)): _sym0: ")
    assert type(cache) is type(expected_cache)
    for layer, expected_layer in zip(cache.layers, expected_cache.layers, strict=True):
        torch.testing.assert_close(layer.keys, expected_layer.keys, rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(layer.values, expected_layer.values, rtol=RTOL, atol=ATOL)


def test_gpt2_decode_loop_under_symbolic_values_stops_recompiling():
    # cache="symbolic values": the prompt's length is a symbol from the first call, the cache's
    # length from the first decode step (its tensors are read from the DynamicCache, state the
    # prefill filled); every later step runs the same program (no compile), with eager's tokens
    model = _language_model("gpt2").eval()
    jitted = thunder.jit(model, cache="symbolic values")
    _greedy_matches_eager(jitted, model, 10)
    stats = thunder.compile_stats(jitted)
    assert (stats.cache_misses, stats.cache_hits) == (2, 9)  # the prompt, then one decode program
    assert stats.last_generalization.startswith("generalized (symbolic values: the first call's sizes and int "
                                                "arguments; the sizes of the tensors it reads from state")
    # (the head count and head size stay constants: the model refuses to change them alone)
    assert re.fullmatch(r"_sym0: _s\d+\.keys dim 2 = _s\d+\.values dim 2 = _s\d+\.keys dim 2 = _s\d+\.values dim 2",
                        stats.last_generalization.split("): ", 1)[1])
    # the recorded decode step in MLIR: the cache's length is `?` in the cache tensors' types
    trace = thunder.last_traces(jitted)[0]
    assert trace.producer == "interpreter (acquisition, symbolic sizes)"
    assert "x?x" in trace.to_mlir() and "tensor.dim" in trace.to_mlir()


@pytest.mark.parametrize("name", ["gpt2", "distilbert"])
def test_training_with_dropout_matches_eager_under_the_same_seed(name):
    # dropout in the model (nn.Dropout) and in attention (sdpa's dropout_p): the same draws as
    # eager from the same generator state, so the loss and every gradient match
    t, ids = transformers, _ids()
    if name == "gpt2":
        model = _hf(t.GPT2Config, t.GPT2LMHeadModel, vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                    resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
        kwargs = dict(input_ids=ids, labels=ids)
    else:
        model = _hf(t.DistilBertConfig, t.DistilBertForSequenceClassification, vocab_size=96, dim=32, hidden_dim=64,
                    n_layers=2, n_heads=4, max_position_embeddings=32)
        kwargs = dict(input_ids=ids, labels=torch.tensor([0, 1]))
    reference = copy.deepcopy(model).train()
    jitted = thunder.jit(model.train())
    for seed in (0, 1):
        torch.manual_seed(seed)
        expected = reference(**kwargs).loss
        torch.manual_seed(seed)
        loss = jitted(**kwargs).loss
        torch.testing.assert_close(loss, expected, rtol=RTOL, atol=ATOL)
        expected_grads = torch.autograd.grad(expected, list(reference.parameters()), allow_unused=True)
        grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
        for g, e in zip(grads, expected_grads, strict=True):
            assert (g is None) == (e is None)
            if e is not None:
                torch.testing.assert_close(g, e, rtol=RTOL, atol=ATOL)
