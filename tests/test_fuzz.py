"""A differential fuzzer: random programs run through thunder.jit must match eager PyTorch.

Each example is a small Python function written as source text: 1-8 steps of elementwise ops
(with tensors and Python numbers), reductions, shape ops, indexing and in-place updates (of
intermediates, of views of them and of inputs), over 1-3 inputs of a random shape (0-d, empty
and size-1 dims included), broadcast against each other, some of them non-contiguous
(transposed, strided, expanded), in float32, float16, bfloat16, int64, bool or complex64, some float and complex
ones requiring grad. It runs eagerly and through thunder.jit with the default options and with
fusion="always" (every claimable region a compiled kernel). Results (values, dtypes, shapes),
mutated inputs and gradients (of the leaves, by torch.autograd.grad) must match; where eager
raises, thunder.jit must raise the same exception type.

The search is derandomized (the same examples in every run, so CI is reproducible), with
THUNDER_FUZZ_EXAMPLES examples (default 1500, about two minutes on a 2-core CI machine). For a larger
run during development, raise it and let hypothesis choose new examples (THUNDER_FUZZ_DTYPES
restricts the inputs' dtypes, e.g. to float16,bfloat16 or complex64,float32):

    THUNDER_FUZZ_EXAMPLES=2000 THUNDER_FUZZ_SEED=random .venv/bin/python -m pytest tests/test_fuzz.py

A failure prints the program and its inputs; each bug it found has a focused
regression test beside the code it fixed (docs/testing.md)."""
import os

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, note, settings
from hypothesis.control import currently_in_test_context
from hypothesis import strategies as st

import thunder

EXAMPLES = int(os.environ.get("THUNDER_FUZZ_EXAMPLES", "1500"))
RANDOM = os.environ.get("THUNDER_FUZZ_SEED") == "random"

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool, torch.complex64]
# THUNDER_FUZZ_DTYPES=float16,bfloat16: the inputs' dtypes drawn from these only
if os.environ.get("THUNDER_FUZZ_DTYPES"):
    DTYPES = [getattr(torch, d) for d in os.environ["THUNDER_FUZZ_DTYPES"].split(",")]
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
# numbers the programs combine tensors with (0 for divisions by zero, negatives for pow/sqrt)
NUMBERS = ["2", "0.5", "-1", "0", "3", "-2.5", "True"]

UNARY = ["torch.neg({})", "torch.abs({})", "torch.exp({})", "torch.log({})", "torch.sqrt({})",
         "torch.tanh({})", "torch.sigmoid({})", "torch.relu({})", "torch.sin({})", "torch.floor({})",
         "torch.rsqrt({})", "torch.reciprocal({})", "torch.erf({})", "torch.expm1({})", "torch.log1p({})",
         "torch.sign({})", "F.gelu({})", "F.gelu({}, approximate='tanh')", "F.silu({})", "F.softplus({})",
         "F.leaky_relu({}, 0.1)", "F.hardtanh({})", "{}.float()", "{}.half()", "{}.to(torch.bfloat16)",
         "{}.long()", "{}.bool()", "~{}", "torch.isnan({})", "{}.clamp(-0.5, 1)", "{} ** 2", "{} ** 0.5",
         "torch.logical_not({})"]
BINARY = ["{} + {}", "{} - {}", "{} * {}", "{} / {}", "torch.maximum({}, {})", "torch.minimum({}, {})",
          "torch.pow({}, {})", "torch.atan2({}, {})", "torch.remainder({}, {})", "{} == {}", "{} < {}",
          "torch.add({}, {}, alpha=2)", "{} // {}", "{} & {}", "torch.div({}, {}, rounding_mode='trunc')",
          "torch.div({}, {}, rounding_mode='floor')", "torch.clamp({}, min={})", "torch.sub({}, {}, alpha=0.3)"]
