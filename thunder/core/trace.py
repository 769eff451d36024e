"""Recording: the context that collects ops while the interpreter runs a function."""
import contextlib
import contextvars
from dataclasses import dataclass

import torch

from thunder.core import dispatch

_current = contextvars.ContextVar("thunder_trace", default=None)
# while thunder-autograd runs a VJP rule: which of the op's arguments need a gradient
_inputs_needing_grad = contextvars.ContextVar("thunder_inputs_needing_grad", default=None)


def inputs_needing_grad():
    """While thunder-autograd runs a VJP rule (lowering/autograd.py backpropagate): {parameter
    name: whether its value needs a gradient (a tuple of flags for a tensor list)}; None elsewhere
    (every differentiable argument may). As torch's ctx.needs_input_grad: a rule that hands the
    gradient to torch asks it for these only (torch refuses some: batch_norm's running_mean)."""
    return _inputs_needing_grad.get()


@contextlib.contextmanager
def needing_grad_in_rule(flags):
    token = _inputs_needing_grad.set(flags)
    try:
        yield
    finally:
        _inputs_needing_grad.reset(token)


@dataclass(frozen=True)
class Ref:
    """A recorded use of a tensor: the proxy's name and metadata at the time of the call
    (a proxy can be rebound by an in-place op later)."""

    name: str
    shape: tuple
    dtype: object
    device: object


@dataclass
class BoundSymbol:
    op: object  # registry.OpDef
    args: dict  # param name -> value, tensors as Ref, tuples of Ref for tensor lists
    outputs: list  # Refs, flat
    location: tuple | None  # (filename, lineno) of the user's source line; + (region,) inside a checkpoint
    widened: bool = False  # recorded under ops/decomp_utils.widened (dialects/emit.py WIDENED)

    def tensor_args(self):
        """The Refs the call reads, tensor lists flattened, in parameter order."""
        refs = []
        for v in self.args.values():
            for x in v if isinstance(v, tuple) else (v,):
                if isinstance(x, Ref):
                    refs.append(x)
        return refs


class TraceCtx:
    def __init__(self, prefix="t"):
        self.symbols: list[BoundSymbol] = []
        self.inputs: list = []  # Refs of the input tensors, in order
        self._counter = 0
        self._numbers = 0
        self._prefix = prefix
        self._used = set()
        self.track_grad_mode = False  # record no_grad regions (the user's program, not decompositions)
        self.on_record = None  # on_record(op, values, outs) after each op recorded (runtime/batching.py)
        self.mutated = {}  # input name -> the proxy holding its final value (in-place updates)
        # thunder.jit's tracing: reads tensor values by running the recorded prefix on the real
        # inputs (runtime/reads.py); None elsewhere (passes, decompositions), where reads raise
        self.reader = None
        self.live = None  # id -> proxy, weakly: the proxies made while a reader is set (values to keep)
        self.consulted = set()  # ambient torch state the trace depends on (runtime/guards.py AMBIENT)
        self.track_strides = False  # eager's strides on proxies (the user's program, not decompositions)
        self.differentiable = False  # an input requires grad
        self.checkpoint = None  # the activation-checkpoint region being recorded (ops/checkpoint.py)
        self.widened = False  # ops recorded now compute a float32 op in float64 (ops/decomp_utils.widened)
        self.requires_grad = False  # a result of an op requires grad
        self.grad_names = set()  # names of the results that require grad (as eager's would)
        self.grad_ops = False  # an op of the user's program was recorded with grad mode on
        self.grad_leaf = False  # a tensor created inside requires grad (torch.ones(..., requires_grad=True))
        self.made_leaves = {}  # id(proxy) -> (proxy, where()): results made leaves that require grad by requires_grad_()
        self.grad_mutated = False  # an input that requires grad was updated in place with grad mode on
        self.read_grad = None  # x.grad of a proxy while tracing (runtime/state.py), when the caller reads them
        self.array_input = None  # a numpy array read from state as an input (runtime/state.py), for torch.from_numpy
        self.made_array = None  # whether a numpy array was made while tracing (runtime/state.py)
        self.object_id = None  # id() of a proxy while tracing: its tensor's where it stands for one (runtime/state.py)
        self.write_grad = None  # x.grad = value of a proxy while tracing (runtime/state.py)
        self.autograd = None  # backward() and autograd.grad while tracing (runtime/inner_autograd.py)
        self.stride_dependent = set()  # names of the inputs whose strides decided something
        # cache="symbolic values" (runtime/symbolic.py): id(input tensor) -> a symbol name or None
        # per dim, and the decisions taken on symbolic sizes (source -> outcome, core/symbols.py)
        self.sym_shapes = None
        self.sym_guards = None

    def new_name(self, hint=None):
        if hint is not None:
            name, i = hint, 0
            while name in self._used:
                i += 1
                name = f"{hint}_{i}"
        else:
            while True:
                name = f"{self._prefix}{self._counter}"
                self._counter += 1
                if name not in self._used:
                    break
        self._used.add(name)
        return name


def current():
    return _current.get()


@contextlib.contextmanager
def tracing(ctx: TraceCtx):
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


