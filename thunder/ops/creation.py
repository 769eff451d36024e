"""Creation ltorch ops (zeros, ones, full, arange, *_like) and dtype/device conversions."""
import math
import sys

import torch

from thunder.core import dtypes, trace as tracing
from thunder.core.numbers import has_proxy
from thunder.core.proxies import TensorProxy
from thunder.core.trace import NotDecomposable
from thunder.ops import prims
from thunder.ops.decomp_utils import to_dtype
from thunder.ops.meta_utils import is_tensor
from thunder.ops.registry import Bool, Data, DType, Device, Ints, MemoryFormat, Number, OpDef, Str, Tensor, ltorch
from thunder.core.numbers import example
from thunder.ops.grad import detach
from thunder.ops.join_split import stack


def _device(device):
    return dtypes.device_or_default(device)


def _fill(value, dtype):
    return bool(value) if dtype is torch.bool else to_dtype(value, dtype)


def _full(shape, value, dtype, device):
    return prims.full(tuple(shape), _fill(value, dtype), dtype=dtype, device=_device(device))


def _check_size(name, size):
    if any(s < 0 for s in size):
        raise RuntimeError(f"{name}: Dimension size must be non-negative.")


def _number_dtype(value):
    """The dtype torch.full infers from its fill value."""
    return torch.bool if isinstance(value, bool) else torch.int64 if isinstance(value, int) else dtypes.default_dtype()


# --------------------------------------------------------------------------------------------
# zeros, ones, full


def _constant(name, value):
    def meta(size: Ints, *, dtype: DType | None = None, device: Device | None = None, requires_grad: Bool = False):
        _check_size(name, size)
        return TensorProxy(size, dtype or dtypes.default_dtype(), _device(device), requires_grad)

    def decomposition(size, *, dtype=None, device=None, requires_grad=False):
        return _full(size, value, dtype or dtypes.default_dtype(), device)

    meta.__name__ = name
    op = ltorch(f"torch.{name}", varargs="size", aliases=(getattr(torch, name),))(meta)
    op.decompose(decomposition)
    return op


zeros = _constant("zeros", 0)
ones = _constant("ones", 1)


@ltorch("torch.full", aliases=(torch.full,))
def full(size: Ints, fill_value: Number, *, dtype: DType | None = None, device: Device | None = None,
         requires_grad: Bool = False):
    _check_size("full", size)
    return TensorProxy(size, dtype or _number_dtype(fill_value), _device(device), requires_grad)


