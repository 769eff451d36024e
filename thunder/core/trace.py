"""Recording: the context that collects ops while the interpreter runs a function."""
import contextlib
import contextvars
from dataclasses import dataclass

from thunder.core import strides

_current = contextvars.ContextVar("thunder_trace", default=None)


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
        self.mutated = {}  # input name -> the proxy holding its final value (in-place updates)
        # thunder.jit's tracing: reads tensor values by running the recorded prefix on the real
        # inputs (runtime/reads.py); None elsewhere (passes, decompositions), where reads raise
        self.reader = None
        self.live = None  # id -> proxy, weakly: the proxies made while a reader is set (values to keep)
        self.consulted = set()  # ambient torch state the trace depends on (runtime/guards.py AMBIENT)
        self.track_strides = False  # eager's strides on proxies (the user's program, not decompositions)
        self.differentiable = False  # an input requires grad
        self.checkpoint = None  # the activation-checkpoint region being recorded (ops/checkpoint.py)
        self.requires_grad = False  # a result of an op requires grad
        self.grad_ops = False  # an op of the user's program was recorded with grad mode on
        self.read_grad = None  # x.grad of a proxy while tracing (runtime/state.py), when the caller reads them
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
        from thunder.core.proxies import DataDependentError, where

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


def consult(state):
    """The trace depends on ambient torch state `state` (a name in runtime/guards.py AMBIENT):
    the cache entry checks it."""
    ctx = _current.get()
    if ctx is not None:
        ctx.consulted.add(state)


def current_location():
    """(filename, lineno) of the user's line being interpreted, if any."""
    try:
        from thunder.interpreter import current_source_location
    except ImportError:
        return None
    loc = current_source_location()
    return (loc[0], loc[1]) if loc else None


def ref(p):
    """The Ref of a proxy; a NumberProxy's has shape (), its dtype (float64, int64, bool) and
    device None (a scalar SSA value in MLIR)."""
    if not hasattr(type(p), "shape"):  # a NumberProxy
        return Ref(p.name, (), p.dtype, None)
    return Ref(p.name, tuple(p.shape), p.dtype, p.device)


def is_number_ref(r):
    return r.device is None


def _to_refs(v):
    from thunder.core.numbers import NumberProxy
    from thunder.core.proxies import TensorProxy

    if isinstance(v, (TensorProxy, NumberProxy)):
        return ref(v)
    if isinstance(v, tuple) and any(isinstance(x, TensorProxy) for x in v):
        return tuple(_to_refs(x) for x in v)
    return v


def record_op(op, values):
    """Run op's meta function on proxies and record the call in the current trace; without a
    trace (plain tensors, no jit) run it with torch."""
    ctx = _current.get()
    if ctx is None:
        from thunder.ops.execute import run_eagerly

        return run_eagerly(op, values)
    _check_no_real_tensors(op, values)
    if ctx.track_grad_mode and op.dialect == "ltorch":
        from thunder.ops import autocast

        values = autocast.apply(op, values)  # casts of an active torch.autocast region
    try:
        out = run_meta(op, values)
    except Exception as e:  # eager's exception for a bad call, or a refusal: say where it came from
        _note_location(e, op)
        raise
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    from thunder.core.proxies import TensorProxy

    first = next((v for v in values.values() if isinstance(v, TensorProxy)), None)
    metas = _eager_strides(ctx, op, values, outs) if ctx.track_strides else None
    if op.is_view:
        for o, m in zip(outs, metas or [None] * len(outs)):
            # reshape, flatten, contiguous: a view where eager's strides allow one, else a copy
            o.is_view = m is None or first is None or _aliases(m, first.meta)
    for i, o in enumerate(outs):
        if not isinstance(o, TensorProxy):
            continue  # a runtime number
        base = o.base if o.base is not None else first  # (a meta function may name the base)
        if o.is_view and base is not None:
            # remember how o was made from base, so in-place updates can flow between them
            o.base, o.recipe = base, (op, dict(values), i)
            base.views.append(o)
    loc = current_location()
    if ctx.checkpoint is not None:  # (lowering/remat.py recomputes the region's values)
        loc = (*(loc or ("<unknown>", 0)), ctx.checkpoint)
    ctx.symbols.append(BoundSymbol(op, {k: _to_refs(v) for k, v in values.items()}, [ref(o) for o in outs], loc))
    if ctx.track_grad_mode:
        # requires_grad as eager answers it: a floating result of a differentiable op on a tensor
        # that requires grad, with grad mode on
        grad = _grad_enabled()
        ctx.grad_ops |= grad
        needs = grad and op.differentiable and any(
            x.requires_grad for v in values.values() for x in (v if isinstance(v, tuple) else (v,))
            if isinstance(x, TensorProxy))
        leaf = values.get("requires_grad") is True  # torch.ones(..., requires_grad=True): whatever grad mode
        for o in outs:
            if isinstance(o, TensorProxy):
                floating = o.dtype.is_floating_point or o.dtype.is_complex
                if leaf and not floating:
                    raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
                o.requires_grad = (needs or leaf) and floating
                ctx.requires_grad |= o.requires_grad
    if ctx.track_grad_mode and not _grad_enabled() and op.name not in ("detach", "no_grad_update"):
        # under torch.no_grad() the results carry no autograd history: record that in the trace
        outs = [_detach(o) for o in outs]
        out = tuple(outs) if isinstance(out, (tuple, list)) else outs[0]
        if _inference_mode():
            for o in outs:
                if isinstance(o, TensorProxy):
                    o.inference = True
    return tuple(outs) if isinstance(out, (tuple, list)) else out


