"""Thunder's public behaviour against eager PyTorch (issue 12): grad mode inside the function,
what comes back (inputs, parameters, constants, Python objects, structures), custom
torch.autograd.Function, inputs and state, and the API surface."""
import collections
import dataclasses
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


def test_returning_an_object_holding_tensors_names_its_type():
    class Holder:
        def __init__(self, t):
            self.t = t

    with pytest.raises(NotImplementedError, match="Holder that holds tensors"):
        thunder.jit(lambda x: Holder(x * 2))(torch.randn(2))
