"""approx.exp_f32_fast (f32 exp computed in f32): its largest error against float64 is at most
eager's (SLEEF's expf) over random bit patterns, dense values over exp's whole f32 range (with
the denormal results) and the special values."""
import math
import sys

import torch

import thunder
import thunder.lowering.linalg.approx as approx

SPECIAL = [float("-inf"), float("inf"), float("nan"), 0.0, -0.0, 88.72283, 88.7228, 88.73, -87.33, -87.34,
           -103.97, -103.98, -104.0, -110.0, 1e-30, -1e-30, 1e-45, -1e-45]


def _ulps(r, ref):
    """|r - ref| in f32 ulps at ref (denormals: 2^-149); 0 where both round to the same
    non-finite value, inf where only one is finite."""
    near = ref.float()
    _, e = torch.frexp(ref.abs().clamp_min(2.0 ** -126))
    err = torch.ldexp((r.double() - ref).abs(), 24 - e)
    same = (r == near) | (r.isnan() & near.isnan())
    return torch.where(r.isfinite() & near.isfinite(), err, torch.where(same, 0.0, math.inf))


def test_exp_f32_fast_as_accurate_as_eager(monkeypatch):
    g = torch.Generator().manual_seed(0)
    n = 1 << 17
    bits = torch.randint(-2 ** 31, 2 ** 31 - 1, (n,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    dense = (torch.rand(n, generator=g, dtype=torch.float64) * 200 - 110).float()  # to -110: denormals, 0
    near = (torch.rand(n, generator=g, dtype=torch.float64) * 1.4 - 0.7).float()
    x = torch.cat([bits, dense, near, torch.tensor(SPECIAL)])
    monkeypatch.setitem(approx.APPROX, ("math.exp", "f32"), approx.exp_f32_fast)
    monkeypatch.setattr(sys.modules["thunder.lowering.linalg.to_linalg"], "_LOWERED", {})  # (no region lowered with the other exp)
    fn = lambda x: torch.exp(x * 1 - 0.0)  # noqa: E731
    jf = thunder.jit(fn, fusion="always")
    ours = jf(x)
    assert "fusion_0(" in str(thunder.last_traces(jf)[-1])  # (the kernel, not torch.exp)
    eager, ref = fn(x), torch.exp(x.double())
    ours_err, eager_err = _ulps(ours, ref), _ulps(eager, ref)
    assert ours_err.max().item() <= min(eager_err.max().item(), 0.53), (x[ours_err.argmax()], ours_err.max())
    assert ours_err.mean().item() < 0.2
    # nan, +-inf, 0 and the ends of the range as eager (an infinite error where they differ)
    assert _ulps(ours[-len(SPECIAL):], ref[-len(SPECIAL):]).max().item() <= 0.5
