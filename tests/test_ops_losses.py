"""Loss ops (thunder/ops/losses.py) against eager: traced, decomposed and fused (check),
gradients through thunder.jit in float64, eager's exception types."""
import pytest
import torch
import torch.nn.functional as F

import thunder
from op_harness import check, trace_module

torch.manual_seed(0)
f16, bf16, f64 = torch.float16, torch.bfloat16, torch.float64
HALF_TOL = dict(rtol=2e-2, atol=2e-2)


def r(*shape, dtype=torch.float32):
    return torch.randn(shape).to(dtype)


def labels(*shape, classes=5, ignored=True):
    t = torch.randint(0, classes, shape)
    if ignored and t.numel() > 1:
        t.view(-1)[1] = -100
    return t


def probs(*shape, dtype=torch.float32):
    return torch.rand(shape, dtype=dtype).softmax(1)


ce, nll = F.cross_entropy, F.nll_loss
W = torch.rand(5)

CASES = {
    "ce": (lambda x, t: ce(x, t), r(4, 5), labels(4)),
    "ce_sum_none": (lambda x, t: (ce(x, t, reduction="sum"), ce(x, t, reduction="none")), r(4, 5), labels(4)),
    "ce_weight": (lambda x, t, w: ce(x, t, weight=w), r(4, 5), labels(4), W),
    "ce_ignore_index": (lambda x, t: ce(x, t, ignore_index=2), r(6, 5), labels(6, ignored=False)),
    "ce_label_smoothing": (lambda x, t: (ce(x, t, label_smoothing=0.1), ce(x, t, label_smoothing=0.3, reduction="sum"),
                                         ce(x, t, label_smoothing=1.0, reduction="none")), r(4, 5), labels(4)),
    "ce_weight_smoothing": (lambda x, t, w: (ce(x, t, w, label_smoothing=0.2),
                                             ce(x, t, w, label_smoothing=0.2, reduction="none")), r(4, 5), labels(4), W),
    "ce_spatial": (lambda x, t, w: (ce(x, t), ce(x, t, w, label_smoothing=0.1, reduction="none")), r(2, 5, 3, 2),
                   labels(2, 3, 2), W),
    "ce_1d": (lambda x, t: ce(x, t), r(5), torch.tensor(3)),
    "ce_all_ignored": (lambda x, t: (ce(x, t), ce(x, t, label_smoothing=0.1)), r(3, 5), torch.full((3,), -100)),
    "ce_empty": (lambda x, t: (ce(x, t), ce(x, t, reduction="sum")), r(0, 5), labels(0)),
    "ce_byte_target": (lambda x, t: ce(x, t), r(4, 5), labels(4, ignored=False).to(torch.uint8)),
    "ce_noncontig": (lambda x, t: ce(x, t), r(5, 4).t(), labels(4)),
    "ce_f64": (lambda x, t: ce(x, t, label_smoothing=0.1), r(4, 5, dtype=f64), labels(4)),
    "ce_f16": (lambda x, t: ce(x, t), r(4, 5, dtype=f16), labels(4), HALF_TOL),
    "ce_bf16": (lambda x, t: ce(x, t, reduction="none"), r(4, 5, dtype=bf16), labels(4), HALF_TOL),
    "ce_legacy_size_average": (lambda x, t: ce(x, t, size_average=False), r(4, 5), labels(4)),
    "ce_large_logits": (lambda x, t: ce(x * 1000, t), r(4, 5), labels(4)),
    "ce_probs": (lambda x, p: (ce(x, p), ce(x, p, reduction="none"), ce(x, p, reduction="sum")), r(4, 5), probs(4, 5)),
    "ce_probs_weight_smoothing": (lambda x, p, w: ce(x, p, w, label_smoothing=0.2), r(4, 5), probs(4, 5), W),
    "ce_probs_spatial_f64": (lambda x, p: ce(x, p, reduction="none"), r(2, 5, 3), probs(2, 5, 3, dtype=f64)),
    "ce_probs_1d": (lambda x, p: ce(x, p), r(5), torch.rand(5).softmax(0)),
    "nll": (lambda x, t: nll(x.log_softmax(1), t), r(4, 5), labels(4)),
    "nll_weight_none": (lambda x, t, w: (nll(x, t, w, reduction="none"), nll(x, t, w)), r(4, 5), labels(4), W),
    "nll_spatial": (lambda x, t: nll(x, t, ignore_index=1), r(2, 5, 3), labels(2, 3, ignored=False)),
    "nll_1d": (lambda x, t: nll(x, t), r(5), torch.tensor(0)),
    "nll_inf_elsewhere": (lambda x, t: nll(x, t), torch.tensor([[0.5, float("-inf"), float("nan")]]),
                          torch.tensor([0])),
}


@pytest.mark.parametrize("name", CASES)
def test_matches_eager(name):
    fn, *args = CASES[name]
    kw = args.pop() if isinstance(args[-1], dict) else {}
    check(fn, *args, **kw)


