"""Inputs that share memory: an in-place update of one shows in the others, as in eager. The
prologue detects the sharing (an entry of its own for each pattern), so a cached program never
runs on inputs that share memory in a way it was not traced for."""
import copy

import pytest
import torch
import torch.nn as nn

import thunder
from jit_vs_eager import matches_eager


def g(a, b):
    a.add_(1)
    return b * 2


check = matches_eager


def same_tensor():
    z = torch.zeros(2)
    return z, z


def overlapping_views():
    base = torch.arange(6.0)
    return base[:4], base[2:]


def distinct():
    return torch.zeros(2), torch.zeros(2)


@pytest.mark.parametrize("fusion", ["auto", "always"])
def test_same_tensor_twice_and_overlapping_views(fusion):
    check(g, same_tensor, fusion=fusion)
    check(g, overlapping_views, fusion=fusion)


def test_each_pattern_gets_its_own_entry():
    jg = thunder.jit(g)
    for make in (distinct, same_tensor, overlapping_views, distinct, same_tensor, overlapping_views):
        check(g, make, jitted=jg)
    assert thunder.cache_misses(jg) == 3
    # another overlap (same shapes, other offsets) is another pattern
    check(g, lambda: (lambda b: (b[1:5], b[3:7]))(torch.arange(8.0)), jitted=jg)
    assert thunder.cache_misses(jg) == 4


def test_entry_traced_without_sharing_misses_when_inputs_share():
    jg = thunder.jit(g)
    check(g, distinct, jitted=jg)
    z = torch.zeros(2)
    out = jg(z, z)  # must not run the program traced for distinct inputs
    torch.testing.assert_close(out, torch.full((2,), 2.0))
    assert thunder.cache_misses(jg) == 2


def test_reading_after_writing_through_several_views():
    def f(a, b, c):
        a.mul_(2)
        b[0] = -1.0
        c.add_(a.sum())
        return a + b + c

    def make():
        base = torch.arange(1.0, 9.0)
        return base[:4], base[2:6], base[4:]

    check(f, make)


def test_in_place_update_through_a_no_op_to_and_of_its_base():
    # Tensor.to to the same device/dtype returns the tensor itself (a view in the trace); an
    # in-place update of one regenerates the other from its recipe (transformers' StaticCache:
    # `length = length.to(device)` then `length.add_(n)`)
    def through_view(t, x):
        u = t.to(x.device)
        v = t.to(x.device)
        u.add_(1)
        return x + v

    def of_base(t, x):
        u = t.to(x.device)
        t.add_(1)
        return x + u

    check(through_view, lambda: (torch.tensor(0), torch.ones(3)))
    check(of_base, lambda: (torch.zeros(3), torch.ones(3)))


def test_views_of_a_2d_base():
    def f(rows, cols):
        rows.add_(10)
        return cols.sum(0)

    def make():
        base = torch.arange(12.0).reshape(3, 4)
        return base[1], base[:, 2]

    check(f, make)


def test_parameter_or_buffer_also_passed_as_argument():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", torch.arange(3.0))
            self.w = nn.Parameter(torch.ones(3), requires_grad=False)

        def forward(self, x):
            self.buf.add_(x)
            return x * self.w + self.buf

    m, ref = M(), M()
    tm = thunder.jit(m)
    torch.testing.assert_close(tm(m.buf), ref(ref.buf))
    torch.testing.assert_close(m.buf, ref.buf)
    torch.testing.assert_close(tm(torch.ones(3)), ref(torch.ones(3)))  # no sharing: another entry
    torch.testing.assert_close(m.buf, ref.buf)

    class N(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.arange(3.0), requires_grad=False)

        def forward(self, x):
            x.mul_(2)
            return self.w + x

    n, nref = N(), N()
    tn = thunder.jit(n)
    torch.testing.assert_close(tn(n.w), nref(nref.w))
    torch.testing.assert_close(n.w, nref.w)


def test_global_tensor_also_passed_as_argument():
    state = {"acc": torch.zeros(3)}

    def f(x):
        state["acc"].add_(x)
        return state["acc"] * 1

    acc = state["acc"]
    jf = thunder.jit(f)
    out = jf(acc)
    torch.testing.assert_close(out, torch.zeros(3))  # acc + acc with acc == 0
    torch.testing.assert_close(acc, torch.zeros(3))
    acc.fill_(1.0)
    out = jf(acc)
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    torch.testing.assert_close(acc, torch.full((3,), 2.0))


