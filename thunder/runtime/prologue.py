"""Prologues: generated straight-line Python that checks a call's inputs against what a cache
entry was compiled for, unpacks the tensors and calls the entry's program.

An entry function returns MISS when any check fails (or reading what it checks raises), so the
cache can try the next entry. Checks: the arguments' structure, tensor metadata and Python
values (structure.py specs), then the guards (guards.py) on what the trace read from outside
its arguments, cheapest first, then the tensors read from outside (state.py)."""
import copy
import functools
import math

import torch

try:  # torch's C++ check of tensor metadata (dynamo's guards use it), part of torch._C
    from torch._C._dynamo.guards import TensorGuards
except ImportError:  # (a torch without it: each tensor checked in Python)
    TensorGuards = None

from thunder.core.strides import dense_in_order, dense_order
from thunder.runtime import code_objects
from thunder.runtime.autocast_casts import outside_autocast
from thunder.runtime import guards as guards_
from thunder.runtime.state import APPEND, Constant, Item
from thunder.runtime.structure import storage_address, storage_view

MISS = object()


def shares_storage(mutated, others):
    """Whether a tensor of `mutated` shares its storage with another tensor of mutated or others."""
    seen = set()
    for t in mutated:
        ptr = storage_address(t)
        if ptr in seen:
            return True
        if ptr:  # (no memory, nothing to share)
            seen.add(ptr)
    for t in others:
        if storage_address(t) in seen:
            return True
    return False


class TensorsCheck:
    """Whether tensors match spec, a tuple of (type, dtype, device, requires_grad, shape, strides
    or None: not checked) per tensor. The first call that matches checks in Python and builds a
    TensorGuards from those tensors (torch's C++ check of dynamo's guards, which also compares
    dispatch keys); later calls are that one C++ call, about 10x less time a tensor than
    Python's checks. spec is plain values, so a program cache on disk can store it."""

    def __init__(self, spec):
        self.spec = spec
        self.guards = None

    def __call__(self, *tensors):
        if self.guards is not None:
            return self.guards.check(*tensors)
        if len(tensors) != len(self.spec) or len({id(t) for t in tensors}) != len(tensors):
            return False  # (TensorGuards refuses a tensor passed twice)
        for t, (kind, dtype, device, requires_grad, shape, strides) in zip(tensors, self.spec):
            if (type(t) is not kind or t.dtype is not dtype or t.device != device or t.requires_grad is not requires_grad
                    or tuple(t.shape) != shape or strides is not None and t.stride() != strides):
                return False
        self.guards = TensorGuards(*tensors, dynamic_dims_sizes=[list(s[4]) for s in self.spec],
                                   dynamic_dims_strides=[list(s[5]) if s[5] is not None else [None] * len(s[4])
                                                         for s in self.spec])
        return True


class DenseIn:
    """Whether a tensor is dense in memory with its dims in this order (outermost first): the
    layout a program for all sizes was compiled for (its strides then follow from its sizes)."""

    def __init__(self, order):
        self.order = order

    def __call__(self, t):
        return dense_in_order(t.shape, t.stride(), self.order)


