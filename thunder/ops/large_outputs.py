"""Products whose result is large, written into fresh huge pages (core/fresh_memory.py).

torch allocates a product's result itself; one of at least fresh_memory.MIN_BYTES (GPT-2's
[2, 256, 50257] logits, its tied head's [50257, 512] weight gradient: 49 MiB in bfloat16) is a
fresh glibc mapping each step, faulted in 4 KiB pages while the GEMM writes it. In a grad-free
program (codegen's python_grad_free: a training step's forward and backward, an inference call)
such a product runs here instead: the same torch GEMM (mm / addmm on the rows folded, as F.linear
and torch.matmul run it) with `out=` a fresh_memory tensor. Same bits as torch's call."""
import math

import torch

from thunder.core import fresh_memory, size_choices


def linear(x, w, b=None):
    """F.linear(x, w, b) for a 2-D weight, into fresh huge pages."""
    out = fresh_memory.empty((*x.shape[:-1], w.shape[0]), x.dtype)
    rows = x.reshape(-1, x.shape[-1])
    if b is None:
        torch.mm(rows, w.t(), out=out.view(-1, w.shape[0]))
    else:
        torch.addmm(b, rows, w.t(), out=out.view(-1, w.shape[0]))
    return out


def matmul(a, b):
    """torch.matmul(a, b) for a matrix b and a of 2 or more dims, into fresh huge pages."""
    out = fresh_memory.empty((*a.shape[:-1], b.shape[1]), a.dtype)
    torch.mm(a.reshape(-1, a.shape[-1]), b, out=out.view(-1, b.shape[1]))
    return out


def _large(result_shape, *tensors):
    """Whether a product of these CPU tensors (one dtype, static shapes) has a large result."""
    if not all(hasattr(t, "shape") and hasattr(t, "dtype") for t in tensors):
        return False
    dtype = tensors[0].dtype
    for t in tensors:
        if t.dtype != dtype or t.device is None or t.device.type != "cpu" or any(
                not isinstance(s, int) or s < 0 for s in t.shape):
            return False
    return dtype.is_floating_point and size_choices.choose(
        "product result on fresh pages", math.prod(result_shape) * dtype.itemsize >= fresh_memory.MIN_BYTES)


def linear_source(values, outs):
    """Statements for ltorch.linear with a large result in a grad-free program, or None."""
    x, w, b = values["input"], values["weight"], values["bias"]
    if not (hasattr(x, "shape") and hasattr(w, "shape")) or len(x.shape) < 2 or len(w.shape) != 2:
        return None
    if b is not None and (not hasattr(b, "shape") or tuple(b.shape) != (w.shape[0],)):
        return None
    if not _large((*x.shape[:-1], w.shape[0]), x, w, *([b] if b is not None else [])):
        return None
    return [f"{outs[0]} = impl.large_linear({x.name}, {w.name}{', ' + b.name if b is not None else ''})"]


def matmul_source(a_param, b_param):
    """Statements for ltorch.matmul / ltorch.mm (b a matrix) with a large result in a grad-free
    program, or None."""
    def source(values, outs):
        a, b = values[a_param], values[b_param]
        if not (hasattr(a, "shape") and hasattr(b, "shape")) or len(a.shape) < 2 or len(b.shape) != 2:
            return None
        if not _large((*a.shape[:-1], b.shape[1]), a, b):
            return None
        return [f"{outs[0]} = impl.large_matmul({a.name}, {b.name})"]
    return source
