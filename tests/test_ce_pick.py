"""Cross-entropy / nll_loss's target logit read by one load a row (lowering/linalg/pick.py),
not a one-hot compare over the row: values and grads as eager's at the edges (targets in the
first and last column, ignore_index rows, ignore_index past the classes, non-contiguous
logits, weights, label smoothing, bf16, a spatial dim), and the kernels' text."""
import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.lowering.fuse import region_text
from thunder.lowering.linalg import lower_region
from test_fusion import _funcs

N, C = 96, 257


def _targets(g, n=N, ignore=-100):
    t = torch.randint(0, C, (n,), generator=g)
    t[0], t[1], t[2], t[5::7] = 0, C - 1, ignore, ignore
    return t


def _fused_texts(jf):
    texts = []
    for trace in thunder.last_traces(jf) + (thunder.last_backward_traces(jf) or []):
        if trace.producer.startswith("thunder-fuse"):
            module = trace.module()
            for name, f in _funcs(module).items():
                if name.startswith("fusion_"):
                    texts.append(lower_region(region_text(f), name).text)
    return texts


CASES = {
    "mean": (dict(), "contiguous"),
    "none_strided": (dict(reduction="none"), "transposed"),
    "sum_sliced": (dict(reduction="sum"), "sliced"),
    "weight_mean": (dict(weight=True), "contiguous"),
    "smoothing_weight": (dict(weight=True, label_smoothing=0.2, reduction="sum"), "transposed"),
    "ignore_past_classes": (dict(ignore_index=1000, reduction="none"), "contiguous"),
    "ignore_first_class": (dict(ignore_index=0), "contiguous"),
    "bf16": (dict(), "bf16"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cross_entropy_pick_matches_eager(case):
    kw, layout = CASES[case]
    kw = dict(kw)
    g = torch.Generator().manual_seed(1)
    if layout == "transposed":
        x = torch.randn(C, N, generator=g).t()
    elif layout == "sliced":
        x = torch.randn(N, 2 * C, generator=g)[:, ::2]
    else:
        x = torch.randn(N, C, generator=g)
    tol = {}
    if layout == "bf16":
        x, tol = x.bfloat16(), dict(rtol=2e-2, atol=2e-2)
    x[3, 0] = 30.0  # a row whose target (0 below) has the largest logit
    extra = [torch.rand(C, generator=g, dtype=x.dtype)] if kw.pop("weight", False) else []
    t = _targets(g, ignore=kw.get("ignore_index", -100))
    t[3] = 0
    fn = lambda x, t, *w: F.cross_entropy(x, t, *w, **kw)  # noqa: E731
    xs = [x.detach().clone().requires_grad_() for _ in range(2)]
    jf = thunder.jit(fn, fusion="always")
    out, expected = jf(xs[0], t, *extra), fn(xs[1], t, *extra)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    torch.testing.assert_close(out, expected, **tol)
    cot = torch.rand(out.shape, generator=g, dtype=out.dtype)
    (out * cot).sum().backward()
    (expected * cot).sum().backward()
    torch.testing.assert_close(xs[0].grad, xs[1].grad, **(tol or dict(rtol=1e-4, atol=1e-6)))
    forward = _fused_texts(jf)[0]
    # the target's logit (and weight) by a load at the target's column (the one-hot compare's
    # generics are left unused, removed by the pipeline)
    assert "tensor.extract" in forward, forward


def test_nll_loss_spatial_pick_matches_eager():
    """(N, C, d) logits: the class dim is not the last; the pick reads x[n, t[n, j], j]."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, C, 9, generator=g).log_softmax(1)
    t = torch.randint(0, C, (4, 9), generator=g)
    t[0, 0], t[1, 1], t[2, 2] = 0, C - 1, -100
    w = torch.rand(C, generator=g)
    fn = lambda x, t, w: F.nll_loss(x, t, w, reduction="none")  # noqa: E731
    jf = thunder.jit(fn, fusion="always")
    torch.testing.assert_close(jf(x, t, w), fn(x, t, w))
    assert any("tensor.extract" in text for text in _fused_texts(jf))


def test_tiled_cross_entropy_kernel_picks_by_rows():
    """A kernel tiled by rows reads each tile's target logits by the tile's own row index."""
    g = torch.Generator().manual_seed(3)
    x, t = torch.randn(1024, 513, generator=g), torch.randint(0, 513, (1024,), generator=g)
    t[::5] = -100
    t[1], t[1000] = 0, 512
    fn = lambda x, t: F.cross_entropy(x, t, reduction="none")  # noqa: E731
    jf = thunder.jit(fn)
    torch.testing.assert_close(jf(x, t), fn(x, t))
    for trace in thunder.last_traces(jf):
        if trace.producer.startswith("thunder-fuse"):
            module = trace.module()
            (name, f), = [(n, f) for n, f in _funcs(module).items() if n.startswith("fusion_")]
            lowered = lower_region(region_text(f), name)
            assert lowered.rows is not None and "tensor.extract" in lowered.text, lowered.text
