"""Ops about autograd itself: detach (also what thunder records for ops run under no_grad)."""
import torch

from thunder.core.proxies import TensorProxy
from thunder.ops.registry import Tensor, ltorch


@ltorch("torch.Tensor.detach", methods=("detach",), aliases=(torch.detach, torch.Tensor.detach), view=True,
        differentiable=False)
def detach(input: Tensor):
    """The same values, cut off from autograd: thunder-autograd sends no gradient through it."""
    return TensorProxy(input.shape, input.dtype, input.device)


@detach.decompose
def _(input):
    return input
