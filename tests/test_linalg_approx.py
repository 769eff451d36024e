"""Polynomial f32 erf/log/log1p/expm1 (lowering/linalg/approx.py) and f16/bf16 tensors in linalg
kernels (conversions in scalar.convert_scalar, f32 emulation in pipeline.py), compared with
eager PyTorch. Regions are written by hand as thunder prims."""
import re

import pytest
import torch

from thunder.dialects.mlir import ir
from thunder.lowering.linalg import compile_region, lower_to_llvm, to_linalg

F32 = torch.finfo(torch.float32)
MLIR = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
        torch.int64: "i64", torch.int32: "i32", torch.bool: "i1"}


def ttype(shape, dtype):
    return "tensor<" + "".join(f"{s}x" for s in shape) + MLIR[dtype] + ">"


def region(inputs, body, result):
    """A func @f of thunder prims. inputs: [(shape, dtype)], named %a0, %a1, ...; body: lines
    `%name = "thunder.op"(...) ... : (...) -> T`; result: (ssa name, shape, dtype)."""
    types = [ttype(s, d) for s, d in inputs]
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    name, shape, dtype = result
    rt = ttype(shape, dtype)
    lines = "\n".join("    " + line for line in body)
    return (f"module {{\n  func.func @f({params}) -> {rt} {{\n{lines}\n    return {name} : {rt}\n  }}\n}}\n")


def unary(op, n, dtype=torch.float32):
    t = ttype((n,), dtype)
    return region([((n,), dtype)], [f'%0 = "thunder.{op}"(%a0) : ({t}) -> {t}'], ("%0", (n,), dtype))


def convert(shape, src, dst):
    return region([(shape, src)], [f'%0 = "thunder.convert_element_type"(%a0) {{dtype = {MLIR[dst]}}} : '
                                   f'({ttype(shape, src)}) -> {ttype(shape, dst)}'], ("%0", shape, dst))


def run1(text, *args):
    out, = compile_region(text, "f")(*[a.contiguous() for a in args])
    return out


def llvm_text(text):
    with ir.Context(), ir.Location.unknown():
        m = ir.Module.parse(to_linalg(text, "f"))
        lower_to_llvm(m)
        return str(m)


# ---- f32 erf / log / log1p / expm1
SPECIAL = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0, -1.0, 2.0, 0.5,
           F32.tiny, -F32.tiny, F32.smallest_normal * 0.75, 1e-45, -1e-45, F32.max, -F32.max,
           1e-30, -1e-30, 1e-7, -1e-7, 0.921875, -0.921875, 0.92187494, 3.9, 4.0, 4.1, 10.0, -10.0,
           88.72, 88.73, -87.5, -104.0, -0.9999999, -1.0000001, 1.0000001, 0.9999999]

DENSE = {  # where each function is delicate
    "erf": [(-5.0, 5.0), (-1e-3, 1e-3), (0.9, 0.95), (3.8, 4.2)],
    "log": [(0.0, 4.0), (0.999, 1.001), (0.7, 0.72), (1.4, 1.42)],
    "log1p": [(-1.0, 10.0), (-1e-3, 1e-3), (-1e-7, 1e-7)],
    "expm1": [(-110.0, 100.0), (-1e-3, 1e-3), (-1e-7, 1e-7), (-1.0, 1.0)],
}


def samples(op):
    g = torch.Generator().manual_seed(0)
    mag = torch.logspace(-45, 38.5, 500_000, dtype=torch.float64)
    parts = [mag, -mag]
    for lo, hi in DENSE[op]:
        parts.append(lo + (hi - lo) * torch.rand(100_000, generator=g, dtype=torch.float64))
    parts.append(torch.tensor(SPECIAL, dtype=torch.float64))
    return torch.cat(parts).float()


@pytest.mark.parametrize("op", ["erf", "log", "log1p", "expm1"])
def test_f32_approx_matches_torch(op):
    """Within torch.testing's default f32 tolerances of torch on 1e6 magnitudes from 1e-45 to
    3e38 of both signs, dense ranges where the function is delicate and special values; and
    within 3 ulp of the float64 result wherever that is a normal f32."""
    x = samples(op)
    y = run1(unary(op, x.numel()), x)
    ref = getattr(torch, op)(x)
    torch.testing.assert_close(y, ref, equal_nan=True)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    exact = getattr(torch, op)(x.double())
    normal = torch.isfinite(exact.float()) & (exact.abs() >= F32.smallest_normal)
    ulp = F32.eps * torch.exp2(torch.floor(torch.log2(exact.abs())))
    err = ((y.double() - exact).abs() / ulp)[normal]
    assert err.max() < 3, f"{op}: {err.max():.2f} ulp"
    # outside the normal range: the same infinities, and within one ulp of a denormal
    other = ~normal & ~torch.isnan(exact)
    denormal_ulp = F32.tiny * F32.eps
    torch.testing.assert_close(y[other].double(), exact.float()[other].double(), rtol=0, atol=2 * denormal_ulp)


