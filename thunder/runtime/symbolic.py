"""One program for changing sizes: cache="symbolic values" and the default option's automatic dynamic.

How it works (docs/api.md "Cache options"): the call that asks for symbols (under symbolic
values the first call of a structure: same arguments, dtypes, devices, ranks, same tensors read
from state; under the default the second, for the sizes that changed) is traced with them as
SymInts (core/symbols.py), so every decision the function's Python takes on them (a comparison,
`min`/`max`, a branch, `range(n)`) is recorded, and compiled; the same function is compiled at
two other sizes that runtime/dynamic.py chooses (stand-in inputs). Where a tensor read from
state changed its size instead, the three are the call and the two calls of its structure
before it, the symbols the dims that differ in the three (dims with the same sizes in all
three are one symbol, as torch.compile's duck sizing does); sizes 0 and 1 are never symbols.
The three compiled programs are then compared token by token: they must be the same except
for number literals, and each literal that differs must be a size the trace computed (`C //
H`) or an integer polynomial term of the symbols (`c * m + b`, m a product of up to three
symbols) found from two of the calls and checked on the third (where several fit, they must
agree at other sizes), or a float the trace computed from the symbols (`math.sqrt(T)`) that
gives it in all three. The fused kernels' regions are compared the same way. What comes out:

- the program, with the symbols as parameters and the literals as expressions of them;
- kernels compiled per new size on first use (a family: the region text for the sizes, then
  the executor's cache, which compiles once for regions that differ only in their row count);
- a prologue that reads the symbols from the inputs' shapes, checks the static dims, equal
  dims, sizes >= 2 and every recorded decision.

Anything that does not fit (a different program, a literal no term explains, a decision that
went another way in an earlier call, a size returned or stored as a Python number) leaves the
call compiled for its sizes, as "constant values" does; compile_stats().generalizations says
why."""
from dataclasses import dataclass
from fractions import Fraction
import functools
import io
import itertools
import math
import random
import re
import time
import tokenize

import torch

from thunder.dialects.emit import find_func, mismatch
from thunder.dialects.mlir import LOCK
from thunder.lowering import executors
from thunder.lowering.linalg.to_linalg import parse_region
from thunder.runtime.autograd import _ThunderAutograd
from thunder.runtime import dynamic
from thunder.runtime.codegen import compile_source, python_source
from thunder.runtime.compile import _acquire, _flatten_call, compile_entry
from thunder.runtime.options import CacheEntry
from thunder.runtime.prologue import Prologue
from thunder.runtime.traces import Trace

THREE_CALLS = "three calls"
KEEP = 12  # recent compiled calls remembered (of all structures; the newest two of one are used)


@dataclass
class Sample:
    key: tuple
    shapes: list  # the shapes of the entry's tensors (arguments, then tensors read from state)
    reads: tuple  # (consts, [expression of each tensor read from state])
    entry: object


class Plan:
    """The symbols for the current call from the shapes of three calls (oldest first)."""

    def __init__(self, shapes3, where):
        self.names = []  # symbol names
        self.values = []  # per call: {name: size}
        self.dims = []  # per tensor: a name or None per dim
        self.where = {}  # name -> the dims it stands for (for messages)
        self.ints = {}  # int arguments that are symbols: ("arg", i) / ("kwarg", k) -> name
        self.input_name = where  # index -> a name for messages ("tensor argument 0")
        groups = {}
        for i, shape in enumerate(shapes3[2]):
            names = []
            for k in range(len(shape)):
                triple = tuple(s[i][k] for s in shapes3)
                if len(set(triple)) == 1:
                    names.append(None)
                    continue
                if min(triple) < 2:
                    raise _NoFit(f"{where(i)} dim {k} is {min(triple)} in one call (sizes 0 and 1 are never symbols)")
                if triple not in groups:
                    groups[triple] = f"_sym{len(groups)}"
                    self.names.append(groups[triple])
                names.append(groups[triple])
                w = where(i)
                self.where.setdefault(groups[triple], []).append(w if w.startswith("int ") else f"{w} dim {k}")
            self.dims.append(tuple(names))
        self.values = [{n: t[c] for t, n in groups.items()} for c in range(3)]
        if not self.names:
            raise _NoFit("no size changed")

    def sym_shapes(self, tensors):
        return {id(t): names for t, names in zip(tensors, self.dims) if any(names)}

    def describe(self):
        return ", ".join(f"{n}: {' = '.join(w)}" for n, w in self.where.items())


class _NoFit(Exception):
    pass


# ---- the structure of a call (before compiling it) and its shapes

def _spec_key(spec):
    """A hashable form of an input spec (runtime/structure.py): objects by identity, plain
    values by type and value (floats by type)."""
    if isinstance(spec, (tuple, list)):
        return tuple(_spec_key(x) for x in spec)
    if type(spec) is float:  # a float argument: a runtime number of the program, any value
        return (float,)
    if spec is None or isinstance(spec, (bool, int, float, str, torch.dtype, torch.device)):
        return type(spec), spec
    return "id", id(spec)


