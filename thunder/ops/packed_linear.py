"""Linear layers from weights packed once, and which kernel runs a grad-free float32 linear:
bfloat16 packed for oneDNN; float32 by the fastest measured here of F.linear, MKL's packed sgemm,
oneDNN's GEMM and oneDNN's from a packed weight (`f32_kernel`).

torch runs a bfloat16 `F.linear` on the CPU with the weight as it is stored ([out, in], row
major). oneDNN runs the same product faster from a weight reordered into its blocked layout
(`torch.ops.mkldnn._reorder_linear_weight(w, rows)`, inductor's packing for frozen models), with
the same sums: packed for the number of rows it is called with, the result is bit for bit
F.linear's (docs/benchmarks.md, "GEMM epilogues and packed weights": 1.3-1.7x per product on an
Intel Xeon with AMX, a token's decode step and a prefill alike). Packing costs a pass over the
weight, so it pays only where the packed copy is reused: it is kept per parameter, library and
row count (the KEPT most recently used) while nothing writes the parameter.

float32, MKL: MKL runs a float32 product from a weight packed for its row count
(`torch.ops.mkl._mkl_reorder_linear_weight(w, rows)`, `torch.ops.mkl._mkl_linear`: inductor's
path for frozen float32 weights) 5-15% faster at a prefill's rows on an Intel Xeon, with
F.linear's bits for some shapes only: whether they agree depends on the row count, K, the bias
and the thread count in ways no rule states (docs/benchmarks.md, "Branch f32pack"). So
`linear_f32` compares the packed result with F.linear's on the first call of each kind (bias or
none, input rank and contiguity, thread count) per packing, returns F.linear's result then, and
runs packed only where they were equal.

float32, oneDNN: where MKL does not take its AVX-512 kernels (an AMD EPYC, Zen 5) oneDNN's GEMM
is ~2x faster than MKL's, packed or not (ops/onednn.py); on a Zen 4 ~1.3x at two threads (MKL's
second thread gains less), and oneDNN runs it 3-7% faster again from
a float32 weight reordered once as the bfloat16 ones are (`linear_onednn_f32`; its bits were
plain oneDNN's at every shape measured: docs/benchmarks.md, "Branch f32pre"). `f32_kernel`
picks the kernel of each float32 product in a grad-free program from one probe per process, row
class and thread count (`_times`: all four kernels on the same product): oneDNN where it takes at
most onednn.MARGIN of the MKL side's time (its sums come in another order: other bits, so only
for a clear gain), MKL's packed path where it was F.linear's bits and no slower, else F.linear.
Products under onednn.MIN_MACS (a decode step's, except the lm head) keep the MKL side.

Freshness: a version counter does not see every write (`p.data.copy_`, `p.data.add_`,
`vector_to_parameters`, a fused optimizer's step, a write through the storage or a numpy view all
leave `p._version` as it was), so the cache does not rely on it. When it packs a weight it makes a
copy-on-write clone of the weight's storage (`torch._lazy_clone`, kept with the packing): the
storage is then shared copy-on-write, and the first write to it through any tensor or view of it
gives the written storage a fresh buffer (torch copies the data there before writing), so the
weight's data pointer (read with `const_data_ptr`, which does not copy) differs from the one
packed. Each call compares the pointer, shape, strides, dtype and version counter with those
packed from and packs again on any difference; `p.data = t` gives another pointer too (the
clone keeps the old buffer alive, so its address cannot be reused). The price: the first write
after a packing copies the weight once (an optimizer step after a grad-free call), and the old
buffer stays alive until the next call packs again; whatever asks for a writable pointer without
writing moves the buffer too (Python's `Tensor.data_ptr()`, oneDNN's reorder, torch.compile's
program run on the same module): a copy there and a packing again here, slower but not stale. Not seen: a write through a raw pointer taken
before the packing (a numpy array or a C extension holding the address from earlier).

THUNDER_PACKED_WEIGHTS=auto (the default) packs where a probe on this machine finds it no slower
(`faster` and `f32_kernel`, measured once per process per dtype and, for float32, for 1 row and
for many), except in a training step's forward (`training_forward`: its weights change at every
optimizer step; its float32 products by oneDNN or torch as onednn.faster() says), =on wherever
oneDNN (bfloat16) or the float32 library chosen (oneDNN or MKL) can run it, =off never (float32:
oneDNN or torch as onednn.faster() says). THUNDER_CPU_MATMUL=onednn|torch (ops/onednn.py) leaves
float32 products of MIN_MACS or more to that library.

Generated programs call `linear`, `linear_f32` and `linear_onednn_f32` only where they record no
autograd history (codegen's grad_free: the ops have no derivative formula). `linear` for
bfloat16 products: those of a bfloat16 model and those that `torch.autocast("cpu",
torch.bfloat16)` makes of a float32 model's linears, whose weight cast the program leaves to
autocast (runtime/autocast_casts.py): `linear` makes that cast itself, once per packing.
`linear_f32` and `linear_onednn_f32` for float32 products (outside autocast). Anything else (a
weight that is no `nn.Parameter`, an inference tensor, no rows, a storage that cannot be made
copy-on-write: numpy's, shared memory) goes to `F.linear` as before (`linear_onednn_f32`: to
`onednn.linear`, the same sums).
"""
import contextvars
import functools
import math
import os
import weakref

