"""Ops about autograd and memory: detach (also what thunder records for ops run under no_grad),
no_grad_update (an in-place update under no_grad), and copy_, the write of an input's new value
that thunder-functionalize turns into a result."""
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


@ltorch("impl.no_grad_update")
def no_grad_update(input: Tensor, value: Tensor):
    """value, standing for input after an in-place update under torch.no_grad(). In eager the
    tensor keeps its autograd history while its values change, so gradients reach input as if it
    were unchanged, and value gets none (what thunder records in place of a rebind under no_grad
    when the trace has tensors that require grad). Its metadata are value's: an in-place change
    of shape (BigBird's unsqueeze_ of a product) or dtype changes the tensor."""
    return TensorProxy(value.shape, value.dtype, value.device)


@ltorch("torch.Tensor.copy_", effects=True, name="copy_")
def copy_(input: Tensor, src: Tensor):
    """Writes src into input (an input of the trace updated in place); returns input's new value.
    Not Pure: CSE and DCE keep it. thunder-functionalize replaces it by an extra result."""
    if tuple(src.shape) != tuple(input.shape) or src.dtype is not input.dtype:
        raise ValueError(f"copy_ of a {src.dtype} {tuple(src.shape)} tensor into a {input.dtype} "
                         f"{tuple(input.shape)} input: convert and broadcast it first")
    return TensorProxy(input.shape, input.dtype, input.device)