def _int_args(args, kwargs):
    """The int arguments (top level; not bools): [(("arg", i) or ("kwarg", k), value)]."""
    out = [(("arg", i), a) for i, a in enumerate(args) if type(a) is int]
    return out + [(("kwarg", k), v) for k, v in kwargs.items() if type(v) is int]


def _call_key(args, kwargs):
    """(the structure of a call: specs with its int arguments' values left out, dtypes, ranks;
    the tensors in its arguments; its int arguments)."""
    specs, kspecs, tensors = _flatten_call(args, kwargs)
    ints = _int_args(args, kwargs)
    skey = [("int",) if type(a) is int else _spec_key(s) for a, s in zip(args, specs)]
    kkey = [(k, ("int",) if type(kwargs[k]) is int else _spec_key(s)) for k, s in kspecs]
    metas = tuple((t.dim(), t.dtype, t.device, t.requires_grad) for t in tensors)
    return (tuple(skey), tuple(kkey), metas, tuple(w for w, _ in ints)), tensors, ints


def _read_now(reads, args, kwargs):
    """The tensors an earlier call read from state (reads: its consts and expressions), read
    from this call's arguments and state."""
    consts, exprs = reads
    out = [eval(e, {**consts, "args": args, "kwargs": kwargs}) for e in exprs]  # noqa: S307 - our own expressions
    if not all(isinstance(t, torch.Tensor) for t in out):
        raise _NoFit("a tensor the calls read from state is no longer a tensor")
    return out


def compile_call(jf, cd, cs, args, kwargs, auto=False):
    """The miss path under cache="symbolic values" (auto=False) and under the default option's
    automatic dynamic (auto=True): compiles the call (runtime/compile.py compile_entry) and,
    where sizes or ints are to become symbols, adds the generalized entry in front of the cache.
    Which ones: under symbolic values, at the first call of a structure, every size >= 2 of its
    tensor arguments and every int argument >= 2 (less the sizes of the module's parameters and
    buffers); at a later call, those that changed since the last call of that structure (as
    under automatic dynamic). The program for all sizes is fitted from the call and two samples
    at other sizes (runtime/dynamic.py); where a tensor read from state changed its size (a KV
    cache object's), from the call and the two calls of the structure before it. Returns the
    entry to run the call with."""
    key, arg_tensors, ints = _call_key(args, kwargs)
    family = [s for s in jf._samples if s.key == key]
    entry = run = None
    try:
        chosen = _choose_symbols(jf, cd, key, family, args, kwargs, arg_tensors, ints, auto)
    except _NoFit as e:
        chosen = None
        cs.last_generalization = f"not generalized: {e}"
    if chosen is THREE_CALLS or chosen is None and not auto:
        try:
            entry = run = _compile_fitted(jf, cd, cs, args, kwargs, family, arg_tensors, ints)
        except Exception as e:  # noqa: BLE001 - tracing with symbols failed: the default compiles without
            if not auto:
                raise
            cs.last_generalization = f"not generalized: tracing with symbols failed ({type(e).__name__}: {e})"
    elif chosen is not None:
        entry, run = _compile_sampled(jf, cd, cs, args, kwargs, chosen, ints, auto)
    if entry is None:
        entry = run = jf._add(compile_entry(cd, cs, args, kwargs, keep_parts=True))
    arg_specs, kw_specs, arg_meta, state = entry.description
    sample = Sample(key, [m[0] for m in arg_meta] + [m[0] for _, m in state[2]] + [(v,) for _, v in ints],
                    (state[0], [e for e, _ in state[2]]), entry)
    # older samples keep no tensors (only the newest builds a prologue)
    for s in family[-2:]:
        if s.entry.parts is not None:
            s.entry.parts.prologue = None
    jf._samples.append(sample)
    del jf._samples[:-KEEP]
    return run


def _choose_symbols(jf, cd, key, family, args, kwargs, arg_tensors, ints, auto):
    """(the call's structure, its tensor arguments, per tensor a group key or None per dim, per
    int argument a group key or None, why, whether the first call of its structure) for a call
    to compile with samples (the group keys of equal value are one symbol), THREE_CALLS for one
    to fit from three real calls (_compile_fitted), or None."""
    failed = jf._sample_failures.get(key, 0)  # (each costs up to four compiles: a few tries per structure)
    if auto and not family:
        return None
    if failed >= 3:
        return None if auto else THREE_CALLS
    if not family:  # symbolic values, first call: every size but the module's own
        fixed = set()
        if cd.module is not None:
            for t in itertools.chain(cd.module.parameters(), cd.module.buffers()):
                fixed.update(t.shape)
        dims = [tuple(n if n >= 2 and n not in fixed else None for n in t.shape) for t in arg_tensors]
        return (key, arg_tensors, dims, [v if v >= 2 and v not in fixed else None for _, v in ints],
                "symbolic values: the first call's sizes and int arguments", True)
    newest = family[-1]
    try:
        tensors = arg_tensors + _read_now(newest.reads, args, kwargs)
    except Exception as e:  # noqa: BLE001 - reading the state failed: compile per size
        raise _NoFit(f"reading the tensors of the call before failed: {e}") from None
    now = [tuple(t.shape) for t in tensors] + [(v,) for _, v in ints]
    if len(now) != len(newest.shapes) or [len(x) for x in now] != [len(x) for x in newest.shapes]:
        raise _NoFit("the calls' tensors differ in number or rank")
    groups = [tuple((old, new) if old != new and new >= 2 else None for old, new in zip(a, b))
              for a, b in zip(newest.shapes, now)]
    if any(any(g) for g in groups[len(arg_tensors):len(tensors)]):
        return THREE_CALLS  # a tensor read from state changed its size (a KV cache object's)
    if not any(any(g) for g in groups):
        return None
    return (key, arg_tensors, groups[:len(arg_tensors)], [g[0] for g in groups[len(tensors):]],
            "automatic dynamic: the sizes that changed since the call before" if auto else
            "symbolic values: the sizes that changed since the call before", False)


