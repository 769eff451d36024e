"""Module calls without hooks interpret forward directly (runtime/module_calls.py): the same
results and gradients as eager, the same guards as interpreting torch's Module.__call__, and a
hook registered after the first call recompiles (its result and gradients are eager's)."""
import copy
import traceback

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules import module as torch_module
from torch.utils.checkpoint import checkpoint

import thunder
from thunder.runtime import module_calls


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(6)
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        return x + torch.tanh(self.lin(self.norm(x)))


class Net(nn.Module):
    def __init__(self, checkpointed=False):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(6, 3)
        self.checkpointed = checkpointed

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.checkpointed else b(x)
        return self.head(x)


def _pair(checkpointed=False):
    torch.manual_seed(0)
    m = Net(checkpointed)
    return m, copy.deepcopy(m)


def _step(m, x):
    """Output and parameter gradients of one forward and backward (grads reset first)."""
    m.zero_grad(set_to_none=True)
    out = m(x)
    out.square().sum().backward()
    return out.detach(), [p.grad for p in m.parameters()]


def _check(tm, ref, x):
    out, grads = _step(tm, x)
    ref_out, ref_grads = _step(ref, x)
    torch.testing.assert_close(out, ref_out)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r)


@pytest.fixture
def fast_calls(monkeypatch):
    """Counts the module calls that took the fast path."""
    taken = []
    plain = module_calls._plain

    def counting(module):
        ok = plain(module)
        taken.append(ok)
        return ok

    monkeypatch.setattr(module_calls, "_plain", counting)
    return taken


def _hooks(ref, m, register):
    """The same hook on the jitted model's module and on the reference's (handles returned)."""
    return [register(ref), register(m)]


@pytest.mark.parametrize("checkpointed", [False, True])
@pytest.mark.parametrize("kind", ["forward_pre", "forward"])
def test_a_hook_registered_after_the_first_call_runs_and_recompiles(kind, checkpointed, fast_calls):
    m, ref = _pair(checkpointed)
    tm = thunder.jit(m)
    x = torch.randn(4, 6)
    _check(tm, ref, x)
    assert any(fast_calls) and thunder.cache_misses(tm) == 1
    register = {
        "forward_pre": lambda net: net.blocks[1].lin.register_forward_pre_hook(lambda mod, inp: (inp[0] * 2,)),
        "forward": lambda net: net.blocks[0].norm.register_forward_hook(lambda mod, inp, out: out - 1),
    }[kind]
    _hooks(ref, m, register)
    _check(tm, ref, x)
    assert thunder.cache_misses(tm) == 2
    _check(tm, ref, x)
    assert thunder.cache_misses(tm) == 2


@pytest.mark.parametrize("kind", ["_backward_hooks", "_backward_pre_hooks"])
def test_a_full_backward_hook_registered_after_the_first_call_is_not_missed(kind, fast_calls):
    """Module backward hooks are not supported (docs/sharp_edges.md): the call after one is
    registered recompiles and raises, as jitting the module with the hook does, rather than
    running the first program without it."""
    m, ref = _pair()
    tm = thunder.jit(m)
    x = torch.randn(4, 6)
    _check(tm, ref, x)
    assert all(fast_calls)
    if kind == "_backward_hooks":
        m.blocks[1].register_full_backward_hook(lambda mod, gin, gout: (gin[0] * 3,))
    else:
        m.head.register_full_backward_pre_hook(lambda mod, gout: (gout[0] * 5,))
    with pytest.raises(RuntimeError, match="backward hooks"):
        tm(x)
    assert kind in thunder.compile_stats(tm).last_miss_reason


@pytest.mark.parametrize("kind", ["forward_pre", "forward"])
def test_a_global_hook_registered_after_the_first_call_runs_and_recompiles(kind, fast_calls):
    m, ref = _pair()
    tm = thunder.jit(m)
    x = torch.randn(4, 6)
    _check(tm, ref, x)
    assert any(fast_calls)
    register = {
        "forward_pre": lambda: torch_module.register_module_forward_pre_hook(
            lambda mod, inp: (inp[0] + 1,) if isinstance(mod, nn.Linear) else None),
        "forward": lambda: torch_module.register_module_forward_hook(
            lambda mod, inp, out: out * 2 if isinstance(mod, nn.LayerNorm) else None),
    }[kind]
    handle = register()
    try:
        _check(tm, ref, x)  # (one global hook: both models see it)
        assert thunder.cache_misses(tm) == 2
    finally:
        handle.remove()
    _check(tm, ref, x)  # the hook removed: the first program again
    assert thunder.cache_misses(tm) == 2


def test_a_global_backward_hook_registered_after_the_first_call_is_not_missed():
    m, ref = _pair()
    tm = thunder.jit(m)
    x = torch.randn(4, 6)
    _check(tm, ref, x)
    handle = torch_module.register_module_full_backward_hook(lambda mod, gin, gout: None)
    try:
        with pytest.raises(RuntimeError, match="backward hooks"):
            tm(x)
        assert "_global_backward_hooks" in thunder.compile_stats(tm).last_miss_reason
    finally:
        handle.remove()


def test_removing_a_hook_goes_back_to_the_fast_path(fast_calls):
    m, ref = _pair()
    handles = _hooks(ref, m, lambda net: net.head.register_forward_hook(lambda mod, inp, out: out + 2))
    tm = thunder.jit(m)
    x = torch.randn(4, 6)
    _check(tm, ref, x)
    assert not all(fast_calls)  # (the head's call interpreted torch's code)
    for h in handles:
        h.remove()
    fast_calls.clear()
    _check(tm, ref, x)
    assert all(fast_calls) and thunder.cache_misses(tm) == 2