def test_sharing_without_in_place_updates_and_gradients():
    def f(a, b):
        return (a * b).sum()

    w = torch.randn(4, requires_grad=True)
    jf = thunder.jit(f)
    (gw,) = torch.autograd.grad(jf(w, w), (w,))
    torch.testing.assert_close(gw, 2 * w.detach())
    base = torch.randn(6, requires_grad=True)
    (gb,) = torch.autograd.grad(jf(base[:4], base[2:]), (base,))
    (eb,) = torch.autograd.grad(f(base[:4], base[2:]), (base,))
    torch.testing.assert_close(gb, eb)


def test_in_place_update_of_a_leaf_that_requires_grad_raises_like_eager():
    w = torch.zeros(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        g(w, w)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        thunder.jit(g)(w, w)


def test_sharing_with_a_tensor_that_requires_grad_is_refused_clearly():
    w = torch.zeros(2, requires_grad=True)
    eager = g(w.detach(), w)  # eager allows updating a detached alias
    assert eager.requires_grad
    with pytest.raises(NotImplementedError, match="share memory, one of them updated in place, some requiring grad"):
        thunder.jit(g)(w.detach(), w)


def test_training_step_with_shared_input_under_no_grad():
    torch.manual_seed(0)
    m = nn.Linear(3, 3)
    ref = copy.deepcopy(m)

    def step(model, x):
        with torch.no_grad():
            model.weight.mul_(0.5)
            x.add_(1)
        return model(x).sum()

    tm_step = thunder.jit(step)
    x1, x2 = m.weight[0], ref.weight[0]  # share memory with the weight
    out, expected = tm_step(m, x1), step(ref, x2)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(m.weight, ref.weight)
    out.backward()
    expected.backward()
    torch.testing.assert_close(m.weight.grad, ref.weight.grad)
    torch.testing.assert_close(m.bias.grad, ref.bias.grad)


# In-place updates of x.view(dtype): the same bytes, so the base (and its other views) see them
def _through_int_view(x):
    y = x.view(torch.int32)
    y.add_(1)  # (the next float up, bit for bit)
    return x * 1


def _through_byte_view(x):
    x = x * 2
    y = x.view(torch.uint8)  # (another element size: the last dim 4 times longer)
    y[:, 0] = 7
    return x + 1, y


def _sign_flip(x):
    x.view(torch.int16).bitwise_xor_(-0x8000)  # (bfloat16's sign bit)
    return x.float()


def _f8_abs(x):
    x8 = x.to(torch.float8_e4m3fn)
    x8.view(torch.uint8).bitwise_and_(0x7F)
    return x8.float(), x8.t().contiguous().view(torch.uint8)


@pytest.mark.parametrize("executors", [None, ["torch"]], ids=["fused", "unfused"])
@pytest.mark.parametrize("fn, make", [
    (_through_int_view, lambda: (torch.randn(3, 4),)),
    (_through_byte_view, lambda: (torch.randn(3, 4),)),
    (_sign_flip, lambda: (torch.randn(5, dtype=torch.bfloat16),)),
    (_f8_abs, lambda: (torch.randn(2, 3),)),
], ids=["int_view_of_input", "byte_view_of_intermediate", "bf16_sign_flip_of_input", "f8_bytes"])
def test_in_place_update_of_a_dtype_view_reaches_its_base(fn, make, executors):
    torch.manual_seed(0)
    args = make()
    eager_args, jit_args = [a.clone() for a in args], [a.clone() for a in args]
    exp, out = fn(*eager_args), thunder.jit(fn, executors=executors)(*jit_args)
    for a, e in zip(out if isinstance(out, tuple) else [out], exp if isinstance(exp, tuple) else [exp], strict=True):
        assert a.dtype == e.dtype and a.stride() == e.stride()
        assert torch.equal(a, e)
    for a, e in zip(jit_args, eager_args):
        assert torch.equal(a, e)


def test_in_place_update_of_a_dtype_view_then_grads_match_eager():
    def f(w):
        x = w * 2
        x.view(torch.int32).add_(1)
        return (x * w).sum()

    w1 = torch.randn(4, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_()
    exp, out = f(w1), thunder.jit(f)(w2)
    torch.testing.assert_close(out, exp, rtol=0, atol=0)
    exp.backward()
    out.backward()
    torch.testing.assert_close(w2.grad, w1.grad, rtol=0, atol=0)


def test_conversions_to_what_the_input_is_return_the_input_itself():
    # eager's x.contiguous() / x.to(x.dtype) / x.float() of a float32 x are x itself: `is` says
    # so, in-place updates of one are updates of the other, and under no_grad the result keeps
    # x's autograd history (a copy made there would cut the gradient)
    def same(x, c):
        return (x.contiguous() is x, x.to(x.dtype) is x, x.float() is x, x.to("cpu") is x,
                x.mT.contiguous() is x, x.double() is x, c.to(memory_format=torch.channels_last) is c,
                c.contiguous() is c)

    x, c = torch.randn(2, 3), torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert thunder.jit(same)(x, c) == same(x, c) == (True, True, True, True, False, False, True, False)

    def grads_through_no_grad(x):
        with torch.no_grad():
            y, z = x.contiguous(), x.float()
        y.mul_(1)  # (an in-place update of y under grad mode is one of x: a leaf, so eager refuses)
        return (y * 2).sum() + (z * 3).sum()

    def grads(fn):
        x = torch.randn(3, 4, requires_grad=True)
        try:
            fn(x).backward()
        except RuntimeError as e:
            return type(e), str(e).split("\n")[0]
        return x.grad

    assert grads(thunder.jit(grads_through_no_grad)) == grads(grads_through_no_grad)

    def through_no_grad(x):
        with torch.no_grad():
            y, z = x.contiguous(), x.float()
        return (y * 2).sum() + (z * 3).sum()

    torch.testing.assert_close(grads(thunder.jit(through_no_grad)), grads(through_no_grad), rtol=0, atol=0)

    def update_through_alias(x):
        x.contiguous().add_(1)
        x.to(torch.float32).mul_(2)
        return x.float()

    a, b = torch.ones(3), torch.ones(3)
    out = thunder.jit(update_through_alias)(a)
    assert out is a and torch.equal(a, update_through_alias(b)) and torch.equal(a, torch.full((3,), 4.0))


# Views made under torch.no_grad() of a tensor that requires grad: in eager they require grad
# (their base does) and are leaves without grad_fn, send no gradient, and may not be updated in
# place with grad mode on (nor used with grad mode on after an in-place update of them or their
# base). Other results of no_grad ops (x.detach(), x * 2) do not require grad.

def _no_grad_results(x):
    y = x * 1  # (a base that requires grad and is not a leaf)
    with torch.no_grad():
        return (x.view(12), x[0], x.t(), x.reshape(2, 6), *x.unbind(0)[:1], *x.split(2)[:1], x.contiguous(),
                y.view(12), x.detach(), x * 2, x.view(12).view(3, 4))


def _describe(t):
    return t.requires_grad, t.is_leaf, t.grad_fn is None


@pytest.mark.parametrize("grad_mode", [True, False])
def test_views_made_under_no_grad_come_back_as_eager_makes_them(grad_mode):
    x = torch.randn(3, 4, requires_grad=True)
    with torch.set_grad_enabled(grad_mode):
        expected, got = _no_grad_results(x), thunder.jit(_no_grad_results)(x)
    assert [_describe(t) for t in got] == [_describe(t) for t in expected]
    assert [_describe(t)[0] for t in got] == [True] * 7 + [grad_mode, False, False, True]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    # no gradient through them (also not into the view itself), and eager's error for an in-place
    # update with grad mode on; under no_grad the update reaches x
    for v in (got[0], expected[0]):
        (v * 2).sum().backward()
        assert x.grad is None and v.grad is None
        with pytest.raises(RuntimeError, match="A view was created in no_grad mode and is being modified inplace"):
            v.mul_(2)
    with torch.no_grad():
        got[1].fill_(5.0)
    assert torch.equal(x[0], torch.full((4,), 5.0))


def _used_with_grad_mode_on(x, w):
    with torch.no_grad():
        wt, v = w.t(), x.view(12)
    return x @ wt + (v * 2).view(3, 4).sum(), v.view(3, 4) * 3


def test_no_grad_view_used_with_grad_mode_on_sends_no_gradient():
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(5, 4, requires_grad=True)
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    expected, got = _used_with_grad_mode_on(x, w), thunder.jit(_used_with_grad_mode_on)(x2, w2)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
        assert (g.requires_grad, g.grad_fn is None) == (e.requires_grad, e.grad_fn is None) == (True, False)
    expected[0].sum().backward()
    got[0].sum().backward()
    torch.testing.assert_close(x2.grad, x.grad)
    assert w.grad is None and w2.grad is None
    # a result computed only from a no_grad view requires grad and sends nothing
    got[1].sum().backward()
    torch.testing.assert_close(x2.grad, x.grad)


def _update_view(x):
    with torch.no_grad():
        v = x.view(12)
    v.mul_(2)
    return v


def _update_view_of_view(x):
    with torch.no_grad():
        v = x.view(12)
    v.view(3, 4)[0].mul_(2)
    return v


def _update_view_of_non_leaf(x):
    y = x * 1
    with torch.no_grad():
        v = y[0]
    v.add_(1)
    return y


def _use_after_base_update(x):
    y = x * 1
    with torch.no_grad():
        v = y.view(12)
    y.add_(1)
    return v * 2


def _use_after_update_under_no_grad(x):
    with torch.no_grad():
        v = x.view(12)
        v.mul_(2)
    return (v * 2).sum()


@pytest.mark.parametrize("fn, message", [
    (_update_view, "A view was created in no_grad mode and is being modified inplace"),
    (_update_view_of_view, "view of a view which was created in no_grad mode and is being modified inplace"),
    (_update_view_of_non_leaf, "A view was created in no_grad mode and is being modified inplace"),
    (_use_after_base_update, "its base or another view of its base has been modified inplace"),
    (_use_after_update_under_no_grad, "its base or another view of its base has been modified inplace"),
])
def test_no_grad_view_misuse_raises_eager_error(fn, message):
    for f in (fn, thunder.jit(fn)):
        with pytest.raises(RuntimeError, match=message):
            f(torch.randn(3, 4, requires_grad=True))


def test_no_grad_view_returned_after_an_update_under_no_grad():
    def update(x):
        with torch.no_grad():
            v = x.view(12)
            v.mul_(2)
        return v

    x, x2 = torch.randn(3, 4, requires_grad=True), None
    x2 = x.detach().clone().requires_grad_()
    for f, a in ((update, x), (thunder.jit(update), x2)):
        v = f(a)
        assert v.requires_grad
        with pytest.raises(RuntimeError, match="its base or another view of its base has been modified inplace"):
            v.grad_fn
    torch.testing.assert_close(x2, x, rtol=0, atol=0)


class _Box:
    pass


@pytest.mark.parametrize("grad", [False, True])
def test_results_that_compute_the_same_are_distinct_tensors(grad):
    # cse merges x * 2 computed twice: eager's two results are two tensors, and an update of one
    # must not reach the other (it did: one tensor returned twice, written to two attributes)
    box = _Box()

    def fn(x):
        box.u, box.v = x.sin(), x.sin()
        return x * 2, x * 2, torch.zeros(3), torch.zeros(3)

    x = torch.randn(3, requires_grad=grad)
    out = thunder.jit(fn)(x)
    results = [*out, box.u, box.v]
    assert len({id(t) for t in results}) == 6
    with torch.no_grad():
        out[0].add_(1)
        out[2].add_(1)
        box.u.add_(1)
    torch.testing.assert_close(out[1], x * 2)
    torch.testing.assert_close(out[3], torch.zeros(3))
    torch.testing.assert_close(box.v, x.sin())
    if grad:
        (out[0].sum() + 3 * out[1].sum()).backward()
        torch.testing.assert_close(x.grad, torch.full((3,), 8.0))


def test_one_tensor_returned_twice_stays_one():
    def fn(x):
        y = x * 2
        return y, y

    a, b = thunder.jit(fn)(torch.randn(3))
    assert a is b