import torch
import torch.nn.functional as F

from thunder.core import machine, size_choices
from thunder.core.scoped import scoped
from thunder.ops import onednn

ENV = "THUNDER_PACKED_WEIGHTS"

# weight id -> (weakref to it, its layout (`_layout`), the copy-on-write clone of its storage,
# {(dtype, library, rows, transposed): (packed weight, {kind of call: F.linear's bits (MKL only)})})
_CACHE = {}
# packings kept per weight (row counts: a prefill's and a decode step's), so that the memory they
# take is bounded (at most KEPT copies of a weight in its product's dtype) when calls come with ever
# new lengths
KEPT = 2


# whether the program being generated is a training step's forward (runtime/autograd.py)
_TRAINING_FORWARD = contextvars.ContextVar("thunder_packed_training_forward", default=False)


def training_forward():
    """Around generating a training step's forward: `auto` packs none of its products (an
    optimizer step writes the weights after each, so each would be copied (copy-on-write) and
    packed again every step; `on` packs them)."""
    return scoped(_TRAINING_FORWARD, True)


def mode():
    choice = os.environ.get(ENV, "auto")
    if choice not in ("off", "auto", "on"):
        raise ValueError(f"thunder: {ENV}={choice!r}; expected 'off', 'auto' or 'on'")
    return choice


def _library(dtype, library):
    """The library packing products in dtype: `library`, or by default oneDNN for bfloat16 and
    MKL for float32."""
    return library or ("mkl" if dtype == torch.float32 else "onednn")


def available(dtype=torch.bfloat16, library=None):
    """Whether products in dtype can run packed here by `library` ('mkl': float32 only;
    'onednn': bfloat16 or float32; default `_library`)."""
    if not (hasattr(torch, "_lazy_clone") and hasattr(torch._C, "_is_cow_tensor")  # (how writes are seen)
            and hasattr(torch.Tensor, "const_data_ptr")):  # (a pointer read that keeps copy-on-write: torch >= 2.12)
        return False
    if _library(dtype, library) == "mkl":
        mkl = torch.ops.mkl
        return (dtype == torch.float32 and torch.backends.mkl.is_available() and hasattr(mkl, "_mkl_linear")
                and hasattr(mkl, "_mkl_reorder_linear_weight"))
    mkldnn = torch.ops.mkldnn
    if not (torch.backends.mkldnn.is_available() and hasattr(mkldnn, "_linear_pointwise")
            and hasattr(mkldnn, "_reorder_linear_weight")):
        return False
    return dtype == torch.float32 or (dtype == torch.bfloat16 and hasattr(mkldnn, "_is_mkldnn_bf16_supported")
                                      and mkldnn._is_mkldnn_bf16_supported())


def _pack(w, rows, library):
    if library == "mkl":
        return torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
    return torch.ops.mkldnn._reorder_linear_weight(w, rows)