def _symbol_names(dims, int_groups, ints):
    """Names for the group keys, in the order Plan finds them; (sym_shapes by position, ints)."""
    names = {}
    shape_names = [tuple(None if g is None else names.setdefault(g, f"_sym{len(names)}") for g in d) for d in dims]
    int_names = {w: names.setdefault(g, f"_sym{len(names)}") for (w, _), g in zip(ints, int_groups) if g is not None}
    return shape_names, int_names


def _compile_sampled(jf, cd, cs, args, kwargs, chosen, ints, auto):
    """The call compiled with the chosen symbols and, when it fits, the program for all sizes
    fitted from it and two samples at other sizes (runtime/dynamic.py). Returns (the call's entry,
    the entry to run the call with: the general one where there is one, so the call runs the
    kernels that later calls share), or (None, None)."""
    key, tensors, dims, int_groups, why, first = chosen
    shape_names, int_names = _symbol_names(dims, int_groups, ints)
    if not int_names and not any(any(d) for d in shape_names):
        cs.last_generalization = "not generalized: no size or int argument to make a symbol"
        return None, None
    sym_shapes = {id(t): d for t, d in zip(tensors, shape_names) if any(d)}
    try:
        entry = compile_entry(cd, cs, args, kwargs, sym_shapes={**sym_shapes, **int_names}, keep_parts=True)
    except Exception as e:  # noqa: BLE001 - tracing with symbols failed where tracing without may not
        if not auto:
            raise
        cs.last_generalization = f"not generalized: tracing with symbols failed ({type(e).__name__}: {e})"
        return None, None
    run = entry
    try:
        general, plan = _sampled_entry(cd, cs, args, kwargs, entry, tensors, shape_names, int_names, ints,
                                       first)
        run = general
        what = "; ".join(f"{n}: {' = '.join(w)}" for n, w in plan.where.items())
        cs.last_generalization = f"generalized ({why}): {what}"
        if isinstance(entry.parts.symbolic_trace, str):
            cs.last_generalization += f"; {entry.parts.symbolic_trace}"
    except (_NoFit, dynamic.NoSample) as e:
        cs.last_generalization = f"not generalized ({why}): {e}"
        jf._sample_failures[key] = jf._sample_failures.get(key, 0) + 1
    cs.generalizations.append(cs.last_generalization)
    return entry, jf._add(run)


def _fix_symbols(parts, shape_names, int_names, real, fixed):
    """The symbols named in fixed made constants (the recorded decisions and size expressions
    rewritten, the others renamed in order); (shape_names, int_names, real)."""
    rename, new_real = {}, {}
    for n in real:  # (in the order of their names)
        if n in fixed:
            rename[n] = repr(real[n])
        else:
            rename[n] = f"_sym{len(new_real)}"
            new_real[rename[n]] = real[n]

    def sub(source):
        return re.sub(r"\b_sym\d+\b", lambda m: rename.get(m.group(0), m.group(0)), source)

    parts.guards = {sub(g): o for g, o in (parts.guards or {}).items()}
    parts.int_exprs = tuple(sub(e) for e in parts.int_exprs)
    parts.float_exprs = tuple(sub(e) for e in parts.float_exprs)
    if not isinstance(parts.symbolic_trace, str):
        parts.symbolic_trace = "the trace was recorded with sizes as symbols that are constants of the program"
    shape_names = [tuple(n if n is None or n in new_real else None for n in
                         (rename.get(x) if x else None for x in d)) for d in shape_names]
    int_names = {w: rename[n] for w, n in int_names.items() if rename[n] in new_real}
    return shape_names, int_names, new_real


