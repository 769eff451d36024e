"""Inputs and outputs: nested Python values <-> flat lists of tensors plus a spec of the rest.

A spec is a small tree: ("tensor", i), ("const", value), ("object", value) (checked by
identity), ("tuple"|"list", [specs]), ("dict", [(key, spec)]), ("namedtuple"|"structseq", type,
[specs]) (structseq: torch.return_types.*), ("dataclass", type, [(field, spec)]), ("partial",
func spec, [specs], [(keyword, spec)]), ("number", k) (a float argument the program takes as a
runtime number, k its place among Inputs.numbers: cache="symbolic values") and, for outputs
only, ("instance", type, [(attribute, spec)]) (another object holding tensors the trace computed), ("input", k) (a tensor the trace read,
returned as it is), ("inference", spec) and ("no_grad_view", spec, modified). Constants are Python scalars and the other values a
cache entry is specialised on."""
import dataclasses
import functools
import types

import torch

from thunder.core import trace as tracing
from thunder.core import ndarray
from thunder.core.dtypes import is_numpy_scalar
from thunder.core.numbers import NumberProxy
from thunder.core.proxies import MODIFIED, TensorProxy, proxy_for
from thunder.core.pysource import py_repr
from thunder.core.trace import ref
from thunder.ops.registry import OPS
from thunder.core.strides import contiguous, is_dense_layout

CONSTANT_TYPES = (bool, int, float, complex, str, type(None), torch.dtype, torch.device, slice,
                  type(Ellipsis), torch.Size)


class UnpackError(ValueError):
    pass


def _is_plain_dataclass(x):
    """A dataclass instance whose fields are all init fields (so it can be rebuilt from them)."""
    return (dataclasses.is_dataclass(x) and not isinstance(x, type)
            and all(f.init for f in dataclasses.fields(x)))


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _is_structseq(x):
    """torch.return_types.sort and the like: tuples with field names, built from one sequence."""
    return isinstance(x, tuple) and type(x).__module__ == "torch.return_types"


class Inputs:
    """The tensors a trace reads, in the order it reads them (the arguments', then those read from
    outside them: state.py), with their proxies.

    shared: {index: storage number} for tensors that share memory with another input the trace
    updates in place (alias_groups). Each of those is a view (ltorch.as_strided) of a proxy of its
    storage, a 1-d tensor over the whole storage, so an in-place update of one reaches the others
    as in eager; the program takes the storages in their place (params())."""

    def __init__(self, shared=None, numbers=False):
        self.tensors, self.proxies = [], []
        # numbers (cache="symbolic values"): float arguments are runtime numbers (NumberProxy
        # inputs, scalar parameters of the program after its tensors), not constants
        self.float_numbers = numbers
        self.numbers = []  # (proxy, value) of each
        self.shared = dict(shared or {})
        self.storages = []  # (proxy, tensor, index of the first tensor of that storage)
        self._storage_proxies = {}  # storage number -> proxy
        self._by_id = {}  # id(tensor) -> proxy (the tensors are kept alive by self.tensors)

    def add(self, t, name):
        """Index and proxy of a tensor the trace reads."""
        i = len(self.tensors)
        self.tensors.append(t)
        k = self.shared.get(i)
        if k is None:
            p = proxy_for(t, tracing.new_name(name) or name)
        else:
            storage = self._storage_proxies.get(k)
            if storage is None:
                whole = storage_view(t)
                storage = self._storage_proxies[k] = proxy_for(whole, tracing.new_name(f"{name}_storage"))
                self.storages.append((storage, whole, i))

            with torch.enable_grad():  # (an input, even when first read under no_grad: not detached)
                p = OPS["ltorch.as_strided"](storage, tuple(t.shape), tuple(t.stride()), t.storage_offset())
        self.proxies.append(p)
        self._by_id[id(t)] = p
        return i, p

    def add_number(self, value, name):
        """Index and NumberProxy of a float argument the program takes as a runtime number."""
        self.numbers.append((NumberProxy(float, tracing.new_name(name) or name, value), value))
        return len(self.numbers) - 1, self.numbers[-1][0]

    def proxy_of(self, t):
        """The proxy of t when t (this object) is a tensor the trace reads, else t."""
        return self._by_id.get(id(t), t)

    def param_index(self, p):
        """The place among params() of p when p is the proxy of a tensor the trace reads (updated
        in place or not), else None."""
        if p.input_name is None:
            return None
        for k, (q, _) in enumerate(self.params()):
            if q is p:
                return k
        return None

    def params(self):
        """(proxy, tensor) of the program's parameters: the tensors read, storages in place of the
        tensors that are views of them."""
        return ([(p, t) for i, (p, t) in enumerate(zip(self.proxies, self.tensors)) if i not in self.shared]
                + [(p, t) for p, t, _ in self.storages])


