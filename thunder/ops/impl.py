"""Torch implementations of ops that have no single torch function with our signature."""
import torch
import contextlib
import math
import random

from thunder.core import fresh_memory, ndarray

from thunder.ops.gemm_by_size import (addmm as by_size_addmm, linear as by_size_linear,  # noqa: F401 (generated code)
                                      matmul as by_size_matmul)
from thunder.ops.large_outputs import linear as large_linear, matmul as large_matmul  # noqa: F401 (generated code)
from thunder.ops.onednn import addmm as onednn_addmm, linear as onednn_linear, matmul as onednn_matmul  # noqa: F401 (generated code)
from thunder.ops.packed_linear import addmm as packed_addmm, linear as packed_linear  # noqa: F401 (generated code)
from thunder.ops.packed_linear import addmm_f32 as packed_f32_addmm, linear_f32 as packed_f32_linear  # noqa: F401
from thunder.ops.packed_linear import (addmm_onednn_f32 as packed_onednn_addmm,  # noqa: F401 (generated code)
                                       linear_onednn_f32 as packed_onednn_linear)


def convert_element_type(a, dtype):
    out = _large_cast(a, dtype)
    return a.to(dtype) if out is None else out


def _large_cast(a, dtype):
    """A cast of a large contiguous CPU tensor into fresh huge pages (core/fresh_memory.py: the
    float32 gradient of a large bfloat16 weight-gradient GEMM), else None. Not where autograd
    records the op (torch's own `to` then)."""
    if (a.dtype == dtype or not a.is_cpu or not a.is_contiguous() or (a.requires_grad and torch.is_grad_enabled())
            or not fresh_memory.is_large(a.shape, dtype)):
        return None
    return fresh_memory.empty(a.shape, dtype).copy_(a)


def broadcast_in_dim(a, shape, broadcast_dims):
    view = [1] * len(shape)
    for i, d in enumerate(broadcast_dims):
        view[d] = a.shape[i]
    return a.reshape(view).expand(shape)


def slice_prim(a, start_indices, end_indices, strides):
    return a[tuple(slice(s, e, st) for s, e, st in zip(start_indices, end_indices, strides))]


def sum_prim(a, dims):
    # the prim keeps the dtype (torch.sum would widen integers to int64)
    return torch.sum(a, dims, dtype=a.dtype) if dims else a.clone()


def prod_prim(a, dims):
    for d in sorted(dims, reverse=True):
        a = torch.prod(a, d, dtype=a.dtype)
    return a


def amax_prim(a, dims):
    return torch.amax(a, dims) if dims else a.clone()


def amin_prim(a, dims):
    return torch.amin(a, dims) if dims else a.clone()


def full(shape, fill_value, *, dtype, device):
    return torch.full(shape, fill_value, dtype=dtype, device=device)


def iota(length, *, start, step, dtype, device):
    return torch.arange(start, start + length * step, step, dtype=dtype, device=device)[:length]


def uniform(shape, low, high, *, dtype, device):
    return torch.empty(shape, dtype=dtype, device=device).uniform_(low, high)


def bernoulli_mask(shape, p, *, device):
    return torch.empty(shape, dtype=torch.bool, device=device).bernoulli_(p)


def div_prim(a, b):
    t = a if isinstance(a, torch.Tensor) else b
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")


# --- ops B (shape and nn ops)
def squeeze(input, dim=None):
    return torch.squeeze(input) if dim is None else torch.squeeze(input, dim)


def rmatmul(input, other):
    return torch.matmul(other, input)


# --- ops A: elementwise, reduction and creation ops without a torch function of their signature
def prod(input, dim=None, keepdim=False, *, dtype=None):
    return torch.prod(input, dtype=dtype) if dim is None else torch.prod(input, dim, keepdim, dtype=dtype)


def _var_std(fn):
    def run(input, dim=None, unbiased=True, keepdim=False, *, correction=None):
        return fn(input, dim, correction=int(unbiased) if correction is None else correction, keepdim=keepdim)

    return run


var = _var_std(torch.var)
std = _var_std(torch.std)


def _extremum(fn):
    # always a tuple, as ops with returns_sequence: (value,) for a full reduction, else (values, indices)
    def run(input, dim=None, keepdim=False):
        return (fn(input),) if dim is None else tuple(fn(input, dim, keepdim))

    return run


