"""Compilation on a cache miss: the function interpreted on proxies (acquisition), the trace's MLIR through
the passes to a Python program with its prologue (a CacheEntry), its autograd program; what an entry keeps
for cache="symbolic values" (Parts, runtime/symbolic.py)."""
import contextlib
from dataclasses import dataclass
import inspect
import time

import torch

from thunder.core import logs, ndarray, symbols, trace as tracing
from thunder.core.numbers import NumberProxy
from thunder.core.proxies import TensorProxy
from thunder.dialects.emit import emit, find_func
from thunder.dialects.mlir import ir, module_of
from thunder.lowering.passes import build_pass_manager, pass_name, pass_options
from thunder.ops import onednn, packed_linear
from thunder.runtime import calls, guards, inner_autograd, regions, same_trace, structure, tiered
from thunder.runtime import symbolic_program as symbolic_program_
from thunder.runtime.codegen import compile_source, python_source
from thunder.runtime.lookup import _make_lookup, _on_load, _on_store
from thunder.runtime.options import CACHE_OPTIONS, DEFAULT_PASSES, CacheEntry
from thunder.runtime.prologue import Prologue
from thunder.runtime.reads import Reader
from thunder.runtime.state import Constant, StateTracker, changes_undone
from thunder.runtime.traces import Trace
from thunder.dialects import sizes
from thunder.interpreter import interpret
from thunder.lowering import decompose_reuse, detach_cost
from thunder.lowering.autograd import autograd_module, needing_grad, REQUIRES_GRAD
from thunder.lowering.fuse import fuse_module, fusion_callees
from thunder.lowering.remat import remat_module
from thunder.runtime.autograd import AutogradProgram
from thunder.runtime.grad_free_rewrites import drop_no_grad_updates, rewrite_grad_free
from thunder.runtime.structure import rebuild_source


def _flatten_call(args, kwargs):
    """(specs of the arguments, (name, spec) of the keyword arguments, the tensors in them), as
    the prologue sees a call."""
    inputs = structure.Inputs()
    with tracing.not_tracing():
        specs = [structure.flatten_inputs(a, "x", inputs, strict=False)[0] for a in args]
        kspecs = [(k, structure.flatten_inputs(v, "x", inputs, strict=False)[0]) for k, v in kwargs.items()]
    return specs, kspecs, list(inputs.tensors)


def _meta(t, strides=True):
    """What the prologue checks of a tensor (its strides only where the trace depends on them)."""
    return (tuple(t.shape), t.dtype, t.device, t.requires_grad, tuple(t.stride()) if strides else None)


def _param_names(fn, args, kwargs):
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [f"arg{i}" for i in range(len(args))]
    names = []
    for name, value in bound.arguments.items():
        param = bound.signature.parameters[name]
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            names += [f"{name}_{i}" for i in range(len(value))]
        elif param.kind is not inspect.Parameter.VAR_KEYWORD:
            names.append(name)
    return names[:len(args)] + [f"arg{i}" for i in range(len(names), len(args))]


@dataclass
class _Acquired:
    """What one interpretation of the function produced."""
    ctx: object
    inputs: structure.Inputs
    arg_specs: list
    kw_specs: list
    state: StateTracker
    ambient: dict
    result: object
    splits: list  # the values read from tensors (runtime/reads.py Split)


