"""Large CPU tensors on transparent huge pages.

glibc serves an allocation above its mmap threshold (at most 32 MiB on 64-bit) with a fresh
mmap and unmaps it when freed, so every such tensor of every step (a training step's embedding
and LM-head gradients in float32: [32000, 512] is 64 MiB; GPT-2's [2, 256, 50257] logits) takes
one page fault per 4 KiB page on its first write: ~50 ms for 64 MiB on one core of an AMD EPYC
(Zen 5), where writing the same bytes into memory already mapped takes ~2.5 ms. torch's CPU
allocator advises huge pages only under THP_MEM_ALLOC_ENABLE=1, read once at its first
allocation (before thunder is imported). Here a tensor of at least MIN_BYTES gets its own private
anonymous mapping, aligned to 2 MiB and advised MADV_HUGEPAGE (the kernel's "madvise" mode, the
common default): 32 faults of 2 MiB instead of 16384 of 4 KiB (~6-9 ms for 64 MiB measured).
Freed with the tensor (the mapping is the storage's buffer), as glibc's would be.

A fresh anonymous mapping reads as zeros, so `zeros` costs no pass over the memory.

Below MIN_BYTES torch's allocator is used: glibc keeps those on its heap and reuses them
without faults. Where the kernel has no transparent huge pages ("never", a non-Linux system),
or THUNDER_HUGE_PAGES=off, every call is torch's own.
"""
import math
import mmap
import os

import torch

MIN_BYTES = 32 << 20  # glibc's largest mmap threshold: above it every allocation is a fresh mapping
_HUGE = 2 << 20  # an x86-64 transparent huge page
_ENABLED = None


def enabled():
    """Whether large tensors go on huge pages here (read once)."""
    global _ENABLED
    if _ENABLED is None:
        _ENABLED = (os.environ.get("THUNDER_HUGE_PAGES", "on") != "off" and hasattr(mmap, "MADV_HUGEPAGE")
                    and hasattr(mmap, "MAP_PRIVATE") and _thp_mode() in ("always", "madvise"))
    return _ENABLED


def _thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def empty(shape, dtype):
    """torch.empty(shape, dtype=dtype) on the CPU, row-major; on huge pages when large."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < MIN_BYTES or not enabled():
        return torch.empty(shape, dtype=dtype, device="cpu")
    return _mapped(shape, dtype, nbytes)


def zeros(shape, dtype):
    """torch.zeros(shape, dtype=dtype) on the CPU; a large one costs no fill (fresh pages are zero)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < MIN_BYTES or not enabled():
        return torch.zeros(shape, dtype=dtype, device="cpu")
    return _mapped(shape, dtype, nbytes)


def is_large(shape, dtype):
    """Whether empty/zeros of this shape and dtype would map fresh huge pages."""
    return math.prod(shape) * dtype.itemsize >= MIN_BYTES and enabled()


def _mapped(shape, dtype, nbytes):
    m = mmap.mmap(-1, nbytes + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    # the mapping is page-aligned; start the tensor at its first 2 MiB boundary (huge pages
    # back only aligned 2 MiB ranges). The tensor holds the mapping: unmapped when it is freed.
    start = torch.frombuffer(m, dtype=torch.uint8, count=1).data_ptr()
    offset = -start % _HUGE
    return torch.frombuffer(m, dtype=dtype, count=math.prod(shape), offset=offset).view(shape)
