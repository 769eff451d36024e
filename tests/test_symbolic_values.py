"""cache="symbolic values": sizes that keep changing become symbols (runtime/symbolic.py); one
program for all of them, checked against eager at every size."""
import math

import pytest
import torch

import thunder
from thunder.lowering import linalg


def _misses(jf):
    return thunder.compile_stats(jf).cache_misses


def test_batch_sweep_compiles_a_bounded_number_of_times_fused_kernels_included():
    def f(x, w, b):
        y = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)
        return torch.nn.functional.gelu(y * 2 + 1).sum(-1)

    jf = thunder.jit(f, cache="symbolic values")
    w, b = torch.randn(64), torch.randn(64)
    compiled = None
    for batch in range(2, 22):  # 20 batch sizes
        x = torch.randn(batch, 64)
        torch.testing.assert_close(jf(x, w, b), f(x, w, b))
        if batch == 5:
            compiled = len(linalg.COMPILE_LOG)
    assert _misses(jf) == 3
    assert len(linalg.COMPILE_LOG) == compiled  # the fused kernel's code is shared by all sizes
    assert "generalized: _sym0: tensor argument 0 dim 0" == thunder.compile_stats(jf).last_generalization
    src = str(thunder.last_traces(jf)[-1])
    assert "def computation(x, w, b, _sym0):" in src and "fusion_0" in src
    assert "_sym0 = a0.shape[0]" in str(thunder.last_prologue_traces(jf)[-1])


def test_sequence_sweep_with_reshapes_writes_the_sizes_as_expressions():
    def f(x):
        B, T, C = x.shape
        y = x.reshape(B * T, C).softmax(-1)
        return y.view(B, T, C)[:, : T - 1] + torch.arange(T - 1).view(1, T - 1, 1)

    fused = thunder.jit(f, cache="symbolic values")
    unfused = thunder.jit(f, cache="symbolic values", executors=["torch"])
    for T in range(2, 22):
        x = torch.randn(3, T, 8)
        torch.testing.assert_close(fused(x), f(x))
        torch.testing.assert_close(unfused(x), f(x))
    assert _misses(fused) == _misses(unfused) == 3
    src = str(thunder.last_traces(unfused)[-1])
    assert "(3 * _sym0)" in src and "(_sym0 - 1)" in src


def test_a_decision_on_a_size_is_a_guard():
    def f(x):
        if x.shape[0] > 6:
            return x * 2
        return x + 1

    jf = thunder.jit(f, cache="symbolic values")
    for n in [2, 3, 4, 5, 6, 7, 8, 9, 3, 10, 11, 12, 13, 4]:
        x = torch.randn(n, 4)
        torch.testing.assert_close(jf(x), f(x))
    prologue = str(thunder.last_prologue_traces(jf)[-1])
    assert "not (_sym0 > 6)" in prologue or "(_sym0 > 6)" in prologue
    assert _misses(jf) <= 7  # three per side of the branch at most, then one program each


