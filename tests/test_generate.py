"""Hugging Face `model.generate()` with a jitted forward (`model.forward = thunder.jit(model.forward)`)
against eager: the same tokens (greedy, and sampling from a fixed seed), DynamicCache and StaticCache
(whose code writes dtypes, devices and new objects to the cache: runtime/state.py replays them),
and a bounded number of compilations (sizes that change become symbols)."""
import warnings

import pytest
import torch

import thunder

transformers = pytest.importorskip("transformers", reason="transformers is not installed")


def _model(name):
    t = transformers
    torch.manual_seed(0)
    if name == "gpt2":
        model = t.GPT2LMHeadModel(t.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=1, n_head=2,
                                               bos_token_id=0, eos_token_id=None))
    else:
        model = t.LlamaForCausalLM(t.LlamaConfig(vocab_size=96, max_position_embeddings=32, hidden_size=32,
                                                 intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                                                 num_key_value_heads=2, bos_token_id=0, eos_token_id=None))
    return model.eval()


@pytest.mark.parametrize("name,cache,sample,option", [
    ("gpt2", "dynamic", False, "symbolic values"), ("llama", "dynamic", True, "symbolic values"),
    ("llama", "static", False, "symbolic values"), ("gpt2", "static", True, "symbolic values"),
    ("gpt2", "dynamic", True, "constant values"), ("llama", "dynamic", False, "constant values")])
def test_generate_with_jitted_forward_gives_eager_tokens(name, cache, sample, option):
    model = _model(name)
    ids = torch.randint(0, 96, (1, 5), generator=torch.Generator().manual_seed(1))
    new = 8
    kw = dict(max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    if sample:
        kw.update(do_sample=True, top_k=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(5)
        expected = model.generate(ids, **kw)
        jitted = thunder.jit(model.forward, cache=option, executors=["torch"])
        model.forward = jitted
        torch.manual_seed(5)
        got = model.generate(ids, **kw)
    assert got.shape == (1, 5 + new)
    assert torch.equal(got, expected)
    stats = thunder.compile_stats(jitted)
    # the prefill, then one decode program: the DynamicCache's length is a symbol from the first
    # decode step on (its tensors, read from state the prefill filled: runtime/carried.py); a
    # StaticCache's sizes do not change
    assert (stats.calls, stats.cache_misses) == (new, 2)


def _generate_jitted_module(model, **options):
    """(eager's tokens, the tokens of thunder.jit(model, **options).generate, the jitted module):
    8 new tokens after a 5-token prompt, greedy."""
    ids = torch.randint(0, 96, (1, 5), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=8, min_new_tokens=8, pad_token_id=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = model.generate(ids, **kw)
        jitted = thunder.jit(model, **options)
        return expected, jitted.generate(ids, **kw), jitted


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_generate_of_the_jitted_module_runs_the_compiled_forward(name):
    """thunder.jit(model).generate(...): the original's generate, with its calls of the model
    (self(...), self.forward(...)) running the compiled forward (runtime/module.py: a view of the
    model sharing its __dict__); it ran the original forward eagerly, compiling nothing."""
    model = _model(name)
    expected, got, jitted = _generate_jitted_module(model, executors=["torch"])
    assert torch.equal(got, expected)
    stats = thunder.compile_stats(jitted)
    assert (stats.calls, stats.cache_misses) == (8, 2)
    # methods see the original module: its class, its attributes (written through to it)
    routed = jitted._routed()
    assert isinstance(routed, type(model)) and routed.config is model.config
    routed.marker = 1
    assert model.marker == 1


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_generate_with_fusion_compiles_twice(name):
    """With the default executors (fusion's cost model on): the prefill, then one decode program
    for every cache length. The Llama's compiled 6 times over 8 tokens: fusion gave the rotary
    embedding of the new key to torch as a small prologue where the cache was long (relative
    sizes), so the samples of other lengths fused otherwise than the call and no program for
    all lengths fitted; that set is now a size choice the samples replay (core/size_choices.py)."""
    expected, got, jitted = _generate_jitted_module(_model(name))
    assert torch.equal(got, expected)
    stats = thunder.compile_stats(jitted)
    assert (stats.calls, stats.cache_misses) == (8, 2), stats.miss_reasons
