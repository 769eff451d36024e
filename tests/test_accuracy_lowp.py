"""Every elementwise op is as accurate in thunder's kernels as in eager: against float64, the
largest error (in ulps of the result's dtype) of the compiled result is no larger than eager's,
for float16, bfloat16 and float32, in the CPU kernels (fusion="always") and in the CUDA kernels'
scalar code (interpreted on the CPU, lowering/gpu/emulate.py).

The ops are every elementwise ltorch op of the registry (`OpDef.elementwise`), called with
tensors for their tensor operands, with a number for each operand that may be one (torch
computes with it in float32 for float16/bfloat16 where it is the second operand), and with the
keyword variants in EXTRA. The ops that run as torch calls (sin, atan2, ...) pass trivially.
float16/bfloat16: the unary ops see every value of the type; binary ones pairs of them (random
and nearly equal ones). float32: random bit patterns (every exponent, infinities, NaNs,
denormals) and dense values in [-20, 20]. A few programs per dtype and path compute all ops
(each a few kernels); the float64 references and eager's errors serve both paths."""
import functools
import importlib.util
import math

import pytest
import torch

import thunder
from thunder.ops import registry

NUMBER = 0.1  # a number no float type holds exactly
# keyword variants of ops beyond their defaults ("T": a tensor)
EXTRA = {
    "div": [{"rounding_mode": "trunc"}, {"rounding_mode": "floor"}],
    "gelu": [{"approximate": "tanh"}], "gelu_backward": [{"approximate": "tanh"}],
    "round": [{"decimals": 2}, {"decimals": -1}],
    "threshold": [{"threshold": 0.5, "value": -1.0}],
    "add": [{"alpha": 0.3}], "sub": [{"alpha": 0.3}], "rsub": [{"alpha": 0.3}],
    "clamp": [{"min": -0.5}, {"max": 0.7}, {"min": -0.5, "max": 0.7}, {"min": "T"}, {"min": "T", "max": "T"}],
    "softplus": [{"beta": 2.0, "threshold": 5.0}], "leaky_relu": [{"negative_slope": 0.3}],
    "elu": [{"alpha": 0.7}], "celu": [{"alpha": 0.7}], "hardtanh": [{"min_val": -0.3, "max_val": 0.6}],
    "threshold_backward": [{"threshold": 0.5}], "leaky_relu_backward": [{"negative_slope": 0.3, "self_is_result": False}],
    "hardtanh_backward": [{"min_val": -0.3, "max_val": 0.6}],
}
# the numbers tried for a number operand (pow: the exponents with a kernel of their own)
NUMBERS = {"pow": [2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.0, 2, 3], "lerp": [0.1, 0.7]}
# (precision in bits, smallest normal exponent)
FORMATS = {torch.float16: (11, -14), torch.bfloat16: (8, -126), torch.float32: (24, -126)}
DTYPES = list(FORMATS)


def _operands(op):
    return [p for p in op.params if p.kind.base_name in ("Tensor", "TensorOrNumber") and not p.has_default]


def _call(op, kw, number_at=None, number=None):
    """(label, number of tensors it takes, fn(*tensors)): op called with tensors for its operands
    (the condition of `where`: the first tensor > 0), number in place of operand number_at."""
    f = op.aliases[0]
    names = [p.name for p in _operands(op) if p.name not in kw]
    tensor_kw = [k for k, v in kw.items() if v == "T"]
    label = op.name + "".join(f" {k}={v}" for k, v in kw.items())
    if number_at is not None:
        label += f" {names[number_at]}={number!r}"
    n = len(names) + len(tensor_kw) - (number_at is not None)

    def fn(*xs):
        k = len(names) - (number_at is not None)
        args = list(xs[:k])
        if number_at is not None:
            args.insert(number_at, number)
        if op.name == "where":
            args[0] = xs[0] > 0
        if op.name == "hardtanh_backward":  # (eager's vectorized loop gives 0 at a NaN input, its scalar tail
            args[1] = torch.nan_to_num(args[1], nan=0.0)  # the gradient: no answer to match there)
        extra = {k: v for k, v in kw.items() if v != "T"}
        extra.update(zip(tensor_kw, xs[k:]))
        return f(*args, **extra)
    return label, n, fn


def cases():
    out = []
    for op in registry.OPS.values():
        if op.dialect != "ltorch" or not op.elementwise:
            continue
        operands = _operands(op)
        required = [p for p in op.params if not p.has_default and p not in operands]
        for kw in ([{}] if not required else []) + EXTRA.get(op.name, []):
            out.append(_call(op, kw))
            names = [p for p in operands if p.name not in kw]
            for i, p in enumerate(names):
                if p.kind.base_name == "TensorOrNumber" and i > 0:
                    for number in NUMBERS.get(op.name, [NUMBER]):
                        out.append(_call(op, kw, i, number))
    return out


