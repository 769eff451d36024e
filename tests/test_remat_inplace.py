"""thunder-remat rewrites @forward and @backward in place (lowering/remat_inplace.py) where
lifting keeps every name: the module must be the one that lifting both funcs and emitting them
again gives (byte for byte, locations included, after cse and canonicalize), and the values and
gradients eager's. Covers recomputed chains, an input updated in place (saved as a copy) and an
activation-checkpoint region."""
import pytest
import torch
import torch.utils.checkpoint as cp

import thunder
import thunder.lowering.autograd as autograd
import thunder.lowering.remat as remat
import thunder.runtime.compile as compile_
from thunder.dialects.mlir import ir

TOL = dict(rtol=1e-4, atol=1e-4)  # (fused kernels sum in another order than eager)


def _chain(x, w):  # (numbers in forward and backward: constants placed as emission places them)
    y = ((x @ w) * 0.5 + 3.0).tanh().pow(3)
    return (torch.softmax(y, -1).exp() * x.sum(1, keepdim=True) - 2.0).sin()


def _updates_input(x, buf):
    y = (x * buf).exp()
    buf.add_(1)
    return (y * y).sin()


def _checkpointed(x, w):
    return (cp.checkpoint(lambda a: (a @ w).tanh().exp(), x, use_reentrant=False) @ w).cos()


def _both_ways(monkeypatch, fn, args):
    """Compile fn on args; each thunder-remat also runs on a copy with the in-place rewrite off.
    (the two modules' text, the in-place one's; how many ran in place)."""
    texts, in_place = [], []
    real = compile_.remat_module
    rewrite = remat.rewrite_backward

    def both(op, lifted_forward=None):
        copy = ir.Module.parse(op.get_asm(enable_debug_info=True))
        with monkeypatch.context() as m:
            m.setattr(remat, "kept_names", lambda *a, **k: None)
            relifted = real(copy.operation)  # (thunder-autograd's lifted forward is the original's)
        result = real(op, lifted_forward)
        compile_._cleanup(copy)
        emitted = ir.Module.parse(op.get_asm(enable_debug_info=True))
        compile_._cleanup(emitted)
        texts.append((copy.operation.get_asm(enable_debug_info=True), emitted.operation.get_asm(enable_debug_info=True)))
        assert result == relifted
        return result

    monkeypatch.setattr(compile_, "remat_module", both)
    monkeypatch.setattr(remat, "rewrite_backward", lambda *a: in_place.append(1) or rewrite(*a))
    out = thunder.jit(fn)(*args)
    out.sum().backward()
    return texts, len(in_place), out


@pytest.mark.parametrize("fn", [_chain, _checkpointed])
def test_in_place_is_lift_and_emit(monkeypatch, fn):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(8, 8, generator=g, requires_grad=True), torch.randn(8, 8, generator=g, requires_grad=True)
    texts, in_place, out = _both_ways(monkeypatch, fn, (x, w))
    assert texts and in_place == len(texts)
    for relifted, rewritten in texts:
        assert rewritten == relifted
    x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_()
    expected = fn(x2, w2)
    expected.sum().backward()
    torch.testing.assert_close(out, expected, **TOL)
    torch.testing.assert_close(x.grad, x2.grad, **TOL)
    torch.testing.assert_close(w.grad, w2.grad, **TOL)


def test_in_place_input_saved_as_copy(monkeypatch):
    """buf's old value is saved as a clone before forward updates it (eager refuses the
    backward: it checks versions; the gradient is checked against the function without the update)."""
    g = torch.Generator().manual_seed(1)
    x, buf = torch.randn(4, 5, generator=g, requires_grad=True), torch.randn(4, 5, generator=g)
    old = buf.clone()
    texts, in_place, out = _both_ways(monkeypatch, _updates_input, (x, buf))
    assert texts and in_place == len(texts)
    for relifted, rewritten in texts:
        assert rewritten == relifted
        assert '"ltorch.clone"' in rewritten
    torch.testing.assert_close(buf, old + 1)
    x2 = x.detach().requires_grad_()
    y = (x2 * old).exp()
    expected = (y * y).sin()
    expected.sum().backward()
    torch.testing.assert_close(out, expected, **TOL)
    torch.testing.assert_close(x.grad, x2.grad, **TOL)


def _normed(x, w, b):  # (a training form: layer_norm's keeps its mean and rstd)
    y = torch.nn.functional.layer_norm(x * 0.5, (8,), w, b).tanh()
    return (torch.nn.functional.gelu(y) - 2.0).sin() @ w.unsqueeze(1)


def _lerped(x, w, b):  # (lerp's decomposition: a number, and ops cse and canonicalize remove)
    return _normed(torch.lerp(x, x.cos(), 0.3), w, b)


@pytest.mark.parametrize("fn, handed", [(_normed, True), (_lerped, False)])
def test_autograd_forward_in_place_is_lift_and_emit(monkeypatch, fn, handed):
    """thunder-autograd makes @computation @forward in place (lowering/autograd.py): the module
    is the one emitting the lifted trace again gives (byte for byte, locations included, after
    cse and canonicalize), and thunder-remat lifts neither func again (it takes the trace lifting
    @computation gave, and rewrites both in place), unless cse and canonicalize removed ops of
    @forward (then it lifts @forward)."""
    real, real_lift = compile_.autograd_module, remat.lift
    texts, lifted = [], []

    def both(op):
        copy = ir.Module.parse(op.get_asm(enable_debug_info=True))
        with monkeypatch.context() as m:
            m.setattr(autograd, "IN_PLACE", False)
            emitted = real(copy.operation)
        split = real(op)
        assert emitted.lifted_forward is None and split.lifted_forward is not None
        made = ir.Module.parse(op.get_asm(enable_debug_info=True))
        for module in (copy, made):
            compile_._cleanup(module)
        texts.append((copy.operation.get_asm(enable_debug_info=True), made.operation.get_asm(enable_debug_info=True)))
        return split

    monkeypatch.setattr(compile_, "autograd_module", both)
    monkeypatch.setattr(remat, "lift", lambda f: lifted.append(ir.StringAttr(f.attributes["sym_name"]).value)
                        or real_lift(f))
    g = torch.Generator().manual_seed(2)
    x, w, b = (torch.randn(*shape, generator=g, requires_grad=True) for shape in ((4, 8), (8,), (8,)))
    out = thunder.jit(fn)(x, w, b)
    out.sum().backward()
    assert len(texts) == 1
    assert lifted == ([] if handed else ["forward"])
    emitted, made = texts[0]
    assert "ltorch.native_layer_norm" in made
    assert made == emitted
    x2, w2, b2 = (t.detach().requires_grad_() for t in (x, w, b))
    expected = fn(x2, w2, b2)
    expected.sum().backward()
    torch.testing.assert_close(out, expected, **TOL)
    for got, want in ((x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)):
        torch.testing.assert_close(got, want, **TOL)
