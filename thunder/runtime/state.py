"""State: what the jitted code reads from outside its arguments (globals, closure cells,
attributes, container items, parameter defaults: module parameters and buffers, configuration,
functions, submodules, hooks).

Tensors become extra inputs of the trace that the prologue reads at call time, so a new value
shows in the next call and new metadata recompiles. Every other value the trace read becomes a
guard (guards.py) checked by the prologue: objects (functions, modules, classes, dtypes) by
identity, numbers and strings by type and value, containers by a snapshot of their items.

A read can be guarded only when the prologue can read the same thing again: each object the
tracker knows how to reach has a path (an expression over the prologue's constants). Roots are
the jitted function or module, input objects, globals dicts and closure cells; an object whose
identity is guarded is reached through its constant from then on, so every guard is one step
from a constant. Objects the trace made itself, or got from native code, have no path: what is
read from them is derived from what was guarded.

Bookkeeping is not guarded: the reads made while interpreting a call of library code (torch's
package or Python's standard library, not the user's code or other packages) are dropped when
the call returns None and changed nothing the program depends on: it recorded no op, consulted no
ambient torch state, read no tensor, split on no value, stored no attribute, global or closure
variable and called no code of the user's (its only effects are on containers: counters, caches,
registries). A call that ran the user's code keeps its reads: they decide what that code does (a
module's forward returning None keeps the guards that its hook dicts are empty, so a hook
registered later recompiles; a flag read decides whether an attribute is written). dynamo's
GenerationTracker.tag in its patch of nn.Module.__init__ (a module made in forward), logging's
enabled-level cache, a warnings registry are such calls: their state changes between calls
(torch.compile bumps dynamo's generation on each of its calls) without deciding anything about
the result. A call whose reads may matter keeps them all (one that returns a value, or raises)."""
import contextlib
import contextvars
import copy
import dataclasses
import enum
import os
import random
import re
import sys
import sysconfig
import types
from collections import OrderedDict, defaultdict, deque

import torch

from thunder.core import ndarray, trace as tracing
from thunder.core.numbers import NumberProxy
from thunder.core.proxies import TensorProxy
from thunder.interpreter import Provenance
from thunder.runtime import sharp_edges
from thunder.runtime.guards import Guard, has_literal, is_plain_value, same, snapshot
from thunder.interpreter import Provenance

_MISSING = object()
# values compared by identity without a guard on how they were found
_IDENTITY = (type(None), bool, type(Ellipsis), type(NotImplemented))
# containers guarded by a snapshot of their items
_CONTAINERS = (list, tuple, dict, OrderedDict, set, frozenset, torch.Size)


def _library_dirs():
    dirs = [os.path.dirname(torch.__file__)]
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.append(path)
    return tuple(os.path.normpath(d) + os.sep for d in dirs)


_LIBRARY_DIRS = _library_dirs()


def is_library_code(filename):
    """Code of torch's package or of Python's standard library (not a package installed beside
    them, which may live under the standard library's directory)."""
    return (filename.startswith(_LIBRARY_DIRS) and
            (filename.startswith(_LIBRARY_DIRS[0]) or "-packages" + os.sep not in filename))


def _is_real_tensor(v):
    return isinstance(v, torch.Tensor) and not isinstance(v, TensorProxy)


_NOT_ASCII_WORD = re.compile(r"[^A-Za-z0-9_]")  # (for ASCII text: what str.isalnum and "_" leave out)


def _identifier(hint):
    if hint.isascii():
        name = _NOT_ASCII_WORD.sub("_", hint).strip("_") or "s"
    else:
        name = "".join(c if c.isalnum() or c == "_" else "_" for c in hint).strip("_") or "s"
    return name if not name[0].isdigit() else f"m{name}"


def _class_attr(cls, name):
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return _MISSING


ARRAY_GUARD_BYTES = 1 << 20  # larger arrays read from state are guarded by identity only (a copy compared per call)