def _acquire(cd, args, kwargs, shared=None, sym_shapes=None, stand_ins=None):
    """Interprets cd.fn on proxies of the inputs; shared: see structure.Inputs; sym_shapes: the
    symbolic dims of the input tensors (runtime/symbolic.py); stand_ins: {id(tensor): tensor read
    in its place} for tensors read from state (a sample at other sizes, runtime/generalize.py)."""
    ctx = tracing.TraceCtx()
    if sym_shapes:
        ctx.sym_shapes, ctx.sym_guards = sym_shapes, {}
    ctx.track_grad_mode = True
    ctx.track_strides = True
    inputs = structure.Inputs(shared, numbers=cd.cache_option == CACHE_OPTIONS.SYMBOLIC_VALUES)
    names = _param_names(cd.module.forward if cd.module is not None else cd.fn, args, kwargs)
    with tracing.tracing(ctx):
        arg_specs, pargs = [], []
        sym_ints = sym_shapes or {}  # int arguments that are symbols: ("arg", i) / ("kwarg", k) -> name
        for i, (a, name) in enumerate(zip(args, names)):
            s, p = structure.flatten_inputs(a, name, inputs, cd.strict)
            arg_specs.append(s)
            pargs.append(symbols.SymInt(a, sym_ints[("arg", i)]) if ("arg", i) in sym_ints else p)
        kw_specs, pkwargs = [], {}
        for k, v in kwargs.items():
            s, p = structure.flatten_inputs(v, k, inputs, cd.strict)
            kw_specs.append((k, s))
            pkwargs[k] = symbols.SymInt(v, sym_ints[("kwarg", k)]) if ("kwarg", k) in sym_ints else p
        state = StateTracker(cd.module, inputs, strict=cd.strict)
        state.stand_ins = stand_ins or {}
        state.arg_paths = structure.tensor_paths(arg_specs, kw_specs)
        ctx.read_grad = state.read_grad
        ctx.array_input, ctx.made_array = state.array_input, state.made_array
        state.argument_arrays = {id(a) for a in _leaves((args, kwargs)) if ndarray.is_array(a)}
        ctx.object_id = state.object_id
        ctx.write_grad = state.write_grad
        ctx.autograd = inner_autograd.InnerAutograd(state)
        state.pin_root_function(cd.fn)
        for spec in structure.iter_specs(arg_specs + [s for _, s in kw_specs]):
            if spec[0] == "object":  # checked by identity: reached through its constant
                state.pin(spec[1])
        ambient = guards.ambient_snapshot()
        for dev in sorted({t.device.type for t in inputs.tensors} & {"cpu", "cuda"}):
            tracing.consult(f"autocast_{dev}")  # an autocast region around the call: its casts are traced
            if ambient[f"autocast_{dev}"]:
                tracing.consult(f"autocast_{dev}_dtype")
        reader = Reader(ctx, inputs, cd.sharp_edges, cd.warned_sharp_edges)
        try:
            result = interpret(cd.fn, pargs, pkwargs, lookup=_make_lookup(cd), on_load=_on_load(state),
                               record=cd.debug_options.record_interpreter_history,
                               on_store=_on_store(cd, state), on_call=state.called, on_create=state.created,
                               on_key=state.key_of, on_is=state.same)
        finally:
            state.restore()
            ctx.reader = ctx.live = None  # (the values read are not needed any more)
        if any(x.requires_grad for x in inputs.tensors):  # (arguments and tensors read from state)
            tracing.consult("grad_enabled")  # the program differs with grad mode (autograd or not)
        # parameters and buffers that native code handed to the result (tuple(module.buffers()))
        # become inputs here, so the result returns them as they are
        structure.flatten_outputs(result.value, [], inputs, resolve=state.module_tensor)
        # (an input updated in place has been rebound to its new value: use its input name)
        ctx.inputs = [tracing.Ref(p.input_name or p.name, tuple(p.shape), p.dtype, p.device) for p, _ in inputs.params()]
        ctx.inputs += [tracing.ref(p) for p, _ in inputs.numbers]  # (float arguments: runtime numbers)
    return _Acquired(ctx, inputs, arg_specs, kw_specs, state, ambient, result, reader.splits)


def _leaves(value):
    """The values inside tuples, lists and dict values (the call's arguments)."""
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    else:
        yield value


def _differentiable(ctx, inputs, out_refs):
    """Whether a result (or a written tensor) depends on an input that requires grad through
    differentiable ops (not cut by a detach: no_grad regions, gradients computed inside)."""
    if not out_refs:
        return False
    seeds = {p.input_name or p.name for p in inputs.proxies if p.requires_grad}
    seeds |= {p.input_name or p.name for p, t, _ in inputs.storages if t.requires_grad}
    needs = needing_grad(ctx.symbols, seeds)
    return any(r.name in needs for r in out_refs)