def test_range_over_a_size_specializes_instead_of_generalizing():
    def f(x):
        out = x
        for i in range(x.shape[0] // 4):  # a loop count computed from a size
            out = out + i
        return out

    jf = thunder.jit(f, cache="symbolic values")
    for n in [4, 5, 6, 7, 8, 9, 12, 13]:
        x = torch.randn(n)
        torch.testing.assert_close(jf(x), f(x))


def test_training_sweep_gives_eager_gradients():
    class Block(torch.nn.Module):
        def __init__(self, C=32, H=4):
            super().__init__()
            self.ln, self.qkv, self.proj, self.H = torch.nn.LayerNorm(C), torch.nn.Linear(C, 3 * C), \
                torch.nn.Linear(C, C), H

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return x + self.proj(y.transpose(1, 2).reshape(B, T, C))

    torch.manual_seed(0)
    m = Block()
    jm = thunder.jit(m, cache="symbolic values")
    for T in range(3, 15):
        x = torch.randn(2, T, 32)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        out = jm(xa)
        ref = m(xb)
        torch.testing.assert_close(out, ref)
        g = torch.randn_like(ref)
        grads = torch.autograd.grad(out, [xa, *m.parameters()], g)
        ref_grads = torch.autograd.grad(ref, [xb, *m.parameters()], g)
        for a, b in zip(grads, ref_grads):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert _misses(jm) <= 5
    assert "_program.at(_sym0)" in str(thunder.last_traces(jm)[-1])
    assert "def backward(_sym0," in str(thunder.last_backward_traces(jm)[-1])


def test_kv_cache_decode_loop_does_not_recompile_per_step():
    torch.manual_seed(0)
    C, H = 16, 2
    wq, wk, wv = (torch.randn(C, C) / 4 for _ in range(3))

    def step(x, k_cache, v_cache):  # x: (B, 1, C); caches: (B, H, T, C // H), T grows by one
        B = x.shape[0]
        q = (x @ wq).view(B, 1, H, C // H).transpose(1, 2)
        k = torch.cat([k_cache, (x @ wk).view(B, 1, H, C // H).transpose(1, 2)], dim=2)
        v = torch.cat([v_cache, (x @ wv).view(B, 1, H, C // H).transpose(1, 2)], dim=2)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
        y = att.softmax(-1) @ v
        return y.transpose(1, 2).reshape(B, 1, C), k, v

    jstep = thunder.jit(step, cache="symbolic values")
    k = v = torch.randn(2, H, 2, C // H)
    ek, ev = k, v
    for _ in range(24):
        x = torch.randn(2, 1, C)
        y, k, v = jstep(x, k, v)
        ey, ek, ev = step(x, ek, ev)
        torch.testing.assert_close(y, ey)
        torch.testing.assert_close(k, ek)
    assert _misses(jstep) == 3
    assert thunder.compile_stats(jstep).cache_hits == 21


def test_a_size_returned_as_a_number_is_not_generalized():
    def f(x):
        return x * 2, x.shape[0] * 3

    jf = thunder.jit(f, cache="symbolic values")
    for n in range(2, 9):
        x = torch.randn(n)
        out, k = jf(x)
        assert k == n * 3
        torch.testing.assert_close(out, x * 2)
    assert "returned or stored" in thunder.compile_stats(jf).last_generalization


def test_sizes_zero_and_one_are_not_symbols():
    def f(x):
        return x.sum(0) * 2

    jf = thunder.jit(f, cache="symbolic values")
    for n in [1, 2, 3, 4, 5, 1, 0]:
        x = torch.randn(n, 3)
        torch.testing.assert_close(jf(x), f(x))


def test_the_generalized_program_rejects_other_dtypes_and_ranks():
    jf = thunder.jit(lambda x: x * 2, cache=thunder.CACHE_OPTIONS.SYMBOLIC_VALUES)
    for n in range(2, 7):
        jf(torch.randn(n))
    assert _misses(jf) == 3
    torch.testing.assert_close(jf(torch.ones(3, dtype=torch.float64)), torch.full((3,), 2.0, dtype=torch.float64))
    torch.testing.assert_close(jf(torch.ones(3, 2)), torch.full((3, 2), 2.0))
    assert _misses(jf) == 5


def test_int_arguments_are_symbols_and_slicing_past_the_end_is_guarded():
    def f(x, n, *, k=2):
        y = x[:n] * n + k  # x has 40 rows: n > 40 takes them all (slicing clamps)
        return y.reshape(-1, 2).sum(0) + torch.arange(n).sum()

    jf = thunder.jit(f, cache="symbolic values")
    x = torch.randn(40, 4)
    for n in list(range(2, 14)) + [39, 40, 41, 50, 60, 70, 3, 45]:
        torch.testing.assert_close(jf(x, n), f(x, n))
    stats = thunder.compile_stats(jf)
    assert stats.miss_reasons.count("first call") == 1
    assert stats.cache_misses == 6  # 3 until n is a symbol, 3 more past the clamp (n > 40)
    assert "_sym0 = args[1]" in str(thunder.last_prologue_traces(jf)[-1])
    assert "int argument 1" in stats.last_generalization


def test_training_with_a_structured_output():
    # the training program's output rebuild (a namedtuple here) needs its constants in the
    # generalized program too
    import collections

    Out = collections.namedtuple("Out", ["y", "total"])
    lin = torch.nn.Linear(8, 8)

    def f(x):
        y = lin(x).relu()
        return Out(y, y.sum())

    jf = thunder.jit(f, cache="symbolic values")
    for n in range(2, 10):
        xa, xb = torch.randn(n, 8, requires_grad=True), None
        xb = xa.detach().clone().requires_grad_()
        out, ref = jf(xa), f(xb)
        assert type(out) is Out
        torch.testing.assert_close(out.y, ref.y)
        out.total.backward()
        ref.total.backward()
        torch.testing.assert_close(xa.grad, xb.grad)
    assert thunder.compile_stats(jf).cache_misses == 3


# ---- Python floats: runtime numbers of the program (f64 parameters in MLIR), not constants

def test_float_arguments_are_runtime_numbers_of_one_program():
    def f(x, w, lr, *, scale=1.0):
        return torch.nn.functional.gelu(x * lr + w) * scale

    jf = thunder.jit(f, cache="symbolic values")
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    for lr, scale in ((0.5, 2.0), (1.5, -3.0), (1e-3, 0.25), (-1e30, float("nan"))):
        out, ref = jf(x, w, lr, scale=scale), f(x, w, lr, scale=scale)
        torch.testing.assert_close(out, ref, equal_nan=True)
        grads = torch.autograd.grad(out.sum(), (x, w))
        torch.testing.assert_close(grads, torch.autograd.grad(ref.sum(), (x, w)), equal_nan=True)
    assert _misses(jf) == 1
    mlir = thunder.last_traces(jf)[0].to_mlir()
    assert "func.func @computation(%arg0: tensor<4x8xf32>, %arg1: tensor<8xf32>, %arg2: f64, %arg3: f64)" in mlir
    assert '"ltorch.mul"(%arg0, %arg2) : (tensor<4x8xf32>, f64)' in mlir
    assert "def computation(x, w, lr, scale):" in str(thunder.last_traces(jf)[-1])
    prologue = str(thunder.last_prologue_traces(jf)[-1])
    assert "if type(a2) is not float: return MISS" in prologue
    # an int where the float was is another structure: compiled on its own, as eager's types differ
    torch.testing.assert_close(jf(x, w, 2, scale=1.0), f(x, w, 2, scale=1.0))
    assert _misses(jf) == 2


def test_a_float_argument_runs_inside_the_fused_kernel():
    def f(x, b, t):
        return torch.tanh((x + b) / t) * (1 - t) + torch.where(x > t, x, -t)

    jf = thunder.jit(f, cache="symbolic values")
    x, b = torch.randn(300, 257), torch.randn(257)
    compiled = None
    for t in (0.7, 1.3, -2.6, 1e-3, 1e6):
        torch.testing.assert_close(jf(x, b, t), f(x, b, t))
        if compiled is None:
            compiled = len(linalg.COMPILE_LOG)
    assert _misses(jf) == 1 and len(linalg.COMPILE_LOG) == compiled  # one kernel for all values
    src = str(thunder.last_traces(jf)[-1])
    # (numbers computed from it are computed in Python, in double precision, as eager does)
    assert "n0 = 1 - t" in src and "n1 = -t" in src and "t6, = fusion_0(x, b, t, n0, n1)" in src
    assert "torch." not in src.split("def computation")[1]


def test_a_decision_on_a_float_argument_specializes_on_its_outcome():
    def f(x, p):
        if p > 0.5:
            return x[: int(p * 2)] * p
        return x - p

    jf = thunder.jit(f, cache="symbolic values")
    x = torch.randn(6, 3)
    for p in (0.6, 0.7, 0.1, 0.2, 1.2, 0.9):
        torch.testing.assert_close(jf(x, p), f(x, p))
    # p > 0.5 with int(p * 2) == 1 (0.6, 0.7, 0.9), p <= 0.5 (0.1, 0.2), int(p * 2) == 2 (1.2)
    assert _misses(jf) == 3


def test_changing_sizes_and_floats_together():
    def f(x, eps):
        return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()

    jf = thunder.jit(f, cache="symbolic values")
    for i, T in enumerate(range(2, 14)):
        x, eps = torch.randn(T, 16), 10.0 ** -(i % 6)
        torch.testing.assert_close(jf(x, eps), f(x, eps))
    assert _misses(jf) == 3
    assert "def computation(x, eps, _sym0):" in str(thunder.last_traces(jf)[-1])


def test_an_int_read_from_a_tensor_runs_inside_the_fused_kernel():
    def f(x, n):
        k = n.sum().item()
        return (x * k).sigmoid() + k

    jf = thunder.jit(f)
    x = torch.randn(300, 257)
    for v in (3, -7):
        n = torch.tensor([v, 1])
        torch.testing.assert_close(jf(x, n), f(x, n))
    assert _misses(jf) == 1
    assert "fusion_0(x, n0)" in str(thunder.last_traces(jf)[-1])
