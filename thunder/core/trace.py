"""Recording: the context that collects ops while the interpreter runs a function."""
import contextlib
import contextvars
from dataclasses import dataclass

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
    location: tuple | None  # (filename, lineno) of the user's source line

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
        self._prefix = prefix
        self._used = set()
        self.track_grad_mode = False  # record no_grad regions (the user's program, not decompositions)
        self.mutated = {}  # input name -> the proxy holding its final value (in-place updates)

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


def current_location():
    """(filename, lineno) of the user's line being interpreted, if any."""
    try:
        from thunder.interpreter import current_source_location
    except ImportError:
        return None
    loc = current_source_location()
    return (loc[0], loc[1]) if loc else None


def ref(p):
    return Ref(p.name, tuple(p.shape), p.dtype, p.device)


def _to_refs(v):
    from thunder.core.proxies import TensorProxy

    if isinstance(v, TensorProxy):
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
        out = op.meta(**values)
    except Exception as e:  # eager's exception for a bad call, or a refusal: say where it came from
        _note_location(e, op)
        raise
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    from thunder.core.proxies import TensorProxy

    if op.is_view:
        for o in outs:
            o.is_view = True
    base = next((v for v in values.values() if isinstance(v, TensorProxy)), None)
    for i, o in enumerate(outs):
        if o.is_view and base is not None:
            # remember how o was made from base, so in-place updates can flow between them
            o.base, o.recipe = base, (op, dict(values), i)
            base.views.append(o)
    ctx.symbols.append(BoundSymbol(op, {k: _to_refs(v) for k, v in values.items()},
                                   [ref(o) for o in outs], current_location()))
    if ctx.track_grad_mode and not _grad_enabled() and op.name != "detach":
        # under torch.no_grad() the results carry no autograd history: record that in the trace
        outs = [_detach(o) for o in outs]
        out = tuple(outs) if isinstance(out, (tuple, list)) else outs[0]
    return tuple(outs) if isinstance(out, (tuple, list)) else out


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
    value is copied back at the end (see TraceCtx.mutated)."""
    ctx = _current.get()
    if ctx is not None and proxy.input_name is not None:
        ctx.mutated[proxy.input_name] = proxy
    proxy.name = new.name
    proxy.shape = new.shape
    proxy.dtype = new.dtype
