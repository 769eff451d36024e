"""The program of one KV-cache decode step (batch 1, one new token, a transformers StaticCache
updated in place), as benchmarks/realistic.py runs it, at a small size: its logits and cache
updates equal eager's, and the torch calls it makes, counted by kind, are exactly these (the
test suite's fixed cost model, tests/conftest.py).

What the counts show (issue 27, decoding): a one-token step's elementwise regions are tiny
(Executor.tiny: they move fewer bytes than a torch op's fixed cost takes), so
- a Llama's rotary embedding keeps its slices, neg and cat in the kernel (they were head views
  given to torch: four `impl.slice_prim` calls a layer) and q's and k's are one kernel
  (fuse.input_siblings: siblings reading the rotary tables the first layer's region made);
- GPT-2's eval dropouts record nothing (eager returns the input itself): 5 `F.dropout` calls
  fewer;
- the caches' updates under no_grad pass their values on (`impl.no_grad_update`, which only
  tells thunder-autograd that a tensor keeps its history, is left out of programs that record
  none): 6 calls fewer.
silu(gate) * up and GPT-2's residual add + layer_norm stay two torch calls each under the fixed
cost model (a kernel call 5 us, a torch op 1.1 us); the calibrated model of a process may fuse
them (docs/benchmarks.md).
"""
import collections
import re

import pytest
import torch

import thunder

transformers = pytest.importorskip("transformers", reason="transformers is not installed")

PROMPT, STEPS, CACHE = 6, 2, 16


def _model(name):
    t = transformers
    torch.manual_seed(0)
    if name == "llama":
        config = t.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                               bos_token_id=0, eos_token_id=None)
        return t.LlamaForCausalLM(config).eval()
    config = t.GPT2Config(vocab_size=96, n_embd=64, n_layer=2, n_head=4, n_positions=64, resid_pdrop=0.0,
                          embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=None)
    return t.GPT2LMHeadModel(config).eval()


def _calls(program):
    """{callee: count} of the calls in a generated program's body (fusion_N counted as one kind)."""
    counts = collections.Counter()
    for line in program.splitlines()[1:]:
        m = re.match(r"\s+[\w, ]+ = ([\w.]+)\(", line) or re.match(r"\s+([\w.]+)\(", line)
        if m:
            counts[re.sub(r"^fusion_\d+$", "fusion", m[1])] += 1
    return dict(counts)


def _decode(name):
    """(eager's and thunder's logits of each step, the caches after them, thunder's program)."""
    model = _model(name)
    ids = torch.randint(0, 96, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    jitted = thunder.jit(model)
    results = []
    for fn in (model, jitted):
        cache = transformers.StaticCache(config=model.config, max_cache_len=CACHE)
        logits = []
        with torch.no_grad():
            out = model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(PROMPT), use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
            for i in range(STEPS):
                out = fn(input_ids=tok, past_key_values=cache, cache_position=torch.tensor([PROMPT + i]),
                         use_cache=True)
                tok = out.logits[:, -1:].argmax(-1)
                logits.append(out.logits)
        results.append((logits, [t for layer in cache.layers for t in (layer.keys, layer.values)]))
    return results, str(thunder.last_traces(jitted)[-1]), thunder.compile_stats(jitted)


# the execution trace of a cached step: torch calls by kind, "fusion" the fused-kernel calls
EXPECTED = {
    "llama": {
        "torch.nn.functional.embedding": 1, "torch.nn.functional.linear": 15, "fusion": 8,
        "torch.nn.functional.silu": 2, "torch.mul": 2,
        "torch.nn.functional.scaled_dot_product_attention": 2, "torch.Tensor.index_copy_": 4,
        "torch.Tensor.add_": 2, "torch.add": 1, "torch.reshape": 6,
        "torch.transpose": 4, "torch.permute": 4, "torch.Tensor.expand": 1, "torch.cos": 1, "torch.sin": 1,
        "operator.getitem": 1,
    },
    "gpt2": {
        "torch.nn.functional.embedding": 2, "torch.addmm": 8, "torch.nn.functional.linear": 1, "fusion": 3,
        "torch.nn.functional.layer_norm": 5,
        "torch.nn.functional.scaled_dot_product_attention": 2, "torch.Tensor.index_copy_": 4,
        "torch.Tensor.add_": 1, "torch.add": 6, "torch.reshape": 26,
        "torch.transpose": 8, "torch.split": 2, "torch.unsqueeze": 1, "torch.Tensor.expand": 1,
        "operator.getitem": 1, "cumulative_length.copy_": 1,
    },
}


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_decode_step_program(name, monkeypatch):
    # (unpacked weights: whether a one-row float32 product runs packed is this machine's measurement,
    # ops/packed_linear.py)
    monkeypatch.setenv("THUNDER_PACKED_WEIGHTS", "off")
    ((expected, expected_cache), (got, got_cache)), program, stats = _decode(name)
    for a, b in zip(got + got_cache, expected + expected_cache, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert (stats.calls, stats.cache_misses) == (STEPS, 1)
    assert _calls(program) == EXPECTED[name], program
