"""thunder-fuse: regions of thunder prims outlined into @fusion_N funcs and run as native CPU
kernels (lowering/linalg) from the generated program; results and gradients equal eager."""
import os
import re
import sys

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.dialects.mlir import ir
from thunder.lowering import fuse
from thunder.lowering.fuse import claimed
from thunder.lowering.linalg import supported

FUSE = ["thunder-decompose", "thunder-fuse{policy=always}"]


def elementwise_chain(a, b):
    return torch.tanh(a * b + 1) * torch.exp(-a) - b / 3


def bias_gelu(x, b):
    return F.gelu(x + b)


def bias_gelu_tanh(x, b):
    return F.gelu(x + b, approximate="tanh")


def bias_gelu_tanh_residual(x, b, r):
    return F.gelu(x + b, approximate="tanh") + r


def residual_layer_norm(x, r, w, b):
    return F.layer_norm(x + r, (x.shape[-1],), w, b)


def masked_softmax(x, mask):
    return torch.softmax(x.masked_fill(mask, float("-inf")), dim=-1)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def swiglu(x, w1, w3):
    return F.silu(x @ w1) * (x @ w3)


def reduction(x):
    return (x * x).sum(-1)


def rotary(x, cos, sin):
    """Rotary position embedding (rotate-half form): slices, neg and cat feeding elementwise ops."""
    d = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., d:], x[..., :d]), dim=-1) * sin


def _inputs(name):
    g = torch.Generator().manual_seed(0)

    def r(*s):
        return torch.randn(*s, generator=g)

    return {
        "elementwise_chain": lambda: (r(16, 33), r(16, 33)),
        "bias_gelu": lambda: (r(64, 128), r(128)),
        "bias_gelu_tanh": lambda: (r(64, 128), r(128)),
        "residual_layer_norm": lambda: (r(32, 64), r(32, 64), r(64), r(64)),
        "masked_softmax": lambda: (r(8, 40), torch.rand(8, 40, generator=g) > 0.7),
        "rms_norm": lambda: (r(16, 64), r(64)),
        "swiglu": lambda: (r(8, 32), r(32, 48), r(32, 48)),
        "reduction": lambda: (r(12, 70),),
        "rotary": lambda: (r(3, 5, 7, 10), r(7, 10), r(7, 10)),
    }[name]()


FUNCTIONS = [elementwise_chain, bias_gelu, bias_gelu_tanh, residual_layer_norm, masked_softmax, rms_norm,
             swiglu, reduction, rotary]


def _close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _close_grad(a, b):
    # gradients go through matmuls and reductions summed in another order than eager's
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def _calls(src):
    """The statements of a generated program (one per line with an assignment)."""
    return [line for line in src.splitlines() if re.match(r"\s+\S.* = ", line)]


def _fused_module(jf):
    trace = next(t for t in thunder.last_traces(jf) if t.producer == "thunder-fuse")
    return trace.module()


def _funcs(module):
    out = {}
    for op in module.body.operations:
        if op.operation.name == "func.func":
            out[ir.StringAttr(op.attributes["sym_name"]).value] = op
    return out


def _op_names(func_op):
    return [o.operation.name for o in func_op.regions[0].blocks[0].operations]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_fused_equals_eager(fn):
    args = _inputs(fn.__name__)
    jf = thunder.jit(fn, transforms=FUSE)
    _close(jf(*args), fn(*args))
    _close(jf(*args), fn(*args))  # cached entry, compiled kernels
    assert thunder.cache_hits(jf) == 1
    final = str(thunder.last_traces(jf)[-1])
    assert re.search(r"= fusion_\d+\(", final), final
    unfused = thunder.jit(fn, transforms=["thunder-decompose"], executors=["torch"])
    unfused(*args)
    assert len(_calls(final)) < len(_calls(str(thunder.last_traces(unfused)[-1])))


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_regions_hold_only_supported_prims(fn):
    jf = thunder.jit(fn, transforms=FUSE)
    jf(*_inputs(fn.__name__))
    module = _fused_module(jf)
    with module.context:
        funcs = _funcs(module)
        callees = {n: f for n, f in funcs.items() if "thunder.executor" in f.attributes}
        assert callees
        for name, f in callees.items():
            assert ir.StringAttr(f.attributes["thunder.executor"]).value == "linalg"
            for o in f.regions[0].blocks[0].operations:
                op = o.operation
                assert op.name in ("arith.constant", "func.return") or (supported(op.name) and claimed(op)), op
        caller = _op_names(funcs["computation"])
        assert caller.count("func.call") == len(callees)
        for op in caller:  # unsupported prims (matmul), prims kept out (erf: a scalar libm call)
            assert op in ("arith.constant", "func.return", "func.call") or op.startswith("thunder."), op


def test_matmul_stays_a_torch_call():
    args = _inputs("swiglu")
    jf = thunder.jit(swiglu, transforms=FUSE)
    _close(jf(*args), swiglu(*args))
    final = str(thunder.last_traces(jf)[-1])
    assert final.count("torch.matmul(") == 2, final
    assert len(re.findall(r"= fusion_\d+\(", final)) == 1, final


