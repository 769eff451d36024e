"""The op registry: one entry per op holds everything known about it.

An op is defined by decorating its meta function:

    @ltorch("torch.add", methods=("add",), dunders=("__add__",), rdunders=("__radd__",))
    def add(input: Tensor, other: Tensor | Number, *, alpha: Number = 1):
        return elementwise(input, other)          # shapes/dtypes/devices of the outputs

    @add.decompose                                 # into thunder prims
    def _(input, other, *, alpha=1): ...

The annotations are parameter kinds (below); they decide what becomes an MLIR operand (tensors and
numbers) and what becomes an attribute (dims, dtypes, flags). The interpreter, the proxies, the
MLIR dialects, the verifier, the Python code generator, the passes and docs/dialect.md all read
these entries.
"""
import functools
import inspect
import numbers
from dataclasses import dataclass, field
from typing import Callable
import operator
import torch

from thunder.core import dispatch, trace as tracing
from thunder.core.dtypes import is_numpy_scalar
from thunder.core.numbers import concrete, has_proxy
from thunder.ops.record import record_op
from thunder.core.dtypes import python_number
from thunder.core.numbers import is_number, NumberProxy
from thunder.core.proxies import data_dependent, TensorProxy, update_inplace, write_out

# --------------------------------------------------------------------------------------------
# Parameter kinds


class Kind:
    """The kind of one op parameter. `Kind | None` makes it optional (None allowed)."""

    def __init__(self, name, *, operand=False, variadic=False, optional=False, accepts=None):
        self.name = name
        self.operand = operand  # an MLIR operand (tensor or number), else an attribute
        self.variadic = variadic
        self.optional = optional
        self._accepts = accepts

    def accepts(self, value):
        if value is None:
            return self.optional
        return self._accepts(value)

    def __or__(self, other):
        if other is None:
            k = Kind(self.name + "?", operand=self.operand, variadic=self.variadic, optional=True,
                     accepts=self._accepts)
            k.base = self
            return k
        if isinstance(other, Kind):
            k = Kind(f"{self.name}|{other.name}", operand=self.operand or other.operand,
                     variadic=self.variadic, optional=self.optional or other.optional,
                     accepts=lambda v: self.accepts(v) or other.accepts(v))
            k.members = (self, other)
            return k
        return NotImplemented

    def __ror__(self, other):
        return self.__or__(other)

    def __repr__(self):
        return self.name

    @property
    def base_name(self):
        return self.name.rstrip("?")


def _is_tensor(v):
    # proxies while tracing; real tensors when an op is called eagerly (record_op checks which)
    return isinstance(v, (TensorProxy, torch.Tensor))


def _is_number(v):
    # (NumberProxy: a runtime number, an SSA value of the trace)
    return is_number(v) and not _is_tensor(v)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_int_like(v):
    """An int, or a runtime int (a NumberProxy, read where an int attribute needs its value), or a
    numpy integer."""
    return (_is_int(v) or isinstance(v, NumberProxy) and v.python_type is int
            or is_numpy_scalar(v) and isinstance(v, numbers.Integral))


def _index(v):
    """operator.index of a tensor (its value, read while tracing), other values as they are."""
    return operator.index(v) if _is_tensor(v) else v


def _slice_bounds_read(key):
    """A __getitem__ key with its slices' tensor bounds read (a split), as Python reads them with
    __index__ (DeBERTa slices its relative embeddings by 0-d tensors): the key recorded holds
    numbers only."""
    if type(key) is slice:
        if any(isinstance(v, TensorProxy) for v in (key.start, key.stop, key.step)):
            return slice(*map(_index, (key.start, key.stop, key.step)))
        return key
    if type(key) is tuple and any(type(e) is slice for e in key):
        return tuple(_slice_bounds_read(e) for e in key)
    return key


def _is_ints(v):
    return isinstance(v, (tuple, list)) and all(_is_int(x) for x in v)


def _is_dtype(v):
    return isinstance(v, torch.dtype)


def _is_memory_format(v):
    return isinstance(v, torch.memory_format)


def _is_device(v):
    return isinstance(v, (torch.device, str))


