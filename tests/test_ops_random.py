"""Random ops (thunder/ops/random_ops.py): shapes and dtypes along every path, eager's values under
thunder.jit after torch.manual_seed, fresh values per call, no merging of draws, eager's errors.

torch.rand(2, 3) and friends take no tensors, so the harness calls the registry ops directly
(the interpreter maps torch.rand to ltorch.rand through the registry's aliases)."""
import pytest
import torch
import torch.nn.functional as F

import thunder
from op_harness import check, trace_module
from thunder.ops import random_ops as R
from thunder.ops import registry


def test_registered():
    for fn, op in [(torch.rand, R.rand), (torch.randn, R.randn), (torch.randint, R.randint),
                   (torch.rand_like, R.rand_like), (torch.randn_like, R.randn_like),
                   (torch.randint_like, R.randint_like), (torch.bernoulli, R.bernoulli), (torch.normal, R.normal)]:
        assert registry.lookup_callable(fn) is op
        assert op.random


def _expect(fn, eager):
    """fn traced (and decomposed) runs; its result has eager's shape and dtype."""
    module = check(fn, random=True)
    from thunder.core import trace as tracing

    with tracing.tracing(tracing.TraceCtx()):
        p = fn()
    e = eager()
    assert tuple(p.shape) == tuple(e.shape) and p.dtype == e.dtype, (p, e.shape, e.dtype)
    return module


CREATION = [
    ("rand", (2, 3), {}), ("rand", ((4,),), {}), ("rand", (torch.Size([2, 2]),), {}), ("rand", ((),), {}),
    ("rand", (3,), dict(dtype=torch.float64)), ("rand", (3,), dict(dtype=torch.float16, device="cpu")),
    ("rand", (0, 2), {}), ("rand", (2,), dict(requires_grad=True)),
    ("randn", (2, 3), {}), ("randn", ((5,),), dict(dtype=torch.bfloat16)), ("randn", (3,), dict(dtype=torch.float64)),
    ("randint", (5, (3,)), {}), ("randint", (2, 9, (2, 2)), {}), ("randint", (-3, 3, (4,)), dict(dtype=torch.int32)),
    ("randint", (), dict(high=4, size=(3,))), ("randint", (), dict(low=1, high=4, size=(3,))),
    ("randint", (0, 10, (3,)), dict(dtype=torch.float32)), ("randint", (0, 2, (3,)), dict(dtype=torch.bool)),
    ("normal", (0.0, 1.0, (2, 3)), {}), ("normal", (2, 3, (4,)), dict(dtype=torch.float64)),
]


@pytest.mark.parametrize("name,args,kw", CREATION, ids=str)
def test_creation_shapes(name, args, kw):
    op, eager = getattr(R, name), getattr(torch, name)
    module = _expect(lambda: op(*args, **kw), lambda: eager(*args, **kw))
    assert f'"ltorch.{name}"' in str(module)


def r(*shape, dtype=torch.float32):
    return torch.randn(shape).to(dtype)


LIKE = {
    "rand_like": (lambda a: torch.rand_like(a), r(2, 3)),
    "rand_like_dtype": (lambda a: torch.rand_like(a, dtype=torch.float64), r(2, 3, dtype=torch.int64)),
    "randn_like": (lambda a: torch.randn_like(a), r(4, dtype=torch.float16)),
    "randn_like_0d": (lambda a: torch.randn_like(a) * a, r()),
    "randint_like_high": (lambda a: torch.randint_like(a, 7), r(2, 3)),
    "randint_like_low_high": (lambda a: torch.randint_like(a, -2, 7), r(2, 3, dtype=torch.int32)),
    "randint_like_kw": (lambda a: torch.randint_like(a, high=3, dtype=torch.int64), r(5)),
    "bernoulli": (lambda a: torch.bernoulli(a.sigmoid()), r(3, 4)),
    "bernoulli_f16": (lambda a: torch.bernoulli(a), torch.rand(3, 4).half()),
    "bernoulli_p": (lambda a: torch.bernoulli(a, 0.3), r(3, 4)),
    "bernoulli_p_kw_int": (lambda a: torch.bernoulli(a, p=0.7), r(3, 4, dtype=torch.int64)),
    "normal_tensors": (lambda a, b: torch.normal(a, b.abs()), r(2, 3), r(3)),
    "normal_mean": (lambda a: torch.normal(a), r(4, dtype=torch.float64)),
    "normal_mean_std": (lambda a: torch.normal(a, 0.5), r(4, dtype=torch.float16)),
    "normal_std": (lambda b: torch.normal(1.5, b.abs()), r(2, 2, dtype=torch.float64)),
    "normal_mixed": (lambda a, b: torch.normal(a, b.abs()), r(3), r(3, dtype=torch.float64)),
    "dropout": (lambda a: F.dropout(a, 0.5), r(3, 4)),
}