REDUCTIONS = ["{x}.sum({d})", "{x}.sum({d}, keepdim=True)", "{x}.mean({d})", "{x}.amax({d})", "{x}.amin({d})",
              "{x}.prod({d})", "{x}.var({d})", "{x}.std({d}, keepdim=True)", "torch.softmax({x}, {d})",
              "torch.log_softmax({x}, {d})", "{x}.max({d})[0]", "{x}.argmax({d})", "{x}.sum()", "{x}.prod()",
              "{x}.amax()", "{x}.max()", "{x}.any({d})"]
SHAPES = ["{x}.reshape(-1)", "{x}.transpose(0, -1)", "{x}.unsqueeze({d})", "{x}.squeeze()", "{x}.flatten()",
          "{x}.permute(*reversed(range({x}.ndim)))", "torch.cat([{x}, {x}], {d})", "{x}.contiguous()",
          "{x}.t()", "{x}.narrow({d}, 0, 1)", "torch.stack([{x}, {x}], {d})", "{x}.expand(2, *{x}.shape)",
          "{x}.mT"]
# Not generated: x.view(shape) of a tensor whose strides allow no such view (non-contiguous
# inputs, transposes): eager raises RuntimeError, thunder.jit returns reshape's result, since
# traces do not model strides (reported as open; views of contiguous clones are generated below).
INDEXING = ["{x}[0]", "{x}[..., 1:]", "{x}[:, ::2]", "{x}[-1, ...]", "{x}[None]", "{x}[..., None, :1]",
            "{x}.masked_fill({x} > 0, 0.5)", "torch.where({x} > 0, {x}, {y})",
            "{x}.index_select({d}, torch.full((2,), {i}))",
            "{x}.gather({d}, torch.zeros_like({x}, dtype=torch.int64))"]
# Not generated: advanced indexing with lists or tensors (x[[0, -1]], x[mask]): thunder.jit raises
# NotImplementedError naming index_select/gather as the workaround (reported as open).
# in-place steps: on a clone (an intermediate), on a view of a clone, on an input
INPLACE = ["{v} = {x}.clone(); {v}.mul_({y})", "{v} = {x}.clone(); {v}.add_({y})",
           "{v} = {x}.clone(); {v}[0] = {y}", "{v} = {x}.contiguous().clone(); {v}.view(-1)[:1].zero_()",
           "{v} = {x}.clone(); {v}.t().clamp_(min=0)", "{x}.add_(1); {v} = {x} * 1",
           "{v} = {x}.clone(); {v} += {y}"]


def make_input(spec, seed, compute_dtype=None):
    """The tensor an input spec stands for (deterministic), and the leaf that gets its gradient;
    compute_dtype: the same values converted to it (a reference computed more precisely)."""
    shape, dtype, layout, requires_grad, specials = spec
    g = torch.Generator().manual_seed(seed)
    base_shape = list(shape)
    if layout == "transposed":
        base_shape[-2:] = base_shape[-2:][::-1]
    elif layout == "strided":
        base_shape[-1] *= 2
    elif layout == "expanded":
        base_shape[0] = 1
    if dtype.is_complex:  # (only where THUNDER_FUZZ_DTYPES names one)
        base = torch.randn(base_shape, dtype=dtype, generator=g)
    elif dtype in FLOATS:
        base = torch.randn(base_shape, generator=g)
        if specials and base.numel():  # zeros, infinities and NaNs at random places
            pick = torch.randint(0, 6, base_shape, generator=g)
            base = base.masked_fill(pick == 0, 0.0).masked_fill(pick == 1, float("inf")).masked_fill(
                pick == 2, float("nan"))
        base = base.to(dtype).to(compute_dtype or dtype)
    elif dtype is torch.bool:
        base = torch.randint(0, 2, base_shape, generator=g).bool()
    else:
        base = torch.randint(-3, 4, base_shape, generator=g)
    leaf = base.requires_grad_() if requires_grad else base
    if layout == "transposed":
        return leaf.transpose(-1, -2), leaf
    if layout == "strided":
        return leaf[..., ::2], leaf
    if layout == "expanded":
        return leaf.expand(shape), leaf
    return leaf, leaf


