"""Neural-network layer ops: convolutions, pooling, bilinear (F.interpolate: interpolate.py;
batch/group/RMS normalization: normalization.py).

Int-or-tuple parameters (stride, padding, kernel_size, ...) are normalized while binding a call:
they reach the meta function, the MLIR attributes and the generated code as tuples with one
entry per spatial dim (stride=None of a pooling op becomes kernel_size, padding="valid"/"same"
becomes numbers, adaptive pooling's None entries become the input's sizes). padding="same" with an
even kernel extent pads one more at the end than at the start; conv1d/conv2d then carry
(low, high) pairs per dim, which impl.conv1d/impl.conv2d apply with F.pad.

Convolutions decompose into the `convolution` prim (aten.convolution), pooling into reshape/sum
when the windows tile the input and into pooling prims otherwise; the normalizations and bilinear
decompose into prims. Every op has a VJP rule; convolution and pooling gradients run aten's
backward kernels through prims.
"""

import math

import torch
import torch.nn.functional as F

from thunder.core import trace as tracing
from thunder.core.proxies import meta_of, strided_meta, TensorProxy
from thunder.ops import prims
from thunder.ops.decomp_utils import expand_to, opmath_dtype, to_dtype
from thunder.ops.meta_utils import is_tensor
from thunder.ops.registry import Bool, Dims, Int, Ints, ltorch, Tensor


# --------------------------------------------------------------------------------------------
# Binding: normalize int-or-tuple parameters before the kinds are checked


def _normalizing(normalize):
    """Decorator for an op: `normalize(values)` rewrites its bound values (int-or-tuple arguments
    as tuples, raising torch's errors for bad ones) before they are checked against the kinds."""

    def wrap(op):
        op.normalize = normalize
        return op

    return wrap


def _is_seq(v):
    return isinstance(v, (tuple, list, torch.Size))


def _ntuple(v, n, err):
    """An int or a sequence of 1 or n ints as n ints; err(v) is raised otherwise."""
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,) * n
    if _is_seq(v) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        if len(v) == 1:
            return tuple(v) * n
        if len(v) == n:
            return tuple(v)
    raise err(v)


def _shape_str(t):
    return "[" + ", ".join(map(str, t.shape)) + "]"


def _dtype_name(t):
    return {torch.float32: "torch.FloatTensor", torch.float64: "torch.DoubleTensor", torch.float16: "torch.HalfTensor",
            torch.bfloat16: "torch.BFloat16Tensor"}.get(t.dtype, str(t.dtype))


# --------------------------------------------------------------------------------------------
# Convolutions


def _conv_param_error(name, nd):
    return lambda v: RuntimeError(f"expected {name} to be a single integer value or a list of {nd} values to match "
                                  f"the convolution dimensions, but got {name}={list(v) if _is_seq(v) else v}")


