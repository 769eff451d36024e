"""The interpreter's lookup (runtime/lookup.py) answers a bound method of a Python function once
per trace, and a plain functools.partial without asking its tables (the interpreter then calls
the partial's func, which lookup sees): what those calls read is still guarded, and an instance
attribute shadowing a method, or a partial's global, recompiles."""
import functools
import types

import torch

import thunder
from thunder.ops import registry
from thunder.runtime import guards, lookup, sharp_edges, torch_func

SCALE = 2.0


def _scaled(x, y, alpha):
    return x * SCALE + y * alpha


def test_no_lookup_table_holds_a_partial():
    tables = [lookup._REFUSED, torch_func.REPLACEMENTS, registry.BY_CALLABLE, registry.INPLACE_CALLABLES,
              guards.QUERIES, lookup._ARRAY_CONVERSIONS, sharp_edges.SIDE_EFFECTS, lookup._TORCH_FUNCTION_CHECKS]
    for table in tables:
        for key in table:
            assert type(key) is not functools.partial, key


def test_partial_reads_are_guarded():
    global SCALE
    x, y = torch.randn(3), torch.randn(3)
    f = functools.partial(_scaled, alpha=3.0)
    g = functools.partial(torch.add, alpha=2)
    fn = thunder.jit(lambda a, b: g(f(a, b), a))
    try:
        torch.testing.assert_close(fn(x, y), torch.add(_scaled(x, y, 3.0), x, alpha=2))
        SCALE = 5.0
        torch.testing.assert_close(fn(x, y), torch.add(_scaled(x, y, 3.0), x, alpha=2))
        assert thunder.cache_misses(fn) == 2
    finally:
        SCALE = 2.0


class _Block(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def scale(self, x):
        return x * self.k

    def forward(self, x):
        return self.scale(x) + self.scale(x).sin()


class _Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = _Block(2.0), _Block(3.0)

    def forward(self, x):
        return self.b(self.a(x))


def test_bound_methods_of_two_instances_and_a_shadowing_attribute():
    model = _Two()
    x = torch.randn(4)
    fn = thunder.jit(model)
    torch.testing.assert_close(fn(x), model(x))
    model.b.scale = types.MethodType(lambda self, v: v - self.k, model.b)  # shadows the class's method
    torch.testing.assert_close(fn(x), model(x))
    assert thunder.cache_misses(fn) == 2
