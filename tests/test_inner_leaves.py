"""Tensors created inside a jitted function with requires_grad=True are leaves of torch's own
autograd graph, as in eager: results computed from them require grad (also where no input
does, and beside a torch.no_grad() block whose ops a kernel could fuse) and backward fills
their .grad. (Both were silently wrong: a fused kernel dropped the history, and thunder-autograd,
which differentiates for the inputs, left the leaf's .grad None.)"""
import pytest
import torch

import thunder


def with_no_grad_block(x):
    w = torch.ones(8, requires_grad=True)
    with torch.no_grad():
        y = torch.relu(x * w) * 2
    return y + 1, (w * 3 * x).sum(), w


def fusable_chain(x):
    w = torch.full((8,), 0.5, requires_grad=True)
    return (x * w).sin() * 2 + 1, (w * x).exp().sum(), w


@pytest.mark.parametrize("fn", [with_no_grad_block, fusable_chain])
@pytest.mark.parametrize("input_requires_grad", [False, True])
def test_inner_leaf_matches_eager(fn, input_requires_grad):
    x0 = torch.randn(8, generator=torch.Generator().manual_seed(0))
    xe, xt = (x0.clone().requires_grad_(input_requires_grad) for _ in range(2))
    expected, got = fn(xe), thunder.jit(fn)(xt)
    for e, t in zip(expected, got):
        assert (t.requires_grad, t.is_leaf) == (e.requires_grad, e.is_leaf)
        torch.testing.assert_close(t, e)
    expected[1].backward()
    got[1].backward()
    torch.testing.assert_close(got[2].grad, expected[2].grad)
    if input_requires_grad:
        torch.testing.assert_close(xt.grad, xe.grad)