def test_f32_approx_special_values():
    inf, nan = float("inf"), float("nan")
    cases = {
        "log": [(0.0, -inf), (-0.0, -inf), (-1.0, nan), (-1e-45, nan), (inf, inf), (-inf, nan), (nan, nan),
                (1.0, 0.0), (2.0, 0.6931471805599453)],
        "log1p": [(-1.0, -inf), (-2.0, nan), (0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, nan), (nan, nan),
                  (1e-45, 1e-45)],
        "expm1": [(-inf, -1.0), (inf, inf), (100.0, inf), (0.0, 0.0), (-0.0, -0.0), (-200.0, -1.0),
                  (nan, nan),
                  (1e-45, 1e-45)],
        "erf": [(0.0, 0.0), (-0.0, -0.0), (inf, 1.0), (-inf, -1.0), (nan, nan), (5.0, 1.0), (-1e30, -1.0)],
    }
    for op, pairs in cases.items():
        x = torch.tensor([p[0] for p in pairs])
        want = torch.tensor([p[1] for p in pairs])
        y = run1(unary(op, x.numel()), x)
        torch.testing.assert_close(y, want, equal_nan=True, atol=0, rtol=2e-7, msg=lambda m: f"{op}: {m}")
        assert torch.equal(torch.signbit(y[~torch.isnan(want)]), torch.signbit(want[~torch.isnan(want)])), op
    # denormal inputs of log and the smallest/largest floats
    x = torch.tensor([1e-45, 1e-40, F32.smallest_normal, F32.max])
    torch.testing.assert_close(run1(unary("log", 4), x), torch.log(x.double()).float(), atol=0, rtol=2e-7)


def test_no_libm_calls():
    """erf/log/log1p/expm1/exp/tanh on f32, f16 and bf16 leave no libm call (nor an LLVM math
    intrinsic that codegen would turn into one): the loop vectorizes."""
    n = 1000
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        t = ttype((n,), dt)
        body, last = [], "%a0"
        for i, op in enumerate(["erf", "log", "log1p", "expm1", "exp", "tanh"]):
            body.append(f'%{i} = "thunder.{op}"({last}) : ({t}) -> {t}')
            last = f"%{i}"
        asm = llvm_text(region([((n,), dt)], body, (last, (n,), dt)))
        callees = set(re.findall(r"llvm\.call @(\w+)", asm))
        assert not callees & {"erff", "logf", "log1pf", "expm1f", "expf", "tanhf", "__truncsfbf2",
                              "__truncsfhf2", "__extendhfsf2"}, (dt, callees)
        assert not re.search(r"llvm\.intr\.(log|exp|erf|tanh)\b", asm), dt


# ---- f16 / bf16
LOW = [torch.float16, torch.bfloat16]


def f32_bit_patterns():
    """random f32 bit patterns, plus for every upper half of the bits the lower halves that
    sit at and around the bf16 rounding ties (f16 ties come with the random ones and below)."""
    g = torch.Generator().manual_seed(1)
    rnd = torch.randint(-2**31, 2**31, (1 << 20,), generator=g, dtype=torch.int64)
    hi = torch.arange(0, 1 << 16, dtype=torch.int64) << 16
    lo = torch.tensor([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1000, 0x0FFF, 0x2000, 0x1FFF, 0x3000])
    bits = torch.cat([rnd, (hi[:, None] + lo[None, :]).flatten()])
    x = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)
    halves = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    steps = torch.tensor([1.0 - 2**-12, 1.0 + 2**-12, 1.0 - 2**-13, 1.0 + 2**-13])  # around f16 ties
    return torch.cat([x, halves, (halves[:, None] * steps).flatten()])


def assert_same_bits(y, ref):
    """the same bits (signed zeros distinguished), nan where torch has nan"""
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(y), nan)
    as_int = {2: torch.int16, 4: torch.int32}[ref.element_size()]
    assert torch.equal(y.view(as_int)[~nan], ref.view(as_int)[~nan])


