"""Python source of values: what generated programs write (`py_repr`), and the encoding of a torch
call's non-tensor arguments as source text (`call_source` / `parse_call`), which the generic op
`ltorch.torch_call` keeps in its `args` attribute. Tensors are written as `_0`, `_1`, ...
(the op's operands); parsing accepts only literals, those names and a few torch constructors,
never arbitrary code."""
import ast
import re

import torch

_TENSOR_NAME = re.compile(r"_(\d+)")


class Name:
    """A name in generated code (a tensor variable), with the tensor's type where known."""

    __slots__ = ("name", "shape", "dtype", "device")

    def __init__(self, name, shape=None, dtype=None, device=None):
        self.name, self.shape, self.dtype, self.device = name, shape, dtype, device


def py_repr(v):
    """Python source for a value in a generated program."""
    if isinstance(v, Name):
        return v.name
    if isinstance(v, (torch.dtype, torch.memory_format)):
        return str(v)  # torch.float32, torch.channels_last
    if isinstance(v, torch.device):
        return f"torch.device({str(v)!r})"
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return f"float({str(v)!r})"
        return repr(v)
    if isinstance(v, complex):
        return f"complex({py_repr(v.real)}, {py_repr(v.imag)})"
    if isinstance(v, tuple):
        inner = ", ".join(py_repr(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, list):
        return "[" + ", ".join(py_repr(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{py_repr(k)}: {py_repr(x)}" for k, x in v.items()) + "}"
    if isinstance(v, slice):
        return f"slice({py_repr(v.start)}, {py_repr(v.stop)}, {py_repr(v.step)})"
    if v is Ellipsis:
        return "..."
    return repr(v)


# torch constants written by name (torch.strided, torch.channels_last, ...)
_TORCH_CONSTANTS = (torch.dtype, torch.layout, torch.memory_format)


def literal(v, tensor_index):
    """Source of an argument value; tensor_index(x) gives the operand index of a tensor (or None
    for other values). Raises TypeError for values that have no literal form."""
    if isinstance(v, Name):
        return v.name
    i = tensor_index(v)
    if i is not None:
        return f"_{i}"
    if v is None or v is Ellipsis or isinstance(v, (bool, str)):
        return py_repr(v)
    if isinstance(v, int):
        return repr(int(v))  # (int subclasses: numpy integers, enums)
    if isinstance(v, float):
        return py_repr(float(v))
    if isinstance(v, complex):
        return py_repr(complex(v))
    if isinstance(v, torch.Size):
        return f"torch.Size([{', '.join(repr(int(d)) for d in v)}])"
    if isinstance(v, torch.device):
        return py_repr(v)
    if isinstance(v, _TORCH_CONSTANTS):
        name = str(v)
        if getattr(torch, name.removeprefix("torch."), None) is v:
            return name
    if isinstance(v, (tuple, list)) and not hasattr(type(v), "_fields"):
        inner = ", ".join(literal(x, tensor_index) for x in v)
        if isinstance(v, list):
            return f"[{inner}]"
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, dict) and all(isinstance(k, (str, int)) for k in v):
        return "{" + ", ".join(f"{k!r}: {literal(x, tensor_index)}" for k, x in v.items()) + "}"
    if isinstance(v, slice):
        return f"slice({literal(v.start, tensor_index)}, {literal(v.stop, tensor_index)}, {literal(v.step, tensor_index)})"
    raise TypeError(f"a value of type {type(v).__name__} ({v!r:.60})")


def call_source(args, kwargs, tensor_index):
    """`_0, 1, dim=-1`: the arguments of a call as source (see literal)."""
    parts = [literal(a, tensor_index) for a in args]
    parts += [f"{k}={literal(v, tensor_index)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def parse_call(source, tensors):
    """(args, kwargs) of call_source's text, `_i` replaced by tensors[i]."""
    try:
        tree = ast.parse(f"f({source})", mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"cannot parse the arguments {source!r}: {e.msg}") from None
    args = tuple(_value(a, tensors) for a in tree.args)
    kwargs = {}
    for kw in tree.keywords:
        if kw.arg is None:
            raise ValueError(f"'**' in the arguments {source!r}")
        kwargs[kw.arg] = _value(kw.value, tensors)
    return args, kwargs


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


_CONSTRUCTORS = {"torch.device": torch.device, "slice": slice, "float": float, "complex": complex,
                 "torch.Size": torch.Size}


def _value(node, tensors):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value
    if isinstance(node, ast.Name):
        m = _TENSOR_NAME.fullmatch(node.id)
        if m is None:
            raise ValueError(f"unknown name {node.id!r} in the arguments")
        i = int(m.group(1))
        if i >= len(tensors):
            raise ValueError(f"the arguments refer to tensor _{i}, but the op has {len(tensors)} tensor operands")
        return tensors[i]
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_value(e, tensors) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Dict):
        return {_value(k, tensors): _value(v, tensors) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Attribute):
        name = _dotted(node)
        value = getattr(torch, name.removeprefix("torch."), None) if name and name.startswith("torch.") else None
        if isinstance(value, _TORCH_CONSTANTS):
            return value
        raise ValueError(f"{name!r} is not a torch dtype, layout or memory format")
    if isinstance(node, ast.Call) and not node.keywords:
        ctor = _CONSTRUCTORS.get(_dotted(node.func))
        if ctor is not None:
            return ctor(*(_value(a, tensors) for a in node.args))
    raise ValueError(f"unsupported expression {ast.unparse(node)!r} in the arguments")
