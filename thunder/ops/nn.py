"""Neural-network ltorch ops: matrix products, softmax, layer_norm,
dropout, embedding (attention: attention.py).

Decompositions use prims only. Half-precision inputs compute in float32 (as torch's CPU and CUDA
kernels accumulate) and convert the result back."""
import math

import torch
import torch.nn.functional as F

from thunder.core import dtypes, symbols, trace as tracing
from thunder.core.proxies import TensorProxy
from thunder.ops import large_outputs, onednn, packed_linear, prims, vjp_utils as _vjp
from thunder.ops.decomp_utils import expand_to, to_dtype
from thunder.ops.elementwise import add, eq, erf, exp, mul, rsqrt, rsub, sub, tanh
from thunder.ops.meta_utils import broadcast_shapes, canonical_dim
from thunder.ops.reductions import mean, sum_
from thunder.ops.registry import Bool, DType, Float, Int, Ints, ltorch, Number, Str, Tensor, Tensors
from thunder.ops.shape import expand

T = torch.Tensor
_HALF = (torch.float16, torch.bfloat16)


def _compute_dtype(dtype):
    return torch.float32 if dtype in _HALF else dtype


def _keep(reduced, shape, dims):
    """A reduction's result broadcast back over the reduced dims."""
    return prims.broadcast_in_dim(reduced, tuple(shape), tuple(i for i in range(len(shape)) if i not in dims))


# --------------------------------------------------------------------------------------------
# matrix products


def _same_dtype(a, b):
    if a.dtype != b.dtype:
        name = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
                torch.bfloat16: "c10::BFloat16"}
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {name.get(a.dtype, a.dtype)} != "
                           f"{name.get(b.dtype, b.dtype)}")


def _matmul_shape(a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    _same_dtype(a, b)
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        if a.ndim == 1 and b.ndim == 1:
            raise RuntimeError(f"inconsistent tensor size, expected tensor [{k_a}] and src [{k_b}] to have the same "
                               f"number of elements, but got {k_a} and {k_b} elements respectively")
        sa = "x".join(map(str, a.shape if a.ndim <= 2 else (math.prod(a.shape[:-1]), k_a)))
        sb = "x".join(map(str, b.shape[-2:]))
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({sa} and {sb})")
    m = a.shape[-2:-1]  # () for a 1-d input
    n = b.shape[-1:] if b.ndim > 1 else ()
    return (*broadcast_shapes(a.shape[:-2], b.shape[:-2]), *m, *n)


def _matmul_decomp(a, b):
    shape = _matmul_shape(a, b)
    a2 = prims.reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = prims.reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = expand_to(a2, (*batch, *a2.shape[-2:]))
    b2 = expand_to(b2, (*batch, *b2.shape[-2:]))
    out = prims.matmul(a2, b2)
    return out if tuple(out.shape) == shape else prims.reshape(out, shape)


@ltorch("torch.matmul", methods=("matmul",), dunders=("__matmul__",), aliases=(torch.matmul, T.matmul), contiguous=True)
def matmul(input: Tensor, other: Tensor):
    return TensorProxy(_matmul_shape(input, other), input.dtype, input.device)


matmul.decompose(lambda input, other: _matmul_decomp(input, other))


@ltorch("impl.rmatmul", rdunders=("__rmatmul__",))
def rmatmul(input: Tensor, other: Tensor):
    """other @ input (the reflected operator)."""
    return matmul.meta(other, input)


rmatmul.decompose(lambda input, other: _matmul_decomp(other, input))


def _mm_check(input, mat2):
    for name, x in (("self", input), ("mat2", mat2)):
        if x.ndim != 2:
            raise RuntimeError(f"{name} must be a matrix")
    _matmul_shape(input, mat2)


@ltorch("torch.mm", methods=("mm",), aliases=(torch.mm, T.mm), contiguous=True)
def mm(input: Tensor, mat2: Tensor):
    _mm_check(input, mat2)
    return matmul.meta(input, mat2)


def _bmm_check(input, mat2):
    for name, x in (("batch1", input), ("batch2", mat2)):
        if x.ndim != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    if mat2.shape[:2] != (input.shape[0], input.shape[2]):
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{input.shape[0]}, {input.shape[2]}] but got: [{mat2.shape[0]}, {mat2.shape[1]}].")
    _same_dtype(input, mat2)


