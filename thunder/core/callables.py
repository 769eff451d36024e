"""Torch callables by name: which callables thunder records as a generic `ltorch.torch_call`
when the registry has no entry for them (`is_torch_op`), and the stable, printable name that
such an op keeps and that generated programs call (`callable_name`, `resolve`)."""
import functools
import types

import torch

# namespaces searched for a public name, in order of preference
_PUBLIC = ("torch", "torch.nn.functional", "torch.special", "torch.linalg", "torch.fft", "torch.Tensor")
# modules of torch's generated bindings of aten ops (torch.*, F.*, torch.special.*, ...)
_BINDING_MODULES = ("torch._C._nn", "torch._C._linalg", "torch._C._fft", "torch._C._special",
                    "torch._C._sparse", "torch._C._nested")


def is_torch_op(fn):
    """A native binding of a torch operation: a function of torch's generated bindings, a method
    of torch.Tensor implemented in C, or a torch.ops.aten overload. (torch's Python functions are
    interpreted instead, so the registered ops they call are seen.)"""
    tp = type(fn)
    if tp is types.BuiltinFunctionType:
        if fn.__self__ is None:  # torch.cumprod and the rest of torch._C._VariableFunctions
            return fn.__qualname__.startswith("_VariableFunctionsClass.")
        return getattr(fn.__self__, "__name__", None) in _BINDING_MODULES
    if tp is types.MethodDescriptorType or tp is types.WrapperDescriptorType:
        return fn.__objclass__ is torch._C.TensorBase
    if isinstance(fn, torch._ops.OpOverload):
        return fn.namespace == "aten"
    if isinstance(fn, torch._ops.OpOverloadPacket):
        return fn._qualified_op_name.startswith("aten::")
    return False  # (other torch.ops namespaces, e.g. the profiler's, run natively)


@functools.cache
def _public_names():
    names = {}
    for ns_name in _PUBLIC:
        ns = resolve(ns_name)
        for attr in dir(ns):
            try:
                obj = getattr(ns, attr)
            except Exception:
                continue
            if callable(obj) or isinstance(obj, types.GetSetDescriptorType):
                names.setdefault(id(obj), (f"{ns_name}.{attr}", obj))
    return names


def callable_name(fn):
    """A name that resolve() maps back to fn ("torch.cumprod", "torch.Tensor.cumprod",
    "torch.ops.aten.cumprod.default"), or None when fn has none."""
    if type(fn) is types.MethodWrapperType and type(fn.__self__) is types.GetSetDescriptorType:
        prop = callable_name(fn.__self__)  # a property's getter: torch.Tensor.real.__get__
        return f"{prop}.__get__" if prop is not None else None
    if isinstance(fn, torch._ops.OpOverload):
        ns, name = fn._schema.name.split("::")
        name = f"torch.ops.{ns}.{name}.{fn._overloadname}"
    elif isinstance(fn, torch._ops.OpOverloadPacket):
        name = f"torch.ops.{fn._qualified_op_name.replace('::', '.')}"
    else:
        entry = _public_names().get(id(fn))
        if entry is not None and entry[1] is fn:
            return entry[0]
        owner = getattr(fn, "__self__", None) or getattr(fn, "__objclass__", None)
        module = getattr(owner, "__name__", None) if isinstance(owner, types.ModuleType) else None
        qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
        if qualname and qualname.startswith("_VariableFunctionsClass."):
            owner, module = qualname, "torch._C._VariableFunctions"
        elif owner is torch._C.TensorBase:
            module = "torch._C.TensorBase"
        elif module is None:
            module = getattr(fn, "__module__", None)
        if not module or not qualname or "<" in qualname:
            return None
        name = f"{module}.{qualname.split('.')[-1] if owner is not None else qualname}"
    try:
        ok = resolve(name) == fn
    except (AttributeError, KeyError):
        ok = False
    return name if ok else None


def resolve(name):
    """The object a dotted name starting with "torch" refers to."""
    parts = name.split(".")
    if parts[0] != "torch":
        raise KeyError(f"{name!r} is not a torch name")
    obj = torch
    for part in parts[1:]:
        obj = getattr(obj, part)
    return obj


def display_name(fn):
    """A readable name of any callable, for messages."""
    return callable_name(fn) or f"{getattr(fn, '__module__', None) or 'torch'}.{getattr(fn, '__qualname__', fn)}"