def _no_made_leaf_out(ctx, out_refs, writes):
    """Refuse a tensor made a leaf by requires_grad_() inside that leaves the call (returned or
    stored): eager's is a leaf whose .grad its backward fills, the program's would not be."""
    out = {r.name for r in out_refs} | {getattr(v, "name", None) for _, _, v in writes}
    for p, line in ctx.made_leaves.values():
        if p.requires_grad and p.name in out:
            raise NotImplementedError(
                f"thunder: a tensor made a leaf with requires_grad_(){line} leaves the jitted function (returned "
                "or stored): eager's backward would fill its .grad, the compiled program's does not. Workaround: "
                "call requires_grad_() on it outside the function")


def compile_entry(cd, cs, args, kwargs, fusion=True, sym_shapes=None, keep_parts=False,
                  stand_ins=None, symbolic_program=False) -> CacheEntry:
    """The cache entry for this call. fusion=False: no thunder-fuse (see ThunderFunction._miss);
    sym_shapes, stand_ins: see _acquire; keep_parts: keep what runtime/symbolic.py generalizes (always
    under cache="symbolic values"). symbolic_program: with sym_shapes, the passes run on the trace
    with symbolic sizes and the entry holds for all sizes its guards allow (symbolic_program.py;
    NotSymbolic where it cannot be made so)."""
    times = {}
    t_start = t = time.perf_counter()
    with changes_undone(undo=False) as journal:
        acq = _acquire(cd, args, kwargs, sym_shapes=sym_shapes, stand_ins=stand_ins)
    mutated = [i for i, p in enumerate(acq.inputs.proxies) if p.input_name in acq.ctx.mutated]
    shared = structure.alias_groups(acq.inputs.tensors, mutated) if mutated else {}
    if shared:
        # inputs that share memory, one updated in place: traced again with them as views of their
        # storage, from the state the first trace started from
        first = acq.inputs.tensors
        journal.rewind()
        acq = _acquire(cd, args, kwargs, shared, sym_shapes, stand_ins)
        if [id(x) for x in acq.inputs.tensors] != [id(x) for x in first]:
            raise NotImplementedError("thunder: the function read other tensors when traced again for its inputs "
                                      "that share memory. Workaround: pass a clone of one of them.")
    ctx, inputs, state, ambient = acq.ctx, acq.inputs, acq.state, acq.ambient
    arg_specs, kw_specs, result = acq.arg_specs, acq.kw_specs, acq.result
    cs.last_splits = acq.splits
    cs.last_state_change = acq.state.changed_state
    logs.splits(cd.fn, acq.splits)
    calls.acquired(acq.ctx)
    record = cd.debug_options.record_interpreter_history
    cs.last_interpreted_instructions = list(result.instructions) if record else None
    cs.last_interpreter_log = list(result.log) if record else None
    out_refs = []
    with tracing.tracing(ctx):  # (results' layouts: tracing.strides_decide)
        out_spec = structure.flatten_outputs(result.value, out_refs, inputs, resolve=state.module_tensor)
    state.array_guards()
    writes = state.finish_writes()
    _no_made_leaf_out(ctx, out_refs, writes)
    tensor_writes = [v for _, _, v in writes if not isinstance(v, (bool, int, float, str, type(None), Constant))]
    if tensor_writes:  # written tensors are returned after the output, for the prologue to store
        out_spec = ("tuple", [out_spec] + [structure.flatten_outputs(v, out_refs, inputs) for v in tensor_writes])
    times["interpretation"] = time.perf_counter() - t

    t = time.perf_counter()
    params = inputs.params()
    tensors, proxies = [t for _, t in params], [p for p, _ in params]
    index = {p.input_name: i for i, p in enumerate(proxies)}
    mutated = [(index[name], tracing.ref(p)) for name, p in ctx.mutated.items()]
    symbolic_trace = _symbolic_trace(ctx, out_refs, mutated, out_spec) if ctx.sym_shapes else None
    if symbolic_program:  # (the passes run on the trace with symbolic sizes)
        module = symbolic_program_.module_of(symbolic_trace, cs, leaks(result.value, writes), inputs)
        traces = [symbolic_trace]
    else:
        module = emit(ctx, out_refs, mutated=mutated)
        traces = [Trace("interpreter (acquisition)", module, output_spec=out_spec)]
    times["mlir emission"] = time.perf_counter() - t

    t = time.perf_counter()
    grad_mode = torch.is_grad_enabled()
    # a tensor created inside with requires_grad=True is a leaf of torch's own autograd graph
    # (its .grad the user may read): the recorded torch calls then run as they are, recording
    # history (thunder-autograd differentiates for the inputs only; a kernel records nothing)
    torch_autograd = ctx.grad_leaf and not cd.disable_torch_autograd
    inputs_require_grad = any(x.requires_grad for x in tensors)
    # whether something returned or written requires grad (eager's flags as recorded: a result
    # computed from a view made under no_grad requires grad and sends none; or the trace's
    # structure: the values torch.func's VJPs record) or an input that requires grad was updated
    # in place with grad mode on; a training step with its backward and optimizer inside has none
    # (only asked where inputs require grad: a walk over the trace)
    differentiable = inputs_require_grad and not torch_autograd and (
        ctx.grad_mutated or any(r.name in ctx.grad_names for r in out_refs) or _differentiable(ctx, inputs, out_refs))
    # autograd where an op ran with grad mode on (outside, or under enable_grad inside the function)
    # on inputs that require grad, and something differentiable is returned
    training = ctx.grad_ops and not cd.disable_torch_autograd and bool(out_refs) and differentiable
    fusion = _fusion_policy(cd) if fusion and not torch_autograd else None
    # a miss that traced the program of an earlier compile again (a guard on Python state that
    # decided nothing about the tensors): that compile's program, kernels and autograd program
    kept = None
    if not (sym_shapes or stand_ins or ctx.sym_shapes or shared or inputs.storages):
        kept = (same_trace.key(fusion, grad_mode, ctx, tensors, state.reads, ambient), out_spec, traces[0])
    reused = same_trace.find(cd.compiled, *kept) if kept is not None and cd.compiled else None
    if reused is not None:
        source, computation, constants, traces, backward_traces = reused
        times["reused"] = time.perf_counter() - t
    else:
        for element in (*DEFAULT_PASSES, *cd.transforms):
            if not callable(element) and pass_name(element) == "thunder-fuse":
                continue  # run below (inference) or after thunder-autograd and thunder-remat (training)
            if callable(element):
                with module.context:
                    element(module)
                producer = getattr(element, "__name__", repr(element))
            else:
                with module.context:
                    pm = build_pass_manager(f"builtin.module({element})")
                    if training and element in DEFAULT_PASSES:
                        # (its result is verified with the rest after thunder-remat, _cleanup: each op
                        # it keeps or makes is checked there once instead of here too, as after
                        # thunder-autograd; DebugOptions(check_traces=True) verifies after each pass)
                        pm.enable_verifier(False)
                    pm.run(module.operation)
                producer = pass_name(element)
            if cd.debug_options.check_traces:
                _verify(module, producer)
            traces.append(Trace(producer, module, output_spec=out_spec))
        # (no autograd history either where no tensor requires grad, or where every op ran with grad
        # mode off, an optimizer's step, or nothing differentiable is returned: the program then runs
        # with grad mode off)
        no_grad_ops = grad_mode and inputs_require_grad and not torch_autograd and (
            not ctx.requires_grad and not ctx.grad_ops or not differentiable)
        grad_free = cd.disable_torch_autograd or not grad_mode or no_grad_ops or not (
            ctx.requires_grad or inputs_require_grad)
        region_texts = {}
        if grad_free and not training:
            drop_no_grad_updates(module)
        with detach_cost.recording_history(not training and not grad_free):  # (its detaches run)
            if fusion is not None and not training and _fuse(module, fusion, region_texts):
                traces.append(Trace("thunder-fuse", module, output_spec=out_spec))
        times["passes"] = time.perf_counter() - t

        t = time.perf_counter()
        constants = {}
        backward_traces = []
        if training:
            numbers, number_proxies = [v for _, v in inputs.numbers], [p for p, _ in inputs.numbers]
            # (runtime numbers: the program's parameters after the tensors)
            source, computation, backward_traces = _autograd_program(cs, module, tensors + numbers,
                                                                     proxies + number_proxies, out_spec, traces,
                                                                     constants, fusion=fusion, grad_mode=grad_mode,
                                                                     decompose=_requested(cd, "thunder-decompose"),
                                                                     grad_outputs=[i for i, r in enumerate(out_refs)
                                                                                   if r.name in ctx.grad_names],
                                                                     int_symbols=symbolic_program_.int_symbols(
                                                                         ctx.sym_shapes) if symbolic_program
                                                                     else None)
            times["autograd"] = time.perf_counter() - t
            t = time.perf_counter()
        else:
            if grad_free:  # (in-place updates of inputs, casts left to autocast)
                rewrite_grad_free(module)
            # (a program that updates parameters in place, an optimizer's step: packing their weights
            # would copy and pack them again at every call, as in a training step's forward)
            updates_parameters = any(tensors[i].requires_grad for i, _ in mutated)
            with packed_linear.training_forward() if updates_parameters else contextlib.nullcontext():
                source = python_source(module, output_spec=out_spec, constants=constants,
                                       header="produced by: torch executor (execution trace)",
                                       no_grad_copies={i for i, x in enumerate(tensors) if x.requires_grad},
                                       grad_free=grad_free, region_texts=region_texts,
                                       size_checks=not symbolic_program)  # (the prologue checks them)
            computation = compile_source(source, constants=tiered.tier(constants))
            if cd.disable_torch_autograd or no_grad_ops and not training:
                computation = torch.no_grad()(computation)
            traces.append(Trace("torch executor (execution trace)", module, python=source, fn=computation))
        if kept is not None:
            same_trace.remember(cd.compiled, *kept, (source, computation, constants, traces, backward_traces))
    if not training and not grad_mode and not cd.disable_torch_autograd and (
            onednn.used_in(source) or ctx.requires_grad):
        # its grad-free code (oneDNN calls, no detach of what a tensor created with
        # requires_grad=True computed) is right with grad mode off only
        ctx.consulted.add("grad_enabled")
    entry_guards = list(state.guards.values()) + guards.ambient_guards(ctx.consulted, ambient)
    read = inputs.tensors
    strided = [i for i, p in enumerate(inputs.proxies) if p.input_name in ctx.stride_dependent]
    mutated_reads = {i for i, p in enumerate(inputs.proxies) if p.input_name in ctx.mutated}
    mutated_reads |= {first for p, _, first in inputs.storages if p.input_name in ctx.mutated}
    prologue_args = dict(guards=entry_guards, reads=state.reads, consts=state.consts,
                         writes=writes, check=cd.cache_option != "same input", strided=strided,
                         shared=inputs.shared, storages=[first for _, _, first in inputs.storages],
                         mutated=sorted(mutated_reads))
    if symbolic_program:
        computation, program_symbols = symbolic_program_.computation_for_prologue(
            computation, module, read, ctx.sym_shapes, prologue_args,
            getattr(constants.get("_program"), "size_guards", ()))
        prologue = Prologue(arg_specs, kw_specs, read, **prologue_args, symbols=program_symbols)
    else:
        prologue = Prologue(arg_specs, kw_specs, read, **prologue_args)
    run, first_run = prologue.compile(computation)
    times["codegen"] = time.perf_counter() - t
    cs.last_stage_times = times
    cs.last_compile_time = time.perf_counter() - t_start
    prologue_trace = Trace("prologue", python=prologue.source, fn_name="entry", fn=run)
    n_arg_tensors = len(read) - len(state.reads)
    strided = set(strided)
    description = (arg_specs, kw_specs, [_meta(x, i in strided) for i, x in enumerate(read[:n_arg_tensors])],
                   (state.consts, entry_guards, [(expr, _meta(read[i], i in strided)) for expr, i in state.reads]))
    entry = CacheEntry(run, traces, [prologue_trace], description, backward_traces, first_run,
                       program=constants.get("_program"))
    if not ctx.sym_shapes:  # (programs with symbolic sizes are not persisted: runtime/persist.py)
        entry.persist = dict(source=source, constants=constants, prologue=prologue, writes=writes,
                             guards=entry_guards, interpreted=list(state.interpreted.values()),
                             trace=traces[-1])
    if (keep_parts or cd.cache_option == CACHE_OPTIONS.SYMBOLIC_VALUES) and not symbolic_program:
        metas = [TensorMeta(x) for x in read]
        entry.parts = Parts(source, constants, (arg_specs, kw_specs, metas, prologue_args),
                                     ctx.sym_guards, leaks(result.value, writes), [id(x) for x in read],
                                     symbolic_trace, float_exprs(ctx.symbols) if ctx.sym_shapes else (),
                                     float_exprs(ctx.symbols, symbols.SymInt) if ctx.sym_shapes else ())
    return entry