Tensor = Kind("Tensor", operand=True, accepts=_is_tensor)
Tensors = Kind("Tensors", operand=True, variadic=True,
               accepts=lambda v: isinstance(v, (tuple, list)) and all(_is_tensor(x) for x in v))
Number = Kind("Number", operand=True, accepts=_is_number)
TensorOrNumber = Kind("TensorOrNumber", operand=True, accepts=lambda v: _is_tensor(v) or _is_number(v))
Int = Kind("int", accepts=_is_int)
Float = Kind("float", accepts=lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))
Bool = Kind("bool", accepts=lambda v: isinstance(v, bool))
Str = Kind("str", accepts=lambda v: isinstance(v, str))
Ints = Kind("Ints", accepts=_is_ints)  # a tuple of ints: a shape, a permutation
Dims = Kind("Dims", accepts=lambda v: _is_int(v) or _is_ints(v))  # an int or a tuple of ints
DType = Kind("dtype", accepts=_is_dtype)
Device = Kind("device", accepts=_is_device)
MemoryFormat = Kind("memory_format", accepts=_is_memory_format)  # torch.channels_last, ...
Index = Kind("Index", accepts=lambda v: True)  # a __getitem__ key without tensors


def _is_data(v):
    return _is_number(v) or isinstance(v, (tuple, list)) and all(_is_data(x) for x in v)


Data = Kind("Data", accepts=_is_data)  # a number or nested tuples of numbers: torch.tensor's data
Floats = Kind("Floats", accepts=lambda v: isinstance(v, tuple) and all(
    isinstance(x, (int, float)) and not isinstance(x, bool) for x in v))  # scale factors

# a Python type as a dtype argument, as torch's argument parser reads it (torch.zeros(n, dtype=int))
PYTHON_DTYPES = {int: torch.int64, float: torch.float64, bool: torch.bool, complex: torch.complex128}

# the kinds' tests that every TensorProxy passes (OpDef.bind leaves such values as they are)
_TAKES_PROXIES = (_is_tensor, TensorOrNumber._accepts)
# values that python_number returns as they are (no numpy scalar, no int to check the range of)
_AS_THEY_ARE = frozenset({bool, float, str, type(None), torch.dtype, torch.device})

KINDS = [Tensor, Tensors, Number, TensorOrNumber, Int, Float, Bool, Str, Ints, Dims, DType, Device, Index, Data, Floats]


@dataclass
class Param:
    name: str
    kind: Kind
    default: object = inspect.Parameter.empty
    kw_only: bool = False

    @property
    def has_default(self):
        return self.default is not inspect.Parameter.empty


# --------------------------------------------------------------------------------------------
# Ops


