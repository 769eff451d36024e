"""float8 and float4 dtypes end to end, against eager bit for bit: casts (torch's rounding and
out-of-range behaviour), scaled casts, x.view(dtype) and back, amax, torch._scaled_mm, and
eager's errors where torch refuses; traced, decomposed and fused (tests/op_harness.py) and jitted.
The casts run as torch calls (lowering/fuse.py's ELEMENT_TYPES has no f8 type)."""
import re

import pytest
import torch

import thunder
from tests.op_harness import check

F8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
ALL_BYTES = torch.arange(256, dtype=torch.uint8)


def _inputs():
    # many magnitudes, each f8 format's edges (448/449/464 e4m3fn; 57344/61440 e5m2; 240 fnuz),
    # subnormals, out of range, inf, nan, signed zeros
    spread = torch.randn(2000, generator=torch.Generator().manual_seed(0)) * 10 ** torch.linspace(-9, 9, 2000)
    edges = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 448.0, 449.0, 464.0, -465.0,
                          57344.0, 61440.0, -61441.0, 240.0, 241.0, 248.0, 1e30, -1e30, 2.0 ** -6, 2.0 ** -9,
                          2.0 ** -10, 2.0 ** -16, 2.0 ** -17, 2.0 ** -18, 3 * 2.0 ** -18, 1.0625, 1.0624])
    return torch.cat([spread, edges])


def _bits(t):
    return t.view(torch.uint8) if t.dtype.itemsize == 1 and t.dtype != torch.bool else t


def _same(out, exp):
    assert out.dtype == exp.dtype and out.shape == exp.shape
    assert torch.equal(_bits(out), _bits(exp))


@pytest.mark.parametrize("dtype", F8, ids=str)
@pytest.mark.parametrize("fusion", [None, False])
def test_casts_match_eager_bitwise(dtype, fusion):
    x = _inputs()
    fns = [lambda x: x.to(dtype),
           lambda x: (x * 0.125).to(dtype),  # a scaled cast, as FP8 recipes do
           lambda x: x.to(torch.bfloat16).to(dtype),
           lambda x: x.double().to(dtype)]
    for f in fns:
        _same(thunder.jit(f, fusion=fusion)(x), f(x))


