"""thunder.jit: the jitted callable and its cache (lookup of an entry, miss reasons); compilation on a
miss is runtime/compile.py, the options runtime/options.py."""
import functools
import re
import warnings

import torch

from thunder.core import logs
from thunder.dialects.mlir import LOCK
from thunder.ops.impl import ValueChanged
from thunder.runtime import generalize, guards, persist, tiered
from thunder.runtime.gc_pause import full_collections_deferred
from thunder.runtime.compile import _flatten_call, _fusion_policy, _meta, compile_entry
from thunder.runtime.options import CACHE_OPTIONS, CacheEntry, CompileData, CompileStats, MAX_ENTRIES
from thunder.runtime.prologue import MISS
from thunder.runtime.state import changes_undone


class ThunderFunction:
    """What thunder.jit returns: call it like the original function."""

    def __init__(self, cd: CompileData):
        self._cd = cd
        self._cs = CompileStats()
        self._entries: list[CacheEntry] = []
        self._last_entry = None
        self._samples = []  # cache="symbolic values": recent compiled calls (runtime/symbolic.py)
        self._sample_failures = {}  # call structure -> failed generalizations from samples (runtime/symbolic.py)
        self._disk = persist.Seen()  # entries of the program cache on disk read in this process
        functools.update_wrapper(self, cd.fn, updated=())

    def __call__(self, *args, **kwargs):
        cs = self._cs
        cs.calls += 1
        changed = None
        for entry in self._entries:
            try:
                result = entry.run(args, kwargs)
            except ValueChanged as e:  # a value the entry was specialized on (runtime/reads.py)
                changed = changed or guards.value_changed_reason(e)
                continue
            if result is not MISS:
                cs.cache_hits += 1
                if entry is not self._last_entry:
                    self._last_entry = entry
                    cs.last_traces, cs.last_prologue_traces = entry.traces, entry.prologue_traces
                    cs.last_backward_traces = entry.backward_traces
                return result
        # (kernels compiled in it count as its progress; its regions report to its stats)
        with logs.compiling(self._cd.fn), tiered.reporting_to(self._cd.fn, cs), full_collections_deferred():
            return self._miss(args, kwargs, changed)

    def _miss(self, args, kwargs, changed=None):
        # one compile at a time in the process (dialects/mlir.py LOCK; cached calls never take
        # it): a thread that waited for another's compile of this call uses its entry
        with LOCK:
            for entry in self._entries:
                try:
                    result = entry.run(args, kwargs)
                except ValueChanged as e:
                    changed = changed or guards.value_changed_reason(e)
                    continue
                if result is not MISS:
                    self._cs.cache_hits += 1
                    return result
            return self._compile_miss(args, kwargs, changed)

    def _compile_miss(self, args, kwargs, changed):
        cs, cd = self._cs, self._cd
        cs.cache_misses += 1
        # (a value an entry was specialized on differs: that entry's guard is the reason)
        if changed:
            cs.last_miss_reason = changed
        elif self._entries:
            cs.last_miss_reason = _miss_reason(self._entries, args, kwargs)
        else:
            cs.last_miss_reason = "cache option 'no caching'" if cs.cache_misses > 1 else "first call"
        cs.miss_reasons.append(cs.last_miss_reason)
        logs.cache_miss(cd.fn, cs.cache_misses, cs.last_miss_reason)
        if (cd.recompile_limit is not None and cs.cache_misses - 1 == cd.recompile_limit + 1
                and cd.cache_option != "no caching"):  # (that option recompiles by design)
            _warn_recompiles(cd, cs)
        # a program another process compiled for this call (runtime/persist.py); not where the call
        # is to make sizes symbols (a structure compiled before here at other sizes: a per-size
        # program from the disk would stand in for the program for all sizes, a miss per size)
        generalizing = cd.cache_option == CACHE_OPTIONS.SYMBOLIC_VALUES or (
            cd.cache_option == CACHE_OPTIONS.CONSTANT_VALUES and cd.automatic_dynamic)
        if persist.enabled(cd) and not (generalizing and generalize.seen_structure(self, args, kwargs)):
            found = persist.timed_load(cd, cs, self._disk, args, kwargs)
            if found is not None:
                self._add(found[0])
                if cd.cache_option == CACHE_OPTIONS.SYMBOLIC_VALUES or cd.automatic_dynamic:
                    generalize.remember(self, found[0], args=args, kwargs=kwargs)  # (its sizes, for the next call)
                return found[1]
        with changes_undone(undo=False) as journal:  # (rewound where the call is traced again)
            if cd.cache_option == CACHE_OPTIONS.SYMBOLIC_VALUES:
                entry = generalize.compile_call(self, cd, cs, args, kwargs)
            elif cd.cache_option == CACHE_OPTIONS.CONSTANT_VALUES and cd.automatic_dynamic:
                entry = generalize.compile_call(self, cd, cs, args, kwargs, auto=True)
            else:
                entry = self._add(compile_entry(cd, cs, args, kwargs))
        # the call that traced runs the program without the guards: they hold for the state the
        # trace started from, which the trace itself may have changed (a global counter, a list
        # appended to), as the function does when called eagerly
        try:
            result = entry.first_run(args, kwargs)
        except ValueChanged as e:
            # the program computed a value that Python read differently from the run of torch's
            # calls while tracing: fused kernels round differently. Without fusion it runs
            # torch's calls, as that run did
            self._entries = [e for e in self._entries if e is not entry]
            if _fusion_policy(cd) is None:
                raise RuntimeError(f"thunder: the compiled program computes a value that Python read while tracing "
                                   f"differently from eager PyTorch: {guards.value_changed_reason(e)}") from None
            journal.rewind()  # (traced again from the state the first trace started from)
            entry = self._add(compile_entry(cd, cs, args, kwargs, fusion=False))
            result = entry.first_run(args, kwargs)
        persist.store(cd, entry)
        persist.store_backwards(cd, entry)
        return result

    def _add(self, entry):
        if self._cd.cache_option != "no caching":
            # a new list (e.g. a counter attribute makes every call a new entry): cached calls in
            # other threads iterate over the old one without a lock
            self._entries = [entry] + self._entries[:MAX_ENTRIES - 1]
        self._last_entry = entry
        cs = self._cs
        cs.last_traces, cs.last_prologue_traces = entry.traces, entry.prologue_traces
        cs.last_backward_traces = entry.backward_traces
        return entry

    def __repr__(self):
        return f"<thunder.jit of {getattr(self._cd.fn, '__qualname__', self._cd.fn)!r}>"


