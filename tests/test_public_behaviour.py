"""Thunder's public behaviour against eager PyTorch (issue 12): grad mode inside the function,
what comes back (inputs, parameters, constants, Python objects, structures), custom
torch.autograd.Function, inputs and state, and the API surface."""
import collections
import dataclasses
import functools
import itertools

import pytest
import torch

import thunder


def _same_autograd(out, ref):
    """out has what eager's ref has: requires_grad, a grad_fn or none, inference or not."""
    assert out.requires_grad == ref.requires_grad
    assert (out.grad_fn is None) == (ref.grad_fn is None)
    assert out.is_inference() == ref.is_inference()


# ---------------------------------------------------------------------------------------------
# 1. Grad mode inside the function


def _no_grad(x, y):
    with torch.no_grad():
        return x * 2, y + 1


def _set_grad_enabled(x, y):
    torch.set_grad_enabled(False)
    a = x * 2
    torch.set_grad_enabled(True)
    return a, x * y


def _set_grad_enabled_ctx(x, y):
    with torch.set_grad_enabled(False):
        a = x * 2
    return a, y.sin()


def _enable_grad_in_no_grad(x, y):
    with torch.no_grad():
        a = x * 3
        with torch.enable_grad():
            b = x * y
    return a, b


def _inference_mode(x, y):
    with torch.inference_mode():
        a = x * 2
    return a, x + y


def _inference_mode_disabled(x, y):
    with torch.inference_mode():
        a = x * 2
        with torch.inference_mode(False):
            b = y * 2
    return a, b


def _returns_inputs(x, y):
    return x, y, x * 2


def _returns_input_under_no_grad(x, y):
    with torch.no_grad():
        return x, y.cos()


FUNCTIONS = [_no_grad, _set_grad_enabled, _set_grad_enabled_ctx, _enable_grad_in_no_grad, _inference_mode,
             _inference_mode_disabled, _returns_inputs, _returns_input_under_no_grad]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("x_grad,y_grad,outer", [c for c in itertools.product([True, False], repeat=3)])
def test_grad_mode_inside_the_function_matches_eager(fn, x_grad, y_grad, outer):
    x = torch.randn(3, requires_grad=x_grad)
    y = torch.randn(3, requires_grad=y_grad)
    jfn = thunder.jit(fn)
    with torch.set_grad_enabled(outer):
        ref = fn(x, y)
        out = jfn(x, y)
    assert torch.is_grad_enabled()  # the function's set_grad_enabled does not leak
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r)
        _same_autograd(o, r)
        assert (o is x) == (r is x) and (o is y) == (r is y)
    # gradients where eager has them
    pairs = [(o, r) for o, r in zip(out, ref) if r.requires_grad and r is not x and r is not y]
    if pairs:
        leaves = [t for t in (x, y) if t.requires_grad]
        g_out = torch.autograd.grad(sum(o.sum() for o, _ in pairs), leaves, allow_unused=True)
        g_ref = torch.autograd.grad(sum(r.sum() for _, r in pairs), leaves, allow_unused=True)
        for a, b in zip(g_out, g_ref):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b)


def test_returned_input_is_the_input_itself_also_after_an_in_place_update():
    def f(x, buf):
        buf.add_(1)
        return x, buf

    x, buf = torch.randn(3, requires_grad=True), torch.zeros(3)
    jf = thunder.jit(f)
    a, b = jf(x, buf)
    assert a is x and b is buf
    torch.testing.assert_close(buf, torch.ones(3))
    a, b = jf(x, buf)  # the cached program
    assert a is x and b is buf
    torch.testing.assert_close(buf, torch.full((3,), 2.0))


# ---------------------------------------------------------------------------------------------
# 2. Outputs


class _WithState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.register_buffer("scale", torch.ones(2))

    def forward(self, x):
        return self.lin(x) * self.scale, self.lin.weight, self.scale, self.lin