class StateTracker:
    def __init__(self, root, inputs, *, strict=False):
        self.root = root  # the jitted nn.Module, or None
        self.inputs = inputs  # structure.Inputs: tensors read become inputs of the trace
        self.strict = strict  # functional.jit: tensors from outside the arguments are refused
        self.reads = []  # (expression, tensor index): tensors the prologue reads
        self.guards = {}  # (expression, check, name for "absent"/"hasattr") -> Guard, in the order made
        self.consts = {}  # name -> object the expressions refer to
        self._const_names = {}  # id(object) -> its name in consts
        self._paths = {}  # id(object) -> (object, expression that reads it)
        self._tensor_reads = {}  # expression -> proxy
        self._snapshots = set()  # ids of containers whose items a snapshot guard covers
        self._created = {}  # id -> object the traced code made (an instance of a class: on_create)
        self.writes = {}  # (id(owner), name) -> (owner, name, value): attribute writes to replay
        self.originals = {}  # (id(owner), name) -> (owner, name, value before the first write)
        self._write_sites = {}  # (id(owner), name) -> provenance of the last write
        self._appended = {}  # id(list) -> (the list, its length before the call's first append)
        self._appends = {}  # id(list that outlives the call) -> the number of its appends replayed
        self._stand_ins = {}  # id(list of proxies the trace reads) -> (it, the list of tensors it stands for)
        self._arrays = {}  # id(numpy array read from state) -> (it, its expression, where it was read)
        self.argument_arrays = set()  # ids of the numpy arrays among the call's arguments
        self._array_inputs = set()  # ids of the arrays read from state that became inputs (array_input)
        self._module_names = {id(m): p for p, m in root.named_modules(remove_duplicate=False)} if root is not None else {}
        self._owners = None  # id(tensor) -> (module, name) of the root's parameters and buffers
        self._other_owners = {}  # the same for the other modules the prologue reaches (_reached_owner)
        self._optimizers = []  # the torch.optim optimizers the prologue reaches (_sets_hyperparameter)
        self._scanned_modules = set()  # ids of the modules _reached_owner went through
        self.arg_paths = {}  # tensor index -> the prologue's expression for an argument tensor (args[0])
        self.stores = 0  # attribute, global and closure writes seen (bookkeeping calls make none)
        self.user_calls = 0  # calls of code that is not library code (bookkeeping calls make none)
        self._snapshot_log = []  # ids added to _snapshots, in order (to drop a bookkeeping call's)
        # (kind, id(owner), name) -> the value a global or attribute read guarded: the same value
        # read again there needs nothing more (the global hook dicts, `F`, at every module call)
        self._guarded_reads = {}
        self.interpreted = {}  # code -> function, of the functions interpreted other than torch's and Python's
        self.stand_ins = {}  # id(tensor) -> the tensor read in its place (a sample at other sizes)
        self.grads = {}  # id(tensor) -> its .grad as the traced code set it (a proxy or None): write_grad
        # the first change the trace made for real (a global's, plain values of a container that
        # outlives the call: made while tracing only), in words, or None
        self.changed_state = None
        if root is not None:
            self.pin(root)

    def plain_change(self, provenance):
        """A change made while tracing only (runtime/sharp_edges.py check_global_write) by the
        user's code: the first is remembered (a function that makes one is not traced again at
        other sizes: runtime/generalize.py). torch's and Python's own bookkeeping (a registry of
        the modules made, a cache) is not the function's effect."""
        if is_library_code(provenance.filename) and not self._sets_hyperparameter(provenance):
            return
        if provenance.kind == "global":
            before_write(provenance.owner, provenance.name)
        if self.changed_state is None:
            self.changed_state = f"{sharp_edges.described(provenance)} at {provenance.filename}:{provenance.lineno}"

    def _sets_hyperparameter(self, provenance):
        """A write by torch's code into an optimizer's param_groups entry (an lr scheduler setting
        the lr): the user's hyperparameters, so the function's effect, not torch's bookkeeping
        (a registry, a cache, which the other library writes are)."""
        if provenance.kind not in ("item", "mutator") or not isinstance(provenance.owner, dict):
            return False
        return any(g is provenance.owner for opt in self._optimizers for g in opt.param_groups)

    # -- constants and paths
    def const(self, obj):
        name = self._const_names.get(id(obj))
        if name is None:
            name = self._const_names[id(obj)] = f"_s{len(self.consts)}"
            self.consts[name] = obj
        return name

    def pin(self, obj, expr=None):
        """obj can be reached by the prologue: through expr, or (default) as a constant."""
        entry = self._paths.get(id(obj))
        if entry is None:
            entry = self._paths[id(obj)] = (obj, expr if expr is not None else self.const(obj))
            if isinstance(obj, torch.optim.Optimizer):
                self._optimizers.append(obj)
        return entry[1]

    def path(self, obj):
        entry = self._paths.get(id(obj))
        if entry is not None:
            return entry[1]
        if isinstance(obj, (type, types.ModuleType)):  # classes and Python modules live for good
            return self.pin(obj)
        return None

    def _pin_container(self, value, expr):
        self.pin(value, expr)
        if id(value) not in self._snapshots:
            self._snapshots.add(id(value))
            self._snapshot_log.append(id(value))

    def pin_root_function(self, fn):
        """The jitted callable: the function (its code is guarded), or a bound method's parts."""
        if isinstance(fn, types.MethodType):
            self.pin(fn.__self__)
            fn = fn.__func__
        self.pin(fn)

    def guard(self, expr, check, expected, what=""):
        # one guard per expression and check ("absent" and "hasattr" check one name each)
        key = (expr, check, expected if check in ("absent", "hasattr") else None)
        if key not in self.guards:
            self.guards[key] = Guard(expr, check, expected, what)

    # -- the interpreter's hooks
    def load(self, value, provenance):
        """on_load: a value read from a global, cell, attribute, container item or default."""
        if isinstance(value, (TensorProxy, NumberProxy)):  # (one the trace made: stored, read back)
            return value
        kind, name, owner = provenance.kind, provenance.name, provenance.owner
        if kind == "native":
            if provenance.name == "<generator>":  # (an item of torch's Module.parameters() and the like)
                return self._module_items(value)
            # native code handing back a tensor the trace reads as an input (a weakref to a
            # parameter): the same tensor, so its proxy
            return self.inputs.proxy_of(value) if type(value) is torch.nn.Parameter or \
                type(value) is torch.Tensor else value
        if kind == "attr" and name == "grad" and _is_real_tensor(owner):
            return self.read_grad(self._proxy_of_real(owner))  # (a parameter native code handed over)
        if self.writes and (id(owner), "cell_contents" if kind == "closure" else name) in self.writes:
            return value  # written by the trace before: the program replays the write
        read = (kind, id(owner), name)
        if self._guarded_reads.get(read, _MISSING) is value and not (_is_container(value) and value):
            return value  # (a container read again guards again only what was added to it)
        expr, what = self._expr(kind, name, owner)
        if isinstance(value, torch.Tensor):
            return self._tensor(value, provenance, expr)
        if expr is None:
            return value
        if kind == "item" and id(owner) in self._snapshots:
            if _is_container(value):
                self._pin_container(value, expr)  # covered by the snapshot; its items are read through it
            return value
        if kind == "hasattr":
            self.guard(expr, "hasattr", (name, value), what)
        else:
            self._guard_value(expr, value, what, kind, name, owner)
        if ndarray.is_array(value):  # (its memory is read at call time where torch gets it: array_input)
            self._arrays[id(value)] = (value, expr, provenance)
        if type(value) in (list, tuple) and any(_is_real_tensor(v) for v in value):
            # a list of tensors handed to native code (nn.LSTM's _flat_weights): each is read where
            # it lives, a module's parameter or buffer through its module, another through the list
            stand_in = type(value)(self._list_item(value, i, provenance, expr) for i in range(len(value)))
            if type(value) is list:  # (its changes are the list's: container_write)
                self._stand_ins[id(stand_in)] = (stand_in, value)
            return stand_in
        if kind == "global" or kind == "attr":
            self._guarded_reads[read] = value
        return value

    def _list_item(self, items, i, provenance, expr):
        v = items[i]
        if not _is_real_tensor(v):
            return v
        owner = self._owner_of(v)
        if owner is not None:
            p = self.load(v, dataclasses.replace(provenance, kind="attr", owner=owner[0], name=owner[1]))
            if isinstance(p, TensorProxy):
                return p
        return self._tensor(v, dataclasses.replace(provenance, kind="item", owner=items, name=i), f"{expr}[{i}]")

    def _owner_of(self, t):
        """(module, name) of a parameter or buffer of the jitted module, or None."""
        if self._owners is None:
            self._owners = {} if self.root is None else {
                id(t): (m, n) for m in self.root.modules()
                for n, t in [*m._parameters.items(), *m._buffers.items()] if t is not None}
        return self._owners.get(id(t))

    def _module_items(self, value):
        """An item a native generator of torch's modules yields (`for p in m.parameters()`,
        `m.named_buffers()`), for a module the prologue reaches (the jitted one, an argument, a
        global): its tensors as the proxies of those parameters and buffers, read through
        their modules (iterated natively, ops on the tensors themselves would run while
        tracing, and a parameter updated earlier in the call would be read as it was)."""
        if _is_real_tensor(value):
            p = self.inputs.proxy_of(value)
            if p is value:
                owner = self._owner_of(value) or self._reached_owner(value)
                if owner is not None:
                    p = self.load(value, Provenance("attr", owner[1], owner[0], "<generator>", "<generator>", None))
            return p
        if type(value) is tuple and any(_is_real_tensor(v) for v in value):  # (name, tensor)
            return tuple(self._module_items(v) for v in value)
        return value

    def _reached_owner(self, t):
        """(module, name) of t among the parameters and buffers of the modules the prologue
        reaches other than the jitted one (their submodules given paths through _modules)."""
        found = self._other_owners.get(id(t))
        if found is not None:
            return found
        for obj, expr in list(self._paths.values()):
            if not isinstance(obj, torch.nn.Module) or id(obj) in self._scanned_modules:
                continue
            self._scanned_modules.add(id(obj))
            for name, sub in obj.named_modules(remove_duplicate=False):
                if name:
                    sub_expr = expr + "".join(f"._modules[{part!r}]" for part in name.split("."))
                    self.pin(sub, sub_expr)
                    self._scanned_modules.add(id(sub))
                for n, x in [*sub._parameters.items(), *sub._buffers.items()]:
                    if x is not None:
                        self._other_owners.setdefault(id(x), (sub, n))
        return self._other_owners.get(id(t))

    def module_tensor(self, t):
        """A parameter or buffer of the jitted module that native code handed to the result
        (`tuple(self.buffers())`): its proxy, read through its module as an attribute; None for
        other tensors."""
        owner = self._owner_of(t)
        if owner is None:
            return None
        p = self.load(t, Provenance("attr", owner[1], owner[0], "<result>", "<result>", None))
        return p if isinstance(p, TensorProxy) else None

    def created(self, obj):
        """on_create: an object the traced code made (kept alive while tracing, so ids stay unique)."""
        self._created[id(obj)] = obj

    def called(self, fn):
        """on_call: a Python function is about to be interpreted; its code is part of the key.
        For library code, what tells whether the call was bookkeeping (see the module's doc)."""
        library = is_library_code(fn.__code__.co_filename)
        done = self._bookkeeping(fn) if library else None
        if not library:  # (the program cache checks their source files: runtime/persist.py)
            self.interpreted.setdefault(fn.__code__, fn)
            self.user_calls += 1
        p = self.path(fn)
        if p is not None:
            self.guard(f"{p}.__code__", "is", fn.__code__, f"the code of {fn.__qualname__}")
        return done

    def _effects(self):
        """What a bookkeeping call leaves unchanged."""
        ctx = tracing.current()
        return (len(ctx.symbols), len(ctx.consulted), len(ctx.stride_dependent), len(ctx.mutated),
                len(ctx.sym_guards or ()), len(self.reads), self.stores, len(self.writes), self.user_calls)

    def _bookkeeping(self, fn):
        marks = (len(self.guards), len(self.consts), len(self._paths), len(self._snapshot_log))
        effects = self._effects()

        def done(result):
            if result is None and len(self.guards) > marks[0] and self._effects() == effects:
                self._drop_since(*marks)

        return done

    def _drop_since(self, n_guards, n_consts, n_paths, n_snapshots):
        """Forget the guards, constants and paths made since these counts (a bookkeeping call's)."""
        self._guarded_reads.clear()
        for key in list(self.guards)[n_guards:]:
            del self.guards[key]
        for name in list(self.consts)[n_consts:]:
            del self._const_names[id(self.consts.pop(name))]
        for key in list(self._paths)[n_paths:]:
            del self._paths[key]
        for i in self._snapshot_log[n_snapshots:]:
            self._snapshots.discard(i)
        del self._snapshot_log[n_snapshots:]

    def store(self, value, provenance):
        """An attribute write in the jitted code: replayed by the program on every call when the
        object outlives the call (a module, an object the prologue can reach). Returns whether it
        took the write over (the interpreter then leaves the object as it is): `p.grad = v` of a
        tensor native code handed over (`for p in model.parameters(): p.grad = None`)."""
        self.stores += 1
        if provenance.kind == "attr" and provenance.name == "grad" and _is_real_tensor(provenance.owner):
            self.write_grad(self._proxy_of_real(provenance.owner), value)
            return True
        if provenance.kind == "closure":  # a variable captured from outside (nonlocal)
            owner, name = provenance.owner, "cell_contents"
        elif provenance.kind == "attr" and self._outlives_call(provenance.owner):
            owner, name = provenance.owner, provenance.name
        else:
            return
        self._replayed(owner, name, value, _own_value(owner, name), provenance)

    def _replayed(self, owner, name, value, before, provenance):
        """A write (an attribute's, an Item's) that the program replays after the computation;
        `before`: what the place held, kept from the call's first write there for restore."""
        key = (id(owner), name)
        if key not in self.originals:
            self.originals[key] = (owner, name, before)
        self.writes[key] = (owner, name, value)
        self._write_sites[key] = provenance

    def container_write(self, values, provenance):
        """A change of a list, dict or set (an item written or deleted, lst.append(x), a
        defaultdict filling a missing key) in the jitted code, where the container outlives the
        call. Appends of tensors of the trace are replayed (_append: a forward hook collecting
        activations); other changes storing them are refused by name, as the proxies standing for
        them would stay in the user's container (a torch.optim step's state keyed by its
        parameters), and so is any other change of a list appended to. (torch.nn.Module keeps its
        parameters, buffers and submodules in dicts: those writes are an attribute write's, which
        is replayed.) Returns whether it is a change of plain values (made while tracing only: a
        sharp edge)."""
        owner = provenance.owner
        if not is_library_code(provenance.filename) or self._sets_hyperparameter(provenance):
            before_write(owner)
        real = self._stand_ins.get(id(owner), (None, owner))[1]  # (a list of tensors read: the list itself)
        if provenance.filename == _MODULE_FILE or not self._outlives_call(real):
            return False
        appended = id(real) in self._appends  # (then any other change is refused)
        if provenance.kind == "mutator" and provenance.name == "append" and type(owner) is list and (
                appended or holds_proxy(values)):
            self._append(owner, real, values[0], provenance)  # (a hook collecting activations: replayed)
            return False
        if not appended and not holds_proxy(values):
            return True
        if (not appended and provenance.kind == "item" and type(real) in (dict, OrderedDict, defaultdict)
                and len(values) == 2 and not holds_proxy(values[0])):
            self._item(real, values[0], values[1], provenance)  # (an optimizer's state: replayed)
            return False
        raise NotImplementedError(
            f"thunder: {sharp_edges.described(provenance)} at {provenance.filename}:{provenance.lineno} stores a tensor of the jitted function (or "
            "a number read from one) in a container that outlives the call; thunder replays attribute writes, "
            "list appends and dict items, not other changes of lists, dicts or sets. Workaround: return the value, or make the "
            "change outside the jitted function")

    def _item(self, real, key, value, provenance):
        """d[key] = value of a dict that outlives the call, value holding tensors of the trace:
        replayed by the program after the computation, as attribute writes are; tracing's own
        write is undone (restore)."""
        self._replayed(real, Item(key), value, real.get(key, _MISSING), provenance)

    def _append(self, owner, real, value, provenance):
        """lst.append(value) of a list that outlives the call (real: the list, owner: it or the
        list of proxies standing for it that the trace appended to), replayed on it by the program
        after the computation, as attribute writes are; tracing's own appends are undone (restore)."""
        if id(owner) not in self._appended:
            self._appended[id(owner)] = (owner, len(owner))
        n = self._appends[id(real)] = self._appends.get(id(real), 0) + 1
        key = (id(real), f"{APPEND}{n}")  # (replayed in this order)
        self.originals[key] = (real, APPEND, _MISSING)
        self.writes[key] = (real, APPEND, value)
        self._write_sites[key] = provenance

    # -- expressions
    def _expr(self, kind, name, owner):
        """(expression the prologue reads the value with, what it is in words); the expression
        is None when the owner cannot be reached from the prologue."""
        if kind == "global":
            return f"{self.const(owner)}[{name!r}]", f"global '{name}'"
        if kind == "closure":
            return f"{self.const(owner)}.cell_contents", f"closure variable '{name}'"
        p = self.path(owner)
        if p is None:
            return None, None
        if kind == "attr":
            return self._attr_expr(p, owner, name), f"attribute '{name}' of {type(owner).__name__}"
        if kind == "hasattr":
            return p, f"whether {type(owner).__name__} has attribute '{name}'"
        if kind == "item":
            key = repr(name) if has_literal(name) else self.const(name)
            return f"{p}[{key}]", f"item {_describe_key(name)} of {_describe_owner(owner)}"
        if kind == "default":
            code = owner.__code__
            positional = code.co_varnames[:code.co_argcount]
            what = f"the default of parameter '{name}' of {owner.__qualname__}"
            if name in positional:
                return f"{p}.__defaults__[{positional.index(name) - code.co_argcount}]", what
            return f"{p}.__kwdefaults__[{name!r}]", what
        raise ValueError(kind)

    def _attr_expr(self, p, owner, name):
        """Reads attribute `name` of owner the way getattr does (nn.Module parameters, buffers
        and submodules from their dicts, which is what Module.__getattr__ does)."""
        if isinstance(owner, torch.nn.Module) and name not in owner.__dict__:
            for container in ("_parameters", "_buffers", "_modules"):
                if name in owner.__dict__.get(container, {}):
                    return f"{p}.{container}[{name!r}]"
        return f"{p}.{name}" if name.isidentifier() else f"getattr({p}, {name!r})"

    # -- guards on values
    def _guard_value(self, expr, value, what, kind, name, owner):
        if isinstance(value, _IDENTITY):
            self.guard(expr, "is", value, what)
        elif is_plain_value(value):
            self.guard(expr, "value", value, what)
        elif type(value) is types.MethodType:
            self._guard_method(expr, value, what, kind, name, owner)
        elif isinstance(value, (types.BuiltinMethodType, types.MethodWrapperType)) and \
                getattr(value, "__self__", None) is owner:
            pass  # a method of a builtin type (dict.get): decided by the owner's type
        elif _is_container(value):
            known = self.guards.get((expr, "same", None))
            # read again as it was (a module's hook dicts, on every call): the snapshot taken
            # then stands, and what it pinned is pinned (a snapshot pins together with its guard)
            if known is None or not same(value, known.expected):
                self.guard(expr, "same", snapshot(value, self.pin), what)
            self._pin_container(value, expr)
        elif kind == "attr" and not _stable(owner, name, value):
            # a fresh object on each read (a descriptor): what it is, and reads through it
            self.guard(expr, "type", type(value), what)
            self.pin(value, expr)
        else:
            self.guard(expr, "is", value, what)
            self.pin(value)

    def _guard_method(self, expr, method, what, kind, name, owner):
        fn, bound = method.__func__, method.__self__
        if kind == "attr" and bound is owner and _class_attr(type(owner), name) is fn:
            # the class's method: guard that no instance attribute shadows it, and the class's entry
            if hasattr(owner, "__dict__"):
                self.guard(self.path(owner), "absent", name, f"method {type(owner).__name__}.{name}")
            self.guard(f"{self.path(type(owner))}.{name}", "is", fn, f"method {type(owner).__name__}.{name}")
        else:
            self.guard(expr, "method", (fn, bound), what)
        self.pin(fn)

    # -- tensors
    def _tensor(self, value, provenance, expr):
        kind, name, owner = provenance.kind, provenance.name, provenance.owner
        if self.strict:
            where = f"{provenance.filename}:{provenance.lineno}"
            what = {"global": "global", "closure": "closure variable", "attr": "attribute", "item": "container item",
                    "default": "default"}.get(kind, kind)
            raise NotImplementedError(
                f"thunder: functional.jit reads tensor '{name}' ({what}, in {provenance.fn_name} at {where}) "
                "that is not an input of the jitted function. Workaround: pass it as an argument, or use thunder.jit.")
        if expr is None and kind == "attr":
            # an object reached by native code: read through it as a constant
            expr = self._attr_expr(self._module_expr(owner), owner, name)
        if expr is None:
            return value  # not readable at call time: an op refuses it, naming it
        p = self._tensor_reads.get(expr)
        if p is not None:
            return p
        p = self.inputs._by_id.get(id(value))
        first = None if p is None else next((e for e, i in self.reads if self.inputs.proxies[i] is p), None)
        if first is not None:
            # a tensor read from state before through another path (a parameter through its module,
            # then through an optimizer's param_groups): the same proxy, so that an update through
            # one path is seen through the other; the prologue checks both paths read one tensor
            self.guard(f"(({expr}) is ({first}))", "is", True, f"whether {name!r} is the tensor read as {first}")
            self._tensor_reads[expr] = p
            return p
        module_name = self._module_names.get(id(owner), "").replace(".", "_")
        hint = f"{module_name}_{name}" if module_name else str(name)
        i, p = self.inputs.add(self.stand_ins.get(id(value), value), _identifier(hint))
        self.inputs._by_id[id(value)] = p  # (a stand-in's real tensor, handed back by native code, too)
        self.reads.append((expr, i))
        self._tensor_reads[expr] = p
        return p

    def array_input(self, a):
        """A numpy array read from state (a module's or a global's) that torch.from_numpy,
        torch.as_tensor or torch.tensor gets: an input of the program like an array argument
        (core/ndarray.py ArrayProxy; the prologue's torch.from_numpy of it at each call), so an
        update of its values between calls is read as eager reads it; None for other arrays."""
        found = self._arrays.get(id(a))
        t = ndarray.as_input_tensor(a) if found is not None else None
        if t is None:
            return None
        _, expr, provenance = found
        self._array_inputs.add(id(a))
        return ndarray.ArrayProxy(self._tensor(t, provenance, f"{self.const(torch.from_numpy)}({expr})"), a)

    def array_guards(self):
        """After tracing: an array read from state that numpy's own operations used (none turned it
        into an input) gave the trace constants computed from its values; up to ARRAY_GUARD_BYTES,
        the prologue compares its bytes with a copy (a value updated in place misses), larger
        ones only its identity (docs/sharp_edges.md)."""
        for a, expr, provenance in self._arrays.values():
            if id(a) not in self._array_inputs and a.nbytes <= ARRAY_GUARD_BYTES:
                self.guard(expr, "array", a.copy(), f"the numpy array {provenance.name!r}")

    def made_array(self, a):
        """Whether numpy array a was made while tracing (not read from state, not an argument: an
        argument torch cannot share stays an opaque object), so its values are the trace's."""
        return id(a) not in self._arrays and id(a) not in self.argument_arrays

    def _module_expr(self, obj):
        """A submodule of the jitted module reached by native code: through its path from the
        root (a replaced submodule then shows); other objects as constants."""
        name = self._module_names.get(id(obj))
        if name is None or self.root is None:
            return self.path(obj) or self.const(obj)
        expr = self.path(self.root)
        for part in name.split(".") if name else []:
            expr += f"._modules[{part!r}]"
        return expr

    def _input_of(self, proxy):
        """(the tensor of this call a proxy of its inputs stands for, the expression reading it at
        call time or None), or None for other proxies (tensors the call computed)."""
        k = next((i for i, p in enumerate(self.inputs.proxies) if p is proxy), None)
        if k is None:
            return None
        return self.inputs.tensors[k], self.arg_paths.get(k) or next((e for e, i in self.reads if i == k), None)

    def same(self, a, b):
        """on_is: `a is b` of two proxies of the call's inputs is whether they stand for one
        tensor (an argument that is a parameter: `t is self.weight`), guarded."""
        if not (isinstance(a, TensorProxy) and isinstance(b, TensorProxy)):
            return a is b
        ins = self._input_of(a), self._input_of(b)
        if None in ins:
            return False  # (a tensor the call computed is no input)
        (ta, ea), (tb, eb) = ins
        if ea is None or eb is None:
            raise NotImplementedError(
                f"thunder: `{a.input_name or a.name} is {b.input_name or b.name}` asks whether two tensors are one, "
                "which cannot be checked at call time for these. Workaround: compare them outside the jitted function")
        self.guard(f"({ea} is {eb})", "is", ta is tb, f"whether {a.input_name or a.name} and "
                   f"{b.input_name or b.name} are one tensor")
        return ta is tb

    def object_id(self, value):
        """id() inside the jitted function: of a proxy of the call's inputs, the id of the tensor it
        stands for (a dict built outside by id(p) is read with it), which pins that tensor."""
        found = self._input_of(value) if isinstance(value, TensorProxy) else None
        if found is None:
            return id(value)
        real, expr = found
        if expr is None:
            raise NotImplementedError(
                f"thunder: id() of {value.input_name or value.name} cannot be checked at call time. Workaround: "
                "compute it outside the jitted function")
        self.guard(expr, "is", real, f"which tensor {value.input_name or value.name} is (its id() was read)")
        return id(real)

    def key_of(self, container, key, write=False):
        """on_key: a dict or set holding tensors is read with the tensor a proxy of the call's
        inputs stands for (eager hashes tensors by identity: `scales[param]`, `p in no_decay`),
        and which tensor that is gets a guard; so is one that outlives the call written (an
        optimizer's state keyed by its parameters). Other keys (a dict the call made, keyed by
        its proxies) are used as they are."""
        if not isinstance(key, TensorProxy):
            return key
        if not (write and self._outlives_call(container)) and not any(isinstance(k, torch.Tensor) for k in container):
            return key
        found = self._input_of(key)
        if found is None:
            return key  # (a tensor the call computed: in no container that outlives the call)
        real, expr = found
        if expr is None:
            raise NotImplementedError(
                f"thunder: {key.input_name or key.name} is a key of a dict or set that holds tensors, and which "
                "tensor it is cannot be checked at call time. Workaround: key the container by a name or an id "
                "computed outside the jitted function")
        self.guard(expr, "is", real, f"which tensor {key.input_name or key.name} is (a key of a dict or set)")
        return real

    def read_grad(self, proxy):
        """x.grad of a tensor the trace reads (proxy): read at call time through the tensor's
        expression (args[0].grad, _s0._parameters['weight'].grad), an input of the trace; None
        is guarded. None for other proxies (results of ops have no .grad in eager)."""
        found = self._input_of(proxy)
        if found is None:
            return None
        t, expr = found
        if id(t) in self.grads:  # (set by the traced code: a backward, an optimizer's zero_grad)
            return self.grads[id(t)]
        name = proxy.input_name or proxy.name
        if expr is None:
            raise NotImplementedError(f"thunder: the .grad of {name} cannot be read at call time. Workaround: pass "
                                      "the gradient as an argument of the jitted function")
        if t.grad is None:
            self.guard(f"{expr}.grad", "is", None, f"the .grad of {name}")
            return None

        return self._tensor(t.grad, Provenance("attr", "grad", t, "", "", None), f"{expr}.grad")

    def _proxy_of_real(self, t):
        """The proxy of a tensor native code handed over (a parameter from `model.parameters()`):
        the trace's where it read it, else read now (through its module, or as a constant)."""
        p = self.inputs.proxy_of(t)
        if p is t:
            p = self.module_tensor(t)
        if p is None:
            p = self._tensor(t, Provenance("attr", "tensor", t, "", "", None), self.const(t))
        return p

    def write_grad(self, proxy, value):
        """x.grad = value (a tensor of the trace or None) of a tensor the trace reads: the traced
        code reads it back from here (read_grad), and the program sets it on that tensor after the
        computation, as attribute writes are replayed. Eager's checks of the value; the .grad of
        a tensor the call computed is refused (eager keeps it on a tensor that dies with the call,
        unless returned)."""
        if value is not None and not isinstance(value, (TensorProxy, torch.Tensor)):
            raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type {type(value).__name__}")
        if value is not None:
            if value.dtype != proxy.dtype:
                raise RuntimeError(f"attempting to assign a gradient with dtype '{value.dtype}' to a tensor with "
                                   f"grad_dtype '{proxy.dtype}'. The gradient must match the tensor's grad_dtype "
                                   "(defaults to the tensor's dtype).")
            if value.device != proxy.device:
                raise RuntimeError("assigned grad has data located on a different device")
            if tuple(value.shape) != tuple(proxy.shape):
                raise RuntimeError(f"attempting to assign a gradient of size '{list(value.shape)}' to a tensor of size "
                                   f"'{list(proxy.shape)}'. Please ensure that the gradient and the tensor are the same "
                                   "size")
        found = self._input_of(proxy)
        if found is None or found[1] is None:
            raise NotImplementedError(
                f"thunder: setting the .grad of {proxy.input_name or proxy.name}{tracing.where()}, a tensor "
                "computed in the jitted function (or one that cannot be reached at call time), is not supported. "
                "Workaround: return the tensor and set its .grad outside")
        real, expr = found
        self.pin(real, expr)
        self.grads[id(real)] = value
        self._replayed(real, "grad", value, real.grad, Provenance("attr", "grad", real, "", "", None))

    # -- writes
    def _outlives_call(self, owner):
        """The jitted module's submodules and objects the prologue can reach (read from outside:
        globals, closures, inputs, their attributes); not objects the traced code creates
        (nn.CrossEntropyLoss() made in forward: its writes are neither replayed nor undone)."""
        return id(owner) in self._module_names or self.path(owner) is not None

    def restore(self):
        """Undo the attribute writes and list appends tracing made (they happened with proxies)."""
        for owner, length in self._appended.values():
            del owner[length:]
        for owner, name, value in self.originals.values():
            if name == APPEND:
                continue
            if isinstance(name, Item):
                if value is _MISSING:
                    owner.pop(name.key, None)
                else:
                    owner[name.key] = value
                continue
            if value is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, value)

    def finish_writes(self):
        """The writes to replay: [(owner expression, name, value)]: value is a Python scalar, a
        value computed from the trace's tensors (tensors, runtime numbers, containers holding
        them: results of the program), or a Constant (dtypes, devices, tuples, objects: see
        _constant). A write undone before the function returned (the attribute holds its
        original value again, as transformers' CompileableContextVar set and reset around a
        forward) has no effect to replay."""
        replay = []
        for key, (owner, name, value) in self.writes.items():
            original = self.originals[key][2]
            if value is original or (is_plain_value(value) and type(value) is type(original) and value == original):
                continue
            found = self._input_of(value) if isinstance(value, TensorProxy) else None
            if found is not None and found[0] is original:
                continue  # (the tensor written back where it was read: its update is the input's)
            if not isinstance(value, (TensorProxy, NumberProxy, bool, int, float, str, type(None))) \
                    and not holds_proxy(value):
                value = self._constant(value, self._write_sites[key])
            replay.append((self.path(owner) or self._module_expr(owner), name, value))
        return replay

    def _constant(self, value, site):
        """A value without tensors of the trace written to an object that outlives the call:
        the same object on every call where eager's would be (immutable values, objects that
        existed before the call), else a fresh copy of it per call (a list, dict or object
        the call made: eager makes a new one on each call)."""
        made = id(value) in self._created or type(value) in (list, dict, set, OrderedDict) and self.path(value) is None
        if _immutable(value) or not made:
            return Constant(value, fresh=False)
        keep = {id(o): o for o in self._not_made(value, set())}  # (copied as themselves: eager's objects)
        try:
            copy.deepcopy(value, dict(keep))
        except Exception as e:  # noqa: BLE001 - any failure of the object's own copy protocol
            raise NotImplementedError(
                f"thunder: writing a {type(value).__name__} to '{site.name}' ({site.kind}, {site.filename}:"
                f"{site.lineno}) that outlives the call: the object, made in the call, cannot be copied for the "
                f"next calls ({type(e).__name__}: {e}). Workaround: return the value instead.") from None
        return Constant(value, fresh=True, keep=keep)

    def _not_made(self, value, seen):
        """The objects inside a value the call made that the call did not make."""
        if id(value) in seen or _immutable(value) or isinstance(value, (type, types.ModuleType)):
            return []
        seen.add(id(value))
        if type(value) in (list, tuple, set, frozenset):
            return [o for v in value for o in self._not_made(v, seen)]
        if type(value) in (dict, OrderedDict):
            return [o for v in value.values() for o in self._not_made(v, seen)]
        if id(value) in self._created and type(getattr(value, "__dict__", None)) is dict:
            return [o for v in vars(value).values() for o in self._not_made(v, seen)]
        return [value]