def _sampled_entry(cd, cs, args, kwargs, entry, tensors, shape_names, int_names, ints, first):
    parts = entry.parts
    if cs.last_splits:
        raise _NoFit("the trace read tensor values (its samples at other sizes would hold none)")
    read = parts.prologue[2]
    if parts.read_ids[:len(tensors)] != [id(t) for t in tensors]:
        raise _NoFit("the call read its tensor arguments in another order")
    real = {}
    for t, d in zip(read, shape_names):
        real.update({n: v for n, v in zip(d, t.shape) if n})
    real.update({n: v for (w, v), n in ((w_v, int_names.get(w_v[0])) for w_v in ints) if n})
    if first:  # sizes equal to one of a tensor read from state (a global weight's) are its: constants
        state_dims = {n for t in read[len(tensors):] for n in t.shape}
        if any(v in state_dims for v in real.values()):
            shape_names, int_names, real = _fix_symbols(parts, shape_names, int_names, real,
                                                        {n for n, v in real.items() if v in state_dims})
            if not real:
                raise _NoFit("every size is one of a tensor read from state")
    try:
        return _fit_sampled(cd, cs, args, kwargs, entry, tensors, shape_names, int_names, ints, real)
    except _SampleFailed as e:
        if not first or len(real) < 2:
            raise
        # (every size a symbol, sizes the function ties together in a way no decision records:
        # `split(C)` of a 3C dim. Those that the function refuses to trace when they alone change
        # are made constants, and the rest sampled again)
        refused = {n for n in real if not _traces_with(cd, args, kwargs, tensors, shape_names, int_names,
                                                        {**real, n: e.values[n]})}
        if not refused or refused == set(real):
            raise
        shape_names, int_names, real = _fix_symbols(parts, shape_names, int_names, real, refused)
        return _fit_sampled(cd, cs, args, kwargs, entry, tensors, shape_names, int_names, ints, real)


class _SampleFailed(_NoFit):
    def __init__(self, message, values):
        super().__init__(message)
        self.values = values


def _traces_with(cd, args, kwargs, tensors, shape_names, int_names, values):
    """Whether the function traces (no passes) with stand-in inputs at the sizes values."""
    try:
        shapes = [tuple(values[n] if n else v for n, v in zip(d, t.shape)) for t, d in zip(tensors, shape_names)]
        s_args, s_kwargs = dynamic.stand_in_call(args, kwargs, tensors, shapes,
                                                 {w: values[n] for w, n in int_names.items()})
        _acquire(cd, s_args, s_kwargs)
    except Exception:  # noqa: BLE001 - the function refuses these sizes
        return False
    return True


def _fit_sampled(cd, cs, args, kwargs, entry, tensors, shape_names, int_names, ints, real):
    """The entry for all sizes fitted from entry (the call, traced with the symbols) and two
    samples at other sizes; (entry, plan)."""
    parts = entry.parts
    read = parts.prologue[2]
    exprs = tuple(parts.int_exprs) + tuple(parts.float_exprs)
    # `a // b` and `a % b` that divide evenly at the call's sizes: first sampled where they do not
    # (the program then holds for both); where that fails, kept even by the prologue
    divisions = dynamic.even_divisions(exprs, real)
    recorded = dict(parts.guards or {})
    attempts = [(recorded, divisions)] if divisions else []
    attempts.append(({**recorded, **divisions}, {}))
    for k, (guards, uneven) in enumerate(attempts):
        try:
            pair = dynamic.choose_values(list(real), real, guards, exprs, uneven=uneven)
            samples = _compile_samples(cd, cs, args, kwargs, tensors, shape_names, int_names, parts, pair)
            shapes3 = [[tuple(t.shape) for t in x.parts.prologue[2]] + [(v,) for v in vals] for x, vals in zip(
                samples + [entry], [[p[int_names[w]] if w in int_names else v for w, v in ints] for p in pair]
                + [[v for _, v in ints]])]
            plan = Plan(shapes3, _input_names(len(tensors), [e for e, _ in entry.description[3][2]],
                                              [w for w, _ in ints]))
            plan.ints = {w: d[0] for (w, _), d in zip(ints, plan.dims[len(read):]) if d[0]}
            if plan.dims[:len(tensors)] != shape_names or plan.ints != int_names:
                raise _NoFit("the samples at other sizes changed other sizes than the symbols")
            parts.guards = guards
            return _generalize(samples + [entry], plan), plan
        except (_NoFit, dynamic.NoSample):
            if k == len(attempts) - 1:
                raise


def _compile_samples(cd, cs, args, kwargs, tensors, shape_names, int_names, parts, pair):
    """The call compiled at the sizes of each assignment in pair (stand-in inputs); cs as it was
    but for the time spent."""
    saved = dict(vars(cs))
    t0 = time.perf_counter()
    samples = []
    try:
        for values in pair:
            shapes = [tuple(values[n] if n else v for n, v in zip(d, t.shape)) for t, d in zip(tensors, shape_names)]
            s_args, s_kwargs = dynamic.stand_in_call(args, kwargs, tensors, shapes,
                                                     {w: values[n] for w, n in int_names.items()})
            try:
                sample = compile_entry(cd, cs, s_args, s_kwargs, keep_parts=True)
            except Exception as e:  # noqa: BLE001 - the function refuses the other sizes: per size
                raise _SampleFailed(f"the call at other sizes ({values}) failed to compile: {type(e).__name__}: {e}",
                                    values) from None
            if cs.last_splits:
                raise _NoFit("the trace at other sizes read tensor values")
            if sample.parts.read_ids[len(tensors):] != parts.read_ids[len(tensors):]:
                raise _NoFit("the call at other sizes read other tensors from state")
            samples.append(sample)
    finally:
        spent = time.perf_counter() - t0
        vars(cs).update(saved)
        cs.last_compile_time += spent
        cs.last_stage_times = {**cs.last_stage_times, "samples at other sizes": spent}
    return samples