max_reduction = _extremum(torch.max)
min_reduction = _extremum(torch.min)


def sort(input, dim=-1, descending=False, *, stable=False):
    # torch.sort's stable overload takes dim and descending by keyword only
    return tuple(torch.sort(input, dim=dim, descending=descending, stable=stable))


def argsort(input, dim=-1, descending=False, *, stable=False):
    return torch.argsort(input, dim=dim, descending=descending, stable=stable)


def arange(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    return torch.arange(start, end, step, dtype=dtype, device=device, requires_grad=requires_grad)


def to(input, dtype=None, non_blocking=False, copy=False, *, device=None, memory_format=None):
    if dtype is not None and device is None and memory_format is None and isinstance(input, torch.Tensor):
        out = _large_cast(input, dtype)
        if out is not None:
            return out
    kw = {} if memory_format is None else {"memory_format": memory_format}
    return input.to(device=device, dtype=dtype, non_blocking=non_blocking, copy=copy, **kw)


# --- prims used by VJPs
def unslice(g, shape, start_indices, end_indices, strides):
    out = g.new_zeros(shape)
    out[tuple(slice(s, e, st) for s, e, st in zip(start_indices, end_indices, strides))] = g
    return out


def zeros_index_add(shape, dim, index, source):
    if source.is_cpu and not (source.requires_grad and torch.is_grad_enabled()):  # (large: no fill)
        return fresh_memory.zeros(shape, source.dtype).index_add_(dim, index, source)
    return source.new_zeros(shape).index_add_(dim, index, source)


def index_add_into(a, dim, index, source):
    return a.index_add_(dim, index, source)


# --- layers (thunder/ops/layers.py and the layer prims)
def _conv_nd(fn, nd):
    # padding: nd ints, or (low, high) pairs per dim for padding="same" with an even kernel extent
    def run(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        if isinstance(padding, (tuple, list)) and len(padding) == 2 * nd:
            pad = []
            for i in reversed(range(nd)):  # F.pad lists the last dim first
                pad += [padding[2 * i], padding[2 * i + 1]]
            input, padding = torch.nn.functional.pad(input, pad), 0
        return fn(input, weight, bias, stride, padding, dilation, groups)

    return run


conv1d = _conv_nd(torch.nn.functional.conv1d, 1)
conv2d = _conv_nd(torch.nn.functional.conv2d, 2)


def convolution_backward_input(grad_output, weight, input_shape, stride, padding, dilation, transposed,
                               output_padding, groups):
    input = grad_output.new_empty(input_shape)
    return torch.ops.aten.convolution_backward(grad_output, input, weight, None, stride, padding, dilation,
                                               transposed, output_padding, groups, [True, False, False])[0]


def convolution_backward(grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups):
    return torch.ops.aten.convolution_backward(grad_output, input, weight, None, stride, padding, dilation,
                                               transposed, output_padding, groups, [True, True, False])[:2]


def convolution_backward_weight(grad_output, input, weight_shape, stride, padding, dilation, transposed,
                                output_padding, groups):
    weight = grad_output.new_empty(weight_shape)
    return torch.ops.aten.convolution_backward(grad_output, input, weight, None, stride, padding, dilation,
                                               transposed, output_padding, groups, [False, True, False])[1]


# --- fused backward kernels of torch, with our signatures
def interpolate(input, size, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
                antialias=False):
    # size is always the output size; scale_factor (when given) sets the source index scales
    sizes = dict(size=size) if scale_factor is None else dict(scale_factor=scale_factor)
    return torch.nn.functional.interpolate(input, **sizes, mode=mode, align_corners=align_corners,
                                           antialias=antialias)


def native_multi_head_attention(*args, **kwargs):
    # without need_weights torch returns (output, None): the op's one result
    out, weights = torch._native_multi_head_attention(*args, **kwargs)
    return (out,) if weights is None else (out, weights)


def layer_norm_backward(grad_output, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    # mean and rstd are recomputed (F.layer_norm does not return them)
    _, mean, rstd = torch.ops.aten.native_layer_norm(input, normalized_shape, weight, bias, eps)
    return native_layer_norm_backward(grad_output, input, normalized_shape, mean, rstd, weight, bias)


def native_batch_norm_backward(grad_output, input, weight, save_mean, save_invstd, eps):
    return torch.ops.aten.native_batch_norm_backward(grad_output, input, weight, None, None, save_mean, save_invstd,
                                                     True, eps, [True, True, True])


def native_layer_norm_backward(grad_output, input, normalized_shape, mean, rstd, weight=None, bias=None):
    mask = [True, weight is not None, bias is not None]
    gx, gw, gb = torch.ops.aten.native_layer_norm_backward(grad_output, input, normalized_shape, mean, rstd,
                                                          weight, bias, mask)
    zeros = input.new_zeros(tuple(normalized_shape)) if gw is None or gb is None else None
    return gx, gw if gw is not None else zeros, gb if gb is not None else zeros


# --- views
def no_grad_update(input, value):
    return value


# --- indexing: keys with tensors hold TENSOR_INDEX where each of `indices` goes
class _TensorIndex:
    def __repr__(self):
        return "impl.TENSOR_INDEX"  # how generated code names it


TENSOR_INDEX = _TensorIndex()


def _key(key, indices):
    it = iter(indices)
    return tuple(next(it) if e is TENSOR_INDEX else e for e in key)


def index(input, key, indices):
    return input[_key(key, indices)]


def setitem(input, key, value, *, indices=()):
    return setitem_(input.clone(), key, value, indices=indices)


def setitem_(input, key, value, *, indices=()):
    """setitem in place (runtime/reinplace.py)."""
    input[_key(key, indices) if indices else key] = value
    return input


# --- random and indexing
def bernoulli(input, p=None):
    return torch.bernoulli(input) if p is None else torch.bernoulli(input, p)


def normal(mean, std=1.0, size=None, *, dtype=None, device=None, requires_grad=False):
    if size is None:  # a tensor mean and/or std
        return torch.normal(mean, std)
    return torch.normal(mean, std, size, dtype=dtype, device=device, requires_grad=requires_grad)


# --- the fallback's gradient (ltorch.torch_call_vjp, see ops/fallback.py)
def torch_call_vjp(call, inputs, cotangents, *, grads_for, cotangent_for, mutated=(), rng_state=None,
                   autocast=None):
    """torch's gradients of a ltorch.torch_call, `call(*inputs)`, for inputs `grads_for`, given
    the cotangents of its results `cotangent_for` (the tensors of its result, then the new values
    of the inputs `mutated` it writes in place): the call recomputed on detached inputs under
    enable_grad (from rng_state, the generator state the forward started from, for a random
    call; in the autocast region (device type, dtype) it ran in), then torch.autograd.grad. In
    grad mode (a backward for create_graph=True, runtime/autograd.py) the inputs that have
    history keep it (a view each: a tensor given twice gets each use's part) and the gradients
    get theirs."""
    create = torch.is_grad_enabled()
    leaves = [x.view_as(x) if create and i in grads_for and x.requires_grad else x.detach().requires_grad_(i in grads_for)
              for i, x in enumerate(inputs)]
    args = list(leaves)
    with torch.enable_grad(), _generator_state(rng_state, inputs), _autocast(autocast):
        for j in mutated:
            args[j] = args[j].clone()  # (the forward wrote into a clone too)
        out = call(*args)
    results = [t for t in _tensors(out) if not any(t is a for a in args)] + [args[j] for j in mutated]
    pairs = [(results[i], g) for i, g in zip(cotangent_for, cotangents) if results[i].requires_grad]
    wanted = [leaves[i] for i in grads_for]
    grads = [None] * len(wanted)
    if pairs:
        grads = torch.autograd.grad([r for r, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True,
                                    create_graph=create)
    return tuple(g if g is not None else torch.zeros_like(w) for g, w in zip(grads, wanted))


def _tensors(v):
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from _tensors(x)


class _generator_state:
    """Runs a block from a saved generator state, and restores the generator's own state after it."""

    def __init__(self, state, inputs):
        self.state = state
        self.device = next((x.device for x in inputs if x.device.type != "cpu"), torch.device("cpu"))

    def __enter__(self):
        if self.state is None:
            return
        cuda = self.device.type == "cuda"
        self.fork = torch.random.fork_rng(devices=[self.device] if cuda else [], device_type=self.device.type)
        self.fork.__enter__()
        if cuda:
            torch.cuda.set_rng_state(self.state, self.device)
        else:
            torch.set_rng_state(self.state)

    def __exit__(self, *exc):
        if self.state is not None:
            self.fork.__exit__(*exc)
        return False


def _autocast(state):
    return contextlib.nullcontext() if state is None else torch.autocast(state[0], dtype=state[1])


# --- checks of values a program was specialized on (ltorch.check, see ops/values.py)
class ValueChanged(Exception):
    """A value that the compiled program was specialized on while tracing (a tensor value Python
    read, the shape of a data-dependent result) differs in this call: the cache tries its next
    entry. Raised before the program changed anything (inputs are written at its end). what names
    the read and its line; expected, got: the values."""

    def __init__(self, what, expected, got):
        super().__init__(what, expected, got)
        self.what, self.expected, self.got = what, expected, got

    def __str__(self):
        # (the cache words it as a miss reason: runtime/guards.py value_changed_reason)
        return f"{self.what} changed ({self.expected!r} -> {self.got!r})"


def value_changed(got, expected, what, rng=None):
    if rng is not None:  # the random draws of this attempt are undone: the next entry redraws them
        rng_restore(rng)
    raise ValueChanged(what, expected, got)


def float_differs(got, expected):
    """Whether two floats differ, telling -0.0 from 0.0 and taking nan as equal to nan."""
    if expected != expected:
        return got == got
    return got != expected or math.copysign(1.0, got) != math.copysign(1.0, expected)


def rng_snapshot(python=False):
    """The states of the random generators (CPU, and CUDA devices once initialized); python: also
    Python's random module's and numpy's global generator's (a program that draws from them:
    ops/python_draws.py; ~40 us, so only there)."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    if not python:
        return torch.get_rng_state(), cuda, None
    np_random = ndarray.numpy_random()
    return torch.get_rng_state(), cuda, (random.getstate(), np_random.get_state() if np_random else None)


def rng_restore(snapshot):
    cpu, cuda, python = snapshot
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
    if python is not None:
        random.setstate(python[0])
        if python[1] is not None:
            ndarray.numpy_random().set_state(python[1])


def python_draw(name, *args):
    """A draw of Python's random module or numpy's global generator by its name
    ("numpy.random.beta"; ops/python_draws.py), as the function called it."""
    module, _, attr = name.rpartition(".")
    return getattr(random if module == "random" else ndarray.numpy_random(), attr)(*args)


def inference_tensor(t):
    """t as an inference tensor (what eager's torch.inference_mode() makes): a copy made in
    inference mode, for results of a trace's inference_mode region that the function returns."""
    with torch.inference_mode():
        return t.clone()


def no_grad_view(t, modified=False):
    """t as eager's view made under torch.no_grad() of a tensor that requires grad: it shares t's
    memory, requires grad and is a leaf without grad_fn, sends no gradient anywhere, and an
    in-place update of it with grad mode on raises eager's error (a no_grad view of a detached
    alias of t that requires grad). For such results of the function: the program's value is
    detached. modified: it or its base was updated in place after the view was made (its
    version then differs from its creation's: eager raises where it is used with grad mode on)."""
    with torch.no_grad():
        view = t.detach().requires_grad_().view_as(t)
    if modified:
        torch.autograd.graph.increment_version(view)
    return view


# ops/custom_function.py installs its run_backward here (it records the calls this runs)
custom_function_backward = None


def with_strides(t, strides):
    """t laid out with eager's strides: t itself where it has them, else a copy (a result of a
    fused kernel, which writes row-major, where eager's is channels-last or permuted)."""
    if t.stride() == strides:
        return t
    return torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device).copy_(t)


def autograd_function_backward(key, saved, cotangents, *, cotangent_for, grads_for):
    """A torch.autograd.Function's own backward (ops/custom_function.py)."""
    return custom_function_backward(key, saved, cotangents, cotangent_for, grads_for)


# --- attention: torch's fused kernels (impl.sdpa_flash). The CPU flash kernels read garbage (NaN)
# where a last dim is strided; CUDA's need a unit last stride and 16-byte aligned rows
def _unit_last_stride(x):
    return x if x.stride(-1) == 1 else x.contiguous()


def _aligned_rows(x):
    ok = x.stride(-1) == 1 and x.data_ptr() % 16 == 0 and all(s % 8 == 0 for s in x.stride()[:-1])
    return x if ok else x.contiguous()


def sdpa_cuda_backend(dtype, head_dim, is_causal, L, S, capability):
    """Which CUDA kernel computes impl.sdpa_flash on a device of this compute capability: flash
    attention (f16/bf16, sm80+, head dims up to 256; torch's flash aligns a causal mask at the
    bottom right, so not with L != S) or the memory-efficient kernel (any float dtype, causal
    from the top left as sdpa's). A function of the arguments only, so that the backward picks
    the kernel that computed the forward's logsumexp."""
    if dtype in (torch.float16, torch.bfloat16) and tuple(capability) >= (8, 0) and head_dim <= 256 \
            and not (is_causal and L != S):
        return "flash"
    return "efficient"


def _cuda_backend(query, key, is_causal):
    return sdpa_cuda_backend(query.dtype, query.shape[-1], is_causal, query.shape[-2], key.shape[-2],
                             torch.cuda.get_device_capability(query.device))


def sdpa_flash(query, key, value, is_causal=False, *, scale=None):
    if query.device.type == "cuda":
        q, k, v = (_aligned_rows(x) for x in (query, key, value))
        if _cuda_backend(q, k, is_causal) == "flash":
            out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, is_causal, False,
                                                                          scale=scale)[:2]
            return out, lse
        out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, is_causal,
                                                                          scale=scale)[:2]
        return out, lse[..., :q.shape[-2]]  # (its rows padded to a multiple of 32)
    q, k, v = (_unit_last_stride(x) for x in (query, key, value))
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, is_causal, scale=scale)


def sdpa_flash_backward(grad_out, query, key, value, out, logsumexp, is_causal=False, *, scale=None):
    if query.device.type == "cuda":
        return _sdpa_cuda_backward(grad_out, query, key, value, out, logsumexp, is_causal, scale)
    g, q, k, v, o = (_unit_last_stride(x) for x in (grad_out, query, key, value, out))
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(g, q, k, v, o, logsumexp, 0.0,
                                                                                is_causal, scale=scale)


def _sdpa_cuda_backward(grad_out, query, key, value, out, logsumexp, is_causal, scale):
    g, q, k, v, o = (_aligned_rows(x) for x in (grad_out, query, key, value, out))
    L, S = q.shape[-2], k.shape[-2]
    # without dropout the kernels never read the random generator's state: placeholders
    if _cuda_backend(q, k, is_causal) == "flash":
        seed = torch.empty((2,), dtype=torch.uint64, device=q.device)
        offset = torch.empty((), dtype=torch.uint64, device=q.device)
        # (no cumulative sequence lengths: undefined, as the forward returns them, selects the dense kernel)
        return torch.ops.aten._scaled_dot_product_flash_attention_backward(
            g, q, k, v, o, logsumexp.contiguous(), None, None, L, S, 0.0, is_causal, seed, offset, scale=scale)
    lse = torch.nn.functional.pad(logsumexp, (0, -L % 32))  # the kernel's padded rows
    seed, offset = (torch.empty((), dtype=torch.int64, device=q.device) for _ in range(2))
    gq, gk, gv, _ = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
        g, q, k, v, None, o, lse, seed, offset, 0.0, [True, True, True, False], is_causal, scale=scale)
    return gq, gk, gv


def check_targets(target, classes, ignore_index):
    """Eager's IndexError for a class-index target outside [0, classes) that is not ignore_index
    (ltorch.check_targets: fused loss kernels cannot raise)."""
    if target.numel() == 0:
        return
    lo, hi = torch.aminmax(target)
    if lo.item() >= 0 and hi.item() < classes:
        return
    t = target.reshape(-1)
    bad = t[((t < 0) | (t >= classes)) & (t != ignore_index)]
    if bad.numel():
        raise IndexError(f"Target {bad[0].item()} is out of bounds.")