CASES = cases()


def test_cases_cover_the_elementwise_ops():
    """Every elementwise op of the registry has a case (a new op with a required parameter that
    is neither a tensor nor a number needs an EXTRA entry)."""
    ops = {op.name for op in registry.OPS.values() if op.dialect == "ltorch" and op.elementwise}
    assert ops == {label.split(" ")[0] for label, _, _ in CASES}
    assert {"rsqrt", "exp", "gelu", "maximum", "clamp", "div", "lerp", "add"} <= ops


@functools.lru_cache
def inputs(dtype, n):
    g = torch.Generator().manual_seed(0)
    if dtype in (torch.float16, torch.bfloat16):
        x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)  # every value
    else:
        size = 1 << 15
        bits = torch.randint(-2 ** 31, 2 ** 31 - 1, (size,), generator=g, dtype=torch.int64)
        dense = torch.rand(size, generator=g, dtype=torch.float64) * 40 - 20
        x = torch.cat([bits.to(torch.int32).view(torch.float32), dense.float()])
    xs = [x]
    for _ in range(1, n):  # random pairs, and nearly equal pairs (cancellation, ties of maximum)
        other = x[torch.randperm(x.numel(), generator=g)]
        near = (x * (1 + (torch.rand(x.numel(), generator=g) - 0.5) * 0.01)).to(dtype)
        xs.append(torch.where(torch.arange(x.numel()) % 2 == 0, other, near))
    return tuple(xs)


class References:
    """The float64 references of a program's results on dtype: the float ones stacked, with what
    their errors read (each rounded to dtype, the exponent of its ulp), the others as they are."""

    def __init__(self, ref, dtype):
        p, emin = FORMATS[dtype]
        self.floats = [i for i, r in enumerate(ref) if r.dtype.is_floating_point]
        self.others = {i: r for i, r in enumerate(ref) if i not in self.floats}
        self.ref = torch.stack([ref[i] for i in self.floats])
        self.near = self.ref.to(dtype)
        _, e = torch.frexp(self.ref.abs().clamp_min(2.0 ** emin))  # |ref| in [2^(e-1), 2^e)
        self.shift = p - e  # 1 / ulp = 2^(p-e)

    def max_errors(self, results):
        """The largest error of each result (bool results: the count of mismatches); a float
        result's: |r - ref| in ulps of dtype at ref; where r or ref rounded to dtype is not
        finite, 0 if they agree (the same infinity, both NaN), else inf."""
        out = {i: 0 if torch.equal(results[i], ref) else (results[i] != ref).sum().item()
               for i, ref in self.others.items()}
        if self.floats:
            r, near = torch.stack([results[i] for i in self.floats]).double(), self.near.double()
            err = torch.ldexp((r - self.ref).abs(), self.shift)
            same = (r == near) | (r.isnan() & near.isnan())
            err = torch.where(r.isfinite() & near.isfinite(), err, torch.where(same, 0.0, math.inf))
            out.update(zip(self.floats, err.nan_to_num(math.inf).amax(1).tolist()))
        return [out[i] for i in range(len(results))]


def _runs(case, dtype):
    _, n, fn = case
    small = [x[:64] for x in inputs(dtype, n)]
    try:
        fn(*small)
        fn(*(x.double() for x in small))
    except Exception:  # eager refuses the dtype (bitwise ops of floats)
        return False
    return True


def _program(cases):
    def program(*xs):
        xs = [x * 1 for x in xs]  # (exact) one value all ops read: one region, a few kernels
        return tuple(fn(*xs[:n]) for _, n, fn in cases)
    return program


@functools.lru_cache(maxsize=1)  # (the tests run by dtype, the kernel paths inside)
def _eager(dtype):
    """(the cases eager runs on dtype, the float64 references, eager's largest errors), computed
    by one program taking the inputs of the cases of most operands (the others read the first)."""
    cases = [c for c in CASES if _runs(c, dtype)]
    program = _program(cases)
    xs = inputs(dtype, max(n for _, n, _ in cases))
    refs = References(program(*(x.double() for x in xs)), dtype)
    eager = program(*xs)
    return cases, refs, [(e.dtype, e.shape) for e in eager], refs.max_errors(eager)


CHUNK = 40  # cases per compiled program (LLVM's time grows faster than a kernel's size)