@ltorch("torch.bmm", methods=("bmm",), aliases=(torch.bmm, T.bmm), contiguous=True)
def bmm(input: Tensor, mat2: Tensor):
    _bmm_check(input, mat2)
    return matmul.meta(input, mat2)


mm.decompose(lambda input, mat2: prims.matmul(input, mat2))
bmm.decompose(lambda input, mat2: prims.matmul(input, mat2))


def _first_of(*sources):
    """A python_grad_free hook: the statements of the first of sources that gives some, or None
    (torch's call)."""
    def source(values, outs):
        for make in sources:
            statements = make(values, outs)
            if statements:
                return statements
        return None
    return source


# float32 CPU products with a matrix on the right: oneDNN where it is faster (ops/onednn.py);
# others with a large result: into fresh huge pages (ops/large_outputs.py)
matmul.python_grad_free = _first_of(onednn.matmul_source("input", "other"),
                                    large_outputs.matmul_source("input", "other"))
mm.python_grad_free = _first_of(onednn.matmul_source("input", "mat2"), large_outputs.matmul_source("input", "mat2"))


def _addmm_check(name, input, a, b, alpha):
    """The result shape of beta * input + alpha * (a @ b) (a, b: matrices, or batches of them)."""
    for x in (a, b):
        if name == "baddbmm" and x.ndim < 3:  # eager reads size(2) first
            raise IndexError(f"Dimension out of range (expected to be in range of [{-x.ndim}, {x.ndim - 1}], but got 2)")
    (_mm_check if name == "addmm" else _bmm_check)(a, b)
    if input.dtype != b.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got {_dtype_word(input.dtype)} and "
                           f"{_dtype_word(b.dtype)}")
    if isinstance(alpha, float) and not a.dtype.is_floating_point:
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    shape = matmul.meta(a, b).shape

    expand.meta(input, shape)  # torch's error for an input that does not broadcast to the product
    return shape


def _dtype_word(dtype):
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int"}.get(dtype, str(dtype))


def _addmm_meta(name, input, a, b, beta, alpha):
    return TensorProxy(_addmm_check(name, input, a, b, alpha), a.dtype, a.device)


def _addmm_decomp(name, input, a, b, beta, alpha):
    """beta * input + alpha * (a @ b); with beta == 0 input is not read (its nan and inf neither)."""
    shape = _addmm_check(name, input, a, b, alpha)
    out = prims.matmul(a, b)
    if alpha != 1:
        out = prims.mul(out, to_dtype(alpha, out.dtype))
    if beta == 0:
        return out
    x = expand_to(input, shape)
    if beta != 1:
        x = prims.mul(x, to_dtype(beta, x.dtype))
    return prims.add(x, out)


@ltorch("torch.addmm", methods=("addmm",), aliases=(torch.addmm, T.addmm), contiguous=True)
def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Number = 1, alpha: Number = 1):
    """beta * input + alpha * (mat1 @ mat2), input broadcast to the product's shape."""
    return _addmm_meta("addmm", input, mat1, mat2, beta, alpha)


@ltorch("torch.baddbmm", methods=("baddbmm",), aliases=(torch.baddbmm, T.baddbmm))
def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Number = 1, alpha: Number = 1):
    """beta * input + alpha * (batch1 @ batch2) for batches of matrices."""
    return _addmm_meta("baddbmm", input, batch1, batch2, beta, alpha)


addmm.decompose(lambda input, mat1, mat2, *, beta=1, alpha=1: _addmm_decomp("addmm", input, mat1, mat2, beta, alpha))
addmm.python_grad_free = packed_linear.addmm_source  # (Conv1D products, as linear's: ops/packed_linear.py)
baddbmm.decompose(lambda input, batch1, batch2, *, beta=1, alpha=1:
                  _addmm_decomp("baddbmm", input, batch1, batch2, beta, alpha))