@pytest.mark.parametrize("name", LIKE)
def test_tensor_input_shapes(name):
    fn, *args = LIKE[name]
    expected = fn(*args)
    module = check(fn, *args, random=True)
    out = thunder.jit(fn)(*args)
    assert out.shape == expected.shape and out.dtype == expected.dtype


def test_decompositions_distribution():
    """The decompositions into thunder.uniform draw from the right distributions."""
    from thunder.dialects.definitions import context
    from thunder.dialects.mlir import ir
    from thunder.lowering.decompose import decompose_module
    from thunder.runtime.codegen import compile_source, python_source as src

    def run_decomposed(fn, *args):
        module = trace_module(fn, *args)
        with context():
            d = ir.Module.parse(module.operation.get_asm(enable_debug_info=True))
            decompose_module(d.operation)
            text = src(d)
            assert "torch.rand" not in text and "impl.normal" not in text and "torch.bernoulli" not in text
            return compile_source(text)(*args)

    n = 20000
    u = run_decomposed(lambda: R.rand(n))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    z = run_decomposed(lambda: R.randn(n, dtype=torch.float64))
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05 and torch.isfinite(z).all()
    i = run_decomposed(lambda: R.randint(-2, 3, (n,)))
    assert i.dtype == torch.int64 and set(i.unique().tolist()) == {-2, -1, 0, 1, 2}
    p = torch.full((n,), 0.25)
    b = run_decomposed(lambda a: torch.bernoulli(a), p)
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean() - 0.25) < 0.02
    m = run_decomposed(lambda a: torch.normal(a, 2.0), torch.full((n,), 3.0))
    assert abs(m.mean() - 3) < 0.1 and abs(m.std() - 2) < 0.1


def _program(x):
    a = torch.rand(3, 4)
    b = torch.randn(3, 4, dtype=torch.float64)
    c = torch.randint(10, (5,))
    d = torch.randint(-5, 5, (2, 2), dtype=torch.int32)
    e = torch.bernoulli(torch.sigmoid(x))
    f = F.dropout(x, 0.5)
    g = torch.rand_like(x) + torch.randn_like(x) + torch.randint_like(x, 3)
    h = torch.normal(x, 0.5) + torch.normal(0.0, 1.0, (3, 4))
    return a * x, b, c, d, e, f, g, h


def test_jit_matches_eager_after_manual_seed():
    x = torch.randn(3, 4)
    jf = thunder.jit(_program)
    for seed in (0, 7):
        torch.manual_seed(seed)
        expected = _program(x)
        torch.manual_seed(seed)
        got = jf(x)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and torch.equal(g, e)
    # and the generator state afterwards is the same as eager's
    torch.manual_seed(1)
    jf(x)
    after_jit = torch.rand(3)
    torch.manual_seed(1)
    _program(x)
    assert torch.equal(after_jit, torch.rand(3))


def test_jit_gives_fresh_values_each_call():
    x = torch.randn(3, 4)
    jf = thunder.jit(_program)
    first, second = jf(x), jf(x)
    for a, b in zip(first, second):
        if a.dtype.is_floating_point and a.numel() > 4:
            assert not torch.equal(a, b)
    torch.manual_seed(5)
    a = jf(x)
    torch.manual_seed(5)
    b = jf(x)
    for u, v in zip(a, b):
        assert torch.equal(u, v)


