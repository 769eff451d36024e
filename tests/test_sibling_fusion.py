"""thunder-fuse joins an op to a near region that reads the same outside value (a GEMM's output,
an argument), not only to the regions of its producers (lowering/fuse.py, _Graph.input_siblings):
a SwiGLU MLP's backward recomputes h = silu(gate) * up for the down projection's weight gradient
and computes the gradients of gate and up, both from the GEMM outputs gate and up; they are one
kernel reading gate and up once (two kernels, each with its own exp, before)."""
import torch
import torch.nn.functional as F

import thunder


def swiglu_mlp(x, w_gate, w_up, w_down):
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def _inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 16, generator=g)
    ws = [torch.randn(32, 16, generator=g) * 0.3, torch.randn(32, 16, generator=g) * 0.3,
          torch.randn(16, 32, generator=g) * 0.3]
    return [t.requires_grad_() for t in (x, *ws)]


def test_swiglu_backward_is_one_kernel_and_equals_eager():
    args = _inputs()
    expected = swiglu_mlp(*args)
    expected_grads = torch.autograd.grad(expected.square().sum(), args)
    jf = thunder.jit(swiglu_mlp, fusion="always")
    got = jf(*args)
    got_grads = torch.autograd.grad(got.square().sum(), args)
    torch.testing.assert_close(got, expected)
    for g, e in zip(got_grads, expected_grads):
        torch.testing.assert_close(g, e)
    backward = str(thunder.last_backward_traces(jf)[-1])
    kernels = [line.split("#")[0].strip() for line in backward.splitlines() if "= fusion_" in line]
    # one kernel writing h (for the down projection's weight gradient) and the gradients of up
    # and of gate, and (policy always) one adding x's two gradients
    outputs = sorted(len([n for n in k.split(" = ")[0].split(",") if n.strip()]) for k in kernels)
    assert outputs == [1, 3], backward
