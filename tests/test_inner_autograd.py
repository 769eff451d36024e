"""Autograd inside the jitted function (runtime/inner_autograd.py): `loss.backward()`,
`torch.autograd.backward/grad`, `.grad` reads and writes and an optimizer's step and zero_grad,
all in one jitted training step, against eager call by call: parameters, their .grad (None or
values), the optimizer's state and the results."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _data(i, rows=6):
    g = torch.Generator().manual_seed(i)
    return torch.randn(rows, 4, generator=g), torch.randn(rows, 3, generator=g)


def _same_models(model, reference):
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q)
        assert (p.grad is None) == (q.grad is None)
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad)
            assert not p.grad.requires_grad


def _against_eager(make_step, calls=3):
    """make_step(model) -> step(x, y); the jitted step on one model, eager's on a copy."""
    model, reference = _model(), _model()
    jitted, eager = thunder.jit(make_step(model)), make_step(reference)
    for i in range(calls):
        got, expected = jitted(*_data(i)), eager(*_data(i))
        torch.testing.assert_close(got, expected)
        _same_models(model, reference)
    return jitted, model


@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adamw"])
def test_a_whole_training_step_in_one_jitted_function(optimizer):
    def make_step(model):
        opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if optimizer == "sgd_momentum"
               else torch.optim.AdamW(model.parameters(), lr=1e-2))

        def step(x, y):
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss.detach()
        return step
    jitted, model = _against_eager(make_step, calls=4)
    # (the first step fills the optimizer's state, the later ones find it)
    assert thunder.cache_misses(jitted) == 2
    assert all(p.grad is None for p in model.parameters())


def test_gradients_accumulate_across_calls_in_place():
    # no zero_grad: the second call finds .grad and adds into it, as eager's AccumulateGrad does
    # (the same tensor object)
    def make_step(model):
        def step(x, y):
            loss = (model(x) - y).square().mean()
            loss.backward()
            return loss.detach()
        return step
    model = _model()
    jitted = thunder.jit(make_step(model))
    jitted(*_data(0))
    first = [p.grad for p in model.parameters()]
    jitted(*_data(1))
    assert all(p.grad is g for p, g in zip(model.parameters(), first))
    _against_eager(make_step)


def test_micro_batches_then_the_optimizer_and_the_modules_zero_grad():
    def make_step(model):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

        def step(x, y):
            for xs, ys in zip(x.chunk(3), y.chunk(3)):
                (model(xs) - ys).square().mean().backward()
            opt.step()
            model.zero_grad()
            return x.sum()
        return step
    _against_eager(make_step, calls=4)


