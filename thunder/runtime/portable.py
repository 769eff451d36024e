"""Portable descriptions of the objects a compiled program refers to, for the program cache on
disk (runtime/persist.py): an object of one process becomes a description (tuples of plain
values) that another process resolves to its own object playing the same part, or the object
has no description and the entry is not persisted.

What is described, and how the other process finds it:
- the jitted function or module itself ("root"), and a bound method's parts;
- plain values (numbers, strings, dtypes, devices, torch.Size ...), stored as they are;
- containers (tuple, list, dict, set, OrderedDict) of described items;
- Python modules, and objects a module holds under their qualified name (module-level
  functions and classes, torch's builtins; a decorated function through the decorator's
  __wrapped__), found by importing it again; a function's code must
  hash the same in both processes, and the source file of every module that is not
  torch's or the standard library's is recorded (persist.py checks its hash on load);
- a function made inside another (a lambda held in a closure) that the prologue reads through an
  expression over described objects: found through it, with the same code;
- a module's globals dict; a closure cell of a described function (by the variable's name);
  a described function's code object;
- submodules of the jitted module (by their name in it, of the same class);
- the compiled pieces of a program: fusion kernels (by executor and region text; their binary
  comes from the kernel cache) and the autograd program (its sources and their kernels);
- a guard (guards.Guard) of described values; the prologue's TensorsCheck, by its spec;
- an instance of Python classes (a model's config) whose identity the prologue guards through
  an expression over other described objects (`_s0.config`): found through that expression, of
  the same class, its __dict__ (and items, for a dict or list subclass) describing the same (a
  ContextVar: its name);
Anything else (an object with C state such as a functools.partial, ids, an object no guarded
expression reaches) raises Unportable: when in doubt the program is compiled again instead."""
import collections
import contextvars
import enum
import hashlib
import importlib
import sys
import types

import torch

from thunder.lowering import executors
from thunder.runtime.autograd import AutogradProgram
from thunder.runtime.backward_variants import Variant
from thunder.runtime.codegen import compile_source
from thunder.runtime.guards import Guard, same_value
from thunder.runtime.prologue import TensorsCheck
from thunder.runtime.state import is_library_code
from thunder.runtime import tiered

# values stored as they are (pickled by value, or as torch's own singletons)
_PLAIN = frozenset((type(None), bool, int, float, complex, str, bytes, type(Ellipsis), torch.dtype, torch.device,
                    torch.layout, torch.memory_format))
_CONTAINERS = {tuple: "tuple", list: "list", set: "set", frozenset: "frozenset", dict: "dict",
               collections.OrderedDict: "odict", torch.Size: "size"}
_BUILD = {"tuple": tuple, "list": list, "set": set, "frozenset": frozenset, "size": torch.Size}
_DEPTH = 40


class Unportable(Exception):
    """An object with no portable description (the message says which)."""


def code_hash(code):
    """sha256 of a code object: its bytecode, constants (nested code too), names, flags and line
    table; the same in every process (marshal's output is not: it depends on reference counts)."""
    h = hashlib.sha256()
    _hash_code(code, h)
    return h.hexdigest()


def _hash_code(code, h):
    for field in ("co_name", "co_qualname", "co_filename", "co_firstlineno", "co_argcount", "co_posonlyargcount",
                  "co_kwonlyargcount", "co_flags", "co_names", "co_varnames", "co_freevars", "co_cellvars"):
        h.update(repr(getattr(code, field, None)).encode() + b"\0")
    for field in ("co_code", "co_linetable", "co_exceptiontable"):
        h.update(getattr(code, field, b"") + b"\0")
    for c in code.co_consts:
        _hash_const(c, h)


def _hash_const(c, h):
    if isinstance(c, types.CodeType):
        _hash_code(c, h)
    elif type(c) in (tuple, frozenset):  # (a frozenset's order varies with the string hash seed)
        items = list(c) if type(c) is tuple else sorted(c, key=lambda x: (type(x).__qualname__, repr(x)))
        h.update(f"{type(c).__name__}{len(items)}(".encode())
        for x in items:
            _hash_const(x, h)
    else:
        h.update(f"{type(c).__qualname__}:{c!r}".encode() + b"\0")


def _module_file(name):
    module = sys.modules.get(name)
    return getattr(module, "__file__", None)


