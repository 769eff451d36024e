"""A differential fuzzer for programs for all sizes: random float programs over a [B, T, C] input
(and a second one broadcast against it), compiled under cache="symbolic values" (symbols from
the first call) or the default (a size becomes a symbol at its second value) with every fusable
region a kernel (fusion="always"), called at several sizes, must match eager PyTorch at each:
results and the gradients of the inputs (where a value cancels to rounding noise, thunder's
error from float64 at most twice eager's).

It exercises what a program for all sizes adds to tests/test_fuzz.py's: the fit of the program
and its fused regions' kernels for all sizes (lowering/linalg/any_size.py: sizes read at run
time, reductions and softmaxes over changing dims, keepdim reshapes and reshapes merging or
splitting changing sizes, numbers computed from the
sizes as the kernel's arguments), the guards of Python's decisions on sizes (min, max, //, %,
abs, a branch), views, cats, slices and products across the changing length (a causal mask,
attention), an int argument k that changes too (a roll, slices of k), in the forward and the backward, and a table of positions (an arange of T: sizes
only an output has). Derandomized; THUNDER_FUZZ_SIZES_EXAMPLES examples (default 40),
THUNDER_FUZZ_SEED=random for new ones:

    THUNDER_FUZZ_SIZES_EXAMPLES=300 THUNDER_FUZZ_SEED=random .venv/bin/python -m pytest tests/test_fuzz_sizes.py
"""
import os

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import thunder

EXAMPLES = int(os.environ.get("THUNDER_FUZZ_SIZES_EXAMPLES", "40"))
RANDOM = os.environ.get("THUNDER_FUZZ_SEED") == "random"

UNARY = ["torch.tanh({})", "torch.exp({}.clamp(max=4))", "torch.sigmoid({})", "torch.relu({})", "F.gelu({})",
         "F.silu({})", "torch.abs({})", "{} * 2", "torch.rsqrt({}.abs() + 1)", "torch.sin({})"]
BINARY = ["{} + {}", "{} - {}", "{} * {}", "{} / ({}.abs() + 1)", "torch.maximum({}, {})"]
# over dim 1 (T) or 2 (C), results that broadcast against [B, T, C]
ROWWISE = ["torch.softmax({x}, {d})", "torch.log_softmax({x}, {d})", "{x}.sum({d}, keepdim=True)",
           "{x}.amax({d}, keepdim=True)", "({x} - {x}.mean({d}, keepdim=True))", "{x}.cumsum({d})",
           "F.layer_norm({x}, ({x}.shape[-1],))"]
# numbers computed from the sizes (Python ints and floats the program must compute per call)
SIZED = ["{x} * x0.shape[1] ** -0.5", "{x} / x0.shape[2]", "{x} + x0.shape[1] // 4", "{x} * min(x0.shape[1], 8)",
         "{x} - max(x0.shape[1] - 6, 0)", "{x} * (x0.shape[1] % 3 + 1)", "{x} * abs(x0.shape[2] - x0.shape[1])",
         "({x} if x0.shape[1] > 8 else -{x})", "torch.full_like({x}, 1.0 / x0.shape[1]) * {x}",
         "({x}.abs() + 1) ** (1 / x0.shape[1])"]
# [B, T, C] -> [B, T, C] through views, copies, slices and products whose sizes change with the call's
SHAPED = ["{x}.reshape(-1, {x}.shape[-1]).reshape({x}.shape)", "{x}.transpose(1, 2).contiguous().transpose(1, 2)",
          "torch.roll({x}, 1, 1)", "torch.cat([{x}[:, 1:], {x}[:, :1]], 1)",
          "torch.cat([{x}[:, x0.shape[1] // 2:], {x}[:, :x0.shape[1] // 2]], 1)", "F.pad({x}[:, 1:], (0, 0, 0, 1))",
          "{x}.flip(1)", "{x}[:, -1:] * {x}", "torch.tril(torch.ones(x0.shape[1], x0.shape[1], dtype=x0.dtype)) @ {x}",
          # (attention's scores from tanh: large scores make eager's float32 gradients themselves inexact)
          "torch.softmax(torch.tanh({x}) @ torch.tanh({x}).transpose(1, 2) * x0.shape[2] ** -0.5, -1) @ {x}",
          "(torch.tanh({x}) @ torch.tanh({x}).transpose(1, 2)).masked_fill(torch.ones(x0.shape[1], x0.shape[1], "
          "dtype=torch.bool).triu(1), float('-inf')).softmax(-1) @ {x}",
          "F.scaled_dot_product_attention(torch.tanh({x}), torch.tanh({x}), {x}, is_causal=True)",
          # slices whose bounds are computed from the length (a sliding window), a mask from it
          "{x}[:, max(x0.shape[1] - 4, 0):].sum(1, keepdim=True) + {x}", "{x}[:, :x0.shape[1] // 2].mean(1, keepdim=True) * {x}",
          "{x}.narrow(1, x0.shape[1] // 3, 2).amax(1, keepdim=True) - {x}",
          "{x}.masked_fill((torch.arange(x0.shape[1]) >= x0.shape[1] // 2)[:, None], 0.0)",
          # reshapes merging or splitting changing sizes (B * T, T * C, a view's -1 that is T // 2)
          "{x}.reshape({x}.shape[0], -1).softmax(-1).reshape({x}.shape)", "{x}.flatten(0, 1).amax(0) + {x}",
          "{x}[:, :x0.shape[1] // 2 * 2].reshape(x0.shape[0], -1, 2, x0.shape[2]).mean(2).sum(1, keepdim=True) + {x}"]