def test_no_cycle_through_an_unfused_op():
    # exp -> matmul -> add and exp -> neg -> add: {exp, neg, add} as one region would need the
    # matmul's result before and after it
    def fn(x, w):
        a = torch.exp(x)
        m = a @ w
        return torch.tanh(-a * 2 + m) * 3

    x, w = torch.randn(6, 6), torch.randn(6, 6)
    jf = thunder.jit(fn, transforms=FUSE)
    _close(jf(x, w), fn(x, w))
    final = str(thunder.last_traces(jf)[-1])
    lines = _calls(final)
    mm = next(i for i, line in enumerate(lines) if "torch.matmul" in line)
    assert "fusion_0(" in lines[mm - 1] and "fusion_1(" in lines[mm + 1], final


def test_non_contiguous_inputs():
    x = torch.randn(64, 32).t()  # transposed
    b = torch.randn(128)[::2]  # strided
    assert not x.is_contiguous() and not b.is_contiguous()
    jf = thunder.jit(bias_gelu, transforms=FUSE)
    _close(jf(x, b), bias_gelu(x, b))
    # same metadata, other strides: same cache entry, a new kernel variant
    _close(jf(x.contiguous(), b.contiguous()), bias_gelu(x, b))
    ln_args = (torch.randn(64, 32).t(), torch.randn(64, 32)[:, ::1].t().contiguous(),
               torch.randn(64), torch.randn(64))
    jl = thunder.jit(residual_layer_norm, transforms=FUSE)
    _close(jl(*ln_args), residual_layer_norm(*ln_args))
    x = torch.randn(16, 1).expand(16, 64)  # stride 0
    jr = thunder.jit(rms_norm, transforms=FUSE)
    w = torch.randn(64)
    _close(jr(x, w), rms_norm(x, w))


@pytest.mark.parametrize("fn", [elementwise_chain, bias_gelu, residual_layer_norm, masked_softmax, rms_norm,
                                swiglu, reduction, rotary], ids=lambda f: f.__name__)
def test_training_gradients_equal_eager(fn):
    args = _inputs(fn.__name__)
    ours = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
    ref = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
    jf = thunder.jit(fn, transforms=FUSE)
    out = jf(*ours)
    expected = fn(*ref)
    _close(out, expected)
    g = torch.randn_like(expected)
    out.backward(g)
    expected.backward(g)
    for a, b in zip(ours, ref):
        if b.grad is not None:
            _close_grad(a.grad, b.grad)
    fwd = str(thunder.last_traces(jf)[-1])
    bwd = str(thunder.last_backward_traces(jf)[-1])
    assert "thunder-fuse" in bwd
    assert re.search(r"= fusion_\d+\(", fwd + bwd), fwd + bwd


def test_gpt_block_training_step_equals_eager_with_the_default_policy():
    # benchmarks/gpt_block.py's block, smaller: the tanh GELU is a kernel in @forward and its
    # recompute one in @backward (cost model), large matmuls go to oneDNN where it is faster
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from gpt_block import gpt_block, make_inputs

    ours, ref = make_inputs(2, 64, 128) + [4], make_inputs(2, 64, 128) + [4]
    jf = thunder.jit(gpt_block)
    out, expected = jf(*ours), gpt_block(*ref)
    _close(out, expected)
    g = torch.randn_like(expected)
    out.backward(g)
    expected.backward(g)
    for a, b in zip(ours[:-1], ref[:-1]):
        _close_grad(a.grad, b.grad)
    fwd = str(thunder.last_traces(jf)[-1])
    bwd = str(thunder.last_backward_traces(jf)[-1])
    assert "gelu" not in fwd.split("def forward")[1] and "gelu" not in bwd, fwd + bwd


def test_training_sum_backward_expanded_cotangent():
    x, r, w, b = [t.requires_grad_() for t in _inputs("residual_layer_norm")]
    jf = thunder.jit(residual_layer_norm, transforms=FUSE)
    jf(x, r, w, b).sum().backward()  # the cotangent is an expanded (stride 0) tensor
    grads = [t.grad.clone() for t in (x, r, w, b)]
    for t in (x, r, w, b):
        t.grad = None
    residual_layer_norm(x, r, w, b).sum().backward()
    for g, t in zip(grads, (x, r, w, b)):
        _close_grad(g, t.grad)


def _bias_grad(x0, x1):
    return x1 + x0


# (function, its inputs, a cotangent or None): sums of thousands of float32 terms per result
_LONG_SUMS = [
    # x1's gradient sums 4489 cotangents per element over x0's leading dims (found by the fuzzer)
    (_bias_grad, lambda: (torch.randn(67, 67, 2), torch.randn(1, 2, requires_grad=True)),
     torch.linspace(-1, 1, 67 * 67 * 2).reshape(67, 67, 2)),
    (lambda x: (x * 2).sum(), lambda: (torch.rand(4, 250_000),), None),
    (lambda x: (x * 2).sum((0, 2)), lambda: (torch.rand(300, 5, 300),), None),
    (lambda x: (x * 2).sum(-1), lambda: (torch.rand(8, 4096),), None),  # rows: vector partial sums
]


