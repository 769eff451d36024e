"""torch's decompositions of calls without a registry entry, recorded as registry ops (so that
fusion sees through them) instead of one generic ltorch.torch_call.

The call runs on meta tensors under a TorchDispatchMode that sees the aten ops it dispatches
(torch has already decomposed its CompositeImplicitAutograd ops at that point). An aten op the
registry stands for is kept as a step; one it does not is replaced by its decomposition in
torch._decomp's table, whose ops the mode sees in turn; an op with neither, an in-place op or a
random one ends the attempt. The steps are then replayed on the proxies with the registry's ops
(`registry_op`: the op whose torch function has the aten op's name, or an entry of `_explicit`),
each result checked against the metadata torch computed for it (with what the steps put on the
meta device moved to the call's device); any mismatch ends the attempt too, leaving the trace as
it was. Attempts are cached per call signature."""
import functools

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from thunder.core import trace as tracing
from thunder.core.callables import resolve
from thunder.core.proxies import TensorProxy
from thunder.core.pysource import parse_call
from thunder.ops import registry
from thunder.ops import creation, shape

aten = torch.ops.aten

# where a registry op with the aten op's name is looked up, in order
_OWNERS = (torch, torch.Tensor, torch.nn.functional, torch.special, torch.linalg)
# keyword arguments of aten ops that registry ops do not take, dropped when they ask for nothing
_NO_OP_KWARGS = {"layout": (None, torch.strided), "pin_memory": (None, False), "implicit": (False,),
                 "memory_format": (None, torch.preserve_format), "non_blocking": (False,)}


@functools.cache
def _explicit():
    def slice_(x, dim=0, start=None, end=None, step=1):
        dim = dim % max(x.ndim, 1)
        return x[(slice(None),) * dim + (slice(start, end, step),)]

    def to_copy(x, *, dtype=None, device=None, **kw):
        return creation.to(x, device=device, dtype=dtype)

    return {
        aten.slice.Tensor: slice_,
        aten._to_copy.default: to_copy,
        aten._unsafe_view.default: shape.reshape,
        aten._reshape_alias.default: lambda x, size, stride: shape.reshape(x, size),
        aten.alias.default: lambda x: x,
        aten.real.default: _real,
        torch.ops.prims.convert_element_type.default: lambda x, dtype: creation.to(x, dtype=dtype),
    }


def _real(x):
    if x.dtype.is_complex:
        raise TypeError("no registry op for the real part of a complex tensor")
    return x  # (torch.real of a real tensor is the tensor itself)


@functools.cache
def registry_op(func):
    """The registry op (or explicit replacement) that computes aten op `func`, or None."""
    explicit = _explicit().get(func)
    if explicit is not None:
        return explicit
    ns, name = func._schema.name.split("::")
    if ns != "aten" or func._schema.is_mutable:
        return None
    for owner in _OWNERS:
        op = registry.lookup_callable(getattr(owner, name, None))
        if op is not None:
            return op
    return None


class _Unmapped(Exception):
    pass


@functools.cache
def _decompositions():
    from torch._decomp import decomposition_table  # heavy: torch's whole decomposition table, on first use

    return decomposition_table


class _Steps(TorchDispatchMode):
    """Records the aten ops with a registry op; decomposes the others."""

    def __init__(self):
        super().__init__()
        self.steps = []  # (func, args, kwargs, out) with meta tensors

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._schema.is_mutable or torch.Tag.nondeterministic_seeded in func.tags:
            raise _Unmapped(func)
        if registry_op(func) is not None:
            out = func(*args, **kwargs)
            self.steps.append((func, args, kwargs, out))
            return out
        decomposition = _decompositions().get(func)
        if decomposition is None:
            raise _Unmapped(func)
        with self:
            return decomposition(*args, **kwargs)


