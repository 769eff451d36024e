"""What thunder.examine records while a function is traced: each torch call the interpreter hands
to the registry or the fallback (runtime/jit.py's lookup), with the ops it recorded or the error
it raised, and the trace's symbols. Nothing is recorded outside `recording()`."""
import contextvars
import functools
from dataclasses import dataclass, field

from thunder.core import trace as tracing
from thunder.core.callables import callable_name
from thunder.ops import fallback
from thunder.core.scoped import scoped


@dataclass
class Call:
    name: str  # "torch.nn.functional.gelu"
    location: tuple | None  # (filename, lineno) of the user's line
    registered: bool  # the callable has a registry entry (else the fallback took it)
    symbols: list  # the BoundSymbols it recorded
    error: BaseException | None = None
    start: int = 0  # how many symbols the trace held when it was called


@dataclass
class Recording:
    calls: list = field(default_factory=list)
    symbols: list | None = None  # the acquisition's BoundSymbols, once traced
    ctx: object = None  # the trace being recorded (its symbols so far, when tracing failed)

    def all_symbols(self):
        return self.symbols if self.symbols is not None else list(self.ctx.symbols) if self.ctx is not None else []


_RECORDING = contextvars.ContextVar("thunder_examine_recording", default=None)


def recording():
    return scoped(_RECORDING, Recording())


def observe(fn, impl):
    """lookup's answer for fn, recorded when a recording is under way: the calls of torch
    callables that thunder replaces (registry ops, the fallback, refusals, state queries)."""
    r = _RECORDING.get()
    if r is None or impl is None or impl is fn:
        return impl
    name = callable_name(fn)
    if name is None:
        return impl

    def observed(*args, **kwargs):
        ctx = r.ctx = tracing.current()
        n = len(ctx.symbols) if ctx is not None else 0
        location = tracing.current_location()
        registered = isinstance(impl, functools.partial) and impl.func is fallback.registered
        call = Call(name, location, registered, [], start=n)
        r.calls.append(call)
        try:
            return impl(*args, **kwargs)
        except BaseException as e:
            call.error = e
            raise
        finally:
            if ctx is not None:
                call.symbols = list(ctx.symbols[n:])

    return observed


def acquired(ctx):
    """The trace of the call is complete (runtime/jit.py compile_entry)."""
    r = _RECORDING.get()
    if r is not None:
        r.symbols = list(ctx.symbols)
