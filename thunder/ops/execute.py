"""How the torch executor calls an op: one convention shared by eager runs and generated code."""
import math
import operator

import torch

from thunder.ops import impl

# The names a generated program can refer to; torch_name strings are resolved in it.
NAMESPACE = {"torch": torch, "operator": operator, "impl": impl, "math": math}  # (math: dialects/sizes.py)


def resolve(torch_name):
    obj = NAMESPACE[torch_name.split(".")[0]]
    for part in torch_name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


# torch.Tensor methods whose `_` form changes the tensor's metadata (shape, strides, names,
# autograd flags) rather than its values: x.t_() is no in-place form of x.t()
METADATA_METHODS = frozenset({
    "t", "transpose", "swapdims", "swapaxes", "squeeze", "unsqueeze", "as_strided", "resize", "resize_as",
    "set", "detach", "rename", "share_memory", "requires_grad", "retain_grad"})


def inplace_method(torch_name):
    """"torch.Tensor.add_" for "torch.add" or "torch.Tensor.add" (a torch.Tensor method that
    writes the same op's result into its first argument), "impl.setitem_" for "impl.setitem";
    None where there is none."""
    namespace, _, fn = torch_name.rpartition(".")
    if namespace in ("torch", "torch.Tensor") and not fn.endswith("_") and fn not in METADATA_METHODS and \
            callable(getattr(torch.Tensor, f"{fn}_", None)):
        return f"torch.Tensor.{fn}_"
    if namespace == "impl" and callable(getattr(impl, f"{fn}_", None)):
        return f"impl.{fn}_"
    return None


def call_args(op, values):
    """(args, kwargs) for calling op.torch_name: parameters before `*` positionally, the rest by
    keyword, keyword arguments left out when they equal the default."""
    args, kwargs = [], {}
    for p in op.params:
        v = values[p.name]
        if p.name.startswith("_"):
            continue  # private knobs of torch's Python wrappers (F.softmax's _stacklevel)
        if p.kw_only:
            if not (p.has_default and _same(v, p.default)):
                kwargs[p.name] = v
        else:
            args.append(v)
    return args, kwargs


def _same(a, b):
    return type(a) is type(b) and a == b or (a is None and b is None)


def run_eagerly(op, values):
    args, kwargs = call_args(op, values)
    return resolve(op.torch_name)(*args, **kwargs)