def _product(input, p, weight, bias, rows, library):
    """input @ weight^T + bias from p, weight packed by `library` for `rows` rows (weight: [out,
    in], as stored or a view)."""
    if library == "mkl":
        return torch.ops.mkl._mkl_linear(input, p, weight, bias, rows)
    return torch.ops.mkldnn._linear_pointwise(input, p, bias, "none", [], "")


def _layout(w):
    """What must be as it was for a packed copy of w to be w's (the module's docstring)."""
    return w.const_data_ptr(), w._version, tuple(w.shape), w.stride(), w.dtype


def packed(w, dtype, rows, transposed=False, library=None):
    """(w (a parameter; transposed: w^T, a GPT-2 Conv1D's [in, out] weight) in dtype, packed by
    `library` (default `_library`) for products of `rows` rows; {kind of call: whether its
    results are F.linear's}) or None: made once, reused while no write reached w (the module's
    docstring: freshness)."""
    library = _library(dtype, library)
    key = id(w)
    entry = _CACHE.get(key)
    if entry is None or entry[0]() is not w or entry[1] != _layout(w):
        _CACHE.pop(key, None)  # (the stale clone's buffer goes now)
        try:
            clone = torch._lazy_clone(w.detach())  # (w's storage copy-on-write from here: a write moves it)
        except RuntimeError:  # (a storage torch cannot share so: numpy's, shared memory)
            clone = None
        if clone is not None and not torch._C._is_cow_tensor(w):
            clone = None
        entry = (weakref.ref(w, lambda _, key=key: _CACHE.pop(key, None)), _layout(w), clone, {})
        _CACHE[key] = entry
    if entry[2] is None:
        return None  # (a write could not be seen: not packed)
    by_rows = entry[3]
    p = by_rows.pop((dtype, library, rows, transposed), None)
    if p is None:
        # (a copy of w: oneDNN's reorder asks for a writable pointer, which would move w's buffer,
        # or the clone's and end the sharing, so that a later write to w would keep w's buffer)
        src = w.detach().to(dtype, copy=True)
        p = (_pack((src.t() if transposed else src).contiguous(), rows, library), {})
        while len(by_rows) >= KEPT:  # (the least recently used goes: a prefill's of another length)
            by_rows.pop(next(iter(by_rows)))
    by_rows[(dtype, library, rows, transposed)] = p  # (last: most recently used)
    return p


def _unpacked(input, weight, bias, transposed):
    """The product as the traced op makes it (autocast, where on, casts as it would)."""
    if transposed:
        return torch.addmm(bias, input, weight) if bias is not None else torch.mm(input, weight)
    return F.linear(input, weight, bias)


def linear(input, weight, bias=None, transposed=False):
    """F.linear(input, weight, bias) in bfloat16 (the traced product's dtype) by oneDNN from the
    packed weight. Float32 operands are those whose cast the program leaves to autocast (a
    program input, the weight, the bias): cast here as autocast would."""
    rows = input.numel() // input.shape[-1] if input.shape[-1] else 0
    if type(weight) is not torch.nn.Parameter or weight.is_inference() or rows == 0:  # (no subclass: DTensor)
        return _unpacked(input, weight, bias, transposed)
    dtype = torch.bfloat16
    w = packed(weight, dtype, rows, transposed)
    if w is None:
        return _unpacked(input, weight, bias, transposed)
    return _product(input.to(dtype), w[0], None, _onednn_bias(bias, dtype), rows, "onednn")


def _onednn_bias(bias, dtype):
    """The bias as oneDNN takes it: in dtype, contiguous (oneDNN reads it so: ops/onednn.py), not
    copy-on-write (oneDNN asks for a writable pointer: that would move the storage, and the
    weights packed from it: vector_to_parameters)."""
    if bias is None:
        return None
    bias = bias.to(dtype).contiguous()
    return bias.clone() if torch._C._is_cow_tensor(bias) else bias


def addmm(bias, input, weight):
    """torch.addmm(bias, input, weight) (bias 1-D, beta = alpha = 1: a GPT-2 Conv1D) as
    `linear` of weight^T."""
    return linear(input, weight, bias, transposed=True)