@pytest.mark.parametrize("case", range(len(_LONG_SUMS)))
def test_long_float32_sums_are_as_accurate_as_eagers(case):
    """A fused f32 sum over other dims than the last alone accumulates in f64: its loops add one
    result's terms one by one, and f32 was up to 6x (outer dims) and 100x (all dims) further from
    the exact sum than eager's partial sums."""
    fn, make, cotangent = _LONG_SUMS[case]
    torch.manual_seed(0)
    args = make()
    jf = thunder.jit(fn, fusion="always")
    if cotangent is None:
        got, want = jf(*args), fn(*args)
        exact = fn(*[a.double() for a in args])
    else:
        got, = torch.autograd.grad(jf(*args), args[1], cotangent)
        want, = torch.autograd.grad(fn(*args), args[1], cotangent)
        exact = cotangent.double().sum((0, 1))
    programs = str(thunder.last_traces(jf)[-1]) + "".join(map(str, thunder.last_backward_traces(jf)[-1:]))
    assert re.search(r"= fusion_\d+\(", programs), programs
    err = (got.double() - exact).abs().max().item()
    eager_err = (want.double() - exact).abs().max().item()
    assert err <= 2 * eager_err + 1e-7 * exact.abs().max().item(), (err, eager_err)


def test_on_by_default_where_the_cost_model_expects_a_gain():
    # a chain of elementwise ops on 256 KiB tensors: one kernel beats three torch calls
    x, b, r = torch.randn(256, 256), torch.randn(256), torch.randn(256, 256)
    jf = thunder.jit(bias_gelu_tanh_residual)
    _close(jf(x, b, r), bias_gelu_tanh_residual(x, b, r))
    final = str(thunder.last_traces(jf)[-1])
    assert final.count("= fusion_") == 1 and "torch." not in final.split("def computation")[1], final
    assert "thunder-fuse" in [t.producer for t in thunder.last_traces(jf)]
    # tiny tensors: a kernel call costs more than the torch calls it would replace
    jf = thunder.jit(bias_gelu_tanh_residual)
    jf(torch.randn(4, 8), torch.randn(8), torch.randn(4, 8))
    assert "fusion_" not in str(thunder.last_traces(jf)[-1])
    # a single op is never worth a kernel: torch's own kernel is as good
    jf = thunder.jit(lambda x: torch.exp(x))
    jf(x)
    assert "fusion_" not in str(thunder.last_traces(jf)[-1])
    # the kernel's math counts (measured per element): torch's native erf GELU is faster than
    # the kernel's erf polynomial with the add folded in (benchmarks/cost_model.py), the tanh
    # GELU's polynomial is not
    x, b = torch.randn(1024, 256), torch.randn(256)
    jf = thunder.jit(bias_gelu)
    _close(jf(x, b), bias_gelu(x, b))
    assert "fusion_" not in str(thunder.last_traces(jf)[-1])
    jf = thunder.jit(bias_gelu_tanh)
    _close(jf(x, b), bias_gelu_tanh(x, b))
    assert "fusion_" in str(thunder.last_traces(jf)[-1])
    # the torch executor alone: no fusion
    x, b = torch.randn(256, 256), torch.randn(256)
    jf = thunder.jit(bias_gelu_tanh_residual, executors=["torch"])
    _close(jf(x, b, r), bias_gelu_tanh_residual(x, b, r))
    assert "fusion_" not in str(thunder.last_traces(jf)[-1])


def _qkv_products(x, w, b):
    q, k, v = F.linear(x, w, b).split(x.shape[-1], 2)
    return (q @ k.transpose(-1, -2)) @ v


def test_a_split_kernel_must_still_be_worth_one(monkeypatch):
    # the backward's cat of the q, k, v gradients (products) with the bias gradient's row sum is
    # worth a kernel; the row sum goes to torch so the rest tiles, and the cat left alone moves
    # what torch's cat moves: both run as torch calls
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(8, 128, 256, generator=g) * 0.1, torch.randn(768, 256, generator=g) * 0.02,
            torch.randn(768, generator=g) * 0.1]
    args = [a.requires_grad_() for a in args]

    def backward():
        jf = thunder.jit(_qkv_products)
        got = jf(*args)
        # (the weight's gradient sums 1024 products of products: float32 GEMMs of other orders)
        torch.testing.assert_close(torch.autograd.grad(got.sum(), args),
                                   torch.autograd.grad(_qkv_products(*args).sum(), args), rtol=1e-3, atol=1e-3)
        return str(thunder.last_backward_traces(jf)[-1])
    assert "torch.cat(" in backward() and "fusion_" not in backward()
    # without the check the cat is a kernel of its own (the test can fail)
    monkeypatch.setattr(fuse, "_kernel_worth", lambda kept, executor: True)
    assert "torch.cat(" not in backward()


def test_a_lone_tanh_gelu_fuses_as_torchs_kernel_computes_tanh_slowly():
    # torch's tanh GELU kernel spends 1.2 ns per element on its math (benchmarks/cost_model.py),
    # our polynomial a tenth of that: the kernel wins even for one op; the erf GELU stays torch's
    x = torch.randn(1024, 256)
    jf = thunder.jit(lambda x: F.gelu(x, approximate="tanh"))
    _close(jf(x), F.gelu(x, approximate="tanh"))
    assert "fusion_0(x)" in str(thunder.last_traces(jf)[-1])
    jf = thunder.jit(lambda x: F.gelu(x))
    _close(jf(x), F.gelu(x))
    assert "fusion_" not in str(thunder.last_traces(jf)[-1])