def _symbolic_trace(ctx, out_refs, mutated, out_spec):
    """The trace recorded with symbolic sizes (cache="symbolic values"), emitted with them: `?`
    dims and sizes as SSA values (dialects/sizes.py), checked by the verifier; or a string saying
    why it could not be (a size where the dialect holds no SSA value, a meta function that made
    a size concrete)."""
    int_symbols = [name for key, name in ctx.sym_shapes.items() if isinstance(key, tuple)]
    names = symbolic_program_.symbol_names(ctx.sym_shapes)
    try:
        module = emit(ctx, out_refs, mutated=mutated, int_symbols=int_symbols)
        with module.context:
            # (it holds where the prologue's checks do: symbols >= 2 and the decisions recorded)
            sizes.set_guards(find_func(module.operation, "computation"),
                             [f"({n} >= 2)" for n in names] + sizes.conditions(ctx.sym_guards))
            module.operation.verify()
    except (sizes.Inexpressible, ir.MLIRError) as e:  # (what MLIR cannot hold, or does not verify)
        return f"the trace with symbolic sizes is not expressible in MLIR: {e}"
    except Exception as e:  # noqa: BLE001 - a trace to show, never a reason to fail the call
        return f"the trace with symbolic sizes could not be emitted: {type(e).__name__}: {e}"
    return Trace("interpreter (acquisition, symbolic sizes)", module, output_spec=out_spec)