def _outer_check(input, vec2):
    for name, v in (("self", input), ("vec2", vec2)):
        if v.ndim != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {name}, but got {v.ndim}-D")
    return (input.shape[0], vec2.shape[0])


@ltorch("torch.outer", methods=("outer", "ger"), aliases=(torch.outer, torch.ger, T.outer, T.ger))
def outer(input: Tensor, vec2: Tensor):
    """input[i] * vec2[j] (with type promotion)."""
    return TensorProxy(_outer_check(input, vec2), dtypes.promote(input, vec2), input.device)


@outer.decompose
def _(input, vec2):
    shape = _outer_check(input, vec2)
    dt = dtypes.promote(input, vec2)
    a = prims.broadcast_in_dim(to_dtype(input, dt), shape, (0,))
    b = prims.broadcast_in_dim(to_dtype(vec2, dt), shape, (1,))
    return prims.mul(a, b)


# einsum: the equation's labels per operand (an ellipsis becomes labels 0, 1, ... aligned to the
# right across operands), the output's labels, and each label's size


def _einsum_plan(equation, operands):
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        more = "more" if len(operands) > len(terms) else "fewer"
        raise RuntimeError(f"einsum(): {more} operands were provided than specified in the equation")
    if len({t.dtype for t in operands}) > 1:
        raise RuntimeError(f"expected scalar type {_dtype_word(operands[0].dtype)} but found "
                           f"{_dtype_word(next(t.dtype for t in operands if t.dtype != operands[0].dtype))}")
    ell = max((t.ndim - len(term.replace("...", "")) for term, t in zip(terms, operands) if "..." in term), default=0)

    def labels(term, ndim):
        if not all(c.isalpha() or c == "." for c in term) or term.count(".") not in (0, 3) or \
                term.count("...") > 1:
            raise RuntimeError(f"einsum(): invalid subscript given at index {len(lhs)} in the equation string, "
                               "subscripts must be in [a-zA-Z]")
        head, dots, tail = term.partition("...")
        n = ndim - len(head) - len(tail) if dots else 0
        if n < 0 or not dots and len(term) != ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(term.replace('...', ''))}) "
                               f"does not match the number of dimensions ({ndim}) for operand "
                               f"{terms.index(term) if term in terms else 0}"
                               + (" and no ellipsis was given" if not dots else ""))
        return [*head, *range(ell - n, ell), *tail]

    ins = [labels(term, t.ndim) for term, t in zip(terms, operands)]
    sizes = {}
    for lab, t in zip(ins, operands):
        for label, n in zip(lab, t.shape):
            have = sizes.get(label, 1)
            if n != have and 1 not in (n, have):
                raise RuntimeError(f"einsum(): operands do not broadcast with remapped shapes (original->remapped): "
                                   f"subscript {label} has sizes {have} and {n}")
            sizes[label] = max(have, n) if 1 in (n, have) else n
    if arrow:
        out = labels(rhs, len(rhs.replace("...", "")) + ell) if "..." in rhs else list(rhs)
        if len(set(out)) != len(out) or any(c not in sizes for c in out if isinstance(c, str)):
            raise RuntimeError("einsum(): output subscript appears more than once or not in the input")
    else:
        counts = {}
        for lab in ins:
            for c in lab:
                counts[c] = counts.get(c, 0) + 1
        out = [*range(ell), *sorted(c for c, k in counts.items() if isinstance(c, str) and k == 1)]
    return ins, out, sizes


@ltorch("torch.einsum", varargs="tensors", aliases=(torch.einsum,))
def einsum(equation: Str, tensors: Tensors):
    """Sums of products over the equation's labels (torch.einsum("ij,jk->ik", a, b))."""
    ins, out, sizes = _einsum_plan(equation, tensors)
    return TensorProxy(tuple(sizes[c] for c in out), tensors[0].dtype, tensors[0].device)


