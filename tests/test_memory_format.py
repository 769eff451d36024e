"""memory_format= on to, contiguous, clone and the *_like factories, and channels_last CNN
training, against eager: values, grads and result strides."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import thunder
from tests.op_harness import check

CL = torch.channels_last


def inputs():
    x = torch.randn(2, 3, 4, 5)
    return {"contiguous": x, "channels_last": x.to(memory_format=CL),
            "permuted": torch.randn(2, 4, 5, 3).permute(0, 3, 1, 2)}


FNS = {
    "to": lambda x: x.to(memory_format=CL),
    "to_then_mul": lambda x: x.to(memory_format=CL) * 2,
    "to_dtype": lambda x: x.to(torch.float64, memory_format=CL),
    "to_contiguous_format": lambda x: x.to(memory_format=torch.contiguous_format),
    "contiguous": lambda x: x.contiguous(memory_format=CL),
    "contiguous_format": lambda x: x.contiguous(memory_format=torch.contiguous_format),
    "clone": lambda x: x.clone(memory_format=CL),
    "clone_preserve": lambda x: x.clone(memory_format=torch.preserve_format),
    "clone_contiguous": lambda x: torch.clone(x, memory_format=torch.contiguous_format),
    "zeros_like": lambda x: torch.zeros_like(x, memory_format=CL),
    "ones_like_preserve": lambda x: torch.ones_like(x),
    "full_like": lambda x: torch.full_like(x, 3.0, memory_format=CL),
    "empty_like": lambda x: torch.empty_like(x, memory_format=CL).fill_(1),
    "rand_like": lambda x: torch.rand_like(x, memory_format=CL) * 0,
    "randn_like_preserve": lambda x: torch.randn_like(x) * 0,
}


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "permuted"])
@pytest.mark.parametrize("name", list(FNS))
def test_strides_and_values_match_eager(name, layout):
    f, x = FNS[name], inputs()[layout]
    out, exp = thunder.jit(f)(x), f(x)
    assert out.stride() == exp.stride()
    assert out.dtype == exp.dtype
    torch.testing.assert_close(out, exp)


@pytest.mark.parametrize("name", ["to", "to_then_mul", "to_dtype", "contiguous", "clone", "zeros_like",
                                  "full_like"])
def test_op_harness(name):  # traced, decomposed and fused (values)
    check(FNS[name], inputs()["permuted"])


def test_returns_the_input_when_it_has_the_layout_already():
    x = inputs()["channels_last"]
    assert thunder.jit(lambda x: x.to(memory_format=CL))(x) is x
    assert thunder.jit(lambda x: x.contiguous(memory_format=CL))(x) is x
    y = inputs()["contiguous"]
    out = thunder.jit(lambda x: x.to(memory_format=CL))(y)
    assert out is not y and out.stride() == y.to(memory_format=CL).stride()


def test_in_place_update_of_the_converted_tensor_reaches_the_input_as_in_eager():
    def f(x):
        y = x.to(memory_format=CL)
        y.mul_(2)
        return y

    for layout in ("contiguous", "channels_last"):
        a, b = inputs()[layout], None
        b = a.clone(memory_format=torch.preserve_format)
        out, exp = thunder.jit(f)(a), f(b)
        torch.testing.assert_close(a, b)
        assert out.stride() == exp.stride()


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.mean((2, 3))), x


@pytest.mark.parametrize("fusion", [True, False])
@pytest.mark.parametrize("size", [8, 48])  # (48: large enough for fused kernels)
def test_channels_last_cnn_training_matches_eager(fusion, size):
    torch.manual_seed(0)
    model = SmallCNN().to(memory_format=CL)
    ref = SmallCNN().to(memory_format=CL)
    ref.load_state_dict(model.state_dict())
    jm = thunder.jit(model, **({} if fusion else {"fusion": False}))
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    for step in range(2):
        x = torch.randn(4, 3, size, size).to(memory_format=CL)
        (out, feat), (exp, exp_feat) = jm(x), ref(x)
        assert feat.stride() == exp_feat.stride() and feat.is_contiguous(memory_format=CL)
        # (fused reductions sum in another order than torch's: float rounding)
        torch.testing.assert_close(out, exp, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(feat, exp_feat, rtol=1e-4, atol=1e-4)
        out.square().sum().backward()
        exp.square().sum().backward()
        for (n, p), q in zip(model.named_parameters(), ref.parameters()):
            assert p.grad.stride() == q.grad.stride(), n
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=n)
        opt.step(), ref_opt.step()
        opt.zero_grad(), ref_opt.zero_grad()
    for a, b in zip(model.buffers(), ref.buffers()):  # BatchNorm's running statistics
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_channels_last_input_grad_strides():
    conv = nn.Conv2d(3, 4, 3)
    x = torch.randn(2, 3, 6, 6).to(memory_format=CL).requires_grad_()
    y = x.detach().clone(memory_format=torch.preserve_format).requires_grad_()
    f = lambda x: F.relu(conv(x)).to(memory_format=torch.contiguous_format)  # noqa: E731
    out, exp = thunder.jit(f)(x), f(y)
    assert out.stride() == exp.stride()
    out.sum().backward()
    exp.sum().backward()
    assert x.grad.stride() == y.grad.stride()
    torch.testing.assert_close(x.grad, y.grad)


_CONV = nn.Conv2d(16, 16, 3, padding=1, bias=False).to(memory_format=CL)
_BN = nn.BatchNorm2d(16)


@pytest.mark.parametrize("name, f", [
    ("elementwise", lambda x: (x * 2 + 1).relu()),
    ("contiguous_then_fused", lambda x: ((x * 2).contiguous(memory_format=CL) + 1).relu()),
    ("clone_of_fused", lambda x: torch.clone(x.exp(), memory_format=CL) * 3),
    ("broadcast_reduction", lambda x: (x.sum(1, keepdim=True) * x).relu()),
    # torch's meta kernel of conv2d says contiguous where the CPU kernel writes channels-last
    ("conv_bn_relu_pool", lambda x: F.avg_pool2d(F.relu(_BN(_CONV(x))), 2)),
])
def test_fused_results_have_eager_strides(name, f):
    # large enough for thunder-fuse's cost model: fused kernels write row-major, the program gives
    # the result eager's layout; an entry compiled for one input layout is not used for another
    x = torch.randn(8, 16, 32, 32)
    jf = thunder.jit(f)
    for inp in (x, x.to(memory_format=CL), x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)):
        out, exp = jf(inp), f(inp)
        assert out.stride() == exp.stride()
        torch.testing.assert_close(out, exp)