def test_forward_replaced_on_the_instance_after_the_first_call(fast_calls):
    m, ref = _pair()
    tm = thunder.jit(m)
    x = torch.randn(4, 6)
    _check(tm, ref, x)
    for net in (m, ref):
        lin = net.blocks[0].lin
        lin.forward = lambda inp, lin=lin: F.linear(inp, lin.weight) * 0.5
    _check(tm, ref, x)
    assert thunder.cache_misses(tm) == 2 and all(fast_calls)


def test_a_subclass_overriding_call_and_call_impl():
    class Doubling(nn.Linear):
        def __call__(self, *args, **kwargs):  # torch's __call__ through super(): the fast path
            return super().__call__(*args, **kwargs) * 2

    class OwnCallImpl(nn.Linear):
        def _call_impl(self, *args, **kwargs):  # torch's _wrapped_call_impl calls this one
            return self.forward(*args, **kwargs) + 1

    torch.manual_seed(0)
    m = nn.Sequential(Doubling(6, 6), nn.ReLU(), OwnCallImpl(6, 6))
    ref = copy.deepcopy(m)
    tm = thunder.jit(m)
    x = torch.randn(4, 6)
    _check(tm, ref, x)
    for net in (m, ref):  # a hook on the subclass overriding __call__ runs through its super() call
        net[0].register_forward_hook(lambda mod, inp, out: out - 3)
    _check(tm, ref, x)
    assert thunder.cache_misses(tm) == 2


def test_module_call_impl_replaced_on_the_class_recompiles():
    m, ref = _pair()
    tm = thunder.jit(m)
    x = torch.randn(4, 6)
    _check(tm, ref, x)

    def _call_impl(self, *args, **kwargs):
        return self.forward(*args, **kwargs) * 0.5

    Block._call_impl = _call_impl
    try:
        _check(tm, ref, x)
        assert thunder.cache_misses(tm) == 2
    finally:
        del Block._call_impl


def _nested():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.GELU())))


def test_the_guards_are_those_of_interpreting_torchs_call(monkeypatch):
    x = torch.randn(2, 4)
    tm = thunder.jit(_nested())
    tm(x)
    fast = str(thunder.last_prologue_traces(tm)[0])
    monkeypatch.setattr(module_calls, "CALL", None)  # torch's Module.__call__ interpreted
    tm = thunder.jit(_nested())
    tm(x)
    assert fast == str(thunder.last_prologue_traces(tm)[0])
    for hooks in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                  "_global_forward_hooks", "_global_backward_pre_hooks", "_compiled_call_impl", "'forward' in"):
        assert hooks in fast


def test_an_error_in_a_submodule_has_the_users_frames():
    class Bad(nn.Module):
        def forward(self, x):
            return x.view(7, 7)  # the wrong size

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.bad = Bad()

        def forward(self, x):
            return self.bad(x)

    with pytest.raises(RuntimeError) as info:
        thunder.jit(Outer())(torch.randn(3))
    frames = [(f.filename, f.name) for f in traceback.extract_tb(info.value.__traceback__)]
    mine = [i for i, (file, _) in enumerate(frames) if file == __file__]
    assert [frames[i][1] for i in mine] == ["test_an_error_in_a_submodule_has_the_users_frames", "forward", "forward"]
    assert mine[1] + 1 == mine[2]  # nothing of thunder's between the caller's line and forward's


def test_a_read_made_again_after_a_bookkeeping_call_was_dropped_is_guarded_again():
    """The state tracker skips a global or attribute read it guarded already (the global hook
    dicts, read at every module call), but not once that guard was dropped with a bookkeeping
    call's (runtime/state.py)."""
    from thunder.interpreter import Provenance
    from thunder.runtime.state import StateTracker

    g = {"K": 2.0, "HOOKS": {}, "F": F}
    state = StateTracker(None, None)

    def read_all():
        for name in g:
            assert state.load(g[name], Provenance("global", name, g, "f", "f.py", 1)) is g[name]
        return dict(state.guards)

    first = read_all()
    assert len(first) == 3 and read_all() == first
    state._drop_since(0, 0, 0, 0)
    assert not state.guards
    assert read_all().keys() == first.keys()


class ReturnsNone(nn.Module):
    def forward(self, x):
        return None


class CallsAProbe(nn.Module):
    def __init__(self):
        super().__init__()
        self.probe, self.lin = ReturnsNone(), nn.Linear(4, 4)

    def forward(self, x):
        self.probe(x)
        return self.lin(x)


def test_a_hook_on_a_module_returning_none_registered_later_runs():
    """Module.__call__ of a forward returning None changes nothing: torch's call was taken for
    bookkeeping and its guards (the hook dicts empty) dropped, so a forward hook registered later
    was never called (runtime/state.py: a call that ran the user's code keeps its reads)."""
    model = CallsAProbe()
    jm, x = thunder.jit(model), torch.randn(2, 4)
    torch.testing.assert_close(jm(x), model(x))
    seen = []
    model.probe.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape))
    torch.testing.assert_close(jm(x), model(x))
    assert seen == [x.shape, x.shape] and thunder.compile_stats(jm).cache_misses == 2
