"""Large CPU tensors on transparent huge pages.

glibc serves an allocation above its mmap threshold (at most 32 MiB on 64-bit) with a fresh
mmap and unmaps it when freed, so every such tensor of every step (a training step's embedding
and LM-head gradients in float32: [32000, 512] is 64 MiB; GPT-2's [2, 256, 50257] logits) takes
one page fault per 4 KiB page on its first write: ~50 ms for 64 MiB on one core of an AMD EPYC
(Zen 5), where writing the same bytes into memory already mapped takes ~2.5 ms. torch's CPU
allocator advises huge pages only under THP_MEM_ALLOC_ENABLE=1, read once at its first
allocation (before thunder is imported). Here a tensor of at least MIN_BYTES lives in a private
anonymous mapping of this module, aligned to 2 MiB and advised MADV_HUGEPAGE (the kernel's
"madvise" mode, the common default), which is kept when its tensors are gone and handed to the
next large tensor it fits: from the second training step on such tensors fault no page (a
[32000, 512] float32 cast: ~2.5 ms against ~50 ms into a fresh glibc mapping, one Zen 5 core);
a new mapping faults 2 MiB pages (~6-9 ms for 64 MiB). Fresh mappings each step (no reuse) were
measured slower than glibc's in a benchmark interleaving eager's steps with thunder's (GPT-2:
1348 against 687 ms a step), so the mappings are reused, as a caching allocator would. At most
KEEP_FREE_BYTES of unused mappings stay mapped. `zeros` fills only a reused mapping (a fresh one
reads as zeros).

Below glibc's largest threshold the heap is not fault-free either: once a 31.25 MiB tensor (a
Llama's [512, 32000] bf16 logits, their gradient, its LM head's bf16 cast) is freed, glibc's
threshold rises to its size and such tensors come from the heap, whose top glibc returns to the
system when more than twice the threshold is free there (a step's logits and their gradient
freed together), so the next step faults them in again. MIN_BYTES is therefore 8 MiB: measured
on a Zen 4 (family 25 model 17), two threads, a Llama bf16 autocast training step 4-6% faster
than at 32 MiB (and 1 MiB no faster than 8), GPT-2's ~3%, float32 steps unchanged
(docs/benchmarks.md). Below MIN_BYTES torch's allocator is used: glibc keeps most of those on
its heap. Where the kernel has no transparent huge pages ("never", a non-Linux system),
or THUNDER_HUGE_PAGES=off, every call is torch's own.
"""
import math
import mmap
import os
import sys
import threading

import torch

MIN_BYTES = 8 << 20  # (the module's docstring: 32 MiB is glibc's largest mmap threshold, but its heap trims)
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
    """torch.empty(shape, dtype=dtype) on the CPU, row-major; a large one on huge pages."""
    if not is_large(shape, dtype):
        return torch.empty(shape, dtype=dtype, device="cpu")
    return _mapped(shape, dtype, zero=False)


def zeros(shape, dtype):
    """torch.zeros(shape, dtype=dtype) on the CPU; a large one on huge pages (no fill where fresh)."""
    if not is_large(shape, dtype):
        return torch.zeros(shape, dtype=dtype, device="cpu")
    return _mapped(shape, dtype, zero=True)


def is_large(shape, dtype):
    """Whether empty/zeros of this shape and dtype would use a mapping of this module."""
    return math.prod(shape) * dtype.itemsize >= MIN_BYTES and enabled()


def _mapped(shape, dtype, zero):
    nbytes = math.prod(shape) * dtype.itemsize
    m = _reusable(nbytes)
    fresh = m is None
    if fresh:
        m = mmap.mmap(-1, nbytes + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        m.madvise(mmap.MADV_HUGEPAGE)
        with _LOCK:
            _KEPT.append(m)
            _trim()
    # the mapping is page-aligned; start the tensor at its first 2 MiB boundary (huge pages
    # back only aligned 2 MiB ranges). The tensor holds the mapping while it lives.
    start = torch.frombuffer(m, dtype=torch.uint8, count=1).data_ptr()
    offset = -start % _HUGE
    t = torch.frombuffer(m, dtype=dtype, count=math.prod(shape), offset=offset).view(shape)
    return t.zero_() if zero and not fresh else t


# Mappings made here, most recent last. One whose only holders are this list (its tensors are
# gone) is given to the next request it fits without more than _SLACK of waste: its pages are
# mapped already, so the step after the first faults no page at all (what torch's allocator
# cannot do above glibc's threshold). At most KEEP_FREE_BYTES of unused mappings stay.
_KEPT = []
_LOCK = threading.Lock()
KEEP_FREE_BYTES = 1 << 30
_SLACK = 1.25
_HOLDERS_WHEN_FREE = 3  # (_KEPT's reference, the loop variable's, getrefcount's argument)


def _reusable(nbytes):
    with _LOCK:
        for i in range(len(_KEPT) - 1, -1, -1):
            m = _KEPT[i]
            if nbytes + _HUGE <= len(m) <= _SLACK * (nbytes + _HUGE) and sys.getrefcount(m) == _HOLDERS_WHEN_FREE:
                del _KEPT[i]
                _KEPT.append(m)  # (most recently used last)
                return m
    return None


def _trim():
    """Drop the least recently used free mappings beyond KEEP_FREE_BYTES (under _LOCK)."""
    free = [m for m in _KEPT if sys.getrefcount(m) == _HOLDERS_WHEN_FREE]
    total = sum(len(m) for m in free)
    for m in free:
        if total <= KEEP_FREE_BYTES:
            break
        _KEPT.remove(m)
        total -= len(m)
