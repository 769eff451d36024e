"""Primitives (dialect `thunder`): the small set ltorch ops decompose into.

Prims are strict: elementwise prims take tensors of one shape and dtype (or numbers), so
decompositions make broadcasting (broadcast_in_dim) and type promotion (convert_element_type)
explicit. Reductions take a tuple of dims and no keepdim."""
import builtins
import math

import torch

from thunder.core.proxies import TensorProxy
from thunder.ops.meta_utils import canonical_dims, device_of, is_tensor
from thunder.ops.registry import DType, Device, Float, Int, Ints, Number, Tensor, TensorOrNumber, Tensors, prim


def _same_shape(*args):
    shapes = {tuple(a.shape) for a in args if is_tensor(a)}
    if len(shapes) > 1:
        raise ValueError(f"prims take tensors of one shape, got {sorted(shapes)}")
    return shapes.pop()


def _unary(torch_name, name, *, to_bool=False):
    def meta(a: Tensor):
        return TensorProxy(a.shape, torch.bool if to_bool else a.dtype, a.device)

    meta.__name__ = name
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
    return prim(torch_name)(meta)


abs = _unary("torch.abs", "abs")
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


# ---------------------------------------------------------------------------------------------
# VJP rules: g is the output's cotangent, out the output; each returns {param: cotangent}.

def _zeros_like(t):
    return full(tuple(t.shape), 0.0 if t.dtype.is_floating_point else 0, dtype=t.dtype, device=t.device)


def _num(x, like):
    """A Python number in like's dtype category (prims take numbers beside tensors)."""
    return float(x) if like.dtype.is_floating_point or like.dtype.is_complex else x


def _unary_vjp(op, rule):
    op.vjp(lambda g, out, a: {"a": rule(g, out, a)})


_unary_vjp(abs, lambda g, out, a: mul(g, sign(a)))
_unary_vjp(neg, lambda g, out, a: neg(g))
_unary_vjp(exp, lambda g, out, a: mul(g, out))
_unary_vjp(expm1, lambda g, out, a: mul(g, add(out, _num(1, out))))
_unary_vjp(log, lambda g, out, a: div(g, a))
_unary_vjp(log1p, lambda g, out, a: div(g, add(a, _num(1, a))))
_unary_vjp(log2, lambda g, out, a: div(g, mul(a, _num(math.log(2), a))))
_unary_vjp(log10, lambda g, out, a: div(g, mul(a, _num(math.log(10), a))))
_unary_vjp(sqrt, lambda g, out, a: div(g, mul(out, _num(2, out))))
# -0.5 * out**3 (as torch), not out / a: a division by the input is -inf instead of inf at -0.
_unary_vjp(rsqrt, lambda g, out, a: mul(g, mul(mul(mul(out, out), out), _num(-0.5, out))))
_unary_vjp(sin, lambda g, out, a: mul(g, cos(a)))
_unary_vjp(cos, lambda g, out, a: neg(mul(g, sin(a))))
_unary_vjp(tanh, lambda g, out, a: mul(g, sub(_num(1, out), mul(out, out))))
_unary_vjp(erf, lambda g, out, a: mul(g, mul(exp(neg(mul(a, a))), 1.1283791670955126)))
_unary_vjp(reciprocal, lambda g, out, a: neg(mul(g, mul(out, out))))
for _op in (floor, ceil, round, trunc, sign):
    _unary_vjp(_op, lambda g, out, a: _zeros_like(a))


def _binary_vjp(op, rule):
    def vjp(g, out, a, b):
        ga, gb = rule(g, out, a, b)
        return {"a": ga if is_tensor(a) else None, "b": gb if is_tensor(b) else None}

    op.vjp(vjp)


def _split_ties(g, a, b, a_loses, b_loses):
    # as torch: half the gradient to each side where the inputs are equal, none to the side that
    # loses, all of it to both where they are unordered (a NaN, which the result propagates)
    full = where(eq(a, b), mul(g, 0.5), g)
    return where(a_loses, _num(0, g), full), where(b_loses, _num(0, g), full)


def _pow_vjp(g, out, a, b):
    """Cotangents of a ** b, as torch's pow_backward_self / pow_backward_exponent: no gradient
    to the base where the exponent is 0, none to the exponent where the base is 0 and the exponent
    >= 0 (where out * log(a) would be 0 * -inf)."""
    ga = gb = None
    if is_tensor(a):
        if is_tensor(b):
            d = mul(b, pow(a, sub(b, _num(1, out))))
            ga = where(eq(b, _num(0, b)), _num(0, out), mul(g, d))
        elif b == 0:
            ga = _zeros_like(g)
        else:
            ga = mul(g, mul(pow(a, _num(b - 1, out)), _num(b, out)))
    if is_tensor(b):
        if is_tensor(a):
            base_zero = bitwise_and(eq(a, _num(0, a)), ge(b, _num(0, b)))
            gb = where(base_zero, _num(0, out), mul(g, mul(out, log(a))))
        else:
            log_a = math.log(a) if a > 0 else (-math.inf if a == 0 else math.nan)
            gb = mul(g, mul(out, log_a))
            if a == 0:
                gb = where(ge(b, _num(0, b)), _num(0, out), gb)
    return ga, gb


