"""Primitives (dialect `thunder`): the small set ltorch ops decompose into.

Prims are strict: elementwise prims take tensors of one shape and dtype (or numbers), so
decompositions make broadcasting (broadcast_in_dim) and type promotion (convert_element_type)
explicit. Reductions take a tuple of dims and no keepdim."""
import builtins
import math

import torch

from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.ops.meta_utils import canonical_dims, device_of, is_tensor
from thunder.ops.registry import DType, Device, Float, Int, Ints, Number, Tensor, TensorOrNumber, Tensors, prim


def _same_shape(*args):
    shapes = {tuple(a.shape) for a in args if is_tensor(a)}
    if len(shapes) > 1:
        raise ValueError(f"prims take tensors of one shape, got {sorted(shapes)}")
    return shapes.pop()


ELEMENTWISE = set()  # the elementwise prims (_unary, _binary), by name (runtime/batching.py)


def _unary(torch_name, name, *, to_bool=False, to_real=False):
    def meta(a: Tensor):
        return TensorProxy(a.shape, torch.bool if to_bool else dtypes.real_dtype(a.dtype) if to_real else a.dtype,
                           a.device)

    meta.__name__ = name
    ELEMENTWISE.add(name)
    return prim(torch_name)(meta)


def _binary(torch_name, name, *, to_bool=False):
    def meta(a: TensorOrNumber, b: TensorOrNumber):
        shape = _same_shape(a, b)
        tensors = [x for x in (a, b) if is_tensor(x)]
        if not tensors:
            raise ValueError("a binary prim needs at least one tensor")
        dts = {t.dtype for t in tensors}
        if len(dts) > 1:
            raise ValueError(f"prims take tensors of one dtype, got {sorted(map(str, dts))}")
        return TensorProxy(shape, torch.bool if to_bool else tensors[0].dtype, device_of(a, b))

    meta.__name__ = name
    ELEMENTWISE.add(name)
    return prim(torch_name)(meta)


abs = _unary("torch.abs", "abs", to_real=True)  # (|z| of a complex z is real)
neg = _unary("torch.neg", "neg")
exp = _unary("torch.exp", "exp")
expm1 = _unary("torch.expm1", "expm1")
log = _unary("torch.log", "log")
log1p = _unary("torch.log1p", "log1p")
log2 = _unary("torch.log2", "log2")
log10 = _unary("torch.log10", "log10")
sqrt = _unary("torch.sqrt", "sqrt")
rsqrt = _unary("torch.rsqrt", "rsqrt")
sin = _unary("torch.sin", "sin")
cos = _unary("torch.cos", "cos")
tanh = _unary("torch.tanh", "tanh")
erf = _unary("torch.erf", "erf")
floor = _unary("torch.floor", "floor")
ceil = _unary("torch.ceil", "ceil")
round = _unary("torch.round", "round")
trunc = _unary("torch.trunc", "trunc")
sign = _unary("torch.sign", "sign")
reciprocal = _unary("torch.reciprocal", "reciprocal")
bitwise_not = _unary("torch.bitwise_not", "bitwise_not")
isnan = _unary("torch.isnan", "isnan", to_bool=True)

add = _binary("torch.add", "add")
sub = _binary("torch.sub", "sub")
mul = _binary("torch.mul", "mul")
div = _binary("impl.div_prim", "div")  # true division on floats, truncation on integers
pow = _binary("torch.pow", "pow")
remainder = _binary("torch.remainder", "remainder")
maximum = _binary("torch.maximum", "maximum")
minimum = _binary("torch.minimum", "minimum")
atan2 = _binary("torch.atan2", "atan2")
bitwise_and = _binary("torch.bitwise_and", "bitwise_and")
bitwise_or = _binary("torch.bitwise_or", "bitwise_or")
bitwise_xor = _binary("torch.bitwise_xor", "bitwise_xor")
eq = _binary("torch.eq", "eq", to_bool=True)
ne = _binary("torch.ne", "ne", to_bool=True)
lt = _binary("torch.lt", "lt", to_bool=True)
le = _binary("torch.le", "le", to_bool=True)
gt = _binary("torch.gt", "gt", to_bool=True)
ge = _binary("torch.ge", "ge", to_bool=True)