def _compile_fitted(jf, cd, cs, args, kwargs, family, arg_tensors, ints):
    """The third call of a structure whose sizes changed in tensors read from state, compiled
    with the sizes that differ in the three calls as symbols and the program for all sizes
    fitted from the three. Returns the call's entry, or None (compile per size)."""
    if len(family) < 2:
        return None
    older = family[-2:]
    try:
        if older[0].reads[1] != older[1].reads[1]:
            raise _NoFit("the calls read different tensors from state")
        tensors = arg_tensors + _read_now(older[1].reads, args, kwargs)
        # (int arguments take part as one-dim "shapes", after the tensors)
        now = [tuple(t.shape) for t in tensors] + [(v,) for _, v in ints]
        shapes3 = [s.shapes for s in older] + [now]
        if any(len(s) != len(now) or [len(x) for x in s] != [len(x) for x in now] for s in shapes3):
            raise _NoFit("the calls' tensors differ in number or rank")
        plan = Plan(shapes3, _input_names(len(arg_tensors), older[1].reads[1], [w for w, _ in ints]))
        plan.ints = {w: d[0] for (w, _), d in zip(ints, plan.dims[len(tensors):]) if d[0]}
    except Exception as e:  # noqa: BLE001 - _NoFit, or reading the state failed: compile per size
        cs.last_generalization = f"not generalized: {e}"
        return None
    if any(s.entry.parts is None for s in older):
        cs.last_generalization = "not generalized: the calls before kept no program"
        return None
    entry = compile_entry(cd, cs, args, kwargs, sym_shapes={**plan.sym_shapes(tensors), **plan.ints}, keep_parts=True)
    jf._add(entry)
    try:
        if entry.parts.read_ids != [id(t) for t in tensors]:
            raise _NoFit("the call read other tensors than the calls before")
        general = _generalize([s.entry for s in older] + [entry], plan)
        jf._add(general)
        cs.last_generalization = f"generalized (three calls: a tensor read from state changed its size): " \
                                 f"{plan.describe()}"
        if isinstance(entry.parts.symbolic_trace, str):  # (the program is general; its MLIR trace not)
            cs.last_generalization += f"; {entry.parts.symbolic_trace}"
    except _NoFit as e:
        cs.last_generalization = f"not generalized: {e}"
    cs.generalizations.append(cs.last_generalization)
    return entry


def _input_names(n_args, read_exprs, int_args):
    def where(i):
        if i < n_args:
            return f"tensor argument {i}"
        if i < n_args + len(read_exprs):
            return read_exprs[i - n_args]
        kind, k = int_args[i - n_args - len(read_exprs)]
        return f"int argument {k!r}" if kind == "kwarg" else f"int argument {k}"

    return where


# ---- generalization

def _generalize(entries, plan):
    parts = [e.parts for e in entries]
    if parts[2].leaks:
        raise _NoFit("a size computed from the symbols is returned or stored as a Python number")
    guards = parts[2].guards or {}
    for c in range(2):
        for source, outcome in guards.items():
            if eval(source, {"math": math}, dict(plan.values[c])) != outcome:  # noqa: S307
                raise _NoFit(f"the decision {source} == {outcome} went the other way in an earlier call")
    fit = _Fitter(plan, parts[2].float_exprs, parts[2].int_exprs, guards)
    names = ", ".join(plan.names)
    constants = _constants([p.constants for p in parts], fit, names)
    program = constants.get("_program")
    if isinstance(program, _SymbolicProgram):  # training: the forward and backward programs too
        calls = [p.constants["_program"] for p in parts]
        program.build([c.forward_source for c in calls], [c.constants["forward"] for c in calls],
                      [c.backward_source for c in calls], [c.constants["backward"] for c in calls], fit, names)
    source = _render_python([p.source for p in parts], fit, "computation", names, constants, last=True)
    computation = compile_source(source, constants=constants)
    arg_specs, kw_specs, read, prologue_args = parts[2].prologue
    for i in prologue_args["strided"]:
        if any(plan.dims[i]) and not read[i].is_contiguous():
            raise _NoFit(f"the program depends on the strides of {plan.input_name(i)}, which is not contiguous")
    if any(any(plan.dims[i]) for i in prologue_args["storages"]) or prologue_args["shared"]:
        raise _NoFit("inputs share memory")
    sym_dims = {i: d for i, d in enumerate(plan.dims[:len(read)]) if any(d)}
    prologue = Prologue(arg_specs, kw_specs, read, **prologue_args,
                        symbols=(sym_dims, plan.names, guards, plan.ints))
    run, first_run = prologue.compile(computation)
    traces = list(entries[2].traces)
    if not isinstance(parts[2].symbolic_trace, str):
        parts[2].symbolic_trace = _checked_symbolic_trace(parts[2].symbolic_trace, entries, plan)
    if not isinstance(parts[2].symbolic_trace, str):
        traces.insert(0, parts[2].symbolic_trace)
    text = source if program is None else source + "\n" + program.forward_source
    traces.append(Trace("symbolic values (the program for all sizes)", python=text, fn=computation))
    prologue_trace = Trace("prologue", python=prologue.source, fn_name="entry", fn=run)
    backward = list(entries[2].backward_traces)
    if program is not None:
        backward.append(Trace("symbolic values (backward)", python=program.backward_source, fn_name="backward",
                              fn=program.backward))
    return CacheEntry(run, traces, [prologue_trace], entries[2].description, backward, first_run)


