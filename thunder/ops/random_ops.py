"""Random ltorch ops: torch.rand, randn, randint, rand_like, randn_like, randint_like, bernoulli, normal.

All are random=True: not Pure, so CSE never merges two draws and DCE keeps them. The torch executor
calls the very torch function the program called, with torch's global generator, so after
torch.manual_seed(s) a jitted program draws the same values as eager does (for the same calls in
the same order). Their decompositions into thunder prims (uniform draws) give values of the right
distribution, shape and dtype but not eager's stream.

Every op has a VJP rule so that thunder-autograd keeps it (and eager's stream) instead of
decomposing it. As in eager: rand_like/randn_like/randint_like give their input no gradient;
bernoulli and normal give zeros (torch does not reparameterize torch.normal).

`generator=` (a torch.Generator other than the global one) is refused with NotImplementedError."""
import math

import torch

from thunder.core import dtypes
from thunder.core.proxies import TensorProxy, meta_of, strided_meta
from thunder.ops import prims
from thunder.ops.decomp_utils import as_tensor, expand_to, opmath_dtype, to_dtype
from thunder.ops.meta_utils import broadcast_shapes, device_of, is_tensor
from thunder.ops.registry import (Bool, DType, Device, Float, Int, Ints, MemoryFormat, OpDef, Tensor, TensorOrNumber,
                                  _is_int, ltorch)

# --------------------------------------------------------------------------------------------
# Shared pieces


def _device(device):
    return dtypes.device_or_default(device)


def _dtype_name(dtype):
    return {torch.bool: "Bool", torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short",
            torch.int32: "Int", torch.int64: "Long", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.float32: "Float", torch.float64: "Double"}.get(dtype, str(dtype))


def _check_size(size):
    if any(s < 0 for s in size):
        bad = next(s for s in size if s < 0)
        raise RuntimeError(f"Trying to create tensor with negative dimension {bad}: {list(size)}")


def _require_float(kernel, dtype):
    """torch's error for a floating-point-only sampler asked for another dtype."""
    if not dtype.is_floating_point:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{_dtype_name(dtype)}\'')


class _RandomOp(OpDef):
    """bind: refuses generator=...; randint/randint_like also take (high,) for (0, high)."""

    low_high = False  # randint's overloads: the first int given alone is `high`

    def bind(self, args, kwargs):
        kwargs = dict(kwargs)
        if kwargs.pop("generator", None) is not None:
            raise NotImplementedError(
                f"thunder: {self.torch_name}(generator=...) is not supported (only torch's global generator is). "
                "Workaround: seed the global generator with torch.manual_seed and leave out generator=")
        if self.low_high and "low" not in kwargs:
            first = 1 if self.params[0].name == "input" else 0  # randint_like's input comes first
            ints = 0
            for a in args[first:]:
                if not _is_int(a):
                    break
                ints += 1
            if ints + ("high" in kwargs) == 1:
                if ints:
                    args = (*args[:first], 0, *args[first:])
                else:
                    kwargs["low"] = 0
        return super().bind(tuple(args), kwargs)


def _random(torch_name, *, low_high=False, **kw):
    def decorator(meta):
        op = ltorch(torch_name, random=True, **kw)(meta)
        op.__class__ = type(f"_{op.name.capitalize()}Op", (_RandomOp,), {"low_high": low_high})
        return op

    return decorator


def _uniform(shape, dtype, device, low=0.0, high=1.0):
    return prims.uniform(tuple(shape), float(low), float(high), dtype=dtype, device=device)


def _standard_normal(shape, dtype, device):
    """Box-Muller from two uniform draws: sqrt(-2 log(1 - u1)) * cos(2 pi u2), in dtype (a float dtype)."""
    u1 = _uniform(shape, dtype, device)
    u2 = _uniform(shape, dtype, device)
    r = prims.sqrt(prims.mul(prims.log1p(prims.neg(u1)), -2.0))  # u1 in [0, 1): log(1 - u1) is finite
    return prims.mul(r, prims.cos(prims.mul(u2, 2 * math.pi)))


def _randint_values(shape, low, high, dtype, device):
    """floor(uniform(low, high)) drawn in float64 (clamped to high - 1 against rounding up), in dtype."""
    f = prims.floor(_uniform(shape, torch.float64, device, low, high))
    f = prims.minimum(f, as_tensor(float(high - 1), f))
    return to_dtype(f, dtype)


def _check_low_high(low, high):
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")


# --------------------------------------------------------------------------------------------
# rand, randn, randint