@st.composite
def input_specs(draw):
    rank = draw(st.integers(0, 3))
    # sizes 1-4, 0 now and then (an empty tensor), 67 or 130 rarely (kernels that loop over
    # several tiles of rows, with a remainder, and split rows over threads)
    shape = [draw(st.integers(0, 19).map(lambda i: 0 if i == 0 else 67 if i == 18 else 130 if i == 19 else 1 + i % 4))
             for _ in range(rank)]
    dtype = draw(st.sampled_from(DTYPES))
    specs = []
    for i in range(draw(st.integers(1, 3))):
        s = list(shape)
        if i and s and draw(st.booleans()):  # broadcast against the first: fewer dims, or size-1 dims
            s = s[draw(st.integers(0, len(s))):]
            s = [1 if draw(st.booleans()) else n for n in s]
        d = dtype if draw(st.integers(0, 3)) else draw(st.sampled_from(DTYPES))  # mixed dtypes: promotion
        layouts = ["contiguous"] + (["strided", "expanded"] if s else []) + (["transposed"] if len(s) > 1 else [])
        layout = draw(st.sampled_from(layouts))
        requires_grad = (d in FLOATS or d.is_complex) and draw(st.booleans())
        specials = d in FLOATS and draw(st.integers(0, 4)) == 0
        specs.append((tuple(s), d, layout, requires_grad, specials))
    return specs


def _eval(lines, env):
    ns = dict(env)
    exec("\n".join(lines), {"torch": torch, "F": F}, ns)
    return ns


@st.composite
def programs(draw):
    """(source of `def f(x0, ...)`, input specs, seeds of their values). Steps are checked eagerly
    while drawing (on the same input values), so most steps are valid; a step eager rejects ends
    the program and is its result (then thunder.jit must raise the same exception)."""
    specs = draw(input_specs())
    seeds = [draw(st.integers(0, 1 << 16)) for _ in specs]
    inputs = {f"x{i}": make_input(s, seed)[0].detach() for i, (s, seed) in enumerate(zip(specs, seeds))}
    env = dict(inputs)
    names = list(inputs)
    updatable = {n for n, s in zip(inputs, specs) if not s[3]}  # inputs no gradient is asked of
    lines, raised = [], False
    for step in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduction", "shape", "indexing", "inplace"]))
        x = draw(st.sampled_from(names))
        t = env[x]
        v = f"v{step}"
        d = draw(st.integers(-max(t.ndim, 1), max(t.ndim, 1) - 1))
        if draw(st.integers(0, 2)):  # an operand that broadcasts with x, else a number
            fits = [n for n in names if _broadcasts(env[n], t)]
            y = draw(st.sampled_from(fits)) if fits else draw(st.sampled_from(NUMBERS))
        else:
            y = draw(st.sampled_from(NUMBERS))
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            if op == "F.gelu({})" and t.is_floating_point() and t.isinf().any():
                op = "torch.tanh({})"  # eager's vectorized gelu gives NaN for +-inf (its scalar path
                # and float64 give +-inf and 0, as thunder's kernels do)
            line = f"{v} = " + op.format(x)
        elif kind == "binary":
            a, b = (x, y) if draw(st.integers(0, 3)) else (y, x)
            line = f"{v} = " + draw(st.sampled_from(BINARY)).format(a, b)
        elif kind == "reduction":
            line = f"{v} = " + draw(st.sampled_from(REDUCTIONS)).format(x=x, d=d)
        elif kind == "shape":
            line = f"{v} = " + draw(st.sampled_from(SHAPES)).format(x=x, d=d)
        elif kind == "indexing":
            n = t.shape[d] if t.ndim else 1
            i = draw(st.integers(-n, max(n - 1, 0)))
            line = f"{v} = " + draw(st.sampled_from(INDEXING)).format(x=x, d=d, y=y, i=i)
        else:
            template = draw(st.sampled_from(INPLACE))
            if template.startswith("{x}.add_") and x not in updatable:
                template = INPLACE[0]  # in place on an input only (eager refuses it on a leaf needing grad)
            line = template.format(v=v, x=x, y=y)
        lines.append(line)
        names.append(v)
        try:
            env = _eval([line], env)
        except Exception:
            raised = True  # the program returns this step's result: a dead step could be dropped
            break
    outs = [names[-1]] if raised else [names[-1]] + ([draw(st.sampled_from(names))] if draw(st.booleans()) else [])
    src = [f"def f({', '.join(inputs)}):"] + [f"    {s}" for s in lines] + [f"    return {', '.join(outs)}"]
    return "\n".join(src), specs, seeds