def _less_accurate(executor, dtype):
    """[(case, ours, eager's)] where thunder's largest error is larger than eager's."""
    cases, refs, metas, eager_errors = _eager(dtype)
    got = []
    for i in range(0, len(cases), CHUNK):
        chunk = cases[i:i + CHUNK]
        jf = thunder.jit(_program(chunk), executors=[executor, "torch"], fusion="always")
        got += jf(*inputs(dtype, max(n for _, n, _ in cases)))
        program_text = str(thunder.last_traces(jf)[-1])
        assert "fusion_0(" in program_text, program_text[:3000]
        unfused = [label for label, _, _ in chunk if label.split(" ")[0] in WIDENED and
                   f"{registry.OPS['ltorch.' + label.split(' ')[0]].torch_name}(" in program_text]
        assert unfused == [], f"run as torch calls: {unfused}"
    for (label, _, _), g, (dtype_, shape) in zip(cases, got, metas):
        assert g.dtype == dtype_ and g.shape == shape, label
    return [(label, ours, theirs) for (label, _, _), ours, theirs in
            zip(cases, refs.max_errors(got), eager_errors) if ours > theirs]


# composites eager computes op by op in float32, each op rounded (F.softplus's log1p(exp(x)),
# F.elu's expm1(x) * alpha, F.mish in float32 for float16): their decompositions compute in
# float64 and round once (ops/decomp_utils.widened); they must run in the kernels, not as torch
# calls (they exceeded eager's error by 0.035, 3e-4 and 4e-6 ulps while computed in float32)
WIDENED = ("softplus", "elu", "celu", "selu", "mish")


@pytest.mark.parametrize("path", ["linalg", "cuda-emulated"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kernels_as_accurate_as_eager(dtype, path, request):
    """path: the CPU kernels, or the CUDA kernels' scalar code interpreted on the CPU."""
    if path == "cuda-emulated":
        if importlib.util.find_spec("llvmlite") is None:
            pytest.skip("llvmlite (the cuda extra) is not installed")
        path = request.getfixturevalue("emulated_cuda_executor")
    worse = _less_accurate(path, dtype)
    assert worse == [], f"less accurate than eager (case, ours, eager's, in ulps): {worse}"


# ---- regression tests (issue 28): one rounding per op where eager rounds once
LOW = (torch.float16, torch.bfloat16)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_rsqrt_is_rounded_once(dtype):
    """rsqrt in f32 rounded once (not a square root and a reciprocal each rounded): the
    correctly rounded result for every value of the type (eager's too, but for float16's
    largest values, where its vectorized rsqrt is 1 ulp off)."""
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    x = x[(x > 0) & torch.isfinite(x)]
    assert torch.equal(thunder.jit(torch.rsqrt, fusion="always")(x), torch.rsqrt(x.double()).to(dtype))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_maximum_of_gelu_of_rsqrt_and_its_gradients(dtype):
    """y ties with gelu(rsqrt(x)) everywhere: the kernel's forward must equal eager's exactly
    for maximum to pick the same sides (a tie splits the gradient); the gradients then differ
    at most by rounding (they differed by 0.5 and more where a side flipped)."""
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(192, 192, generator=g) * 4 + 0.01).to(dtype).requires_grad_()
    with torch.no_grad():
        y = torch.nn.functional.gelu(torch.rsqrt(x)).requires_grad_()

    def fn(x, y):
        return torch.maximum(torch.nn.functional.gelu(torch.rsqrt(x)), y)

    ct = torch.linspace(-1, 1, x.numel()).reshape(x.shape).to(dtype)
    results = []
    for f in (fn, thunder.jit(fn, fusion="always")):
        out = f(x, y)
        results.append((out, *torch.autograd.grad(out, (x, y), ct)))
    (eo, egx, egy), (out, gx, gy) = results
    assert torch.equal(out, eo) and torch.equal(gy, egy)
    if dtype is torch.float16:
        torch.testing.assert_close(gx, egx, rtol=2 ** -FORMATS[dtype][0] * 2, atol=0)
    else:  # bf16 kernels keep intermediates in f32 (bf16_intermediates.py): closer to exact than eager
        x64 = x.detach().double().requires_grad_()
        exact, = torch.autograd.grad(torch.nn.functional.gelu(torch.rsqrt(x64)), x64, ct.double() / 2)  # (ties)
        scale = exact.abs().clamp_min(1e-30)
        assert ((gx.double() - exact).abs() / scale).max() <= ((egx.double() - exact).abs() / scale).max()


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_truncating_divisions_equal_eager(dtype):
    """Truncation is discontinuous: a quotient rounded differently from eager's truncates to
    another integer (by a tensor torch rounds the quotient to the dtype first; by a number it
    truncates the float32 quotient)."""
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(192, 192, generator=g) * 4 + 0.01).to(dtype)
    y = (torch.rand(192, 192, generator=g) + 0.5).to(dtype)

    def fn(x, y):
        q = torch.div(torch.rsqrt(x) * 1000, y, rounding_mode="trunc")
        return q, torch.div(torch.rsqrt(x), 0.01, rounding_mode="trunc"), torch.div(q, 7, rounding_mode="trunc")

    for got, expected in zip(thunder.jit(fn, fusion="always")(x, y), fn(x, y)):
        assert torch.equal(got, expected)
