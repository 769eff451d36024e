"""Re-inplacing (runtime/reinplace.py): a program that records no autograd history updates an
input in place (`cache.index_copy_(...)`) where the trace computes its new value functionally and
would copy it back at the end, and keeps the functional op and the copy where running in place
could change what anything reads."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from jit_vs_eager import matches_eager


class StaticKV(nn.Module):
    """A StaticCache-style layer: a cache buffer written at a position per call (index_copy_ on
    dim 2 for keys, slice assignment for values), a step counter, and attention over the cache."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)  # (parameters that require grad: no_grad_update in the trace)
        self.register_buffer("keys", torch.zeros(1, 2, 8, 4))
        self.register_buffer("values", torch.zeros(1, 2, 8, 4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x, pos):
        k = self.proj(x)
        self.keys.index_copy_(2, pos, k)
        self.values[:, :, pos] = x * 2
        self.steps.add_(1)
        mask = (torch.arange(8) <= pos).view(1, 1, 1, 8)
        return F.scaled_dot_product_attention(k, self.keys, self.values, attn_mask=mask) + self.steps


@pytest.fixture(scope="module")
def decode_pair():
    torch.manual_seed(0)
    eager = StaticKV()
    return eager, thunder.jit(copy.deepcopy(eager))


def test_static_cache_update_runs_in_place_and_matches_eager(decode_pair):
    eager, jitted = decode_pair
    keys, values = jitted.keys, jitted.values
    with torch.no_grad():
        for step in range(4):
            x, pos = torch.randn(1, 2, 1, 4), torch.tensor([step])
            torch.testing.assert_close(jitted(x, pos), eager(x, pos))
            for name in ("keys", "values", "steps"):
                assert torch.equal(getattr(jitted, name), getattr(eager, name)), (step, name)
    assert jitted.keys is keys and jitted.values is values  # (updated, not replaced)
    source = str(thunder.last_traces(jitted)[-1])
    assert "torch.Tensor.index_copy_(keys, 2, pos, " in source
    assert "impl.setitem_(values, " in source and "torch.Tensor.add_(steps, 1)" in source
    assert ".copy_(" not in source  # (no copy of a whole cache back into its buffer)


def test_chain_of_updates_and_returned_views_share_the_input_like_eager():
    def f(x, s):
        x.add_(s)
        x.mul_(2)
        return x[1:], x * 1

    jf = matches_eager(f, lambda: (torch.arange(12.0).reshape(4, 3), torch.ones(4, 3)))
    source = str(thunder.last_traces(jf)[-1])
    assert "torch.Tensor.add_(x, s)" in source and ".mul_(" in source and ".copy_(" not in source
    x = torch.zeros(4, 3)
    view, _ = jf(x, torch.ones(4, 3))
    assert view._base is x  # (eager: a view of x itself)


def test_in_place_flags_and_methods_of_several_ops():
    def f(x, m, i, s):
        F.relu(x, inplace=True)
        F.hardtanh(x, 0.0, 0.5, inplace=True)
        x.masked_fill_(m, 3.0)
        x.index_add_(0, i, s)
        return x.sum()

    jf = matches_eager(f, lambda: (torch.randn(4, 3, generator=torch.Generator().manual_seed(0)),
                                   torch.tensor([True, False, True]), torch.tensor([1, 1]), torch.ones(2, 3)),
                       executors=["torch"])
    source = str(thunder.last_traces(jf)[-1])
    assert "torch.nn.functional.relu(x, True)" in source and ".masked_fill_(" in source
    assert ".copy_(" not in source


def test_update_of_a_view_of_a_tensor_outside_writes_through():
    def f(x):
        x[0] = 5.0
        return x.sum()

    big_e, big_j = torch.zeros(4, 3), torch.zeros(4, 3)
    jf = thunder.jit(f)
    torch.testing.assert_close(jf(big_j[1:3]), f(big_e[1:3]))
    assert torch.equal(big_j, big_e)
    assert "impl.setitem_(x, " in str(thunder.last_traces(jf)[-1])


def test_inputs_that_share_memory_stay_eager_equal():
    def f(a, b):
        a.add_(1)
        return b * 2

    base = lambda: torch.arange(6.0)  # noqa: E731
    matches_eager(f, lambda: (lambda t: (t[:4], t[2:]))(base()))
    matches_eager(f, lambda: (lambda t: (t, t))(base()))


def test_optimizer_style_update_of_a_leaf_that_requires_grad_under_no_grad():
    def step(p, g):
        p.add_(g, alpha=-0.1)
        return p

    jf = thunder.jit(step)
    pe, pj = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    g = torch.full((3,), 2.0)
    with torch.no_grad():
        out_e, out_j = step(pe, g), jf(pj, g)
    assert out_j is pj and out_e is pe
    assert torch.equal(pj, pe) and pj.requires_grad and pj.is_leaf and pj.grad_fn is None
    assert "torch.Tensor.add_(p, g, alpha=-0.1)" in str(thunder.last_traces(jf)[-1])
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        jf(pj, g)  # (grad mode on: eager's error)


def test_running_statistics_updated_in_a_training_step_match_eager():
    """A program that records autograd history keeps its functional update and copy back."""
    def f(x, w, running):
        y = x * w
        running.mul_(0.9).add_(y.detach().mean(0), alpha=0.1)
        return y.sum()

    def make():
        return torch.randn(5, 3, generator=torch.Generator().manual_seed(1)), \
            torch.ones(3, requires_grad=True), torch.zeros(3)

    (xe, we, re), (xj, wj, rj) = make(), make()
    jf = thunder.jit(f)
    f(xe, we, re).backward()
    jf(xj, wj, rj).backward()
    torch.testing.assert_close(rj, re)
    torch.testing.assert_close(wj.grad, we.grad)


def test_growing_cache_by_concatenation_stays_correct():
    """DynamicCache-style: the cache attribute is replaced by a longer tensor (nothing to re-inplace)."""
    class Grow(nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = torch.zeros(1, 0, 2)

        def forward(self, x):
            self.cache = torch.cat([self.cache, x], dim=1)
            return self.cache.sum(1)

    eager = Grow()
    jitted = thunder.jit(Grow())
    for i in range(3):
        x = torch.full((1, 1, 2), float(i + 1))
        torch.testing.assert_close(jitted(x), eager(x))
        assert torch.equal(jitted.cache, eager.cache)


# The analysis on hand-written traces: where running in place would change a read, the program
# keeps the functional op and the copy back.

_HEAD = ('module {\n  func.func @computation(%arg0: tensor<4x3xf32>, %arg1: tensor<4x3xf32>) -> '
         '(tensor<4x3xf32>, tensor<4x3xf32>) attributes {thunder.mutated_inputs = array<i64: 0>} {\n'
         '    %c1 = arith.constant 1 : i64\n    %c2 = arith.constant 2 : i64\n')
_ADD = '    %0 = "ltorch.add"(%arg0, %arg1, %c1) : (tensor<4x3xf32>, tensor<4x3xf32>, i64) -> tensor<4x3xf32>\n'
_TAIL = '    return %2, %0 : tensor<4x3xf32>, tensor<4x3xf32>\n  }\n}\n'


def _mul(a):
    return f'    %2 = "ltorch.mul"({a}, %c2) : (tensor<4x3xf32>, i64) -> tensor<4x3xf32>\n'


def _getitem(a):
    return f'    %1 = "ltorch.getitem"({a}) {{key = [{{start = 0 : i64}}]}} : (tensor<4x3xf32>) -> tensor<4x3xf32>\n'


CASES = {
    # body, whether the add runs in place, what the program returns for x = 1, s = 1 (the copy back: x = 2)
    "new value read after": (_ADD + _getitem("%0") + _mul("%1"), True, 4.0),
    "old value read after": (_ADD + _getitem("%0") + _mul("%arg0"), False, 2.0),
    "view of the old value read after": (_getitem("%arg0") + _ADD + _mul("%1"), False, 2.0),
    "view of the old value read before": (_getitem("%arg0") + _mul("%1") + _ADD, True, 2.0),
    "operand shares memory with it": (
        _getitem("%arg0") + _ADD.replace("%arg1, %c1", "%1, %c1") + _mul("%0"), False, 4.0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reads_of_the_old_value_keep_the_copy_back(case):
    from thunder.dialects.definitions import context
    from thunder.dialects.mlir import ir
    from thunder.runtime.codegen import compile_source, python_source
    from thunder.runtime.grad_free_rewrites import rewrite_grad_free

    body, in_place, expected = CASES[case]
    with context():
        module = ir.Module.parse(_HEAD + body + _TAIL)
        copied_back = python_source(module, grad_free=True)
        rewrite_grad_free(module)
        source = python_source(module, grad_free=True)
        assert source == copied_back or in_place
    assert ("torch.Tensor.add_(" in source) == in_place, source
    assert (".copy_(" in source) != in_place, source
    x = torch.ones(4, 3)
    out = compile_source(source)(x, torch.ones(4, 3))
    assert torch.equal(out, torch.full((4, 3), expected)), source
    assert torch.equal(x, torch.full((4, 3), 2.0))