@_random("torch.rand", varargs="size", aliases=(torch.rand,))
def rand(size: Ints, *, dtype: DType | None = None, device: Device | None = None, requires_grad: Bool = False):
    """torch.rand(*size): uniform on [0, 1). Decomposes into thunder.uniform (a draw of the same
    distribution, not eager's stream)."""
    _check_size(size)
    dtype = dtype or dtypes.default_dtype()
    _require_float("check_uniform_bounds", dtype)
    return TensorProxy(size, dtype, _device(device), requires_grad)


@rand.decompose
def _(size, *, dtype=None, device=None, requires_grad=False):
    return _uniform(size, dtype or dtypes.default_dtype(), _device(device))


@_random("torch.randn", varargs="size", aliases=(torch.randn,))
def randn(size: Ints, *, dtype: DType | None = None, device: Device | None = None, requires_grad: Bool = False):
    """torch.randn(*size): standard normal. Decomposes into Box-Muller over two thunder.uniform
    draws (computed in float32 for float16/bfloat16; the same distribution, not eager's stream)."""
    _check_size(size)
    dtype = dtype or dtypes.default_dtype()
    _require_float("normal_kernel_cpu", dtype)
    return TensorProxy(size, dtype, _device(device), requires_grad)


@randn.decompose
def _(size, *, dtype=None, device=None, requires_grad=False):
    dtype = dtype or dtypes.default_dtype()
    return to_dtype(_standard_normal(size, opmath_dtype(dtype), _device(device)), dtype)


@_random("torch.randint", low_high=True, aliases=(torch.randint,))
def randint(low: Int, high: Int, size: Ints, *, dtype: DType | None = None, device: Device | None = None,
            requires_grad: Bool = False):
    """torch.randint(high, size) and torch.randint(low, high, size): integers in [low, high)
    (int64 unless dtype says otherwise); runs as torch.randint(low, high, size), which draws the
    same values as the (high, size) form. Decomposes into floor(thunder.uniform(low, high)) drawn
    in float64 (the same distribution, not eager's stream)."""
    _check_size(size)
    _check_low_high(low, high)
    return TensorProxy(size, dtype or torch.int64, _device(device), requires_grad)


@randint.decompose
def _(low, high, size, *, dtype=None, device=None, requires_grad=False):
    return _randint_values(size, low, high, dtype or torch.int64, _device(device))


# --------------------------------------------------------------------------------------------
# rand_like, randn_like, randint_like


def _like_out(input, dtype, device, requires_grad, memory_format=None):
    out = TensorProxy(input.shape, dtype or input.dtype, _device(device) if device is not None else input.device,
                      requires_grad)
    # eager's strides (preserve_format's rule by default): random ops are not run on meta tensors
    # (a contiguous input's: contiguous, no meta tensor)
    fmt = memory_format or torch.preserve_format
    if fmt is not torch.contiguous_format and (fmt is not torch.preserve_format or strided_meta(input) is not None):
        out.meta = torch.empty_like(meta_of(input), dtype=out.dtype, device="meta", memory_format=fmt)
    return out


@_random("torch.rand_like", aliases=(torch.rand_like,), differentiable=False)
def rand_like(input: Tensor, *, dtype: DType | None = None, device: Device | None = None,
              requires_grad: Bool = False, memory_format: MemoryFormat | None = None):
    """torch.rand_like(input): uniform on [0, 1) of input's shape (and dtype, device unless given).
    Decomposes into thunder.uniform (not eager's stream)."""
    out = _like_out(input, dtype, device, requires_grad, memory_format)
    _require_float("check_uniform_bounds", out.dtype)
    return out


@rand_like.decompose
def _(input, *, dtype=None, device=None, requires_grad=False, memory_format=None):
    out = _like_out(input, dtype, device, requires_grad)
    return _uniform(out.shape, out.dtype, out.device)


@_random("torch.randn_like", aliases=(torch.randn_like,), differentiable=False)
def randn_like(input: Tensor, *, dtype: DType | None = None, device: Device | None = None,
               requires_grad: Bool = False, memory_format: MemoryFormat | None = None):
    """torch.randn_like(input): standard normal of input's shape. Decomposes into Box-Muller over
    two thunder.uniform draws (not eager's stream)."""
    out = _like_out(input, dtype, device, requires_grad, memory_format)
    _require_float("normal_kernel_cpu", out.dtype)
    return out


@randn_like.decompose
def _(input, *, dtype=None, device=None, requires_grad=False, memory_format=None):
    out = _like_out(input, dtype, device, requires_grad)
    return to_dtype(_standard_normal(out.shape, opmath_dtype(out.dtype), out.device), out.dtype)


