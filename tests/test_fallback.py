"""The fallback (thunder/ops/fallback.py): torch calls without a registry entry are recorded as
ltorch.torch_call, run as the torch call, and differentiated with torch's own derivative; where
torch decomposes them into registry ops, those are recorded instead."""
import copy
import functools

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_leaves

import thunder
from thunder.core import trace as tracing
from thunder.core.meta_eval import output_metadata
from thunder.core.proxies import DataDependentError, TensorProxy
from thunder.ops import fallback

DT = torch.float64


def _t(*shape, dtype=DT, requires_grad=True):
    return torch.randn(shape, dtype=dtype).requires_grad_(requires_grad)


def _grads(fn, args, cotangents=None):
    out = fn(*args)
    outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    inputs = [a for a in tree_leaves(args) if isinstance(a, torch.Tensor) and a.requires_grad]
    if cotangents is None:
        gen = torch.Generator().manual_seed(0)
        cotangents = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs]
    return out, torch.autograd.grad(outs, inputs, cotangents, allow_unused=True), cotangents


def check_like_eager(fn, *args, name, rtol=1e-7, atol=1e-9):
    """Values, result structure and gradients of thunder.jit(fn) against eager; `name` (the
    callable the fallback recorded; None: none to check) shows in the acquired MLIR and in the
    program that ran."""
    expected, expected_grads, cts = _grads(fn, args)
    jfn = thunder.jit(fn)
    out, grads, _ = _grads(jfn, args, cts)
    assert type(out) is type(expected)
    for a, b in zip(tree_leaves(out), tree_leaves(expected)):
        assert type(a) is type(b)
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
    for g, e in zip(grads, expected_grads):
        assert (g is None) == (e is None)
        if e is not None:
            torch.testing.assert_close(g, e, rtol=rtol, atol=atol)
    traces = thunder.last_traces(jfn)
    if name is not None:
        assert f'callable = "{name}"' in traces[0].to_mlir()
        assert f"{name}(" in str(traces[-1])
    return jfn


# (function, arguments, the callable the trace names)
OBSCURE = {
    "bessel_j0": (lambda x: torch.special.bessel_j0(x) * 2, lambda: (_t(3, 4),), "torch.special.bessel_j0"),
    "cumprod": (lambda x: torch.cumprod(x, 1), lambda: (_t(3, 4),), "torch.cumprod"),
    "cumprod_method_dtype": (lambda x: x.cumprod(0, dtype=DT), lambda: (_t(3, 4, dtype=torch.float32),),
                             "torch.Tensor.cumprod"),
    "aten_overload": (lambda x: torch.ops.aten.logcumsumexp.default(x, 0), lambda: (_t(5, 2),),
                      "torch.ops.aten.logcumsumexp.default"),
    "cummax": (lambda x: torch.cummax(x, 1), lambda: (_t(3, 5),), "torch.cummax"),
    "qr": (lambda x: torch.linalg.qr(x), lambda: (_t(5, 3),), "torch.linalg.qr"),
    "rfft_complex": (lambda x: torch.view_as_real(torch.fft.rfft(x)), lambda: (_t(2, 8),), "torch.fft.rfft"),
    "cdist_two_inputs": (lambda a, b: torch.cdist(a, b), lambda: (_t(4, 3), _t(5, 3)), "torch._C._VariableFunctions.cdist"),
}


@pytest.mark.parametrize("case", OBSCURE)
def test_unregistered_op_runs_differentiates_and_shows(case):
    fn, make_args, name = OBSCURE[case]
    check_like_eager(fn, *make_args(), name=name)


def test_gru_many_weights_nested_results():
    # nn.GRU calls torch.gru (no registry entry) with a list of 16 weights and returns (output, h)
    torch.manual_seed(0)
    gru = torch.nn.GRU(3, 4, num_layers=2, bidirectional=True).to(DT)
    x = _t(5, 2, 3)
    expected, h = gru(x)
    jgru = thunder.jit(gru)
    out, jh = jgru(x)
    for a, b in ((out, expected), (jh, h)):
        torch.testing.assert_close(a, b)
    g = torch.randn_like(out)
    expected_grads = torch.autograd.grad((expected, h), [x, *gru.parameters()], (g, torch.ones_like(h)))
    grads = torch.autograd.grad((out, jh), [x, *gru.parameters()], (g, torch.ones_like(jh)))
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b)
    assert 'callable = "torch.gru"' in thunder.last_traces(jgru)[0].to_mlir()