def test_softmax_math_counts_on_torchs_side_at_any_bandwidth(monkeypatch):
    # torch's softmax kernel spends ~0.35 ns per element on its exps (benchmarks/cost_model.py):
    # with it counted, x * 0.125 + mask then softmax (benchmarks/fusion.py's case) is one kernel
    # also where the calibrated model measured a high bandwidth (2.1e11 B/s: 2 threads, a 4 MiB
    # tensor in L3); counted on the kernel's side only, the region went to torch there
    import dataclasses

    from thunder.lowering import cost_calibration, executors

    fixed = executors.get("linalg").fixed_cost
    monkeypatch.setitem(cost_calibration._CHOSEN, fixed, dataclasses.replace(fixed, bytes_per_second=2.1e11))
    x, mask = torch.randn(64, 128, 128), torch.full((128, 128), float("-inf")).triu(1)
    fn = lambda x, mask: torch.softmax(x * 0.125 + mask, -1)  # noqa: E731
    jf = thunder.jit(fn)
    _close(jf(x, mask), fn(x, mask))
    final = str(thunder.last_traces(jf)[-1])
    assert final.count("= fusion_") == 1 and "torch.softmax" not in final, final


def test_fusion_option():
    jf = thunder.jit(lambda x: torch.exp(x), fusion="always")
    x = torch.randn(4, 4)
    _close(jf(x), torch.exp(x))
    assert "fusion_0(" in str(thunder.last_traces(jf)[-1])
    assert thunder.compile_data(jf).fusion == "always"
    with pytest.raises(ValueError, match="fusion policy 'sometimes'"):
        thunder.jit(lambda x: x, fusion="sometimes")


def test_pass_is_idempotent_and_numbers_stay_inside():
    from thunder.lowering.passes import run_pipeline

    jf = thunder.jit(bias_gelu, transforms=FUSE)
    jf(*_inputs("bias_gelu"))
    module = _fused_module(jf)
    before = str(module)
    run_pipeline(module, "builtin.module(thunder-fuse)")
    assert str(module) == before
    with module.context:
        caller = _funcs(module)["computation"]
        assert "arith.constant" not in _op_names(caller)
        assert "arith.constant" in _op_names(_funcs(module)["fusion_0"])


def test_libm_prims_stay_torch_calls():
    # erf has an f32 polynomial: exact GELU is one region
    args = _inputs("bias_gelu")
    jf = thunder.jit(bias_gelu, transforms=FUSE)
    _close(jf(*args), bias_gelu(*args))
    final = str(thunder.last_traces(jf)[-1])
    assert "torch.erf(" not in final and final.count("= fusion_") == 1, final
    # sin lowers to a scalar libm call (slower than torch's vectorized one): not in a region
    x = torch.randn(8, 8)
    jf = thunder.jit(lambda x: torch.sin(x * 2) + 1, transforms=FUSE)
    _close(jf(x), torch.sin(x * 2) + 1)
    assert "torch.sin(" in str(thunder.last_traces(jf)[-1])
    # the polynomials are f32 ones (f16/bf16 compute in f32): f64 exp stays a torch call
    x = torch.randn(8, 8, dtype=torch.float64)
    jf = thunder.jit(lambda x: torch.exp(x * 2) + 1, transforms=FUSE)
    _close(jf(x), torch.exp(x * 2) + 1)
    assert "torch.exp(" in str(thunder.last_traces(jf)[-1])
    # pow with an exponent of 2 or 0.5 is a multiplication or a sqrt; 2.5 is a libm call
    jf = thunder.jit(lambda x: x.float().pow(2) + x.float().abs().pow(0.5), transforms=FUSE)
    _close(jf(x), x.float().pow(2) + x.float().abs().pow(0.5))
    assert "torch.pow(" not in str(thunder.last_traces(jf)[-1])
    jf = thunder.jit(lambda x: x.float().abs().pow(2.5) + 1, transforms=FUSE)
    _close(jf(x), x.float().abs().pow(2.5) + 1)
    assert "torch.pow(" in str(thunder.last_traces(jf)[-1])


def test_ltorch_ops_are_claimed_when_their_decomposition_is():
    # without thunder-decompose: ltorch ops whose prims the kernels take are outlined, and
    # decomposed inside the region; matmul stays a torch call
    jf = thunder.jit(swiglu, fusion="always")
    args = _inputs("swiglu")
    _close(jf(*args), swiglu(*args))
    module = _fused_module(jf)
    with module.context:
        funcs = _funcs(module)
        assert "ltorch.matmul" in _op_names(funcs["computation"]) or "ltorch.linear" in _op_names(funcs["computation"])
        region_ops = _op_names(funcs["fusion_0"])
        assert region_ops and all(n.startswith("thunder.") or n in ("arith.constant", "func.return") for n in region_ops)