@pytest.mark.parametrize("requires_grad", [True, False])
def test_returned_parameters_and_buffers_are_the_modules_own(requires_grad):
    m = _WithState()
    tm = thunder.jit(m)
    x = torch.randn(4, 3, requires_grad=requires_grad)
    for _ in range(2):
        out, w, scale, lin = tm(x)
        ref = m(x)
        torch.testing.assert_close(out, ref[0])
        assert w is m.lin.weight and scale is m.scale and lin is m.lin
        _same_autograd(out, ref[0])


def test_constant_tensors_created_inside_are_fresh_each_call():
    def f(x):
        return x + 1, torch.tensor([1.0, 2.0]), torch.ones(3), torch.arange(4)

    jf = thunder.jit(f)
    x = torch.randn(2, requires_grad=True)
    first = jf(x)
    second = jf(x)
    for o, r in zip(second, f(x)):
        torch.testing.assert_close(o, r)
        _same_autograd(o, r)
    assert first[1] is not second[1]
    first[2].add_(1)  # eager gives a new tensor per call: updating one does not change the next
    torch.testing.assert_close(jf(x)[2], torch.ones(3))


class _Point(collections.namedtuple("_Point", "a b")):
    def total(self):
        return self.a + self.b


@dataclasses.dataclass
class _Out:
    loss: torch.Tensor
    extra: tuple


def test_python_objects_and_structures_come_back_as_they_are():
    def f(x):
        return (torch.finfo(x.dtype), torch.iinfo(torch.int32), "s", int, len, None, x.dtype,
                _Point(x, x * 2), _Out(x.sum(), (x, 3)))

    jf = thunder.jit(f)
    x = torch.randn(3)
    out, ref = jf(x), f(x)
    assert out[:7] == ref[:7]
    assert type(out[7]) is _Point and out[7].a is x
    torch.testing.assert_close(out[7].total(), ref[7].total())
    assert type(out[8]) is _Out and out[8].extra[0] is x and out[8].extra[1] == 3
    torch.testing.assert_close(out[8].loss, ref[8].loss)


def test_model_output_subclass_keeps_its_type_keys_and_inputs():
    modeling_outputs = pytest.importorskip("transformers.modeling_outputs", reason="transformers is not installed")

    def f(x):
        return modeling_outputs.CausalLMOutputWithPast(loss=(x * 2).sum(), logits=x)

    x = torch.randn(2, 3, requires_grad=True)
    out, ref = thunder.jit(f)(x), f(x)
    assert type(out) is type(ref) and list(out.keys()) == list(ref.keys()) == ["loss", "logits"]
    assert out.logits is x and out[1] is x and out.past_key_values is None
    torch.testing.assert_close(out.loss, ref.loss)
    _same_autograd(out.loss, ref.loss)


class _Holder:
    def __init__(self, t, u):
        self.t, self.u = t, u


def test_objects_made_inside_holding_tensors_come_back_with_real_tensors():
    def f(x):
        return _Holder(x, x * 2), _Holder(x, 3)

    x = torch.randn(3, requires_grad=True)
    jf = thunder.jit(f)
    for _ in range(2):
        (a, b), (ea, eb) = jf(x), f(x)
        assert type(a) is _Holder and type(b) is _Holder and a is not b
        assert a.t is x and b.t is x and b.u == 3
        torch.testing.assert_close(a.u, ea.u)
        _same_autograd(a.u, ea.u)


# ---------------------------------------------------------------------------------------------
# 5. API surface


def _add(a, b):
    return a * 2 + b