def test_random_op_forward_and_gradient_are_torchs():
    # F.rrelu in training mode draws a slope per element; the backward redraws the same ones
    def fn(x):
        return F.rrelu(x * 1, training=True)

    x = _t(4, 5)
    jfn = thunder.jit(fn)
    for _ in range(2):  # the second call draws new slopes, as eager does
        torch.manual_seed(1)
        expected, expected_grads, cts = _grads(fn, (x,))
        torch.manual_seed(1)
        out, grads, _ = _grads(jfn, (x,), cts)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
        torch.testing.assert_close(grads[0], expected_grads[0], rtol=0, atol=0)
    mlir = thunder.last_traces(jfn)[0].to_mlir()
    assert '"ltorch.torch_call_random"' in mlir and 'callable = "torch.rrelu"' in mlir
    assert "ltorch.rng_state" in mlir


def test_random_ops_are_not_merged():
    def fn(x):
        return torch.Tensor.exponential_(x * 1), torch.Tensor.exponential_(x * 1)

    x = torch.randn(100)
    a, b = thunder.jit(fn)(x)
    assert not torch.equal(a, b)


def test_decomposition_into_registry_ops_is_preferred_and_fuses():
    # F.hardshrink has no registry entry; torch._decomp decomposes it into abs/le/where
    def fn(x):
        return F.hardshrink(x, 0.3) * 2

    x = torch.randn(64, 32)
    jfn = thunder.jit(fn, fusion="always")
    torch.testing.assert_close(jfn(x), fn(x))
    traces = thunder.last_traces(jfn)
    assert "torch_call" not in traces[0].to_mlir()
    assert "ltorch.where" in traces[0].to_mlir()
    assert "fusion_0(" in str(traces[-1])
    x = _t(6, 7)
    expected, expected_grads, cts = _grads(fn, (x,))
    _, grads, _ = _grads(thunder.jit(fn), (x,), cts)
    torch.testing.assert_close(grads[0], expected_grads[0])


DECOMPOSED = {
    "logaddexp": lambda x, y: torch.logaddexp(x, y),
    "mish": lambda x, y: F.mish(x) * y,
    "elu": lambda x, y: F.elu(x, alpha=0.7) + y,
    "logsumexp": lambda x, y: torch.logsumexp(x * y, 1),
    "vector_norm": lambda x, y: torch.linalg.vector_norm(x + y, ord=3, dim=0),
    "xlogy": lambda x, y: torch.xlogy(x, y.abs() + 0.5),
    "kron": lambda x, y: torch.kron(x, y[:2, :2]),
}


@pytest.mark.parametrize("case", DECOMPOSED)
def test_decomposed_ops_values_and_gradients(case):
    fn = DECOMPOSED[case]
    args = _t(3, 4), _t(3, 4)
    expected, expected_grads, cts = _grads(fn, args)
    jfn = thunder.jit(fn)
    out, grads, _ = _grads(jfn, args, cts)
    torch.testing.assert_close(out, expected)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e)
    assert "torch_call" not in thunder.last_traces(jfn)[0].to_mlir()


def test_decomposed_factory_is_on_the_calls_device():
    # new_ones decomposes into full(..., device=x.device): the decomposition ran on meta tensors,
    # and its device=meta must become the call's device (as transformers' masks do it)
    def fn(x):
        return x.new_ones((), dtype=torch.bool) & (x > 0), x.new_zeros(2) + 1

    x = torch.randn(3)
    jfn = thunder.jit(fn)
    for a, b in zip(jfn(x), fn(x)):
        assert a.device == b.device
        torch.testing.assert_close(a, b)
    assert "meta" not in str(thunder.last_traces(jfn)[-1])


