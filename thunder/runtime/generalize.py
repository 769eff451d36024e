"""Which calls make sizes symbols, and the compiles that find the program for all sizes: the miss
path under cache="symbolic values" and under the default option's automatic dynamic
(runtime/jit.py). The call that asks for symbols is compiled with them as SymInts and at two
sizes runtime/dynamic.py chooses, or, where a tensor read from state changed its size, with
the two calls of its structure before it; runtime/symbolic.py fits the program for all sizes
from the three (docs/api.md "Symbolic values")."""
import contextlib
from dataclasses import dataclass
import itertools
import re
import time
import types

import torch

from thunder.core import size_choices
from thunder.lowering import fuse
from thunder.runtime import carried, dynamic
from thunder.runtime.autograd import AutogradProgram
from thunder.runtime.compile import _acquire, _flatten_call, compile_entry
from thunder.runtime.symbolic_program import NotSymbolic
from thunder.runtime.state import changes_undone
from thunder.runtime.symbolic import Plan, _Fitter, _NoFit, _generalize

THREE_CALLS = "three calls"
KEEP = 12  # recent compiled calls remembered (of all structures; the newest two of one are used)


@dataclass
class Sample:
    key: tuple
    shapes: list  # the shapes of the entry's tensors (arguments, then tensors read from state)
    reads: tuple  # (consts, [expression of each tensor read from state])
    entry: object


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
    # (fusion decides alike at every size a fit compiles: under symbolic values every compile is
    # one a program for all sizes may be fitted from; under automatic dynamic, the fits)
    with fuse.sizes_fitted() if not auto else contextlib.nullcontext():
        return _compile_call(jf, cd, cs, args, kwargs, auto)


def _compile_call(jf, cd, cs, args, kwargs, auto):
    key, arg_tensors, ints = _call_key(args, kwargs)
    family = [s for s in jf._samples if s.key == key]
    entry = run = None
    try:
        chosen = _choose_symbols(jf, cd, key, family, args, kwargs, arg_tensors, ints, auto)
    except _NoFit as e:
        chosen = None
        cs.last_generalization = f"not generalized: {e}"
    with changes_undone(undo=False) as attempt:  # (rewound where the call is traced again below)
        if chosen is THREE_CALLS or chosen is None and not auto:
            try:
                with fuse.sizes_fitted():
                    entry = run = _compile_fitted(jf, cd, cs, args, kwargs, family, arg_tensors, ints)
            except Exception as e:  # noqa: BLE001 - tracing with symbols failed: the default compiles without
                if not auto:
                    raise
                cs.last_generalization = f"not generalized: tracing with symbols failed ({type(e).__name__}: {e})"
        elif chosen is not None:
            with fuse.sizes_fitted():
                entry, run = _compile_sampled(jf, cd, cs, args, kwargs, chosen, ints, auto)
    if entry is None:
        attempt.rewind()
        entry = run = jf._add(compile_entry(cd, cs, args, kwargs, keep_parts=True))
    # older samples keep no tensors (only the newest builds a prologue)
    for s in family[-2:]:
        if s.entry.parts is not None:
            s.entry.parts.prologue = None
    remember(jf, entry, key, ints)
    return run


def seen_structure(jf, args, kwargs):
    """Whether a call of this structure was compiled (or loaded) before in this process."""
    key = _call_key(args, kwargs)[0]
    return any(s.key == key for s in jf._samples)


def remember(jf, entry, key=None, ints=None, args=None, kwargs=None):
    """The entry compiled (or read from the program cache on disk) for a call: its sizes, for
    the calls after it to compare theirs with."""
    if key is None:
        key, _, ints = _call_key(args, kwargs)
    arg_specs, kw_specs, arg_meta, state = entry.description
    jf._samples.append(Sample(key, [m[0] for m in arg_meta] + [m[0] for _, m in state[2]] + [(v,) for _, v in ints],
                              (state[0], [e for e, _ in state[2]]), entry))
    del jf._samples[:-KEEP]