def test_zero_grad_keeping_the_tensors():
    def make_step(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            (model(x) - y).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
            return x.sum()
        return step
    _against_eager(make_step)


def test_returning_the_loss_and_an_argument_that_requires_grad():
    model, reference = _model(), _model()

    def make_step(m):
        def step(x, y):
            loss = (m(x) - y).square().mean()
            loss.backward()
            return loss
        return step
    jitted, eager = thunder.jit(make_step(model)), make_step(reference)
    for i in range(2):
        x, y = _data(i)
        xj, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, expected = jitted(xj, y), eager(xe, y)
        torch.testing.assert_close(got, expected)
        assert got.requires_grad == expected.requires_grad
        torch.testing.assert_close(xj.grad, xe.grad)
        _same_models(model, reference)


def test_autograd_grad_and_a_gradient_penalty():
    def grads(model):
        def step(x, y):
            loss = (model(x) - y).square().mean()
            return torch.autograd.grad(loss, list(model.parameters()))
        return step
    model, reference = _model(), _model()
    for i in range(2):
        got, expected = thunder.jit(grads(model))(*_data(i)), grads(reference)(*_data(i))
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
            assert not g.requires_grad
    assert all(p.grad is None for p in model.parameters())  # (autograd.grad leaves .grad alone)

    def penalty(model):
        def step(x, y):
            loss = (model(x) - y).square().mean()
            g, = torch.autograd.grad(loss, [model[0].weight], create_graph=True)
            total = loss + g.square().sum()
            total.backward()
            return total.detach()
        return step
    _against_eager(penalty)


def test_setting_grad_directly_and_eagers_errors():
    model, reference = _model(), _model()

    def step(m):
        def f(x):
            m[0].weight.grad = torch.ones_like(m[0].weight) * x.sum()
            m[2].bias.grad = None
            return m[0].weight.grad * 2
        return f
    reference[2].bias.grad = torch.ones(3)
    model[2].bias.grad = torch.ones(3)
    x = torch.randn(3)
    torch.testing.assert_close(thunder.jit(step(model))(x), step(reference)(x))
    _same_models(model, reference)

    def wrong(m, value):
        def f(x):
            m[0].weight.grad = value(x)
            return x
        return f
    for value, error in [(lambda x: torch.ones(2, 2), "same size"), (lambda x: torch.ones(8, 4).double(),
                         "assign a gradient with dtype"), (lambda x: 1.0, "expected to be a Tensor or None")]:
        with pytest.raises((RuntimeError, TypeError), match=error):
            wrong(reference, value)(x)
        with pytest.raises((RuntimeError, TypeError), match=error):
            thunder.jit(wrong(model, value))(x)


def test_eagers_errors_for_backward():
    model = _model()

    def no_grad_output(x):
        return x.sum().backward()

    def not_scalar(x):
        model(x).backward()

    def unused(x):
        return torch.autograd.grad(model[0](x).sum(), [model[2].weight])
    x = torch.randn(2, 4)
    for f, error in [(no_grad_output, "does not require grad"), (not_scalar, "only for scalar outputs"),
                     (unused, "not have been used in the graph")]:
        with pytest.raises(RuntimeError, match=error):
            f(x)
        with pytest.raises(RuntimeError, match=error):
            thunder.jit(f)(x)


def test_what_the_trace_cannot_do_is_refused_by_name():
    model = _model()

    def step(x):
        model(x).sum().backward()
        return x

    handle = model[0].weight.register_hook(lambda g: g * 2)
    with pytest.raises(NotImplementedError, match="tensor hooks"):
        thunder.jit(step)(torch.randn(2, 4))
    handle.remove()
    jitted = thunder.jit(step)
    jitted(torch.randn(2, 4))
    # a hook registered after the compile: the prologue sees it, the recompile refuses it
    handle = model[0].weight.register_hook(lambda g: g * 2)
    with pytest.raises(NotImplementedError, match="tensor hooks"):
        jitted(torch.randn(2, 4))
    handle.remove()

    def create_graph(x):
        model(x).sum().backward(create_graph=True)
        return x
    with pytest.raises(NotImplementedError, match="create_graph"):
        thunder.jit(create_graph)(torch.randn(2, 4))

    # an input that is not a leaf: eager would go on into its graph outside the call
    w = torch.randn(4, 4, requires_grad=True)
    with pytest.raises(NotImplementedError, match="not a leaf"):
        thunder.jit(step)(torch.randn(2, 4) @ w)


def test_a_transformers_llama_training_step_with_its_optimizer():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    reference = copy.deepcopy(model)

    def make_step(m):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

        def step(ids):
            loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            return loss.detach()
        return step
    jitted, eager = thunder.jit(make_step(model)), make_step(reference)
    for i in range(3):
        ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(jitted(ids), eager(ids))
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
            assert p.grad is None and q.grad is None


def _backward_twice(model):
    def step(x, y):
        loss = (model(x) - y).square().mean()
        loss.backward(retain_graph=True)
        loss.backward()  # (the gradients added twice, as eager's)
        return loss.detach()
    return step


def _first_layer_only(model):
    def step(x, y):
        loss = model[0](x).square().mean()  # (the last layer's .grad, set before, stays as it is)
        loss.backward(gradient=torch.tensor(2.0))
        return loss.detach()
    return step


def _frozen_first_layer(model):
    for p in model[0].parameters():
        p.requires_grad_(False)

    def step(x, y):
        loss = (model(x) - y).square().mean()
        loss.backward(inputs=[model[2].weight])  # (only this leaf's .grad)
        return loss.detach()
    return step


@pytest.mark.parametrize("make_step", [_backward_twice, _first_layer_only, _frozen_first_layer])
def test_which_leaves_get_gradients_as_eager(make_step):
    def with_grads(model):
        for p in model[2].parameters():
            p.grad = torch.ones_like(p)
        return make_step(model)
    _against_eager(with_grads)


def _critic():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))


def test_a_wgan_gp_critic_loss_with_requires_grad_on_its_samples():
    """WGAN-GP: the interpolated samples, computed without history, made leaves with
    requires_grad_() and differentiated with autograd.grad(create_graph=True) inside the jitted
    loss; the critic's gradients (second order through the penalty) equal eager's."""
    def critic_loss(critic, real, fake, eps):
        interp = (eps * real + (1 - eps) * fake).requires_grad_(True)
        assert interp.is_leaf and interp.requires_grad
        out = critic(interp)
        assert not out.is_leaf
        g, = torch.autograd.grad(out.sum(), interp, create_graph=True)
        penalty = ((g.norm(2, dim=1) - 1) ** 2).mean()
        return critic(fake).mean() - critic(real).mean() + 10 * penalty

    model, reference = _critic(), _critic()
    jitted = thunder.jit(critic_loss)
    for i in range(2):
        gen = torch.Generator().manual_seed(i)
        real, fake, eps = torch.randn(6, 4, generator=gen), torch.randn(6, 4, generator=gen), torch.rand(6, 1,
                                                                                                         generator=gen)
        got, expected = jitted(model, real, fake, eps), critic_loss(reference, real, fake, eps)
        torch.testing.assert_close(got, expected)
        got.backward()
        expected.backward()
        _same_models(model, reference)