def storage_view(t):
    """A 1-d tensor over the whole storage of t (of t's dtype); of the tensor t is a view of,
    when there is one, so autograd sends gradients for any part of the storage there."""
    root = _autograd_root(t)
    return root.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)


def _autograd_root(t):
    base = t._base
    return base if base is not None and base.dtype == t.dtype else t


def storage_address(t):
    """The address of t's storage (0 where it has no memory), read without asking for a writable
    pointer: `untyped_storage().data_ptr()` does ask, and so gives a copy-on-write storage (a
    packed weight's, ops/packed_linear.py) a buffer of its own at every call."""
    ptr = t.const_data_ptr()
    return ptr - t.storage_offset() * t.element_size() if ptr else 0


def alias_groups(tensors, mutated):
    """{index: storage number} for the tensors that share a storage with another of `tensors`,
    one of them updated in place by the trace (mutated: indices). Raises NotImplementedError
    where a view of the storage cannot stand for them."""
    by_storage = {}
    for i, t in enumerate(tensors):
        ptr = storage_address(t)
        if ptr:  # (no memory: nothing to share)
            by_storage.setdefault((t.device, ptr), []).append(i)
    shared = {}
    groups = [m for m in by_storage.values() if len(m) > 1 and set(m) & set(mutated)]
    for k, members in enumerate(groups):
        group = [tensors[i] for i in members]
        why = ("of different dtypes" if len({t.dtype for t in group}) > 1
               else "some requiring grad, some not" if len({t.requires_grad for t in group}) > 1
               else "requiring grad, not views of one tensor" if group[0].requires_grad and len(
                   {id(_autograd_root(t)) for t in group}) > 1
               else "one overlapping itself (an expanded tensor)" if any(
                   torch._debug_has_internal_overlap(t) == 1 for t in group) else None)
        if why is not None:
            raise NotImplementedError(f"thunder: inputs that share memory, one of them updated in place, {why}, are "
                                      "not supported. Workaround: pass a clone of one of them.")
        for i in members:
            shared[i] = k
    return shared