def _choose_symbols(jf, cd, key, family, args, kwargs, arg_tensors, ints, auto):
    """(the call's structure, the tensors whose sizes may be symbols: its tensor arguments, then
    where it reads state that changed the tensors it reads from state; per tensor a group key or
    None per dim, per int argument a group key or None, why, whether sizes the function refuses
    to change alone are made constants (at the first call of a structure)) for a call to compile
    with samples (the group keys of equal value are one symbol), THREE_CALLS for one to fit from
    three real calls (_compile_fitted), or None."""
    failed = jf._sample_failures.get(key, 0)  # (each costs up to four compiles: a few tries per structure)
    if failed >= 3:
        return None if auto else THREE_CALLS
    fixed = set()  # (the module's own sizes)
    if cd.module is not None:
        for t in itertools.chain(cd.module.parameters(), cd.module.buffers()):
            fixed.update(t.shape)
    read = None
    if jf._samples and not failed and carried.holds_object(key):
        read = carried.read_state(cd, args, kwargs, jf._samples[-1].reads)  # (a cache the call before filled)
    fresh = read is not None and any(read[1])
    if not family:
        if auto and not fresh:
            return None
        arg_dims = [tuple(n if n >= 2 and n not in fixed and not auto else None for n in t.shape)
                    for t in arg_tensors]
        int_groups = [v if v >= 2 and v not in fixed and not auto else None for _, v in ints]
        why = "automatic dynamic: the first call of its structure" if auto else \
            "symbolic values: the first call's sizes and int arguments"
    else:
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
        arg_dims, int_groups = groups[:len(arg_tensors)], [g[0] for g in groups[len(tensors):]]
        why = "the sizes that changed since the call before"
        why = f"automatic dynamic: {why}" if auto else f"symbolic values: {why}"
        if any(any(g) for g in groups[len(arg_tensors):len(tensors)]):
            # a tensor read from state changed its size (a KV cache object's): sampled with it, once
            if failed:
                return THREE_CALLS
            return key, tensors, groups[:len(tensors)], int_groups, why, False
        if not fresh and not any(any(g) for g in groups):
            return None
    if not fresh:
        return key, arg_tensors, arg_dims, int_groups, why, not family
    state, is_fresh = read
    tensors = arg_tensors + state
    dims = arg_dims + [tuple(n if new and n >= 2 and n not in fixed else None for n in t.shape)
                       for t, new in zip(state, is_fresh)]
    # (those the function refuses to change alone, a head count or size, stay constants)
    shape_names, int_names = _symbol_names(dims, int_groups, ints)
    real = {n: v for t, d in zip(tensors, shape_names) for n, v in zip(d, t.shape) if n}
    real.update({int_names[w]: v for w, v in ints if w in int_names})
    refused = {n for d in shape_names[len(arg_tensors):] for n in d if n and not _traces_with(
        cd, args, kwargs, tensors, shape_names, int_names, {**real, n: real[n] + 1})}
    dims = [tuple(None if n in refused else g for n, g in zip(names, d)) for names, d in zip(shape_names, dims)]
    why += "; the sizes of the tensors it reads from state that the call before did not (a cache it filled)"
    return key, tensors, dims, int_groups, why, True


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
    with changes_undone(undo=False) as attempt:
        try:  # one compile with the symbols (runtime/symbolic_program.py)
            with size_choices.recording():  # (a program for all sizes: ops choosing by size choose per call)
                entry = compile_entry(cd, cs, args, kwargs, sym_shapes={**sym_shapes, **int_names},
                                      symbolic_program=True)
        except Exception as e:  # noqa: BLE001 - NotSymbolic, or a pass refused the symbolic sizes: fitted then
            attempt.rewind()
            why_not = str(e) if isinstance(e, NotSymbolic) else f"{type(e).__name__}: {e}"
            cs.last_symbolic_compile = f"fitted from three compiles (one compile with symbolic sizes refused: {why_not})"
        else:
            cs.last_generalization = f"generalized ({why}): {_describe(entry, shape_names, int_names, ints)}"
            cs.last_symbolic_compile = "compiled once with symbolic sizes"
            cs.generalizations.append(cs.last_generalization)
            return entry, jf._add(entry)
    try:
        with size_choices.recording() as choices:  # (the samples replay them: core/size_choices.py)
            entry = compile_entry(cd, cs, args, kwargs, sym_shapes={**sym_shapes, **int_names}, keep_parts=True)
        entry.parts.size_choices = choices
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


