"""bfloat16 linear layers through oneDNN with the weight packed once (opt-in: THUNDER_PACKED_WEIGHTS).

torch runs a bfloat16 `F.linear` on the CPU with the weight as it is stored ([out, in], row
major). oneDNN runs the same product faster from a weight reordered into its blocked layout
(`torch.ops.mkldnn._reorder_linear_weight(w, rows)`, inductor's packing for frozen models), with
the same sums: packed for the number of rows it is called with, the result is bit for bit
F.linear's (docs/benchmarks.md, "GEMM epilogues and packed weights": 1.3-1.7x per product on an
Intel Xeon with AMX, a token's decode step and a prefill alike). Packing costs a pass over the
weight, so it pays only where the packed copy is reused: it is kept per parameter and row count
while the parameter's storage and version counter are unchanged.

A version counter does not see every change: an in-place update through `p.data` (`p.data.add_`,
`p.data.copy_`, what hand-written optimizers and some loaders do) leaves `p._version` as it was,
and the packed copy would then be stale; eager's own autocast cache has that edge only within
one autocast region, this cache across calls. So it is opt-in, as torch.compile's packing is
(`freezing`): THUNDER_PACKED_WEIGHTS=auto packs where a probe on this machine finds it faster
(`faster`, measured once per process), =on wherever oneDNN can run it, =off (the default) never.

Generated programs call `linear` only where they record no autograd history (codegen's
grad_free: the op has no derivative formula) and for bfloat16 products: those of a bfloat16 model
and those that `torch.autocast("cpu", torch.bfloat16)` makes of a float32 model's linears, whose
weight cast the program leaves to autocast (runtime/autocast_casts.py): `linear` makes that cast
itself, once per packing. Anything else (a weight that is no `nn.Parameter`, an inference tensor,
no rows) goes to `F.linear` as before.
"""
import functools
import os
import time
import weakref

import torch
import torch.nn.functional as F

ENV = "THUNDER_PACKED_WEIGHTS"

# weight id -> (weakref to it, its version, its data pointer, {rows: packed weight})
_CACHE = {}


def mode():
    choice = os.environ.get(ENV, "off")
    if choice not in ("off", "auto", "on"):
        raise ValueError(f"thunder: {ENV}={choice!r}; expected 'off', 'auto' or 'on'")
    return choice


def available():
    mkldnn = torch.ops.mkldnn
    return (torch.backends.mkldnn.is_available() and hasattr(mkldnn, "_linear_pointwise")
            and hasattr(mkldnn, "_reorder_linear_weight") and hasattr(mkldnn, "_is_mkldnn_bf16_supported")
            and mkldnn._is_mkldnn_bf16_supported())


def _pack(w, rows):
    return torch.ops.mkldnn._reorder_linear_weight(w, rows)


def packed(w, dtype, rows, transposed=False):
    """w (a parameter; transposed: w^T, a GPT-2 Conv1D's [in, out] weight) in dtype, packed for
    products of `rows` rows: made once, reused while w's storage and version counter stay as
    they are."""
    key = id(w)
    version, ptr = w._version, w.data_ptr()
    entry = _CACHE.get(key)
    if entry is None or entry[0]() is not w or entry[1] != version or entry[2] != ptr:
        entry = (weakref.ref(w, lambda _, key=key: _CACHE.pop(key, None)), version, ptr, {})
        _CACHE[key] = entry
    by_rows = entry[3]
    p = by_rows.get((dtype, rows, transposed))
    if p is None:
        w = w.detach().to(dtype)
        p = by_rows[(dtype, rows, transposed)] = _pack((w.t() if transposed else w).contiguous(), rows)
    return p


