"""thunder.examine(fn, *args, **kwargs): what thunder would make of fn on these inputs, without
running the compiled program. It traces and compiles as a cache miss of thunder.jit does (the
same interpreter, passes and fusion) and reports:

  calls    every torch call the function makes, in order, with its status:
           "op" (a first-class op of the ltorch dialect), "decomposed" (no entry of its own:
           torch's decomposition into ops that have one), "fallback" (run by torch as a
           generic ltorch.torch_call), "unsupported" (thunder refuses it: the reason),
           "evaluated" (answered while tracing, no op: torch.is_grad_enabled())
  splits   the values read from tensors that the program is specialized on, and where
  regions  the fusion regions and the executor that runs each
  guards   what the cache entry's prologue checks on every call

The result is an Examination (a dataclass); examine() prints its table."""
import os
import types
from dataclasses import dataclass, field

from thunder.core import logs
from thunder.lowering.fuse import fusion_callees
from thunder.runtime import calls as call_records, guards as guard_checks, regions as fusion_regions
from thunder.runtime.compile import compile_entry
from thunder.runtime.jit import _readable
from thunder.runtime.options import CompileStats, make_compile_data

FALLBACK_OPS = ("ltorch.torch_call", "ltorch.torch_call_random")


@dataclass
class TorchCall:
    call: str  # "torch.add", "torch.Tensor.cumsum"
    location: str  # "file.py:12"
    status: str  # "op", "decomposed", "fallback", "unsupported"
    ops: list  # the ops recorded for it ("ltorch.add")
    reason: str | None = None  # unsupported: why


@dataclass
class Region:
    name: str  # "fusion_0"
    executor: str  # "linalg", "cuda", "nvfuser"
    ops: list  # its prims


@dataclass
class Examination:
    calls: list = field(default_factory=list)  # TorchCall
    splits: list = field(default_factory=list)  # "file.py:7: bool() of t1 = True"
    regions: list = field(default_factory=list)  # Region
    guards: list = field(default_factory=list)  # what the prologue checks, in words
    error: str | None = None  # why thunder cannot compile the function for these inputs

    def table(self):
        lines = []
        rows = [(c.location, c.call, c.status, c.reason if c.reason else ", ".join(c.ops)) for c in self.calls]
        lines += _table("torch calls", ("where", "call", "status", "ops / reason"), rows)
        lines += _table("splits", ("where and what",), [(s,) for s in self.splits])
        lines += _table("fusion regions", ("region", "executor", "ops"),
                        [(r.name, r.executor, ", ".join(r.ops)) for r in self.regions])
        lines += _table("guards", ("checked on every call",), [(g,) for g in self.guards])
        if self.error:
            lines += ["", f"cannot compile: {self.error}"]
        return "\n".join(lines[1:])

    def __str__(self):
        return self.table()


def _table(title, header, rows):
    out = ["", f"{title} ({len(rows)})"]
    if not rows:
        return out
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    for r in (header, *rows):
        out.append("  " + "  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())
    return out


def _where(location):
    return f"{os.path.basename(location[0])}:{location[1]}" if location else "?"


def _status(call):
    """(status, ops, reason) of a recorded call."""
    ops = [s.op.qualname for s in call.symbols]
    if call.error is not None:
        return "unsupported", ops, f"{type(call.error).__name__}: {call.error}"
    if any(op in FALLBACK_OPS for op in ops):
        return "fallback", ops, None
    if not ops:
        return "evaluated", ops, "no op: answered while tracing"
    return ("op" if call.registered else "decomposed"), ops, None


def _calls(record):
    """The calls in program order, with the ops recorded outside any call (operators and
    methods of tensors: x * 2) as calls of their own."""
    symbols = record.all_symbols()
    index = {id(s): i for i, s in enumerate(symbols)}
    covered = {id(s) for c in record.calls for s in c.symbols}
    out, next_symbol = [], 0

    def uncovered_until(end):
        nonlocal next_symbol
        for s in symbols[next_symbol:end]:
            if id(s) not in covered and (s.op.torch_name or "").startswith("torch"):  # (not a split's check)
                name = s.op.qualname
                status = "fallback" if name in FALLBACK_OPS else "op"
                call = s.args.get("callable") if status == "fallback" else s.op.torch_name
                out.append(TorchCall(call or name, _where(s.location), status, [name]))
        next_symbol = max(next_symbol, end)

    for c in record.calls:
        uncovered_until(min((index[id(s)] for s in c.symbols if id(s) in index), default=c.start))
        status, ops, reason = _status(c)
        out.append(TorchCall(c.name, _where(c.location), status, ops, reason))
    uncovered_until(len(symbols))
    return out


def _guards(entry):
    _, _, metas, (consts, entry_guards, reads) = entry.description
    out = [f"tensor argument {i}: {_meta_text(m)}" for i, m in enumerate(metas)]
    out += [f"{_readable(expr)}: {_meta_text(m)}" for expr, m in reads]
    for g in entry_guards:
        out.append(f"{g.what or _readable(g.expr)}: {_expected(g)}")
    return out


def _expected(guard):
    """What a guard expects, in words: objects checked by identity by their names."""
    v = guard.expected
    if guard.check == "is" and v is not None and type(v) is not bool:
        if isinstance(v, types.CodeType):
            return f"is the code of {v.co_qualname} ({os.path.basename(v.co_filename)}:{v.co_firstlineno})"
        if isinstance(v, types.ModuleType):
            return f"is the module {v.__name__}"
        name = getattr(v, "__qualname__", None)
        if name is not None:
            return f"is {getattr(v, '__module__', None) or type(v).__name__}.{name}".replace("builtins.", "")
        text = repr(v)
        return f"is {text}" if " at 0x" not in text and len(text) <= 60 else f"is the {type(v).__name__} it was"
    return f"{guard.check} {guard_checks.describe(v)}"


def _meta_text(meta):
    shape, dtype, device, requires_grad, strides = meta
    text = f"shape {tuple(shape)}, {str(dtype).removeprefix('torch.')}, {device}, requires_grad={requires_grad}"
    return text + (f", strides {strides}" if strides is not None else "")


def _regions(traces):
    out = []
    for t in traces:
        if t.producer.startswith("thunder-fuse"):
            module = t.module()
            with module.context:
                for name, executor, ops in fusion_regions.summary(fusion_callees(module.operation)):
                    if name not in [r.name for r in out]:
                        out.append(Region(name, executor, ops))
    return out


def examine(fn, /, *args, executors=None, cache=None, fusion=None, **kwargs):
    """What thunder makes of fn(*args, **kwargs), without running the compiled program (the
    function's Python runs once, under the interpreter, as on a cache miss). Prints the table
    and returns the Examination. executors, cache, fusion: as thunder.jit's."""
    cd = make_compile_data(fn, executors=executors, cache=cache, fusion=fusion)
    cs = CompileStats()
    report = Examination()
    with call_records.recording() as record, logs.compiling(fn):
        try:
            entry = compile_entry(cd, cs, args, kwargs)
        except Exception as e:  # noqa: BLE001 - what thunder refuses is the report's answer
            entry = None
            report.error = f"{type(e).__name__}: {e}"
    report.calls = _calls(record)
    report.splits = [f"{s.location}: {s.what} = {s.value!r}" for s in cs.last_splits]
    if entry is not None:
        if entry.program is not None:  # (the backward for all outputs, compiled as its first call would)
            entry.program.backward_for(entry.program.cotangent_for)
        report.regions = _regions(entry.traces + entry.backward_traces)
        report.guards = _guards(entry)
    print(report.table())
    return report