@pytest.mark.parametrize("dtype", LOW)
def test_f32_to_low_rounds_like_torch(dtype):
    """f32 -> f16/bf16: round to nearest even, denormals kept, overflow to inf, inf/nan kept,
    bit for bit as torch (bf16: no flush of denormals by vcvtneps2bf16)."""
    x = f32_bit_patterns()
    assert_same_bits(run1(convert(tuple(x.shape), torch.float32, dtype), x), x.to(dtype))


@pytest.mark.parametrize("dtype", LOW)
def test_low_to_f32_exhaustive(dtype):
    x = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    assert_same_bits(run1(convert(tuple(x.shape), dtype, torch.float32), x), x.float())


@pytest.mark.parametrize("src,dst", [(torch.float64, torch.float16), (torch.float64, torch.bfloat16),
                                     (torch.int64, torch.float16), (torch.int64, torch.bfloat16),
                                     (torch.int32, torch.bfloat16), (torch.bool, torch.bfloat16),
                                     (torch.float16, torch.bfloat16), (torch.bfloat16, torch.float16),
                                     (torch.float16, torch.float64), (torch.bfloat16, torch.int64),
                                     (torch.float16, torch.int32), (torch.bfloat16, torch.bool)])
def test_other_conversions_like_torch(src, dst):
    """Through f32 as torch does: f64 -> f16 and i64 -> bf16 round twice (1 + 2^-11 + 2^-40 -> 1.0)."""
    g = torch.Generator().manual_seed(2)
    if src == torch.float64:
        x = torch.cat([torch.randn(10000, generator=g, dtype=torch.float64) * 1e3,
                       torch.tensor([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40, 65519.99, 65520.0, 1e300,
                                     -1e-300,
                                     float("inf"), float("nan"), -0.0, 3e-8, 1e-40])])
    elif src == torch.bool:
        x = torch.rand(1000, generator=g) > 0.5
    elif not src.is_floating_point:
        x = torch.cat([torch.randint(-2**40 if src == torch.int64 else -2**31, 2**31, (10000,), generator=g),
                       torch.tensor([(1 << 25) + (1 << 17) + 1, 2049, 65521, -65536])]).to(src)
    else:
        x = torch.cat([torch.randn(10000, generator=g) * 100,
                       torch.tensor([0.0, -0.0, float("inf"), float("nan")])])
        if not dst.is_floating_point:
            x = x[torch.isfinite(x)]
        x = x.to(src)
    y = run1(convert(tuple(x.shape), src, dst), x)
    ref = x.to(dst)
    if dst.is_floating_point:
        nan = torch.isnan(ref)
        assert torch.equal(torch.isnan(y), nan)
        assert torch.equal(y[~nan], ref[~nan])
        assert torch.equal(torch.signbit(y[~nan]), torch.signbit(ref[~nan]))
    else:
        assert torch.equal(y, ref)


def _chain(shape, dtype, via_f32):
    """x -> (f32) -> tanh(x * 2 + 1) * exp(x) -> dtype"""
    t, c = ttype(shape, dtype), ttype(shape, torch.float32 if via_f32 else dtype)
    body = ['%c2 = arith.constant 2.0 : f64', '%c1 = arith.constant 1.0 : f64']
    x = "%a0"
    if via_f32:
        body.append(f'%x = "thunder.convert_element_type"(%a0) {{dtype = f32}} : ({t}) -> {c}')
        x = "%x"
    body += [f'%0 = "thunder.mul"({x}, %c2) : ({c}, f64) -> {c}',
             f'%1 = "thunder.add"(%0, %c1) : ({c}, f64) -> {c}',
             f'%2 = "thunder.tanh"(%1) : ({c}) -> {c}',
             f'%3 = "thunder.exp"({x}) : ({c}) -> {c}',
             f'%4 = "thunder.mul"(%2, %3) : ({c}, {c}) -> {c}']
    if via_f32:
        body.append(f'%5 = "thunder.convert_element_type"(%4) {{dtype = {MLIR[dtype]}}} : ({c}) -> {t}')
    return region([(shape, dtype)], body, ("%5" if via_f32 else "%4", shape, dtype))