def _broadcasts(a, b):
    try:
        torch.broadcast_shapes(a.shape, b.shape)
        return True
    except RuntimeError:
        return False


def _tolerance(dtypes):
    """(rtol, atol) for a program computing in these dtypes: chains of up to eight ops, each rounded
    (float16/bfloat16, also where a float32 result went through them) or approximated (the
    kernels' exp/tanh/erf polynomials) in its own way."""
    if torch.bfloat16 in dtypes:
        return 5e-2, 5e-2
    if torch.float16 in dtypes:
        return 1e-2, 1e-2
    return 1e-4, 1e-5


def _compare(actual, expected, what, tol):
    assert type(actual) is type(expected), f"{what}: {type(actual)} != {type(expected)}"
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), what
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, f"{what}[{i}]", tol)
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected, what
        return
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, \
        f"{what}: {actual.dtype}{tuple(actual.shape)} != {expected.dtype}{tuple(expected.shape)}"
    rtol, atol = tol
    torch.testing.assert_close(actual.detach(), expected.detach(), rtol=rtol, atol=atol, equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


def _run(fn, specs, seeds, compute_dtype=None):
    """(result or the exception the call raised, the inputs after the call, gradients of the
    leaves or the exception backward raised)."""
    pairs = [make_input(s, seed, compute_dtype) for s, seed in zip(specs, seeds)]
    args = [a for a, _ in pairs]
    leaves = [leaf for _, leaf in pairs if leaf.requires_grad]
    try:
        out = fn(*args)
    except Exception as e:  # compared by type with eager's
        return e, None, None
    outs = out if isinstance(out, tuple) else (out,)
    diff = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    grads = None
    if leaves and diff:
        cotangents = [torch.linspace(-1, 1, o.numel()).reshape(o.shape).to(o.dtype) for o in diff]
        try:
            grads = torch.autograd.grad(diff, leaves, cotangents, allow_unused=True)
        except Exception as e:
            grads = e
    return out, [a.detach() for a in args], grads


def _eager_gap(expected, got, specs):
    """Where eager's answer is a gap of eager's rather than a rule thunder should follow."""
    # eager checks dtypes inside its kernels, which do not run on empty tensors (log_softmax of
    # an empty int64 tensor passes); thunder checks them while tracing
    if isinstance(got, NotImplementedError) and "not implemented for" in str(got) and \
            any(0 in s[0] for s in specs):
        return True
    # eager's backward cannot run: no derivative for some ops (floor_divide, a number % tensor),
    # formulas that fail for a bool operand beside a float one (atan2's negates it), a value saved
    # for backward and then updated in place (thunder's traces are functional: the gradient uses
    # the value as it was read); thunder's gradient has nothing to be compared with
    msg = str(expected)
    return isinstance(expected, RuntimeError) and (
        ("derivative for" in msg and "is not implemented" in msg) or "on a bool tensor is not supported" in msg
        or "with a bool tensor is not supported" in msg or "modified by an inplace operation" in msg
        # (a real input's gradient from a complex result of where(): eager's backward asserts the
        # two are alike, thunder gives the real part, as torch's other ops do)
        or "input_is_complex == grad_is_complex" in msg)


def _variants():
    return [("default", {}), ("fusion=always", {"fusion": "always"})]


def _close(actual, expected, tol):
    """Elementwise: actual within tol of expected (nan where expected is nan)."""
    rtol, atol = tol
    a, e = actual.detach().double(), expected.detach().double()
    return ((a - e).abs() <= atol + rtol * e.abs()) | (a == e) | (a.isnan() & e.isnan())


def _compare_results(actual, expected, what, tol, also=()):
    """_compare; with `also` (other acceptable results, as nested as expected): an element of a
    tensor differing from expected's passes where it is within tol of the same element of one of
    them."""
    if not also or not isinstance(expected, (torch.Tensor, tuple, list)):
        return _compare(actual, expected, what, tol)
    if isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected), what
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare_results(a, e, f"{what}[{i}]", tol, [x[i] for x in also])
        return
    assert isinstance(actual, torch.Tensor) and actual.dtype == expected.dtype and actual.shape == expected.shape, what
    ok = _close(actual, expected, tol)
    for x in also:
        ok |= _close(actual, x, tol)
    if not bool(ok.all()):
        _compare(actual[~ok], expected[~ok], what, tol)  # (its message names the elements)