def _warn_recompiles(cd, cs):
    """Once, when a function has recompiled more than cd.recompile_limit times."""
    name = getattr(cd.fn, "__qualname__", type(cd.fn).__name__)
    warnings.warn(
        f"thunder: {name} has recompiled {cs.cache_misses - 1} times (recompile_limit={cd.recompile_limit}); "
        f"the input that keeps changing: {cs.last_miss_reason}. Each new value or shape compiles a new "
        "program. Workaround: cache='symbolic values' (sizes that change become symbols of one program), "
        "pad inputs to a few fixed sizes, or pass changing numbers as tensors; "
        "thunder.jit(..., recompile_limit=None) silences this."
        + (f" Sizes as symbols (automatic dynamic): {cs.generalizations[-1]}" if cs.generalizations else ""),
        stacklevel=4)


def _describe_inputs(args, kwargs):
    specs, kspecs, tensors = _flatten_call(args, kwargs)
    return specs, kspecs, [_meta(t) for t in tensors]


def _miss_reason(entries, args, kwargs):
    """Which input changed compared to the most recent entry (slow path, misses only)."""
    try:
        now = _describe_inputs(args, kwargs)
    except Exception as e:  # an input we cannot even describe
        return f"inputs could not be described: {e}"
    arg_specs, kw_specs, arg_meta, state = entries[0].description
    n_args = len(arg_meta)
    if len(now[0]) != len(arg_specs) or [k for k, _ in now[1]] != [k for k, _ in kw_specs]:
        return "different number of arguments or keyword names"
    if len(now[2]) != n_args:
        return "a different number of tensor arguments"
    for i, (a, b) in enumerate(zip(now[2], arg_meta)):
        if b[4] is None:
            a = a[:4] + (None,)
        if a != b:
            return _changed(f"tensor argument {i}", b, a)
    consts, entry_guards, reads = state
    for expr, before in reads:
        try:
            t = eval(expr, {**consts, "args": args, "kwargs": kwargs})
        except Exception:
            return f"{_readable(expr)} is gone"
        if not isinstance(t, torch.Tensor):
            return f"{_readable(expr)} is no longer a tensor"
        if _meta(t, before[4] is not None) != before:
            return _changed(_readable(expr), before, _meta(t, before[4] is not None))
    failed = guards.failing(entry_guards, {**consts, "args": args, "kwargs": kwargs})
    if failed is not None:
        g, value = failed
        return guards.CHECKS[g.check].why(g.what or g.expr, g.expected, value)
    return "a non-tensor input changed (number, string, structure or object)"


def _changed(what, before, now):
    names = ("shape", "dtype", "device", "requires_grad", "strides")
    fields = [n for n, x, y in zip(names, before, now) if x != y]
    n = 5 if before[4] is not None else 4
    return f"{what}: {', '.join(fields)} changed ({before[:n]} -> {now[:n]})"


def _readable(expr):
    """`_s0._modules['0']._parameters['weight']` -> `module 0.weight` for messages."""
    parts = re.findall(r"\[('[^']*')\]|\.(\w+)", expr)
    names = [a.strip("'") if a else b for a, b in parts if (a or b) not in ("_modules", "_parameters", "_buffers", "__dict__")]
    return "module attribute " + ".".join(names) if expr.startswith("_s") else expr
