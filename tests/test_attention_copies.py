"""The copies the generated program of a Llama-style attention block makes (counted by a
TorchDispatchMode over the aten ops it runs), against eager's values, gradients and strides.

- thunder-fuse sinks the transposes of q and k below their rotary embedding
  (lowering/layout/sink_transposes.py): the kernel writes [B, S, H, D] row-major, so the attention's output
  has eager's layout and `out.transpose(1, 2).contiguous()` before o_proj copies nothing (it
  copied [B, H, S, D] in the forward and again where the backward recomputes it);
- the rotary embedding's backward adds two slice gradients (`thunder.unslice`): the kernels take
  them as parts along the last dim (lowering/linalg/op_lowering.py), so the backward's rotary
  region is one kernel, without a zeros tensor and a copy into it per half."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import thunder

B, S, H, D = 2, 16, 4, 8
E = H * D
COPIES = {"copy_", "clone", "_to_copy", "new_zeros", "zeros", "contiguous", "cat", "constant_pad_nd"}


class _CountCopies(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in COPIES:
            self.calls.append((name, [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


def _rotate_half(x):
    return torch.cat((-x[..., D // 2:], x[..., : D // 2]), dim=-1)


def attention(x, wq, wk, wv, wo, cos, sin):
    q = F.linear(x, wq).view(B, S, H, D).transpose(1, 2)
    k = F.linear(x, wk).view(B, S, H, D).transpose(1, 2)
    v = F.linear(x, wv).view(B, S, H, D).transpose(1, 2)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.linear(o.transpose(1, 2).contiguous().reshape(B, S, E), wo)


def attention_returning_q(x, wq, cos, sin):
    """The rotated q is a result: its strides are the user's (eager's), whatever the kernel writes."""
    q = F.linear(x, wq).view(B, S, H, D).transpose(1, 2)
    q = q * cos + _rotate_half(q) * sin
    return q, q.sum()


def _inputs(requires_grad=True):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, S, E, generator=g)
    ws = [torch.randn(E, E, generator=g) * 0.2 for _ in range(4)]
    angles = torch.arange(S)[:, None] * torch.arange(D)[None] * 0.1
    return [t.requires_grad_(requires_grad) for t in [x, *ws]], angles.cos(), angles.sin()


@pytest.fixture(scope="module")
def jitted():
    return thunder.jit(attention, fusion="always")


def test_training_step_copies_nothing(jitted):
    leaves, cos, sin = _inputs()
    expected = attention(*leaves, cos, sin)
    expected.sum().backward()
    grads = [t.grad for t in leaves]
    leaves2, _, _ = _inputs()
    jitted(*leaves2, cos, sin)  # (compiled outside the count)
    for t in leaves2:
        t.grad = None
    counter = _CountCopies()
    with counter:
        out = jitted(*leaves2, cos, sin)
        out.sum().backward()
    assert counter.calls == []
    torch.testing.assert_close(out, expected)
    assert out.stride() == expected.stride()
    for t, g in zip(leaves2, grads):
        torch.testing.assert_close(t.grad, g)
        assert t.grad.stride() == g.stride()


def test_forward_without_grad_copies_nothing(jitted):
    leaves, cos, sin = _inputs(requires_grad=False)
    with torch.no_grad():
        expected = attention(*leaves, cos, sin)
        jitted(*leaves, cos, sin)
        counter = _CountCopies()
        with counter:
            out = jitted(*leaves, cos, sin)
    assert counter.calls == []
    torch.testing.assert_close(out, expected)


def test_rotary_regions_write_the_layout_of_their_input(jitted):
    """The forward's rotary kernel writes q and k in [B, S, H, D] (the transposes left after it
    are views; at this size, 4 KiB a tensor, q's and k's rotary embeddings are one kernel:
    fuse.input_siblings of tiny ops) and the backward's rotary region is one kernel per tensor."""
    leaves, cos, sin = _inputs()
    jitted(*leaves, cos, sin).sum().backward()
    forward = str(thunder.last_traces(jitted)[-1])
    backward = str(thunder.last_backward_traces(jitted)[-1])
    kernels = [line for line in forward.splitlines() if "= fusion_" in line]
    assert len(kernels) == 1 and kernels[0].count(f"float32[{B}, {S}, {H}, {D}]") == 2, forward
    assert "unslice" not in backward and "narrow" not in backward, backward


def test_visible_result_keeps_eager_strides():
    jf = thunder.jit(attention_returning_q, fusion="always")
    leaves, cos, sin = _inputs()
    expected = attention_returning_q(leaves[0], leaves[1], cos, sin)
    leaves2, _, _ = _inputs()
    out = jf(leaves2[0], leaves2[1], cos, sin)
    torch.testing.assert_close(out, expected)
    assert out[0].stride() == expected[0].stride()
    (out[0] * 2).sum().backward()
    (expected[0] * 2).sum().backward()
    torch.testing.assert_close(leaves2[1].grad, leaves[1].grad)


@pytest.mark.parametrize("index", [(slice(1, None), slice(3, None)),  # two dims sliced
                                   (slice(None, None, 2), slice(1, None, 3))],  # strided
                         ids=["two_dims", "strided"])
def test_slice_gradients_in_kernels(index):
    """A slice's gradient that is not parts along one dim: the operand written into zeros."""
    def f(x):
        return torch.exp(x[index] * 2)

    jf = thunder.jit(f, fusion="always")
    x = torch.randn(6, 40, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    f(x).sum().backward()
    jf(x2).sum().backward()
    torch.testing.assert_close(x2.grad, x.grad)
    assert "unslice" not in str(thunder.last_backward_traces(jf)[-1])


def transposed_both_ways(x, w, m):
    """A sunk transpose meets a transpose back (they cancel) and a value read by a matmul."""
    y = x.transpose(1, 2) * w
    z = torch.sigmoid(y).transpose(1, 2)
    return z @ m, y @ m


def test_transposes_that_cancel():
    g = torch.Generator().manual_seed(1)
    x, w, m = torch.randn(2, 8, 4, 16, generator=g), torch.randn(8, 16, generator=g), torch.randn(16, 5, generator=g)
    jf = thunder.jit(transposed_both_ways, fusion="always")
    out, expected = jf(x, w, m), transposed_both_ways(x, w, m)
    for o, e in zip(out, expected):
        torch.testing.assert_close(o, e)
        assert o.stride() == e.stride()
    assert "permute" in str(thunder.last_traces(jf)[-1])  # (y: a view of the kernel's result)
