"""A gradient of a gradient through a jitted function (torch.autograd.grad or .backward with
create_graph=True: a WGAN-GP gradient penalty, a Hessian-vector product): the forward is
recomputed from the call's inputs and the backward run after it as torch calls that autograd
records (runtime/autograd.py _gradients_with_history); second-order gradients against eager's.
Where the recompute cannot be eager's call (random numbers drawn, inputs updated in place by the
call) thunder refuses by name; an input changed in place after the
call raises autograd's error."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder


def _penalized(critic, x):
    x = x.clone().requires_grad_(True)
    out = critic(x)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    return out.mean() + ((g.flatten(1).norm(2, dim=1) - 1) ** 2).mean()


@pytest.mark.parametrize("kind", ["mlp", "conv"])
def test_gradient_penalty_training_steps_as_eager(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        critic, x = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.LeakyReLU(0.2), nn.Linear(16, 16),
                                  nn.SiLU(), nn.Linear(16, 1)), torch.randn(5, 8)
    else:
        critic, x = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.LeakyReLU(0.2), nn.Conv2d(4, 4, 3, stride=2),
                                  nn.GroupNorm(2, 4), nn.Tanh(), nn.Flatten(), nn.Linear(36, 1)), torch.randn(2, 3, 7, 7)
    reference = copy.deepcopy(critic)
    jitted = thunder.jit(critic)
    ours, theirs = torch.optim.SGD(critic.parameters(), lr=0.1), torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        loss, expected = _penalized(jitted, x), _penalized(reference, x)
        torch.testing.assert_close(loss, expected)
        loss.backward()
        expected.backward()
        for (name, p), (_, q) in zip(critic.named_parameters(), reference.named_parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
        ours.step(), theirs.step()
        ours.zero_grad(), theirs.zero_grad()


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_gradient_penalty_over_changing_batch_sizes(cache):
    """The batch size changes (a last, smaller batch): the program for all sizes (automatic
    dynamic under the default option) recomputes as the per-size one does, its sources before
    fusion fitted as its own were (runtime/symbolic.py)."""
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    reference = copy.deepcopy(critic)
    jitted = thunder.jit(critic, cache=cache)
    for n in (5, 6, 7, 3):
        x = torch.randn(n, 8)
        loss, expected = _penalized(jitted, x), _penalized(reference, x)
        loss.backward()
        expected.backward()
        torch.testing.assert_close(loss, expected)
        for (name, p), (_, q) in zip(critic.named_parameters(), reference.named_parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
        critic.zero_grad(), reference.zero_grad()
    assert thunder.compile_stats(jitted).cache_misses == (1 if cache == "symbolic values" else 2)


def _second_order(fn, x, w):
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    out = fn(x, w)
    weights = torch.linspace(-1, 1, out.numel()).view(out.shape)
    gx, gw = torch.autograd.grad((out * weights).sum(), (x, w), create_graph=True)
    return torch.autograd.grad((gx ** 2).sum() + (gw * gw.detach().sign()).sum(), (x, w))


def r(*shape):
    return torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape)))


CASES = {
    "matmul_tanh": (lambda x, w: torch.tanh(x @ w), r(4, 8), r(8, 8)),
    "linear_gelu": (lambda x, w: F.gelu(F.linear(x, w, w[0])), r(4, 8), r(8, 8)),
    "softmax": (lambda x, w: F.softmax(x @ w, -1) * w[0], r(4, 8), r(8, 8)),
    "cross_entropy": (lambda x, w: F.cross_entropy(x @ w, torch.arange(4) % 8), r(4, 8), r(8, 8)),
    "layer_norm": (lambda x, w: F.layer_norm(x @ w, (8,), w[0], w[1]), r(4, 8), r(8, 8)),
    "conv_pool": (lambda x, w: F.max_pool2d(torch.tanh(F.conv2d(x, w)), 2), r(2, 3, 6, 6), r(4, 3, 3, 3)),
    "sdpa": (lambda x, w: F.scaled_dot_product_attention((x @ w)[None], x[None], (x @ w.t())[None], is_causal=True),
             r(4, 8), r(8, 8)),
    "where_reductions": (lambda x, w: torch.where(x @ w > 0, (x @ w) ** 2, torch.sin(x @ w)).var(-1), r(4, 8), r(8, 8)),
    # (torch's own gradient of a call thunder records as torch's: it keeps its history, and an
    # operand given twice gets each use's part)
    "torch_call_twice": (lambda x, w: F.binary_cross_entropy_with_logits(x @ w, torch.sigmoid(x @ w)), r(4, 8),
                         r(8, 8)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_order_gradients_as_eager(name):
    fn, x, w = CASES[name]
    for got, expected in zip(_second_order(thunder.jit(fn), x, w), _second_order(fn, x, w)):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4 * expected.abs().max().item())


@pytest.mark.parametrize("act", [nn.ReLU(), nn.LeakyReLU(0.2), nn.Hardtanh(), nn.ReLU6(), nn.Threshold(0.1, 0.)],
                         ids=lambda a: type(a).__name__)
@pytest.mark.parametrize("whole", [False, True], ids=["module_jitted", "penalty_jitted"])
def test_a_penalty_alone_gives_a_bias_before_a_relu_zeros_as_eager(act, whole):
    """The penalty alone backpropagated (R1 regularization's separate step): the first layer's
    bias reaches it only through the activation's mask, and eager's formulas give it zeros (its
    backward op's `self: zeros_like(grad)`), not None, so Adam steps it (momentum, weight
    decay): the same here, the module jitted (the outer autograd) or the whole penalty (the
    trace's own second-order gradient). Was None: a silently different optimizer step."""
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(4, 8), act, nn.Linear(8, 1))
    reference = copy.deepcopy(critic)

    def penalty(model, x):
        x = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
        return ((g.norm(2, dim=1) - 1) ** 2).mean()
    x = torch.randn(5, 4)
    got = thunder.jit(penalty)(critic, x) if whole else penalty(thunder.jit(critic), x)
    got.backward()
    penalty(reference, x).backward()
    for (name, p), q in zip(critic.named_parameters(), reference.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad)
    assert reference[0].bias.grad is not None and not reference[0].bias.grad.any()


def test_hessian_vector_product_as_eager():
    w, v = r(8).requires_grad_(), r(3, 3)[0].repeat(3)[:8]

    def f(w):
        return (torch.tanh(w) ** 3).sum() * w.sum()

    results = []
    for fn in (f, thunder.jit(f)):
        (g,) = torch.autograd.grad(fn(w), w, create_graph=True)
        results.append(torch.autograd.grad(g @ v, w)[0])
    torch.testing.assert_close(results[1], results[0])


def test_refusals_and_autograd_error():
    x, w = r(4, 8).requires_grad_(), r(8, 8).requires_grad_()
    dropout = thunder.jit(lambda x, w: F.dropout(torch.tanh(x @ w), 0.5))
    with pytest.raises(NotImplementedError, match="draws random numbers"):
        torch.autograd.grad(dropout(x, w).sum(), w, create_graph=True)
    bn = thunder.jit(nn.BatchNorm1d(8))
    with pytest.raises(NotImplementedError, match="updates its inputs in place"):
        torch.autograd.grad(bn(x).sum(), x, create_graph=True)
    # an input changed in place after the call: eager's saved tensor would raise the same
    y = r(4, 8)
    jitted = thunder.jit(lambda x, y: (torch.tanh(x) * y).sum())
    out = jitted(x, y)
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(out, x, create_graph=True)
    # a first-order gradient is eager's without recomputing anything
    (g,), (expected,) = torch.autograd.grad(jitted(x, y), x), torch.autograd.grad((torch.tanh(x) * y).sum(), x)
    torch.testing.assert_close(g, expected)
