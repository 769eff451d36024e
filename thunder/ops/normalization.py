"""Normalization ltorch ops: batch_norm, group_norm, rms_norm.

They decompose into prims (statistics in the op-math dtype); their VJP rules are in vjp/layers.py."""

import math

import torch
import torch.nn.functional as F

from thunder.core import dtypes, symbols
from thunder.core.proxies import meta_of, TensorProxy
from thunder.ops import prims
from thunder.ops.decomp_utils import expand_to, opmath_dtype, to_dtype
from thunder.ops.layers import _channels_last, _shape_str
from thunder.ops.registry import Bool, Float, Int, Ints, ltorch, Tensor


# --------------------------------------------------------------------------------------------
# Normalization


def _bcast(v, shape, dim):
    """A 1-d tensor v along `dim` of shape."""
    return prims.broadcast_in_dim(v, tuple(shape), (dim,))


def _mean(x, dims):
    n = math.prod(x.shape[d] for d in dims)
    return prims.div(prims.sum(x, dims), symbols.to_float(n))


def _keep(r, shape, dims):
    return prims.broadcast_in_dim(r, tuple(shape), tuple(i for i in range(len(shape)) if i not in dims))


def _batch_norm_check(input, running_mean, running_var, weight, bias, training):
    if input.ndim < 2:
        raise RuntimeError(f"running_mean should contain {input.shape[1] if input.ndim > 1 else 0} elements not "
                           f"{running_mean.numel() if running_mean is not None else 0}")
    c = input.shape[1]
    if training:
        n = input.numel() // c
        if n == 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"torch.Size({list(input.shape)})")
    elif running_mean is None or running_var is None:
        raise RuntimeError(f"running_{'mean' if running_mean is None else 'var'} must be defined in evaluation mode")
    for name, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean), ("running_var", running_var)):
        if t is not None and t.numel() != c:
            raise RuntimeError(f"{name} should contain {c} elements not {t.numel()}")
    return (0, *range(2, input.ndim))


@ltorch("torch.nn.functional.batch_norm", random=True, aliases=(F.batch_norm,))
def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: Bool = False, momentum: Float = 0.1, eps: Float = 1e-5):
    """In training with running_mean/running_var, torch updates them in place: the op is not Pure
    (marked random so that CSE/DCE keep it) and has no decomposition."""
    _batch_norm_check(input, running_mean, running_var, weight, bias, training)
    return _in_input_format(input, input.dtype)


def _in_input_format(input, dtype):
    """A result of input's shape laid out in its suggested memory format, as eager's batch-norm
    kernels write theirs (a random op is not run on meta tensors)."""
    out = TensorProxy(input.shape, dtype, input.device)
    if _channels_last(input):  # (else contiguous: no meta tensor)
        out.meta = torch.empty_like(meta_of(input), memory_format=torch.channels_last)
    return out


def _batch_norm_stats(x, running_mean, running_var, training, dims):
    """(mean, var) per channel, in x's dtype: the batch's (biased var) or the running ones."""
    if training:
        mean = _mean(x, dims)
        centered = prims.sub(x, _keep(mean, x.shape, dims))
        return mean, _mean(prims.mul(centered, centered), dims)
    return to_dtype(running_mean, x.dtype), to_dtype(running_var, x.dtype)


@batch_norm.decompose
def _(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    dims = _batch_norm_check(input, running_mean, running_var, weight, bias, training)
    if training and (running_mean is not None or running_var is not None):
        raise NotImplementedError("thunder: F.batch_norm in training mode with running stats updates them in place "
                                  "and has no decomposition")
    cdt = opmath_dtype(input.dtype)
    x = to_dtype(input, cdt)
    mean, var = _batch_norm_stats(x, running_mean, running_var, training, dims)
    rstd = prims.rsqrt(prims.add(var, float(eps)))
    out = prims.mul(prims.sub(x, _bcast(mean, x.shape, 1)), _bcast(rstd, x.shape, 1))
    if weight is not None:
        out = prims.mul(out, _bcast(to_dtype(weight, cdt), x.shape, 1))
    if bias is not None:
        out = prims.add(out, _bcast(to_dtype(bias, cdt), x.shape, 1))
    return to_dtype(out, input.dtype)


@batch_norm.trains_as
def _(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    # a module's batch norm in training (affine, running stats): eager's kernels, whose backward
    # reads the batch statistics its forward computed (a fused kernel of the decomposed backward
    # reduced each channel of an NCHW gradient in one thread: 5x torch's time)
    if not training or running_mean is None or running_var is None or weight is None or bias is None \
            or input.dtype not in (torch.float32, torch.float64) \
            or any(t.dtype != input.dtype for t in (running_mean, running_var, weight, bias)):
        return None
    return native_batch_norm, dict(input=input, weight=weight, bias=bias, running_mean=running_mean,
                                   running_var=running_var, training=training, momentum=momentum, eps=eps)


@ltorch("torch.ops.aten.native_batch_norm", returns_sequence=True, random=True)
def native_batch_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,
                      running_var: Tensor | None, training: Bool, momentum: Float, eps: Float):
    """batch_norm with the batch's mean and 1/std per channel, as torch's kernel returns them:
    batch_norm's form in @forward (its backward kernel reads them). It updates the running
    stats in place, as batch_norm: not Pure, no decomposition."""
    out = batch_norm.meta(input, running_mean, running_var, weight, bias, training, momentum, eps)
    c = input.shape[1]
    return out, TensorProxy((c,), input.dtype, input.device), TensorProxy((c,), input.dtype, input.device)


@ltorch("impl.native_batch_norm_backward", returns_sequence=True)
def native_batch_norm_backward(grad_output: Tensor, input: Tensor, weight: Tensor, save_mean: Tensor,
                               save_invstd: Tensor, eps: Float):
    """native_batch_norm's VJP in training (input, weight, bias cotangents) from its saved batch
    statistics: torch's kernel."""
    return _in_input_format(input, grad_output.dtype), TensorProxy(weight.shape, weight.dtype, weight.device), TensorProxy(weight.shape, weight.dtype,
                                                                                     weight.device)


def _group_norm_check(input, num_groups, weight, bias):
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.ndim}")
    c = input.shape[1]
    if num_groups <= 0 or c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {_shape_str(input)} and num_groups={num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.shape[0] != c):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in input, but "
                               f"got {name} of shape {_shape_str(t)} and input of shape {_shape_str(input)}")


