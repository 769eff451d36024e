"""Loss ltorch ops: nll_loss and cross_entropy (class-index and class-probability targets, weight,
ignore_index, label_smoothing, reduction none/sum/mean, (C), (N, C) and (N, C, d1, ...) inputs).

nll_loss decomposes into prims that pick each target's entry with a one-hot comparison against an
iota of the classes (no gather), so the whole loss fuses as one row reduction, and a
`check_targets` of the targets (a torch call outside the kernel: eager's IndexError for a target
out of range, which a kernel could not raise). cross_entropy never computes log_softmax whole:
log_softmax(x) = x - logsumexp(x), so the loss of a target is lse - x[target] (the same one-hot
pick, of the logits), and the label-smoothing and probability terms sum (x - lse) per element in
the same pass over a row. Differentiated, the rows' logsumexp is saved (thunder-remat) and the
gradient is one elementwise pass: exp(x - lse) * g_row (logsumexp's rule) and -g_row where the
class is the target (the pick's); label smoothing and probability targets add a sum over each
row's classes (the cotangent of lse in their terms)."""
import torch
import torch.nn.functional as F

from thunder.core.proxies import TensorProxy
from thunder.ops import prims
from thunder.ops.decomp_utils import opmath_dtype, to_dtype
from thunder.ops.registry import Bool, Float, Int, Str, Tensor, ltorch
from thunder.ops.elementwise import add, div, eq, logical_not, mul, neg, sub
from thunder.ops.indexing import index_select, masked_fill
from thunder.ops.reductions import logsumexp, sum_
from thunder.ops.shape import reshape

_REDUCTIONS = ("none", "mean", "sum")


def _normalize_reduction(values):
    """The deprecated size_average/reduce arguments as a reduction (as torch's _Reduction)."""
    size_average, reduce = values.pop("size_average", None), values.pop("reduce", None)
    values["size_average"] = values["reduce"] = None
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        values["reduction"] = "mean" if size_average and reduce else "sum" if reduce else "none"
    if values["reduction"] not in _REDUCTIONS:
        raise ValueError(f"{values['reduction']} is not a valid value for reduction")


def _dtype_word(dtype):
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int", torch.uint8: "Byte", torch.bool: "Bool"}.get(dtype, str(dtype))


def _class_dim(input):
    if input.ndim == 0:
        raise ValueError("Expected 1 or more dimensions (got 0)")
    return 0 if input.ndim == 1 else 1


def _check_weight(input, weight):
    c = input.shape[_class_dim(input)]
    if weight is not None:
        if weight.ndim != 1 or weight.shape[0] != c:
            raise RuntimeError(f"weight tensor should be defined either for all {c} classes or no classes but got "
                               f"weight tensor of shape: {list(weight.shape)}")
        if weight.dtype != input.dtype:
            raise RuntimeError(f"expected scalar type {_dtype_word(input.dtype)} but found {_dtype_word(weight.dtype)}")


def _index_target_shape(input, target):
    """The per-element loss shape for class-index targets (torch's checks)."""
    if target.dtype not in (torch.int64, torch.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {_dtype_word(target.dtype)}")
    cdim = _class_dim(input)
    if cdim == 0:
        if target.ndim != 0:
            raise RuntimeError(f"0D or 1D target tensor expected, multi-target not supported")
        return ()
    if target.shape[:1] != input.shape[:1]:
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                         f"({target.shape[0] if target.ndim else 1}).")
    expected = (input.shape[0], *input.shape[2:])
    if tuple(target.shape) != expected:
        raise RuntimeError(f"Expected target size {list(expected)}, got {list(target.shape)}")
    return expected


def _reduced(loss_shape, reduction, input):
    return TensorProxy(loss_shape if reduction == "none" else (), input.dtype, input.device)


# --------------------------------------------------------------------------------------------
# nll_loss


