"""Complex tensors: variances are real, as torch's; gradients through them equal torch's (dL/dx + i dL/dy for z = x + iy): the rules
written for real tensors run on conjugated cotangents (thunder/ops/vjp/complex_numbers.py). Before,
`x * y` of complex tensors gave `g * y` where torch gives `g * conj(y)`: a Llama 4's rotary
embedding (complex multiplication) had every q/k gradient wrong with the loss equal to eager's."""
import pytest
import torch

import thunder


def _c(t):
    return torch.view_as_complex(t)


def _rotary(x, angle):  # Llama 4's: complex multiplication by a unit phase
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * torch.polar(torch.ones_like(angle), angle)).flatten(-2).type_as(x)


CASES = {
    "rotary": (_rotary, ((3, 8), (3, 4))),
    "complex_from_parts": (lambda x, a: torch.view_as_real(_c(x) * torch.complex(a.cos(), a.sin())), ((3, 4, 2), (3, 4))),
    "mul_div": (lambda x, y: torch.view_as_real(_c(x) * _c(y) / (_c(y) + 3)), ((3, 4, 2), (3, 4, 2))),
    "matmul_exp_sum": (lambda x, y: torch.view_as_real((_c(x) @ _c(y).transpose(0, 1) @ _c(x)).exp() / (_c(x).sum() + 2)),
                       ((3, 4, 2), (3, 4, 2))),
    "sqrt_pow_neg": (lambda x: torch.view_as_real(-(_c(x) + 4).sqrt() * _c(x) ** 2 - 1j * _c(x)), ((3, 4, 2),)),
    "shapes_and_indexing": (lambda x: torch.view_as_real(torch.cat([_c(x).t().reshape(2, 6), _c(x)[:, 1:3].flip(0).reshape(2, 3)], 1)
                                                         .unsqueeze(0).expand(2, 2, 9).sum(0)), ((3, 4, 2),)),
    "abs_real_imag": (lambda x, y: ((_c(x) * _c(y)).abs() + _c(x).real * _c(y).imag, (_c(x) + 1).abs().sum()),
                      ((3, 4, 2), (3, 4, 2))),
    "var_std": (lambda x: (_c(x).var(0) + _c(x).std(1, keepdim=True) * 2, torch.var_mean(_c(x), 1)[0]), ((3, 4, 2),)),
    "linear_layer": (lambda x, w: torch.view_as_real(torch.nn.functional.linear(_c(x), _c(w))), ((3, 4, 2), (5, 4, 2))),
}


def _run(fn, shapes):
    g = torch.Generator().manual_seed(0)
    leaves = [torch.randn(*s, generator=g).requires_grad_() for s in shapes]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    weights = [torch.randn(o.shape, generator=g) for o in outs]
    sum((o * w).sum() for o, w in zip(outs, weights)).backward()
    return [o.detach() for o in outs] + [t.grad for t in leaves]


@pytest.mark.parametrize("name", list(CASES))
def test_complex_values_and_grads_as_eager(name):
    fn, shapes = CASES[name]
    for got, expected in zip(_run(thunder.jit(fn), shapes), _run(fn, shapes), strict=True):
        torch.testing.assert_close(got, expected)


def test_complex_tensor_arguments_get_torch_gradients():
    """Complex leaves (not views of real ones): their .grad is torch's conjugate convention."""
    def fn(z, w):
        return (z * w.conj() + z.exp()).abs().sum()

    g = torch.Generator().manual_seed(1)
    z0, w0 = torch.randn(4, 3, dtype=torch.complex64, generator=g), torch.randn(4, 3, dtype=torch.complex64, generator=g)
    results = []
    for f in (thunder.jit(fn), fn):
        z, w = z0.clone().requires_grad_(), w0.clone().requires_grad_()
        f(z, w).backward()
        results.append((z.grad, w.grad))
    for got, expected in zip(*results, strict=True):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("src", ["torch.pow(-1, z)", "torch.pow(z, -1)", "torch.pow(r - 0.5, z) * r", "torch.pow(z, r)",
                                 "torch.pow(0, z)", "z ** z"])