def test_fuses_as_one_kernel():
    jf = thunder.jit(lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), fusion="always")
    x, t = r(64, 100), labels(64, classes=100)
    torch.testing.assert_close(jf(x, t), F.cross_entropy(x, t, label_smoothing=0.1))
    program = str(thunder.last_traces(jf)[-1])
    body = program.split("def computation")[1]
    assert body.count("fusion_") == 1 and "torch." not in body, program


@pytest.mark.parametrize("fusion", ["always", "auto"])
def test_out_of_range_target_raises_like_eager(fusion):
    """A fused loss kernel cannot raise: the program checks the targets before it (eager's
    IndexError and message), in inference and in training, never a nan."""
    cases = [
        (lambda x, t: F.cross_entropy(x, t), r(3, 5), torch.tensor([1, 5, -1])),
        (lambda x, t: F.cross_entropy(x, t, reduction="none"), r(3, 5), torch.tensor([1, -100, -2])),
        (lambda x, t: F.cross_entropy(x, t, ignore_index=7, label_smoothing=0.1), r(3, 5), torch.tensor([7, 2, 9])),
        (lambda x, t: F.nll_loss(x, t, reduction="sum"), r(2, 5, 3), torch.tensor([[0, 1, 2], [3, 4, 5]])),
        (lambda x, t: F.cross_entropy(x, t), r(5), torch.tensor(5)),
        (lambda x, t: F.cross_entropy(x, t), r(3, 5), torch.tensor([1, 200, 2], dtype=torch.uint8)),
        # large enough for the cost model's kernel
        (lambda x, t: F.cross_entropy(x, t), r(512, 1000), torch.cat([torch.randint(0, 1000, (511,)),
                                                                      torch.tensor([1000])])),
    ]
    for fn, x, t in cases:
        for training in (False, True):
            x = x.detach().requires_grad_(training)
            with pytest.raises(IndexError) as expected:
                fn(x, t)
            jf = thunder.jit(fn, fusion=fusion)
            with pytest.raises(IndexError) as got:
                jf(x, t)
            assert str(got.value) == str(expected.value)
            ok = t.clamp(0, x.shape[1 if x.ndim > 1 else 0] - 1)
            torch.testing.assert_close(jf(x, ok), fn(x, ok))  # the same program, with valid targets
    # the check runs before the kernel, as a torch call (a kernel cannot raise)
    program = str(thunder.last_traces(jf)[-1])
    assert "impl.check_targets(t, 1000, -100)" in program and "fusion_0(" in program, program
    assert program.index("impl.check_targets") < program.index("fusion_0("), program


def _t(*shape):
    return torch.randn(shape, dtype=f64, requires_grad=True)


GRADS = {
    "ce": (lambda x, t: ce(x, t), _t(4, 5), labels(4)),
    "ce_weight_smoothing": (lambda x, t, w: ce(x, t, w, label_smoothing=0.2), _t(4, 5), labels(4), W.double()),
    "ce_none_spatial": (lambda x, t: ce(x, t, reduction="none", label_smoothing=0.1), _t(2, 5, 3), labels(2, 3)),
    "ce_probs": (lambda x, p: ce(x, p, label_smoothing=0.1), _t(4, 5), probs(4, 5, dtype=f64)),
    "ce_probs_target_grad": (lambda x, p: ce(x, p.softmax(1)), _t(4, 5), _t(4, 5)),
    "nll_sum": (lambda x, t: nll(x, t, reduction="sum"), _t(4, 5), labels(4)),
    "nll_1d": (lambda x, t: nll(x, t), _t(5), torch.tensor(2)),
}


@pytest.mark.parametrize("name", GRADS)
def test_grad(name):
    fn, *args = GRADS[name]
    diff = [a for a in args if a.requires_grad]
    expected = fn(*args)
    ct = torch.randn_like(expected)
    out = thunder.jit(fn)(*args)
    torch.testing.assert_close(out, expected)
    for g, e in zip(torch.autograd.grad(out, diff, ct), torch.autograd.grad(expected, diff, ct)):
        torch.testing.assert_close(g, e)


def test_module_loss_and_training_step():
    from torch import nn

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 10))
    ref = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 10))
    ref.load_state_dict(m.state_dict())
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.05, ignore_index=3)
    x, t = r(32, 8), labels(32, classes=10, ignored=False)
    jm = thunder.jit(lambda x, t: loss_fn(m(x), t))
    loss, expected = jm(x, t), loss_fn(ref(x), t)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    expected.backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