class Describer:
    """Describes the objects of one cache entry; files: the source files (not torch's or the
    standard library's) whose contents the description depends on."""

    def __init__(self, cd, known=(), paths=None):
        self.cd = cd
        self.files = set()
        self._known = list(known)  # objects that may own a cell or a code object
        self._paths = paths or {}  # id(object) -> the prologue's expression that reads it (an identity guard's)
        self._submodules = None
        self._open = set()
        self._in_state = 0  # describing what a "read" instance holds
        # id(object), inside a "read" instance's state -> (the object, its description): an
        # object met again (a model's config under every layer's guards, the consts both the
        # prologue and the entry's description hold) is described once
        self._described = {}
        self._fns = None

    def describe(self, v, depth=0):
        if depth > _DEPTH:
            raise Unportable("a value nested too deeply")
        if type(v) in _PLAIN:
            return ("v", v)
        key = (id(v), self._in_state > 0)
        seen = self._described.get(key)
        if seen is not None and seen[0] is v:
            return seen[1]
        d = self._describe(v, depth)
        self._described[key] = (v, d)  # (the object kept: its id is not reused meanwhile)
        return d

    def _describe(self, v, depth):
        root = self.cd.fn
        if v is root:
            return ("root",)
        if isinstance(root, types.MethodType):
            if v is root.__self__:
                return ("root_self",)
            if v is root.__func__:
                return ("root_func",)
        if type(v) in (slice, range):
            return (type(v).__name__, *(self.describe(x, depth + 1) for x in (v.start, v.stop, v.step)))
        if isinstance(v, enum.Enum):
            return ("enum", self.describe(type(v), depth + 1), v.name)
        if type(v) is dict and self._globals_of(v) is not None:
            return ("globals", self._globals_of(v))
        kind = _CONTAINERS.get(type(v))
        if kind is not None:
            if id(v) in self._open:
                raise Unportable("a container that holds itself")
            self._open.add(id(v))
            try:
                if kind in ("dict", "odict"):
                    return (kind, tuple((self.describe(k, depth + 1), self.describe(x, depth + 1))
                                        for k, x in v.items()))
                return (kind, tuple(("v", x) if type(x) in _PLAIN else self.describe(x, depth + 1) for x in v))
            finally:
                self._open.discard(id(v))
        if isinstance(v, Guard):
            return ("guard", v.expr, v.check, self.describe(v.expected, depth + 1), v.what)
        if isinstance(v, TensorsCheck):  # (the prologue's check of the tensors it reads: by its spec)
            return ("tensors_check", self.describe(v.spec, depth + 1))
        if isinstance(v, types.ModuleType):
            if sys.modules.get(v.__name__) is not v:
                raise Unportable(f"module {v.__name__} not in sys.modules")
            return ("pymodule", v.__name__)
        if isinstance(v, types.CellType):
            for fn in self._functions():
                names = fn.__code__.co_freevars
                for name, cell in zip(names, fn.__closure__ or ()):
                    if cell is v:
                        return ("cell", self.describe(fn, depth + 1), name)
            raise Unportable("a closure cell of no described function")
        if isinstance(v, types.CodeType):
            for fn in self._functions():
                if fn.__code__ is v:
                    return ("code", self.describe(fn, depth + 1), code_hash(v))
            raise Unportable(f"the code of {v.co_name}, of no described function")
        if isinstance(v, torch.nn.Module):
            name = self._submodule_name(v)
            if name is not None:
                return ("submodule", name, self.describe(type(v), depth + 1))
        if isinstance(v, AutogradProgram):
            return self._program(v, depth)
        region = getattr(v, "region", None)
        if isinstance(region, tuple) and len(region) == 2 and all(type(x) is str for x in region) \
                and not getattr(v, "sizes", ()):  # (a kernel for symbolic sizes: compiled with them)
            return ("kernel",) + region  # (a fusion region's kernel: codegen._fusion_call)
        try:
            return self._imported(v)
        except Unportable:
            expr = self._paths.get(id(v))
            if expr is not None and isinstance(v, types.FunctionType):
                # a function made inside another (a lambda in a closure): found through the
                # expression, with the same code (what the trace read of its closure, defaults
                # and globals is guarded through it)
                return ("read_fn", expr, code_hash(v.__code__))
            state = _state(v) if expr is not None or self._in_state else None
            if state is None:
                raise
        self._in_state += 1
        try:
            if expr is None:  # (inside what an object holds: an object holding the same)
                return ("state", self.describe(type(v), depth + 1), self.describe(state, depth + 1))
            # an instance (a model's config) the prologue reads through an expression over
            # described objects, of the same class and holding what it held when stored
            return ("read", expr, self.describe(type(v), depth + 1), self.describe(state, depth + 1))
        finally:
            self._in_state -= 1

    def _imported(self, v):
        """An object that a module holds under its qualified name."""
        module, qualname = getattr(v, "__module__", None), getattr(v, "__qualname__", None)
        if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
            raise Unportable(f"a {type(v).__name__} ({qualname or v!r:.60}) that no module holds by name")
        for name in dict.fromkeys((qualname, getattr(v, "__name__", qualname))):  # (torch.tanh: its __name__)
            try:
                found = _lookup(module, name, load=False)
            except Exception:  # noqa: BLE001 - whatever the lookup raises: not found under that name
                found = None
            wrapped = 0  # (a decorated function: the decorator's functools.wraps keeps the original)
            while found is not v and hasattr(found, "__wrapped__") and wrapped < 8:
                found, wrapped = found.__wrapped__, wrapped + 1
            if found is v:
                qualname = name
                break
        else:
            raise Unportable(f"{module}.{qualname} is not reached by its name")
        path = _module_file(module)
        if module != "__main__" and path is None and not isinstance(v, (types.BuiltinFunctionType, type)):
            raise Unportable(f"{module}.{qualname}: its module has no file")
        if path is not None and not is_library_code(path):
            self.files.add(path)
        code = getattr(v, "__code__", None)
        if not isinstance(code, types.CodeType) or is_library_code(code.co_filename):
            return ("import", module, qualname, None, wrapped)  # (torch's and Python's: their versions are keyed)
        return ("import", module, qualname, code_hash(code), wrapped)

    def _program(self, p, depth):
        d = {name: getattr(p, name) for name in ("num_outputs", "grad_of", "cotangent_for", "num_inputs",
                                                 "forward_source", "backward_mlir", "fusion", "first_fusion")}
        d["forward_mlir"] = p.__dict__.get("forward_mlir")  # (AutogradProgram.differentiable)
        # (the backward as compiled so far: none before the first backward call, compiled from
        # backward_mlir in the process that loads it, runtime/autograd.py)
        d["backward_source"] = p.__dict__.get("backward_source")
        # the backwards for some cotangents absent compiled so far: (the outputs with one, the
        # inputs it returns gradients of, its source)
        full = set(p.cotangent_for)
        d["variants"] = [(sorted(k), v.grad_of, v.source) for k, v in p.__dict__.get("variants", {}).items()
                         if not k >= full]
        d["reaches"] = [sorted(r) for r in p.reaches]
        d["grad_outputs"] = sorted(p.grad_outputs)
        d["constants"] = {k: self.describe(c, depth + 1) for k, c in p.constants.items()}
        d["variant_constants"] = [{k: self.describe(c, depth + 1) for k, c in v.constants.items()}
                                  for k, v in p.__dict__.get("variants", {}).items() if not k >= full]
        return ("autograd", self.describe(d, depth + 1))

    def _functions(self):
        if self._fns is None:  # (asked for each cell and code object described: listed once)
            fns = [self.cd.fn.__func__ if isinstance(self.cd.fn, types.MethodType) else self.cd.fn]
            fns += [x for x in self._known if isinstance(x, types.FunctionType)]
            self._fns = [f for f in fns if isinstance(f, types.FunctionType)]
        return self._fns

    @staticmethod
    def _globals_of(d):
        name = d.get("__name__")
        module = sys.modules.get(name) if isinstance(name, str) else None
        return name if module is not None and getattr(module, "__dict__", None) is d else None

    def _submodule_name(self, m):
        if self.cd.module is None:
            return None
        if self._submodules is None:
            self._submodules = {id(x): n for n, x in self.cd.module.named_modules(remove_duplicate=False)}
        return self._submodules.get(id(m))