@functools.lru_cache(maxsize=1024)
def _plan(name, source, operands, default_dtype):
    """(steps, results) with tensors as indices into the values (operands first, then each
    step's tensors), or None when the call does not decompose into registry ops."""
    metas = [torch.empty(shape, dtype=dtype, device="meta") for shape, dtype, _ in operands]
    mode = _Steps()
    try:
        args, kwargs = parse_call(source, metas)
        with mode:
            out = resolve(name)(*args, **kwargs)
    except _Unmapped:
        return None
    except Exception:  # a decomposition that does not take these arguments
        return None
    index = {id(t): i for i, t in enumerate(metas)}
    count = [len(metas)]
    # the steps ran on meta tensors: what they put on "meta" belongs on the call's device
    device = next((d for _, _, d in operands if d.type != "cpu"), operands[0][2] if operands else torch.device("cpu"))

    def ref(v, define=False):
        if isinstance(v, torch.Tensor):
            if define:  # (a step may return its input itself: the newest value wins)
                index[id(v)] = count[0]
                count[0] += 1
            elif id(v) not in index:
                raise _Unmapped(v)  # a tensor no recorded op produced
            return _Ref(index[id(v)], tuple(v.shape), v.dtype, device if v.device.type == "meta" else v.device)
        if isinstance(v, torch.device) and v.type == "meta":
            return device  # (new_ones, full_like, ...: device=x.device)
        if isinstance(v, str) and v == "meta":
            raise _Unmapped(v)
        if isinstance(v, (tuple, list)):
            return type(v)(ref(x, define) for x in v) if type(v) in (tuple, list) else tuple(ref(x, define) for x in v)
        return v

    try:
        steps = [(func, ref(a), {k: ref(v) for k, v in kw.items() if v not in _NO_OP_KWARGS.get(k, ())}, ref(o, True))
                 for func, a, kw, o in mode.steps]
        results = [ref(t) for t in _tensor_leaves(out) if not any(t is m for m in metas)]
    except _Unmapped:
        return None
    return steps, results


class _Ref:
    __slots__ = ("index", "shape", "dtype", "device")

    def __init__(self, index, shape, dtype, device):
        self.index, self.shape, self.dtype, self.device = index, shape, dtype, device


def _tensor_leaves(v):
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from _tensor_leaves(x)


class _Mismatch(Exception):
    pass


def replay(name, source, operands, ev):
    """The call's result tensors (ev.results' order) computed by registry ops recorded in the
    current trace, or None (nothing recorded) when it does not decompose into them."""
    if not all(registry_op(f) is not None or f in _decompositions() for f in ev.aten):
        return None
    plan = _plan(name, source, tuple((tuple(t.shape), t.dtype, t.device) for t in operands), torch.get_default_dtype())
    if plan is None:
        return None
    steps, results = plan
    ctx = tracing.current()
    n_symbols = len(ctx.symbols)
    views = [list(p.views) for p in operands]
    values = list(operands)

    def value(v):
        if isinstance(v, _Ref):
            return values[v.index]
        if isinstance(v, (tuple, list)):
            return type(v)(value(x) for x in v)
        return v

    def define(template, got):
        if isinstance(template, _Ref):
            if not isinstance(got, TensorProxy) or (tuple(got.shape), got.dtype, got.device) != (
                    template.shape, template.dtype, template.device):
                raise _Mismatch()
            values.append(got)
        elif isinstance(template, (tuple, list)):
            if not isinstance(got, (tuple, list)) or len(got) != len(template):
                raise _Mismatch()
            for t, g in zip(template, got):
                define(t, g)

    try:
        for func, args, kwargs, out in steps:
            define(out, registry_op(func)(*value(args), **{k: value(v) for k, v in kwargs.items()}))
        outs = [value(r) for r in results]
    except (_Mismatch, TypeError, ValueError, RuntimeError, NotImplementedError):
        del ctx.symbols[n_symbols:]
        outs = None
    for p, v in zip(operands, views):  # the steps' views of the operands are internal to the call
        p.views[:] = v
    return outs
