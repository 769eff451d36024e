"""float32 CPU products that choose their kernel at every call, in programs for all sizes.

A program compiled for its sizes calls the kernel chosen for them (ops/onednn.py: oneDNN for
products of at least MIN_MACS where it is faster here; ops/packed_linear.py `f32_kernel`: torch's,
MKL's packed, oneDNN's or oneDNN's packed; ops/large_outputs.py: a large result into fresh huge
pages). A program for all sizes (cache="symbolic values", automatic dynamic) would call the kernel
chosen at the sizes it was compiled at for every later size: one fitted at a 16-token call ran
torch's float32 GEMMs at every length, where one compiled per length ran oneDNN's (1.6x slower here
at 88 tokens). Its compiles (core/size_choices.py `fitting`) call these instead, which choose as
the per-size program would, from the call's own sizes: a few dictionary lookups per product.
Generated code calls them only where the per-size program's code may run oneDNN (grad-free
programs: ops/onednn.py)."""
import math

import torch
import torch.nn.functional as F

from thunder.core import fresh_memory
from thunder.ops import large_outputs, onednn, packed_linear

# (rows, k, n, packing, THUNDER_CPU_MATMUL, onednn.faster()) -> packed_linear.f32_kernel's answer
# (the probes it reads are measured once per process too)
_KERNELS = {}

_LINEAR = {"mkl_packed": packed_linear.linear_f32, "onednn_packed": packed_linear.linear_onednn_f32,
           "onednn": onednn.linear}
_ADDMM = {"mkl_packed": packed_linear.addmm_f32, "onednn_packed": packed_linear.addmm_onednn_f32,
          "onednn": onednn.addmm}


def _kernel(rows, k, n, packing):
    key = (rows, k, n, packing, onednn.setting(), onednn.faster())
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _KERNELS[key] = packed_linear.f32_kernel(rows, k, n, packing)
    return kernel


def _large(shape, dtype):
    return math.prod(shape) * dtype.itemsize >= fresh_memory.MIN_BYTES


def linear(x, w, b, packing):
    """F.linear(x, w, b) of float32 CPU tensors (w 2-D, b 1-D or None) by the kernel f32_kernel
    picks for its sizes (packing: the program's `_packing()`)."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    run = _LINEAR.get(_kernel(rows, w.shape[1], w.shape[0], packing))
    if run is not None:
        return run(x, w, b)
    if x.dim() >= 2 and _large((*x.shape[:-1], w.shape[0]), x.dtype):
        return large_outputs.linear(x, w, b)
    return F.linear(x, w, b)


def addmm(b, x, w, packing):
    """torch.addmm(b, x, w) of float32 CPU matrices (b 1-D: a GPT-2 Conv1D's product) by the
    kernel f32_kernel picks for its sizes."""
    run = _ADDMM.get(_kernel(x.shape[0], w.shape[0], w.shape[1], packing))
    return torch.addmm(b, x, w) if run is None else run(b, x, w)


def matmul(a, b):
    """a @ b of float32 CPU tensors (b a matrix, a of 2 or more dims): oneDNN's for products of
    at least MIN_MACS (the program was compiled where oneDNN is the faster), else torch's, into
    fresh huge pages where the result is large."""
    if a.numel() * b.shape[1] >= onednn.MIN_MACS:
        return onednn.matmul(a, b)
    if _large((*a.shape[:-1], b.shape[1]), a.dtype):
        return large_outputs.matmul(a, b)
    return torch.matmul(a, b)