@contextlib.contextmanager
def not_tracing():
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


def new_name(hint=None):
    ctx = _current.get()
    return ctx.new_name(hint) if ctx is not None else None


def new_number_name():
    """A name for a runtime number (n0, n1, ...)."""
    ctx = _current.get()
    if ctx is None:
        return None
    while True:
        name = f"n{ctx._numbers}"
        ctx._numbers += 1
        if name not in ctx._used:
            ctx._used.add(name)
            return name


def track(proxy):
    """A new proxy: the reader keeps the values of live proxies only."""
    ctx = _current.get()
    if ctx is not None and ctx.live is not None:
        ctx.live[id(proxy)] = proxy


def read_value(proxy, expr):
    """The real value of a proxy (tensor or number), read while tracing; DataDependentError where
    no values are available (passes, decompositions, functional code without a reader)."""
    ctx = _current.get()
    if ctx is None or ctx.reader is None:
        raise DataDependentError(
            f"thunder: the value of {expr}{where()} is needed, and values are not known here (only while "
            "thunder.jit traces a call). Workaround: compute it outside, or keep it in tensor operations "
            "(torch.where instead of a Python branch on a tensor).")
    return ctx.reader.value(proxy)


def values_known():
    """Whether tensor values can be read here (thunder.jit's tracing has a reader; passes and
    decompositions do not)."""
    ctx = _current.get()
    return ctx is not None and ctx.reader is not None


def read_int(tensor, what, why):
    """The value of a one-element integer tensor proxy as a Python int, which the trace is
    specialized on (a split, runtime/reads.py); what names it in reports."""
    n = tensor.item()
    if not isinstance(n, int):
        n.expr = what
        n = n.concrete(why)
    return n


def split(proxy, why):
    """The value of a proxy that Python needs: the trace is specialized on it from here on (the
    program checks it). See runtime/reads.py."""
    ctx = _current.get()
    if ctx is None or ctx.reader is None:
        read_value(proxy, f"{proxy.expr} ({why})")
    return ctx.reader.split(proxy, why)
def strides_decide(proxy):
    """Something in the trace depends on proxy's strides: the cache entry checks the strides of
    the inputs they come from."""
    ctx = _current.get()
    if ctx is not None:
        ctx.stride_dependent |= proxy.stride_deps


def strides_known():
    """Whether the current trace gives proxies eager's strides (the user's program): elsewhere a
    proxy counts as contiguous, which says nothing about the tensor it stands for."""
    ctx = _current.get()
    return ctx is not None and ctx.track_strides


def consult(state):
    """The trace depends on ambient torch state `state` (a name in runtime/guards.py AMBIENT):
    the cache entry checks it."""
    ctx = _current.get()
    if ctx is not None:
        ctx.consulted.add(state)


# () -> (filename, lineno, function name) of the innermost interpreted frame or None: the
# interpreter installs it (thunder/interpreter/__init__.py), the core does not import it
source_location = None


def current_location():
    """(filename, lineno) of the user's line being interpreted, if any."""
    loc = source_location() if source_location is not None else None
    return (loc[0], loc[1]) if loc else None


def grad_enabled():
    return torch.is_grad_enabled()


class DataDependentError(NotImplementedError):
    """Python control flow needs a tensor's values, which a trace does not have."""


class NotDecomposable(NotImplementedError):
    """This call of an op has no decomposition into prims (a device transfer): the op stays, torch
    runs it."""


def where():
    """ at file:line" naming the user's line being traced (for messages), or ""."""
    loc = current_location()
    return f" at {loc[0]}:{loc[1]}" if loc else ""


def refuse_inside(what, workaround="call it outside the jitted function"):
    """Raise NotImplementedError for a construct the jitted function cannot trace, naming it, the
    user's line and what to do instead."""
    raise NotImplementedError(f"thunder: {what}{where()} inside a jitted function is not supported. "
                              f"Workaround: {workaround}")


def ref(p):
    """The Ref of a proxy; a NumberProxy's has shape (), its dtype (float64, int64, bool) and
    device None (a scalar SSA value in MLIR)."""
    if not hasattr(type(p), "shape"):  # a NumberProxy
        return Ref(p.name, (), p.dtype, None)
    return Ref(p.name, tuple(p.shape), p.dtype, p.device)


def is_number_ref(r):
    return r.device is None


def rebind(proxy, new):
    """After an in-place op the proxy object stands for the op's result; an input's final
    value is copied back at the end (see TraceCtx.mutated). Under no_grad the tensor keeps its
    autograd history, as in eager (ltorch.no_grad_update)."""
    ctx = _current.get()
    if ctx is not None and ctx.track_grad_mode and ctx.differentiable and not torch.is_grad_enabled():
        new = dispatch.OPS["ltorch.no_grad_update"](proxy, new)
    if ctx is not None and proxy.input_name is not None:
        ctx.mutated[proxy.input_name] = proxy
        ctx.grad_mutated |= proxy.requires_grad and torch.is_grad_enabled()
    proxy.name = new.name
    proxy.shape = new.shape
    proxy.dtype = new.dtype