@dataclass
class OpDef:
    name: str
    dialect: str  # "ltorch" or "thunder"
    meta: Callable
    params: list
    torch_name: str  # how the generated Python runs it, e.g. "torch.add"
    methods: tuple = ()
    dunders: tuple = ()
    rdunders: tuple = ()  # reflected operators (__radd__): called as op(proxy, other), so the op
    # must compute `other <op> proxy` (rsub, a reflected division, ...)
    aliases: tuple = ()  # torch callables that are this op (torch.add, torch.Tensor.add, ...)
    varargs: str | None = None  # a parameter that may also be passed as *args (x.view(2, 3))
    returns_sequence: bool = False  # a tuple of tensors (split, chunk) rather than one tensor
    decomposition: Callable | None = None
    vjp_rule: Callable | None = None  # vjp(grads, outputs, **args) -> {param: grad}
    # training_form(**args) -> (OpDef, args) or None: what @forward runs in place of this op when
    # it is differentiated, an op whose first result is this op's and whose other results are what
    # its backward reads (sdpa -> torch's flash attention with its logsumexp)
    training_form: Callable | None = None
    unview_rule: Callable | None = None  # view ops: unview(base, value, index, **args) -> new base
    random: bool = False  # not Pure: draws from the random generator
    is_view: bool = False  # the result shares memory with the input in eager (in-place safety)
    returns_input: bool = False  # may return the input itself (x.to(x.dtype), x.float() of float32 x)
    strided: bool = False  # whether it is a view, or allowed at all, depends on the input's strides
    # eager's results are contiguous whatever the inputs' strides: no meta run to learn them (torch's
    # meta kernel for layer_norm is a Python reference whose first call imports torch._dynamo, ~1.5 s)
    contiguous: bool = False
    # eager computes it with one TensorIterator: its result's strides follow that rule
    # (core/strides.py), computed without a meta run (torch's elementwise meta kernels are Python
    # references that import torch._dynamo too); numbers_are_operands: eager wraps the Python
    # numbers among its TensorOrNumber operands as 0-d tensors (add(Tensor, Scalar)), which take
    # part in the rule; else numbers are the kernel's parameters (clamp's min)
    elementwise: bool = False
    numbers_are_operands: bool = False
    differentiable: bool = True  # False: results never carry gradient (only inputs' metadata is read)
    effects: bool = False  # writes memory (copy_ into an input): not Pure
    # Number operands whose values decide the result's metadata (arange's start/end/step): a
    # runtime number (NumberProxy) there is read, and the trace specialized on it
    static_numbers: tuple = ()
    normalize: Callable | None = None  # normalize(values): rewrites bound arguments (int -> tuple, ...)
    # python(values, result names) -> statements: the generated code of ops that torch_name and
    # the calling convention of ops/execute.py cannot express (the fallback's ltorch.torch_call)
    python: Callable | None = None
    # python_grad_free(values, result names) -> statements or None: the generated code in a program
    # that records no autograd history (codegen's grad_free), where it may call what autograd
    # cannot differentiate (float32 CPU matmuls through oneDNN: ops/onednn.py); None: as elsewhere
    python_grad_free: Callable | None = None
    # python_inplace(values, result names) -> (the operand, statements) or None: the generated code
    # that writes the result into the operand (the tensor's old value) in place, for a program that
    # re-inplaces an input's update (runtime/reinplace.py); None: the generic rule there
    python_inplace: Callable | None = None
    # torch runs it as the ltorch ops of its decomposition, one kernel each (cross_entropy:
    # log_softmax, then nll_loss): thunder-fuse's cost model counts the torch calls of those
    torch_composite: bool = False
    return_type: type | None = None  # a torch.return_types structseq for results like (values, indices)
    doc: str = ""
    signature: inspect.Signature = field(default=None, repr=False)

    @property
    def qualname(self):
        return f"{self.dialect}.{self.name}"

    def decompose(self, fn):
        self.decomposition = fn
        return fn

    def unview(self, fn):
        """Register how an in-place update of this view op's result reaches its base:
        fn(base, value, index, **other args) returns the base's new value (index: which result,
        for ops returning several views)."""
        self.unview_rule = fn
        return fn

    def vjp(self, fn):
        """Register the op's vector-Jacobian product: fn(g, out, **args) gets the cotangent(s) of
        the output(s) and the forward values, and returns {tensor param name: its cotangent}
        (None where there is none; a tuple for a tensor-list param)."""
        self.vjp_rule = fn
        return fn

    def trains_as(self, fn):
        """Register the op's training form (see `training_form`)."""
        self.training_form = fn
        return fn

    def bind(self, args, kwargs):
        """Normalize a call into {param name: value}, with torch's errors for bad calls."""
        b = binding(self)
        if self.varargs is not None:
            args, kwargs = _gather_varargs(self, args, kwargs)
        if kwargs and any(k in _NUMPY_NAMES and k not in b.names for k in kwargs):
            kwargs = _numpy_names(b, kwargs)
        values = _bind_plain(b, args, kwargs)
        if values is None:  # (a call _bind_plain does not decide: inspect's binding, and its errors)
            try:
                bound = self.signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{self.torch_name}(): {e}") from None
            bound.apply_defaults()
            values = dict(bound.arguments)
        for name, is_key in b.values_read:
            v = values[name]
            if is_key:
                values[name] = _slice_bounds_read(v)
            elif type(v) is TensorProxy and not v.shape:
                values[name] = v.item()  # (torch's parser takes a 0-d tensor's value for a number)
        for name in b.read:
            # attributes are constants of the trace: runtime numbers there are read (a split)
            if has_proxy(values[name]):
                values[name] = concrete(values[name], f"the '{name}' argument of {self.torch_name}")
        if self.normalize is not None:
            self.normalize(values)  # raises torch's errors for bad values

        for p, takes_proxy, scalar in b.checks:
            v = values[p.name]
            if type(v) is TensorProxy and takes_proxy or v is None and p.kind.optional:
                continue  # (what the checks below leave as it is)
            if type(v) is type and p.kind.base_name == "dtype" and v in PYTHON_DTYPES:
                v = values[p.name] = PYTHON_DTYPES[v]
            elif type(v) not in _AS_THEY_ARE:
                v = values[p.name] = python_number(v, self.torch_name, scalar)
            if isinstance(v, list) and p.kind.base_name in ("Ints", "Dims", "Tensors"):
                v = values[p.name] = tuple(v)
            if not p.kind.accepts(v):
                # torch.Size and other int sequences count as Ints
                if p.kind.base_name in ("Ints", "Dims") and _is_ints(tuple(v) if isinstance(v, (tuple, list)) else v):
                    values[p.name] = tuple(v)
                    continue
                if not p.kind.operand and any(_is_tensor(x) for x in (v if isinstance(v, (tuple, list)) else (v,))):
                    if tracing.values_known():  # a tensor as a size: its value is read (a split), as eager's __index__
                        v = values[p.name] = tuple(_index(x) for x in v) if isinstance(v, (tuple, list)) else _index(v)
                        if p.kind.base_name == "Ints" and _is_int(v):  # (torch.zeros(n): a size of one dim)
                            v = values[p.name] = (v,)
                        if p.kind.accepts(v):
                            continue

                    data_dependent(f"{self.torch_name}() with a tensor as its '{p.name}'",
                                   "pass a Python number (computed from shapes, not from tensor values)")
                raise TypeError(
                    f"{self.torch_name}(): argument '{p.name}' must be {p.kind.name}, "
                    f"not {type(v).__name__}"
                )
        return values

    def _make_binding(self):
        """What binding a call needs of the op's parameters (once per op)."""
        b = self.__dict__["_binding"] = _Binding(self)
        return b

    def __call__(self, *args, **kwargs):
        out = kwargs.pop("out", None)
        values = self.bind(args, kwargs)
        if self.dialect == "ltorch" and any(type(v) is TensorProxy and v.dtype.is_complex for v in values.values()):
            _complex_support(self, values)
        if values.get("inplace") is True and tracing.current() is not None:
            # F.relu(x, inplace=True), torch.relu_(x): the functional op, assigned to x
            return update_inplace(values[self.params[0].name], lambda: record_op(self, {**values, "inplace": False}))
        result = record_op(self, values)
        if self.return_type is not None and isinstance(result, tuple):
            result = self.return_type(result)
        if out is None:
            return result

        return write_out(self.torch_name, out, result)


