"""functools.partial binding a tensor made outside the call, a module returning its buffers through
native code (a buffer registered on several modules), and
torch.ops.higher_order.autograd_function_apply: against eager."""
import functools

import torch

import thunder


def _add_scaled(a, b, *, c=None):
    return a + b * (2 if c is None else c)


def test_partial_bound_tensor_is_an_input():
    t, x = torch.randn(4, 8), torch.randn(4, 8)
    p = functools.partial(_add_scaled, t)
    q = functools.partial(_add_scaled, c=t)
    jp = thunder.jit(p)
    torch.testing.assert_close(jp(x), p(x))
    torch.testing.assert_close(thunder.jit(q)(x, x), q(x, x))
    torch.testing.assert_close(thunder.jit(lambda a: p(a) * q(a, a))(x), p(x) * q(x, x))
    t.add_(1)  # the bound tensor is read at call time: its new value shows
    torch.testing.assert_close(jp(x), p(x))
    assert thunder.compile_stats(jp).cache_misses == 1


def test_partial_bound_tensor_gets_gradients():
    w = torch.randn(8, requires_grad=True)
    x = torch.randn(4, 8)
    p = functools.partial(_add_scaled, b=w)
    thunder.jit(lambda a: p(a).sum())(x).backward()
    torch.testing.assert_close(w.grad, torch.full((8,), 8.0))


class _Shared(torch.nn.Module):
    def __init__(self, buf):
        super().__init__()
        self.register_buffer("b", buf)


class _Returns(torch.nn.Module):
    def __init__(self):
        super().__init__()
        buf = torch.randn(8)
        self.register_buffer("b", buf)
        self.inner = _Shared(buf)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x) + self.b, tuple(self.buffers()), dict(self.named_buffers(remove_duplicate=False))


def test_module_returns_its_buffers_as_eager():
    m, x = _Returns(), torch.randn(2, 8)
    out, expected = thunder.jit(m)(x), m(x)
    torch.testing.assert_close(out[0], expected[0])
    assert len(out[1]) == len(expected[1]) == 1 and out[1][0] is expected[1][0] is m.b
    assert out[2].keys() == expected[2].keys() and all(out[2][k] is m.b for k in out[2])


def _fwd(x, y):
    return (x.sin() * y, x.detach().argmax()), [x, y]


def _bwd(g, g_index, x, y):
    return g * x.cos() * y * 3, g * x.sin()  # (a backward of its own: 3x the true derivative for x)


_FWD, _BWD = torch.fx.symbolic_trace(_fwd), torch.fx.symbolic_trace(_bwd)  # (as torch.compile hands them over)


def _apply(x, y):
    return torch.ops.higher_order.autograd_function_apply(_FWD, _BWD, x, y, args_tensor_mask=[True, True],
                                                          non_differentiable_idx=[1], saved_for_backward_idx=[0, 1])


def test_autograd_function_apply_runs_the_users_backward():
    x, y = torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True)
    expected = _apply(x, y)
    expected[0].sum().backward()
    grads = x.grad, y.grad
    x.grad = y.grad = None
    out = thunder.jit(_apply)(x, y)
    torch.testing.assert_close(out[0], expected[0])
    assert torch.equal(out[1], expected[1]) and not out[1].requires_grad
    out[0].sum().backward()
    torch.testing.assert_close(x.grad, grads[0])
    torch.testing.assert_close(y.grad, grads[1])