def linear_f32(input, weight, bias=None, transposed=False):
    """F.linear(input, weight, bias) of float32 tensors by MKL from the packed weight where that
    gives F.linear's bits: compared on the first call of each kind per packing (the module's
    docstring), F.linear's result returned then."""
    rows = input.numel() // input.shape[-1] if input.shape[-1] else 0
    if (type(weight) is not torch.nn.Parameter or weight.is_inference() or rows == 0
            or torch.is_autocast_enabled("cpu")):  # (autocast would make it a bfloat16 product)
        return _unpacked(input, weight, bias, transposed)
    entry = packed(weight, torch.float32, rows, transposed)
    if entry is None:
        return _unpacked(input, weight, bias, transposed)
    p, exact = entry
    kind = (bias is not None, input.dim(), input.is_contiguous(), torch.get_num_threads())
    same = exact.get(kind)
    if same is False:
        return _unpacked(input, weight, bias, transposed)
    out = _product(input, p, weight.t() if transposed else weight, bias, rows, "mkl")
    if same is None:
        expected = _unpacked(input, weight, bias, transposed)
        exact[kind] = out.stride() == expected.stride() and torch.equal(out, expected)
        return expected
    return out


def addmm_f32(bias, input, weight):
    """torch.addmm(bias, input, weight) of float32 tensors (as `addmm`) by `linear_f32`."""
    return linear_f32(input, weight, bias, transposed=True)


def linear_onednn_f32(input, weight, bias=None, transposed=False):
    """F.linear(input, weight, bias) of float32 tensors by oneDNN from the weight packed for it:
    the same sums as `onednn.linear`'s (its bits wherever measured: docs/benchmarks.md, "Branch
    f32pre"), which runs it where the weight cannot be packed."""
    rows = input.numel() // input.shape[-1] if input.shape[-1] else 0
    if rows == 0 or torch.is_autocast_enabled("cpu"):  # (autocast would make it a bfloat16 product)
        return _unpacked(input, weight, bias, transposed)
    entry = None
    if type(weight) is torch.nn.Parameter and not weight.is_inference():
        entry = packed(weight, torch.float32, rows, transposed, "onednn")
    if entry is None:
        return onednn.linear(input, weight.t() if transposed else weight, bias)
    return _product(input, entry[0], None, _onednn_bias(bias, torch.float32), rows, "onednn")


def addmm_onednn_f32(bias, input, weight):
    """torch.addmm(bias, input, weight) of float32 tensors (as `addmm`) by `linear_onednn_f32`."""
    return linear_onednn_f32(input, weight, bias, transposed=True)


def faster(dtype=torch.bfloat16, rows=256):
    """Whether packed products in dtype are no slower than F.linear here (`_no_slower`, measured
    once per process): bfloat16 at both 1 row (a decode step) and 256 (a prefill), whatever
    `rows`; float32 (MKL) at 1 row for products of one row, at 256 for more. The bfloat16 probe
    leaves out what packing saves besides (autocast casts each weight again in every call; a
    packed copy is cast once), so where the two measure equal, packing still wins under autocast
    (docs/benchmarks.md)."""
    if dtype == torch.bfloat16:
        return _no_slower(dtype, 1) and _no_slower(dtype, 256)
    return _no_slower(dtype, 1 if rows == 1 else 256)


def _no_slower(dtype, rows):
    """Whether a packed [rows, 512] x [512, 1536] product in dtype (by `_library`) takes at most
    F.linear's time (`_times`)."""
    times, _ = _times(dtype, rows, 1536)
    name = _library(dtype, None) + "_packed"
    return name in times and times[name] <= times["torch"]


def _times(dtype, rows, n, k=512):
    """({kernel: its time}, whether MKL's packed result was F.linear's bits) for a [rows, k] x
    [k, n] product in dtype by each kernel available here: 'torch' (F.linear), 'onednn_packed',
    and for float32 'mkl_packed' and 'onednn' (onednn.linear), at the process's thread count
    (`onednn.best_times`); measured once per process, shape and thread count."""
    return _measured(dtype, rows, n, k, torch.get_num_threads())