@full.decompose
def _(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    return _full(size, fill_value, dtype or _number_dtype(fill_value), device)


def _like(name, value):
    def meta(input: Tensor, *, dtype: DType | None = None, device: Device | None = None, requires_grad: Bool = False,
             memory_format: MemoryFormat | None = None):
        return TensorProxy(input.shape, dtype or input.dtype, device or input.device, requires_grad)

    def decomposition(input, *, dtype=None, device=None, requires_grad=False, memory_format=None):
        return _full(input.shape, value, dtype or input.dtype, device or input.device)

    meta.__name__ = name
    op = ltorch(f"torch.{name}", aliases=(getattr(torch, name),), differentiable=False)(meta)
    op.decompose(decomposition)
    return op


zeros_like = _like("zeros_like", 0)
ones_like = _like("ones_like", 1)


@ltorch("torch.full_like", aliases=(torch.full_like,), differentiable=False)
def full_like(input: Tensor, fill_value: Number, *, dtype: DType | None = None, device: Device | None = None,
              requires_grad: Bool = False, memory_format: MemoryFormat | None = None):
    return TensorProxy(input.shape, dtype or input.dtype, device or input.device, requires_grad)


@full_like.decompose
def _(input, fill_value, *, dtype=None, device=None, requires_grad=False, memory_format=None):
    return _full(input.shape, fill_value, dtype or input.dtype, device or input.device)


# --------------------------------------------------------------------------------------------
# Tensor.new_zeros, new_ones, new_full, new_empty: input's dtype and device unless given


def _new(name, value):
    def meta(input: Tensor, size: Ints, *, dtype: DType | None = None, device: Device | None = None,
             requires_grad: Bool = False):
        _check_size(name, size)
        return TensorProxy(size, dtype or input.dtype, device or input.device, requires_grad)

    def decomposition(input, size, *, dtype=None, device=None, requires_grad=False):
        return _full(size, value, dtype or input.dtype, device or input.device)

    meta.__name__ = name
    meta.__doc__ = f"x.{name}(size): values {value}" + (" (eager leaves them undefined)" if name == "new_empty" else "")
    op = ltorch(f"torch.Tensor.{name}", methods=(name,), varargs="size", aliases=(getattr(torch.Tensor, name),),
                differentiable=False)(meta)
    op.decompose(decomposition)
    return op


new_zeros = _new("new_zeros", 0)
new_ones = _new("new_ones", 1)
new_empty = _new("new_empty", 0)


@ltorch("torch.Tensor.new_full", methods=("new_full",), aliases=(torch.Tensor.new_full,), differentiable=False)
def new_full(input: Tensor, size: Ints, fill_value: Number, *, dtype: DType | None = None,
             device: Device | None = None, requires_grad: Bool = False):
    _check_size("new_full", size)
    return TensorProxy(size, dtype or input.dtype, device or input.device, requires_grad)


@new_full.decompose
def _(input, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    return _full(size, fill_value, dtype or input.dtype, device or input.device)


# --------------------------------------------------------------------------------------------
# torch.tensor and Tensor.new_tensor: tensors of constant data (tensors in the data are stacked)


def _data_shape(data):
    """The shape torch.tensor gives data: sizes along the first elements, every element checked."""
    shape, x = [], data
    while isinstance(x, (tuple, list)):
        shape.append(len(x))
        if not x:
            break
        x = x[0]

    def check(x, dim):
        if dim == len(shape):
            if isinstance(x, (tuple, list)):
                raise TypeError(f"'{type(x).__name__}' object cannot be interpreted as a number")
            return
        if not isinstance(x, (tuple, list)):
            raise TypeError("not a sequence")
        if len(x) != shape[dim]:
            raise ValueError(f"expected sequence of length {shape[dim]} at dim {dim} (got {len(x)})")
        for y in x:
            check(y, dim + 1)

    check(data, 0)
    return tuple(shape)


def _data_dtype(data):
    """torch.tensor's inference: float if any float, else int64 if any int, else bool."""
    leaves = []

    def walk(x):
        if isinstance(x, (tuple, list)):
            for y in x:
                walk(y)
        else:
            leaves.append(x)

    walk(data)
    if not leaves or any(isinstance(x, float) for x in leaves):
        return torch.get_default_dtype()
    if all(isinstance(x, bool) for x in leaves):
        return torch.bool
    return torch.int64


def _is_any_tensor(x):
    return isinstance(x, (TensorProxy, torch.Tensor))  # real tensors when called eagerly


def _has_tensor(data):
    return _is_any_tensor(data) or isinstance(data, (tuple, list)) and any(_has_tensor(x) for x in data)


def _is_array(data):
    numpy = sys.modules.get("numpy")  # (no array without numpy imported)
    return numpy is not None and type(data) is numpy.ndarray


def _as_tuples(data):
    return tuple(_as_tuples(x) for x in data) if isinstance(data, (tuple, list)) else data


class _TensorOp(OpDef):
    """Data holding tensors (torch.tensor(t), torch.tensor([t0, t1])) is a copy of them cut off
    from autograd, as in eager: recorded as clone/detach/stack instead of constant data."""

    def __call__(self, *args, **kwargs):
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            bound = None  # bind reports it
        if bound is not None and _is_array(bound.arguments["data"]):
            # (an array made natively, a constant of the trace: BigBird's random blocks from np.random)
            values = dict(bound.arguments)
            array = values["data"]
            values["data"] = array.tolist()
            if self.name == "tensor" and values.get("dtype") is None:
                values["dtype"] = torch.from_numpy(sys.modules["numpy"].empty(0, array.dtype)).dtype  # (as eager)
            return super().__call__(**values)
        if bound is not None and _has_tensor(bound.arguments["data"]):
            return _copy_of_tensors(self, bound.arguments)
        if bound is not None and has_proxy(bound.arguments["data"]) and (
                not bound.arguments.get("requires_grad") or not isinstance(bound.arguments["data"], (tuple, list))):
            return _tensor_of_runtime_numbers(self, bound.arguments)
        return super().__call__(*args, **kwargs)


def _tensor_of_runtime_numbers(op, args):
    """torch.tensor(t.item()), torch.tensor([a, b]) with runtime numbers (core/numbers.py): one
    full((), n) per element, stacked, so the values stay runtime values (no split). (A list with
    requires_grad=True is a leaf in eager: its numbers are read instead.)"""
    def examples(x):
        return [examples(y) for y in x] if isinstance(x, (tuple, list)) else example(x)

    data = args["data"]
    _data_shape(_as_tuples(examples(data)))  # (eager's errors for ragged data)
    dtype, device = args.get("dtype"), args.get("device")
    if op.name == "new_tensor":
        dtype, device = dtype or args["input"].dtype, device or args["input"].device
    dtype = dtype or _data_dtype(examples(data))

    def build(x):
        if isinstance(x, (tuple, list)):
            return stack([build(y) for y in x])
        return full((), x, dtype=dtype, device=device, requires_grad=bool(args.get("requires_grad")))

    return build(data)


def _copy_of_tensors(op, args):
    def build(x):
        if _is_any_tensor(x):
            return detach(clone(x))
        if isinstance(x, (tuple, list)) and x:
            return stack([build(y) for y in x])
        raise NotImplementedError(f"thunder: {op.torch_name} of data mixing tensors with numbers or empty "
                                  "lists. Workaround: torch.stack the tensors")

    dtype, device = args.get("dtype"), args.get("device")
    if op.name == "new_tensor":
        dtype, device = dtype or args["input"].dtype, device or args["input"].device
    out = build(args["data"])
    if dtype is not None and dtype != out.dtype or device is not None and _device(device) != out.device:
        out = to(out, dtype, device=device)
    return out


def _normalize_data(values):
    values["data"] = _as_tuples(values["data"])


@ltorch("torch.tensor", aliases=(torch.tensor,))
def tensor(data: Data, *, dtype: DType | None = None, device: Device | None = None, requires_grad: Bool = False):
    """A tensor of constant data (numbers, nested tuples of numbers)."""
    return TensorProxy(_data_shape(data), dtype or _data_dtype(data), _device(device), requires_grad)


@ltorch("torch.Tensor.new_tensor", methods=("new_tensor",), aliases=(torch.Tensor.new_tensor,), differentiable=False)
def new_tensor(input: Tensor, data: Data, *, dtype: DType | None = None, device: Device | None = None,
               requires_grad: Bool = False):
    """torch.tensor(data) with input's dtype and device unless given."""
    return TensorProxy(_data_shape(data), dtype or input.dtype, device or input.device, requires_grad)


for _op in (tensor, new_tensor):
    _op.__class__ = _TensorOp
    _op.normalize = _normalize_data


# --------------------------------------------------------------------------------------------
# arange


def _arange_args(start, end, step, dtype):
    """(start, end, step, dtype, length) as torch computes them."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        floats = any(isinstance(v, float) for v in (start, end, step))
        dtype = dtypes.default_dtype() if floats else torch.int64
    if not (dtype.is_floating_point or dtype.is_complex):  # integer arange works on truncated bounds
        # (int() of a symbolic size would drop its expression, core/symbols.py)
        start, end, step = (v if type(v) is not bool and isinstance(v, int) else int(v) for v in (start, end, step))
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if step > 0 and end < start or step < 0 and end > start:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    length = math.ceil((end - start) / step)  # in double, as torch
    return start, end, step, dtype, length


@ltorch("impl.arange", aliases=(torch.arange,), static_numbers=("start", "end", "step"))
def arange(start: Number = 0, end: Number | None = None, step: Number = 1, *, dtype: DType | None = None,
           device: Device | None = None, requires_grad: Bool = False):
    """torch.arange(end), torch.arange(start, end, step=1)."""
    *_, dtype, length = _arange_args(start, end, step, dtype)
    return TensorProxy((length,), dtype, _device(device), requires_grad)


@arange.decompose
def _(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    start, end, step, dtype, length = _arange_args(start, end, step, dtype)
    device = _device(device)
    if not dtype.is_floating_point:
        return prims.iota(length, start=start, step=step, dtype=dtype, device=device)
    # as torch: start + i * step computed in double, then rounded to dtype
    i = prims.iota(length, start=0, step=1, dtype=torch.float64, device=device)
    return to_dtype(prims.add(prims.mul(i, float(step)), float(start)), dtype)


# --------------------------------------------------------------------------------------------
# Conversions: Tensor.to, Tensor.type, Tensor.float() and friends


def _converted(input, dtype, device=None, copy=False, memory_format=None):
    out = TensorProxy(input.shape, dtype or input.dtype, _device(device) if device is not None else input.device)
    laid_out = memory_format in (None, torch.preserve_format) or (
        tracing.strides_known() and input.is_contiguous(memory_format=memory_format))
    if not copy and out.dtype == input.dtype and out.device == input.device and laid_out:
        # eager returns the input itself (`x.float() is x`; under no_grad it keeps x's autograd
        # history): record_op passes it through unrecorded
        return input
    return out


def _convert(input, dtype, device=None):
    if device is not None and _device(device) != input.device:
        raise NotDecomposable("thunder: no prim moves tensors between devices")
    return to_dtype(input, dtype or input.dtype)


class _ToOp(OpDef):
    """Tensor.to's overloads: to(dtype), to(device, dtype=None), to(other): positional devices
    and tensors become the device/dtype keywords before binding."""

    def bind(self, args, kwargs):
        if not args:  # all keywords (a view regenerated from its recipe after an in-place update)
            return super().bind(args, kwargs)
        input, *rest = args
        kwargs = dict(kwargs)
        if rest and isinstance(rest[0], (str, torch.device)):
            kwargs["device"] = rest.pop(0)
            if rest and isinstance(rest[0], torch.dtype):
                kwargs["dtype"] = rest.pop(0)
        elif rest and is_tensor(rest[0]) or isinstance(kwargs.get("other"), TensorProxy):
            other = rest.pop(0) if rest and is_tensor(rest[0]) else kwargs.pop("other")
            kwargs.update(dtype=other.dtype, device=other.device)
        return super().bind((input, *rest), kwargs)


@ltorch("impl.to", methods=("to",), aliases=(torch.Tensor.to,))
def to(input: Tensor, dtype: DType | None = None, non_blocking: Bool = False, copy: Bool = False, *,
       device: Device | None = None, memory_format: MemoryFormat | None = None):
    """x.to(dtype), x.to(device, dtype), x.to(other), x.to(dtype=..., device=...), and
    memory_format= (eager's strides; the input itself when it already has that layout)."""
    return _converted(input, dtype, device, copy, memory_format)


@to.decompose
def _(input, dtype=None, non_blocking=False, copy=False, *, device=None, memory_format=None):
    return _convert(input, dtype, device)


to.__class__ = _ToOp


@ltorch("torch.Tensor.type", methods=("type",), aliases=(torch.Tensor.type,))
def type_(input: Tensor, dtype: DType):
    """x.type(dtype) (a dtype only: type names and x.type() are not supported)."""
    return _converted(input, dtype)


@type_.decompose
def _(input, dtype):
    return _convert(input, dtype)


def _conversion(name, dtype):
    def meta(input: Tensor):
        return _converted(input, dtype)

    meta.__name__ = name
    meta.__doc__ = f"x.{name}(): x.to({dtype})"
    op = ltorch(f"torch.Tensor.{name}", methods=(name,), aliases=(getattr(torch.Tensor, name),), name=name)(meta)
    op.decompose(lambda input: _convert(input, dtype))
    return op


to_float = _conversion("float", torch.float32)
to_double = _conversion("double", torch.float64)
to_half = _conversion("half", torch.float16)
to_bfloat16 = _conversion("bfloat16", torch.bfloat16)
to_long = _conversion("long", torch.int64)
to_int = _conversion("int", torch.int32)
to_short = _conversion("short", torch.int16)
to_byte = _conversion("byte", torch.uint8)
to_bool = _conversion("bool", torch.bool)
for _op in (to, type_, to_float, to_double, to_half, to_bfloat16, to_long, to_int, to_short, to_byte, to_bool):
    _op.returns_input = True  # (_converted: to the input's dtype, device and layout)


@ltorch("torch.clone", methods=("clone",), aliases=(torch.clone, torch.Tensor.clone))
def clone(input: Tensor, *, memory_format: MemoryFormat | None = None):
    """A copy: in-place updates of the clone never reach the original (it is not a view);
    memory_format: eager's strides (preserve_format's rule by default)."""
    return TensorProxy(input.shape, input.dtype, input.device)


@clone.decompose
def _(input, *, memory_format=None):
    # a fresh tensor with the same values: x + 0 in x's dtype (bool: x | False)
    if input.dtype is torch.bool:
        return prims.bitwise_or(input, False)
    return prims.add(input, 0.0 if input.dtype.is_floating_point or input.dtype.is_complex else 0)