def test_inplace_method_with_out_of_place_form():
    # x.cumprod_(1) is recorded as torch.Tensor.cumprod and assigned: the caller's tensor changes;
    # the program (no autograd history, x's old value not read after) runs it in place again
    # (runtime/reinplace.py), with no copy back
    def fn(x):
        x.cumprod_(1)
        return x * 2

    x, y = torch.randn(3, 4), None
    y = x.clone()
    jfn = thunder.jit(fn)
    torch.testing.assert_close(jfn(x), fn(y))
    torch.testing.assert_close(x, y)
    program = str(thunder.last_traces(jfn)[-1])
    assert "torch.Tensor.cumprod_(x, 1)" in program and "copy_" not in program, program
    assert "torch.Tensor.cumprod(" in str(thunder.last_traces(jfn)[0])  # (the trace records it functionally)


def test_inplace_without_out_of_place_form_runs_on_a_clone():
    def fn(x):
        y = x * 1
        y.fill_diagonal_(2.5)
        return y

    x = _t(4, 4)
    jfn = check_like_eager(fn, x, name="torch.Tensor.fill_diagonal_")
    assert ".clone()" in str(thunder.last_traces(jfn)[-1])


def test_inplace_true_keyword_and_shape_changing_inplace():
    def fn(x):
        y = x * 1
        y.unsqueeze_(0)  # changes y's shape in place: torch's call on a clone
        F.rrelu(y, training=False, inplace=True)  # torch.rrelu_ -> torch.rrelu, assigned to y
        z = x * 3
        F.relu(z, inplace=True)  # the registered op refuses inplace=True: F.relu(z), assigned to z
        return y + z

    x = _t(3, 4)
    jfn = check_like_eager(fn, x, name="torch.Tensor.unsqueeze_")
    program = str(thunder.last_traces(jfn)[-1])
    assert "torch.rrelu(" in program and "rrelu_" not in program
    assert "torch.nn.functional.relu(" in program and "inplace=True" not in program


@pytest.mark.parametrize("case", ["copy", "scalar", "tensor", "lists"])
def test_foreach_inplace_updates_reach_the_inputs(case):
    # an op writing a tensor list leaves _version as it was under a dispatch mode: the write of a
    # fallback call was missed and the program dropped the call (the inputs stayed unchanged,
    # silently); the others are per-tensor ops (ops/foreach.py)
    def fn(a, b, t):
        if case == "copy":
            torch._foreach_copy_([a, b], [a.exp(), b * t])
        elif case == "scalar":
            torch._foreach_mul_([a, b], 3.0)
        elif case == "tensor":
            torch._foreach_mul_([a, b], t)
        else:
            torch._foreach_add_([a, b], [t, t], alpha=2)
        return a.sum() + b.sum()

    args = [torch.randn(3), torch.randn(2), torch.tensor(2.0)]
    mine = [x.clone() for x in args]
    torch.testing.assert_close(thunder.jit(fn)(*mine), fn(*args))
    for a, e in zip(mine, args):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("form", ["scalar", "scalars", "lists", "tensor", "value_tensor", "unary", "pow"])
def test_foreach_calls_are_the_per_tensor_ops(form):
    # (ops/foreach.py: an optimizer's foreach step fuses like its per-tensor form)
    def fn(x, y, t):
        a, b = x * 1, y * 2
        if form == "scalar":
            torch._foreach_mul_([a, b], 2.5)
            out = torch._foreach_add([a, b], [x, y], alpha=-0.5)
        elif form == "scalars":
            out = torch._foreach_div([a, b], [2.0, 3.0])
        elif form == "lists":
            torch._foreach_lerp_([a, b], [x, y], 0.3)
            out = torch._foreach_maximum([a, b], [x, y])
        elif form == "tensor":
            out = torch._foreach_mul([a, b], t)
        elif form == "value_tensor":  # (one value per tensor, read as a number: Adam's step sizes)
            with torch.no_grad():  # (eager has no derivative for it)
                torch._foreach_addcdiv_([a, b], [x, y], [x.exp(), y.exp()], torch.stack([t, t * 2]))
            out = torch._foreach_addcmul([a, b], [x, y], [x, y], 0.5)
        elif form == "unary":
            out = torch._foreach_sqrt(torch._foreach_abs([a, b]))
        else:
            out = torch._foreach_pow(2.0, [a, b])
        return out, a, b

    jfn = check_like_eager(fn, _t(3), _t(2, 2), torch.tensor(0.7, dtype=DT), name=None)
    assert "_foreach" not in str(thunder.last_traces(jfn)[0].to_mlir())