@prim("torch.where")
def where(pred: Tensor, a: TensorOrNumber, b: TensorOrNumber):
    shape = _same_shape(pred, a, b)
    if pred.dtype is not torch.bool:
        raise ValueError("where's predicate must be bool")
    t = a if is_tensor(a) else b
    return TensorProxy(shape, t.dtype, device_of(pred, a, b))


@prim("impl.convert_element_type")
def convert_element_type(a: Tensor, dtype: DType):
    return TensorProxy(a.shape, dtype, a.device)


@prim("impl.broadcast_in_dim")
def broadcast_in_dim(a: Tensor, shape: Ints, broadcast_dims: Ints):
    """a's dim i becomes dim broadcast_dims[i] of the result (size 1 or equal)."""
    if len(broadcast_dims) != a.ndim:
        raise ValueError("broadcast_dims needs one entry per input dim")
    for i, d in enumerate(broadcast_dims):
        if a.shape[i] not in (1, shape[d]):
            raise ValueError(f"cannot broadcast dim {i} of size {a.shape[i]} to {shape[d]}")
    return TensorProxy(shape, a.dtype, a.device)


@prim("torch.reshape")
def reshape(a: Tensor, shape: Ints):
    n = 1
    for s in shape:
        n *= s
    if n != a.numel():
        raise ValueError(f"cannot reshape {tuple(a.shape)} to {tuple(shape)}")
    return TensorProxy(shape, a.dtype, a.device)


@prim("torch.permute")
def transpose(a: Tensor, permutation: Ints):
    if sorted(permutation) != list(range(a.ndim)):
        raise ValueError(f"{permutation} is not a permutation of {a.ndim} dims")
    return TensorProxy(tuple(a.shape[p] for p in permutation), a.dtype, a.device)