@pytest.mark.parametrize("option", list(thunder.CACHE_OPTIONS))
def test_cache_options_enum_and_strings(option):
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    for cache in (option, option.value):
        jf = thunder.jit(_add, cache=cache)
        assert thunder.cache_option(jf) is option and thunder.cache_option(jf) == option.value
        for _ in range(2):
            torch.testing.assert_close(jf(a, b), _add(a, b))
        misses = {"constant values": 1, "same input": 1, "no caching": 2, "symbolic values": 1}[option.value]
        assert thunder.cache_misses(jf) == misses
    with pytest.raises(ValueError, match="unknown cache option 'sometimes'"):
        thunder.jit(_add, cache="sometimes")


def test_no_caching_recompiles_by_design_without_the_recompile_warning():
    import warnings

    jf = thunder.jit(_add, cache=thunder.CACHE_OPTIONS.NO_CACHING, recompile_limit=1)
    a = torch.randn(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(4):
            jf(a, a)
    assert thunder.compile_stats(jf).miss_reasons == ["first call"] + ["cache option 'no caching'"] * 3


def test_compile_stats_lists_every_recompile_and_its_reason():
    jf = thunder.jit(_add)
    jf(torch.randn(2, 3), torch.randn(2, 3))
    jf(torch.randn(2, 3), torch.randn(2, 3))
    jf(torch.randn(4, 3), torch.randn(4, 3))
    jf(torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3))
    stats = thunder.compile_stats(jf)
    assert stats.cache_misses == 3 and len(stats.miss_reasons) == 3
    assert stats.miss_reasons[0] == "first call"
    # (the strides too: the result's layout follows the inputs', so the entry checks them)
    assert stats.miss_reasons[1] == ("tensor argument 0: shape changed (((2, 3), torch.float32, device(type='cpu'), "
                                     "False, (3, 1)) -> ((4, 3), torch.float32, device(type='cpu'), False, (3, 1)))")
    assert stats.miss_reasons[2].startswith("tensor argument 0: dtype changed")
    assert stats.last_miss_reason == stats.miss_reasons[-1]


def test_traces_args_python_callable_and_save_trace(tmp_path):
    jf = thunder.jit(_add)
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    jf(a, b)
    traces = thunder.last_traces(jf)
    first, last = traces[0], traces[-1]
    assert [(r.name, r.shape, r.dtype) for r in first.args] == [("a", (2, 3), torch.float32),
                                                                 ("b", (2, 3), torch.float32)]
    for trace in (first, last):
        torch.testing.assert_close(trace.python_callable()(a, b), _add(a, b))
    assert thunder.last_prologue_traces(jf)[0].args == ["args", "kwargs"]
    path = tmp_path / "trace.py"
    last.save_trace(path)
    assert path.read_text() == str(last)
    namespace = {}
    from thunder.ops.execute import NAMESPACE

    namespace.update(NAMESPACE)
    exec(path.read_text(), namespace)
    torch.testing.assert_close(namespace["computation"](a, b), _add(a, b))


def test_training_traces_python_callable_runs_forward_and_backward():
    jf = thunder.jit(lambda x: (x.sin() * 2).sum())
    x = torch.randn(5, requires_grad=True)
    jf(x).backward()
    fwd = thunder.last_traces(jf)[-1].python_callable()
    torch.testing.assert_close(fwd(x), (x.sin() * 2).sum())
    bwd_trace = thunder.last_backward_traces(jf)[-1]
    assert bwd_trace.python_callable() is not None and "def backward(" in str(bwd_trace)


def test_thunder_module_forwards_attributes_and_loads_original_state_dict():
    m = torch.nn.Linear(3, 2)
    m.custom = "hello"
    tm = thunder.jit(m)
    assert tm.weight is m.weight and tm.bias is m.bias and tm.custom == "hello" and tm.in_features == 3
    with pytest.raises(AttributeError):
        tm.not_there
    state = {k: torch.randn_like(v) for k, v in m.state_dict().items()}
    tm.load_original_state_dict(state)
    x = torch.randn(4, 3)
    torch.testing.assert_close(tm(x), torch.nn.functional.linear(x, state["weight"], state["bias"]))
    assert tm.weight is m.weight


