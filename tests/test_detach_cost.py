"""thunder-fuse's cost model charges a detach as a torch call only where the generated program
runs it (lowering/detach_cost.py): not in a program that records no autograd history, where
codegen leaves out the detach of a fresh result."""
import pytest
import torch

import thunder
from thunder.lowering import fuse


@pytest.fixture
def detach_costs(monkeypatch):
    """The seconds the cost model gives each ltorch.detach it weighs."""
    seen = []
    costed = fuse._torch_seconds

    def spy(operation, cost):
        seconds = costed(operation, cost)
        if operation.name == "ltorch.detach":
            seen.append(seconds)
        return seconds
    monkeypatch.setattr(fuse, "_torch_seconds", spy)
    return seen


def test_no_charge_where_the_program_records_no_history(detach_costs):
    w = torch.randn(8, 8, requires_grad=True)

    def f(x):
        return (torch.relu(x @ w) * 2 + 1).sum(0)
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(thunder.jit(f)(x), f(x))
    assert detach_costs and all(s == 0.0 for s in detach_costs)


def test_no_charge_where_nothing_returned_requires_grad(detach_costs):
    def g(x, out):
        y = x * 2  # (with grad mode on, but nothing returned or written requires grad: no history)
        with torch.no_grad():
            out.copy_(torch.relu(y) * 2 + 1)
    x = torch.randn(4, 8, requires_grad=True)
    got, expected = torch.empty(4, 8), torch.empty(4, 8)
    thunder.jit(g)(x, got)
    g(x, expected)
    torch.testing.assert_close(got, expected)
    assert detach_costs and all(s == 0.0 for s in detach_costs)


def test_no_charge_where_every_op_ran_under_no_grad(detach_costs):
    def g(x):
        with torch.no_grad():  # (no op records history: the program runs with grad mode off)
            return torch.relu(x * 2) * 2 + 1
    x = torch.randn(4, 8, requires_grad=True)
    got, expected = thunder.jit(g)(x), g(x)
    torch.testing.assert_close(got, expected)
    assert got.requires_grad == expected.requires_grad
    assert detach_costs and all(s == 0.0 for s in detach_costs)