_COMPLEX_SUPPORT = {}  # (op name, its arguments' metadata and values) -> torch's exception, or None


def _complex_support(op, values):
    """torch's own error where it refuses complex tensors (floor, relu, `<`, max, the autograd of
    silu): the op's torch function run once on ones of the arguments' dtypes and shapes (expanded
    0-d tensors: no memory; requiring grad as they do), its verdict kept per op and argument
    metadata. Only an error that names complex numbers counts (ones make no valid index, and
    such errors are not what is asked here). Thunder's meta functions know dtype categories
    (bool, int, float), not which of torch's kernels and derivatives take complex numbers."""
    fn = next((a for a in op.aliases if callable(a)), None)
    leaves = [x for v in values.values() for x in (v if isinstance(v, tuple) else (v,))]
    # (not a random op: its run would draw from the generator eager's program draws from)
    if fn is None or op.effects or op.random or any(
            isinstance(x, NumberProxy) or type(x) is TensorProxy and not all(type(n) is int for n in x.shape)
            for x in leaves):
        return
    key = (op.name, torch.is_grad_enabled(), tuple(
        (x.dtype, tuple(x.shape), x.requires_grad) if type(x) is TensorProxy else repr(x) for x in leaves))
    if key not in _COMPLEX_SUPPORT:
        def ones(v):
            if isinstance(v, tuple):
                return tuple(ones(x) for x in v)
            if type(v) is not TensorProxy:
                return v
            one = torch.ones((), dtype=v.dtype)
            return (one.requires_grad_() if v.requires_grad and (v.dtype.is_floating_point or v.dtype.is_complex)
                    else one).expand(v.shape)

        args, kwargs = [], {}
        for p in op.signature.parameters.values():
            v = ones(values[p.name])
            if p.kind is inspect.Parameter.KEYWORD_ONLY:
                kwargs[p.name] = v
            else:
                args.append(v)
        try:
            fn(*args, **kwargs)
            _COMPLEX_SUPPORT[key] = None
        except Exception as e:  # noqa: BLE001 - torch's verdict, raised as torch raised it
            _COMPLEX_SUPPORT[key] = e if "complex" in str(e).lower() else None
    if _COMPLEX_SUPPORT[key] is not None:
        e = _COMPLEX_SUPPORT[key]
        raise type(e)(*e.args)