@prim("impl.slice_prim")
def slice(a: Tensor, start_indices: Ints, end_indices: Ints, strides: Ints):
    shape = []
    for s, e, st, n in zip(start_indices, end_indices, strides, a.shape):
        if not (0 <= s <= e <= n) or st < 1:
            raise ValueError("slice indices out of range")
        shape.append((e - s + st - 1) // st)
    return TensorProxy(shape, a.dtype, a.device)


@prim("torch.cat")
def cat(tensors: Tensors, dim: Int):
    ref = tensors[0]
    size = builtins.sum(t.shape[dim] for t in tensors)
    shape = list(ref.shape)
    shape[dim] = size
    return TensorProxy(shape, ref.dtype, ref.device)


def _reduction(torch_name, name, *, index=False):
    def meta(a: Tensor, dims: Ints):
        dims = canonical_dims(dims, a.ndim) if dims else ()
        shape = tuple(s for i, s in enumerate(a.shape) if i not in dims)
        return TensorProxy(shape, torch.int64 if index else a.dtype, a.device)

    meta.__name__ = name
    return prim(torch_name)(meta)


sum = _reduction("impl.sum_prim", "sum")
prod = _reduction("impl.prod_prim", "prod")
amax = _reduction("impl.amax_prim", "amax")
amin = _reduction("impl.amin_prim", "amin")


@prim("torch.argmax")
def argmax(a: Tensor, dim: Int):
    d = canonical_dims((dim,), a.ndim)[0]
    return TensorProxy(tuple(s for i, s in enumerate(a.shape) if i != d), torch.int64, a.device)


@prim("torch.matmul")
def matmul(a: Tensor, b: Tensor):
    """Batched matrix product of tensors with equal batch dims (..., m, k) @ (..., k, n)."""
    if a.ndim < 2 or b.ndim < 2 or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul prim: incompatible shapes {tuple(a.shape)} and {tuple(b.shape)}")
    return TensorProxy((*a.shape[:-1], b.shape[-1]), a.dtype, a.device)


@prim("torch.index_select")
def take(a: Tensor, dim: Int, index: Tensor):
    shape = list(a.shape)
    shape[dim] = index.numel()
    return TensorProxy(shape, a.dtype, a.device)


@prim("impl.full")
def full(shape: Ints, fill_value: Number, *, dtype: DType, device: Device):
    return TensorProxy(shape, dtype, device)


@prim("impl.iota")
def iota(length: Int, *, start: Int, step: Int, dtype: DType, device: Device):
    return TensorProxy((length,), dtype, device)


@prim("impl.uniform", random=True)
def uniform(shape: Ints, low: Float, high: Float, *, dtype: DType, device: Device):
    return TensorProxy(shape, dtype, device)


@prim("impl.bernoulli_mask", random=True)
def bernoulli_mask(shape: Ints, p: Float, *, device: Device):
    """A bool tensor, each element True with probability p: the draw torch's dropout makes (the
    same bits from the same generator state)."""
    return TensorProxy(shape, torch.bool, device)


@prim("impl.unslice")
def unslice(g: Tensor, shape: Ints, start_indices: Ints, end_indices: Ints, strides: Ints):
    """Zeros of `shape` with g placed where slice(start, end, strides) reads: slice's VJP."""
    return TensorProxy(shape, g.dtype, g.device)


@prim("torch.index_add")
def index_add(a: Tensor, dim: Int, index: Tensor, source: Tensor):
    return TensorProxy(a.shape, a.dtype, a.device)


@prim("impl.zeros_index_add")
def zeros_index_add(shape: Ints, dim: Int, index: Tensor, source: Tensor):
    """index_add into zeros of `shape` (source's dtype and device), made for it and updated in
    place: the VJP of gathers (embedding, take) without the copy of the zeros an out-of-place
    index_add makes."""
    return TensorProxy(shape, source.dtype, source.device)


@prim("impl.index_add_into", differentiable=False)
def index_add_into(a: Tensor, dim: Int, index: Tensor, source: Tensor):
    """a.index_add(dim, index, source) written into a's memory: made only for an `a` no other op
    reads, freshly allocated by the program (lowering/index_add_into.py: a weight's gradient from
    its GEMM plus an embedding gradient of the same tensor, a tied weight)."""
    return TensorProxy(a.shape, a.dtype, a.device)


index_add_into.returns_input = True


def _sum_to(g, shape):
    """Undo broadcasting: sum g over the dims that were broadcast to reach g.shape from shape."""
    if tuple(g.shape) == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape) if s == 1 and g.shape[i + lead] != 1)
    r = sum(g, dims) if dims else g
    return reshape(r, tuple(shape)) if tuple(r.shape) != tuple(shape) else r


# ---------------------------------------------------------------------------------------------
# --- layer prims: convolution and pooling (batched, channels-first inputs), and their VJPs.
# Decompositions of the ltorch layer ops (thunder/ops/layers.py) make padding explicit, so these
# take symmetric per-dim padding only.
from thunder.ops.registry import Bool as _Bool  # noqa: E402