ERRORS = {
    "target_int32": (lambda x, t: ce(x, t.int()), r(3, 5), labels(3)),
    "target_float_shape": (lambda x, t: ce(x, t.float()), r(3, 5), labels(3)),
    "batch": (lambda x, t: ce(x, t[:2]), r(3, 5), labels(3)),
    "weight_size": (lambda x, t: ce(x, t, weight=torch.ones(4)), r(3, 5), labels(3)),
    "weight_dtype": (lambda x, t: nll(x, t, weight=torch.ones(5, dtype=f64)), r(3, 5), labels(3)),
    "reduction": (lambda x, t: ce(x, t, reduction="avg"), r(3, 5), labels(3)),
    "smoothing": (lambda x, t: ce(x, t, label_smoothing=1.5), r(3, 5), labels(3)),
    "probs_ignore_index": (lambda x, t: ce(x, x.softmax(1), ignore_index=1), r(3, 5), labels(3)),
    "probs_batch": (lambda x, t: ce(x, x[:2].softmax(1)), r(3, 5), labels(3)),
    "nll_target_shape": (lambda x, t: nll(x, torch.zeros(2, 3, dtype=torch.long)), r(2, 5, 4), labels(3)),
    "nll_0d": (lambda x, t: nll(x[0, 0], t[0]), r(3, 5), labels(3)),
    "int_input": (lambda x, t: ce(x.long(), t), r(3, 5), labels(3)),
}


@pytest.mark.parametrize("name", ERRORS)
def test_errors_match_eager(name):
    fn, *args = ERRORS[name]
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(eager.type):
        trace_module(fn, *args)


# cross_entropy as logsumexp minus the target's logit (losses.py): values, grads and dtypes as
# eager's through thunder.jit's default policy, at sizes whose rows make kernels
N, C = 11, 37
WC = torch.rand(C)


def _labels(*shape, ignored=2):
    t = torch.randint(0, C, shape)
    t.view(-1)[:ignored] = -100
    return t


TRAINING = {
    "mean_view": (lambda x, t: ce(x.view(-1, C), t.view(-1)), r(2, N, C), _labels(2, N)),
    "sum_none": (lambda x, t: (ce(x, t, reduction="sum"), ce(x, t, reduction="none")), r(N, C), _labels(N)),
    "all_ignored": (lambda x, t: (ce(x, t), ce(x, t, reduction="sum")), r(N, C), torch.full((N,), -100)),
    "weight_ignore_index": (lambda x, t, w: (ce(x, t, w, ignore_index=3), ce(x, t, w, reduction="none")),
                            r(N, C), labels(N, classes=3, ignored=False) + 2, WC),
    "smoothing": (lambda x, t, w: (ce(x, t, label_smoothing=0.1), ce(x, t, w, label_smoothing=0.2, reduction="sum")),
                  r(N, C), _labels(N), WC),
    "probs": (lambda x, p, w: (ce(x, p), ce(x, p, w, label_smoothing=0.1, reduction="none")), r(N, C),
              torch.rand(N, C).softmax(1), WC),
    "spatial": (lambda x, t, w: (ce(x, t), ce(x, t, w, reduction="none")), r(3, C, 4, 2), _labels(3, 4, 2), WC),
    "large_logits": (lambda x, t: ce(x * 1000 + 1e4, t), r(N, C), _labels(N)),
    "bf16": (lambda x, t: (ce(x, t), ce(x, t, reduction="none")), r(N, C, dtype=bf16), _labels(N), HALF_TOL),
    "f16_weight": (lambda x, t, w: ce(x, t, w), r(N, C, dtype=f16), _labels(N), WC.half(), HALF_TOL),
}


@pytest.mark.parametrize("name", TRAINING)
def test_training_matches_eager(name):
    fn, *args = TRAINING[name]
    tol = args.pop() if isinstance(args[-1], dict) else {}
    xs = [args[0].clone().requires_grad_() for _ in range(2)]
    out, expected = thunder.jit(fn)(xs[0], *args[1:]), fn(xs[1], *args[1:])
    out, expected = (out if isinstance(out, tuple) else (out,)), (expected if isinstance(expected, tuple) else (expected,))
    for a, e in zip(out, expected):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a, e, equal_nan=True, **tol)
    cts = [torch.rand_like(e) for e in expected]
    got = torch.autograd.grad(out, xs[0], cts)[0]
    want = torch.autograd.grad(expected, xs[1], cts)[0]
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, **(tol or dict(rtol=1e-5, atol=1e-6)))


def test_backward_is_one_elementwise_kernel():
    """No [N, C] one-hot, iota, zeros or log_softmax is written: the forward saves each row's
    logsumexp ([N, 1]), the backward is one kernel from it and the logits."""
    fn = TRAINING["mean_view"][0]
    x, t = r(2, N, C).requires_grad_(), _labels(2, N)
    jf = thunder.jit(fn)
    jf(x, t).backward()
    fwd, bwd = str(thunder.last_traces(jf)[-1]), str(thunder.last_backward_traces(jf)[-1])
    for program in (fwd, bwd):
        calls = [line.split("=", 1)[1].split("(")[0].strip() for line in program.splitlines()
                 if f"[{2 * N}, {C}]" in line and " = " in line]
        assert set(calls) <= {"torch.reshape", "fusion_0", "fusion_1"}, program
        for op in ("impl.full(", "torch.eq(", "impl.iota(", "torch.where(", "torch.log_softmax(", "torch.exp("):
            assert op not in program, program
    assert bwd.count("fusion_") == 1 and "float32[22, 1]" in bwd, bwd  # (the saved logsumexp of the rows)