@_random("torch.randint_like", low_high=True, aliases=(torch.randint_like,), differentiable=False)
def randint_like(input: Tensor, low: Int, high: Int, *, dtype: DType | None = None, device: Device | None = None,
                 requires_grad: Bool = False, memory_format: MemoryFormat | None = None):
    """torch.randint_like(input, high) and (input, low, high): integers in [low, high) in input's
    shape and dtype. Decomposes into floor(thunder.uniform(low, high)) (not eager's stream)."""
    _check_low_high(low, high)
    return _like_out(input, dtype, device, requires_grad, memory_format)


@randint_like.decompose
def _(input, low, high, *, dtype=None, device=None, requires_grad=False, memory_format=None):
    out = _like_out(input, dtype, device, requires_grad)
    return _randint_values(out.shape, low, high, out.dtype, out.device)


# --------------------------------------------------------------------------------------------
# bernoulli, normal


@_random("impl.bernoulli", aliases=(torch.bernoulli,), differentiable=False)
def bernoulli(input: Tensor, p: Float | None = None):
    """torch.bernoulli(input): 1 with probability input[i], else 0, in input's dtype;
    torch.bernoulli(input, p): with probability p. The gradient is zeros (as eager's). Decomposes
    into thunder.uniform(0, 1) < p (not eager's stream). Tensor.bernoulli and bernoulli_ are not
    registered (bernoulli_() means p=0.5, unlike bernoulli())."""
    if p is None:
        _require_float("bernoulli_tensor_cpu_p_", input.dtype)
    elif not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    return TensorProxy(input.shape, input.dtype, input.device)


@bernoulli.decompose
def _(input, p=None):
    cdt = opmath_dtype(input.dtype) if input.dtype.is_floating_point else torch.float64
    u = _uniform(input.shape, cdt, input.device)
    keep = prims.lt(u, to_dtype(input, cdt) if p is None else float(p))
    return to_dtype(keep, input.dtype)


def _normal_out(mean, std, size, dtype, device, requires_grad):
    tensors = [a for a in (mean, std) if is_tensor(a)]
    if not tensors:
        if size is None:
            raise TypeError("normal() received an invalid combination of arguments: two numbers need a size")
        if std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        _check_size(size)
        out = TensorProxy(size, dtype or dtypes.default_dtype(), _device(device), requires_grad)
    else:
        if size is not None or dtype is not None or device is not None or requires_grad:
            raise TypeError("normal() received an invalid combination of arguments: size, dtype, device and "
                            "requires_grad go with a float mean and std only")
        if not is_tensor(std) and std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        shape = broadcast_shapes(*(t.shape for t in tensors))
        out = TensorProxy(shape, tensors[0].dtype, device_of(mean, std))
    _require_float("normal_kernel_cpu", out.dtype)
    return out


@_random("impl.normal", aliases=(torch.normal,))
def normal(mean: TensorOrNumber, std: TensorOrNumber = 1.0, size: Ints | None = None, *, dtype: DType | None = None,
           device: Device | None = None, requires_grad: Bool = False):
    """torch.normal(mean, std) with tensor mean and/or std (broadcast; the dtype of mean, else of
    std), and torch.normal(mean, std, size) with numbers. As in eager, the gradient to a tensor
    mean/std is zeros (no reparameterization). Decomposes into mean + std * Box-Muller (not eager's
    stream)."""
    return _normal_out(mean, std, size, dtype, device, requires_grad)


@normal.decompose
def _(mean, std=1.0, size=None, *, dtype=None, device=None, requires_grad=False):
    out = _normal_out(mean, std, size, dtype, device, requires_grad)
    cdt = opmath_dtype(out.dtype)
    z = _standard_normal(out.shape, cdt, out.device)
    m, s = (expand_to(to_dtype(v, cdt), out.shape) for v in (mean, std))
    return to_dtype(prims.add(prims.mul(z, s), m), out.dtype)


# --------------------------------------------------------------------------------------------
# torch.manual_seed inside the jitted function: recorded, so every call seeds (as eager does)
# rather than only the call that traced


class _SeedOp(OpDef):
    """torch.manual_seed(seed) returns torch's default generator, as eager's does."""

    def __call__(self, *args, **kwargs):
        super().__call__(*args, **kwargs)
        return torch.default_generator


@ltorch("torch.manual_seed", aliases=(torch.manual_seed,), random=True, returns_sequence=True,
        differentiable=False)
def manual_seed(seed: Int):
    """Seeds torch's random generators (CPU and CUDA) with seed, in program order with the random
    ops around it (not Pure)."""
    if not -0x8000_0000_0000_0000 <= seed <= 0xFFFF_FFFF_FFFF_FFFF:
        raise ValueError("Overflow when unpacking long long")
    return ()


manual_seed.__class__ = _SeedOp
manual_seed.python = lambda values, outs: [f"torch.manual_seed({values['seed']!r})"]