# the Journals of the changes_undone blocks around the trace under way (innermost last)
_JOURNALS = contextvars.ContextVar("thunder_change_journals", default=())


class Journal:
    """What the objects a trace changed for real (globals, containers that outlive the call: made
    while tracing only) held before its first write to each, and the state of Python's and
    numpy's global random generators (their draws while tracing are constants of the program)."""

    def __init__(self, undo):
        self.undo = undo  # (put back when its block ends: the traces only learn something)
        self.saved = {}  # (id(object), global name or None) -> (object, name, what it held)
        self.generators = _generator_states()

    def rewind(self):
        """Put every object and generator back as it was; the journal starts anew."""
        _set_generator_states(self.generators)
        for obj, name, value in reversed(list(self.saved.values())):
            if name is not None:  # (a global)
                if value is _MISSING:
                    obj.pop(name, None)
                else:
                    obj[name] = value
            elif isinstance(obj, (dict, set)):
                obj.clear()
                obj.update(value)
            elif isinstance(obj, deque):
                obj.clear()
                obj.extend(value)
            else:
                obj[:] = value
        self.saved = {}


def _generator_states():
    numpy = sys.modules.get("numpy")  # (imported by torch where installed)
    return random.getstate(), numpy.random.get_state() if numpy is not None else None