def test_module_with_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
    jm = thunder.jit(model, transforms=FUSE)
    x = torch.randn(4, 16)
    _close(jm(x), model(x))
    jm(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(grads, model.parameters()):
        _close_grad(g, p.grad)


def test_two_reductions_of_one_type_as_results():
    # lowering/linalg miscompiles two same-typed reductions that are both region results
    # (shared linalg.fill); thunder-fuse keeps them in separate regions
    def fn(x):
        return (x * 2).sum(0), x.sum(0), (x - 1).amax(0)

    x = torch.randn(4, 32)
    jf = thunder.jit(fn, transforms=FUSE)
    for a, b in zip(jf(x), fn(x)):
        _close(a, b)


def test_full_and_reduction_results():
    def fn(x):
        return (x * 2).sum(0), torch.zeros(32) + x[0]

    x = torch.randn(4, 32)
    jf = thunder.jit(fn, transforms=FUSE)
    for a, b in zip(jf(x), fn(x)):
        _close(a, b)


def test_in_place_update_of_an_input():
    def fn(x, y):
        x.mul_(2).add_(1)
        return (x * y).tanh().sum(0)

    x, y = torch.randn(4, 5), torch.randn(4, 5)
    x1, x2 = x.clone(), x.clone()
    jf = thunder.jit(fn, transforms=FUSE)
    _close(jf(x1, y), fn(x2, y))
    _close(x1, x2)
    assert "x.copy_(" in str(thunder.last_traces(jf)[-1])


def test_random_ops_keep_their_order():
    def fn(x):
        a = F.dropout(x * 2, 0.5) + 1
        b = torch.rand_like(x) * a
        return torch.tanh(a) + b

    x = torch.randn(4, 5)
    results = []
    for transforms in (["thunder-decompose"], FUSE):
        jf = thunder.jit(fn, transforms=transforms)
        torch.manual_seed(0)
        results.append(jf(x))
    _close(results[0], results[1])
    assert "fusion_0(" in str(thunder.last_traces(jf)[-1])


def test_views_and_row_reductions_at_the_end_of_a_region_stay_with_torch():
    # y.t() as a kernel output would be a transposed copy; torch's view of y costs nothing
    def fn(x, b):
        y = F.gelu(x + b, approximate="tanh") * 2
        return y, y.t()

    x, b = torch.randn(512, 256), torch.randn(256)
    jf = thunder.jit(fn)
    for a, e in zip(jf(x, b), fn(x, b)):
        _close(a, e)
    final = str(thunder.last_traces(jf)[-1])
    assert final.count("= fusion_") == 1 and "torch.t(" in final, final

    # a sum over the rows (a bias gradient) would keep the kernel from tiling by rows: with the
    # cost model it is left to torch, summing the kernel's output
    def grads(g, x, b):
        d = g * torch.tanh(x + b) + g
        return d, d.sum(0)

    g = torch.randn(512, 256)
    jf = thunder.jit(grads)
    for a, e in zip(jf(g, x, b), grads(g, x, b)):
        _close_grad(a, e)
    final = str(thunder.last_traces(jf)[-1])
    assert final.count("= fusion_") == 1 and "impl.sum_prim(t3, (0,))" in final, final
    jf = thunder.jit(grads, fusion="always")  # every region: one kernel (untiled)
    for a, e in zip(jf(g, x, b), grads(g, x, b)):
        _close_grad(a, e)
    assert "torch.sum(" not in str(thunder.last_traces(jf)[-1])


@pytest.mark.parametrize("fusion", ["always", "auto"])
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("case", ["softmax_0d", "amax_0d", "sum_prod_0d"])
def test_reductions_of_0d_tensors(case, requires_grad, fusion):
    # a reduction of a 0-d tensor is a copy of its element; lowered as a linalg.generic without
    # reduction iterators, elementwise fusion merged it into its consumer's loop and accumulated
    # it per element (x * softmax(s, 0) gave [1, 1/2, 1/3, 1/4])
    fn = {"softmax_0d": lambda x, s: x * torch.softmax(s, 0),
          "amax_0d": lambda x, s: x + torch.softmax(x.amax().exp() + s, -1),
          "sum_prod_0d": lambda x, s: x * s.sum() - s.prod(0) * s.amin(0, keepdim=True)}[case]
    x, s = torch.arange(1.0, 5.0), torch.tensor(3.0)
    ours = [t.clone().requires_grad_(requires_grad) for t in (x, s)]
    ref = [t.clone().requires_grad_(requires_grad) for t in (x, s)]
    jf = thunder.jit(fn, fusion=fusion)
    out, expected = jf(*ours), fn(*ref)
    _close(out, expected)
    if fusion == "always":
        assert "fusion_" in str(thunder.last_traces(jf)[-1])
    if requires_grad:
        out.backward(torch.arange(4.0))
        expected.backward(torch.arange(4.0))
        for a, b in zip(ours, ref):
            _close_grad(a.grad, b.grad)


@pytest.mark.parametrize("case", ["by_sqrt", "by_scaled_sqrt"])
def test_division_at_special_divisors(case):
    # kernels divide exactly: with fastmath<arcp>, LLVM made x / sqrt(y) a product with an rsqrt
    # estimate, NaN at y = 0 and y = inf (sqrt's backward at 0 gave NaN instead of inf)
    fn = {"by_sqrt": lambda a, b: a / torch.sqrt(b),
          "by_scaled_sqrt": lambda a, b: a / (torch.sqrt(b) * 2)}[case]
    b = torch.tensor([0., -0., 1., float("inf"), 4., 1e-30, 1e30, 3.]).repeat(16, 4)
    a = torch.full_like(b, 2.)
    jf = thunder.jit(fn, fusion="always")
    torch.testing.assert_close(jf(a, b), fn(a, b), equal_nan=True)
    assert "fusion_0(" in str(thunder.last_traces(jf)[-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("exponent", [0.5, -0.5])
def test_pow_half_at_negative_zero_and_infinity(dtype, exponent):
    # torch computes float16 x ** +-0.5 with std::pow ((-0) ** -0.5 = +inf, (-inf) ** 0.5 = inf),
    # float32/bfloat16 with sqrt/rsqrt (-inf, NaN); the kernel gave float16 sqrt's -inf and NaN
    x = torch.tensor([-0.0, float("-inf"), -4.0, 0.0, float("inf"), 4.0], dtype=dtype).repeat(4)
    jf = thunder.jit(lambda x: x ** exponent, fusion="always")
    out, expected = jf(x), x ** exponent
    assert "fusion_0(" in str(thunder.last_traces(jf)[-1])
    torch.testing.assert_close(out, expected, equal_nan=True)
    numbers = ~expected.isnan()
    assert torch.equal(out.signbit()[numbers], expected.signbit()[numbers])


@pytest.mark.parametrize("case", ["rows", "first_dim", "mixed_dtypes", "bf16", "strided", "one_empty", "inner_tiles",
                                  "parts_broadcast", "parts_of_parts", "parts_strided_rows"])
def test_cat_in_kernels(case):
    """cat inside fused regions: along the columns of tiles of rows, along the tiled dim (the
    region runs untiled), after a promotion, in bf16, of strided inputs, with an empty input."""
    fns = {
        "rows": (lambda a, b: torch.cat((a.exp(), -b, a), 1) * 2, (torch.randn(33, 5), torch.randn(33, 3))),
        "first_dim": (lambda a, b: torch.cat((a, b + 1)) * 3, (torch.randn(4, 6), torch.randn(7, 6))),
        "mixed_dtypes": (lambda a, b: torch.cat((a * 2, b), -1).exp(),
                         (torch.randn(9, 4), torch.randn(9, 2, dtype=torch.float64))),
        "bf16": (rotary, (torch.randn(2, 3, 5, 8).bfloat16(), torch.randn(5, 8).bfloat16(),
                          torch.randn(5, 8).bfloat16())),
        "strided": (rotary, (torch.randn(2, 6, 5, 3).transpose(1, 3), torch.randn(6, 5).t(), torch.randn(5, 6))),
        "one_empty": (lambda a, b: torch.cat((a, b, a), 1) + 1, (torch.randn(6, 4), torch.randn(6, 0))),
        # rows of the first dim hold 128 KiB: tiles of the second dim's rows (strided tiles)
        "inner_tiles": (rotary, (torch.randn(2, 8, 64, 64), torch.randn(64, 64), torch.randn(64, 64))),
        # elementwise ops of a cat are computed part by part (their other operands sliced, or
        # broadcast along the cat's dim); a reduction, a cat of it and the results read it whole
        "parts_broadcast": (lambda a, b: torch.cat((a, b), 1) * torch.arange(8.0) + torch.cat((a, b), 1).sum(1, True),
                            (torch.randn(5, 3), torch.randn(5, 5))),
        "parts_of_parts": (lambda a, b: (torch.cat((torch.cat((a, -b), 1).exp(), a), 1) * 2, torch.cat((a, b), 1)),
                           (torch.randn(7, 3), torch.randn(7, 2))),
        "parts_strided_rows": (lambda a, b, w: torch.cat((a, b.exp()), -1) * (w + 1) - a.sum(-1, True),
                               (torch.randn(300, 9).t(), torch.randn(9, 5), torch.randn(305))),
    }
    fn, args = fns[case]
    jf = thunder.jit(fn, transforms=FUSE)
    expected = fn(*args)
    out = jf(*args)
    for o, e in zip(out if isinstance(out, tuple) else [out], expected if isinstance(expected, tuple) else [expected]):
        assert o.dtype == e.dtype
        torch.testing.assert_close(o, e, **({} if case != "bf16" else dict(rtol=1e-2, atol=1e-2)))
    fused = _fused_module(jf)
    assert any("thunder.cat" in _op_names(f) for name, f in _funcs(fused).items() if name.startswith("fusion")), \
        str(fused)


def _kernels_tiled(jf):
    """Whether every fusion callee of jf's last traces lowers to a kernel tiled by rows."""
    from thunder.lowering.fuse import region_text
    from thunder.lowering.linalg import lower_region

    names = []
    for trace in thunder.last_traces(jf) + (thunder.last_backward_traces(jf) or []):
        if trace.producer.startswith("thunder-fuse"):
            module = trace.module()  # (alive while its funcs are read)
            for name, f in _funcs(module).items():
                if name.startswith("fusion_") and name not in names:
                    names.append(name)
                    assert lower_region(region_text(f), name).rows is not None, region_text(f)
    return names


@pytest.mark.parametrize("case", ["mean", "none", "sum_weight_smoothing", "odd_rows_ignored", "strided", "bf16",
                                  "spatial", "one_class"])
def test_cross_entropy_fused_by_rows(case):
    """F.cross_entropy as one kernel by rows with the cost model (the mean over rows left to
    torch), its backward too; values and grads as eager's."""
    g = torch.Generator().manual_seed(0)
    n, c, kw, dtype, tol, extra = 256, 1001, {}, torch.float32, {}, []
    x = torch.randn(n, c, generator=g)
    if case == "strided":
        x = torch.randn(c, n, generator=g).t()
    t = torch.randint(0, c, (n,), generator=g)
    if case == "none":
        kw = dict(reduction="none")
    if case == "sum_weight_smoothing":
        kw = dict(reduction="sum", label_smoothing=0.1)
        extra = [torch.rand(c, generator=g)]
    if case == "odd_rows_ignored":
        x, t = x[:255], t[:255].clone()
        t[::3] = -100
    if case == "bf16":
        x, dtype, tol = x.bfloat16(), torch.bfloat16, dict(rtol=2e-2, atol=2e-2)
    if case == "spatial":
        x, t = torch.randn(4, c, 64, generator=g), torch.randint(0, c, (4, 64), generator=g)
    if case == "one_class":
        x, t = torch.randn(20000, 1, generator=g), torch.zeros(20000, dtype=torch.long)
    fn = lambda x, t, *w: F.cross_entropy(x, t, *w, **kw)  # noqa: E731
    policy = "always" if case == "one_class" else "auto"  # (rows of one element: not worth a kernel)
    jf = thunder.jit(fn, fusion=policy)
    torch.testing.assert_close(jf(x, t, *extra), fn(x, t, *extra), **tol)
    if case in ("mean", "none", "odd_rows_ignored", "strided"):
        assert _kernels_tiled(jf) == ["fusion_0"], str(thunder.last_traces(jf)[-1])
    xs = [x.detach().clone().requires_grad_() for _ in range(2)]
    jf = thunder.jit(fn, fusion=policy)
    out, expected = jf(xs[0], t, *extra), fn(xs[1], t, *extra)
    torch.testing.assert_close(out, expected, **tol)
    w = torch.rand(out.shape, generator=g, dtype=out.dtype)
    (out * w).sum().backward()
    (expected * w).sum().backward()
    torch.testing.assert_close(xs[0].grad, xs[1].grad, **(tol or dict(rtol=1e-4, atol=1e-6)))
    if case in ("mean", "none", "odd_rows_ignored", "strided"):
        assert _kernels_tiled(jf) == ["fusion_0", "fusion_1"], str(thunder.last_backward_traces(jf)[-1])


def test_cross_entropy_empty_batch():
    fn = lambda x, t: (F.cross_entropy(x, t), F.cross_entropy(x, t, reduction="none"))  # noqa: E731
    x, t = torch.randn(0, 7), torch.zeros(0, dtype=torch.long)
    for a, e in zip(thunder.jit(fn, fusion="always")(x, t), fn(x, t)):
        torch.testing.assert_close(a, e, equal_nan=True)


def test_claim_cache_tells_attributes_apart():
    """The cache of which ltorch ops decompose into claimable prims is keyed by the ops'
    attributes' text (it was keyed by the attribute map's Python address, so div with
    rounding_mode="floor", whose decomposition has a remainder, could reuse plain div's answer and
    put a prim without a lowering into a region, which the executor then refused whole)."""
    from thunder.dialects.mlir import ir
    from thunder.lowering.fuse import _signature

    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    with ctx, ir.Location.unknown():
        m = ir.Module.parse('func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) {\n'
                            '  %0 = "ltorch.div"(%a, %b) {rounding_mode = "floor"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n'
                            '  %1 = "ltorch.div"(%a, %b) {rounding_mode = "trunc"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n'
                            '  %2 = "ltorch.div"(%a, %b) {rounding_mode = "floor"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n'
                            '  return\n}')
        ops = list(m.body.operations[0].regions[0].blocks[0].operations)[:3]
        floor, trunc, floor2 = (_signature(o.operation) for o in ops)
        assert floor != trunc and floor == floor2


def _conv1d_mlp(x, w1, b1, w2, b2):
    # GPT-2's MLP (transformers' Conv1D: addmm of the (batch * seq) rows, viewed back as
    # (batch, seq, n)) with its tanh GELU written out, and the residual add
    b, s, n = x.shape
    h = torch.addmm(b1, x.view(-1, n), w1).view(b, s, -1)
    h = 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * torch.pow(h, 3.0))))
    return torch.addmm(b2, h.view(-1, h.shape[-1]), w2).view(b, s, n) + x


