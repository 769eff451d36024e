"""State inputs: tensors the jitted code reads from outside its arguments (module parameters and
buffers, attributes of objects, globals, closure cells). Each becomes an input of the trace that
the prologue reads at call time, so a changed value shows in the next call and changed metadata
recompiles. Module flags that change what the program does (training, hooks) are guarded too."""
import dataclasses

import torch

from thunder.core import trace as tracing
from thunder.core.numbers import NumberProxy
from thunder.core.proxies import TensorProxy, proxy_for

# module attributes whose value decides what forward does: a change must recompile
_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


_MISSING = object()


def _is_real_tensor(v):
    return isinstance(v, torch.Tensor) and not isinstance(v, TensorProxy)


def _identifier(hint):
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in hint).strip("_") or "s"
    return name if not name[0].isdigit() else f"m{name}"


class StateTracker:
    def __init__(self, root, tensors, proxies):
        self.root = root  # the jitted nn.Module, or None
        self.tensors, self.proxies = tensors, proxies
        self.reads = []  # (expression, tensor index)
        self.guards = []  # (expression, expected value) checked with `is`/==
        self.consts = {}  # name -> object the expressions refer to
        self._seen = {}  # (id(owner), name) -> proxy
        self.scalar_reads = {}  # (id(owner), name) -> (owner, value) of the first non-tensor read
        self.writes = {}  # (id(owner), name) -> (owner, name, value): attribute writes to replay
        self.originals = {}  # (id(owner), name) -> (owner, name, value before the first write)
        self._guarded = set()
        self._paths = {id(m): p for p, m in root.named_modules(remove_duplicate=False)} if root is not None else {}
        self.input_objects = set()  # ids of objects passed as inputs (the prologue checks identity)
        self._owners = None  # id(tensor) -> (module, name) of the root's parameters and buffers

    def const(self, obj):
        for k, v in self.consts.items():
            if v is obj:
                return k
        name = f"_s{len(self.consts)}"
        self.consts[name] = obj
        return name

    def _module_expr(self, module):
        path = self._paths.get(id(module))
        if path is None:
            return self.const(module)
        expr = self.const(self.root)
        for part in path.split(".") if path else []:
            expr += f"._modules[{part!r}]"
        return expr

    def _owner_expr(self, owner, name):
        """Expression that reads attribute `name` of owner the way forward's getattr does."""
        if isinstance(owner, torch.nn.Module):
            m = self._module_expr(owner)
            for container in ("_parameters", "_buffers"):
                if name in owner.__dict__.get(container, {}):
                    return f"{m}.{container}[{name!r}]"
            return f"{m}.__dict__[{name!r}]"
        return f"{self.const(owner)}.{name}"

    def load(self, value, provenance):
        if isinstance(value, TensorProxy):
            return value
        kind, name, owner = provenance.kind, provenance.name, provenance.owner
        if isinstance(value, torch.Tensor):
            key = (id(owner), name)
            if key in self._seen:
                return self._seen[key]
            if kind == "attr":
                expr = self._owner_expr(owner, name)
                hint = self._paths.get(id(owner), "").replace(".", "_")
                hint = f"{hint}_{name}" if hint else name
            elif kind == "global":
                expr, hint = f"{self.const(owner)}[{name!r}]", name
            else:  # a closure cell
                expr, hint = f"{self.const(owner)}.cell_contents", name
            return self._read(value, key, expr, hint)
        if type(value) in (list, tuple) and any(_is_real_tensor(v) for v in value):
            # a list of tensors (nn.LSTM's _flat_weights): each is read where it lives, a module's
            # parameter or buffer through its module, another through the list
            return type(value)(self._load_item(value, i, provenance) for i in range(len(value)))
        if kind == "attr" and isinstance(owner, torch.nn.Module):
            self._guard_module_attr(owner, name, value)
        if kind == "attr" and (id(owner), name) not in self.scalar_reads:
            self.scalar_reads[(id(owner), name)] = (owner, value)
        if kind == "closure" and (id(owner), "cell_contents") not in self.scalar_reads:
            self.scalar_reads[(id(owner), "cell_contents")] = (owner, value)
        return value

    def _read(self, value, key, expr, hint):
        p = proxy_for(value, tracing.new_name(_identifier(hint)))
        self.tensors.append(value)
        self.proxies.append(p)
        self.reads.append((expr, len(self.tensors) - 1))
        self._seen[key] = p
        return p

    def _load_item(self, items, i, provenance):
        v = items[i]
        if not _is_real_tensor(v):
            return v
        if self._owners is None:
            self._owners = {} if self.root is None else {
                id(t): (m, n) for m in self.root.modules()
                for n, t in [*m._parameters.items(), *m._buffers.items()] if t is not None}
        owner = self._owners.get(id(v))
        if owner is not None:
            return self.load(v, dataclasses.replace(provenance, kind="attr", owner=owner[0], name=owner[1]))
        key = (id(items), i)
        return self._seen.get(key) or self._read(v, key, f"{self.const(items)}[{i}]", f"{provenance.name}_{i}")

    def store(self, value, provenance):
        """An attribute write in the jitted code: replayed by the program on every call when the
        object outlives the call (a module, an input object)."""
        if provenance.kind == "closure":  # a variable captured from outside (nonlocal)
            owner, name = provenance.owner, "cell_contents"
        elif provenance.kind == "attr" and self._outlives_call(provenance.owner):
            owner, name = provenance.owner, provenance.name
        else:
            return
        key = (id(owner), name)
        if key not in self.originals:  # restored after tracing; the program replays the write
            self.originals[key] = (owner, name, owner.__dict__.get(name, _MISSING)
                                   if hasattr(owner, "__dict__") and name != "cell_contents"
                                   else getattr(owner, name, _MISSING))
        if not (isinstance(value, (TensorProxy, NumberProxy, bool, int, float, str, type(None)))):
            raise NotImplementedError(
                f"thunder: writing a {type(value).__name__} to '{provenance.name}' ({provenance.kind}, "
                f"{provenance.filename}:{provenance.lineno}) is not supported: only "
                "tensors and Python scalars are replayed on every call. Workaround: return the value instead.")
        self.writes[(id(owner), name)] = (owner, name, value)

    def _outlives_call(self, owner):
        if isinstance(owner, torch.nn.Module):
            return True
        return any(owner is v for v in self.consts.values()) or id(owner) in self.input_objects

    def restore(self):
        """Undo the attribute writes tracing made (they happened with proxies)."""
        for owner, name, value in self.originals.values():
            if value is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, value)

    def finish_writes(self):
        """Guards for attributes read before being written (their value decides the program),
        and the writes to replay: [(owner expression, name, value)]."""
        out = []
        for key, (owner, name, value) in self.writes.items():
            expr = self.const(owner) if not isinstance(owner, torch.nn.Module) else self._module_expr(owner)
            read = self.scalar_reads.get(key)
            if read is not None and not isinstance(read[1], TensorProxy):
                before = read[1]
                if isinstance(before, (bool, int, float, str, type(None))):
                    self.guards.append((f"{expr}.{name}", before))
            out.append((expr, name, value))
        return out

    def _guard_module_attr(self, owner, name, value):
        key = (id(owner), name)
        if key in self._guarded:
            return
        if name == "training":
            self._guarded.add(key)
            self.guards.append((f"{self._module_expr(owner)}.training", value))
        elif name in _HOOK_DICTS:
            self._guarded.add(key)
            self.guards.append((f"len({self._module_expr(owner)}.{name})", len(value)))
        elif value is None and (name in owner._parameters or name in owner._buffers):
            self._guarded.add(key)
            self.guards.append((self._owner_expr(owner, name), None))