@ltorch("torch.nn.functional.nll_loss", aliases=(F.nll_loss,))
def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: Bool | None = None,
             ignore_index: Int = -100, reduce: Bool | None = None, reduction: Str = "mean"):
    """-weight[t] * input[..., t, ...] per element (0 where t == ignore_index), summed, or averaged
    over the weights of the targets that are not ignored. size_average/reduce (deprecated) are
    folded into reduction while binding."""
    _check_weight(input, weight)
    return _reduced(_index_target_shape(input, target), reduction, input)


nll_loss.normalize = _normalize_reduction


@ltorch("(check_targets)", returns_sequence=True, effects=True, differentiable=False)
def check_targets(target: Tensor, *, classes: Int, ignore_index: Int):
    """Raises eager's IndexError ("Target 7 is out of bounds.") for a class-index target outside
    [0, classes) that is not ignore_index. nll_loss's decomposition starts with it: the prims that
    follow (a one-hot pick, fused into a kernel) cannot raise. thunder-fuse keeps it out of the
    kernel, before its call."""
    return ()


def _python_check_targets(values, outs):
    return [f"impl.check_targets({values['target'].name}, {values['classes']}, {values['ignore_index']})"]


check_targets.python = _python_check_targets


def _one_hot(target, input, cdim):
    """Bool of input's shape: True at each element's target class."""
    c = input.shape[cdim]
    classes = prims.broadcast_in_dim(prims.iota(c, start=0, step=1, dtype=torch.int64, device=input.device),
                                     tuple(input.shape), (cdim,))
    t = to_dtype(target, torch.int64)
    t = prims.broadcast_in_dim(t, tuple(input.shape), tuple(d for d in range(input.ndim) if d != cdim))
    return prims.eq(classes, t)


def _pick(x, hot, cdim):
    """x's entry at each target class (the other entries are not read: they may be inf or nan)."""
    zero = prims.full(tuple(x.shape), to_dtype(0, x.dtype), dtype=x.dtype, device=x.device)
    return prims.sum(prims.where(hot, x, zero), (cdim,))


@nll_loss.decompose
def _(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    nll_loss.meta(input, target, weight, None, ignore_index, None, reduction)
    return _nll(input, target, weight, ignore_index, reduction)


def _nll(input, target, weight, ignore_index, reduction, lse=None, dtype=None):
    """nll_loss of input, or, with lse (the rows' logsumexp, target's shape), of log_softmax(input):
    each target's lse - input[target], rounded to dtype (default input's, in which the rest is
    computed), as eager's log_softmax result would be."""
    cdim, dt, dev = _class_dim(input), dtype or input.dtype, input.device
    check_targets(target, classes=input.shape[cdim], ignore_index=ignore_index)
    t = to_dtype(target, torch.int64)
    shape = tuple(t.shape)
    keep = prims.ne(t, ignore_index)
    hot = _one_hot(t, input, cdim)
    zeros = prims.full(shape, to_dtype(0, dt), dtype=dt, device=dev)
    picked = _pick(input, hot, cdim)  # (0 for a target out of range: check_targets raised)
    nlp = to_dtype(prims.neg(picked) if lse is None else prims.sub(lse, picked), dt)  # -log p[target]
    w = None  # each target's weight, 0 where ignored (None: no weight)
    if weight is not None:
        weight = to_dtype(weight, dt)
        w = prims.where(keep, _pick(prims.broadcast_in_dim(weight, tuple(input.shape), (cdim,)), hot, cdim), zeros)
    loss = prims.where(keep, nlp if w is None else prims.mul(nlp, w), zeros)
    if reduction == "none":
        return loss
    dims = tuple(range(len(shape)))
    total = prims.sum(loss, dims)
    if reduction == "sum":
        return total
    return prims.div(total, prims.sum(prims.convert_element_type(keep, dt) if w is None else w, dims))


# --------------------------------------------------------------------------------------------
# cross_entropy


def _cross_entropy_check(input, target, weight, ignore_index, reduction, label_smoothing):
    """The per-element loss shape; whether the targets are class probabilities."""
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    cdim = _class_dim(input)
    if not (input.dtype.is_floating_point or input.dtype.is_complex):
        raise NotImplementedError(f'"log_softmax_lastdim_kernel_impl" not implemented for '
                                  f"'{_dtype_word(input.dtype)}'")
    _check_weight(input, weight)
    if tuple(target.shape) == tuple(input.shape) and target.dtype.is_floating_point:
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        return tuple(s for d, s in enumerate(input.shape) if d != cdim), True
    if target.dtype.is_floating_point and target.ndim == input.ndim and target.shape[:1] != input.shape[:1]:
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                         f"({target.shape[0]}).")
    return _index_target_shape(input, target), False