def _normalize_conv(nd, transposed):
    def normalize(values):
        for name in ("stride", "dilation", *(("output_padding",) if transposed else ())):
            if name in values:
                values[name] = _ntuple(values[name], nd, _conv_param_error(name, nd))
        pad = values["padding"]
        if isinstance(pad, str) and not transposed:
            if pad == "valid":
                values["padding"] = (0,) * nd
            elif pad == "same":
                if any(s != 1 for s in values["stride"]):
                    raise RuntimeError("padding='same' is not supported for strided convolutions")
                weight = values["weight"]
                if not is_tensor(weight) or weight.ndim != nd + 2:
                    return  # the meta function reports it
                pairs = []
                for d, k in zip(values["dilation"], weight.shape[2:]):
                    total = d * (k - 1)
                    pairs.append((total // 2, total - total // 2))
                if all(lo == hi for lo, hi in pairs):
                    values["padding"] = tuple(lo for lo, _ in pairs)
                else:
                    values["padding"] = tuple(x for p in pairs for x in p)
            else:
                raise RuntimeError(f"Invalid padding string: '{pad}'")
        else:
            values["padding"] = _ntuple(pad, nd, _conv_param_error("padding", nd))

    return normalize


def _pad_pairs(padding, nd):
    """(low, high) per spatial dim from nd ints or 2*nd ints."""
    padding = tuple(padding)
    if len(padding) == 2 * nd:
        return [(padding[2 * i], padding[2 * i + 1]) for i in range(nd)]
    return [(p, p) for p in padding]


def _conv_check(name, nd, input, weight, bias, stride, padding, dilation, groups, transposed=False,
                output_padding=None):
    """The output shape of a convolution (batched or not), with torch's errors."""
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {name}, but got input of "
                           f"size: {_shape_str(input)}")
    if weight.ndim != nd + 2:
        raise RuntimeError(f"weight should have at least three dimensions" if weight.ndim < 3 else
                           f"Expected {nd + 2}-dimensional weight for {nd + 2}-dimensional input, but got "
                           f"{weight.ndim}-dimensional weight of size {_shape_str(weight)} instead")
    if input.dtype != weight.dtype:
        raise RuntimeError(f"Input type ({_dtype_name(input)}) and weight type ({_dtype_name(weight)}) should be the "
                           f"same or input should be a MKLDNN tensor and weight is a dense tensor")
    if bias is not None and bias.dtype != input.dtype:
        raise RuntimeError(f"Input type ({_dtype_name(input)}) and bias type ({_dtype_name(bias)}) should be the same")
    pairs = _pad_pairs(padding, nd)
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(p < 0 for pr in pairs for p in pr):
        raise RuntimeError("negative padding is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    batched = input.ndim == nd + 2
    shape = tuple(input.shape) if batched else (1, *input.shape)
    c_in, spatial, k = shape[1], shape[2:], weight.shape[2:]
    if transposed:
        if weight.shape[0] != c_in:
            raise RuntimeError(f"Given transposed=1, weight of size {_shape_str(weight)}, expected input"
                               f"{_shape_str(input)} to have {weight.shape[0]} channels, but got {c_in} channels "
                               f"instead")
        if c_in % groups:
            raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                               f"but got weight of size {_shape_str(weight)} instead")
        for i in range(nd):
            if not (output_padding[i] < stride[i] or output_padding[i] < dilation[i]):
                names = ("height", "width") if nd == 2 else ("",) * nd
                raise RuntimeError(
                    "output padding must be smaller than either stride or dilation, but got "
                    + " ".join(f"output_padding_{n}: {o}" for n, o in zip(names, output_padding)) + " "
                    + " ".join(f"stride_{n}: {s}" for n, s in zip(names, stride)) + " "
                    + " ".join(f"dilation_{n}: {d}" for n, d in zip(names, dilation)))
        c_out = weight.shape[1] * groups
        sizes = [(s - 1) * st - lo - hi + d * (kk - 1) + op + 1
                 for s, st, (lo, hi), d, kk, op in zip(spatial, stride, pairs, dilation, k, output_padding)]
        if any(x <= 0 for x in sizes):
            raise RuntimeError(f"Given input size per channel: ({' x '.join(map(str, spatial))}). Calculated output "
                               f"size per channel: ({' x '.join(map(str, sizes))}). Output size is too small")
    else:
        c_out = weight.shape[0]
        if c_out % groups:
            raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                               f"but got weight of size {_shape_str(weight)} instead")
        if weight.shape[1] * groups != c_in:
            raise RuntimeError(f"Given groups={groups}, weight of size {_shape_str(weight)}, expected input"
                               f"{_shape_str(input)} to have {weight.shape[1] * groups} channels, but got {c_in} "
                               f"channels instead")
        padded = [s + lo + hi for s, (lo, hi) in zip(spatial, pairs)]
        eff = [d * (kk - 1) + 1 for d, kk in zip(dilation, k)]
        if any(p < e for p, e in zip(padded, eff)):
            raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel "
                               f"size: ({' x '.join(map(str, eff))}). Kernel size can't be greater than actual input "
                               f"size")
        sizes = [(p - e) // st + 1 for p, e, st in zip(padded, eff, stride)]
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != c_out):
        raise RuntimeError(f"Given weight of size {_shape_str(weight)}, expected bias to be 1-dimensional with {c_out} "
                           f"elements, but got bias of size {_shape_str(bias)} instead")
    out = (shape[0], c_out, *sizes)
    return out if batched else out[1:]