def test_requires_grad_on_a_result_as_eager():
    """A physics-informed loss (du/dx of a clone of the input); eager's errors for a leaf
    updated in place, a computed tensor's flag turned off, an integer tensor; a made leaf
    returned or backpropagated into (eager fills its .grad) refused by name."""
    def pinn(net, x):
        xr = x.clone().requires_grad_()
        u = net(xr)
        du, = torch.autograd.grad(u.sum(), xr, create_graph=True)
        return du.square().mean() + u.mean()

    model, reference = _model(), _model()
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    got, expected = thunder.jit(pinn)(model, x), pinn(reference, x)
    torch.testing.assert_close(got, expected)
    got.backward()
    expected.backward()
    _same_models(model, reference)

    def in_place(x):
        z = (x * 2).requires_grad_()
        z.add_(1)
        return z * 2

    def flag_off(w):
        y = w * 2
        y.requires_grad_(False)
        return y

    def integer(x):
        return (x > 0).long().requires_grad_()

    def off_again(x):  # (a made leaf may turn its flag off again)
        z = (x * 2).requires_grad_()
        z.requires_grad_(False)
        return z * 3
    w = torch.randn(3, requires_grad=True)
    for f, arg, error in [(in_place, x, "leaf Variable that requires grad is being used in an in-place"),
                          (flag_off, w, "only change requires_grad flags of leaf variables"),
                          (integer, x, "only Tensors of floating point dtype can require gradients")]:
        with pytest.raises(RuntimeError, match=error):
            f(arg)
        with pytest.raises(RuntimeError, match=error):
            thunder.jit(f)(arg)
    got = thunder.jit(off_again)(x)
    torch.testing.assert_close(got, off_again(x))
    assert not got.requires_grad

    def returned(x):
        z = (x * 2).requires_grad_()
        return z * 3, z

    def backward_into(x):
        z = (x * 2).requires_grad_()
        (z * 3).sum().backward()
        return z.grad
    for f, error in [(returned, r"made a leaf with requires_grad_\(\) at .*test_inner_autograd.py:\d+ leaves"),
                     (backward_into, r"a backward into a tensor made a leaf with requires_grad_\(\)")]:
        with pytest.raises(NotImplementedError, match=error):
            thunder.jit(f)(x)


def test_detached_views_of_parameters_update_in_place_as_eager():
    """WGAN's weight clipping (`p.data.clamp_()` after the step) and SWA's AveragedModel
    (`p_avg.detach().copy_()`): a detached view requires no grad, so eager updates it in place
    with grad mode on; it was refused with eager's error for a view of a leaf that requires grad."""
    def make():
        torch.manual_seed(0)
        critic = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = torch.optim.RMSprop(critic.parameters(), lr=0.05)
        average = torch.optim.swa_utils.AveragedModel(critic)

        def step(x):
            loss = -critic(x).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            for p in critic.parameters():
                p.data.clamp_(-0.1, 0.1)
            average.update_parameters(critic)
            return loss.detach()
        return step, [*critic.parameters(), *average.parameters(), *average.buffers()]

    (step, state), (reference, expected) = make(), make()
    jitted = thunder.jit(step)
    for i in range(3):
        x = torch.randn(6, 4, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(jitted(x), reference(x))
        for a, b in zip(state, expected, strict=True):
            torch.testing.assert_close(a, b)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        thunder.jit(lambda w: w[:2].add_(1))(torch.randn(3, requires_grad=True))


def test_an_lr_scheduler_stepped_inside_with_an_int_argument_changing():
    """StepLR.step() inside the jitted step sets param_groups' lr (a write by torch's code to
    the user's optimizer): the traces at other sizes that generalize the changing int argument
    set it again, so the lr was halved three times in one call; a write into an optimizer's
    param_groups now counts as the function changing state (no traces at other sizes), as a write
    by the user's code does."""
    def make():
        torch.manual_seed(0)
        model = nn.Linear(4, 2)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)

        def step(x, i):
            (model(x) * i).sum().backward()
            opt.step()
            opt.zero_grad()
            scheduler.step()
            return model.weight.detach().clone()
        return step, model, opt

    (step, model, opt), (reference, model_ref, opt_ref) = make(), make()
    jitted = thunder.jit(step)
    for i in range(1, 5):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(jitted(x, i), reference(x, i))
        assert opt.param_groups[0]["lr"] == opt_ref.param_groups[0]["lr"] == 0.1 * 0.5 ** i
        _same_models(model, model_ref)