def _diagonal(x, labels):
    """x with repeated labels reduced to their diagonal (ii -> i)."""
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        i, j = [k for k, lab in enumerate(labels) if lab == c][:2]
        rest = [k for k in range(x.ndim) if k not in (i, j)]
        n = x.shape[i]
        x = prims.transpose(x, (*rest, i, j)) if (*rest, i, j) != tuple(range(x.ndim)) else x
        x = prims.reshape(x, (*x.shape[:-2], n * n))
        starts, stops, steps = [0] * x.ndim, list(x.shape), [1] * x.ndim
        stops[-1], steps[-1] = n * n, n + 1
        x = prims.slice(x, tuple(starts), tuple(stops), tuple(steps))
        labels = [labels[k] for k in rest] + [c]
    return x, labels


def _arrange(x, labels, order):
    """x's dims in the order of the labels `order` (a permutation of labels)."""
    perm = tuple(labels.index(c) for c in order)
    return x if perm == tuple(range(x.ndim)) else prims.transpose(x, perm)


@einsum.decompose
def _(equation, tensors):
    ins, out, sizes = _einsum_plan(equation, tensors)
    xs = []
    for i, (x, lab) in enumerate(zip(tensors, ins)):
        x, lab = _diagonal(x, list(lab))
        full = tuple(sizes[c] for c in lab)
        x = prims.broadcast_in_dim(x, full, tuple(range(x.ndim))) if tuple(x.shape) != full else x
        later = set(out).union(*(ins[j] for j in range(len(ins)) if j != i))
        gone = [k for k, c in enumerate(lab) if c not in later]  # summed right away
        if gone:
            x = prims.sum(x, tuple(gone))
            lab = [c for k, c in enumerate(lab) if k not in gone]
        xs.append((x, lab))
    x, lab = xs[0]
    for i in range(1, len(xs)):
        y, ylab = xs[i]
        needed = set(out).union(*(ins[j] for j in range(i + 1, len(ins))))
        batch = [c for c in lab if c in ylab and c in needed]
        contract = [c for c in lab if c in ylab and c not in needed]
        left = [c for c in lab if c not in ylab]
        right = [c for c in ylab if c not in lab]
        lab_out = batch + left + right
        if not contract:  # a product without a sum, as eager's einsum takes it: a broadcast mul
            # (not a matmul with k = 1: CUDA has no integer matmul, eager's mul runs there)
            full = tuple(sizes[c] for c in lab_out)
            a = prims.broadcast_in_dim(_arrange(x, lab, batch + left), full, tuple(range(len(batch + left))))
            b = prims.broadcast_in_dim(_arrange(y, ylab, batch + right), full,
                                       (*range(len(batch)), *range(len(batch + left), len(lab_out))))
            x, lab = prims.mul(a, b), lab_out
            continue
        n = lambda cs: math.prod(sizes[c] for c in cs)  # noqa: E731
        a = prims.reshape(_arrange(x, lab, batch + left + contract), (n(batch), n(left), n(contract)))
        b = prims.reshape(_arrange(y, ylab, batch + contract + right), (n(batch), n(contract), n(right)))
        x = prims.reshape(prims.matmul(a, b), tuple(sizes[c] for c in lab_out))
        lab = lab_out
    return _arrange(x, lab, out)


def _linear_check(input, weight, bias):
    if weight.ndim not in (1, 2):
        raise RuntimeError(f"linear(): weight must be 1-D or 2-D, but got {weight.ndim}-D")
    wt = weight if weight.ndim == 1 else TensorProxy(weight.shape[::-1], weight.dtype, weight.device)
    out = matmul.meta(input, wt)
    if bias is not None:
        _same_dtype(out, bias)
        broadcast_shapes(out.shape, bias.shape)
    return out


@ltorch("torch.nn.functional.linear", aliases=(F.linear,), contiguous=True)
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None):
    out = _linear_check(input, weight, bias)
    return TensorProxy(broadcast_shapes(out.shape, bias.shape) if bias is not None else out.shape,
                       out.dtype, out.device)


# bfloat16 products from packed weights where asked for, float32 ones by the fastest of torch's,
# MKL's packed, oneDNN's, oneDNN's packed measured here (ops/packed_linear.py); others (torch's)
# with a large result into fresh huge pages (ops/large_outputs.py)
linear.python_grad_free = _first_of(packed_linear.linear_source, large_outputs.linear_source)