def _describe(entry, shape_names, int_names, ints):
    """`_sym0: tensor argument 0 dim 0 = ...; ...`: what each symbol stands for."""
    state = entry.description[3][2]
    where = _input_names(len(entry.description[2]), [e for e, _ in state], [w for w, _ in ints])
    found = {}
    for i, names in enumerate(shape_names):
        for k, n in enumerate(names):
            if n:
                found.setdefault(n, []).append(f"{where(i)} dim {k}")
    for j, (w, _) in enumerate(ints):
        if w in int_names:
            found.setdefault(int_names[w], []).append(where(len(entry.description[2]) + len(state) + j))
    return "; ".join(f"{n}: {' = '.join(w)}" for n, w in found.items())


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
    if cs.last_state_change:  # (traced again, it would make the change again, from another start)
        raise _NoFit(f"the function changes state while tracing ({cs.last_state_change})")
    read = parts.prologue[2]
    if parts.read_ids[:len(tensors)] != [id(t) for t in tensors]:
        raise _NoFit("the call read its tensor arguments in another order")
    real = {}
    for t, d in zip(read, shape_names):
        real.update({n: v for n, v in zip(d, t.shape) if n})
    real.update({n: v for (w, v), n in ((w_v, int_names.get(w_v[0])) for w_v in ints) if n})
    if first:  # sizes equal to one of a tensor read from state (a global weight's) are its: constants
        n_args = len(entry.description[2])
        state_dims = {n for i, t in enumerate(read[n_args:], n_args)
                      if i >= len(shape_names) or not any(shape_names[i]) for n in t.shape}
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
        s_args, s_kwargs, swap = dynamic.stand_in_call(args, kwargs, tensors, shapes,
                                                       {w: values[n] for w, n in int_names.items()})
        with changes_undone():
            _acquire(cd, s_args, s_kwargs, stand_ins=swap)
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
    near = False  # (after programs that differ: samples near the call's sizes, where passes decide alike)
    for k, (guards, uneven) in enumerate(attempts):
        try:
            # (sizes at which no size the trace computed is taken for another term; after 8 tries
            # at multiples of the call's sizes, sizes near them: at multiples of a CNN's input a
            # strided conv's output rows stay twice the next one's; with three strided stages
            # few random pairs tell every term apart)
            for seed in range(40):
                pair = dynamic.choose_values(list(real), real, guards, exprs, uneven=uneven, seed=seed,
                                             near=near or seed >= 8)
                if _telling(pair, real, guards, parts):
                    break
            samples = _compile_samples(cd, cs, args, kwargs, tensors, shape_names, int_names, parts, pair)
            shapes3 = [[tuple(t.shape) for t in x.parts.prologue[2]] + [(v,) for v in vals] for x, vals in zip(
                samples + [entry], [[p[int_names[w]] if w in int_names else v for w, v in ints] for p in pair]
                + [[v for _, v in ints]])]
            plan = Plan(shapes3, _input_names(len(entry.description[2]), [e for e, _ in entry.description[3][2]],
                                              [w for w, _ in ints]))
            plan.ints = {w: d[0] for (w, _), d in zip(ints, plan.dims[len(read):]) if d[0]}
            if plan.dims[:len(tensors)] != shape_names or plan.ints != int_names:
                raise _NoFit("the samples at other sizes changed other sizes than the symbols")
            parts.guards = guards
            return _generalize(samples + [entry], plan), plan
        except (_NoFit, dynamic.NoSample) as e:
            if not near and isinstance(e, _NoFit) and " programs of the three calls " in str(e):
                near = True  # (fusion decided by size: a region fused at the call's sizes, not at twice them)
                attempts.append((guards, uneven))
                continue
            if k == len(attempts) - 1:
                raise


