"""Data-dependent Python: reading tensor values while tracing, and splitting the program there.

Where the traced function needs a value (`bool(t)`, `int(t)`, `if t.any():`, a runtime number
that Python needs, the shape of `torch.nonzero(x)`, the count of a boolean mask), the Reader
gets it: it runs the part of the trace recorded so far on the real inputs of the call being
compiled, as a functional program (the ops' own Python statements, those codegen writes; no
copies back into inputs, under torch.no_grad, in the autocast state of the call). Tracing then
goes on with the value as a constant, and `ltorch.check` in the trace makes the program compare
it with the value of each later call: a different value is a cache miss (impl.ValueChanged),
which sends the call on to the next cache entry or to a new compilation, as torch.compile's graph
breaks do with guards on the values read.

Choice: one program with in-program checks, not a prefix program plus continuations. A miss
recomputes the prefix in the next entry, but nothing else changes: inputs are written at the
end of the program only, and a program whose random ops run before a check saves the random
generators' state at its start and restores it on a miss, so the call's draws are eager's.
The same program serves training (the checks are in @forward) and fused kernels (checks are
not claimed by thunder-fuse; runtime numbers are kernel arguments).

Random ops before a read draw the numbers the program will draw: the Reader runs from the
generators' state at the start of the call and keeps its own state between reads, and the
global state is restored after each run, so the compiled program, which runs next, starts from
the same state (and matches eager under torch.manual_seed).

Work stays linear in the number of ops however many values are read: each recorded op runs
once, the values of earlier ops are kept while a live proxy still names them.

Each split is reported (compile_stats(fn).last_splits: location, what was read, the value) and
obeys sharp_edges: "error" raises JITSharpEdgeError naming the line instead of splitting, "warn"
warns once per line.
"""
import contextlib
import os
import warnings
import weakref
from dataclasses import dataclass

import torch

from thunder.core import trace as tracing
from thunder.core.numbers import NumberProxy
from thunder.core.proxies import TensorProxy
from thunder.core.pysource import Name, py_repr
from thunder.ops import impl
from thunder.ops.execute import NAMESPACE
from thunder.runtime.sharp_edges import JITSharpEdgeError
from thunder.interpreter.runtime import active_frames
from thunder.ops.values import check
from thunder.runtime.codegen import op_statements


@dataclass(frozen=True)
class Split:
    """A value the trace was specialized on (see compile_stats(fn).last_splits)."""
    location: str  # "file.py:12"
    what: str  # "bool() of t1", "shape of torch.nonzero(x)", ...
    value: object