def _batched(x, nd):
    return x if x.ndim == nd + 2 else prims.reshape(x, (1, *x.shape))


def _zero_pad(x, pairs):
    """x (N, C, *spatial) with zeros added: pairs[i] = (before, after) for spatial dim i."""
    if all(lo == 0 and hi == 0 for lo, hi in pairs):
        return x
    lead = x.ndim - len(pairs)
    shape = (*x.shape[:lead], *(s + lo + hi for s, (lo, hi) in zip(x.shape[lead:], pairs)))
    start = (0,) * lead + tuple(lo for lo, _ in pairs)
    end = tuple(st + s for st, s in zip(start, x.shape))
    return prims.unslice(x, shape, start, end, (1,) * x.ndim)


def _conv_parts(input, padding, nd, transposed):
    """(batched input, padded-input, symmetric padding) for the convolution prim."""
    x = _batched(input, nd)
    pairs = _pad_pairs(padding, nd)
    if transposed or all(lo == hi for lo, hi in pairs):
        return x, x, tuple(lo for lo, _ in pairs)
    return x, _zero_pad(x, pairs), (0,) * nd


def _conv_decomp(nd, input, weight, bias, stride, padding, dilation, groups, transposed=False, output_padding=None):
    _, xp, pad = _conv_parts(input, padding, nd, transposed)
    out = prims.convolution(xp, weight, bias, tuple(stride), pad, tuple(dilation), transposed,
                            tuple(output_padding) if transposed else (0,) * nd, groups)
    return out if input.ndim == nd + 2 else prims.reshape(out, tuple(out.shape[1:]))


def conv_grads(g, input, weight, conf):
    """(input's, weight's cotangents) of a convolution (conf: stride ... groups as the prim's),
    in one torch call where the rule is asked for both (each alone where only one is needed or
    it is not known: the other is then dropped unused)."""
    needing = tracing.inputs_needing_grad() or {}
    if needing.get("input") is True and needing.get("weight") is True:
        return prims.convolution_backward(g, input, weight, *conf)
    return (prims.convolution_backward_input(g, weight, tuple(input.shape), *conf),
            prims.convolution_backward_weight(g, input, tuple(weight.shape), *conf))


def _conv_vjp(nd, g, input, weight, bias, stride, padding, dilation, groups, transposed=False, output_padding=None):
    x, xp, pad = _conv_parts(input, padding, nd, transposed)
    gb = _batched(g, nd)
    conf = (tuple(stride), pad, tuple(dilation), transposed,
            tuple(output_padding) if transposed else (0,) * nd, groups)
    gx, gw = conv_grads(gb, xp, weight, conf)
    if xp is not x:  # cut the padding off again
        pairs = _pad_pairs(padding, nd)
        start = (0, 0, *(lo for lo, _ in pairs))
        gx = prims.slice(gx, start, tuple(s + n for s, n in zip(start, x.shape)), (1,) * x.ndim)
    if gx.shape != input.shape:
        gx = prims.reshape(gx, tuple(input.shape))
    gbias = prims.sum(gb, (0, *range(2, gb.ndim))) if bias is not None else None
    return {"input": gx, "weight": gw, "bias": gbias}


def _channels_last(t):
    """Whether t's suggested memory format is channels-last (4-d, laid out so, not also
    contiguous), as ATen's suggest_memory_format decides it."""
    m = strided_meta(t)
    return t.ndim == 4 and m is not None and m.is_contiguous(memory_format=torch.channels_last) and \
        not m.is_contiguous()


