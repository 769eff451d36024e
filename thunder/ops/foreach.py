"""torch._foreach_* calls on lists of traced tensors, recorded as the per-tensor ops they stand
for (`torch._foreach_mul_(ts, 0.9)` as `t.mul_(0.9)` for each t), which fuse like any others:
an optimizer's foreach step becomes the kernels of its per-parameter updates instead of torch
calls on clones of every state tensor. On the CPU torch computes each tensor so too (its slow
path); a ternary op's scalars given as a tensor (Adam's step sizes) are read one per tensor, as
torch reads them. Calls of other forms (lists holding what is no traced tensor, lists of other
lengths) are left to the fallback, which runs torch's own."""
import functools

import torch

from thunder.core.proxies import TensorProxy

_UNARY = frozenset({"abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor",
                    "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt",
                    "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc"})
_BINARY = frozenset({"add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max", "pow", "lerp"})
_WITH_VALUE = frozenset({"addcmul", "addcdiv"})  # (self, tensor1, tensor2, value: a number, numbers or a tensor of them)
NOT_HANDLED = object()


def per_tensor(fn):
    """fn(*args, **kwargs) of a torch._foreach_* function, as per-tensor calls: a callable giving
    the call's result, or NOT_HANDLED where the call has another form; None for other functions."""
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not name.startswith("_foreach_") or getattr(torch, name, None) is not fn:
        return None
    base = name[len("_foreach_"):]
    inplace = base.endswith("_")
    base = base.rstrip("_")
    if base not in _UNARY | _BINARY | _WITH_VALUE:
        return None
    return functools.partial(_call, base, inplace)


def _call(base, inplace, *args, **kwargs):
    lists = [a for a in (*args, *kwargs.values()) if isinstance(a, (list, tuple))]
    if not lists or not isinstance(args[0] if args else None, (list, tuple, float, int)):
        return NOT_HANDLED
    n = len(lists[0])
    if any(len(x) != n for x in lists) or not all(isinstance(t, TensorProxy) or type(t) in (int, float)
                                                  for x in lists for t in x):
        return NOT_HANDLED
    if base in _WITH_VALUE:
        if len(args) > 3:
            args, kwargs = args[:3], {**kwargs, "value": args[3]}
        value = kwargs.get("value", 1)
        if isinstance(value, TensorProxy) and (value.ndim != 1 or value.shape[0] != n):
            return NOT_HANDLED
    results = []
    for i in range(n):
        a = [x[i] if isinstance(x, (list, tuple)) else x for x in args]
        kw = {k: v[i] if isinstance(v, (list, tuple)) or k == "value" and isinstance(v, TensorProxy) else v
              for k, v in kwargs.items()}
        if inplace:
            if not isinstance(a[0], TensorProxy):
                return NOT_HANDLED
            getattr(a[0], f"{base}_")(*a[1:], **kw)
            results.append(a[0])
        else:
            results.append(getattr(torch, base)(*a, **kw))
    return results