@ltorch("torch.nn.functional.cross_entropy", aliases=(F.cross_entropy,))
def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: Bool | None = None,
                  ignore_index: Int = -100, reduce: Bool | None = None, reduction: Str = "mean",
                  label_smoothing: Float = 0.0):
    """nll_loss(log_softmax(input, class dim)) for class-index targets, with label smoothing;
    -sum(target * weight * log_softmax(input)) over the classes for class-probability targets
    (target of input's shape, floating point; mean divides by the number of elements)."""
    shape, probs = _cross_entropy_check(input, target, weight, ignore_index, reduction, label_smoothing)
    out = _reduced(shape, reduction, input)
    if probs:
        out.dtype = torch.promote_types(input.dtype, target.dtype)
    return out


cross_entropy.normalize = _normalize_reduction
# torch runs it as log_softmax, then nll_loss: thunder-fuse's cost model counts the torch calls of
# our decomposition's ops, as many passes over the logits or more
cross_entropy.torch_composite = True


@cross_entropy.decompose
def _(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
      label_smoothing=0.0):
    shape, probs = _cross_entropy_check(input, target, weight, ignore_index, reduction, label_smoothing)
    cdim = _class_dim(input)
    c = input.shape[cdim]
    x = to_dtype(input, opmath_dtype(input.dtype))  # (float16/bfloat16: in float32, as torch's log_softmax)
    lse = logsumexp(x, cdim, True)
    if probs or label_smoothing > 0:
        # log_softmax(input) as eager's (rounded to input's dtype): read per element by the sums
        # below, in their pass over a row, never written out
        logp = to_dtype(sub(x, lse), input.dtype)
    w = None if weight is None else reshape(weight, tuple(c if d == cdim else 1 for d in range(input.ndim)))
    if probs:
        if label_smoothing > 0:
            target = add(mul(target, 1 - label_smoothing), label_smoothing / c)
        terms = mul(logp, target) if w is None else mul(mul(logp, target), w)
        if reduction == "none":
            return neg(sum_(terms, cdim))
        total = neg(sum_(terms))
        if reduction == "sum":
            return total
        return div(total, float(input.numel() // c)) if input.numel() else mul(total, float("nan"))
    nll = _nll(x, target, weight, ignore_index, reduction, reshape(lse, shape), input.dtype)
    if label_smoothing == 0:
        return nll
    ignored = eq(target, ignore_index)
    smooth = masked_fill(neg(sum_(logp if w is None else mul(logp, w), cdim)), ignored, 0.0)
    if reduction != "none":
        smooth = sum_(smooth)
    if reduction == "mean":  # over the weights of the targets that count, as nll_loss
        if weight is None:
            kept = sum_(logical_not(ignored), dtype=input.dtype)
        else:
            safe = reshape(masked_fill(target, ignored, 0), (target.numel(),))
            kept = sum_(masked_fill(index_select(weight, 0, safe), reshape(ignored, (target.numel(),)), 0.0))
        smooth = div(smooth, kept)
    return add(mul(nll, 1 - label_smoothing), mul(smooth, label_smoothing / c))