def test_complex_powers_as_eager(src):
    """The exponent's gradient needs the log of the base as a complex number (log(-1) = i pi, not
    NaN), a complex base's negative integer power is no integer power, and a real input's
    gradient is the real part of the complex one, without a cast's warning."""
    fn = eval(f"lambda z, r: {src}")
    g = torch.Generator().manual_seed(2)
    z0, r0 = torch.randn(6, dtype=torch.complex64, generator=g), torch.randn(6, generator=g)
    results = []
    for f in (thunder.jit(fn), fn):
        z, r = z0.clone().requires_grad_(), r0.clone().requires_grad_()
        out = f(z, r)
        results.append((out.detach(), *torch.autograd.grad(out, [z, r], torch.ones_like(out), allow_unused=True)))
    for got, expected in zip(*results, strict=True):
        assert (got is None) == (expected is None)
        if got is not None:
            torch.testing.assert_close(got, expected, equal_nan=True)


def test_a_complex_gradient_not_modelled_is_refused_by_name():
    # normalize of a complex tensor is not holomorphic: a rule for real tensors would be silently wrong
    fn = lambda x: torch.view_as_real(torch.nn.functional.normalize(_c(x), dim=0)).sum()  # noqa: E731
    x = torch.randn(5, 3, 2, requires_grad=True)
    fn(x).backward()  # (eager differentiates it)
    with pytest.raises(NotImplementedError, match=r"gradient of .*normalize.* with complex tensors at .*test_complex_tensors"):
        thunder.jit(fn)(x).backward()


@pytest.mark.parametrize("src", ["torch.softmax(z.var(0), 0)", "z.std(0, keepdim=True) + z", "torch.var_mean(z, 0)",
                                 "torch.std_mean(z[0], 0)"])
def test_variance_of_a_complex_tensor_is_real(src):
    """The trace said complex64 where torch returns float32 (the mean of |z - mean|^2): a softmax
    of it was refused as softmax of a complex tensor."""
    fn = eval(f"lambda z: {src}")
    z = torch.randn(5, 3, dtype=torch.complex64, generator=torch.Generator().manual_seed(3))
    got, expected = thunder.jit(fn)(z), fn(z)
    got, expected = (got, expected) if isinstance(got, tuple) else ((got,), (expected,))
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("src", ["torch.floor(z)", "torch.relu(z)", "torch.maximum(z, z)", "z < z", "z.clamp(0, 1)",
                                 "torch.sign(z)", "torch.nn.functional.gelu(z)", "torch.remainder(z, 2)", "z // 2",
                                 "torch.erf(z)", "torch.where(z.abs() > 1, z, 0)", "torch.sigmoid(z) * (z == z)",
                                 "z.abs() + torch.nn.functional.silu(z).real"])
def test_complex_elementwise_ops_raise_or_compute_as_eager(src):
    """Where torch's kernel refuses complex tensors, thunder.jit raises torch's exception (it
    computed a floor or a relu of complex numbers); abs of a complex tensor is real in the trace
    (the comparison after it was refused as a comparison of complex numbers)."""
    fn = eval(f"lambda z, w: {src}")  # (w, unused, requires grad: the floor of a training program
    # was its input, decomposed as a float-only op's identity for other dtypes)
    w = torch.ones(2, requires_grad=True)
    for shape in ((), (4,)):
        z = torch.randn(shape, dtype=torch.complex64, generator=torch.Generator().manual_seed(4))
        for options in ({}, {"fusion": "always"}):
            try:
                expected = fn(z, w)
            except Exception as e:  # noqa: BLE001 - the type thunder must raise
                with pytest.raises(type(e)):
                    thunder.jit(fn, **options)(z, w)
                continue
            got = thunder.jit(fn, **options)(z, w)
            assert got.dtype == expected.dtype
            torch.testing.assert_close(got, expected)