def _checked_symbolic_trace(trace, entries, plan):
    """The acquisition trace with symbolic sizes if, its sizes taken from each of the three calls,
    it is that call's trace (the same check as the programs': a number the recording made
    constant differs); else why not."""
    module = trace.module()
    with module.context:
        f = find_func(module.operation, trace.fn_name)
        for k, e in enumerate(entries):
            concrete = e.traces[0].module()
            try:
                where = mismatch(f, find_func(concrete.operation, trace.fn_name), plan.values[k])
            except Exception as err:  # noqa: BLE001 - a trace to show, never a reason to fail the call
                where = f"a check that failed ({type(err).__name__}: {err})"
            if where is not None:
                return f"the trace with symbolic sizes is not the trace of call {k + 1} of 3 in {where}"
    return trace


class _Fitter:
    """Expressions of the symbols for the literals that differ between the three calls."""

    def __init__(self, plan, float_exprs=(), int_exprs=(), guards=None):
        self.plan = plan
        self.float_exprs = float_exprs
        self.int_exprs = int_exprs  # sizes the trace computed (`C // H`, `max(T - 3, 0)`): candidates first
        self.guards = guards or {}
        self._probes = None
        monomials = []
        for degree in (1, 2, 3):
            monomials += list(itertools.combinations_with_replacement(plan.names, degree))
        self.monomials = monomials

    def expr(self, values):
        """Python source of an int matching values (one per call): a size the trace computed
        or an integer c * m + b; where several match, they must agree at other sizes that keep
        the recorded decisions (else the literal is ambiguous)."""
        found = []
        for e in self.int_exprs:
            try:
                if [eval(e, {"math": math}, dict(p)) for p in self.plan.values] == list(values):  # noqa: S307
                    found.append(f"({e})")
            except Exception:  # noqa: BLE001 - not defined at another call's sizes
                continue
        try:
            found = self._polynomial(values) + found
        except _NoFit:
            if not found:
                raise
        at = [self._at(e) for e in found]
        if any(a != at[0] for a in at):
            raise _NoFit(f"a literal ({', '.join(map(str, values))} in the three calls) is explained by sizes that "
                         f"differ at other sizes ({' / '.join(found)})")
        return found[0]

    def _at(self, source):
        """The values of a size expression at other sizes that keep the recorded decisions."""
        if self._probes is None:
            rng = random.Random(0)
            top = max(max(p.values()) for p in self.plan.values)
            self._probes = []
            for _ in range(400):
                p = {n: rng.randrange(2, 2 * top + 8) for n in self.plan.names}
                try:
                    if all(eval(g, {"math": math}, dict(p)) == o for g, o in self.guards.items()):  # noqa: S307
                        self._probes.append(p)
                except Exception:  # noqa: BLE001
                    continue
                if len(self._probes) == 16:
                    break
        out = []
        for p in self._probes:
            try:
                out.append(eval(source, {"math": math}, dict(p)))  # noqa: S307
            except Exception as e:  # noqa: BLE001 - undefined there (a division by zero)
                out.append(type(e).__name__)
        return out

    def _polynomial(self, values):
        """Python sources of the integer terms c * m + b matching values (one per call), the
        simplest first."""
        points = self.plan.values
        found = []
        for m in self.monomials:
            ms = [math.prod(p[n] for n in m) for p in points]
            pair = next(((i, j) for i, j in ((0, 1), (0, 2), (1, 2)) if ms[i] != ms[j]), None)
            if pair is None:
                continue
            i, j = pair
            c = Fraction(values[j] - values[i], ms[j] - ms[i])
            if c.denominator != 1 or c == 0:
                continue
            c, b = int(c), values[i] - int(c) * ms[i]
            if all(v == c * x + b for v, x in zip(values, ms)):
                found.append(((b != 0, len(m)), m, c, b))
        if not found:
            raise _NoFit(f"the program has a literal ({', '.join(map(str, values))} in the three calls) that no "
                         "term of the symbols explains")
        found.sort(key=lambda f: f[0])
        out = []
        for _, m, c, b in found:
            text = " * ".join(m)
            if c != 1:
                text = f"{c} * {text}"
            if b:
                text = f"{text} {'+' if b > 0 else '-'} {abs(b)}"
            out.append(f"({text})")
        return out

    def float_expr(self, texts, float_format):
        """The expression, among the floats the trace computed from sizes, whose values in the
        three calls are written as texts; None if none is."""
        for e in self.float_exprs:
            try:
                values = [float(eval(e, {"math": math}, dict(p))) for p in self.plan.values]  # noqa: S307
            except Exception:  # noqa: BLE001 - not defined at another call's sizes (a division by zero)
                continue
            if [float_format(v) for v in values] == list(texts):
                return f"({e})"
        return None