@linear.decompose
def _(input, weight, bias=None):
    wt = weight if weight.ndim == 1 else prims.transpose(weight, (1, 0))
    out = _matmul_decomp(input, wt)
    if bias is None:
        return out
    shape = broadcast_shapes(out.shape, bias.shape)
    return prims.add(expand_to(out, shape), expand_to(bias, shape))


# --------------------------------------------------------------------------------------------
# softmax


def _softmax_args(input, dim, dtype):
    d = canonical_dim(dim, input.ndim)
    dt = dtype or input.dtype
    if not dt.is_floating_point:
        raise NotImplementedError(f'"softmax_lastdim_kernel_impl" not implemented for \'{dt}\'')
    return d, dt


def _softmax_meta(input, dim, dtype):
    return TensorProxy(input.shape, _softmax_args(input, dim, dtype)[1], input.device)


def _softmax_decomp(input, dim, dtype, log):
    d, dt = _softmax_args(input, dim, dtype)
    x = to_dtype(to_dtype(input, dt), _compute_dtype(dt))
    shifted = prims.sub(x, _keep(prims.amax(x, (d,)), x.shape, (d,)))
    e = prims.exp(shifted)
    total = prims.sum(e, (d,))
    # per row, as torch's kernels: the log of the sum (log_softmax), its reciprocal (softmax: each
    # exp times it, a multiplication where a division would cost several)
    if log:
        out = prims.sub(shifted, _keep(prims.log(total), x.shape, (d,)))
    else:
        out = prims.mul(e, _keep(prims.reciprocal(total), x.shape, (d,)))
    return to_dtype(out, dt)


@ltorch("torch.softmax", methods=("softmax",), aliases=(torch.softmax, T.softmax, F.softmax))
def softmax(input: Tensor, dim: Int, dtype: DType | None = None, *, _stacklevel: Int = 3):
    """_stacklevel: what F.softmax passes on (and torch.softmax leaves out at its default)."""
    return _softmax_meta(input, dim, dtype)


@ltorch("torch.log_softmax", methods=("log_softmax",), aliases=(torch.log_softmax, T.log_softmax, F.log_softmax))
def log_softmax(input: Tensor, dim: Int, dtype: DType | None = None, *, _stacklevel: Int = 3):
    return _softmax_meta(input, dim, dtype)


softmax.decompose(lambda input, dim, dtype=None, **_: _softmax_decomp(input, dim, dtype, log=False))
log_softmax.decompose(lambda input, dim, dtype=None, **_: _softmax_decomp(input, dim, dtype, log=True))

# --------------------------------------------------------------------------------------------
# normalization, dropout, embedding


def _normalize_check(input, p, dim):
    if not (input.dtype.is_floating_point or input.dtype.is_complex):
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                           f"{_dtype_word(input.dtype)}")
    return canonical_dim(dim, input.ndim)


@ltorch("torch.nn.functional.normalize", aliases=(F.normalize,))
def normalize(input: Tensor, p: Float = 2.0, dim: Int = 1, eps: Float = 1e-12):
    """input / max(||input||_p along dim, eps)."""
    _normalize_check(input, p, dim)
    return TensorProxy(input.shape, input.dtype, input.device)


def _vector_norm(x, p, d):
    """||x||_p along dim d (kept), in x's dtype, with prims."""
    a = prims.abs(x)
    if p == 2:
        n = prims.sqrt(prims.sum(prims.mul(x, x), (d,)))
    elif p == 1:
        n = prims.sum(a, (d,))
    elif p == math.inf:
        n = prims.amax(a, (d,))
    elif p == -math.inf:
        n = prims.amin(a, (d,))
    elif p == 0:
        n = prims.sum(prims.convert_element_type(prims.ne(x, 0.0), x.dtype), (d,))
    else:
        n = prims.pow(prims.sum(prims.pow(a, float(p)), (d,)), 1.0 / p)
    return _keep(n, x.shape, (d,))