# with k, an int argument that changes between the calls (1 <= k <= T: KS)
WITH_K = ["{x} * k", "{x} + k / 3", "torch.roll({x}, k, 1)", "{x}[:, :k].sum(1, keepdim=True) * {x}",
          "{x}.narrow(1, k - 1, 1) + {x}", "{x}[:, -k:].amax(1, keepdim=True) - {x}"]
# the second input's shapes, against x0's [B, T, C]
SECOND = {"[C]": lambda B, T, C: (C,), "[T, C]": lambda B, T, C: (T, C), "[B, T, 1]": lambda B, T, C: (B, T, 1),
          "[B, 1, C]": lambda B, T, C: (B, 1, C), "[B, T, C]": lambda B, T, C: (B, T, C)}
# (B, T, C) of the calls: the first makes every size a symbol; no size equal to another's in one call
SIZES = [(2, 5, 6), (3, 9, 4), (4, 17, 6), (2, 33, 8), (5, 3, 7)]
KS = [2, 3, 1, 3, 2]


@st.composite
def programs(draw):
    second = draw(st.sampled_from([None] + list(SECOND)))
    names = ["x0"] + (["x1"] if second else [])
    lines = []
    for step in range(draw(st.integers(2, 6))):
        x = draw(st.sampled_from(names[-3:]))
        kind = draw(st.sampled_from(["unary", "binary", "rowwise", "sized", "shaped", "with k"]))
        if kind == "with k":
            line = draw(st.sampled_from(WITH_K)).format(x=f"({x} + x0)")
        elif kind == "sized":
            line = draw(st.sampled_from(SIZED)).format(x=x)
        elif kind == "shaped":
            line = draw(st.sampled_from(SHAPED)).format(x=f"({x} + x0)")
        elif kind == "unary":
            line = draw(st.sampled_from(UNARY)).format(x)
        elif kind == "binary":
            y = draw(st.sampled_from(names + ["0.5", "3"]))
            ops = BINARY if y in names else BINARY[:3]  # (a number: +, -, * only)
            line = draw(st.sampled_from(ops)).format(*((x, y, y) if draw(st.booleans()) else (y, x, x)))
        else:
            line = draw(st.sampled_from(ROWWISE)).format(x=f"({x} + x0)", d=draw(st.sampled_from([1, 2])))
        lines.append(f"v{step} = {line}")
        names.append(f"v{step}")
    outs = [f"{names[-1]} + x0"]  # ([B, T, C] whatever the last value broadcasts as)
    if draw(st.booleans()):
        outs.append(f"({names[-1]} * x0).sum((0, 1))")  # a bias gradient's shape of reduction
    if draw(st.integers(0, 3)) == 0:  # a table of positions (a rotary embedding's): sizes no input has
        outs.append("torch.cos(torch.arange(x0.shape[1], dtype=torch.float32)[:, None] * x0.new_ones(x0.shape[2]))")
    src = (["def f(x0, x1, k):" if second else "def f(x0, k):"] + [f"    {s}" for s in lines]
           + [f"    return {', '.join(outs)}"])
    # the default option makes a size a symbol at its second value (automatic dynamic)
    cache = draw(st.sampled_from(["symbolic values", "constant values"]))
    return "\n".join(src), second, draw(st.integers(0, 1 << 16)), cache


def _inputs(second, sizes, seed):
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randn(*sizes, generator=g).requires_grad_()
    if second is None:
        return [x0]
    return [x0, torch.randn(*SECOND[second](*sizes), generator=g).requires_grad_()]


def _run(fn, args, k):
    out = fn(*args, k)
    outs = out if isinstance(out, tuple) else (out,)
    diff = [o for o in outs if o.requires_grad]
    cotangents = [torch.linspace(-1, 1, o.numel(), dtype=o.dtype).reshape(o.shape) for o in diff]
    return outs, torch.autograd.grad(diff, args, cotangents, allow_unused=True)


@pytest.mark.filterwarnings("ignore::UserWarning")
@settings(max_examples=EXAMPLES, derandomize=not RANDOM, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_programs_for_all_sizes_match_eager_at_every_size(program):
    src, second, seed, cache = program
    note(src)
    note(f"second input: {second}, cache={cache!r}")
    ns = {}
    exec(src, {"torch": torch, "F": F}, ns)
    fn = ns["f"]
    jf = thunder.jit(fn, cache=cache, fusion="always")
    for sizes, k in zip(SIZES, KS):
        args = _inputs(second, sizes, seed)
        expected, expected_grads = _run(fn, args, k)
        got, got_grads = _run(jf, args, k)
        exact = None  # (float64's, computed where float32's results differ)
        for label, g, e in [("result", got, expected), ("gradient", got_grads, expected_grads)]:
            for i, (a, b) in enumerate(zip(g, e)):
                assert (a is None) == (b is None), f"{label} {i} at {sizes}, k={k}"
                if b is None:
                    continue
                scale = max(1.0, b.abs().max().item()) if b.numel() else 1.0
                if torch.allclose(a, b, rtol=1e-4, atol=1e-4 * scale):
                    continue
                # a value that cancels (a gradient that is 0 in exact arithmetic) is rounding noise in
                # eager as well: then thunder's error from float64's may be at most twice eager's
                if exact is None:
                    exact = _run(fn, [x.detach().double().requires_grad_() for x in args], k)
                r = (exact[0] if label == "result" else exact[1])[i]
                eager_error = (b.double() - r).abs().max().item()
                assert (a.double() - r).abs().max().item() <= 2 * eager_error + 1e-6 * scale, (
                    f"{label} {i} at {sizes}, k={k}: thunder {a} eager {b} float64 {r}")