def _telling(pair, real, guards, parts):
    """Whether the symbols and the sizes the trace computed are told apart at the sizes of pair
    and the call: each that differs between them is the only term with those three values (else a
    literal from it is ambiguous and the fit refuses it: `n % 5` and `n - 5` at n = 7, 8, 9)."""
    plan = types.SimpleNamespace(names=list(real), values=[pair[0], pair[1], real])
    fit = _Fitter(plan, parts.float_exprs, parts.int_exprs, guards)
    for e in list(real) + list(parts.int_exprs):  # (a symbol too: H even in all three is twice H // 2)
        try:
            values = [dynamic.evaluate(e, p) for p in plan.values]
        except Exception:  # noqa: BLE001 - undefined at one of the sizes
            continue
        try:
            if len(set(values)) > 1:
                fit.expr(values)
        except _NoFit:
            return False
    return True


def _compile_samples(cd, cs, args, kwargs, tensors, shape_names, int_names, parts, pair):
    """The call compiled at the sizes of each assignment in pair (stand-in inputs); cs as it was
    but for the time spent."""
    saved = dict(vars(cs))
    t0 = time.perf_counter()
    samples = []
    try:
        backward_choices = _backward_choices(parts)
        for values in pair:
            shapes = [tuple(values[n] if n else v for n, v in zip(d, t.shape)) for t, d in zip(tensors, shape_names)]
            s_args, s_kwargs, swap = dynamic.stand_in_call(args, kwargs, tensors, shapes,
                                                           {w: values[n] for w, n in int_names.items()})
            try:  # (tensors read from state too: stand-ins read in their place)
                with size_choices.recording(replay=parts.size_choices), changes_undone():
                    sample = compile_entry(cd, cs, s_args, s_kwargs, keep_parts=True, stand_ins=swap)
                with size_choices.recording(replay=backward_choices):
                    _backward_of(sample.parts)
            except Exception as e:  # noqa: BLE001 - the function refuses the other sizes: per size
                raise _SampleFailed(f"the call at other sizes ({values}) failed to compile: {type(e).__name__}: {e}",
                                    values) from None
            if cs.last_splits:
                raise _NoFit("the trace at other sizes read tensor values")
            if cs.last_state_change:
                raise _NoFit(f"the trace at other sizes changes state ({cs.last_state_change})")
            real_ids = {id(v): k for k, v in swap.items()}
            if [real_ids.get(i, i) for i in sample.parts.read_ids] != parts.read_ids:
                raise _NoFit("the call at other sizes read other tensors from state")
            samples.append(sample)
    finally:
        spent = time.perf_counter() - t0
        vars(cs).update(saved)
        cs.last_compile_time += spent
        cs.last_stage_times = {**cs.last_stage_times, "samples at other sizes": spent}
    return samples


def _backward_of(parts):
    """The backward for all cotangents of a training program (compiled here if not yet), or None."""
    program = parts.constants.get("_program")
    return getattr(program, "backward_source", None) if isinstance(program, AutogradProgram) else None


def _backward_choices(parts):
    """The size choices of the call's backward (compiled here, where not yet, to record them;
    none for a program without one), kept in parts for a later attempt's samples."""
    if parts.backward_size_choices is None:
        with size_choices.recording() as choices:
            _backward_of(parts)
        parts.backward_size_choices = choices
    return parts.backward_size_choices


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
        if cs.last_state_change:  # (the calls' literals may come from the state, not the sizes)
            raise _NoFit(f"the function changes state while tracing ({cs.last_state_change})")
        general = _generalize([s.entry for s in older] + [entry], plan)
        jf._add(general)
        cs.last_generalization = f"generalized (three calls): {plan.describe()}"
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