def _atan2_vjp(g, out, a, b):
    """As torch: 1 / (a^2 + b^2) taken as 0 where it is infinite (at the origin), so the
    gradient there is 0, not NaN."""
    d = add(mul(a, a), mul(b, b))
    r = where(eq(d, _num(0, d)), _num(0, d), reciprocal(d))
    return mul(mul(g, b), r), neg(mul(mul(g, a), r))


_binary_vjp(add, lambda g, out, a, b: (g, g))
_binary_vjp(sub, lambda g, out, a, b: (g, neg(g)))
_binary_vjp(mul, lambda g, out, a, b: (mul(g, b), mul(g, a)))
_binary_vjp(div, lambda g, out, a, b: (div(g, b), neg(mul(g, div(out, b)))))  # as torch: out / b first
_binary_vjp(pow, _pow_vjp)
def _remainder_vjp(g, out, a, b):
    """As torch: (g, -g * a.div(b, rounding_mode="floor")), torch's floor division (NaN for an
    infinite a, where floor(a / b) would be +-inf)."""
    from thunder.ops.elementwise import _div_floor  # built from prims; elementwise imports this module

    return g, (neg(mul(g, _div_floor(a, b))) if is_tensor(b) else None)


_binary_vjp(remainder, _remainder_vjp)
_binary_vjp(maximum, lambda g, out, a, b: _split_ties(g, a, b, lt(a, b), lt(b, a)))
_binary_vjp(minimum, lambda g, out, a, b: _split_ties(g, a, b, gt(a, b), gt(b, a)))
_binary_vjp(atan2, _atan2_vjp)


@where.vjp
def _(g, out, pred, a, b):
    zero = _zeros_like(g)
    return {"a": where(pred, g, zero) if is_tensor(a) else None,
            "b": where(pred, zero, g) if is_tensor(b) else None}


@convert_element_type.vjp
def _(g, out, a, dtype):
    return {"a": convert_element_type(g, a.dtype) if g.dtype is not a.dtype else g}


def _sum_to(g, shape):
    """Undo broadcasting: sum g over the dims that were broadcast to reach g.shape from shape."""
    if tuple(g.shape) == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape) if s == 1 and g.shape[i + lead] != 1)
    r = sum(g, dims) if dims else g
    return reshape(r, tuple(shape)) if tuple(r.shape) != tuple(shape) else r


@broadcast_in_dim.vjp
def _(g, out, a, shape, broadcast_dims):
    reduce = tuple(d for d in range(len(shape)) if d not in broadcast_dims)
    keep_ones = tuple(d for i, d in enumerate(broadcast_dims) if a.shape[i] == 1 and shape[d] != 1)
    dims = tuple(sorted(reduce + keep_ones))
    r = sum(g, dims) if dims else g
    return {"a": reshape(r, tuple(a.shape)) if tuple(r.shape) != tuple(a.shape) else r}


@reshape.vjp
def _(g, out, a, shape):
    return {"a": reshape(g, tuple(a.shape))}


@transpose.vjp
def _(g, out, a, permutation):
    inverse = [0] * len(permutation)
    for i, p in enumerate(permutation):
        inverse[p] = i
    return {"a": transpose(g, tuple(inverse))}


@slice.vjp
def _(g, out, a, start_indices, end_indices, strides):
    return {"a": unslice(g, tuple(a.shape), start_indices, end_indices, strides)}


@cat.vjp
def _(g, out, tensors, dim):
    grads, offset = [], 0
    d = dim % g.ndim
    for t in tensors:
        start = [0] * g.ndim
        end = list(g.shape)
        start[d], end[d] = offset, offset + t.shape[d]
        offset += t.shape[d]
        grads.append(slice(g, tuple(start), tuple(end), (1,) * g.ndim))
    return {"tensors": tuple(grads)}


def _unreduce(g, a, dims):
    """Broadcast a reduction's cotangent back to the input's shape."""
    kept = tuple(i for i in range(a.ndim) if i not in dims)
    return broadcast_in_dim(g, tuple(a.shape), kept)


def _dims(a, dims):
    return canonical_dims(dims, a.ndim) if dims else ()


@sum.vjp
def _(g, out, a, dims):
    return {"a": _unreduce(g, a, _dims(a, dims))}


def _exclusive_cumprod(x, reverse=False):
    """Along the last dim: the product of the elements before (reverse: after) each one, by
    doubling (log2(n) steps of shifted products, ones shifted in)."""
    lead, n = tuple(x.shape[:-1]), x.shape[-1]
    zeros = (0,) * len(lead)
    if n == 1:
        return full(tuple(x.shape), _num(1, x), dtype=x.dtype, device=x.device)

    def shifted(y, k):  # y moved k places along the last dim (reverse: back), ones filling in
        ones = full((*lead, k), _num(1, y), dtype=y.dtype, device=y.device)
        if reverse:
            return cat((slice(y, (*zeros, k), (*lead, n), (1,) * y.ndim), ones), y.ndim - 1)
        return cat((ones, slice(y, (*zeros, 0), (*lead, n - k), (1,) * y.ndim)), y.ndim - 1)

    y, k = shifted(x, 1), 1
    while k < n:
        y = mul(y, shifted(y, k))
        k *= 2
    return y