@pytest.mark.parametrize("dtype", LOW)
def test_low_in_out_computed_in_f32(dtype):
    """f16/bf16 in, convert to f32, mul/add/tanh/exp, convert back: as eager torch doing the same
    (at most one f16/bf16 ulp apart, from the f32 exp/tanh differing in the last bits)."""
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(257, 129, generator=g) * 3).to(dtype)
    x[0, :6] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-40]).to(dtype)
    y = run1(_chain(tuple(x.shape), dtype, True), x)
    xf = x.float()
    ref = (torch.tanh(xf * 2 + 1) * torch.exp(xf)).to(dtype)
    assert y.dtype == dtype
    torch.testing.assert_close(y, ref, equal_nan=True)
    assert (y != ref)[~torch.isnan(ref)].float().mean() < 0.01


@pytest.mark.parametrize("dtype", LOW)
def test_low_ops_round_after_each_op(dtype):
    """Prims straight on f16 tensors round every result to the type, as eager torch (bf16: once,
    at the end of the chain, as inductor): the arith ops exactly (their f32 results rounded once are the correctly rounded f16/bf16 ones),
    including denormal results; math ops at torch's tolerance for the type."""
    g = torch.Generator().manual_seed(4)
    shape = (64, 130)
    a, b = (torch.randn(*shape, generator=g) * 3).to(dtype), (torch.randn(*shape, generator=g) * 3).to(dtype)
    tiny = 1e-38 if dtype == torch.bfloat16 else 1e-5  # products below are denormal
    a[0, :64] = torch.rand(64, generator=g).to(dtype) * tiny
    b[0, :64] = torch.rand(64, generator=g).to(dtype) * 0.01
    t = ttype(shape, dtype)
    body = [f'%0 = "thunder.mul"(%a0, %a1) : ({t}, {t}) -> {t}',
            f'%1 = "thunder.add"(%0, %a0) : ({t}, {t}) -> {t}',
            f'%2 = "thunder.abs"(%a1) : ({t}) -> {t}',
            '%c1 = arith.constant 1.0 : f64',
            f'%3 = "thunder.add"(%2, %c1) : ({t}, f64) -> {t}',
            f'%4 = "thunder.div"(%1, %3) : ({t}, {t}) -> {t}',
            f'%5 = "thunder.maximum"(%a0, %a1) : ({t}, {t}) -> {t}',
            f'%6 = "thunder.sub"(%4, %5) : ({t}, {t}) -> {t}',
            f'%7 = "thunder.mul"(%a0, %a1) : ({t}, {t}) -> {t}']
    # bf16: the chain's intermediates stay f32, rounded once at the end (bf16_intermediates.py)
    a32, b32 = (a, b) if dtype == torch.float16 else (a.float(), b.float())
    for loops in ("loops", "affine-vector"):
        y, = compile_region(region([(shape, dtype)] * 2, body, ("%6", shape, dtype)), "f", loops=loops)(a, b)
        assert torch.equal(y, ((a32 * b32 + a32) / (b32.abs() + 1) - torch.maximum(a32, b32)).to(dtype)), loops
    y, = compile_region(region([(shape, dtype)] * 2, body, ("%7", shape, dtype)), "f")(a, b)
    assert torch.equal(y, a * b) and (y[0, :64] != 0).any()
    for op in ["exp", "tanh", "erf", "log", "log1p", "expm1", "sqrt", "sin"]:
        x = a.abs() if op in ("log", "log1p", "sqrt") else a
        y = run1(unary(op, x.numel(), dtype), x.flatten())
        torch.testing.assert_close(y, getattr(torch, op)(x.flatten()), msg=lambda m: f"{op}: {m}")


@pytest.mark.parametrize("dtype", LOW)
def test_low_sum_computed_in_f32(dtype):
    """sum over a f16/bf16 tensor converted to f32 (torch accumulates in f32), result f32 and
    converted back."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(37, 1000, generator=g).to(dtype)
    t, c = ttype(x.shape, dtype), ttype(x.shape, torch.float32)
    r32, rlow = ttype((37,), torch.float32), ttype((37,), dtype)
    body = [f'%x = "thunder.convert_element_type"(%a0) {{dtype = f32}} : ({t}) -> {c}',
            f'%0 = "thunder.sum"(%x) {{dims = array<i64: 1>}} : ({c}) -> {r32}',
            f'%1 = "thunder.convert_element_type"(%0) {{dtype = {MLIR[dtype]}}} : ({r32}) -> {rlow}']
    y = run1(region([(x.shape, dtype)], body, ("%0", (37,), torch.float32)), x)
    torch.testing.assert_close(y, x.float().sum(1), atol=1e-4, rtol=1e-5)
    y = run1(region([(x.shape, dtype)], body, ("%1", (37,), dtype)), x)
    torch.testing.assert_close(y, x.float().sum(1).to(dtype))
