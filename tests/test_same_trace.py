"""A miss that traces an earlier compile's program again reuses that program (runtime/same_trace.py):
a one-time flag set while the first call was traced (torch's record_function does this for every
optimizer step) costs an interpretation, not a compile; where anything the program depends on
differs, the miss compiles as before. Every call is checked against eager."""
import torch
import torch.nn.functional as F

import thunder

_checked = False
_scale = 2.0
_tag = object()


def _flagged(x, w):
    global _checked
    if not _checked:  # a lazily set module flag, as torch.autograd.profiler._cupti_monitor_checked
        _checked = True
    return F.gelu(x @ w).sum()


def _eager_grad(fn, x, w):
    w = w.detach().clone().requires_grad_()
    out = fn(x, w)
    out.backward()
    return out, w.grad


def test_flag_set_while_tracing_reuses_the_program():
    global _checked
    _checked = False
    torch.manual_seed(0)
    x, w = torch.randn(8, 8), torch.randn(8, 8, requires_grad=True)
    jf = thunder.jit(_flagged)
    for _ in range(3):
        out = jf(x, w)
        out.backward()
        want, want_grad = _eager_grad(_flagged, x, w)
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(w.grad, want_grad)
        w.grad = None
    stats = thunder.compile_stats(jf)
    assert stats.miss_reasons == ["first call", "global '_checked' changed (False -> True)"]
    assert "reused" in stats.last_stage_times and "autograd" not in stats.last_stage_times
    assert stats.cache_hits == 1


def _scaled(x):
    global _checked
    if not _checked:
        _checked = True
    return x * _scale


def test_a_changed_trace_compiles_again():
    global _checked, _scale
    _checked, _scale = False, 2.0
    jf = thunder.jit(_scaled)
    x = torch.randn(4)
    torch.testing.assert_close(jf(x), x * 2.0)
    _scale = 3.0  # a constant of the trace: its text differs
    torch.testing.assert_close(jf(x), x * 3.0)
    assert "reused" not in thunder.compile_stats(jf).last_stage_times
    _scale = 2.0


def test_requires_grad_changed_compiles_again():
    # the same acquired trace, but with an input that requires grad the program is an autograd one
    global _checked
    _checked = False
    jf = thunder.jit(_flagged)
    x = torch.randn(8, 8)
    w = torch.randn(8, 8)
    torch.testing.assert_close(jf(x, w), _flagged(x, w))
    w.requires_grad_()
    out = jf(x, w)
    out.backward()
    want, want_grad = _eager_grad(_flagged, x, w)
    torch.testing.assert_close(w.grad, want_grad)
    assert "reused" not in thunder.compile_stats(jf).last_stage_times


def _tagged(x):
    global _checked
    if not _checked:
        _checked = True
    return x.sin(), _tag


def test_returned_object_compared_by_identity():
    global _checked, _tag
    _checked = False
    jf = thunder.jit(_tagged)
    x = torch.randn(4)
    first = _tag
    assert jf(x)[1] is first
    _tag = object()  # the guard on it fails; the trace is the same, the returned object is not
    out, tag = jf(x)
    assert tag is _tag and tag is not first
    torch.testing.assert_close(out, x.sin())
    assert "reused" not in thunder.compile_stats(jf).last_stage_times


class _Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1  # a counter written each call: a new entry per call, its program reused
        return self.lin(x).relu()


def test_counter_attribute_written_reuses_the_program():
    torch.manual_seed(0)
    m = _Counter()
    jm = thunder.jit(m)
    x = torch.randn(3, 4)
    for i in range(3):
        torch.testing.assert_close(jm(x), m.lin(x).relu())
        assert m.calls == i + 1
    stats = thunder.compile_stats(jm)
    assert stats.cache_misses == 3 and "reused" in stats.last_stage_times