@functools.lru_cache(maxsize=None)
def _measured(dtype, rows, n, k, threads):
    """_times' answer, kept on disk for the next process (core/machine.py measured_here)."""
    found = machine.measured_here("packed-linear", (str(dtype), rows, n, k, f"threads={threads}"),
                                  lambda: _measure(dtype, rows, n, k, threads), _valid,
                                  samples=onednn.PROBES_KEPT, merge=_merge)
    return found["times"], found["exact"]


def _merge(stored, new):
    return {"times": machine.best_of(stored["times"], new["times"]), "exact": stored["exact"] and new["exact"]}


def _valid(found):
    times = found["times"]
    return (type(found["exact"]) is bool and "torch" in times
            and all(type(t) is float and math.isfinite(t) and t > 0 for t in times.values()))


def _measure(dtype, rows, n, k, threads):
    g = torch.Generator().manual_seed(0)
    w = torch.nn.Parameter(torch.empty(n, k, dtype=dtype).uniform_(-1, 1, generator=g), requires_grad=False)
    x = torch.randn(rows, k, generator=g).to(dtype)
    runs = {"torch": lambda: F.linear(x, w)}
    for library in ("mkl", "onednn"):
        entry = packed(w, dtype, rows, library=library) if available(dtype, library) else None
        if entry is not None:
            runs[library + "_packed"] = lambda p=entry[0], library=library: _product(x, p, w, None, rows, library)
    if dtype == torch.float32 and onednn.available():
        runs["onednn"] = lambda: onednn.linear(x, w)
    best = onednn.best_times(runs, threads)
    with torch.no_grad():
        exact = "mkl_packed" in runs and torch.equal(runs["mkl_packed"](), runs["torch"]())
    return {"times": best, "exact": exact}


def _packing():
    """THUNDER_PACKED_WEIGHTS for the program being generated: `auto` is `off` in a training
    step's forward (`training_forward`)."""
    choice = mode()
    return "off" if choice == "auto" and _TRAINING_FORWARD.get() else choice


def used(dtype=torch.bfloat16, rows=256, packing=None):
    """Whether products in dtype of `rows` rows in grad-free programs compiled now (or under
    `packing`, a `_packing()` answer) go through `linear` (bfloat16) or `linear_f32` (float32, MKL)
    where oneDNN does not take them (`f32_kernel`)."""
    choice = packing or _packing()
    if choice == "off" or not available(dtype):
        return False
    return choice == "on" or faster(dtype, rows)


def f32_kernel(rows, k, n, packing=None):
    """What runs a float32 [rows, k] x [k, n] product in a grad-free program: 'torch' (F.linear,
    torch.addmm), 'mkl_packed' (`linear_f32`: F.linear's bits), 'onednn' (ops/onednn.py) or
    'onednn_packed' (`linear_onednn_f32`). The MKL side (torch or packed) as `used`; oneDNN's
    only for products of MIN_MACS or more (ops/onednn.py) unless THUNDER_CPU_MATMUL=torch;
    between the two, where packing is allowed (THUNDER_PACKED_WEIGHTS not off, no training
    forward under auto), `_times` compares all four: oneDNN (packed where no slower than plain)
    where it takes at most onednn.MARGIN of what the MKL side gives (its packed time where that
    was F.linear's bits, else F.linear's); where packing is not allowed, `onednn.faster()`
    decides as for matmuls. Measured at onednn.PROBE for products of more rows than one (a
    prefill's or a training step's MLP product; larger ones gain more), at the product's own
    shape for one row (a decode step's lm head, the only one-row product this large: MKL's
    one-row product is ~1.6x slower than oneDNN's at K 512 and N 16k-50k here, about as fast at
    N 8192 or K 2048).
    packing: `_packing()`'s answer for the program (default: the program being generated now)."""
    packing = packing or _packing()
    mkl = "mkl_packed" if used(torch.float32, rows, packing) else "torch"
    if onednn.setting() == "torch" or rows * k * n < onednn.MIN_MACS or not onednn.available():
        return mkl
    if packing == "off":
        return "onednn" if onednn.faster() else mkl
    if packing == "on" and onednn.setting() == "onednn":  # (nothing left to measure)
        return "onednn_packed" if available(torch.float32, "onednn") else "onednn"
    probe_rows, probe_k, probe_n = onednn.PROBE
    times, exact = _times(torch.float32, *((1, n, k) if rows == 1 else (probe_rows, probe_n, probe_k)))  # (cached)
    dnn = "onednn"
    if available(torch.float32, "onednn") and (packing == "on" or times["onednn_packed"] <= times["onednn"]):
        dnn = "onednn_packed"
    if onednn.setting() == "onednn":
        return dnn
    return dnn if times[dnn] < onednn.MARGIN * times[mkl if exact else "torch"] else mkl