def flatten_inputs(value, name, inputs, strict):
    """Spec of an input value; tensors found are added to inputs (an Inputs; proxies named
    after where they sit: x, x_0, x_key)."""
    if isinstance(value, torch.Tensor):
        i, p = inputs.add(value, name)
        return ("tensor", i), p
    if isinstance(value, torch.Size):
        return ("const", value), value
    if ndarray.is_array(value) and (t := ndarray.as_input_tensor(value)) is not None:
        i, p = inputs.add(t, name)  # (its memory, read at call time: the prologue's torch.from_numpy)
        return ("ndarray", i, value.dtype, type(value)), ndarray.ArrayProxy(p, value)
    if type(value) is float and inputs.float_numbers:
        k, p = inputs.add_number(value, name)
        return ("number", k), p
    if isinstance(value, CONSTANT_TYPES) or is_numpy_scalar(value):
        return ("const", value), value
    if _is_namedtuple(value):
        parts = [flatten_inputs(v, f"{name}_{f}", inputs, strict) for f, v in zip(value._fields, value)]
        return ("namedtuple", type(value), [s for s, _ in parts]), type(value)(*(p for _, p in parts))
    if _is_plain_dataclass(value) and not strict:
        fields = [f.name for f in dataclasses.fields(value)]
        parts = [flatten_inputs(getattr(value, f), f"{name}_{f}", inputs, strict) for f in fields]
        proxy = dataclasses.replace(value, **{f: p for f, (_, p) in zip(fields, parts)})
        return ("dataclass", type(value), [(f, s) for f, (s, _) in zip(fields, parts)]), proxy
    if isinstance(value, (tuple, list)):
        parts = [flatten_inputs(v, f"{name}_{i}", inputs, strict) for i, v in enumerate(value)]
        kind = "tuple" if isinstance(value, tuple) else "list"
        proxy = tuple(p for _, p in parts)
        return (kind, [s for s, _ in parts]), proxy if kind == "tuple" else list(proxy)
    if isinstance(value, dict):
        items = []
        proxy = {}
        for k, v in value.items():
            if not isinstance(k, (str, int)):
                raise UnpackError(f"Cannot unpack object of type {type(k).__name__} (a dict key)")
            key_name = f"{name}_{k}" if isinstance(k, str) and k.isidentifier() else f"{name}_{len(items)}"
            s, p = flatten_inputs(v, key_name, inputs, strict)
            items.append((k, s))
            proxy[k] = p
        return ("dict", items), proxy
    if type(value) is functools.partial and not strict:  # its bound arguments are inputs too
        fs, fp = flatten_inputs(value.func, f"{name}_func", inputs, strict)
        parts = [flatten_inputs(v, f"{name}_{i}", inputs, strict) for i, v in enumerate(value.args)]
        kparts = [(k, *flatten_inputs(v, f"{name}_{k}", inputs, strict)) for k, v in value.keywords.items()]
        proxy = functools.partial(fp, *(p for _, p in parts), **{k: p for k, _, p in kparts})
        return ("partial", fs, [s for s, _ in parts], [(k, s) for k, s, _ in kparts]), proxy
    if strict:
        raise UnpackError(
            f"Cannot unpack object of type {type(value).__name__}. thunder.functional.jit accepts "
            "tensors, numbers, strings, None, dtypes, devices, slices, torch.Size and nested "
            "tuples/lists/dicts of those; use thunder.jit for other objects.")
    return ("object", value), value


def flatten_outputs(value, refs, inputs=None, _open=None, resolve=None):
    """Spec of the jitted function's return value; its tensor proxies are appended to refs.
    inputs (an Inputs): a tensor the trace read (argument, parameter, buffer) returned as such is
    ("input", k), k its place among inputs.params(): the program returns that very object, as
    eager does (same identity, requires_grad and grad_fn; after the copy-back of an in-place
    update). A tensor made under torch.inference_mode() is ("inference", spec), a view made under
    torch.no_grad() of a tensor that requires grad ("no_grad_view", spec, modified: updated in place
    since, it or its base). Other objects that
    hold tensors the trace computed (transformers' DynamicCache) are rebuilt per call from their
    attributes ("instance"); objects that hold none are returned as they are."""
    _open = set() if _open is None else _open
    if isinstance(value, NumberProxy):  # (a runtime number is a result of the program too)
        refs.append(ref(value))
        return ("tensor", len(refs) - 1)
    if isinstance(value, TensorProxy):
        k = inputs.param_index(value) if inputs is not None else None
        if k is not None:
            return ("input", k)
        r = ref(value)
        if r in refs:  # returned twice: the same object twice, as in eager
            spec = ("tensor", refs.index(r))
        else:
            refs.append(r)
            spec = ("tensor", len(refs) - 1)
        strides = _eager_layout(value)
        if strides is not None:
            spec = ("strided", spec, strides)
        if value.no_grad_view:
            spec = ("no_grad_view", spec, value.no_grad_view == MODIFIED)
        return ("inference", spec) if value.inference else spec
    proxy = resolve(value) if resolve is not None and not _open and isinstance(value, torch.Tensor) else None
    if proxy is not None:  # a parameter or buffer of the module (via native code): that very tensor
        return flatten_outputs(proxy, refs, inputs, _open)
    if isinstance(value, torch.Tensor):
        if _open:  # inside an object: the tensor it holds (a state tensor, a global), as eager's object does
            return ("const", value)
        raise NotImplementedError(
            "thunder: the jitted function returns a tensor that is not computed from its inputs "
            "(a global or a constant); return it outside the jitted function or pass it as an input")
    if isinstance(value, CONSTANT_TYPES):
        return ("const", value)
    if _is_namedtuple(value) or _is_structseq(value):
        kind = "namedtuple" if _is_namedtuple(value) else "structseq"
        return (kind, type(value), [flatten_outputs(v, refs, inputs, _open, resolve) for v in value])
    if isinstance(value, (tuple, list)):
        return ("tuple" if isinstance(value, tuple) else "list",
                [flatten_outputs(v, refs, inputs, _open, resolve) for v in value])
    if _is_plain_dataclass(value):  # before dict: transformers' ModelOutput is both
        return ("dataclass", type(value), [(f.name, flatten_outputs(getattr(value, f.name), refs, inputs, _open,
                                                                    resolve))
                                           for f in dataclasses.fields(value)])
    if isinstance(value, dict):
        return ("dict", [(k, flatten_outputs(v, refs, inputs, _open, resolve)) for k, v in value.items()])
    return _flatten_object(value, refs, inputs, _open, resolve)