def check_program(src, specs, seeds, tol=None, grad_tol=None, references=None):
    """tol: (rtol, atol) of the results, else _tolerance's for the program's dtypes; grad_tol:
    the gradients' (atol relative to the largest entry of each), else tol; references(fn, specs,
    seeds): (results, gradients) other than eager's that thunder's may equal instead (element by
    element)."""
    if currently_in_test_context():  # (a hypothesis example: printed where it fails)
        note(src)
        note(f"inputs: {specs}")
    ns = {}
    exec(src, {"torch": torch, "F": F}, ns)
    fn = ns["f"]
    expected, expected_inputs, expected_grads = _run(fn, specs, seeds)
    also, grads_also = (), ()
    if references is not None and not isinstance(expected, Exception):
        also, grads_also = references(fn, specs, seeds)
    low = [d for d in (torch.float16, torch.bfloat16)
           if any(s[1] is d for s in specs) or str(d).removeprefix("torch.") in src or
           (d is torch.float16 and ".half()" in src)]
    tol = tol or _tolerance(low)
    grad_tol = grad_tol or tol
    for label, options in _variants():
        got, got_inputs, got_grads = _run(thunder.jit(fn, **options), specs, seeds)
        if isinstance(expected, Exception):
            if _eager_gap(expected, got, specs):
                continue
            assert isinstance(got, Exception), f"{label}: eager raised {expected!r}, thunder returned {got}"
            assert type(got) is type(expected), f"{label}: eager raised {expected!r}, thunder {got!r}"
            continue
        if isinstance(got, Exception):
            if _eager_gap(expected, got, specs):
                continue
            if type(got) is type(expected_grads):  # thunder builds the backward at the call
                continue
            raise AssertionError(f"{label}: thunder raised where eager did not") from got
        _compare_results(got, expected, f"{label} result", tol, also)
        _compare(got_inputs, expected_inputs, f"{label} inputs after the call", tol)
        if isinstance(expected_grads, Exception):
            if not _eager_gap(expected_grads, got_grads, specs):
                assert type(got_grads) is type(expected_grads), \
                    f"{label}: eager's backward raised {expected_grads!r}, thunder's gave {got_grads!r}"
        elif expected_grads is not None:
            assert isinstance(got_grads, tuple), f"{label}: no gradients ({got_grads!r})"
            for i, (g, e) in enumerate(zip(got_grads, expected_grads)):
                assert (g is None) == (e is None), f"{label} gradient {i}: {g} vs {e}"
                if e is not None:
                    # sums of cotangents cancel (a / a: g / a - g * (out / a)): their rounding is
                    # relative to the terms, about as large as the gradient's largest entries
                    scale = max(1.0, e.detach().abs().nan_to_num(0, 0, 0).max().item()) if e.numel() else 1.0
                    _compare_results(g, e, f"{label} gradient {i}", (grad_tol[0], grad_tol[1] * scale),
                                     [r[i] for r in grads_also if r[i] is not None])