def run_meta(op, values):
    """op's meta function on bound values; runtime numbers (NumberProxy operands) are seen as
    an example value of their type (metadata depends on their type only: the ops whose metadata
    depends on values read them when binding, see OpDef.bind)."""
    from thunder.core.numbers import NumberProxy, example

    if any(isinstance(v, NumberProxy) for v in values.values()):
        values = {k: example(v) for k, v in values.items()}
    return op.meta(**values)


def _elementwise_meta(op, values, out):
    """out's meta tensor with the strides eager's TensorIterator gives it (core/strides.py); None
    where the rule is not used: an empty result, symbolic sizes (their comparisons are guards)."""
    from thunder.core.numbers import NumberProxy
    from thunder.core.proxies import TensorProxy, meta_of

    import torch

    if values.get("inplace"):
        return None  # (eager's result is the input itself, with its strides)
    operands = []
    for p in op.params:
        v = values.get(p.name)
        if isinstance(v, TensorProxy):
            m = meta_of(v)
            operands.append((tuple(m.shape), m.stride()))
        elif (op.numbers_are_operands and p.kind.base_name == "TensorOrNumber"
              and isinstance(v, (bool, int, float, complex, NumberProxy))):
            operands.append(((), ()))
    shape = tuple(out.shape)
    if not all(type(n) is int for n in shape) or 0 in shape or not all(
            type(x) is int for s, st in operands for x in (*s, *st)):
        return None
    return torch.empty_strided(shape, strides.elementwise(shape, operands), dtype=out.dtype, device="meta")


def _eager_strides(ctx, op, values, outs):
    """Runs op on meta tensors (torch's own kernels) for eager's strides of its results, which
    become the results' meta tensors; None when torch cannot (a data-dependent op, say): the
    results count as contiguous. Ops whose validity depends on strides (view of a transposed
    tensor) raise eager's error here."""
    from thunder.core.proxies import TensorProxy, meta_of
    from thunder.ops.execute import call_args, run_eagerly

    tensors = [x for v in values.values() for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, TensorProxy)]
    deps = frozenset().union(*(t.stride_deps for t in tensors))
    if not all(isinstance(o, TensorProxy) for o in outs):
        return None  # (runtime numbers: no strides)
    for o in outs:
        o.stride_deps = deps
    if all(o.meta is not None for o in outs):
        return [o.meta for o in outs]  # (the meta function gave eager's strides: CPU conv, batch_norm)
    if op.strided:
        ctx.stride_dependent |= deps
    if op.random:
        return None  # (torch's random kernels would draw from the generator even on meta tensors)
    if op.contiguous:
        return None
    if op.elementwise and len(outs) == 1:
        m = _elementwise_meta(op, values, outs[0])
        if m is not None:
            outs[0].meta = m
            return [m]

    from thunder.core.numbers import example

    def meta(v):
        if isinstance(v, TensorProxy):
            return meta_of(v)
        return tuple(meta(x) for x in v) if isinstance(v, tuple) else example(v)

    import torch

    try:
        with not_tracing():
            if op.strided and op.aliases:  # as eager calls it: Tensor.view checks strides, the program reshapes
                args, kwargs = call_args(op, {k: meta(v) for k, v in values.items()})
                result = op.aliases[0](*args, **kwargs)
            else:
                result = run_eagerly(op, {k: meta(v) for k, v in values.items()})
    except RuntimeError:
        if op.strided:
            raise  # eager's error: the strides do not allow it
        return None
    except Exception:  # noqa: BLE001 - no meta kernel: strides unknown
        return None
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(results) != len(outs) or any(not isinstance(m, torch.Tensor) or m.shape != o.shape for m, o in zip(results, outs)):
        return None
    for o, m in zip(outs, results):
        o.meta = m
    return results


def _aliases(m, base):
    """Whether meta tensor m shares memory with meta tensor base (the same storage object)."""
    return base is not None and m.untyped_storage()._cdata == base.untyped_storage()._cdata


def _inference_mode():
    import torch

    return torch.is_inference_mode_enabled()


def _note_location(e, op):
    loc = current_location()
    if loc is not None and not any(n.startswith("thunder: in ") for n in getattr(e, "__notes__", ())):
        e.add_note(f"thunder: in {op.torch_name} at {loc[0]}:{loc[1]}")


def _grad_enabled():
    import torch

    return torch.is_grad_enabled()


def _detach(p):
    from thunder.core.proxies import TensorProxy
    from thunder.ops.registry import OPS

    if not isinstance(p, TensorProxy) or not (p.dtype.is_floating_point or p.dtype.is_complex):
        return p
    return OPS["ltorch.detach"](p)


def grad_enabled():
    return _grad_enabled()


def _check_no_real_tensors(op, values):
    import torch

    for v in values.values():
        for x in v if isinstance(v, (tuple, list)) else (v,):
            if isinstance(x, torch.Tensor):
                raise NotImplementedError(
                    f"thunder: {op.torch_name} got a tensor that is not an input of the jitted function "
                    f"(created outside thunder's view, e.g. by code run natively); shape {tuple(x.shape)}. "
                    "Workaround: pass it as an argument.")


def rebind(proxy, new):
    """After an in-place op the proxy object stands for the op's result; an input's final
    value is copied back at the end (see TraceCtx.mutated). Under no_grad the tensor keeps its
    autograd history, as in eager (ltorch.no_grad_update)."""
    ctx = _current.get()
    if ctx is not None and ctx.track_grad_mode and ctx.differentiable and not _grad_enabled():
        from thunder.ops.registry import OPS

        new = OPS["ltorch.no_grad_update"](proxy, new)
    if ctx is not None and proxy.input_name is not None:
        ctx.mutated[proxy.input_name] = proxy
    proxy.name = new.name
    proxy.shape = new.shape
    proxy.dtype = new.dtype