@normalize.decompose
def _(input, p=2.0, dim=1, eps=1e-12):
    d = _normalize_check(input, p, dim)
    if input.ndim == 0:
        d = None
    cdt = _compute_dtype(input.dtype)
    x = to_dtype(input, cdt)
    x1 = prims.reshape(x, (1,)) if d is None else x
    n = to_dtype(_vector_norm(x1, p, 0 if d is None else d), input.dtype)  # eager rounds the norm
    denom = prims.maximum(n, prims.full(tuple(n.shape), to_dtype(eps, n.dtype), dtype=n.dtype, device=n.device))
    denom = prims.reshape(denom, ()) if d is None else denom
    return to_dtype(prims.div(x, to_dtype(denom, cdt)), input.dtype)


def _layer_norm_check(input, normalized_shape, weight, bias):
    ns = tuple(normalized_shape)
    if not ns:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
                           "element, but got normalized_shape = []")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != ns:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
                               f"{list(p.shape)} and normalized_shape = {list(ns)}")
    if input.ndim < len(ns) or tuple(input.shape[input.ndim - len(ns):]) != ns:
        raise RuntimeError(f"Given normalized_shape={list(ns)}, expected input with shape [*, "
                           f"{', '.join(map(str, ns))}], but got input of size{list(input.shape)}")
    return tuple(range(input.ndim - len(ns), input.ndim))


@ltorch("torch.nn.functional.layer_norm", aliases=(F.layer_norm,), contiguous=True)
def layer_norm(input: Tensor, normalized_shape: Ints, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: Float = 1e-5):
    _layer_norm_check(input, normalized_shape, weight, bias)
    return TensorProxy(input.shape, input.dtype, input.device)