class Reader:
    """Reads values while one call is traced (ctx.reader): runs the recorded ops on the call's
    inputs, records the checks of the values Python needed and the splits to report."""

    def __init__(self, ctx, inputs, sharp_edges="allow", warned=None):
        self.ctx = ctx
        self.inputs = inputs  # structure.Inputs: the call's tensors and their proxies (it grows as the trace reads)
        self.sharp_edges, self.warned = sharp_edges, warned if warned is not None else set()
        self.scope = {**NAMESPACE, "_rng": None}  # the values computed so far, by variable name
        self.ran = []  # the symbols run so far: a prefix of ctx.symbols
        self.rng = impl.rng_snapshot(python=True)  # the generators' state the next op runs from
        self.autocast = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")]
        self.splits = []
        self._kept = 0  # values kept after the last pruning
        ctx.reader = self
        ctx.live = weakref.WeakValueDictionary()  # (by id: a NumberProxy's hash reads its value)

    # --- values
    def value(self, proxy):
        """The real value of a proxy in this call."""
        self._run_pending()
        return self.scope[self._var(proxy.name)]

    def split(self, proxy, why):
        """The value of a runtime number, which Python needs: recorded as a check in the trace,
        reported as a split."""
        what = f"{why} of {proxy.expr}"
        loc = self._sharp_edge(what)
        value = proxy.python_type(self.value(proxy))
        proxy._value = value
        self._record_check(proxy, value, what, loc)
        self.splits.append(Split(loc, what, value))
        return value

    def run_call(self, fn, args, kwargs, what):
        """fn(*args, **kwargs) on the real values of the proxies in the arguments (a torch call
        whose result's shape depends on values): the result, real tensors."""
        self._sharp_edge(what)
        self._run_pending()

        def real(v):
            if isinstance(v, (TensorProxy, NumberProxy)):
                return self.scope[self._var(v.name)]
            if isinstance(v, (tuple, list)):
                return type(v)(real(x) for x in v)
            if isinstance(v, dict):
                return {k: real(x) for k, x in v.items()}
            return v

        with self._bubble():
            return fn(*real(args), **real(kwargs))

    def provide(self, proxies, values):
        """The values of proxies made by the op just recorded, computed already (run_call): the
        op will not run again."""
        for p, v in zip(proxies, values):
            self.scope[self._var(p.name)] = v

    def check_shapes(self, outs, what):
        """Checks of the shapes of outs, results of an op whose result shapes depend on values."""
        loc = location()
        for i, o in enumerate(outs):
            self._record_check(o, tuple(o.shape), what if len(outs) == 1 else f"{what} (result {i})", loc)
        self.splits.append(Split(loc, what, tuple(tuple(o.shape) for o in outs if isinstance(o, TensorProxy))))

    # --- internals
    def _sharp_edge(self, what):
        loc = location()
        if self.sharp_edges == "allow":
            return loc
        msg = (f"thunder: {what} at {loc} needs a tensor's value while tracing: the program is split there "
               "(the value becomes a constant the program checks on every call, and another value compiles "
               "another program). Workaround: keep the computation in tensor operations (torch.where instead "
               "of a Python branch), or read the value outside the jitted function.")
        if self.sharp_edges == "error":
            raise JITSharpEdgeError(msg)
        if ("read", loc) not in self.warned:
            self.warned.add(("read", loc))
            warnings.warn(msg, stacklevel=3)
        return loc

    def _record_check(self, proxy, value, what, loc):
        check(proxy, expected=py_repr(value), what=f"{what} at {loc}")

    def _var(self, name):
        return f"v_{name}"

    def _run_pending(self):
        for p, t in self.inputs.params():
            self.scope.setdefault(self._var(p.input_name or p.name), t)
        for p, v in self.inputs.numbers:
            self.scope.setdefault(self._var(p.name), v)
        symbols = self.ctx.symbols
        # (the symbols an op recorded before it refused are dropped, fallback.registered: what
        # replaces them runs)
        done = min(len(self.ran), len(symbols))
        while done and symbols[done - 1] is not self.ran[done - 1]:
            done -= 1
        del self.ran[done:]
        if done == len(symbols):
            return
        lines = []
        for bsym in symbols[done:]:
            self.ran.append(bsym)
            outs = [self._var(o.name) for o in bsym.outputs]
            if outs and all(o in self.scope for o in outs):
                continue  # computed by run_call
            values = {k: self._names(v) for k, v in bsym.args.items()}
            lines += op_statements(bsym.op, values, outs)
        code = compile("\n".join(lines) + "\n", "<thunder: the traced prefix, run to read a value>", "exec")
        with self._bubble():
            exec(code, self.scope)
        self._prune()

    def _names(self, v):
        if isinstance(v, tracing.Ref):
            return Name(self._var(v.name), v.shape, v.dtype, v.device)
        if isinstance(v, tuple):
            return tuple(self._names(x) for x in v)
        return v

    @contextlib.contextmanager
    def _bubble(self):
        """Runs from the reader's generator state, in the call's autocast state, without grad;
        the global state is as before afterwards."""
        saved_rng = impl.rng_snapshot(python=True)
        saved_autocast = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")]
        impl.rng_restore(self.rng)
        for d, enabled, dtype in self.autocast:
            torch.set_autocast_enabled(d, enabled)
            torch.set_autocast_dtype(d, dtype)
        try:
            with torch.no_grad():
                yield
        finally:
            self.rng = impl.rng_snapshot(python=True)
            impl.rng_restore(saved_rng)
            for d, enabled, dtype in saved_autocast:
                torch.set_autocast_enabled(d, enabled)
                torch.set_autocast_dtype(d, dtype)

    def _prune(self):
        """Drop the values no live proxy names (amortized: when their number has doubled)."""
        n = len(self.scope)
        if n < 2 * self._kept + 64:
            return
        live = {self._var(p.name) for p in list(self.ctx.live.values())} | {self._var(p.input_name)
                                                                for p, _ in self.inputs.params() if p.input_name}
        live |= {self._var(p.name) for p, _ in self.inputs.numbers}
        for k in [k for k in self.scope if k.startswith("v_") and k not in live]:
            del self.scope[k]
        self._kept = len(self.scope)


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def location():
    """"file:line" of the read: the innermost interpreted line outside torch's own Python code
    (torch.unique reads in torch/functional.py for the user's line that called it)."""
    frames = [f for _, f in active_frames()]
    for f in reversed(frames):
        if not f.code.co_filename.startswith(_TORCH_DIR):
            return f"{f.code.co_filename}:{f.lineno}"
    return f"{frames[-1].code.co_filename}:{frames[-1].lineno}" if frames else "unknown line"


def reader():
    """The reader of the trace being recorded, or None."""
    ctx = tracing.current()
    return ctx.reader if ctx is not None else None