def test_clip_grad_norm_inside_the_jitted_function():
    # clip_grad_norm_ groups the gradients by device and dtype (torch._C's own function, which
    # refused the proxies with a TypeError), then scales them in place (torch._foreach_mul_)
    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        model[2].double()
        x = torch.randn(5, 8)
        model[2](model[1](model[0](x)).double()).pow(2).sum().backward()  # (grads of two dtypes)
        return model

    def clip(model, max_norm):
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    for max_norm in (0.1, 1e6):  # (scaled, and left as they were)
        model, reference = make(), make()
        torch.testing.assert_close(thunder.jit(clip)(model, max_norm), clip(reference, max_norm))
        for p, q in zip(model.parameters(), reference.parameters()):
            assert p.grad.dtype == q.grad.dtype
            torch.testing.assert_close(p.grad, q.grad)


def test_out_variant():
    def fn(x, out):
        torch.cumprod(x, 0, out=out)
        return out + 1

    x, out = torch.randn(3, 4), torch.empty(3, 4)
    out_eager = torch.empty(3, 4)
    jfn = thunder.jit(fn)
    torch.testing.assert_close(jfn(x, out), fn(x, out_eager))
    torch.testing.assert_close(out, out_eager)
    assert "torch.cumprod(x, 0)" in str(thunder.last_traces(jfn)[-1])


def test_inplace_on_leaf_that_requires_grad_is_eagers_error():
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        thunder.jit(lambda x: x.fill_diagonal_(1.0))(_t(3, 3))


def test_properties_and_metadata_calls():
    def fn(x):
        c = torch.complex(x, x * 2)
        return c.imag + c.real, x.get_device(), torch.numel(x), x.is_signed()

    x = torch.randn(2, 3)
    jfn = thunder.jit(fn)
    out, expected = jfn(x), fn(x)
    torch.testing.assert_close(out[0], expected[0])
    assert out[1:] == expected[1:]


def test_untraceable_call_names_call_line_and_workaround():
    class Sub(torch.Tensor):
        pass

    with pytest.raises(NotImplementedError, match=r"torch.Tensor.as_subclass at .*test_fallback.py:\d+ cannot be "
                                                  r"traced.*Workaround"):
        thunder.jit(lambda x: x.as_subclass(Sub))(torch.randn(2))
    with pytest.raises(NotImplementedError, match=r"memory.*Workaround"):
        thunder.jit(lambda x: x.data_ptr())(torch.randn(2))


def test_real_tensor_from_native_code_is_refused_naming_the_call():
    @functools.lru_cache  # (its C wrapper calls the function natively: its tensors are real, not inputs)
    def made_natively():
        return torch.ones(3)

    def fn(x):
        return torch.cumprod(made_natively(), 0) + x

    with pytest.raises(NotImplementedError, match=r"torch.cumprod at .*test_fallback.py:\d+ cannot be traced: it "
                                                  r"got a tensor of shape \(3,\) that is not an input"):
        thunder.jit(fn)(torch.randn(3))


def test_data_dependent_call_raises_naming_call_and_line():
    # (inside thunder.jit, calls whose result shapes depend on values run at a split:
    # tests/test_data_dependent.py; without values, e.g. in a decomposition, they raise)
    with tracing.tracing(tracing.TraceCtx()), pytest.raises(DataDependentError, match=r"torch.nonzero.* needs the values"):
        fallback.call(torch.nonzero, TensorProxy((3,), torch.float32, "cpu", name="x"))


def test_errors_are_eagers():
    fn = lambda x: torch.cumprod(x, 3)  # noqa: E731
    with pytest.raises(IndexError) as eager:
        fn(torch.randn(2, 2))
    with pytest.raises(IndexError, match=str(eager.value).split("(")[0]):
        thunder.jit(fn)(torch.randn(2, 2))