def test_regions_between_row_reshapes_fuse_tiled():
    """Regions beyond the untiled size limit whose inputs are (b * s, n) matmul results viewed
    as (b, s, n), and whose outputs are viewed back to feed a matmul and a bias gradient's
    sum over rows: torch takes the views, the kernels tile (before, the full-size GPT-2
    training step had no fused region at all); values and grads as eager's."""
    g = torch.Generator().manual_seed(0)
    shapes = [(2, 128, 64), (64, 256), (256,), (256, 64), (64,)]
    args = [torch.randn(s, generator=g) * 0.5 for s in shapes]
    ours = [a.clone().requires_grad_() for a in args]
    ref = [a.clone().requires_grad_() for a in args]
    jf = thunder.jit(_conv1d_mlp)
    out, expected = jf(*ours), _conv1d_mlp(*ref)
    _close(out, expected)
    w = torch.randn(expected.shape, generator=g)
    (out * w).sum().backward()
    (expected * w).sum().backward()
    for a, b in zip(ours, ref):
        _close_grad(a.grad, b.grad)
    fwd = str(thunder.last_traces(jf)[-1]).split("def forward")[1]
    bwd = str(thunder.last_backward_traces(jf)[-1])
    assert "fusion_" in fwd and "fusion_" in bwd and "tanh" not in fwd + bwd, fwd + bwd
    assert len(_kernels_tiled(jf)) >= 2