class _Gen:
    def __init__(self, check, example_tensors, consts, strided=(), sym_dims=None):
        self.sym_dims = sym_dims or {}  # tensor index -> a symbol name or None per dim
        self.bound = set()  # the symbols read so far
        self.lines = []
        self.consts = consts
        self._const_names = {id(v): k for k, v in consts.items()}
        self.check = check
        self.example = example_tensors
        self.strided = strided  # indices of the tensors whose strides the trace depends on
        self.tensor_vars = {}
        self.number_vars = {}  # the float arguments the program takes as runtime numbers: k -> var

    def const(self, value):
        name = self._const_names.get(id(value))
        if name is None:
            name = self._const_names[id(value)] = f"_c{len(self._const_names)}"
            self.consts[name] = value
        return name

    def emit(self, line):
        self.lines.append("    " + line)

    def miss_if(self, cond):
        if self.check:
            self.emit(f"if {cond}: return MISS")

    def tensor(self, expr, index, var):
        self.emit(f"{var} = {expr}")
        self.tensor_vars[index] = var
        t = self.example[index]
        dev = -1 if t.device.type == "cpu" else t.get_device()
        names = self.sym_dims.get(index)
        shape = f"{var}.shape != {self.const(t.shape)}" if names is None else f"{var}.dim() != {t.dim()}"
        conds = [f"not isinstance({var}, Tensor)", f"{var}.dtype is not {self.const(t.dtype)}",
                 shape, f"{var}.get_device() != {dev}",
                 f"{'not ' if t.requires_grad else ''}{var}.requires_grad"]
        if t.device.type not in ("cpu", "cuda"):
            conds.append(f"{var}.device != {self.const(t.device)}")
        if index in self.strided:  # (a tensor with symbolic dims: its layout, runtime/symbolic.py)
            if names is None:
                conds.append(f"{var}.stride() != {t.stride()!r}")
            elif t.is_contiguous():
                conds.append(f"not {var}.is_contiguous()")
            else:
                conds.append(f"not {self.const(DenseIn(dense_order(t.shape, t.stride())))}({var})")
        self.miss_if(" or ".join(conds))
        if names is not None:  # symbolic dims: the first occurrence of a symbol reads it
            same = []
            for k, (n, d) in enumerate(zip(names, t.shape)):
                if n is None or n in self.bound:
                    same.append(f"{var}.shape[{k}] != {d if n is None else n}")
                else:
                    self.emit(f"{n} = {var}.shape[{k}]")
                    self.bound.add(n)
            if same:
                self.miss_if(" or ".join(same))

    def tensors(self, items):
        """tensor() of each (expr, index, var), the metadata of those without symbolic dims checked
        by one TensorsCheck call (type, dtype, device, requires_grad, shape, the strides where the
        trace depends on them): a module's parameters are read and checked on every call."""
        batch, seen = [], set()
        for expr, index, var in items:
            t = self.example[index]
            if TensorGuards is None or not self.check or index in self.sym_dims or id(t) in seen or \
                    not isinstance(t, torch.Tensor):  # (symbolic.py's TensorMeta)
                self.tensor(expr, index, var)  # (a tensor read twice, a tied weight: checked here)
            else:
                self.emit(f"{var} = {expr}")
                self.tensor_vars[index] = var
                batch.append((index, var))
                seen.add(id(t))
        if batch:
            spec = tuple((type(t), t.dtype, t.device, t.requires_grad, tuple(t.shape),
                          tuple(t.stride()) if i in self.strided else None)
                         for i, t in ((i, self.example[i]) for i, _ in batch))
            self.miss_if(f"not {self.const(TensorsCheck(spec))}({', '.join(v for _, v in batch)})")

    def int_symbol(self, expr, name):
        """An int argument that is a symbol (runtime/symbolic.py)."""
        if name in self.bound:
            self.miss_if(f"type({expr}) is not int or {expr} != {name}")
        else:
            self.emit(f"{name} = {expr}")
            self.bound.add(name)
            self.miss_if(f"type({name}) is not int")

    def value(self, expr, spec, var):
        kind = spec[0]
        if kind == "tensor":
            self.tensor(expr, spec[1], var)
        elif kind == "const":
            v = spec[1]
            if v is None or v is Ellipsis or isinstance(v, (bool, torch.dtype)):
                self.miss_if(f"{expr} is not {self.const(v) if isinstance(v, torch.dtype) else repr(v)}")
            elif guards_.is_plain_value(v):
                self.miss_if(guards_.CHECKS["value"].miss_source(expr, v, self.const))
            else:  # slices, torch.Size
                c = self.const(v)
                self.miss_if(f"type({expr}) is not type({c}) or {expr} != {c}")
        elif kind == "ndarray":  # a numpy array: the tensor over its memory, checked as a tensor's
            self.emit(f"{var}_a = {expr}")
            self.miss_if(f"type({var}_a) is not {self.const(spec[3])} or {var}_a.dtype != {self.const(spec[2])} "
                         f"or min({var}_a.strides, default=0) < 0")
            self.tensor(f"{self.const(torch.from_numpy)}({var}_a)", spec[1], var)
        elif kind == "number":  # any float (cache="symbolic values"): the program takes it
            self.emit(f"{var} = {expr}")
            self.number_vars[spec[1]] = var
            self.miss_if(f"type({var}) is not float")
        elif kind == "object":
            self.miss_if(f"{expr} is not {self.const(spec[1])}")
        elif kind == "partial":
            self.emit(f"{var} = {expr}")
            keys = [k for k, _ in spec[3]]
            self.miss_if(f"type({var}) is not {self.const(functools.partial)} or len({var}.args) != {len(spec[2])} "
                         f"or list({var}.keywords) != {keys!r}")
            self.value(f"{var}.func", spec[1], f"{var}_f")
            for i, s in enumerate(spec[2]):
                self.value(f"{var}.args[{i}]", s, f"{var}_{i}")
            for i, (k, s) in enumerate(spec[3]):
                self.value(f"{var}.keywords[{k!r}]", s, f"{var}_k{i}")
        elif kind in ("tuple", "list", "namedtuple", "dataclass", "dict"):
            self.emit(f"{var} = {expr}")
            if kind == "dict":
                keys = [k for k, _ in spec[1]]
                self.miss_if(f"type({var}) is not dict or list({var}) != {keys!r}")
                for i, (k, s) in enumerate(spec[1]):
                    self.value(f"{var}[{k!r}]", s, f"{var}_{i}")
            elif kind == "dataclass":
                self.miss_if(f"type({var}) is not {self.const(spec[1])}")
                for i, (f, s) in enumerate(spec[2]):
                    self.value(f"{var}.{f}", s, f"{var}_{i}")
            else:
                typ = {"tuple": "tuple", "list": "list"}.get(kind) or self.const(spec[1])
                self.miss_if(f"type({var}) is not {typ} or len({var}) != {len(spec[-1])}")
                for i, s in enumerate(spec[-1]):
                    self.value(f"{var}[{i}]", s, f"{var}_{i}")
        else:
            raise ValueError(kind)