@layer_norm.decompose
def _(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = _layer_norm_check(input, normalized_shape, weight, bias)
    cdt = _compute_dtype(input.dtype)
    x = to_dtype(input, cdt)
    n = symbols.to_float(math.prod(input.shape[d] for d in dims))
    mean = _keep(prims.div(prims.sum(x, dims), n), x.shape, dims)
    centered = prims.sub(x, mean)
    var = prims.div(prims.sum(prims.mul(centered, centered), dims), n)
    rstd = _keep(prims.rsqrt(prims.add(var, float(eps))), x.shape, dims)
    out = prims.mul(centered, rstd)
    if weight is not None:
        out = prims.mul(out, expand_to(to_dtype(weight, cdt), x.shape))
    if bias is not None:
        out = prims.add(out, expand_to(to_dtype(bias, cdt), x.shape))
    return to_dtype(out, input.dtype)


def _dropout_check(p):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _dropout(x, p):
    """Zero each element with probability p and scale the others by 1 / (1 - p), as torch's
    native_dropout: the same mask draw (so eager's bits under the same seed), x * mask * scale
    (so a NaN dropped stays NaN, as in eager)."""
    keep = prims.bernoulli_mask(tuple(x.shape), 1.0 - p, device=x.device)  # never true for p == 1
    masked = prims.mul(x, to_dtype(keep, x.dtype))
    return prims.mul(masked, to_dtype(1.0 / (1.0 - p) if p < 1 else 0.0, x.dtype))


@ltorch("torch.nn.functional.dropout", random=True, aliases=(F.dropout,))
def dropout(input: Tensor, p: Float = 0.5, training: Bool = True, inplace: Bool = False):
    _dropout_check(p)
    if training is False or type(p) in (int, float) and p == 0:
        # eager returns the input itself (an eval model's dropouts): no op recorded, no torch call
        return input
    return TensorProxy(input.shape, input.dtype, input.device)


dropout.returns_input = True


@dropout.decompose
def _(input, p=0.5, training=True, inplace=False):
    _dropout_check(p)
    return _dropout(input, p) if training and p > 0 else input


def _embedding_check(input, weight, padding_idx, max_norm):
    if input.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {input.dtype} instead (while checking arguments for embedding)")
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    if padding_idx is not None and not -weight.shape[0] <= padding_idx < weight.shape[0]:
        raise AssertionError("Padding_idx must be within num_embeddings")
    if max_norm is not None:
        raise NotImplementedError("thunder: F.embedding(max_norm=...) renormalizes the weight in place, which is "
                                  "not supported yet")


@ltorch("torch.nn.functional.embedding", aliases=(F.embedding,))
def embedding(input: Tensor, weight: Tensor, padding_idx: Int | None = None, max_norm: Float | None = None,
              norm_type: Float = 2.0, scale_grad_by_freq: Bool = False, sparse: Bool = False):
    _embedding_check(input, weight, padding_idx, max_norm)
    if sparse and weight.requires_grad and tracing.grad_enabled():
        # (the fallback records torch's call: its gradient, torch's, is a sparse tensor as eager's)
        raise NotImplementedError("thunder: F.embedding(sparse=True) gives the weight a sparse gradient")
    return TensorProxy((*input.shape, weight.shape[1]), weight.dtype, weight.device)


@embedding.decompose
def _(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    out = embedding.meta(input, weight, padding_idx, max_norm)
    rows = prims.take(weight, 0, prims.reshape(input, (input.numel(),)))
    return prims.reshape(rows, tuple(out.shape))


# --------------------------------------------------------------------------------------------
# Backward ops: a VJP as one op (torch runs its fused backward kernel), decomposing into the
# formula. The VJP rules that use them: thunder/ops/vjp/nn.py and vjp/elementwise.py.


def _gelu_grad(g, out, x, approximate="none"):
    x, g32 = _vjp.upcast(x), _vjp.upcast(g)
    if approximate == "tanh":  # as torch's GeluBackward with tanh
        beta, kappa = math.sqrt(2 / math.pi), 0.044715
        x_sq = mul(x, x)
        inner = mul(add(x, mul(mul(x_sq, x), kappa)), beta)
        t = tanh(inner)
        left_d = mul(add(t, 1.0), 0.5)
        right_d = mul(mul(mul(x, 0.5), rsub(mul(t, t), 1.0)), add(mul(x_sq, 3 * kappa * beta), beta))
        return mul(g32, add(left_d, right_d))
    cdf = mul(add(erf(mul(x, math.sqrt(0.5))), 1.0), 0.5)
    pdf = mul(exp(mul(mul(x, x), -0.5)), 1 / math.sqrt(2 * math.pi))
    return mul(g32, add(cdf, mul(x, pdf)))


@ltorch("torch.ops.aten.gelu_backward", aliases=(torch.ops.aten.gelu_backward, torch.ops.aten.gelu_backward.default),
        elementwise=True)
def gelu_backward(grad_output: Tensor, input: Tensor, *, approximate: Str = "none"):
    """gelu's VJP as one op: torch runs its fused kernel; decomposes into the formula."""
    return TensorProxy(input.shape, input.dtype, input.device)


@gelu_backward.decompose
def _(grad_output, input, *, approximate="none"):
    return _vjp.grad_for(input, _gelu_grad(grad_output, None, input, approximate))


@ltorch("impl.layer_norm_backward", returns_sequence=True)
def layer_norm_backward(grad_output: Tensor, input: Tensor, normalized_shape: Ints, weight: Tensor | None = None,
                        bias: Tensor | None = None, eps: Float = 1e-5):
    """layer_norm's VJP as one op (input, weight, bias cotangents; zeros for an absent weight or
    bias): torch runs its fused kernel; decomposes into the formula."""
    shape = tuple(normalized_shape)
    return (TensorProxy(input.shape, input.dtype, input.device),
            TensorProxy(shape, weight.dtype if weight is not None else input.dtype, input.device),
            TensorProxy(shape, bias.dtype if bias is not None else input.dtype, input.device))


@layer_norm_backward.decompose
def _(grad_output, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = _layer_norm_check(input, normalized_shape, weight, bias)
    x = _vjp.upcast(input)
    mu = mean(x, dims, True)
    rstd = rsqrt(add(mean(mul(sub(x, mu), sub(x, mu)), dims, True), float(eps)))
    return _layer_norm_grads(grad_output, input, normalized_shape, weight, bias, dims, mu, rstd)


def _layer_norm_grads(g, input, normalized_shape, weight, bias, dims, mu, rstd):
    """layer_norm's input, weight and bias cotangents from the mean and rstd of its groups."""
    lead = tuple(range(input.ndim - len(dims)))
    x, g32 = _vjp.upcast(input), _vjp.upcast(g)
    xhat = mul(sub(x, mu), rstd)
    gxhat = mul(g32, weight) if weight is not None else g32
    # d input = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat))
    gx = mul(sub(sub(gxhat, mean(gxhat, dims, True)), mul(xhat, mean(mul(gxhat, xhat), dims, True))), rstd)

    def over_lead(v):
        return sum_(v, lead) if lead else v

    shape = tuple(normalized_shape)
    gw = (_vjp.grad_for(weight, over_lead(mul(g32, xhat))) if weight is not None
          else _vjp.zeros(shape, input.dtype, input.device))
    gb = (_vjp.grad_for(bias, over_lead(g32)) if bias is not None
          else _vjp.zeros(shape, input.dtype, input.device))
    return _vjp.grad_for(input, gx), gw, gb


@layer_norm.trains_as
def _(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if any(p is not None and p.dtype != input.dtype for p in (weight, bias)):
        return None
    return native_layer_norm, dict(input=input, normalized_shape=normalized_shape, weight=weight, bias=bias, eps=eps)


@ltorch("torch.ops.aten.native_layer_norm", returns_sequence=True, contiguous=True)
def native_layer_norm(input: Tensor, normalized_shape: Ints, weight: Tensor | None, bias: Tensor | None, eps: Float):
    """layer_norm with the mean and 1/std of each normalized group (shape: input's with the
    normalized dims 1, dtype: input's), as torch's kernel returns them: layer_norm's form in
    @forward (its backward kernel reads them instead of recomputing them)."""
    dims = _layer_norm_check(input, normalized_shape, weight, bias)
    stats = tuple(1 if i in dims else s for i, s in enumerate(input.shape))
    return (TensorProxy(input.shape, input.dtype, input.device), TensorProxy(stats, input.dtype, input.device),
            TensorProxy(stats, input.dtype, input.device))


def _layer_norm_stats(x, dims, eps):
    """mean and rstd of x over dims (prims, x in its compute dtype), kept as size-1 dims."""
    n = symbols.to_float(math.prod(x.shape[d] for d in dims))
    keep = tuple(1 if i in dims else s for i, s in enumerate(x.shape))
    mean = prims.div(prims.sum(x, dims), n)
    centered = prims.sub(x, _keep(mean, x.shape, dims))
    rstd = prims.rsqrt(prims.add(prims.div(prims.sum(prims.mul(centered, centered), dims), n), float(eps)))
    return prims.reshape(mean, keep), prims.reshape(rstd, keep)


@native_layer_norm.decompose
def _(input, normalized_shape, weight, bias, eps):
    dims = _layer_norm_check(input, normalized_shape, weight, bias)
    x = to_dtype(input, _compute_dtype(input.dtype))
    mean, rstd = _layer_norm_stats(x, dims, eps)
    out = prims.mul(prims.sub(x, expand_to(mean, x.shape)), expand_to(rstd, x.shape))
    if weight is not None:
        out = prims.mul(out, expand_to(to_dtype(weight, x.dtype), x.shape))
    if bias is not None:
        out = prims.add(out, expand_to(to_dtype(bias, x.dtype), x.shape))
    return tuple(to_dtype(v, input.dtype) for v in (out, mean, rstd))


@ltorch("impl.native_layer_norm_backward", returns_sequence=True)
def native_layer_norm_backward(grad_output: Tensor, input: Tensor, normalized_shape: Ints, mean: Tensor,
                               rstd: Tensor, weight: Tensor | None = None, bias: Tensor | None = None):
    """native_layer_norm's VJP (input, weight, bias cotangents; zeros for an absent weight or
    bias) from its saved mean and rstd: torch's fused kernel."""
    return layer_norm_backward.meta(grad_output, input, normalized_shape, weight, bias)


@native_layer_norm_backward.decompose
def _(grad_output, input, normalized_shape, mean, rstd, weight=None, bias=None):
    dims = _layer_norm_check(input, normalized_shape, weight, bias)
    mean, rstd = _vjp.upcast(mean), _vjp.upcast(rstd)
    return _layer_norm_grads(grad_output, input, normalized_shape, weight, bias, dims, mean, rstd)
