"""thunder.jit of a torch.optim optimizer's step: the parameters and optimizer state it reads and
updates in place equal eager's step by step. torch.compiler.is_compiling() answers True inside
thunder, so torch's optimizers take the path they take under torch.compile (Adam's bias
corrections computed from its step as float32 tensors, not as Python floats): equal to eager
within float32 rounding, as torch.compile's."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder

OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    "adamw_foreach": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, foreach=True),
    "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True),
}


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _backward(model, step):
    torch.manual_seed(step)
    x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
    F.cross_entropy(model(x), y).backward()


def _assert_same(model, opt, reference, ref_opt):
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q)
        assert opt.state[p].keys() == ref_opt.state[q].keys()
        for k in opt.state[p]:
            torch.testing.assert_close(opt.state[p][k], ref_opt.state[q][k])


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_jitted_step_after_eagers_first_equals_eager(name):
    model, reference = _model(), _model()
    opt, ref_opt = OPTIMIZERS[name](model.parameters()), OPTIMIZERS[name](reference.parameters())
    step = thunder.jit(opt.step)
    for i in range(4):
        for m, o in ((model, opt), (reference, ref_opt)):
            _backward(m, i)
            (o.step if i == 0 or o is ref_opt else step)()  # (eager's first step fills the state)
            o.zero_grad()
        _assert_same(model, opt, reference, ref_opt)
    assert thunder.cache_misses(step) == 1


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_jitted_step_from_the_first_equals_eager(name):
    # the first step fills the state (a defaultdict keyed by the parameters: the program writes
    # each parameter's dict of new tensors, e.g. Adam's four step counters, each a tensor of its
    # own as in eager), the second finds it: two programs
    model, reference = _model(), _model()
    opt, ref_opt = OPTIMIZERS[name](model.parameters()), OPTIMIZERS[name](reference.parameters())
    step = thunder.jit(opt.step)
    for i in range(4):
        for m, o in ((model, opt), (reference, ref_opt)):
            _backward(m, i)
            (step if o is opt else o.step)()
            o.zero_grad()
        _assert_same(model, opt, reference, ref_opt)
    counters = [s["step"] for s in opt.state.values() if "step" in s]
    assert len({id(c) for c in counters}) == len(counters)
    assert thunder.cache_misses(step) == (1 if name == "sgd" else 2)


def test_a_jitted_training_step_with_the_optimizer_step_inside():
    # forward and backward by the jitted model, the optimizer's step jitted too
    model, reference = _model(), _model()
    jm = thunder.jit(model)
    opt, ref_opt = OPTIMIZERS["adamw"](model.parameters()), OPTIMIZERS["adamw"](reference.parameters())
    step = thunder.jit(opt.step)
    for i in range(3):
        _backward(jm, i)
        step()
        opt.zero_grad()
        _backward(reference, i)
        ref_opt.step()
        ref_opt.zero_grad()
        _assert_same(model, opt, reference, ref_opt)


@pytest.mark.parametrize("name", ["adamw", "adamw_foreach"])
def test_the_step_fuses_each_parameters_update(name):
    # every op of the step ran under no_grad: the program runs with grad mode off and records no
    # history, its no_grad updates pass their values on (runtime/grad_free_rewrites.py), and the
    # foreach ops are the per-tensor ones (ops/foreach.py): the updates fuse
    model = _model()
    opt = OPTIMIZERS[name](model.parameters())
    step = thunder.jit(opt.step)
    for i in range(2):
        _backward(model, i)
        step()
    program = str(thunder.last_traces(step)[-1])
    assert "fusion_" in program
    assert "no_grad_update" not in program and "_foreach" not in program and ".clone()" not in program