def _verify(module, producer):
    """DebugOptions(check_traces=True): MLIR's verifier (the ops' meta functions on their operand
    types) on the trace a pass left."""
    with module.context:
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            raise RuntimeError(f"thunder: the trace after {producer} does not verify: {e}") from None


def _requested(cd, name):
    return any(not callable(e) and pass_name(e) == name for e in cd.transforms)


def _fusion_policy(cd):
    """(policy, executors) of thunder-fuse for this function, None when nothing fuses: a
    thunder-fuse in transforms (its options; default "auto" and linalg,cuda), else cd.fusion and
    the fusion executors among cd.executors."""
    for e in cd.transforms:
        if not callable(e) and pass_name(e) == "thunder-fuse":
            options = pass_options(e)
            return options.get("policy", "auto"), options.get("executors", "linalg,cuda")
    fusing = tuple(n for n in (getattr(e, "name", e) for e in cd.executors) if n != "torch")
    return (cd.fusion, fusing) if fusing else None


def _fuse(module, fusion, texts):
    """thunder-fuse with (policy, executors) on the module; whether it outlined a region. texts
    (a dict) gets the kernel texts it knows (fuse_module's texts), for the program generated next
    (python_source's region_texts: not printed again)."""
    with module.context, decompose_reuse.shared():
        fuse_module(module.operation, *fusion, texts=texts)
        callees = fusion_callees(module.operation)
        logs.fusion_regions(regions.summary(callees))
    return bool(callees)