def _set_generator_states(states):
    random.setstate(states[0])
    if states[1] is not None:
        sys.modules["numpy"].random.set_state(states[1])


@contextlib.contextmanager
def changes_undone(undo=True):
    """Around traces made only to learn something of the function (whether it traces at other
    sizes, which tensors it reads), before or after the trace of the call itself: what they
    change for real is put back as it was before their first write (undo=False: only where the
    caller rewinds the Journal yielded, to trace the call again: its effects happen once)."""
    journal = Journal(undo)
    token = _JOURNALS.set(_JOURNALS.get() + (journal,))
    try:
        yield journal
    finally:
        _JOURNALS.reset(token)
        if undo:
            journal.rewind()


def learning_only():
    """Whether the trace under way is one made only to learn something (changes_undone)."""
    return any(j.undo for j in _JOURNALS.get())


def before_write(obj, name=None):
    """Under changes_undone: what obj (a container; with name: the globals dict) holds, kept
    before the traces' first write to it."""
    journals = [j for j in _JOURNALS.get() if (id(obj), name) not in j.saved]
    if not journals:
        return
    if name is not None:
        value = obj.get(name, _MISSING)
    elif isinstance(obj, dict):
        value = list(dict.copy(obj).items())  # (a copy in one step: weakref callbacks may change it)
    elif isinstance(obj, set):
        value = set.copy(obj)
    elif isinstance(obj, (list, deque)):
        value = list(obj.copy())
    else:
        return
    for j in journals:
        j.saved[(id(obj), name)] = (obj, name, value)