def test_factories_without_tensor_arguments():
    def fn(x):
        return x * torch.hann_window(4, dtype=x.dtype), x[torch.randperm(3)]

    x = torch.randn(3, 4)
    jfn = thunder.jit(fn)
    for _ in range(2):
        torch.manual_seed(0)
        out = jfn(x)
        torch.manual_seed(0)
        for a, b in zip(out, fn(x)):
            torch.testing.assert_close(a, b)
    mlir = thunder.last_traces(jfn)[0].to_mlir()
    assert 'callable = "torch.randperm"' in mlir  # (hann_window decomposes into registry ops)
    assert "torch_call" in mlir and "hann_window" not in mlir


def test_autocast_region_inside_the_function():
    # torch.baddbmm is in autocast's lower-precision list: it runs in bfloat16, as in eager
    def fn(b, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.baddbmm(b, x, y)

    args = torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    out, expected = thunder.jit(fn)(*args), fn(*args)
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected)


def test_no_grad_region():
    def fn(x):
        with torch.no_grad():
            y = torch.special.bessel_j0(x)
        return x * y

    x = _t(3)
    out = thunder.jit(fn)(x)
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(g, torch.special.bessel_j0(x).detach())


def test_long_tensor_lists_of_one_type():
    # 40 results of one type are one run of the variadic result group (no slot limit)
    def fn(x):
        parts = torch.unbind(x)
        return torch.stack(parts[::-1]) + torch.cat([x] * 40).sum()

    x = torch.randn(40, 3)
    torch.testing.assert_close(thunder.jit(fn)(x), fn(x))


def test_is_compiling_answers_true_inside():
    transformers_utils = pytest.importorskip("transformers.utils", reason="transformers is not installed")
    is_torchdynamo_compiling = transformers_utils.is_torchdynamo_compiling

    import torch._dynamo

    def fn(x):
        yes = torch.compiler.is_compiling() and is_torchdynamo_compiling() and torch._dynamo.is_compiling()
        return x + (1 if yes else 0)

    x = torch.zeros(2)
    assert not torch.compiler.is_compiling()
    torch.testing.assert_close(thunder.jit(fn)(x), torch.ones(2))


def test_output_metadata_is_reusable():
    # the meta evaluation the fallback uses, on proxies (for data-dependent splits later)
    x = TensorProxy((3, 5), torch.float32, "cpu", name="x")
    out = output_metadata(torch.sort, (x, 1), {})
    assert type(out) is torch.return_types.sort
    assert [(tuple(t.shape), t.dtype) for t in out] == [((3, 5), torch.float32), ((3, 5), torch.int64)]
    assert output_metadata(torch.Tensor.dim, (x,), {}) == 2
    with pytest.raises(DataDependentError, match="torch.Tensor.item"):
        output_metadata(torch.Tensor.item, (TensorProxy((), torch.float32, "cpu", name="s"),), {})


def test_sdpa_with_dropout_in_training_runs_as_torchs_call():
    # (RoBERTa, DistilBERT, T5 in training): the dropout mask is drawn inside torch's kernel, so the
    # registered op leaves the call to the fallback, whose gradient replays the same draw
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3) * 2

    q, k, v = _t(2, 2, 8, 4), _t(2, 2, 8, 4), _t(2, 2, 8, 4)
    jfn = thunder.jit(fn)
    for seed in (1, 2):
        torch.manual_seed(seed)
        expected, expected_grads, cts = _grads(fn, (q, k, v))
        torch.manual_seed(seed)
        out, grads, _ = _grads(jfn, (q, k, v), cts)
        torch.testing.assert_close(out, expected)
        for g, e in zip(grads, expected_grads):
            torch.testing.assert_close(g, e)
    assert 'callable = "torch.nn.functional.scaled_dot_product_attention"' in thunder.last_traces(jfn)[0].to_mlir()


def test_torch_is_asked_only_for_the_gradients_the_program_needs():
    # torch has no derivative for some arguments (batch_norm's running statistics inside
    # instance_norm, binary_cross_entropy_with_logits' pos_weight) and refuses to compute the
    # call's gradient where they require grad: torch's gradient of a fallback call is asked for the
    # arguments that need one only
    norm = torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True).double()
    reference = copy.deepcopy(norm)
    x = _t(2, 3, 4, 4)
    expected, (expected_dx, expected_dw) = reference(x), torch.autograd.grad(reference(x).pow(2).sum(), (x, reference.weight))
    jitted = thunder.jit(norm)
    out = jitted(x)
    dx, dw = torch.autograd.grad(jitted(x).pow(2).sum(), (x, norm.weight))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(dx, expected_dx)
    torch.testing.assert_close(dw, expected_dw)
    torch.testing.assert_close(norm.running_mean, reference.running_mean)  # (four calls each)

    def loss(x, target):
        return F.binary_cross_entropy_with_logits(x, target, pos_weight=torch.tensor([1.0, 2.0, 3.0], dtype=DT))

    check_like_eager(loss, _t(4, 3), torch.rand(4, 3, dtype=DT),
                     name="torch.binary_cross_entropy_with_logits")