def _autograd_program(cs, module, tensors, proxies, out_spec, traces, constants, fusion=None, decompose=False,
                      grad_mode=True, grad_outputs=(), int_symbols=None):
    """thunder-autograd on the trace (tensors, proxies: its parameters' values and proxies, runtime
    numbers after the tensors); returns (source, computation, backward traces); constants
    (a dict) gets the names the computation's source refers to.
    grad_mode: the caller's (off: torch.enable_grad() inside the function made the graph).
    fusion: thunder-fuse's policy for @forward and @backward after thunder-remat (None: no
    fusion); decompose: their ltorch ops into prims first (thunder-decompose in transforms).
    grad_outputs: the indices of the results that require grad in eager."""
    with module.context, decompose_reuse.shared():
        # (cloned: printing and parsing it again verified every op once more, as the compile before had)
        m = module_of(module.body.operations, module.operation.location, module.operation.attributes)
        comp = m.body.operations[0]
        # (with those it has: a trace with symbolic sizes' thunder.dims)
        old = list(ir.ArrayAttr(comp.attributes["arg_attrs"])) if "arg_attrs" in comp.attributes else []
        entries = []
        for i in range(len(comp.regions[0].blocks[0].arguments)):
            d = {a.name: a.attr for a in ir.DictAttr(old[i])} if i < len(old) else {}
            if i < len(tensors) and isinstance(tensors[i], torch.Tensor) and tensors[i].requires_grad:
                d[REQUIRES_GRAD] = ir.UnitAttr.get()
            entries.append(ir.DictAttr.get(d))
        comp.attributes["arg_attrs"] = ir.ArrayAttr.get(entries)
        split = autograd_module(m.operation)
        _cleanup(m, verify=False)  # (verified after thunder-remat: every op left, once)
        traces.append(Trace("thunder-autograd", m, fn_name="forward"))
        cs.last_saved_bytes = remat_module(m.operation, split.lifted_forward)
        _cleanup(m)
        if decompose:
            build_pass_manager("builtin.module(thunder-decompose,cse,canonicalize)").run(m.operation)
    # the backward is compiled on the first backward call, per set of cotangents present
    # (runtime/autograd.py backward_for): here only the forward is fused and generated
    program = AutogradProgram(m, len(tensors) + len(int_symbols or ()), fusion=fusion)
    if int_symbols is not None:  # (a program for all sizes: its backward takes the symbols its inputs do not give)
        program.symbolic = symbolic_program_.BackwardSymbols(m)
    program.grad_outputs = frozenset(grad_outputs)
    backward = [Trace.from_mlir("thunder-autograd (backward)", program.backward_mlir, "backward",
                                codegen=dict(header="produced by: thunder-autograd (backward)", grad_free=True))]
    with m.context:
        find_func(m.operation, "backward").erase()
    lazy = fusion is not None  # (thunder-fuse replaces the forward: its Python printed when asked)
    if not lazy:
        program.set_forward(m, "thunder-autograd")
    traces.append(_program_trace("thunder-remat (forward)", m, program, "forward", lazy))
    # (after AutogradProgram, which lifts @forward: func.call has no Python-level form)
    if fusion is not None:
        texts = {}
        if _fuse(m, fusion, texts):
            program.set_forward(m, "thunder-fuse", constants={}, tier=tiered.tier, region_texts=texts)
            traces.append(Trace("thunder-fuse (forward)", m, python=program.forward_source, fn_name="forward",
                                fn=program.forward))
            program.first_fusion = _next_fusion(m)
        else:
            program.set_forward(m, "thunder-autograd")
    program.backward_traces = backward  # (and each backward's, compiled on its first call)
    if int_symbols is not None:
        # (the prologue checks what both hold under: the backward compiled now, its fusion's decisions too)
        variant = program.backward_for(program.cotangent_for)
        with m.context:
            program.size_guards = sizes.guards(find_func(m.operation, "forward"))
        with variant.module.context:
            program.size_guards += sizes.guards(find_func(variant.module.operation, "backward"))
    names = [p.name for p in proxies] + list(int_symbols or ())
    n = program.num_outputs
    flat = ["outs"] if n == 1 else [f"outs[{i}]" for i in range(n)]
    constants["_program"] = program
    ret = rebuild_source(out_spec, flat, constants, names)
    call = f"outs = _program({', '.join(names)})"
    if not grad_mode:
        call = f"with torch.enable_grad():\n    {call}"
    source = f"def computation({', '.join(names)}):\n  {call}\n  return {ret}\n"
    computation = compile_source(source, constants=constants)
    traces.append(Trace("torch executor (execution trace)", m, python=source + "\n" + program.forward_source,
                        fn=computation, fn_name="computation"))
    return source, computation, backward


