"""Elementwise ltorch ops: arithmetic, comparisons, unary math, activations."""
import torch

from thunder.ops import prims
from thunder.ops.decomp_utils import elementwise_args, to_dtype
from thunder.ops.meta_utils import elementwise
from thunder.ops.registry import Number, Tensor, TensorOrNumber, ltorch


@ltorch("torch.add", methods=("add",), dunders=("__add__",), rdunders=("__radd__",),
        aliases=(torch.add, torch.Tensor.add))
def add(input: TensorOrNumber, other: TensorOrNumber, *, alpha: Number = 1):
    return elementwise(input, other)


@add.decompose
def _(input, other, *, alpha=1):
    (a, b), _, dtype = elementwise_args(input, other)
    if alpha != 1:
        b = prims.mul(b, to_dtype(alpha, dtype))
    return prims.add(a, b)