def test_a_write_torch_makes_under_no_grad_inside_a_call_is_allowed_on_a_leaf():
    # F.embedding with max_norm renormalizes the rows it reads in the weight, in place under
    # no_grad (eager allows it on a parameter); the gradient then flows to the weight as eager's
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Embedding(10, 4, max_norm=1.0), torch.nn.Linear(4, 2))

    ids = torch.tensor([[1, 2], [1, 9]])
    model, reference = make(), make()
    jitted = thunder.jit(model)
    for _ in range(2):
        out, expected = jitted(ids), reference(ids)
        torch.testing.assert_close(out, expected)
        out.sum().backward(), expected.sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)  # (the renormalized rows)
        torch.testing.assert_close(p.grad, q.grad)
    assert model[0].weight[1].norm() <= 1.0 + 1e-6

    def written_with_grad(w):  # (a write autograd records: eager's error)
        return w.mul_(2)

    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
        thunder.jit(written_with_grad)(_t(3))


@pytest.mark.parametrize("case", ["mean", "none_concatenated", "sum_zero_infinity", "lists", "unbatched"])
def test_ctc_loss_runs_as_torchs_call(case):
    # aten._ctc_loss sizes a table by the longest target (values decide it), which torch.ctc_loss
    # reduces away: its result's shape does not depend on values (Wav2Vec2ForCTC's loss)
    T = torch.tensor
    targets, input_lengths, target_lengths, kwargs = {
        "mean": (T([[1, 2, 2], [3, 1, 1]]), T([6, 6]), T([3, 2]), {}),
        "none_concatenated": (T([1, 2, 2, 3, 1]), T([6, 5]), T([3, 2]), {"reduction": "none"}),
        "sum_zero_infinity": (T([[1, 2, 2, 2, 2], [3, 1, 1, 1, 1]]), T([3, 6]), T([5, 2]),
                              {"reduction": "sum", "zero_infinity": True}),
        "lists": (T([[1, 2, 2], [3, 1, 1]]), [6, 6], [3, 2], {}),
        "unbatched": (T([1, 2, 2]), T(6), T(3), {}),
    }[case]

    def loss(logits):
        return F.ctc_loss(logits.log_softmax(-1), targets, input_lengths, target_lengths, **kwargs)

    logits = _t(6, 5) if case == "unbatched" else _t(6, 2, 5)
    check_like_eager(loss, logits, name="torch.ctc_loss")


@pytest.mark.parametrize("bag", [False, True])
def test_sparse_embedding_gradients_are_sparse_as_eagers(bag):
    # (recommender models train sparse=True tables with SparseAdam, which refuses dense gradients)
    def make():
        torch.manual_seed(0)
        return (torch.nn.EmbeddingBag(10, 4, mode="sum", sparse=True) if bag else
                torch.nn.Embedding(10, 4, sparse=True))

    model, reference = make(), make()
    jitted = thunder.jit(model)
    optimizers = [torch.optim.SparseAdam(list(m.parameters()), lr=0.1) for m in (model, reference)]
    for step in range(3):
        ids = torch.tensor([[1, 2, 1], [4, 2, 0]]) + step
        for m, opt in zip((jitted, reference), optimizers):
            out = m(ids)
            opt.zero_grad()
            (out * torch.linspace(0, 1, out.numel()).reshape(out.shape)).sum().backward()
        assert model.weight.grad.layout == reference.weight.grad.layout == torch.sparse_coo
        torch.testing.assert_close(model.weight.grad.to_dense(), reference.weight.grad.to_dense())
        for opt in optimizers:
            opt.step()
    torch.testing.assert_close(model.weight, reference.weight)