def _causal_lm_loss(logits, labels, num_items=None):
    """transformers' ForCausalLMLoss, written out: the labels padded with ignore_index and
    shifted by one, both flattened, and the sum over the tokens divided by the number of items
    (or the mean)."""
    logits = logits.float()
    labels = F.pad(labels, (0, 1), value=-100)
    shift_labels = labels[..., 1:].contiguous()
    logits, shift_labels = logits.view(-1, logits.size(-1)), shift_labels.view(-1)
    reduction = "sum" if num_items is not None else "mean"
    loss = F.cross_entropy(logits, shift_labels, ignore_index=-100, reduction=reduction)
    return loss / num_items if num_items is not None else loss


def _lm_head_and_loss(h, w, labels):
    """The logits made by an lm head and returned too: the backward adds their own cotangent,
    [B, T, C], to the loss's [rows, C] gradient through a reshape."""
    logits = h @ w
    return _causal_lm_loss(logits, labels, 7), logits


@pytest.mark.parametrize("case", ["sum", "mean", "logits_out"])
def test_causal_lm_loss_fused_by_rows(case):
    """The labels' pad, shift and flattening (a cat and a reshape merging dims, on tensors the
    logits' rows/classes times smaller) go to torch before the kernel: the forward is one kernel
    tiled by rows over the logits, the backward one tiled elementwise kernel whose [rows, C]
    result torch views as the logits' [B, T, C] (with the logits' own cotangent, reshaped by
    torch, added in the kernel: lowering/layout/sink_reshapes.py); values and grads as eager's."""
    T = 256  # (tokens: 76 KiB of logits, so the kernels are not tiny, Executor.tiny)
    g = torch.Generator().manual_seed(0)
    t = torch.randint(0, 37, (2, T), generator=g)
    t[0, 2] = -100
    if case == "logits_out":
        fn, args = _lm_head_and_loss, [torch.randn(2, T, 8, generator=g), torch.randn(8, 37, generator=g)]
    else:
        fn, args = _causal_lm_loss, [torch.randn(2, T, 37, generator=g)]
    num_items = [] if case == "logits_out" else [7 if case == "sum" else None]
    copies = [[a.clone().requires_grad_() for a in args] for _ in range(2)]
    jf = thunder.jit(fn)
    out, expected = jf(*copies[0], t, *num_items), fn(*copies[1], t, *num_items)
    torch.testing.assert_close(out, expected)
    cot = torch.randn(2, T, 37, generator=g)
    for o, a in ((out, copies[0]), (expected, copies[1])):
        loss = o[0] + (o[1] * cot).sum() if case == "logits_out" else o
        loss.backward()
    for a, e in zip(copies[0], copies[1]):
        torch.testing.assert_close(a.grad, e.grad)
    assert _kernels_tiled(jf) == ["fusion_0", "fusion_1"]
    fwd, bwd = str(thunder.last_traces(jf)[-1]), str(thunder.last_backward_traces(jf)[-1])
    view = re.search(r"(t\d+) = torch\.reshape\((logits|t\d+), \(-1, 37\)\)", fwd)
    assert fwd.count("= fusion_") == 1 and view and re.search(rf"= fusion_0\({view[1]}, ", fwd), fwd
    assert bwd.count("= fusion_") == 1 and "torch.cat" not in bwd.split("= fusion_")[1], bwd
    assert re.search(rf"= torch\.reshape\(b[\d_]+, \(2, {T}, 37\)\)", bwd.split("= fusion_1")[1]), bwd