def _flatten_object(value, refs, inputs, _open, resolve=None):
    state = getattr(value, "__dict__", None)
    if type(state) is not dict or isinstance(value, (type, types.ModuleType, types.FunctionType, torch.nn.Module)):
        return ("const", value)
    if id(value) in _open:
        raise NotImplementedError(f"thunder: returning a {type(value).__name__} that refers to itself and holds "
                                  "tensors computed by the function is not supported. Workaround: return its tensors.")
    _open.add(id(value))
    n = len(refs)
    fields = [(k, flatten_outputs(v, refs, inputs, _open, resolve)) for k, v in state.items()]
    _open.discard(id(value))
    if len(refs) == n and not any(s[0] == "input" for s in iter_specs([c for _, c in fields])):
        return ("const", value)  # no tensors of the trace inside: the object itself
    return ("instance", type(value), fields)


def rebuild_object(cls, state):
    """An object of class cls with attributes `state`, made as copy/pickle make one (without
    calling __init__): how the program returns objects holding tensors it computed."""
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj


def _eager_layout(p):
    """Eager's strides of a result where they are a dense layout other than row-major (a
    channels-last result): the program gives its result those (impl.with_strides), as fused
    kernels write row-major. None otherwise. (Called under the trace's context: the entry then
    checks the strides of the inputs the result's come from.)"""
    if p.meta is None:
        return None
    tracing.strides_decide(p)  # (the layout follows the inputs' strides: the entry checks them)
    shape, strides = tuple(p.meta.shape), tuple(p.meta.stride())
    if not all(type(n) is int for n in (*shape, *strides)) or strides == contiguous(shape):
        return None
    return strides if is_dense_layout(shape, strides) else None