# the generated call's function in impl (thunder/ops/impl.py) for each kernel, less `linear`/`addmm`
_PREFIX = {"mkl_packed": "impl.packed_f32_", "onednn_packed": "impl.packed_onednn_", "onednn": "impl.onednn_"}


def _eligible(x, w, b, out_features):
    """The prefix of the generated call (`impl.packed_` ...) for x @ w (+ b), or None (torch's):
    a bfloat16 or float32 CPU product with a 2-D weight, a 1-D bias of out_features or none,
    static shapes; bfloat16 where packing is on (`used`), float32 by `f32_kernel`."""
    if not (hasattr(x, "shape") and hasattr(w, "shape")) or len(x.shape) < 1 or len(w.shape) != 2:
        return None
    if b is not None and (not hasattr(b, "shape") or tuple(b.shape) != (w.shape[out_features],)):
        return None
    dtype = x.dtype
    for n in (x, w, b):
        if n is not None and (n.device is None or n.device.type != "cpu" or n.dtype != dtype
                              or any(s < 0 for s in (n.shape if n is not x else n.shape[-1:]))):
            return None
    if any(s < 0 for s in x.shape):  # (rows of a program for all sizes, `?`: chosen at every call)
        return _BY_SIZE if dtype == torch.float32 and size_choices.fitting() else None
    rows = math.prod(x.shape[:-1])
    if dtype == torch.bfloat16:  # (choices by size: recorded and replayed, core/size_choices.py)
        return "impl.packed_" if size_choices.choose("packed weights: used", used(dtype, rows)) else None
    if dtype != torch.float32:
        return None
    if size_choices.fitting():  # (a program for all sizes: chosen at every call, ops/gemm_by_size.py)
        return _BY_SIZE
    k, n = (w.shape[1], w.shape[0]) if out_features == 0 else w.shape
    return _PREFIX.get(size_choices.choose("float32 linear kernel", f32_kernel(rows, k, n)))


_BY_SIZE = "impl.by_size_"


def linear_source(values, outs):
    """Statements for ltorch.linear in a grad-free program, or None."""
    x, w, b = values["input"], values["weight"], values["bias"]
    prefix = _eligible(x, w, b, 0)
    if prefix is None:
        return None
    if prefix == _BY_SIZE:
        return [f"{outs[0]} = {prefix}linear({x.name}, {w.name}, {b.name if b is not None else None}, {_packing()!r})"]
    return [f"{outs[0]} = {prefix}linear({x.name}, {w.name}{', ' + b.name if b is not None else ''})"]


def addmm_source(values, outs):
    """Statements for ltorch.addmm in a grad-free program (a 1-D bias, beta = alpha = 1: the
    product of a GPT-2 Conv1D), or None."""
    b, x, w = values["input"], values["mat1"], values["mat2"]
    if any(type(values[k]) not in (int, float) or values[k] != 1 for k in ("beta", "alpha")):
        return None
    if not hasattr(x, "shape") or len(x.shape) != 2 or not hasattr(b, "shape") or len(b.shape) != 1:
        return None
    prefix = _eligible(x, w, b, 1)
    if prefix is None:
        return None
    if prefix == _BY_SIZE:
        return [f"{outs[0]} = {prefix}addmm({b.name}, {x.name}, {w.name}, {_packing()!r})"]
    return [f"{outs[0]} = {prefix}addmm({b.name}, {x.name}, {w.name})"]