def linear(input, weight, bias=None, transposed=False):
    """F.linear(input, weight, bias) in bfloat16 (the traced product's dtype) by oneDNN from the
    packed weight. Float32 operands are those whose cast the program leaves to autocast (a
    program input, the weight, the bias): cast here as autocast would."""
    rows = input.numel() // input.shape[-1] if input.shape[-1] else 0
    if type(weight) is not torch.nn.Parameter or weight.is_inference() or rows == 0:  # (no subclass: DTensor)
        if transposed:
            return torch.addmm(bias, input, weight) if bias is not None else torch.mm(input, weight)
        return F.linear(input, weight, bias)
    dtype = torch.bfloat16
    input = input.to(dtype)
    if bias is not None:
        bias = bias.to(dtype).contiguous()  # (oneDNN reads the bias as contiguous: ops/onednn.py)
    return torch.ops.mkldnn._linear_pointwise(input, packed(weight, dtype, rows, transposed), bias, "none", [], "")


def addmm(bias, input, weight):
    """torch.addmm(bias, input, weight) (bias 1-D, beta = alpha = 1: a GPT-2 Conv1D) as
    `linear` of weight^T."""
    return linear(input, weight, bias, transposed=True)


@functools.lru_cache(maxsize=None)
def faster():
    """Whether packed bfloat16 products beat F.linear here: best of 9 interleaved runs, thread
    CPU time, one thread, of a [rows, 512] x [512, 1536] product at 1 row (a decode step) and 256
    (a prefill), packed by 5% or more at both (on a machine others load, the best of 5 moved by
    10-20% between runs: docs/benchmarks.md)."""
    if not available():
        return False
    g = torch.Generator().manual_seed(0)
    w = torch.nn.Parameter(torch.randn(1536, 512, generator=g).to(torch.bfloat16), requires_grad=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            for rows in (1, 256):
                x = torch.randn(rows, 512, generator=g).to(torch.bfloat16)
                runs = {"torch": lambda: F.linear(x, w), "packed": lambda: linear(x, w)}
                best = dict.fromkeys(runs, float("inf"))
                for f in runs.values():
                    f()  # (packs, and oneDNN creates its primitive)
                for _ in range(9):
                    for name, f in runs.items():
                        t = time.thread_time()
                        f()
                        best[name] = min(best[name], time.thread_time() - t)
                if not best["packed"] < 0.95 * best["torch"]:
                    return False
    finally:
        torch.set_num_threads(threads)
    return True


def used():
    """Whether linears of grad-free programs compiled now go through `linear`."""
    choice = mode()
    if choice == "off" or not available():
        return False
    return choice == "on" or faster()


def _eligible(x, w, b, out_features):
    """x @ w (+ b): a bfloat16 CPU product with a 2-D weight, a 1-D bias of out_features or
    none, static shapes, where packing is on (`used`)."""
    if not (hasattr(x, "shape") and hasattr(w, "shape")) or len(x.shape) < 1 or len(w.shape) != 2:
        return False
    if b is not None and (not hasattr(b, "shape") or tuple(b.shape) != (w.shape[out_features],)):
        return False
    for n in (x, w, b):
        if n is not None and (n.device is None or n.device.type != "cpu" or n.dtype != torch.bfloat16
                              or any(s < 0 for s in n.shape)):
            return False
    return used()


def linear_source(values, outs):
    """Statements for ltorch.linear in a grad-free program, or None."""
    x, w, b = values["input"], values["weight"], values["bias"]
    if not _eligible(x, w, b, 0):
        return None
    return [f"{outs[0]} = impl.packed_linear({x.name}, {w.name}{', ' + b.name if b is not None else ''})"]


def addmm_source(values, outs):
    """Statements for ltorch.addmm in a grad-free program (a 1-D bias, beta = alpha = 1: the
    product of a GPT-2 Conv1D), or None."""
    b, x, w = values["input"], values["mat1"], values["mat2"]
    if any(type(values[k]) not in (int, float) or values[k] != 1 for k in ("beta", "alpha")):
        return None
    if not hasattr(x, "shape") or len(x.shape) != 2 or not hasattr(b, "shape") or len(b.shape) != 1:
        return None
    if not _eligible(x, w, b, 1):
        return None
    return [f"{outs[0]} = impl.packed_addmm({b.name}, {x.name}, {w.name})"]