@pytest.mark.parametrize("dtype", F8, ids=str)
def test_every_f8_value_converts_as_eager(dtype):
    for f in (lambda b: b.view(dtype).to(torch.float32), lambda b: b.view(dtype).to(torch.bfloat16),
              lambda b: b.view(dtype).to(torch.float16).view(torch.int16)):
        out, exp = thunder.jit(f)(ALL_BYTES), f(ALL_BYTES)
        assert out.dtype == exp.dtype
        torch.testing.assert_close(out, exp, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("name, fn, arg", [
    ("cast", lambda x: x.to(torch.float8_e4m3fn).view(torch.uint8), _inputs()[-300:]),
    ("scaled_cast", lambda x: (x * 0.5).to(torch.float8_e5m2).view(torch.uint8), _inputs()[-300:]),
    ("from_bytes", lambda b: b.view(torch.float8_e4m3fn).to(torch.float32) * 2, ALL_BYTES),
    ("amax", lambda x: x.abs().max(), _inputs()[:300]),
    ("dequant_sum", lambda x: (x.to(torch.float8_e5m2).float() * 3).sum(), _inputs()[:300]),
    ("fnuz", lambda x: x.to(torch.float8_e4m3fnuz).view(torch.int8), _inputs()[-300:]),
    ("e8m0", lambda x: x.abs().to(torch.float8_e8m0fnu).view(torch.uint8), _inputs()[:300]),
    ("float4_view", lambda b: b.view(torch.float4_e2m1fn_x2).view(torch.uint8) + 1, ALL_BYTES),
    ("view_wider", lambda x: x.view(torch.int32), torch.randn(4, 6)),
    ("view_narrower", lambda x: x.view(torch.float8_e4m3fn).view(torch.uint8), torch.randn(4, 6)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_op_harness(name, fn, arg):  # traced, decomposed and fused
    check(fn, arg)


def test_fp8_recipe_scale_amax_cast_dequantize():
    def quantize(x, amax_history):
        amax = x.abs().max()
        scale = 448.0 / torch.clamp(torch.maximum(amax, amax_history.max()), min=1e-12)
        q = (x * scale).to(torch.float8_e4m3fn)
        return q, q.float() / scale, torch.cat([amax_history[1:], amax.reshape(1)])

    x, hist = torch.randn(64, 32), torch.rand(16)
    out, exp = thunder.jit(quantize)(x, hist), quantize(x, hist)
    for a, e in zip(out, exp):
        _same(a, e)


def test_scaled_mm_runs_as_torch_call():
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(16, 32).to(torch.float8_e4m3fn).t()  # column-major, as torch requires

    def f(a, b, sa, sb):
        return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32)

    sa, sb = torch.tensor(0.5), torch.tensor(2.0)
    jf = thunder.jit(f)
    _same(jf(a, b, sa, sb), f(a, b, sa, sb))
    b2 = torch.randn(16, 32).to(torch.float8_e4m3fn).t()
    _same(jf(a, b2, sb, sa), f(a, b2, sb, sa))  # new values, the same program
    assert thunder.cache_misses(jf) == 1


def _scaled_mm_cases():
    g = torch.Generator().manual_seed(1)

    def f8(*shape, dtype=torch.float8_e4m3fn):
        return torch.randn(*shape, generator=g).to(dtype)

    a, sa, sb = f8(16, 32), torch.tensor(0.5), torch.tensor(2.0)
    return {  # (what eager's CPU kernel runs: its meta kernel wants CUDA's row-major a, column-major b)
        "b_row_major": (a, f8(32, 16), sa, sb),
        "b_row_major_slice": (a, f8(32, 40)[:, 8:24], sa, sb),
        "a_column_major": (f8(32, 16).t(), f8(16, 32).t(), sa, sb),
        "e5m2": (f8(16, 32, dtype=torch.float8_e5m2), f8(32, 16, dtype=torch.float8_e5m2), sa, sb),
        "rowwise_scales": (a, f8(32, 16), torch.rand(16, 1, generator=g), torch.rand(1, 16, generator=g)),
        # what it refuses: eager's errors
        "shapes": (a, f8(16, 16), sa, sb),
        "not_f8": (a.float(), torch.randn(32, 16), sa, sb),
        "scale_shape": (a, f8(32, 16), torch.rand(3, generator=g), sb),
    }


@pytest.mark.parametrize("case", list(_scaled_mm_cases()))
def test_scaled_mm_on_cpu_accepts_and_refuses_what_eager_does(case):
    args = _scaled_mm_cases()[case]

    def f(a, b, sa, sb):
        return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32)

    try:
        exp = f(*args)
    except Exception as e:  # noqa: BLE001 - eager's error, whichever it is
        with pytest.raises(type(e), match=re.escape(str(e).splitlines()[0])):
            thunder.jit(f)(*args)
        return
    jf = thunder.jit(f)
    _same(jf(*args), exp)
    b = torch.empty_strided(args[1].shape, args[1].stride(), dtype=args[1].dtype)
    b.copy_(-args[1].float())  # (new values of the same layout: the same program)
    _same(jf(args[0], b, *args[2:]), f(args[0], b, *args[2:]))
    assert thunder.cache_misses(jf) == 1


@pytest.mark.parametrize("name, fn", [
    ("promotion", lambda y, x: y + x),
    ("mul", lambda y, x: y * 2.0),
    ("sum", lambda y, x: y.sum()),
    ("max", lambda y, x: y.max()),
    ("float4_cast", lambda y, x: x.to(torch.float4_e2m1fn_x2)),
    ("view_strides", lambda y, x: x.t().view(torch.uint8)),
    ("view_0d", lambda y, x: x[0, 0].view(torch.float16)),
    ("view_not_divisible", lambda y, x: x.to(torch.float16)[:, :5].contiguous().view(torch.float32)),
])
def test_errors_match_eager(name, fn):
    x = torch.randn(4, 6)
    y = x.to(torch.float8_e4m3fn)
    with pytest.raises(Exception) as e:
        fn(y, x)
    with pytest.raises(type(e.value)):
        thunder.jit(fn)(y, x)


def test_f8_tensors_as_inputs_views_and_outputs():
    y = torch.randn(4, 6).to(torch.float8_e5m2)
    for f in (lambda y: y.t().contiguous(), lambda y: y.reshape(6, 4), lambda y: y[1:3, ::2], lambda y: y.clone(),
              lambda y: torch.cat([y, y]), lambda y: torch.zeros_like(y), lambda y: y.abs(), lambda y: y == y):
        out, exp = thunder.jit(f)(y), f(y)
        _same(out, exp)
        assert out.stride() == exp.stride()


def test_gradient_through_a_dequantized_cast_matches_eager():
    def f(x):
        return (x.to(torch.float8_e4m3fn).float() * x).sum()

    x = torch.randn(8, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    out, exp = thunder.jit(f)(x), f(y)
    torch.testing.assert_close(out, exp)
    out.backward(), exp.backward()
    torch.testing.assert_close(x.grad, y.grad)


def test_mlir_types():
    from tests.op_harness import trace_module

    text = str(trace_module(lambda x: (x.to(torch.float8_e4m3fn).view(torch.uint8),
                                       x.to(torch.float8_e5m2).view(torch.float4_e2m1fn_x2)), torch.randn(4)))
    assert "tensor<4xf8E4M3FN>" in text and "tensor<4xf8E5M2>" in text
    assert "tensor<4xvector<2xf4E2M1FN>>" in text
    assert '"ltorch.view_dtype"' in text
