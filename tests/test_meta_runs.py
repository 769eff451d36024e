"""torch's meta runs for eager strides are remembered per call signature (thunder/ops/meta_runs.py):
a block applied twice runs each of them once, and what the second block gets from the memo is
what a run gives: the same traces, eager's strides, views that alias their bases (an in-place
update through one reaches its base), copies that do not."""
import torch

import thunder
from thunder.ops import meta_runs

TORCH = ["torch"]  # (no fusion: what is checked is the trace, and no kernel is compiled)


def _block(x):
    t = x.transpose(0, 1)  # a view
    flat = t.reshape(t.shape[0], -1)  # a copy (t is not contiguous)
    m = x.mean(dim=-1, keepdim=True)  # (a Python reference in torch's meta kernels)
    c = torch.cat([t, t], dim=1)
    s = c[:, 1:]  # a view with a storage offset
    s.mul_(2)  # reaches c
    v = c.view(-1) if c.is_contiguous() else c.reshape(-1)
    return flat, m, c, s.transpose(0, 2), v


def _two_blocks(x, y):
    return _block(x) + _block(y)


def _traces(fn):
    return [str(t) for t in thunder.last_traces(fn)]


def test_remembered_runs_give_what_runs_give(monkeypatch):
    x, y = torch.randn(3, 4, 5), torch.randn(3, 4, 5)
    with monkeypatch.context() as m:
        m.setattr(meta_runs, "signature", lambda *args: (None, None))  # every run made
        unremembered = thunder.jit(_two_blocks, executors=TORCH)
        reference = unremembered(x, y)
    meta_runs._RUNS.clear()
    cold = thunder.jit(_two_blocks, executors=TORCH)  # (the second block's runs remembered from the first's)
    got = cold(x, y)
    kept = len(meta_runs._RUNS)
    assert kept > 0
    warm = thunder.jit(_two_blocks, executors=TORCH)  # (every signature remembered now: no run)
    got_warm = warm(x, y)
    assert len(meta_runs._RUNS) == kept
    assert _traces(cold) == _traces(unremembered) and _traces(warm) == _traces(unremembered)
    expected = _two_blocks(x, y)
    for result in (got, got_warm):
        for g, r, e in zip(result, reference, expected, strict=True):
            torch.testing.assert_close(g, e)
            assert g.stride() == r.stride(), (g.shape, g.stride(), r.stride())


def test_one_block_twice_runs_once():
    x, y = torch.randn(2, 6, 3), torch.randn(2, 6, 3)
    meta_runs._RUNS.clear()
    thunder.jit(_block, executors=TORCH)(x)
    one = len(meta_runs._RUNS)
    meta_runs._RUNS.clear()
    thunder.jit(_two_blocks, executors=TORCH)(x, y)
    assert len(meta_runs._RUNS) == one  # the second block's signatures are the first's


def test_views_from_the_memo_alias_their_base():
    def f(x):
        outs = []
        for _ in range(2):  # the second iteration's transpose comes from the memo
            b = x * 1  # a new tensor each time
            t = b.transpose(0, 1)
            t[0].add_(1)  # through the view into b
            outs.append(b)
        return outs

    x = torch.randn(3, 2)
    meta_runs._RUNS.clear()
    for g, e in zip(thunder.jit(f, executors=TORCH)(x), f(x), strict=True):
        torch.testing.assert_close(g, e)