def _next_fusion(module):
    """The number after the module's fusion regions' (fusion_N)."""
    numbers = [int(name.rsplit("_", 1)[1]) for name in fusion_callees(module.operation)
               if name.rsplit("_", 1)[-1].isdigit()]
    return max(numbers, default=-1) + 1


def _cleanup(module, verify=True):
    """cse and canonicalize after one of our passes, its result verified once, before them (the
    pass manager would verify after each: every op's verifier, twice more per pass). verify=False
    where the next pass's result is verified: what this one made and cse, canonicalize and that
    pass keep is verified then (an op they drop is dead or the twin of one kept)."""
    if verify:
        module.operation.verify()
    pm = build_pass_manager("builtin.module(cse,canonicalize)")
    pm.enable_verifier(False)
    pm.run(module.operation)


def _program_trace(producer, module, program, fn_name, lazy):
    """The trace of program's fn_name ("forward", "backward") in module; lazy: the program was not
    generated (thunder-fuse replaces it): the trace generates its Python when asked."""
    if lazy:
        return Trace(producer, module, fn_name=fn_name,
                     codegen=dict(header=f"produced by: thunder-autograd ({fn_name})", grad_free=True))
    return Trace(producer, module, python=getattr(program, f"{fn_name}_source"), fn_name=fn_name,
                 fn=getattr(program, fn_name))