def prod_grad(g, out, a, dims, whole=False):
    """The cotangent of a's product over dims (g and out broadcast back to a's shape), as torch's
    prod_backward: g * out / a while a holds no zero; else g times the product of the other
    elements of each one's slice (exclusive products from both sides), so that a zero gets the
    product of the others instead of 0 / 0; a whole-tensor product (whole) with two or more
    zeros: 0 (torch's shortcut, which differs from the products of others if a holds inf/NaN)."""
    kept = tuple(i for i in range(a.ndim) if i not in dims)
    perm = kept + tuple(dims)  # the reduced dims last, as one dim of n elements
    n = math.prod(a.shape[i] for i in dims)
    if n == 0:
        return g
    moved = tuple(a.shape[i] for i in perm)
    rows = reshape(transpose(a, perm), (*moved[:len(kept)], n))
    others = mul(_exclusive_cumprod(rows), _exclusive_cumprod(rows, reverse=True))
    others = transpose(reshape(others, moved), tuple(perm.index(i) for i in range(a.ndim)))
    zeros = sum(convert_element_type(eq(a, _num(0, a)), torch.int64), tuple(range(a.ndim)))
    safe = mul(g, others)
    if whole:
        safe = where(broadcast_in_dim(gt(zeros, 1), tuple(a.shape), ()), _num(0, g), safe)
    return where(broadcast_in_dim(gt(zeros, 0), tuple(a.shape), ()), safe, mul(g, div(out, a)))


@prod.vjp
def _(g, out, a, dims):
    d = _dims(a, dims)
    return {"a": prod_grad(_unreduce(g, a, d), _unreduce(out, a, d), a, d) if d else g}


def _extremum_vjp(g, out, a, dims):
    d = _dims(a, dims)
    mask = eq(a, _unreduce(out, a, d))
    m = convert_element_type(mask, g.dtype)
    count = _unreduce(sum(m, d) if d else m, a, d)
    return {"a": div(mul(_unreduce(g, a, d), m), count)}


amax.vjp(_extremum_vjp)
amin.vjp(_extremum_vjp)


@matmul.vjp
def _(g, out, a, b):
    perm = tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2)
    return {"a": matmul(g, transpose(b, perm)), "b": matmul(transpose(a, perm), g)}


@take.vjp
def _(g, out, a, dim, index):
    return {"a": index_add(_zeros_like(a), dim, index, g)}


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


@convolution.vjp
def _(g, out, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    conf = (stride, padding, dilation, transposed, output_padding, groups)
    return {"input": convolution_backward_input(g, weight, tuple(input.shape), *conf),
            "weight": convolution_backward_weight(g, input, tuple(weight.shape), *conf),
            "bias": sum(g, (0, *range(2, g.ndim))) if bias is not None else None}


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


@max_pool2d_with_indices.vjp
def _(g, out, input, kernel_size, stride, padding, dilation, ceil_mode):
    return {"input": max_pool2d_backward(g[0], input, kernel_size, stride, padding, dilation, ceil_mode, out[1])}


@prim("torch.ops.aten.avg_pool2d")
def avg_pool2d(input: Tensor, kernel_size: Ints, stride: Ints, padding: Ints, ceil_mode: _Bool,
               count_include_pad: _Bool, divisor_override: Int | None):
    return TensorProxy(_pool2d_shape(input, kernel_size, stride, padding, (1, 1), ceil_mode), input.dtype, input.device)


@prim("torch.ops.aten.avg_pool2d_backward")
def avg_pool2d_backward(grad_output: Tensor, input: Tensor, kernel_size: Ints, stride: Ints, padding: Ints,
                        ceil_mode: _Bool, count_include_pad: _Bool, divisor_override: Int | None):
    return TensorProxy(input.shape, grad_output.dtype, grad_output.device)


@avg_pool2d.vjp
def _(g, out, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return {"input": avg_pool2d_backward(g, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                         divisor_override)}


@prim("torch.ops.aten._adaptive_avg_pool2d")
def adaptive_avg_pool2d(input: Tensor, output_size: Ints):
    return TensorProxy((*input.shape[:-2], *output_size), input.dtype, input.device)


@prim("torch.ops.aten._adaptive_avg_pool2d_backward")
def adaptive_avg_pool2d_backward(grad_output: Tensor, input: Tensor):
    return TensorProxy(input.shape, grad_output.dtype, grad_output.device)


@adaptive_avg_pool2d.vjp
def _(g, out, input, output_size):
    return {"input": adaptive_avg_pool2d_backward(g, input)}
