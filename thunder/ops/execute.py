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