@pytest.mark.filterwarnings("ignore::UserWarning")  # eager's own (var of one element, mT of 0-d, ...)
@settings(max_examples=EXAMPLES, derandomize=not RANDOM, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(programs())
def test_random_programs_match_eager(program):
    check_program(*program)


# ---- issue 28: float16/bfloat16 programs of rsqrt, maximum/minimum/clamp and rounding divisions.
# Each op computes in float32 and rounds once, as eager's do, so a fused chain equals eager's
# but for rounding (rsqrt correctly rounded, eager's up to 1 ulp off at float16's largest
# values); a second rounding or an approximation shows where a discontinuous op follows it
# (maximum picking the other side of a tie, a truncation giving the next integer).
LOWP_UNARY = ["torch.rsqrt({})", "torch.rsqrt({})", "{}.clamp(-0.5, 1)", "torch.clamp({}, min=0.25)",
              "torch.neg({})", "torch.abs({})", "torch.sqrt({})", "{} * 1000"]
LOWP_BINARY = ["torch.maximum({}, {})", "torch.minimum({}, {})", "torch.clamp({}, min={})",
               "torch.clamp({}, max={})", "torch.div({}, {}, rounding_mode='trunc')",
               "torch.div({}, {}, rounding_mode='floor')", "{} // {}", "{} * {}", "{} + {}", "{} - {}",
               "{} / {}", "torch.sub({}, {}, alpha=0.3)", "torch.add({}, {}, alpha=2)"]
LOWP_NUMBERS = ["2", "0.5", "-1", "0.01", "7", "-2.5"]
# one ulp (2^1-p) relative, and absolute at magnitude 1 (a tie of a sum broken another way,
# eager rounding a product first in its loops' scalar tails): the results' rounding
LOWP_ULP = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}


@st.composite
def lowp_programs(draw):
    """f(x0[, x1]) over float16 or bfloat16 tensors of 100-400 elements (some transposed or
    strided, some requiring grad): rsqrt of an input's magnitude, then 1-5 steps of LOWP_UNARY/LOWP_BINARY."""
    dtype = draw(st.sampled_from(list(LOWP_ULP)))
    shape = draw(st.sampled_from([(130,), (67, 3), (4, 33), (2, 3, 67)]))
    specs = []
    for _ in range(draw(st.integers(1, 2))):
        layout = draw(st.sampled_from(["contiguous", "strided"] + (["transposed"] if len(shape) > 1 else [])))
        specs.append((shape, dtype, layout, draw(st.booleans()), draw(st.integers(0, 4)) == 0))
    seeds = [draw(st.integers(0, 1 << 16)) for _ in specs]
    names = [f"x{i}" for i in range(len(specs))]
    lines = [f"v0 = torch.rsqrt({names[0]}.abs())"]
    names.append("v0")
    for step in range(1, draw(st.integers(2, 6))):
        x = draw(st.sampled_from(names[-3:]))
        if draw(st.booleans()):
            line = draw(st.sampled_from(LOWP_UNARY)).format(x)
        else:
            y = draw(st.sampled_from(names + LOWP_NUMBERS))
            a, b = (x, y) if draw(st.integers(0, 3)) else (y, x)
            line = draw(st.sampled_from(LOWP_BINARY)).format(a, b)
        lines.append(f"v{step} = {line}")
        names.append(f"v{step}")
    outs = [names[-1]] + ([names[-2]] if draw(st.booleans()) else [])
    args = names[:len(specs)]
    src = [f"def f({', '.join(args)}):"] + [f"    {s}" for s in lines] + [f"    return {', '.join(outs)}"]
    return "\n".join(src), specs, seeds


