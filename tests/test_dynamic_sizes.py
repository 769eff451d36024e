"""Sizes as symbols from one real call (runtime/symbolic.py, runtime/dynamic.py): under
cache="symbolic values" from the first call, under the default option from the second distinct
size (automatic dynamic). Every call is checked against eager; compile counts through
thunder.cache_misses."""
import math
import os
import re
import sys

import pytest
import torch

import thunder
from thunder.runtime import symbolic

torch.manual_seed(0)
C = 16
WQ, WK, WV = (torch.randn(C, C) / 4 for _ in range(3))


def block(x, w1, w2):  # (B, T, C) -> (B, T, C): norm, attention over T with 2 heads, MLP
    B, T, Cx = x.shape
    h = torch.nn.functional.layer_norm(x, (Cx,))
    q = k = v = (h @ w1).view(B, T, 2, Cx // 2).transpose(1, 2)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    y = y.transpose(1, 2).reshape(B, T, Cx)
    return x + torch.nn.functional.gelu(y @ w2) / math.sqrt(T)


LENGTHS = list(range(5, 25))  # 20 lengths


def _sweep(jf, train):
    w1, w2 = torch.randn(C, C, requires_grad=train), torch.randn(C, C, requires_grad=train)
    for i, T in enumerate(LENGTHS):
        x = torch.randn(3, T, C, requires_grad=train)
        out, ref = jf(x, w1, w2), block(x, w1, w2)
        torch.testing.assert_close(out, ref)
        if train and i % 4 in (0, 1):  # (gradients at half the lengths: test time)
            g = torch.randn_like(ref)
            got = torch.autograd.grad(out, (x, w1, w2), g)
            want = torch.autograd.grad(ref, (x, w1, w2), g)
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_a_20_length_sweep_compiles_once_under_symbolic_values(train):
    # (training without fused kernels: their compile time; the inference sweep fuses)
    jf = thunder.jit(block, cache="symbolic values", executors=["torch"] if train else None)
    _sweep(jf, train)
    assert thunder.cache_misses(jf) == 1
    stats = thunder.compile_stats(jf)
    assert stats.generalizations == [
        "generalized (symbolic values: the first call's sizes and int arguments): _sym0: tensor argument 0 dim 0; "
        "_sym1: tensor argument 0 dim 1; _sym2: tensor argument 0 dim 2 = tensor argument 1 dim 0 = tensor argument "
        "1 dim 1 = tensor argument 2 dim 0 = tensor argument 2 dim 1"]
    # compiled once with its symbols: at an odd width, the program's reshape raises eager's error
    assert stats.last_symbolic_compile == "compiled once with symbolic sizes"
    x, w = torch.randn(3, 6, 15), torch.randn(15, 15)
    with pytest.raises(RuntimeError) as eager:
        block(x, w, w)
    with pytest.raises(RuntimeError, match=re.escape(str(eager.value))):
        jf(x, w, w)


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_a_20_length_sweep_compiles_twice_under_the_default_option(train):
    jf = thunder.jit(block, executors=["torch"] if train else None)
    _sweep(jf, train)
    assert thunder.cache_misses(jf) == 2  # the first length, then T as a symbol at the second
    assert thunder.compile_stats(jf).generalizations == [
        "generalized (automatic dynamic: the sizes that changed since the call before): _sym0: tensor argument 0 dim 1"]


def test_without_automatic_dynamic_every_length_compiles():
    jf = thunder.jit(lambda x: x * 2, automatic_dynamic=False)
    for n in range(2, 6):
        torch.testing.assert_close(jf(torch.ones(n)), torch.full((n,), 2.0))
    assert thunder.cache_misses(jf) == 4 and thunder.compile_stats(jf).generalizations == []


def window(q, k, window, max_len):
    """A sliding-window offset, a clamped length, a floor division, a remainder and abs of
    sizes and ints."""
    cum = k.shape[1]
    start = max(cum - window + 1, 0)
    n = min(max_len, cum + 3)
    kk = k[:, start:]
    att = (q @ kk.transpose(1, 2)).softmax(-1) @ kk
    pooled = k[:, : (cum // 4) * 4].reshape(k.shape[0], cum // 4, 4, k.shape[2]).mean(2)
    return att, pooled, torch.zeros(n) + cum % 4, torch.ones(abs(cum - 12) + 1)


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_min_max_floordiv_mod_abs_of_symbols_are_guarded_expressions(cache):
    jf = thunder.jit(window, cache=cache)
    q = torch.randn(2, 1, 8)
    for cum in range(5, 25):  # 20 calls
        k = torch.randn(2, cum, 8)
        for got, want in zip(jf(q, k, 6, 20), window(q, k, 6, 20)):
            torch.testing.assert_close(got, want)
    stats = thunder.compile_stats(jf)
    # one program per side of each decision: cum - 6 + 1 >= 0 (all), cum - 12 >= 0 (from 12 on),
    # cum + 3 < 20 (to 16); under the default option the first size compiles on its own
    assert thunder.cache_misses(jf) == (3 if cache == "symbolic values" else 4), stats.generalizations
    src = str(thunder.last_traces(jf)[-1])
    # (the last program, compiled with the symbols: cum from 18 on; its sizes computed at each call)
    assert "s = _sym0 - 5\n" in src and "slice(s, None, None)" in src  # ((cum - 6) + 1: folded)
    assert "s_0 = _sym0 // 4\n  s_1 = s_0 * 4\n" in src and "slice(None, s_1, None)" in src
    assert "torch.reshape(t5, (2, s_0, 4, 8))" in src and "s_2 = _sym0 - s_1\n  t9 = torch.add(t8, s_2)" in src
    assert "s_3 = _sym0 - 12\n  s_4 = abs(s_3)\n  s_5 = s_4 + 1\n  t10 = torch.ones((s_5,))" in src
    prologue = str(thunder.last_prologue_traces(jf)[-1])
    assert "if not ((_sym0 - 5) >= 0): return MISS" in prologue
    assert "if not ((_sym0 + 3) >= 20): return MISS" in prologue
    assert "if not ((_sym0 - 12) >= 0): return MISS" in prologue


def int_window(x, n):
    """The same constructs of an int argument (a decode position): a sliding-window offset, a
    clamped length, //, %, abs and a comparison."""
    start = max(n - 8 + 1, 0)
    m = min(n, 10)
    y = x[:, start:n + 1] * (n // 3) + (n % 5) + abs(n - 11)
    return y, x[:, :m].sum(1) + (1 if n > 12 else -1)


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_min_max_floordiv_mod_abs_of_int_arguments_compile_once_per_side(cache):
    jf = thunder.jit(int_window, cache=cache)
    x = torch.randn(2, 30)
    for n in range(5, 25):  # 20 calls
        for got, want in zip(jf(x, n), int_window(x, n), strict=True):
            torch.testing.assert_close(got, want)
    # one program per side of the decisions n - 7 >= 0 (from 7), 10 < n (min, from 11; abs's sign
    # from 11 too) and n > 12 (from 13): 5-6, 7-10, 11-12, 13-24; the default compiles 5 alone
    # (6, its second value, makes n a symbol).
    # (In 7-10, `n % 5` and `n - 5` agree at three sizes of four: the samples are sizes that tell
    # them apart)
    assert thunder.cache_misses(jf) == (4 if cache == "symbolic values" else 5), \
        thunder.compile_stats(jf).generalizations
    src = str(thunder.last_traces(jf)[-1])
    assert "s = _sym0 - 7\n  s_0 = _sym0 + 1\n" in src and "slice(s, s_0, None)" in src  # ((n - 8) + 1)
    assert "s_1 = _sym0 // 3\n  t1 = torch.mul(t0, s_1)" in src
    assert "s_2 = _sym0 // 5\n  s_3 = s_2 * 5\n  s_4 = _sym0 - s_3\n  t2 = torch.add(t1, s_4)" in src
    assert "s_5 = _sym0 - 11\n  s_6 = abs(s_5)\n  t3 = torch.add(t2, s_6)" in src


def test_an_uneven_division_of_a_symbol_is_not_silently_computed():
    def f(x):
        return x.view(x.shape[0], 2, x.shape[1] // 2).sum(1)

    jf = thunder.jit(f, cache="symbolic values")
    for n in (4, 6, 10):
        x = torch.randn(3, n)
        torch.testing.assert_close(jf(x), f(x))
    assert thunder.cache_misses(jf) == 1
    x = torch.randn(3, 9)
    with pytest.raises(RuntimeError):
        f(x)
    with pytest.raises(RuntimeError):  # another program (the prologue checks 9 % 2), which refuses as eager
        jf(x)


def decode(x, k_cache, v_cache):
    """Attention with a growing cache (weights from the module level, as a model's): prefill with
    an empty cache, then one token per call."""
    q, k, v = x @ WQ, x @ WK, x @ WV
    k, v = torch.cat([k_cache, k], 1), torch.cat([v_cache, v], 1)
    T, L = x.shape[1], k.shape[1]
    mask = torch.ones(T, L, dtype=torch.bool).tril(L - T)
    att = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf")).softmax(-1)
    return att @ v, k, v


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_a_kv_cache_decode_loop_compiles_at_most_twice(cache, monkeypatch):
    jf = thunder.jit(decode, cache=cache)
    x = torch.randn(2, 6, C)
    k = v = ek = ev = torch.zeros(2, 0, C)
    generated = []  # Python programs compiled by the program for all lengths
    compile_source = symbolic.compile_source
    monkeypatch.setattr(symbolic, "compile_source", lambda *a, **kw: generated.append(1) or compile_source(*a, **kw))
    with torch.no_grad():
        for step in range(20):  # prefill, then 19 decode steps
            if step == 4:
                # every step is a new length: a fused region that reduces over it runs as one
                # torch-call program for all lengths, generated once, not one per length
                generated.clear()
            y, k, v = jf(x, k, v)
            ey, ek, ev = decode(x, ek, ev)
            torch.testing.assert_close(y, ey)
            torch.testing.assert_close(k, ek)
            x = torch.randn(2, 1, C)
    assert thunder.cache_misses(jf) == 2  # prefill, decode
    stats = thunder.compile_stats(jf)
    assert "tensor argument 1 dim 1 = tensor argument 2 dim 1" in stats.generalizations[-1]
    assert stats.cache_hits == 18
    assert generated == []


def test_sizes_the_function_ties_together_unseen_stay_constants_of_the_first_call():
    # split(C) of the 3C dim needs 3C == 3 * C, which no recorded decision says: the sample at
    # other sizes fails, and the sizes that fail to trace when they alone change (C, 3C) are
    # made constants of the program; B and T stay symbols
    def f(x, w):
        q, k, v = (x @ w).split(x.shape[-1], dim=2)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    jf = thunder.jit(f, cache="symbolic values", executors=["torch"])
    w = torch.randn(C, 3 * C)
    for B, T in ((2, 5), (2, 9), (3, 7), (4, 12)):
        x = torch.randn(B, T, C)
        torch.testing.assert_close(jf(x, w), f(x, w))
    assert thunder.cache_misses(jf) == 1
    assert thunder.compile_stats(jf).generalizations[0].startswith(
        "generalized (symbolic values: the first call's sizes and int arguments): _sym0: tensor argument 0 dim 0; "
        "_sym1: tensor argument 0 dim 1")
    with pytest.raises(RuntimeError):  # another C: compiled for it (a new program), refused as eager
        jf(torch.randn(2, 5, 8), w)


def test_a_size_expression_equal_in_the_fitted_calls_is_not_taken_for_a_constant():
    # -(T // 3 + 1) is -2 at T = 3, 4 and 5: three calls that hold it equal must not make -2 a
    # constant of the program for all T (T = 6 slices 3 columns)
    def f(x):
        return x[:, -(x.shape[1] // 3 + 1):] * x.shape[1]

    for cache in ("symbolic values", "constant values"):
        jf = thunder.jit(f, cache=cache, executors=["torch"], recompile_limit=None)
        for n in list(range(2, 14)) + [7, 20, 3]:
            x = torch.randn(5, n)
            torch.testing.assert_close(jf(x), f(x))


def test_a_block_fused_otherwise_at_twice_its_sizes_compiles_once():
    # benchmarks/gpt_block.py under symbolic values: at twice the first call's sizes the fusion
    # policy fuses other regions (the programs differ), so the samples are taken
    # near the call's sizes, where the passes decide alike; the fused kernel runs at every size
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from gpt_block import gpt_block, make_inputs  # (a benchmark's model: imported from its folder)

    jf = thunder.jit(gpt_block, cache="symbolic values")
    with torch.no_grad():
        for T in (16, 40, 92):
            args = [a.detach() if isinstance(a, torch.Tensor) else a for a in make_inputs(4, T, 128)] + [4]
            torch.testing.assert_close(jf(*args), gpt_block(*args), atol=1e-4, rtol=1e-4)
    assert thunder.cache_misses(jf) == 1, thunder.compile_stats(jf).generalizations
    assert ".at(_sym0, _sym1, _sym2)(" in str(thunder.last_traces(jf)[-1])  # (a fused region: a kernel family)


def _matmul_tanh(x, w):
    return (x @ w).tanh()


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_choices_made_by_size_do_not_keep_a_program_from_all_sizes(cache, monkeypatch):
    """A choice by size (here: a float32 product goes to oneDNN from MIN_MACS multiply-adds on,
    below to torch's matmul) goes one way at the call's sizes and the other at its samples'
    (larger): one program is still fitted for all lengths instead of one compiled per length
    (the product's kernel chosen at each call: ops/gemm_by_size.py; choices that cannot be made
    per call are the call's at its samples: core/size_choices.py)."""
    from thunder.ops import onednn
    if not onednn.available():
        pytest.skip("this torch build has no oneDNN (mkldnn) CPU ops")
    monkeypatch.setattr(onednn, "faster", lambda: True)
    features = 256
    below = onednn.MIN_MACS // (features * features)  # rows: products below the minimum up to here
    jf = thunder.jit(_matmul_tanh, cache=cache)
    w = torch.randn(features, features, requires_grad=True)
    for rows in range(below - 3, below + 1):
        x = torch.randn(rows, features, requires_grad=True)
        out, ref = jf(x, w), _matmul_tanh(x, w)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)  # (oneDNN sums in another order)
        g = torch.randn_like(ref)
        for a, b in zip(torch.autograd.grad(out, (x, w), g), torch.autograd.grad(ref, (x, w), g)):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert thunder.cache_misses(jf) == (1 if cache == "symbolic values" else 2), \
        thunder.compile_stats(jf).generalizations


def _linear_tanh(x, w, b):
    return torch.nn.functional.linear(x, w, b).tanh()


@pytest.mark.parametrize("fn", [_matmul_tanh, _linear_tanh])
@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_a_program_for_all_sizes_picks_each_calls_product_kernel(fn, cache, monkeypatch):
    """A program for all sizes fitted at products too small for oneDNN runs oneDNN's GEMM at a
    later call large enough for it, and torch's again at a small one, as a program compiled for
    each size would (ops/gemm_by_size.py); before, it kept the first sizes' choice at every size
    (torch's GEMMs at every length of a sweep that started short: 1.2x slower here)."""
    from thunder.ops import onednn, packed_linear
    if not onednn.available():
        pytest.skip("this torch build has no oneDNN (mkldnn) CPU ops")
    monkeypatch.setattr(onednn, "faster", lambda: True)
    monkeypatch.setenv("THUNDER_CPU_MATMUL", "onednn")  # (linear: packed_linear.f32_kernel)
    monkeypatch.setenv(packed_linear.ENV, "off")
    rows_seen = []
    pointwise = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise",
                        lambda x, *a: rows_seen.append(x.numel() // x.shape[-1]) or pointwise(x, *a))
    features = 256
    below = onednn.MIN_MACS // (features * features)  # rows: smaller products go to torch
    jf = thunder.jit(fn, cache=cache)
    w, b = torch.randn(features, features, requires_grad=True), torch.randn(features, requires_grad=True)
    for rows in (below - 8, below - 4, 4 * below, below - 2):
        x = torch.randn(rows, features, requires_grad=True)
        args = (x, w) if fn is _matmul_tanh else (x, w, b)
        rows_seen.clear()
        out, ref = jf(*args), fn(*args)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)  # (oneDNN sums in another order)
        g = torch.randn_like(ref)
        for a, e in zip(torch.autograd.grad(out, args, g), torch.autograd.grad(ref, args, g)):
            torch.testing.assert_close(a, e, atol=1e-3, rtol=1e-4)
        # forward product and input gradient have `rows` rows: oneDNN's exactly where large enough
        assert (rows in rows_seen) == (rows >= below), (rows, rows_seen)
    assert thunder.cache_misses(jf) == (1 if cache == "symbolic values" else 2), \
        thunder.compile_stats(jf).generalizations


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_a_gpt_block_training_sweep_with_fused_kernels_generalizes(cache):
    """The GPT block of benchmarks/gpt_block.py at a realistic width (its fusion regions chosen
    by this CPU's cost model, which may keep a region at one length and not at twice it),
    training: one program for all lengths under symbolic values, two compiles under the default."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from gpt_block import gpt_block, make_inputs
    jf = thunder.jit(gpt_block, cache=cache)
    for T in (16, 20, 24, 28):
        args = make_inputs(2, T, 128) + [4]
        out, ref = jf(*args), gpt_block(*args)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        g = torch.randn_like(ref)
        tensors = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        for a, b in zip(torch.autograd.grad(out, tensors, g), torch.autograd.grad(ref, tensors, g)):
            torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)
    assert thunder.cache_misses(jf) == (1 if cache == "symbolic values" else 2), \
        thunder.compile_stats(jf).generalizations


COUNTS = {"n": 0}
CALLS = 0


def _counted(x):  # changes a dict and a global of plain values while tracing
    global CALLS
    CALLS += 1
    COUNTS["n"] += 1
    return x * COUNTS["n"] + CALLS


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_changes_of_state_happen_once_per_call(cache):
    # the compile that makes sizes symbols traced the function three times (the call and two
    # samples at other sizes), each making the changes: the counter went up by three at the
    # first call, and every later call computed with it (silently wrong)
    global CALLS
    COUNTS["n"], CALLS = 0, 0
    jf = thunder.jit(_counted, cache=cache)
    for i, n in enumerate([4, 6, 8, 6]):  # (the default makes the size a symbol at the second)
        x = torch.ones(n)
        torch.testing.assert_close(jf(x), x * (i + 1) + (i + 1))
        assert COUNTS["n"] == CALLS == i + 1
    # changed in every call, so every call compiles, and no program for all sizes is fitted
    assert thunder.cache_misses(jf) == 4
    assert any("changes state while tracing (writing" in g for g in thunder.compile_stats(jf).generalizations)


def test_probe_traces_change_nothing():
    # traces that only learn something (whether the function traces at other sizes) put back
    # what they changed
    from thunder.runtime.state import before_write, changes_undone
    d, lst, s = {"a": 1}, [1, 2], {1}
    g = {"G": 1}
    with changes_undone():
        for obj in (d, lst, s):
            before_write(obj)
        before_write(g, "G")
        before_write(g, "H")
        d["a"], d["b"] = 2, 3
        lst.append(3)
        s.add(2)
        g["G"], g["H"] = 5, 6
    assert d == {"a": 1} and lst == [1, 2] and s == {1} and g == {"G": 1}


def test_a_call_traced_again_changes_state_once():
    # inputs sharing memory, one updated in place: the call is traced a second time with them as
    # views of one storage, from the state the first trace started from
    log = []

    def f(a, b):
        log.append(len(log))
        a.add_(1)
        return b * 2

    base = torch.zeros(6)
    eager_base = base.clone()
    expected = f(eager_base[:3], eager_base[1:4])
    log.clear()
    got = thunder.jit(f)(base[:3], base[1:4])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(base, eager_base)
    assert log == [0]


def test_traces_made_again_leave_pythons_random_as_eager():
    # the program draws from Python's random on each call (ops/python_draws.py); the traces at
    # other sizes draw nothing, so the generator after the call is where eager leaves it
    import random

    def f(x):
        return x * random.random()

    random.seed(0)
    expected = f(torch.ones(4))
    after = random.random()
    random.seed(0)
    jf = thunder.jit(f, cache="symbolic values")
    torch.testing.assert_close(jf(torch.ones(4)), expected)
    assert random.random() == after


def test_a_print_while_tracing_prints_once(capsys):
    def f(x):
        print("tracing", x.shape[0] > 0)
        return x * 2

    jf = thunder.jit(f, cache="symbolic values")
    torch.testing.assert_close(jf(torch.ones(4)), torch.ones(4) * 2)
    assert capsys.readouterr().out == "tracing True\n"


def test_a_fused_region_holds_where_its_decomposition_decided_the_program_does():
    # compiled once with its symbols, the view inside the fused kernel was decomposed with the
    # width a symbol: its decision (B * T * 2 * (C // 2) == B * T * C) is a prologue check, so an
    # odd width compiles for its sizes and raises eager's error instead of running the kernel
    def f(x):
        B, T, Cx = x.shape
        return (x * 2).view(B, T, 2, Cx // 2).exp().sum(2)

    jf = thunder.jit(f, cache="symbolic values", fusion="always")
    for T in (3, 4, 9):
        x = torch.randn(2, T, 8)
        torch.testing.assert_close(jf(x), f(x))
    assert thunder.compile_stats(jf).last_symbolic_compile == "compiled once with symbolic sizes"
    prologue = str(thunder.last_prologue_traces(jf)[-1])
    assert "if not ((((_sym0 * _sym1) * 2) * (_sym2 // 2)) == ((_sym0 * _sym1) * _sym2)): return MISS" in prologue
    x = torch.randn(2, 5, 7)
    with pytest.raises(RuntimeError) as eager:
        f(x)
    with pytest.raises(RuntimeError, match=re.escape(str(eager.value))):
        jf(x)
    assert thunder.cache_misses(jf) == 2