def rebuild_source(spec, flat, constants=None, params=None):
    """A Python expression that rebuilds the output from the flat result names (and the program's
    parameter names, params, for inputs returned as they are). Values that have no literal form
    go into `constants` (name -> value) for the generated code's globals."""
    kind = spec[0]
    if kind == "tensor":
        return flat[spec[1]]
    if kind == "input":
        return params[spec[1]] if params is not None else f"_input{spec[1]}"
    if kind == "inference":
        return f"impl.inference_tensor({rebuild_source(spec[1], flat, constants, params)})"
    if kind == "no_grad_view":
        modified = ", modified=True" if spec[2] else ""
        return f"impl.no_grad_view({rebuild_source(spec[1], flat, constants, params)}{modified})"
    if kind == "strided":
        return f"impl.with_strides({rebuild_source(spec[1], flat, constants, params)}, {spec[2]!r})"
    if kind == "const":
        v = spec[1]
        if isinstance(v, (torch.Size, torch.dtype, torch.device)) or constants is not None and not _has_literal(v):
            if constants is None:
                return repr(v)
            name = f"_const{len(constants)}"
            constants[name] = v
            return name

        return py_repr(v)
    if kind in ("tuple", "list"):
        parts = [rebuild_source(s, flat, constants, params) for s in spec[1]]
        if kind == "list":
            return "[" + ", ".join(parts) + "]"
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    if kind in ("namedtuple", "structseq"):
        parts = ", ".join(rebuild_source(s, flat, constants, params) for s in spec[2])
        if kind == "structseq":
            parts = f"({parts},)"  # built from one sequence
        if constants is None:
            return f"{spec[1].__name__}({parts})"
        name = f"_const{len(constants)}"
        constants[name] = spec[1]
        return f"{name}({parts})"
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {rebuild_source(s, flat, constants, params)}" for k, s in spec[1]) + "}"
    if kind == "dataclass":
        fields = ", ".join(f"{f}={rebuild_source(s, flat, constants, params)}" for f, s in spec[2])
        if constants is None:
            return f"{spec[1].__name__}({fields})"
        name = f"_const{len(constants)}"
        constants[name] = spec[1]
        return f"{name}({fields})"
    if kind == "instance":
        state = "{" + ", ".join(f"{k!r}: {rebuild_source(s, flat, constants, params)}" for k, s in spec[2]) + "}"
        if constants is None:
            return f"rebuild_object({spec[1].__name__}, {state})"
        cls, rebuild = f"_const{len(constants)}", f"_const{len(constants) + 1}"
        constants[cls], constants[rebuild] = spec[1], rebuild_object
        return f"{rebuild}({cls}, {state})"
    raise ValueError(kind)


def _has_literal(v):
    return isinstance(v, (bool, int, str, type(None))) or isinstance(v, float) and v == v and abs(v) != float("inf")


def tensor_paths(arg_specs, kw_specs):
    """{tensor index: the prologue's expression for it (args[0][1], kwargs['x'].weight)}."""
    paths = {}

    def walk(spec, expr):
        kind = spec[0]
        if kind == "tensor":
            paths[spec[1]] = expr
        elif kind in ("tuple", "list"):
            for i, s in enumerate(spec[1]):
                walk(s, f"{expr}[{i}]")
        elif kind in ("namedtuple", "structseq"):
            for i, s in enumerate(spec[2]):
                walk(s, f"{expr}[{i}]")
        elif kind == "dict":
            for k, s in spec[1]:
                walk(s, f"{expr}[{k!r}]")
        elif kind == "dataclass":
            for f, s in spec[2]:
                walk(s, f"{expr}.{f}")
        elif kind == "partial":
            walk(spec[1], f"{expr}.func")
            for i, s in enumerate(spec[2]):
                walk(s, f"{expr}.args[{i}]")
            for k, s in spec[3]:
                walk(s, f"{expr}.keywords[{k!r}]")

    for i, s in enumerate(arg_specs):
        walk(s, f"args[{i}]")
    for k, s in kw_specs:
        walk(s, f"kwargs[{k!r}]")
    return paths


def iter_specs(specs):
    """Every spec node in a list of specs, depth first."""
    for s in specs:
        yield s
        if s[0] in ("tuple", "list"):
            yield from iter_specs(s[1])
        elif s[0] in ("namedtuple", "structseq"):
            yield from iter_specs(s[2])
        elif s[0] == "dict":
            yield from iter_specs([c for _, c in s[1]])
        elif s[0] in ("dataclass", "instance"):
            yield from iter_specs([c for _, c in s[2]])
        elif s[0] == "partial":
            yield from iter_specs([s[1], *s[2], *(c for _, c in s[3])])