def _residual_layer_norm(x, r, w, b):
    h = x + r
    return F.layer_norm(h, (h.shape[-1],), w, b), h


def test_residual_layer_norm_fuses_in_training():
    """GPT-2's residual add and the layer norm after it, at its row width (512, 2 x 256 rows,
    beyond the untiled size limit), requiring grad: the forward's layer norm (native_layer_norm,
    whose mean and rstd the backward recomputes, unused) and the add are one tiled kernel, as
    are the backward's; values and grads as eager's."""
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(s, generator=g) for s in [(2, 256, 512), (2, 256, 512), (512,), (512,)]]
    ours = [a.clone().requires_grad_() for a in args]
    ref = [a.clone().requires_grad_() for a in args]
    jf = thunder.jit(_residual_layer_norm)
    (y, h), (ey, eh) = jf(*ours), _residual_layer_norm(*ref)
    _close(y, ey)
    _close(h, eh)
    wy, wh = torch.randn(ey.shape, generator=g), torch.randn(eh.shape, generator=g)
    ((y * wy).sum() + (h * wh).sum()).backward()
    ((ey * wy).sum() + (eh * wh).sum()).backward()
    for a, b in zip(ours, ref):
        _close_grad(a.grad, b.grad)
    fwd = str(thunder.last_traces(jf)[-1]).split("def forward")[1]
    bwd = str(thunder.last_backward_traces(jf)[-1])
    calls = [c for c in _calls(fwd) if "return" not in c]
    assert len(calls) == 1 and "fusion_0(" in calls[0] and "layer_norm" not in fwd, fwd
    assert "fusion_" in bwd and "layer_norm" not in bwd, bwd
    assert len(_kernels_tiled(jf)) >= 2
