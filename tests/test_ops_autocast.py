"""Ops inside torch.autocast(bfloat16): thunder's results have eager's dtypes and values, and the
gradients eager's, on op_harness.DEVICE (the CPU here; CUDA in benchmarks/gpu/run.sh, whose ops
part runs the tests/test_ops_*.py files there). Autocast's policy per op is ops/autocast.py's
lists; an op whose policy depends on how torch computes it (einsum's pairwise products, the
LSTM's kernel, a padding mode) runs as torch's own call in the region. Most inputs are products
(`a @ b`: bfloat16 in the region) so that ops see autocast's dtypes, as in a model."""
import pytest
import torch
import torch.nn.functional as F

import thunder
from op_harness import DEVICE


def _cases():
    def mm(f):  # an op on a product: bfloat16 in the region
        return lambda a, b: f(a @ b, b)

    return {
        "matmul": lambda a, b: a @ b,
        "rmatmul": lambda a, b: a.__rmatmul__(b),
        "linear": lambda a, b: F.linear(a, b, b[0]),
        "bmm": lambda a, b: torch.bmm(a[None], b[None]),
        "baddbmm": lambda a, b: torch.baddbmm(a[None], a[None], b[None]),
        "addmm": lambda a, b: torch.addmm(a, a, b),
        "outer": lambda a, b: torch.outer(a[0], b[0]),
        "einsum_pair": lambda a, b: torch.einsum("ij,jk->ik", a, b),
        "einsum_three": lambda a, b: torch.einsum("ij,jk,kl->il", a, b, a),
        "einsum_elementwise": lambda a, b: torch.einsum("ij,ij->ij", a, b),
        "einsum_one": lambda a, b: torch.einsum("ij->j", a),
        "bilinear": lambda a, b: F.bilinear(a, b, b.reshape(1, 8, 8).expand(2, 8, 8)),
        "sdpa": lambda a, b: F.scaled_dot_product_attention(a[None], b[None], b[None]),
        "conv1d": lambda a, b: F.conv1d(a[None], b.reshape(8, 8, 1)),
        "conv2d": lambda a, b: F.conv2d(a.reshape(1, 2, 4, 8), b.reshape(2, 2, 4, 4)),
        "conv_transpose2d": lambda a, b: F.conv_transpose2d(a.reshape(1, 2, 4, 8), b.reshape(2, 2, 4, 4)),
        "lstm": lambda a, b: torch.lstm(a[None], (b[:1, None], b[1:2, None]),
                                        (b.repeat(4, 1), b.repeat(4, 1), b[0].repeat(4), b[1].repeat(4)),
                                        True, 1, 0.0, True, False, True)[0],
        "pad_constant": mm(lambda x, b: F.pad(x[None], (2, 2))),
        "pad_reflect": mm(lambda x, b: F.pad(x[None], (2, 2), mode="reflect")),
        "pad_reflect_2d": mm(lambda x, b: F.pad(x[None, None], (1, 1, 1, 1), mode="reflect")),
        "pad_replicate": mm(lambda x, b: F.pad(x[None], (2, 2), mode="replicate")),
        "pad_circular": mm(lambda x, b: F.pad(x[None], (2, 2), mode="circular")),
        "cat": mm(lambda x, b: torch.cat([x, b])),
        "stack": mm(lambda x, b: torch.stack([x, b])),
        "where": mm(lambda x, b: torch.where(b > 0, x, b)),
        "add": mm(lambda x, b: x + b),
        "exp": mm(lambda x, b: torch.exp(x)),
        "log_softmax": mm(lambda x, b: F.log_softmax(x, -1)),
        "softmax": mm(lambda x, b: F.softmax(x, -1)),
        "layer_norm": mm(lambda x, b: F.layer_norm(x, (8,), b[0], b[1])),
        "rms_norm": mm(lambda x, b: F.rms_norm(x, (8,), b[0])),
        "group_norm": mm(lambda x, b: F.group_norm(x.reshape(2, 4, 8), 2)),
        "sum": mm(lambda x, b: x.sum(-1)),
        "mean": mm(lambda x, b: x.mean(-1)),
        "cumsum": mm(lambda x, b: x.cumsum(-1)),
        "prod": mm(lambda x, b: x.prod(-1)),
        "pow": mm(lambda x, b: x.pow(2)),
        "rpow": mm(lambda x, b: 2 ** x),
        "reciprocal": mm(lambda x, b: x.reciprocal()),
        "rtruediv": mm(lambda x, b: 1 / x),
        "rsqrt": mm(lambda x, b: x.abs().rsqrt()),
        "log1p": mm(lambda x, b: x.abs().log1p()),
        "expm1": mm(lambda x, b: x.expm1()),
        "tan": mm(lambda x, b: x.tan()),
        "log2": mm(lambda x, b: x.abs().log2()),
        "log10": mm(lambda x, b: x.abs().log10()),
        "exp2": mm(lambda x, b: x.exp2()),
        "sigmoid": mm(lambda x, b: x.sigmoid()),
        "gelu": mm(lambda x, b: F.gelu(x)),
        "div_scalar": mm(lambda x, b: x / 3),
        "sqrt": mm(lambda x, b: x.abs().sqrt()),
        "softplus": mm(lambda x, b: F.softplus(x)),
        "normalize": mm(lambda x, b: F.normalize(x)),
        "var": mm(lambda x, b: x.var(-1)),
        "std": mm(lambda x, b: x.std(-1)),
        "logsumexp": mm(lambda x, b: torch.logsumexp(x, -1)),
        "cross_entropy": mm(lambda x, b: F.cross_entropy(x, torch.arange(8, device=x.device) % 3)),
        "nll_loss": mm(lambda x, b: F.nll_loss(F.log_softmax(x, -1), torch.arange(8, device=x.device) % 3)),
        "mse_loss": mm(lambda x, b: F.mse_loss(x, b)),
        "l1_loss": mm(lambda x, b: F.l1_loss(x, b)),
        "interpolate": mm(lambda x, b: F.interpolate(x[None, None], scale_factor=2, mode="bilinear")),
        "embedding": mm(lambda x, b: F.embedding(torch.tensor([1, 2], device=x.device), x)),
        "scatter_add": mm(lambda x, b: x.scatter_add(0, torch.zeros(8, 8, dtype=torch.long, device=x.device), x)),
        "index_put": mm(lambda x, b: x.index_put((torch.tensor([1, 2], device=x.device),), x[:2] * 2)),
        "atan2": mm(lambda x, b: torch.atan2(x, b)),
        # (eager raises on the CPU: index_put's own dtype check; on CUDA autocast promotes)
        "setitem_advanced": mm(_setitem_advanced),
        "setitem_basic": mm(_setitem_basic),
    }


def _setitem_advanced(x, b):
    x = x.clone()
    x[torch.tensor([1, 2], device=x.device)] = b[:2]
    return x


def _setitem_basic(x, b):
    x = x.clone()
    x[0] = b[0]
    return x


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "grad"])
def test_autocast_op_matches_eager(name, grad):
    fn = CASES[name]
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(8, 8, generator=g).to(DEVICE).requires_grad_(grad) for _ in range(2)]
    results = []
    for f in (fn, thunder.jit(fn)):
        with torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16):
            try:
                out = f(*inputs)
            except RuntimeError as e:  # eager's error: thunder's the same
                results.append(e)
                continue
            weights = torch.linspace(-1, 1, out.numel(), device=DEVICE).view(out.shape)
            grads = torch.autograd.grad((out.float() * weights).sum(), inputs, allow_unused=True) if grad else ()
        results.append((out, *grads))
    if isinstance(results[0], Exception) or isinstance(results[1], Exception):
        assert str(results[1]) == str(results[0])
        return
    for got, want in zip(results[1], results[0]):
        if want is None:
            assert got is None
            continue
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        scale = want.detach().abs().max().item() + 1
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * scale)