class Prologue:
    """The source of `def entry(args, kwargs)` for the input specs (structure.py) of the tensors
    the entry was compiled with, its guards, the tensors it reads from outside (reads:
    (expression, tensor index)) and the attribute writes it replays; strided: the indices of the
    tensors whose strides the trace depends on (views, is_contiguous()); shared, storages: the
    tensors that are views of a storage the program takes in their place (structure.Inputs);
    mutated: the tensors the program updates in place, which must share memory with no other
    input (or exactly as the shared ones did). check=False leaves every check out (cache="same
    input", and the call that compiled the entry)."""

    def __init__(self, args_spec, kwargs_spec, example_tensors, *, guards=(), reads=(), consts=None, writes=(),
                 check=True, strided=(), shared=None, storages=(), mutated=(), symbols=None):
        self.consts = dict(consts or {})
        self.strided = frozenset(strided)
        self.shared = dict(shared or {})  # see structure.Inputs
        self.storages = list(storages)  # index of the first tensor of each storage the program takes
        self.mutated = list(mutated)  # indices of tensors updated in place (a storage: its first tensor)
        # cache="symbolic values" (runtime/symbolic.py): (tensor index -> symbol name or None per
        # dim, the symbols' names, the decisions on them: source -> outcome, the int arguments
        # that are symbols: ("arg", i) / ("kwarg", k) -> name); the program takes the symbols
        # after the tensors
        self.symbols = symbols
        self.source = self._source(check, args_spec, kwargs_spec, example_tensors, guards, reads, writes)
        self.unchecked_source = self._source(False, args_spec, kwargs_spec, example_tensors, guards, reads, writes) \
            if check else self.source

    def _source(self, check, args_spec, kwargs_spec, example_tensors, guards, reads, writes):
        sym_dims, sym_names, sym_guards, sym_ints = self.symbols or ({}, [], {}, {})
        g = _Gen(check, example_tensors, self.consts, self.strided, sym_dims)
        g.lines.append("def entry(args, kwargs):")
        g.lines.append("  try:")
        g.miss_if(f"len(args) != {len(args_spec)}")
        if kwargs_spec:
            g.miss_if(f"kwargs.keys() != {{{', '.join(repr(k) for k, _ in kwargs_spec)}}}")
        else:
            g.miss_if("kwargs")
        for i, s in enumerate(args_spec):
            g.value(f"args[{i}]", s, f"a{i}") if ("arg", i) not in sym_ints else g.int_symbol(
                f"args[{i}]", sym_ints[("arg", i)])
        for i, (k, s) in enumerate(kwargs_spec):
            g.value(f"kwargs[{k!r}]", s, f"k{i}") if ("kwarg", k) not in sym_ints else g.int_symbol(
                f"kwargs[{k!r}]", sym_ints[("kwarg", k)])
        for guard in sorted(guards, key=lambda x: guards_.CHECKS[x.check].rank):
            g.miss_if(guards_.CHECKS[guard.check].miss_source(guard.expr, guard.expected, g.const))
        g.tensors([(expr, index, f"s{i}") for i, (expr, index) in enumerate(reads)])
        for n in sym_names:  # sizes 0 and 1 are never symbols (broadcasting, empty tensors)
            g.miss_if(f"{n} < 2")
        for source, outcome in sym_guards.items():
            g.miss_if(f"not {source}" if outcome is True else source if outcome is False else
                      f"{source} != {outcome!r}")
        self._memory_checks(g, example_tensors)
        storage_vars = []
        for k, first in enumerate(self.storages):
            storage_vars.append(f"st{k}")
            g.emit(f"st{k} = storage_view({g.tensor_vars[first]})")
        if g.lines[-1] == "  try:":
            g.emit("pass")
        g.lines.append("  except Exception:  # reading what a check reads failed: it changed")
        # (the call that compiled the entry reads what its trace read: a failure there is a
        # defect to show, never a MISS handed to the caller as the function's result)
        g.lines.append("    return MISS" if check else "    raise")
        flat = ", ".join([g.tensor_vars[i] for i in range(len(example_tensors)) if i not in self.shared] + storage_vars
                         + [g.number_vars[k] for k in sorted(g.number_vars)] + list(sym_names))
        if not writes:
            g.lines.append(f"  return computation({flat})")
        else:
            # attribute writes, list appends and dict items of the jitted code, replayed: tensors come
            # back after the output
            tensor_writes = [w for w in writes if not isinstance(w[2], (bool, int, float, str, type(None), Constant))]
            outs = ", ".join(["out"] + [f"w{i}" for i in range(len(tensor_writes))])
            g.lines.append(f"  {outs}, = computation({flat})" if tensor_writes else f"  out = computation({flat})")
            i = 0
            fresh = [w[2] for w in writes if isinstance(w[2], Constant) and w[2].fresh]
            if fresh:  # one memo per call: objects the call made shared between writes stay shared
                keep = {k: v for c in fresh for k, v in c.keep.items()}
                g.lines.append(f"  memo = dict({g.const(keep)})")
            for expr, name, value in writes:
                if isinstance(value, Constant):  # (a fresh copy per call of what the call made)
                    source = f"deepcopy({g.const(value.value)}, memo)" if value.fresh else g.const(value.value)
                elif isinstance(value, (bool, int, float, str, type(None))):
                    source = repr(value) if guards_.has_literal(value) or isinstance(value, bool) else g.const(value)
                else:
                    source, i = f"w{i}", i + 1
                if isinstance(name, Item):  # container[key] = value
                    key = repr(name.key) if guards_.has_literal(name.key) else g.const(name.key)
                    g.lines.append(f"  {expr}[{key}] = {source}")
                elif name == APPEND:
                    g.lines.append(f"  {expr}.append({source})")
                elif isinstance(value, Constant):
                    g.lines.append(f"  setattr({expr}, {name!r}, {source})")
                else:
                    g.lines.append(f"  {expr}.{name} = {source}")
            g.lines.append("  return out")
        return "\n".join(g.lines) + "\n"

    def _memory_checks(self, g, example):
        """Tensors that share memory share it as when traced; tensors updated in place share it
        with no other."""
        v = g.tensor_vars
        groups = {}
        for i, k in sorted(self.shared.items()):
            groups.setdefault(k, []).append(i)
        for members in groups.values():
            first, t0 = members[0], example[members[0]]
            g.miss_if(f"{v[first]}.untyped_storage().nbytes() != {t0.untyped_storage().nbytes()}")
            for i in members:
                t = example[i]
                same = "" if i == first else \
                    f"storage_address({v[i]}) != storage_address({v[first]}) or "
                g.miss_if(f"{same}{v[i]}.storage_offset() != {t.storage_offset()} or {v[i]}.stride() != {t.stride()!r}")
        if self.mutated:
            others = [v[i] for i in range(len(example)) if i not in self.shared and i not in self.mutated]
            g.miss_if(f"shares_storage(({''.join(v[i] + ', ' for i in self.mutated)}), "
                      f"({''.join(x + ', ' for x in others)}))")

    def compile(self, computation):
        """(entry, the entry without checks)."""
        return tuple(compile_prologue(source, self.consts, computation)
                     for source in (self.source, self.unchecked_source))


def compile_prologue(source, consts, computation):
    """The entry function of a prologue's source, over its constants, calling computation (with
    torch's autocast off: runtime/autocast_casts.py)."""
    ns = {"MISS": MISS, "deepcopy": copy.deepcopy, "Tensor": torch.Tensor, "math": math,
          "computation": outside_autocast(computation),
          "storage_view": storage_view, "shares_storage": shares_storage, "storage_address": storage_address, **guards_.NAMESPACE,
          **guards_.AMBIENT_NAMESPACE, **consts}
    exec(code_objects.compiled(source, "<thunder prologue>"), ns)
    return ns["entry"]