@ltorch("torch.nn.functional.group_norm", aliases=(F.group_norm,))
def group_norm(input: Tensor, num_groups: Int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: Float = 1e-5):
    _group_norm_check(input, num_groups, weight, bias)
    return TensorProxy(input.shape, input.dtype, input.device)


def _group_norm_parts(input, num_groups, eps):
    """(x in the compute dtype, normalized x in (N, G, M), rstd (N, G))."""
    cdt = opmath_dtype(input.dtype)
    n = input.shape[0]
    x = to_dtype(input, cdt)
    xg = prims.reshape(x, (n, num_groups, input.numel() // max(n * num_groups, 1)))
    mean = _mean(xg, (2,))
    centered = prims.sub(xg, _keep(mean, xg.shape, (2,)))
    var = _mean(prims.mul(centered, centered), (2,))
    rstd = prims.rsqrt(prims.add(var, float(eps)))
    return x, prims.mul(centered, _keep(rstd, xg.shape, (2,))), rstd


@group_norm.decompose
def _(input, num_groups, weight=None, bias=None, eps=1e-5):
    _group_norm_check(input, num_groups, weight, bias)
    x, xhat, _ = _group_norm_parts(input, num_groups, eps)
    out = prims.reshape(xhat, tuple(x.shape))
    if weight is not None:
        out = prims.mul(out, _bcast(to_dtype(weight, x.dtype), x.shape, 1))
    if bias is not None:
        out = prims.add(out, _bcast(to_dtype(bias, x.dtype), x.shape, 1))
    return to_dtype(out, input.dtype)


def _rms_norm_check(input, normalized_shape, weight):
    ns = tuple(normalized_shape)
    if weight is not None and tuple(weight.shape) != ns:
        raise RuntimeError(f"Expected weight to be of same shape as normalized_shape, but got weight of shape "
                           f"{_shape_str(weight)} and normalized_shape = {list(ns)}")
    if input.ndim < len(ns) or tuple(input.shape[input.ndim - len(ns):]) != ns:
        raise RuntimeError(f"Given normalized_shape={list(ns)}, expected input with shape [*"
                           f"{', '.join(map(str, ns))}], but got input of size{_shape_str(input)}")
    return tuple(range(input.ndim - len(ns), input.ndim))


@ltorch("torch.nn.functional.rms_norm", aliases=(F.rms_norm, torch.rms_norm))
def rms_norm(input: Tensor, normalized_shape: Ints, weight: Tensor | None = None, eps: Float | None = None):
    """eps=None: the machine epsilon of the compute dtype (float32 for float16/bfloat16). The
    result has the input's dtype, whatever the weight's (eager's)."""
    _rms_norm_check(input, normalized_shape, weight)
    return TensorProxy(input.shape, input.dtype, input.device)


def _rms_parts(input, normalized_shape, eps):
    dims = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    cdt = opmath_dtype(input.dtype)
    eps = torch.finfo(cdt).eps if eps is None else eps
    x = to_dtype(input, cdt)
    rstd = prims.rsqrt(prims.add(_mean(prims.mul(x, x), dims), float(eps)))
    return x, _keep(rstd, x.shape, dims), dims


@rms_norm.decompose
def _(input, normalized_shape, weight=None, eps=None):
    x, rstd, _ = _rms_parts(input, normalized_shape, eps)
    out = prims.mul(x, rstd)
    if weight is not None:  # (scaled before the one rounding to the input's dtype, as eager)
        dt = dtypes.promote(out, weight)
        out = prims.mul(to_dtype(out, dt), expand_to(to_dtype(weight, dt), x.shape))
    return to_dtype(out, input.dtype)