@dataclasses.dataclass(frozen=True, eq=False)
class Constant:
    """A written value the program replays as it is (fresh=False) or as a deep copy made on each
    call (fresh=True), in which the objects of `keep` (id -> object: what the call did not make)
    stay themselves."""
    value: object
    fresh: bool
    keep: dict = dataclasses.field(default_factory=dict)


_IMMUTABLE = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.layout,
              torch.memory_format, torch.Size, range, slice, type(Ellipsis))


def _immutable(value):
    if isinstance(value, (tuple, frozenset)) and type(value) in (tuple, frozenset, torch.Size) \
            or _is_container(value) and isinstance(value, tuple):
        return all(_immutable(v) for v in value)
    return isinstance(value, _IMMUTABLE) or isinstance(value, enum.Enum)


def holds_proxy(value, _seen=None):
    """Whether a value holds tensors or numbers of the trace (in containers or object attributes)."""
    if isinstance(value, (TensorProxy, NumberProxy)):
        return True
    seen = set() if _seen is None else _seen
    if id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, dict):
        return any(holds_proxy(v, seen) for v in value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(holds_proxy(v, seen) for v in value)
    if isinstance(value, torch.nn.Module) or not hasattr(value, "__dict__") or isinstance(value, type):
        return False
    return any(holds_proxy(v, seen) for v in vars(value).values())


def _stable(owner, name, value):
    try:
        return getattr(owner, name) is value
    except Exception:  # noqa: BLE001 - a second read that fails is not stable
        return False


def _is_container(value):
    """Lists, tuples (namedtuples too), dicts (OrderedDict: module hook dicts) and sets."""
    return type(value) in _CONTAINERS or isinstance(value, tuple) and hasattr(type(value), "_fields")


_MODULE_FILE = torch.nn.Module.__setattr__.__code__.co_filename
APPEND = "append()"  # the name of a replayed write that appends its value to a list (prologue.py)


@dataclasses.dataclass(frozen=True, eq=False)
class Item:
    """The name of a replayed write of a dict's item (prologue.py): `container[key] = value`."""
    key: object

    def _identity(self):  # (literal keys by value, objects such as parameters by identity)
        return (type(self.key), self.key) if has_literal(self.key) else id(self.key)

    def __hash__(self):
        return hash(self._identity())

    def __eq__(self, other):
        return isinstance(other, Item) and self._identity() == other._identity()


def _own_value(owner, name):
    """What owner holds under name itself (not from its class), _MISSING where nothing: an
    nn.Module's parameter, buffer or submodule is held in its dicts, not in __dict__ (CTRL
    reassigns its pos_encoding buffer in forward: restored as missing, the buffer was deleted)."""
    if name == "cell_contents" or not hasattr(owner, "__dict__"):
        return getattr(owner, name, _MISSING)
    if name in owner.__dict__:
        return owner.__dict__[name]
    if isinstance(owner, torch.nn.Module):
        for container in ("_parameters", "_buffers", "_modules"):
            held = owner.__dict__.get(container, {})
            if name in held:
                return held[name]
    return _MISSING


def _describe_owner(owner):
    return f"a {type(owner).__name__}"


def _describe_key(key):
    """A key in a message: a tensor (an optimizer's state keyed by its parameters) by its kind
    and shape, not its values."""
    if isinstance(key, torch.Tensor):
        return f"<{type(key).__name__} {tuple(key.shape)} {key.dtype}>"
    return repr(key)