def _conv_out_shape(input, weight, stride, padding, dilation, transposed, output_padding, groups):
    n, spatial = input.shape[0], input.shape[2:]
    k = weight.shape[2:]
    if transposed:
        out_c = weight.shape[1] * groups
        sizes = [(s - 1) * st - 2 * p + d * (kk - 1) + op + 1
                 for s, st, p, d, kk, op in zip(spatial, stride, padding, dilation, k, output_padding)]
    else:
        out_c = weight.shape[0]
        sizes = [(s + 2 * p - d * (kk - 1) - 1) // st + 1 for s, st, p, d, kk in zip(spatial, stride, padding, dilation, k)]
    return (n, out_c, *sizes)


@prim("torch.convolution")
def convolution(input: Tensor, weight: Tensor, bias: Tensor | None, stride: Ints, padding: Ints, dilation: Ints,
                transposed: _Bool, output_padding: Ints, groups: Int):
    """aten.convolution: N-d (transposed) convolution of a batched input with symmetric padding."""
    nd = weight.ndim - 2
    if input.ndim != nd + 2 or not builtins.all(len(v) == nd for v in (stride, padding, dilation, output_padding)):
        raise ValueError("convolution prim: input, weight, stride, padding, dilation and output_padding disagree in rank")
    return TensorProxy(_conv_out_shape(input, weight, stride, padding, dilation, transposed, output_padding, groups),
                       input.dtype, input.device)


@prim("impl.convolution_backward_input")
def convolution_backward_input(grad_output: Tensor, weight: Tensor, input_shape: Ints, stride: Ints, padding: Ints,
                               dilation: Ints, transposed: _Bool, output_padding: Ints, groups: Int):
    """The cotangent of convolution's input (aten.convolution_backward)."""
    return TensorProxy(input_shape, grad_output.dtype, grad_output.device)


@prim("impl.convolution_backward_weight")
def convolution_backward_weight(grad_output: Tensor, input: Tensor, weight_shape: Ints, stride: Ints, padding: Ints,
                                dilation: Ints, transposed: _Bool, output_padding: Ints, groups: Int):
    """The cotangent of convolution's weight (aten.convolution_backward)."""
    return TensorProxy(weight_shape, grad_output.dtype, grad_output.device)


@prim("impl.convolution_backward", returns_sequence=True)
def convolution_backward(grad_output: Tensor, input: Tensor, weight: Tensor, stride: Ints, padding: Ints,
                         dilation: Ints, transposed: _Bool, output_padding: Ints, groups: Int):
    """The cotangents of convolution's input and weight in one aten.convolution_backward call
    (the backward of a layer whose input needs a gradient too: one pass where two were)."""
    return (TensorProxy(input.shape, grad_output.dtype, grad_output.device),
            TensorProxy(weight.shape, grad_output.dtype, grad_output.device))


def _pool2d_out(size, k, s, p, d, ceil_mode):
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool2d_shape(input, kernel_size, stride, padding, dilation, ceil_mode):
    return (*input.shape[:-2], *(_pool2d_out(input.shape[i - 2], kernel_size[i], stride[i], padding[i], dilation[i],
                                             ceil_mode) for i in range(2)))


@prim("torch.ops.aten.max_pool2d_with_indices", returns_sequence=True)
def max_pool2d_with_indices(input: Tensor, kernel_size: Ints, stride: Ints, padding: Ints, dilation: Ints,
                            ceil_mode: _Bool):
    """(values, flat indices into each input plane) of 2-d max pooling."""
    shape = _pool2d_shape(input, kernel_size, stride, padding, dilation, ceil_mode)
    return TensorProxy(shape, input.dtype, input.device), TensorProxy(shape, torch.int64, input.device)


@prim("torch.ops.aten.max_pool2d_with_indices_backward")
def max_pool2d_backward(grad_output: Tensor, input: Tensor, kernel_size: Ints, stride: Ints, padding: Ints,
                        dilation: Ints, ceil_mode: _Bool, indices: Tensor):
    return TensorProxy(input.shape, grad_output.dtype, grad_output.device)


@prim("torch.ops.aten.avg_pool2d")
def avg_pool2d(input: Tensor, kernel_size: Ints, stride: Ints, padding: Ints, ceil_mode: _Bool,
               count_include_pad: _Bool, divisor_override: Int | None):
    return TensorProxy(_pool2d_shape(input, kernel_size, stride, padding, (1, 1), ceil_mode), input.dtype, input.device)


@prim("torch.ops.aten.avg_pool2d_backward")
def avg_pool2d_backward(grad_output: Tensor, input: Tensor, kernel_size: Ints, stride: Ints, padding: Ints,
                        ceil_mode: _Bool, count_include_pad: _Bool, divisor_override: Int | None):
    return TensorProxy(input.shape, grad_output.dtype, grad_output.device)


@prim("torch.ops.aten._adaptive_avg_pool2d")
def adaptive_avg_pool2d(input: Tensor, output_size: Ints):
    return TensorProxy((*input.shape[:-2], *output_size), input.dtype, input.device)


@prim("torch.ops.aten._adaptive_avg_pool2d_backward")
def adaptive_avg_pool2d_backward(grad_output: Tensor, input: Tensor):
    return TensorProxy(input.shape, grad_output.dtype, grad_output.device)
