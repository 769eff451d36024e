"""Scalar draws of Python's random module and numpy's global generator inside a jitted function are
drawn by the program on every call (ops/python_draws.py): each call's values, results, gradients
and the generators' states after it are eager's, under the same seeds."""
import random
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import thunder


def _seed(s=0):
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)


def _after():
    """The generators' next values (their state after the calls)."""
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def _calls(fn, args, n=6):
    _seed()
    out = [fn(*args) for _ in range(n)]
    return out, _after()


def test_mixup_weight_drawn_every_call_in_training():
    lin = torch.nn.Linear(6, 3)

    def step(x, y, target):
        lam = np.random.beta(0.4, 0.4)
        mixed = x * lam + y * (1 - lam)
        loss = F.cross_entropy(lin(mixed), target)
        loss.backward()
        grad = lin.weight.grad.clone()
        lin.weight.grad = lin.bias.grad = None
        return loss.detach(), grad, lam

    x, y, target = torch.randn(4, 6), torch.randn(4, 6), torch.tensor([0, 2, 1, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (a draw the program makes is no sharp edge: no warning)
        jstep = thunder.jit(step)
        want, want_after = _calls(step, (x, y, target))
        got, got_after = _calls(jstep, (x, y, target))
    assert len({w[2] for w in want}) == len(want)  # (a new weight each call)
    for (wl, wg, wlam), (gl, gg, glam) in zip(want, got):
        assert glam == wlam and type(glam) is float
        torch.testing.assert_close(gl, wl)
        torch.testing.assert_close(gg, wg)
    assert got_after == want_after
    assert thunder.compile_stats(jstep).cache_misses == 1


def test_a_draw_that_decides_a_branch_splits():
    def coin(x):
        if random.random() < 0.5:
            return x * 2
        return x - 1

    jcoin = thunder.jit(coin)
    x = torch.randn(5)
    want, want_after = _calls(coin, (x,), n=10)
    got, got_after = _calls(jcoin, (x,), n=10)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w)
    assert got_after == want_after
    stats = thunder.compile_stats(jcoin)
    assert stats.cache_misses == 2 and "random.random" in str(thunder.last_traces(jcoin)[-1])


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_int_draws_and_draws_of_numbers(cache):
    def f(x, scale):
        k = random.randint(1, 3)  # an int used as a size: one program per value
        noise = random.gauss(0.0, scale) + np.random.uniform(-1.0, 1.0) * float(np.random.poisson(2.0))
        return x[:k] * noise

    jf = thunder.jit(f, cache=cache)
    x = torch.randn(4)
    want, want_after = _calls(f, (x, 0.5), n=8)
    got, got_after = _calls(jf, (x, 0.5), n=8)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w)
    assert got_after == want_after
    assert thunder.compile_stats(jf).cache_misses <= 3


def test_draws_with_a_size_still_run_while_tracing():
    def f(x):
        return x * float(np.random.rand(1)[0])

    with pytest.warns(UserWarning, match=r"numpy.random.rand\(\) at .*test_python_draws.py"):
        thunder.jit(f)(torch.randn(2))
    with pytest.raises(thunder.JITSharpEdgeError, match="numpy.random.rand"):
        thunder.jit(f, sharp_edges="error")(torch.randn(2))
    jg = thunder.jit(lambda x: x * random.random(), sharp_edges="error")  # (a scalar draw: no sharp edge)
    _seed()
    got = jg(torch.ones(2))
    _seed()
    torch.testing.assert_close(got, torch.full((2,), random.random()))


def test_a_draw_inside_vmap_runs_while_tracing():
    # the body's ops are batched or unrolled per example, where eager draws once a call: the draw
    # runs once while tracing, as the other draws do, and says so
    def f(x):
        return torch.func.vmap(lambda r: r * random.random())(x)

    x = torch.randn(3, 4)
    _seed()
    want, want_after = f(x), random.random()
    _seed()
    with pytest.warns(UserWarning, match=r"random.random\(\) at .*test_python_draws.py"):
        got = thunder.jit(f)(x)
    torch.testing.assert_close(got, want)
    assert random.random() == want_after
