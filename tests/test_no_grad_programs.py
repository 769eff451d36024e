"""Programs traced under torch.no_grad(): the trace records a detach after an op only where an
operand requires grad (there is history to cut), and a program that records no autograd history
when it runs calls none of them (codegen's grad_free: a detach is the identity there, except of
a tensor that may itself require grad). Outputs' values and requires_grad as eager's, also when
the inputs and parameters require grad; gradients still stop at a no_grad region in training."""
import warnings

import pytest
import torch

import thunder

transformers = pytest.importorskip("transformers", reason="transformers is not installed")


def _program(jfn):
    return str(thunder.last_traces(jfn)[-1])


def _same(got, expected):
    got, expected = (got, expected) if isinstance(got, tuple) else ((got,), (expected,))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
        assert g.requires_grad == e.requires_grad


def test_no_grad_forward_of_a_transformers_model_calls_no_detach():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, max_position_embeddings=16, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2)
    model = transformers.LlamaForCausalLM(config).eval()  # its parameters require grad
    ids = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        expected = model(input_ids=ids, use_cache=False).logits
        jitted = thunder.jit(model)
        got = jitted(input_ids=ids, use_cache=False).logits
    _same(got, expected)
    assert "detach" not in _program(jitted)


def ops_on_inputs_that_require_grad(x, w):
    h = torch.relu(x @ w)
    return h, h.sum(), x * 2, torch.nn.functional.embedding(torch.tensor([0, 2]), w), (w + 1).t()


def explicit_detach(x, w):
    return x.detach(), (x @ w).detach(), w.detach().contiguous()


def created_leaf(x):
    a = torch.ones(3, requires_grad=True)
    return a, a * x, (a * x).sum()


@pytest.mark.parametrize("fn", [ops_on_inputs_that_require_grad, explicit_detach])
def test_outputs_require_grad_as_eager_under_no_grad(fn):
    x, w = torch.randn(2, 3, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    jfn = thunder.jit(fn)
    with torch.no_grad():
        _same(jfn(x, w), fn(x, w))
    program = _program(jfn)
    if fn is ops_on_inputs_that_require_grad:
        assert "detach" not in program
    else:  # the user's detach of a tensor that requires grad stays; the others are names
        assert program.count("detach") == 2, program


def test_tensor_created_with_requires_grad_under_no_grad_and_then_with_grad_mode_on():
    x = torch.randn(3)
    jfn = thunder.jit(created_leaf)
    with torch.no_grad():
        _same(jfn(x), created_leaf(x))
    _same(jfn(x), created_leaf(x))  # another program: the first one records no history
    assert thunder.compile_stats(jfn).cache_misses == 2


def test_gradients_stop_at_a_no_grad_region():
    def f(x, w):
        with torch.no_grad():
            scale = (x * w).sum()
        return (x * w * scale).sum()

    x, w = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    expected = torch.autograd.grad(f(x, w), (x, w))
    got = torch.autograd.grad(thunder.jit(f)(x, w), (x, w))
    torch.testing.assert_close(got, expected)


def test_a_returned_detach_is_a_tensor_of_its_own():
    # eager's t.detach() is another tensor object: requires_grad_() on it leaves t as it is
    def f(x):
        t = x * 2
        return t, t.detach()

    x = torch.randn(3)
    with torch.no_grad():
        got, expected = thunder.jit(f)(x), f(x)
    assert (got[0] is got[1]) == (expected[0] is expected[1]) == False  # noqa: E712
    got[1].requires_grad_()
    assert not got[0].requires_grad