def _fit_number(texts, fit, float_format, what):
    """(expression, whether a float) for a number that differs between the calls: an integer,
    a float holding an integer (a size times a float tensor: `x * n`) written as float_format
    writes it, or a float the trace computed from the sizes."""
    try:
        return fit.expr([int(x) for x in texts]), False
    except ValueError:
        pass
    try:
        values = [float(x) for x in texts]
    except ValueError:
        raise _NoFit(f"{what} differ ({' / '.join(texts)})") from None
    if not all(v.is_integer() and abs(v) < 2 ** 53 and float_format(v) == t for v, t in zip(values, texts)):
        expr = fit.float_expr(texts, float_format)  # a float computed from the sizes (T / 2)
        if expr is not None:
            return expr, True
        raise _NoFit(f"{what} differ in a number that is not an integer ({' / '.join(texts)})")
    return fit.expr([int(v) for v in values]), True


def _python_tokens(source):
    """(kind, text, start, end) of the tokens that matter (no comments)."""
    out = []
    for t in tokenize.generate_tokens(io.StringIO(source).readline):
        if t.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING):
            continue
        out.append(t)
    return out


def _render_python(sources, fit, fn_name, names, constants, last=False):
    """sources' common program with the symbols as parameters (after the others when last,
    else first) and its differing literals as expressions; comments (the sizes of one call)
    dropped; calls of kernel families take the symbols."""
    streams = [_python_tokens(s) for s in sources]
    if len({len(s) for s in streams}) != 1:
        raise _NoFit(f"the {fn_name} programs of the three calls differ")
    replace = {}  # (row, col) -> (end, text)
    for toks in zip(*streams):
        texts = [t.string for t in toks]
        if len(set(texts)) == 1:
            continue
        if toks[0].type != tokenize.NUMBER or any(t.type != tokenize.NUMBER for t in toks):
            raise _NoFit(f"the {fn_name} programs of the three calls differ ({' / '.join(texts)})")
        expr, is_float = _fit_number(texts, fit, repr, f"the {fn_name} programs")
        replace[toks[2].start] = (toks[2].end, f"float{expr}" if is_float else expr)
    lines = sources[2].splitlines(keepends=True)
    # drop comments, then substitute (right to left within a line, so columns stay valid)
    comments = [t for t in tokenize.generate_tokens(io.StringIO(sources[2]).readline) if t.type == tokenize.COMMENT]
    edits = [(t.start, t.end, "") for t in comments] + [(start, end, text) for start, (end, text) in replace.items()]
    for (row, col), (_, end_col), text in sorted(edits, reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + text + line[end_col:]
    source = "".join(line.rstrip() + "\n" if line.strip() else "" for line in lines)
    for name, value in constants.items():
        if isinstance(value, (_KernelFamily, _SymbolicProgram)):
            source = re.sub(rf"\b{re.escape(name)}\(", f"{name}.at({names})(", source)
    params = re.search(rf"def {fn_name}\((.*?)\):", source)
    if params is None:
        raise _NoFit(f"no def {fn_name} in the program")
    inner = params.group(1).strip()
    new = (f"{inner}, {names}" if inner else names) if last else (f"{names}, {inner}" if inner else names)
    return source[:params.start(1)] + new + source[params.end(1):]


def _constants(dicts, fit, names):
    """The program's constants for all sizes: equal ones kept, kernels whose region differs
    become a family, the autograd program a symbolic one."""
    if len({tuple(sorted(d)) for d in dicts}) != 1:
        raise _NoFit("the programs of the three calls use different constants")
    out = {}
    for name, v in dicts[2].items():
        vs = [d[name] for d in dicts]
        if all(x is v for x in vs):
            out[name] = v
        elif all(type(x).__name__ == "AutogradProgram" for x in vs):
            out[name] = _SymbolicProgram(v)
        elif all(getattr(x, "region", None) is not None for x in vs):
            texts = [x.region[1] for x in vs]
            out[name] = v if len(set(texts)) == 1 else _KernelFamily(v.region[0], texts, fit)
        elif all(isinstance(x, torch.Tensor) for x in vs) and all(
                x.shape == v.shape and x.dtype == v.dtype and torch.equal(x, v) for x in vs):
            out[name] = v
        elif all(_equal(x, v) for x in vs):
            out[name] = v
        else:
            raise _NoFit(f"the programs' constant {name} differs between the calls")
    return out


def _equal(a, b):
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - not comparable: not the same constant
        return False


_MLIR_NUMBER = re.compile(r"(0x[0-9A-Fa-f]+|\d+\.\d*(?:[eE][+-]?\d+)?|\d+)")


def _mlir_float(v):
    return "%e" % v  # as MLIR prints an f32/f64 attribute that is exact in six digits


class _KernelFamily:
    """A fused region whose text depends on the symbols: compiled per size on first use (the
    executor's cache shares compiled code between regions that differ only in row count)."""

    def __init__(self, executor, texts, fit):
        splits = [_MLIR_NUMBER.split(t) for t in texts]
        if len({len(s) for s in splits}) != 1:
            raise _NoFit("a fused region differs between the calls")
        self.executor = executor
        self.pieces = []  # literal text or an expression of the symbols
        for parts in zip(*splits):
            if len(set(parts)) == 1:
                self.pieces.append(parts[0])
                continue
            expr, is_float = _fit_number(parts, fit, _mlir_float, "fused regions of the calls")
            self.pieces.append((compile(expr, "<thunder symbolic>", "eval"), is_float))
        self.names = fit.plan.names
        self.kernels = {}
        self.compiled = False  # whether a size compiled its kernel (later sizes do not compile)

    def at(self, *sizes):
        k = self.kernels.get(sizes)
        if k is None:
            with LOCK:  # (a compile at call time: dialects/mlir.py)
                return self._compile_at(sizes)
        return k

    def _compile_at(self, sizes):
        k = self.kernels.get(sizes)
        if k is None:
            env = dict(zip(self.names, sizes))
            values = [p if isinstance(p, str) else eval(p[0], {}, env) for p in self.pieces]  # noqa: S307
            text = "".join(v if isinstance(v, str) else _mlir_float(float(v)) if p[1] else str(v)
                           for v, p in zip(values, self.pieces))
            compile_region = executors.get(self.executor).compile
            if self.executor != "linalg":
                k = compile_region(text, "fusion")
            else:  # tiled along the changing sizes: one compile for all
                k = _Member(self, text, compile_region(text, "fusion", sizes=tuple({v for v in values if type(v) is int})))
            self.kernels[sizes] = k
        return k


class _Member:
    """A kernel family's region at one size. Its kernel runs where its code is compiled already
    (the family's first size, and every size sharing that code); elsewhere (a region that
    reduces over a changing size) the region runs as torch calls rather than compiling again."""

    def __init__(self, family, text, kernel):
        self.family, self.text, self.kernel = family, text, kernel
        self.runs = {}  # input strides -> the callable

    def __call__(self, *args):
        strides = self.kernel.strides(args)
        run = self.runs.get(strides)
        if run is None:
            if not self.family.compiled or self.kernel.has_code(strides):
                self.family.compiled = True
                run = self.kernel
            else:
                run = _torch_region(self.text)
            self.runs[strides] = run
        return run(*args)


def _torch_region(text):
    """The region's prims as torch calls (codegen of the region func)."""
    _, module = parse_region(text)
    fn = compile_source(python_source(module, "fusion", comments=False), "fusion")

    def run(*args):
        out = fn(*args)
        return out if isinstance(out, tuple) else (out,)

    return run


class _SymbolicProgram:
    """The autograd program for all sizes: forward and backward take the symbols first; `at`
    binds them for one call (the backward of that call gets the same)."""

    def __init__(self, program):
        self.num_outputs, self.grad_of = program.num_outputs, program.grad_of
        self.cotangent_for, self.num_inputs = program.cotangent_for, program.num_inputs
        self.reaches = program.reaches

    def build(self, fwd_sources, fwd_consts, bwd_sources, bwd_consts, fit, names):
        fc = _constants(fwd_consts, fit, names)
        bc = _constants(bwd_consts, fit, names)
        self.forward_source = _render_python(fwd_sources, fit, "forward", names, fc)
        self.backward_source = _render_python(bwd_sources, fit, "backward", names, bc)
        self.forward = compile_source(self.forward_source, "forward", constants=fc)
        self.backward = compile_source(self.backward_source, "backward", constants=bc)

    def at(self, *sizes):
        return _Bound(self, sizes)


class _Bound:
    """A symbolic autograd program with the sizes of one call bound (what _ThunderAutograd runs)."""

    def __init__(self, program, sizes):
        self.program = program
        self.forward = functools.partial(program.forward, *sizes)
        self.backward = functools.partial(program.backward, *sizes)

    def __getattr__(self, name):  # num_outputs, grad_of, cotangent_for, num_inputs, reaches
        return getattr(self.program, name)

    def __call__(self, *inputs):
        return _ThunderAutograd.apply(self, *inputs)