class _Binding:
    """An op's parameters as OpDef.bind reads them: names in order, how many may be positional,
    defaults (inspect.Parameter.empty: none), the parameters whose runtime numbers are read
    (attributes, static numbers), and per parameter (Param, whether any TensorProxy is an
    accepted value of its kind, whether python_number reads it as a Scalar)."""

    def __init__(self, op):
        parameters = op.signature.parameters.values()
        self.names = tuple(p.name for p in op.params)
        # (positional-or-keyword parameters, then keyword-only ones: else every call goes through
        # inspect's binding)
        self.plain = tuple(p.name for p in parameters) == self.names and all(
            p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY) for p in parameters)
        self.positional = sum(1 for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.defaults = tuple(p.default for p in parameters)
        self.read = tuple(p.name for p in op.params if not p.kind.operand or p.name in op.static_numbers)
        self.checks = tuple((p, p.kind._accepts in _TAKES_PROXIES, p.kind.base_name in ("Number", "TensorOrNumber"))
                            for p in op.params)
        # (name, whether it is a __getitem__ key) of the parameters where torch's parser reads a
        # tensor's value: numbers (a 0-d tensor), keys (slice bounds)
        self.values_read = tuple((p.name, p.kind is Index) for p, takes_proxy, scalar in self.checks
                                 if scalar and not takes_proxy or p.kind is Index)
        self.varargs = self.names.index(op.varargs) if op.varargs is not None else None
        self.takes_tensors = any(p.kind.base_name in ("Tensor", "Tensors", "TensorOrNumber") for p in op.params)


def binding(op):
    """op's _Binding (made on first use)."""
    return op.__dict__.get("_binding") or op._make_binding()


def _bind_plain(b, args, kwargs):
    """inspect.Signature.bind and apply_defaults' {name: value} for a call that binds (else None:
    too many positional arguments, an unknown or repeated keyword, a missing argument)."""
    if not b.plain or len(args) > b.positional:
        return None
    names, defaults = b.names, b.defaults
    values = dict(zip(names, args))
    used = 0
    for i in range(len(args), len(names)):
        name = names[i]
        if name in kwargs:
            values[name] = kwargs[name]
            used += 1
        elif defaults[i] is inspect.Parameter.empty:
            return None
        else:
            values[name] = defaults[i]
    return values if used == len(kwargs) else None


# the numpy names torch's argument parser takes for its own (torch.cat(ts, axis=1),
# x.sum(axis=0, keepdims=True): transformers' Funnel)
_NUMPY_NAMES = {"axis": "dim", "keepdims": "keepdim", "x": "input", "a": "input", "x1": "input", "x2": "other"}


def _numpy_names(b, kwargs):
    return {_NUMPY_NAMES[k] if k in _NUMPY_NAMES and k not in b.names and _NUMPY_NAMES[k] in b.names
            and _NUMPY_NAMES[k] not in kwargs else k: v for k, v in kwargs.items()}


def _gather_varargs(op, args, kwargs):
    # x.view(2, 3) and x.view((2, 3)) are the same call; so are torch.zeros(2, 3) and zeros((2, 3))
    i = binding(op).varargs
    if op.varargs in kwargs or len(args) <= i:
        return args, kwargs
    rest = args[i:]
    single = _is_tensor(rest[0]) if op.params[i].kind.base_name == "Tensors" else _is_int_like(rest[0])
    if len(rest) == 1 and not single:
        return args, kwargs
    # following positional params are keyword-only in torch when varargs are used
    return (*args[:i], tuple(rest)), kwargs


# OPS, METHODS and DUNDERS are the core's dispatch tables (core/dispatch.py), which proxies call
OPS: dict[str, OpDef] = dispatch.OPS  # "ltorch.add" -> OpDef
BY_CALLABLE: dict = {}  # torch.add -> OpDef (the interpreter's and __torch_function__'s lookup)
INPLACE_CALLABLES: dict = {}  # torch.relu_ -> the relu OpDef (ops with an `inplace` flag)
METHODS: dict = dispatch.METHODS  # TensorProxy method name -> OpDef (or a function calling one, see `method`)
DUNDERS: dict[str, OpDef] = dispatch.DUNDERS  # "__add__" -> OpDef, called as op(proxy, other)


def _params_of(fn):
    params = []
    for p in inspect.signature(fn).parameters.values():
        if not isinstance(p.annotation, Kind):
            raise TypeError(f"op {fn.__name__}: parameter {p.name} needs a Kind annotation")
        params.append(Param(p.name, p.annotation, p.default, p.kind is inspect.Parameter.KEYWORD_ONLY))
    return params


def _register(dialect, torch_name, *, methods=(), dunders=(), rdunders=(), aliases=(), varargs=None,
              returns_sequence=False, random=False, view=False, strided=False, differentiable=True, effects=False,
              name=None, return_type=None, static_numbers=(), contiguous=False, elementwise=False,
              numbers_are_operands=False):
    def decorator(meta):
        op = OpDef(
            name=name or meta.__name__.rstrip("_"),
            dialect=dialect,
            meta=meta,
            params=_params_of(meta),
            torch_name=torch_name,
            methods=tuple(methods),
            dunders=tuple(dunders),
            rdunders=tuple(rdunders),
            aliases=tuple(aliases),
            varargs=varargs,
            returns_sequence=returns_sequence,
            random=random,
            is_view=view,
            strided=strided,
            contiguous=contiguous,
            elementwise=elementwise,
            numbers_are_operands=numbers_are_operands,
            differentiable=differentiable,
            effects=effects,
            return_type=return_type,
            static_numbers=tuple(static_numbers),
            doc=inspect.getdoc(meta) or "",
            signature=inspect.signature(meta).replace(return_annotation=inspect.Signature.empty),
        )
        if op.qualname in OPS:
            raise ValueError(f"op {op.qualname} is defined twice")
        OPS[op.qualname] = op
        if dialect == "ltorch":
            for c in aliases:
                BY_CALLABLE[c] = op
            if any(p.name == "inplace" for p in op.params):
                _register_inplace_variants(op)
            for m in methods:
                METHODS[m] = op
            for d in (*dunders, *rdunders):
                DUNDERS[d] = op
        return op

    return decorator


def ltorch(torch_name, **kw):
    """Define a torch-level op (dialect ltorch). torch_name is how the torch executor calls it."""
    return _register("ltorch", torch_name, **kw)


def prim(torch_name, **kw):
    """Define a primitive (dialect thunder)."""
    return _register("thunder", torch_name, **kw)


def method(name, fn):
    """A Tensor method that calls an op with its arguments in another order (x.where(cond, y) is
    torch.where(cond, x, y)): fn(self, *args, **kwargs)."""
    METHODS[name] = fn
    BY_CALLABLE[getattr(torch.Tensor, name)] = fn


def _register_inplace_variants(op):
    """torch.relu_, torch._C._nn.hardtanh_, ...: the `<name>_` functions next to an op's aliases,
    for ops whose `inplace` flag is what those functions do."""
    for c in op.aliases:
        name = getattr(c, "__name__", None)
        for ns in (torch, torch.Tensor, torch.nn.functional, torch._C._nn):
            f = getattr(ns, f"{name}_", None) if name else None
            if f is not None and f not in BY_CALLABLE:
                INPLACE_CALLABLES[f] = op


def lookup_callable(fn):
    try:
        op = BY_CALLABLE.get(fn)
        if op is None and fn in INPLACE_CALLABLES:
            return functools.partial(INPLACE_CALLABLES[fn], inplace=True)
        return op
    except TypeError:  # unhashable callables
        return None