def test_two_draws_are_not_merged():
    def f(x):
        return torch.rand(100) + x, torch.rand(100) + x, torch.randn_like(x), torch.randn_like(x)

    jf = thunder.jit(f)
    a, b, c, d = jf(torch.zeros(100))
    assert not torch.equal(a, b) and not torch.equal(c, d)
    src = str(thunder.last_traces(jf)[-1])
    assert src.count("torch.rand(") == 2 and src.count("torch.randn_like(") == 2
    # an unused draw is still drawn (DCE keeps it): eager's stream stays in step
    def g(x):
        torch.rand(5)
        return torch.rand(3) + x

    torch.manual_seed(2)
    expected = g(torch.zeros(3))
    torch.manual_seed(2)
    assert torch.equal(thunder.jit(g)(torch.zeros(3)), expected)


def test_seeded_values_with_autograd():
    """With inputs that require grad the random ops stay torch calls (they have VJP rules): same
    values as eager; gradients as eager's (zeros through bernoulli and normal)."""
    def f(x, m):
        noise = torch.randn(4, 3)
        keep = torch.bernoulli(torch.sigmoid(x))
        s = torch.normal(m, 1.0)
        return x * noise * keep + s * x + torch.rand_like(x) * x

    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    m = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(11)
    e = f(x, m)
    ge = torch.autograd.grad(e.sum(), (x, m))
    torch.manual_seed(11)
    jf = thunder.jit(f)
    o = jf(x, m)
    go = torch.autograd.grad(o.sum(), (x, m))
    torch.testing.assert_close(o, e)
    torch.testing.assert_close(go[0], ge[0])
    torch.testing.assert_close(go[1], ge[1])  # zeros: torch.normal is not reparameterized
    assert torch.equal(go[1], torch.zeros_like(m))


def test_requires_grad_kwarg():
    jf = thunder.jit(lambda x: torch.rand(3, requires_grad=True))
    out = jf(torch.zeros(1))
    assert out.shape == (3,) and out.dtype == torch.float32


def _errors(fn, *args):
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(eager.type):
        thunder.jit(fn)(*args)
    return eager.type


ERRORS = {
    "rand_int_dtype": (lambda x: torch.rand(2, dtype=torch.int64) + x,),
    "randn_int_dtype": (lambda x: torch.randn(2, dtype=torch.int64) + x,),
    "rand_negative": (lambda x: torch.rand(-1) + x,),
    "randint_low_high": (lambda x: torch.randint(5, 3, (2,)) + x,),
    "randint_float_high": (lambda x: torch.randint(3.5, (2,)) + x,),
    "randint_bad_combination": (lambda x: torch.randint(3, 2, 2) + x,),
    "rand_like_int": (lambda x: torch.rand_like(x.long()),),
    "randn_like_int": (lambda x: torch.randn_like(x, dtype=torch.int32),),
    "randint_like_low_high": (lambda x: torch.randint_like(x, 4, 2),),
    "bernoulli_int": (lambda x: torch.bernoulli(x.long()),),
    "bernoulli_p": (lambda x: torch.bernoulli(x, 1.5),),
    "normal_negative_std": (lambda x: torch.normal(x, -1.0),),
    "normal_negative_std_size": (lambda x: torch.normal(0.0, -1.0, (2,)) + x,),
    "normal_int_mean": (lambda x: torch.normal(x.long(), 1.0),),
    "normal_shapes": (lambda x: torch.normal(x, torch.ones(2, dtype=x.dtype).abs()),),
    "normal_numbers_no_size": (lambda x: torch.normal(0.0, 1.0) + x,),
}


@pytest.mark.parametrize("name", ERRORS)
def test_errors_as_eager(name):
    (fn,) = ERRORS[name]
    _errors(fn, torch.rand(3))


def test_generator_is_refused():
    gen = torch.Generator()
    for fn in (lambda x: torch.rand(3, generator=gen) + x, lambda x: torch.randn(3, generator=gen) + x,
               lambda x: torch.randint(0, 3, (3,), generator=gen) + x, lambda x: torch.bernoulli(x, generator=gen),
               lambda x: torch.normal(x, 1.0, generator=gen), lambda x: torch.randint(3, (3,), generator=gen) + x):
        fn(torch.rand(3))  # fine in eager
        with pytest.raises(NotImplementedError, match="generator"):
            thunder.jit(fn)(torch.rand(3))
    with pytest.raises(NotImplementedError, match="generator"):
        trace_module(lambda: R.rand(3, generator=gen))