def _conv_op(nd):
    name = f"conv{nd}d"

    def meta(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Dims = 1, padding: Dims = 0,
             dilation: Dims = 1, groups: Int = 1):
        shape = _conv_check(name, nd, input, weight, bias, stride, padding, dilation, groups)
        out = TensorProxy(shape, input.dtype, input.device)
        if nd == 2 and input.device.type == "cpu" and (_channels_last(input) or _channels_last(weight)):
            # eager's CPU kernels write channels-last for a channels-last input or weight (torch's
            # meta kernel says contiguous)
            out.meta = torch.empty(shape, dtype=input.dtype, device="meta", memory_format=torch.channels_last)
        return out

    meta.__name__ = name
    meta.__doc__ = (f"F.{name}. padding: {nd} ints, or (low, high) per dim for padding='same' with an even "
                    f"kernel extent.")
    fn = getattr(F, name)
    op = ltorch(f"impl.{name}", aliases=(fn, getattr(torch, name)))(meta)
    _normalizing(_normalize_conv(nd, transposed=False))(op)

    @op.decompose
    def _(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        meta(input, weight, bias, stride, padding, dilation, groups)
        return _conv_decomp(nd, input, weight, bias, stride, padding, dilation, groups)

    @op.vjp
    def _(g, out, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        return _conv_vjp(nd, g, input, weight, bias, stride, padding, dilation, groups)

    return op


conv1d = _conv_op(1)
conv2d = _conv_op(2)


@_normalizing(_normalize_conv(2, transposed=True))
@ltorch("torch.conv_transpose2d", aliases=(F.conv_transpose2d, torch.conv_transpose2d))
def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Dims = 1, padding: Dims = 0,
                     output_padding: Dims = 0, groups: Int = 1, dilation: Dims = 1):
    shape = _conv_check("conv_transpose2d", 2, input, weight, bias, stride, padding, dilation, groups,
                        transposed=True, output_padding=output_padding)
    return TensorProxy(shape, input.dtype, input.device)


@conv_transpose2d.decompose
def _(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    conv_transpose2d.meta(input, weight, bias, stride, padding, output_padding, groups, dilation)
    return _conv_decomp(2, input, weight, bias, stride, padding, dilation, groups, True, output_padding)


# --------------------------------------------------------------------------------------------
# Pooling


def _normalize_pool(name, has_dilation):
    def normalize(values):
        values["kernel_size"] = _ntuple(values["kernel_size"], 2, lambda v: RuntimeError(
            f"{name}: kernel_size must either be a single int, or a tuple of two ints"))
        stride = values["stride"]
        if stride is None or (_is_seq(stride) and len(stride) == 0):
            values["stride"] = values["kernel_size"]
        else:
            values["stride"] = _ntuple(stride, 2, lambda v: RuntimeError(
                f"{name}: stride must either be omitted, a single int, or a tuple of two ints"))
        values["padding"] = _ntuple(values["padding"], 2, lambda v: RuntimeError(
            f"{name}: padding must either be a single int, or a tuple of two ints"))
        if has_dilation:
            values["dilation"] = _ntuple(values["dilation"], 2, lambda v: RuntimeError(
                f"{name}: dilation must be either a single int, or a tuple of two ints"))

    return normalize


def _pool_check(input, kernel_size, stride, padding, dilation, ceil_mode):
    """The output shape of 2-d pooling, with torch's errors."""
    if input.ndim not in (3, 4) or any(s == 0 for s in input.shape[-3:]):
        raise RuntimeError("non-empty 3D or 4D (batch mode) tensor expected for input")
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    if kh <= 0 or kw <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kH: {kh} kW: {kw}")
    if sh <= 0 or sw <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got dH: {sh} dW: {sw}")
    if dh <= 0 or dw <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilationH: {dh} dilationW: {dw}")
    for p, k, d in ((ph, kh, dh), (pw, kw, dw)):
        if p < 0 or p > ((k - 1) * d + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p}, "
                               f"kernel_size={k} and dilation={d}")
    shape = prims._pool2d_shape(input, kernel_size, stride, padding, dilation, ceil_mode)
    c, h, w = input.shape[-3:]
    oh, ow = shape[-2:]
    if oh < 1 or ow < 1:
        raise RuntimeError(f"Given input size: ({c}x{h}x{w}). Calculated output size: ({c}x{oh}x{ow}). Output size "
                           f"is too small")
    return shape


def _as_4d(x):
    return x if x.ndim == 4 else prims.reshape(x, (1, *x.shape))


def _like(out, input):
    return out if input.ndim == 4 else prims.reshape(out, tuple(out.shape[1:]))


@_normalizing(_normalize_pool("max_pool2d", has_dilation=True))
@ltorch("torch.nn.functional.max_pool2d", aliases=(F.max_pool2d, torch.max_pool2d))
def max_pool2d(input: Tensor, kernel_size: Dims, stride: Dims | None = None, padding: Dims = 0, dilation: Dims = 1,
               ceil_mode: Bool = False, return_indices: Bool = False):
    """return_indices=True is not supported."""
    if return_indices:
        raise NotImplementedError("thunder: F.max_pool2d(return_indices=True) is not supported yet")
    shape = _pool_check(input, kernel_size, stride, padding, dilation, ceil_mode)
    return TensorProxy(shape, input.dtype, input.device)


@max_pool2d.decompose
def _(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    max_pool2d.meta(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)
    out, _ = prims.max_pool2d_with_indices(_as_4d(input), kernel_size, stride, padding, dilation, ceil_mode)
    return _like(out, input)


@max_pool2d.trains_as
def _(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    # as eager: the forward keeps the indices its pass found for the backward (recomputing them
    # there from the saved input was a second pass, as slow as the first)
    if input.ndim != 4:
        return None
    return prims.max_pool2d_with_indices, dict(input=input, kernel_size=kernel_size, stride=stride, padding=padding,
                                               dilation=dilation, ceil_mode=ceil_mode)


def _tiles(input, kernel_size, stride, padding):
    """Do the pooling windows tile the input exactly (no padding, no overlap, no remainder)?"""
    h, w = input.shape[-2:]
    return (tuple(kernel_size) == tuple(stride) and tuple(padding) == (0, 0)
            and h % kernel_size[0] == 0 and w % kernel_size[1] == 0)


def _tile_mean(x, kernel_size, divisor):
    """Sum over non-overlapping kh x kw windows of x (..., H, W), divided by divisor."""
    kh, kw = kernel_size
    *lead, h, w = x.shape
    n = len(lead)
    cdt = opmath_dtype(x.dtype)
    xs = prims.reshape(to_dtype(x, cdt), (*lead, h // kh, kh, w // kw, kw))
    s = prims.sum(xs, (n + 1, n + 3))
    return to_dtype(prims.div(s, float(divisor)), x.dtype)


@_normalizing(_normalize_pool("avg_pool2d", has_dilation=False))
@ltorch("torch.nn.functional.avg_pool2d", aliases=(F.avg_pool2d,))
def avg_pool2d(input: Tensor, kernel_size: Dims, stride: Dims | None = None, padding: Dims = 0,
               ceil_mode: Bool = False, count_include_pad: Bool = True, divisor_override: Int | None = None):
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    shape = _pool_check(input, kernel_size, stride, padding, (1, 1), ceil_mode)
    return TensorProxy(shape, input.dtype, input.device)


@avg_pool2d.decompose
def _(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    avg_pool2d.meta(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    if _tiles(input, kernel_size, stride, padding):
        return _tile_mean(input, kernel_size, divisor_override or kernel_size[0] * kernel_size[1])
    out = prims.avg_pool2d(_as_4d(input), kernel_size, stride, padding, ceil_mode, count_include_pad,
                           divisor_override)
    return _like(out, input)


def _normalize_adaptive(values):
    size, input = values["output_size"], values["input"]
    if isinstance(size, int) and not isinstance(size, bool) or size is None:
        size = (size, size)
    if not _is_seq(size) or len(size) != 2:
        raise RuntimeError("adaptive_avg_pool2d: output_size must be 2")
    if is_tensor(input) and input.ndim >= 2:
        size = tuple(input.shape[-2 + i] if s is None else s for i, s in enumerate(size))
    values["output_size"] = tuple(size)


@_normalizing(_normalize_adaptive)
@ltorch("torch.nn.functional.adaptive_avg_pool2d", aliases=(F.adaptive_avg_pool2d,))
def adaptive_avg_pool2d(input: Tensor, output_size: Ints):
    """output_size: an int, or two ints or None (the input's size)."""
    if len(output_size) != 2:
        raise RuntimeError("adaptive_avg_pool2d: output_size must be 2")
    if any(s < 0 for s in output_size):
        raise RuntimeError(f"adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 but "
                           f"received {{{output_size[0]}, {output_size[1]}}}")
    if input.ndim not in (3, 4) or any(s == 0 for s in input.shape[-3 if input.ndim == 3 else 1:]):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {_shape_str(input)}")
    return TensorProxy((*input.shape[:-2], *output_size), input.dtype, input.device)


@adaptive_avg_pool2d.decompose
def _(input, output_size):
    adaptive_avg_pool2d.meta(input, output_size)
    (h, w), (oh, ow) = input.shape[-2:], output_size
    if oh > 0 and ow > 0 and h % oh == 0 and w % ow == 0 and input.numel() > 0:
        k = (h // oh, w // ow)
        return _tile_mean(input, k, k[0] * k[1])
    return _like(prims.adaptive_avg_pool2d(_as_4d(input), tuple(output_size)), input)


# --------------------------------------------------------------------------------------------
# bilinear


def _bilinear_check(input1, input2, weight, bias):
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.ndim} and {input2.ndim}")
    for i in range(input1.ndim - 1):
        if input1.shape[i] != input2.shape[i]:
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {i}: got {input1.shape[i]} "
                               f"and {input2.shape[i]}")
    if weight.ndim != 3:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-weight.ndim}, {weight.ndim - 1}], "
                         f"but got 2)")
    if input1.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"bilinear(): input1 size does not match weight size: got {input1.shape[-1]} but "
                           f"expected {weight.shape[1]}")
    if input2.shape[-1] != weight.shape[2]:
        raise RuntimeError(f"bilinear(): input2 size does not match weight size: got {input2.shape[-1]} but "
                           f"expected {weight.shape[2]}")
    if bias is not None and bias.shape[-1] != weight.shape[0]:
        raise RuntimeError(f"bilinear(): bias size does not match weight size: got {bias.shape[-1]} but expected "
                           f"{weight.shape[0]}")
    if not input1.dtype == input2.dtype == weight.dtype or (bias is not None and bias.dtype != weight.dtype):
        raise RuntimeError("expected scalar type of the bilinear inputs, weight and bias to be the same")
    return (*input1.shape[:-1], weight.shape[0])


@ltorch("torch.bilinear", aliases=(F.bilinear, torch.bilinear))
def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None):
    """out[..., o] = sum_ij input1[..., i] weight[o, i, j] input2[..., j] + bias[o]."""
    return TensorProxy(_bilinear_check(input1, input2, weight, bias), input1.dtype, input1.device)


def _flat(x):
    """x (*batch, k) as (B, k)."""
    b = math.prod(x.shape[:-1])
    return x if x.ndim == 2 else prims.reshape(x, (b, x.shape[-1]))


@bilinear.decompose
def _(input1, input2, weight, bias=None):
    shape = _bilinear_check(input1, input2, weight, bias)
    o, i, j = weight.shape
    x1, x2 = _flat(input1), _flat(input2)
    b = x1.shape[0]
    w = prims.reshape(prims.transpose(weight, (1, 0, 2)), (i, o * j))
    t = prims.reshape(prims.matmul(x1, w), (b, o, j))  # sum_i x1[b, i] W[o, i, j]
    out = prims.reshape(prims.matmul(t, prims.reshape(x2, (b, j, 1))), (b, o))
    if bias is not None:
        out = prims.add(out, expand_to(bias, out.shape))
    return prims.reshape(out, shape) if tuple(out.shape) != shape else out