def test_debug_options_check_traces_verifies_every_pass():
    seen = []

    def breaks_the_trace(module):
        seen.append(True)
        from thunder.dialects.mlir import ir

        with module.context:
            func = module.body.operations[0]
            ret = func.regions[0].blocks[0].operations[len(func.regions[0].blocks[0].operations) - 1]
            ret.operation.erase()  # a func without its terminator does not verify

    jf = thunder.jit(_add, debug_options=thunder.DebugOptions(check_traces=True))
    a, b = torch.randn(2), torch.randn(2)
    torch.testing.assert_close(jf(a, b), _add(a, b))
    jbad = thunder.jit(_add, transforms=[breaks_the_trace], debug_options=thunder.DebugOptions(check_traces=True))
    with pytest.raises(RuntimeError, match="after breaks_the_trace does not verify"):
        jbad(torch.randn(2), torch.randn(2))
    assert seen


# ---------------------------------------------------------------------------------------------
# 3. Custom torch.autograd.Function


class _ScaleTenfold(torch.autograd.Function):
    """Its backward is not the derivative (10x): proves the user's backward is the one used."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, g):
        return g * ctx.k * 10, None


class _Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


class _MulAdd(torch.autograd.Function):
    """Two tensor inputs, a non-tensor input, two outputs; records needs_input_grad."""
    seen = []

    @staticmethod
    def forward(ctx, a, b, alpha):
        ctx.save_for_backward(a, b)
        ctx.alpha = alpha
        return a * b, a + alpha * b

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_mul, g_add):
        a, b = ctx.saved_tensors
        _MulAdd.seen.append(ctx.needs_input_grad)
        ga = g_mul * b + g_add if ctx.needs_input_grad[0] else None
        gb = g_mul * a + ctx.alpha * g_add if ctx.needs_input_grad[1] else None
        return ga, gb, None


class _NoMaterialize(torch.autograd.Function):
    seen = []

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, g_sin, g_cos):
        _NoMaterialize.seen.append((g_sin is None, g_cos is None))
        return g_sin * 3 if g_sin is not None else None


class _SortValues(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        values, indices = x.sort()
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        return values, indices

    @staticmethod
    def backward(ctx, g, _):
        (indices,) = ctx.saved_tensors
        return torch.zeros_like(g).scatter(0, indices, g)


class _SetupContextSquare(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class _DoubleInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


def _custom_functions(x, y):
    a = _ScaleTenfold.apply(x, 3.0)
    b = _Exp.apply(a)
    c, d = _MulAdd.apply(b, y, 0.5)
    e, _ = _NoMaterialize.apply(d)
    v, i = _SortValues.apply(c)
    s = _SetupContextSquare.apply(e)
    t = _DoubleInPlace.apply(s * 1)
    return t, v, i


@pytest.mark.parametrize("x_grad,y_grad", [(True, True), (True, False), (False, True), (False, False)])
def test_custom_autograd_functions_use_the_users_backward(x_grad, y_grad):
    # (float64: the chain of exp, sin, squares rounds differently in thunder's fused kernels)
    x = torch.randn(5, dtype=torch.float64, requires_grad=x_grad)
    y = torch.randn(5, dtype=torch.float64, requires_grad=y_grad)
    jfn = thunder.jit(_custom_functions)
    _MulAdd.seen.clear()
    _NoMaterialize.seen.clear()
    ref = _custom_functions(x, y)
    seen_eager = (list(_MulAdd.seen), list(_NoMaterialize.seen))
    for _ in range(2):  # the first call and the cached program
        out = jfn(x, y)
        for o, r in zip(out, ref):
            torch.testing.assert_close(o, r)
            _same_autograd(o, r)
    leaves = [t for t in (x, y) if t.requires_grad]
    if not leaves:
        return
    g = torch.randn(5, dtype=torch.float64)
    _MulAdd.seen.clear()
    _NoMaterialize.seen.clear()
    expected = torch.autograd.grad((ref[0] * g).sum() + ref[1].sum(), leaves)
    seen_eager = (list(_MulAdd.seen), list(_NoMaterialize.seen))
    _MulAdd.seen.clear()
    _NoMaterialize.seen.clear()
    got = torch.autograd.grad((out[0] * g).sum() + out[1].sum(), leaves)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    assert (_MulAdd.seen, _NoMaterialize.seen) == seen_eager
    assert "impl.autograd_function_backward('_MulAdd#" in str(thunder.last_backward_traces(jfn)[-1])


def test_custom_autograd_function_forward_is_traced():
    jfn = thunder.jit(lambda x: _Exp.apply(x) + 1)
    x = torch.randn(3, requires_grad=True)
    jfn(x)
    first = thunder.last_traces(jfn)[0].to_mlir()
    assert '"ltorch.exp"' in first and '"ltorch.autograd_function"' in first
    jfn(x.detach())  # no gradient needed: the forward's ops only
    assert "autograd_function" not in thunder.last_traces(jfn)[0].to_mlir()


def test_custom_autograd_function_backward_errors_as_eager():
    class WrongShape(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g[:1]

    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="returned an invalid gradient at index 0"):
        WrongShape.apply(x).sum().backward()
    with pytest.raises(RuntimeError, match="returned an invalid gradient at index 0"):
        thunder.jit(WrongShape.apply)(x).sum().backward()


def test_custom_autograd_function_backward_returning_none_leaves_grad_none():
    class FirstOnly(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g * 2, None

    def f(x, y, z):
        return FirstOnly.apply(x, y).sum() + FirstOnly.apply(z, x).sum() + (z * 3).sum()

    grads = []
    for fn in (f, thunder.jit(f)):
        x, y, z = (torch.randn(3, requires_grad=True) for _ in range(3))
        fn(x, y, z).backward()
        grads.append((x.grad, y.grad, z.grad))
    assert grads[1][1] is None and grads[0][1] is None  # (was zeros: y.grad must stay None as in eager)
    torch.testing.assert_close(grads[1][0], grads[0][0])  # x: one gradient, and the other apply's None
    torch.testing.assert_close(grads[1][2], grads[0][2])


# ---------------------------------------------------------------------------------------------
# 4. Inputs and state


def test_isinstance_parameter_inside_jitted_code():
    def f(w, x):
        y = w * 2
        return (isinstance(w, torch.nn.Parameter), isinstance(x, torch.nn.Parameter),
                isinstance(y, torch.nn.Parameter), isinstance(w, torch.Tensor))

    w, x = torch.nn.Parameter(torch.randn(2)), torch.randn(2)
    assert thunder.jit(f)(w, x) == f(w, x) == (True, False, False, True)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x):
            n = 0
            for p in (self.lin.weight, self.lin.bias, x):
                n += isinstance(p, torch.nn.Parameter)
            return self.lin(x) * n

    m = M()
    torch.testing.assert_close(thunder.jit(m)(x), m(x))


def test_type_and_class_of_tensors_and_numbers_inside_jitted_code():
    def f(w, x, n):
        k, size = n.item(), x.shape[0]
        y = x * 2 if type(x) is torch.Tensor else x  # (was silently x: type() gave the proxy's class)
        return y, (type(w), type(x), type(y), type(k), x.__class__, w.__class__, k.__class__, type(size))

    w, x, n = torch.nn.Parameter(torch.randn(2)), torch.randn(3), torch.tensor(1.5)
    out, types = thunder.jit(f)(w, x, n)
    torch.testing.assert_close(out, f(w, x, n)[0])
    assert types == f(w, x, n)[1] == (torch.nn.Parameter, torch.Tensor, torch.Tensor, float, torch.Tensor,
                                      torch.nn.Parameter, float, int)


def test_generators_inside_jitted_code_see_tensors_as_eager_does():
    def pairs(xs):
        for a, b in zip(xs, xs[1:]):
            yield a * b if isinstance(a, torch.Tensor) else a

    def f(xs, w):
        n = sum(isinstance(x, torch.Tensor) for x in xs)  # run by native sum(): was 0 inside jit
        all_params = all(isinstance(p, torch.nn.Parameter) for p in (w,))
        firsts = list(x[0] for x in xs if type(x) is torch.Tensor)
        return xs[0] * n + all_params, torch.stack(firsts), sum(pairs(xs))

    xs, w = [torch.randn(3), torch.randn(3), torch.randn(3)], torch.nn.Parameter(torch.randn(3))
    jf = thunder.jit(f)
    for out, ref in zip(jf(xs, w), f(xs, w)):
        torch.testing.assert_close(out, ref)


def test_callbacks_of_builtins_inside_jitted_code_see_tensors_as_eager_does():
    def f(xs):
        flags = list(map(lambda x: isinstance(x, torch.Tensor), xs))  # called by native map: was all False
        tensors = list(filter(lambda x: type(x) is torch.Tensor, xs))
        order = sorted(range(3), key=lambda i: -float(isinstance(xs[i], torch.Tensor)))
        total = functools.reduce(lambda acc, x: acc + (x if isinstance(x, torch.Tensor) else 0), xs, 0)
        return flags, len(tensors), order, total

    xs = [torch.randn(2), 3, torch.randn(2)]
    out, ref = thunder.jit(f)(xs), f(xs)
    assert out[:3] == ref[:3] == ([True, False, True], 2, [0, 2, 1])
    torch.testing.assert_close(out[3], ref[3])


def test_partial_binding_tensors_reads_them_at_call_time():
    import functools

    def f(fn, x):
        return fn(x) * 2

    jf = thunder.jit(f)
    for _ in range(2):
        p = functools.partial(torch.add, torch.randn(3), alpha=2)
        x = torch.randn(3)
        torch.testing.assert_close(jf(p, x), f(p, x))
    assert thunder.cache_misses(jf) == 1
    p = functools.partial(torch.add, torch.randn(2, 3), alpha=2)  # a new shape: recompiles
    torch.testing.assert_close(jf(p, x), f(p, x))
    p = functools.partial(torch.mul, torch.randn(3))  # another function
    torch.testing.assert_close(jf(p, x), f(p, x))
    assert thunder.cache_misses(jf) == 3


def test_grad_reads_are_inputs_read_at_call_time():
    def f(p, x):
        g = p.grad
        if g is None:
            return p * x
        return p * x + g, (x * 2).grad

    p, x = torch.nn.Parameter(torch.randn(3)), torch.randn(3)
    jf = thunder.jit(f)
    with torch.no_grad():
        torch.testing.assert_close(jf(p, x), f(p, x))
        p.grad = torch.randn(3)
        out, g2 = jf(p, x)
        torch.testing.assert_close(out, f(p, x)[0])
        assert g2 is None
        p.grad = torch.randn(3)  # a new gradient: read by the cached program
        torch.testing.assert_close(jf(p, x)[0], f(p, x)[0])
    assert thunder.cache_misses(jf) == 2
    assert thunder.compile_stats(jf).miss_reasons[1].startswith("the .grad of p changed (None -> tensor(")
    p.grad = None  # the first entry again
    with torch.no_grad():
        torch.testing.assert_close(jf(p, x), f(p, x))
    assert thunder.cache_misses(jf) == 2


def test_optimizer_step_inside_the_jitted_function_updates_the_parameters():
    def sgd_step(params, lr):
        with torch.no_grad():
            for p in params:
                p.sub_(lr * p.grad)

    def train_step(model, x, lr):
        loss = model(x).pow(2).sum()
        loss.backward()
        sgd_step(list(model.parameters()), lr)
        for p in model.parameters():
            p.grad = None
        return loss

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    ref = torch.nn.Linear(4, 2)
    ref.load_state_dict(model.state_dict())
    jstep = thunder.jit(sgd_step)
    for _ in range(3):
        x = torch.randn(8, 4)
        train_step(ref, x, 0.1)
        model(x).pow(2).sum().backward()
        params = list(model.parameters())
        assert jstep(params, 0.1) is None
        for p in params:
            p.grad = None
        for a, b in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(a, b)
            assert a.requires_grad and a.is_leaf
    assert thunder.cache_misses(jstep) == 1


def test_torch_calls_on_python_numbers():
    def f(x):
        return torch.add(2, 3), torch.mul(2.0, 3) + x, torch.sub(5, 3, alpha=2), torch.true_divide(3, 2)

    x = torch.randn(2)
    for o, r in zip(thunder.jit(f)(x), f(x)):
        torch.testing.assert_close(o, r)
        assert o.dtype == r.dtype
    with pytest.raises(TypeError, match="must be Tensor, not int"):
        thunder.jit(lambda x: torch.maximum(2, 3) + x)(x)


def test_torch_compile_inside_a_jitted_function_raises_naming_it():
    def f(x):
        return torch.compile(torch.sin)(x)

    with pytest.raises(NotImplementedError, match=r"thunder: torch.compile at .*test_public_behaviour.py:\d+ inside"):
        thunder.jit(f)(torch.randn(2))


def test_changing_the_default_dtype_inside_raises():
    def f(x):
        torch.set_default_dtype(torch.float64)
        return x + torch.ones(2)

    with pytest.raises(RuntimeError, match="Default dtype is changed during the execution of jitted function at "):
        thunder.jit(f)(torch.randn(2))
    assert torch.get_default_dtype() is torch.float32


@torch.no_grad()
def _decorated_no_grad_helper(x):
    return x * 2


@torch.inference_mode()
def _decorated_inference_helper(x):
    return x + 1


def _decorators_and_repeats(x, y):
    a = _decorated_no_grad_helper(x)
    b = _decorated_inference_helper(y)
    c = x * y
    return a, b, c, c


@pytest.mark.parametrize("x_grad", [True, False])
def test_grad_mode_decorators_and_repeated_outputs_match_eager(x_grad):
    x, y = torch.randn(3, requires_grad=x_grad), torch.randn(3)
    ref = _decorators_and_repeats(x, y)
    out = thunder.jit(_decorators_and_repeats)(x, y)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r)
        _same_autograd(o, r)
    assert out[2] is out[3]


class _ScaledLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = _Exp.apply(self.lin(x).tanh())
        return _ScaleTenfold.apply(h, 0.5).sum() + _Exp.apply(self.lin.weight).mean()


@pytest.mark.parametrize("transforms", [None, ["thunder-decompose"]])
def test_custom_autograd_function_in_a_module_trains_like_eager(transforms):
    torch.manual_seed(0)
    model, ref = _ScaledLinear(), _ScaledLinear()
    ref.load_state_dict(model.state_dict())
    tm = thunder.jit(model, transforms=transforms)
    for _ in range(2):
        x = torch.randn(5, 4)
        loss, loss_ref = tm(x), ref(x)
        torch.testing.assert_close(loss, loss_ref)
        loss.backward()
        loss_ref.backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)


def test_custom_autograd_function_ctx_attributes():
    class Private(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx._scale = 3.0  # any attribute name, private ones included
            ctx.x = x  # a tensor attribute
            return x * ctx._scale

        @staticmethod
        def backward(ctx, g):
            return g * ctx._scale + ctx.x

    class Containers(torch.autograd.Function):
        # (tensors in lists, tuples and dicts on ctx, beside other values: Reformer's reversible
        # layers keep their buckets so)
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.pair = [x, (y, "label", None)]
            ctx.named = {"y": y, "k": 2}
            return y * 2

        @staticmethod
        def backward(ctx, g):
            x, (y, label, nothing) = ctx.pair
            assert label == "label" and nothing is None and type(ctx.pair) is list
            return g * ctx.named["k"] * ctx.named["y"] + x * 0

    x = torch.randn(4, requires_grad=True)
    for fn in (Private.apply, Containers.apply):
        (g,) = torch.autograd.grad(thunder.jit(fn)(x).sum(), x)
        (e,) = torch.autograd.grad(fn(x).sum(), x)
        torch.testing.assert_close(g, e)


def test_parameters_named_like_the_programs_modules():
    # the generated program refers to torch, impl, math and operator: a parameter of the user's
    # function with one of those names must not shadow them (it gave TypeError/AttributeError)
    def f(torch_fn, impl, math, operator):
        return ((impl @ math).tanh() + operator).sum()

    a, b, c = (torch.randn(64, 64, requires_grad=True) for _ in range(3))
    jf = thunder.jit(f)
    jf(None, a, b, c).backward()
    grads = [t.grad for t in (a, b, c)]
    for t in (a, b, c):
        t.grad = None
    f(None, a, b, c).backward()
    for got, t in zip(grads, (a, b, c)):
        torch.testing.assert_close(got, t.grad)

    def g(torch, operator):
        return torch + operator

    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(thunder.jit(g)(x, y), g(x, y))


@pytest.mark.parametrize("options", [{}, {"executors": ["torch"]}, {"transforms": ["thunder-decompose"]}],
                         ids=["default", "torch executor", "decomposed"])
def test_tensors_made_with_requires_grad_are_leaves_as_in_eager(options):
    # torch.ones(..., requires_grad=True) inside the function: the trace answers requires_grad as
    # eager (it answered False), and the program makes the leaf with torch (a decomposition or a
    # kernel would make a tensor that does not require grad), so backward reaches it
    def f(x):
        w = torch.ones(3, requires_grad=True)
        y = x * w
        return y, y.requires_grad, w.requires_grad, w

    x = torch.randn(3)
    (y, y_rg, w_rg, w), (y_e, y_rg_e, w_rg_e, w_e) = thunder.jit(f, **options)(x), f(x)
    assert (y_rg, w_rg) == (y_rg_e, w_rg_e) == (True, True)
    assert w.is_leaf and w.requires_grad and y.grad_fn is not None
    y.sum().backward()
    y_e.sum().backward()
    torch.testing.assert_close(w.grad, w_e.grad)
    with pytest.raises(RuntimeError, match="Only Tensors of floating point and complex dtype can require gradients"):
        thunder.jit(lambda x: x + torch.ones(3, dtype=torch.int64, requires_grad=True), **options)(x)


def test_requires_grad_under_no_grad_is_a_flag_as_in_eager():
    """Under torch.no_grad() an intermediate's requires_grad_(True) changes its flag and nothing
    after it (no op records history): Hugging Face's enable_input_require_grads hook (put on by
    gradient_checkpointing_enable()) runs so in an evaluation loop, which thunder refused."""
    def fn(x, w):
        with torch.no_grad():
            y = (x @ w).requires_grad_(True)
            flag = y.requires_grad
            z = y * 2
        return z, flag, z.requires_grad

    x, w = torch.randn(2, 3), torch.randn(3, 3, requires_grad=True)
    (got, *got_flags), (expected, *flags) = thunder.jit(fn)(x, w), fn(x, w)
    assert got_flags == flags == [True, False]
    torch.testing.assert_close(got, expected)
    # (with grad mode on: a new autograd leaf, whose .grad eager's backward would fill: refused returned)
    with pytest.raises(NotImplementedError, match=r"made a leaf with requires_grad_\(\) at .* leaves the jitted"):
        thunder.jit(lambda x: (x * 2).requires_grad_(True))(x)