@pytest.mark.filterwarnings("ignore::UserWarning")
@settings(max_examples=int(os.environ.get("THUNDER_FUZZ_LOWP_EXAMPLES", "40")), derandomize=not RANDOM,
          deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(lowp_programs())
def test_low_precision_programs_with_discontinuous_ops_match_eager(program):
    check_lowp_program(*program)


def check_lowp_program(src, specs, seeds):
    ulp = LOWP_ULP[specs[0][1]]
    # gradients: eager's backward formulas round each step (rsqrt's -0.5 g r^3) and the sums of
    # a value's cotangents; a tie that maximum broke the other way differs by half the cotangent
    check_program(src, specs, seeds, tol=(ulp, ulp), grad_tol=(4 * ulp, 4 * ulp), references=_lowp_references)


class _RoundEachOp(torch.overrides.TorchFunctionMode):
    """Each torch call on float32 tensors rounds its float32 results to `dtype`, its Python float
    arguments too (as eager's kernels take a number operand and alpha: 0.3 is 0.300048828125 in
    float16): a program run so computes each op in float32 and rounds it once, as the
    low-precision ops are specified (a truncating division's quotient is float32's before it is
    truncated)."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def __torch_function__(self, func, types, args=(), kwargs=None):
        def rounded(v):
            return torch.tensor(v, dtype=self.dtype).item() if type(v) is float else v
        out = func(*map(rounded, args), **{k: rounded(v) for k, v in (kwargs or {}).items()})
        if isinstance(out, torch.Tensor) and out.dtype == torch.float32:
            return out.to(self.dtype).float()
        return out


def _lowp_references(fn, specs, seeds):
    """A low-precision program's results and gradients where eager's are not the only right
    ones: (1) each op computed in float32 and rounded once (eager's bfloat16 and float16 rsqrt
    are off by an ulp for a few values: 1.0078125 -> 1.0 where the rounded value is 0.99609375; a
    floor after it makes that a difference of 1); (2) computed in float32 throughout, rounded at the end,
    the gradients too (thunder's bfloat16 intermediates stay in float32 inside a kernel,
    docs/fusion.md; a gradient whose terms cancel, x / x's, is eager's rounding noise)."""
    dtype = specs[0][1]

    def rounded(value):
        if isinstance(value, (tuple, list)):
            return type(value)(rounded(v) for v in value)
        return value.detach().to(dtype) if isinstance(value, torch.Tensor) else value
    with torch.no_grad(), _RoundEachOp(dtype):
        exact = fn(*[make_input(s, seed, torch.float32)[0] for s, seed in zip(specs, seeds)])
    f32, _, f32_grads = _run(fn, specs, seeds, torch.float32)
    results = [rounded(r) for r in (exact, f32) if not isinstance(r, Exception)]
    return results, [rounded(f32_grads)] if isinstance(f32_grads, tuple) else []


def test_a_difference_from_eager_that_eager_rounded_wrongly_is_accepted():
    """The lowp fuzz's first random-seed failure: eager's bfloat16 rsqrt(1.0078125) is 1.0, the
    rounded value 0.99609375; floor(v0 / sqrt(v0)) is then 1 in eager and 0 here, which (1) of
    _lowp_references gives too. An element that matches neither eager nor a reference fails."""
    src = "def f(x0):\n    v0 = torch.rsqrt(x0.abs())\n    return torch.div(v0, torch.sqrt(v0), rounding_mode='floor')"
    check_lowp_program(src, [((130,), torch.bfloat16, "contiguous", False, True)], [1])
    spec = ((2,), torch.bfloat16, "contiguous", False, False)
    assert torch.equal(make_input(spec, 3)[0], make_input(spec, 3, torch.float64)[0].to(torch.bfloat16))
    results, _ = _lowp_references(lambda x: torch.rsqrt(x.abs()), [spec], [3])
    eager = torch.rsqrt(make_input(spec, 3)[0].abs())
    with pytest.raises(AssertionError):  # (a quarter more than eager's second element: no reference has it)
        _compare_results(eager * torch.tensor([1.0, 1.25], dtype=torch.bfloat16), eager, "r", (2.0 ** -7,) * 2,
                         results)