@dataclass
class Parts:
    """What a compiled entry keeps for generalization (runtime/jit.py compile_entry)."""
    source: str  # the Python program ("computation")
    constants: dict  # its namespace's constants (kernels, the autograd program)
    prologue: tuple  # (arg_specs, kw_specs, read tensors, Prologue keyword arguments)
    guards: dict | None  # decisions on symbols while tracing: source -> outcome
    leaks: bool  # a symbolic size is returned or stored (not expressible in the program)
    read_ids: list  # id() of the tensors the call read (arguments, then state), while it runs
    symbolic_trace: object = None  # the acquisition trace with symbolic sizes (`?` dims), or why there is none
    float_exprs: tuple = ()  # the expressions of the floats computed from sizes the trace holds (1 / math.sqrt(T))
    int_exprs: tuple = ()  # the same for the ints (sizes: `C // H`, `max(T - W + 1, 0)`)
    # the choices its compile and its backward's made by size (core/size_choices.py; set by
    # runtime/generalize.py, whose samples at other sizes replay them)
    size_choices: object = None
    backward_size_choices: object = None


def leaks(value, writes):
    """Whether a traced result or attribute write holds a number computed from symbols."""
    seen = set()

    def walk(v, depth=0):
        if symbols.is_symbolic(v):
            return True
        if depth > 6 or id(v) in seen:
            return False
        seen.add(id(v))
        if isinstance(v, (list, tuple, set, frozenset)):
            return any(walk(x, depth + 1) for x in v)
        if isinstance(v, dict):
            return any(walk(x, depth + 1) for x in v.values())
        d = getattr(v, "__dict__", None)
        if isinstance(d, dict) and not isinstance(v, (torch.Tensor, type)) and \
                not type(v).__module__.startswith(("thunder.", "torch")):
            return any(walk(x, depth + 1) for x in d.values())
        return False

    return walk(value) or any(walk(w[2]) for w in writes)


def float_exprs(bsyms, kind=symbols.SymFloat):
    """The expressions of the floats (kind=SymInt: ints) computed from symbolic sizes that these
    ops take or their results' shapes hold (the candidates for a literal that differs between the calls: `1 / math.sqrt(T)`)."""
    found = {}

    def walk(v):
        if isinstance(v, kind):
            found.setdefault(v.expr)
        elif isinstance(v, (tuple, list)):
            for x in v:
                walk(x)
        elif isinstance(v, slice):  # (an indexing key: `k[:, start:]`)
            walk((v.start, v.stop, v.step))
        elif isinstance(v, dict):
            walk(tuple(v.values()))

    for bsym in bsyms:
        for v in bsym.args.values():
            walk(v)
        for ref in bsym.outputs:  # (sizes a meta function computed: a reshape's -1, `T // 2`)
            walk(getattr(ref, "shape", ()))
    return tuple(found)


class TensorMeta:
    """What a prologue reads of an example tensor (so a cache entry keeps no input alive)."""

    def __init__(self, t):
        self.shape, self.dtype, self.device, self.requires_grad = t.shape, t.dtype, t.device, t.requires_grad
        self._stride, self._device_index, self._contiguous = t.stride(), t.get_device(), t.is_contiguous()

    def stride(self):
        return self._stride

    def dim(self):
        return len(self.shape)

    def get_device(self):
        return self._device_index

    def is_contiguous(self):
        return self._contiguous