def _state(v):
    """What an instance of classes written in Python holds: its __dict__, and its items when it
    subclasses dict or list; None for an object with other state in C fields (a
    functools.partial, a tensor: a C type makes its instances with a __new__ of its own)."""
    if type(v) is contextvars.ContextVar:  # (its value is read at call time, as in eager)
        return (v.name,)
    if not hasattr(v, "__dict__") or isinstance(v, (type, types.FunctionType, types.MethodType)):
        return None
    for c in type(v).__mro__[:-1]:  # (all but object)
        new = c.__dict__.get("__new__")
        if c not in (dict, list) and new is not None and not isinstance(new, (staticmethod, types.FunctionType)):
            return None
    items = dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else None
    return (dict(vars(v)), items)


def _lookup(module, qualname, load=True):
    """module.qualname; load: import the module if it is not yet."""
    mod = sys.modules.get(module)
    if mod is None:
        if not load:
            raise LookupError(module)
        mod = importlib.import_module(module)
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class Resolver:
    """Resolves descriptions in this process (for the jitted cd.fn); raises Unportable when an
    object is not found or differs (another class, a function's code changed)."""

    def __init__(self, cd, named=None):
        self.cd = cd
        self._imports = {}  # "import" description -> its object
        # the prologue's constants: name -> description, resolved when asked for (a "read"
        # expression refers to others by name)
        self.namespace = _Namespace(self, named or {})

    def resolve(self, d):
        kind = d[0]
        if kind == "v":  # (most of a description's leaves)
            return d[1]
        if kind in _BUILD:
            return _BUILD[kind](x[1] if x[0] == "v" else self.resolve(x) for x in d[1])
        if kind == "import":  # (the same functions, many times: each op's callee)
            obj = self._imports.get(d)
            if obj is None:
                obj = self._imports[d] = self._import(d)
            return obj
        if kind == "state":
            raise Unportable("an object described by what it holds is compared, not resolved")
        if kind == "read_fn":
            fn = self._eval(d[1])
            if not isinstance(fn, types.FunctionType) or code_hash(fn.__code__) != d[2]:
                raise Unportable(f"{d[1]} is another function")
            return fn
        if kind == "read":
            obj = self._eval(d[1])
            if type(obj) is not self.resolve(d[2]):
                raise Unportable(f"{d[1]} is of another class")
            if not self._holds(obj, d[2], d[3]):
                raise Unportable(f"{d[1]} holds other values")
            return obj
        if kind == "root":
            return self.cd.fn
        if kind in ("root_self", "root_func"):
            if not isinstance(self.cd.fn, types.MethodType):
                raise Unportable("the jitted callable is not a bound method")
            return self.cd.fn.__self__ if kind == "root_self" else self.cd.fn.__func__
        if kind in ("slice", "range"):
            return (slice if kind == "slice" else range)(*(self.resolve(x) for x in d[1:]))
        if kind == "enum":
            return self.resolve(d[1])[d[2]]
        if kind == "globals":
            module = sys.modules.get(d[1])
            if module is None:
                raise Unportable(f"module {d[1]} is not imported")
            return module.__dict__
        if kind in ("dict", "odict"):
            return (dict if kind == "dict" else collections.OrderedDict)(
                (self.resolve(k), self.resolve(v)) for k, v in d[1])
        if kind == "guard":
            return Guard(d[1], d[2], self.resolve(d[3]), d[4])
        if kind == "pymodule":
            return importlib.import_module(d[1])
        if kind == "cell":
            fn = self.resolve(d[1])
            names = fn.__code__.co_freevars
            if d[2] not in names or fn.__closure__ is None:
                raise Unportable(f"no closure variable {d[2]}")
            return fn.__closure__[names.index(d[2])]
        if kind == "code":
            code = self.resolve(d[1]).__code__
            if code_hash(code) != d[2]:
                raise Unportable("a function's code changed")
            return code
        if kind == "submodule":
            if self.cd.module is None:
                raise Unportable("no module is jitted")
            m = self.cd.module.get_submodule(d[1])
            if type(m) is not self.resolve(d[2]):
                raise Unportable(f"submodule {d[1]} is of another class")
            return m
        if kind == "kernel":
            kernel = executors.get(d[1]).compile(d[2], "fusion")
            try:  # (as codegen._fusion_call sets it: tiered.tier reads it)
                kernel.region = d[1:]
            except AttributeError:
                pass
            return kernel
        if kind == "tensors_check":
            return TensorsCheck(self.resolve(d[1]))
        if kind == "autograd":
            return self._program(self.resolve(d[1]))
        raise Unportable(f"unknown description {kind!r}")

    @staticmethod
    def _import(d):
        try:
            obj = _lookup(d[1], d[2])
            for _ in range(d[4]):
                obj = obj.__wrapped__
        except Exception as e:  # noqa: BLE001 - the name is gone
            raise Unportable(f"{d[1]}.{d[2]}: {type(e).__name__}") from None
        code = getattr(obj, "__code__", None)
        if d[3] is not None and (not isinstance(code, types.CodeType) or code_hash(code) != d[3]):
            raise Unportable(f"the code of {d[1]}.{d[2]} changed")
        return obj

    def _eval(self, expr):
        """The value of a prologue's expression over its constants."""
        try:
            return eval(expr, {"__builtins__": {"getattr": getattr}}, self.namespace)
        except Exception as e:  # noqa: BLE001 - the path does not lead anywhere here
            raise Unportable(f"{expr}: {type(e).__name__}") from None

    def _holds(self, obj, type_desc, state_desc):
        state = _state(obj)
        return state is not None and type(obj) is self.resolve(type_desc) and self._matches(state, state_desc)

    def _matches(self, live, d, depth=0):
        """Whether a live value is what description d describes: plain values equal (type and
        value), containers item by item, an object "holding the same" by its state, any other
        object identical to what d resolves to."""
        kind = d[0]
        if depth > _DEPTH:
            return False
        if kind == "v":
            return type(live) is type(d[1]) and (same_value(live, d[1]) if type(live) in (int, float, complex)
                                                 else live == d[1])
        if kind == "state":
            return self._holds(live, d[1], d[2])
        if kind in ("tuple", "list", "size") and type(live) is _BUILD[kind]:
            return len(live) == len(d[1]) and all(self._matches(x, y, depth + 1) for x, y in zip(live, d[1]))
        if kind in ("dict", "odict") and type(live) is (dict if kind == "dict" else collections.OrderedDict):
            return len(live) == len(d[1]) and all(self._matches(k, dk, depth + 1) and self._matches(v, dv, depth + 1)
                                                  for (k, v), (dk, dv) in zip(live.items(), d[1]))
        if kind in ("tuple", "list", "size", "dict", "odict"):
            return False
        try:
            return live is self.resolve(d) if kind not in ("set", "frozenset") else live == self.resolve(d)
        except Unportable:
            return False

    def _program(self, d):
        p = AutogradProgram.__new__(AutogradProgram)
        for name in ("num_outputs", "grad_of", "cotangent_for", "num_inputs", "forward_source"):
            setattr(p, name, d[name])
        p.reaches = [set(r) for r in d["reaches"]]
        p.grad_outputs = frozenset(d.get("grad_outputs", ()))  # (older descriptions lack it)
        p.backward_mlir, p.fusion = d.get("backward_mlir"), d.get("fusion")  # (older descriptions lack them)
        p.forward_mlir = d.get("forward_mlir")
        p.first_fusion = d.get("first_fusion", 0)
        p.reporting = tiered.reporting_target()  # (the call loading it: runtime/jit.py)
        p.constants = {k: self.resolve(c) for k, c in d["constants"].items()}
        for fn_name in ("forward", "backward"):
            tiered.tier(p.constants[fn_name])
        p.forward = compile_source(p.forward_source, "forward", constants=p.constants["forward"])
        if d["backward_source"] is not None:
            p.backward_source = d["backward_source"]
            p.backward = compile_source(p.backward_source, "backward", constants=p.constants["backward"])
        elif p.backward_mlir is None:
            raise Unportable("an autograd program with no backward")
        p.variants = {}
        for (used, grad_of, source), described in zip(d.get("variants", ()), d.get("variant_constants", ())):
            names = tiered.tier({k: self.resolve(c) for k, c in described.items()})
            producer = source.split("\n", 1)[0].removeprefix("# produced by: ")
            p.variants[frozenset(used)] = Variant(grad_of, compile_source(source, "backward", constants=names),
                                                  source, names, None, producer)
        return p


class _Namespace(dict):
    """The prologue's constants, each resolved on first use."""

    def __init__(self, resolver, named):
        super().__init__()
        self._resolver, self._named, self._open = resolver, named, set()

    def __missing__(self, name):
        if name not in self._named or name in self._open:
            raise KeyError(name)
        self._open.add(name)
        try:
            value = self[name] = self._resolver.resolve(self._named[name])
        finally:
            self._open.discard(name)
        return value

    def resolve_all(self):
        return {name: self[name] for name in self._named}
