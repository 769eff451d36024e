"""thunder.jit: the jitted callable, its cache, and compilation on a cache miss."""
import enum
import functools
import inspect
import math
import warnings
import time
from dataclasses import dataclass, field

import torch

from thunder.core import logs, symbols, trace as tracing
from thunder.core.callables import is_torch_op
from thunder.core.numbers import NumberProxy
from thunder.core.proxies import TensorProxy
from thunder.dialects.emit import emit
from thunder.dialects.mlir import LOCK, ir
from thunder.lowering.passes import build_pass_manager, pass_name, pass_options, split_pipeline
from thunder.ops import custom_function, fallback, onednn, registry
from thunder.runtime import calls, guards, regions, sharp_edges, structure
from thunder.runtime.codegen import compile_source, python_source
from thunder.ops.impl import ValueChanged
from thunder.runtime.prologue import MISS, Prologue
from thunder.runtime.reads import Reader
from thunder.runtime.state import StateTracker
from thunder.runtime.traces import Trace



class CACHE_OPTIONS(str, enum.Enum):
    """thunder.jit's cache= options; the strings ("constant values", ...) are accepted as well, and
    each member equals its string."""
    CONSTANT_VALUES = "constant values"  # recompile when shapes, dtypes, ... or Python scalar values change
    NO_CACHING = "no caching"  # recompile on every call
    SAME_INPUT = "same input"  # assume every call matches the first: no checks
    SYMBOLIC_VALUES = "symbolic values"  # sizes that change become symbols (runtime/symbolic.py)

    def __str__(self):
        return self.value


# fusion executors (lowering/executors.py, by name): "linalg" (CPU kernels), "cuda" (CUDA kernels
# through MLIR's gpu dialect), "nvfuser"; "torch": the rest. Default: CPU fusion only (the cuda
# executor is opt-in: executors=["cuda", "linalg", "torch"])
EXECUTORS = ("linalg", "torch")
FUSION_POLICIES = ("auto", "always")
SHARP_EDGES = ("allow", "warn", "error")
DEFAULT_PASSES = ("thunder-functionalize", "cse", "canonicalize")
MAX_ENTRIES = 64  # cache entries kept per jitted function (most recent first)


@dataclass
class DebugOptions:
    record_interpreter_history: bool = False  # fills last_interpreted_instructions / _log
    check_traces: bool = False  # run MLIR's verifier after each default pass and transform


@dataclass
class CompileStats:
    calls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    last_miss_reason: str | None = None
    miss_reasons: list = field(default_factory=list)  # the reason of every miss, in order ("first call", ...)
    last_compile_time: float = 0.0  # seconds, whole cache miss
    last_stage_times: dict = field(default_factory=dict)  # stage -> seconds
    last_traces: list = field(default_factory=list)
    last_prologue_traces: list = field(default_factory=list)
    last_backward_traces: list = field(default_factory=list)
    # bytes of tensors the forward saves for backward: {"saved_before": without remat, "saved_after": with}
    last_saved_bytes: dict | None = None
    last_interpreted_instructions: list | None = None
    last_interpreter_log: list | None = None
    # where the last compiled program was split on a value read from a tensor (runtime/reads.py):
    # Split(location "file:line", what was read, the value)
    last_splits: list = field(default_factory=list)
    # cache="symbolic values": the outcome of the last attempt to make one program for changing
    # sizes ("generalized: _sym0: tensor argument 0 dim 0" or "not generalized: <why>")
    last_generalization: str | None = None

    def __repr__(self):
        return (f"CompileStats(calls={self.calls}, cache_hits={self.cache_hits}, "
                f"cache_misses={self.cache_misses}, last_miss_reason={self.last_miss_reason!r}, "
                f"last_compile_time={self.last_compile_time:.4f}s, stages={self.last_stage_times})")


@dataclass
class CompileData:
    fn: object
    cache_option: str
    executors: tuple
    sharp_edges: str
    disable_torch_autograd: bool
    transforms: tuple
    debug_options: DebugOptions
    strict: bool  # functional.jit: only the documented input types, no tensors from outside
    compile_options: dict
    module: object = None  # the nn.Module when jitting a module
    warned_sharp_edges: set = field(default_factory=set)
    fusion: str = "auto"  # thunder-fuse's policy when the linalg executor is on
    recompile_limit: int | None = 8  # more recompiles than this warn once (None: never)


@dataclass
class CacheEntry:
    run: object  # entry(args, kwargs) -> result or MISS
    traces: list
    prologue_traces: list
    description: list  # what the entry was compiled for, to explain later misses
    backward_traces: list = field(default_factory=list)
    first_run: object = None  # the prologue without its guards: the call that compiled the entry
    # cache="symbolic values": what runtime/symbolic.py needs to generalize this entry's program
    parts: object = None


def _cache_option(cache):
    if cache is None:
        return CACHE_OPTIONS.CONSTANT_VALUES
    try:
        option = CACHE_OPTIONS(cache)
    except ValueError:
        _check_option("cache option", cache, [o.value for o in CACHE_OPTIONS])
    return option


def _check_option(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"thunder.jit: unknown {name} {value!r}; expected one of {', '.join(map(repr, allowed))}")


def _normalize_transforms(transforms):
    out = []
    for t in transforms or ():
        if isinstance(t, str):
            for element in split_pipeline(t):
                out.append(element)
        elif callable(t):
            out.append(t)
        else:
            raise TypeError(f"thunder.jit: a transform must be a pass name or a callable on the MLIR module, "
                            f"got {type(t).__name__}")
    return tuple(out)


def make_compile_data(fn, *, executors=None, cache=None, sharp_edges=None, disable_torch_autograd=False,
                      transforms=None, debug_options=None, strict=False, fusion=None, recompile_limit=8,
                      **compile_options):
    if not callable(fn):
        raise TypeError(f"thunder.jit expects a callable, got {type(fn).__name__}")
    if isinstance(fn, torch.nn.parallel.DistributedDataParallel):
        # DDP's forward talks to its reducer natively on every call: a trace would replay none
        # of that, so gradients would silently stop being all-reduced after the first call
        raise NotImplementedError(
            "thunder.jit of a DistributedDataParallel module is not supported: its forward has "
            "per-call side effects on the reducer. Workaround: DistributedDataParallel(thunder.jit(model)) "
            "(and DDP's own no_sync()).")
    cache = _cache_option(cache)
    executors = tuple(executors) if executors is not None else EXECUTORS
    for e in executors:
        name = getattr(e, "name", e)
        from thunder.lowering import executors as registry

        _check_option("executor", name, ("torch", *registry.EXECUTORS))
        if name != "torch":
            require = registry.get(name).require
            if require is not None:
                require()
    sharp_edges = sharp_edges or "allow"
    _check_option("sharp_edges option", sharp_edges, SHARP_EDGES)
    fusion = fusion or "auto"
    _check_option("fusion policy", fusion, FUSION_POLICIES)
    if isinstance(debug_options, dict):
        debug_options = DebugOptions(**debug_options)
    if compile_options:  # recorded (last_compile_options), as thunder does, but nothing reads them
        warnings.warn(f"thunder.jit: unknown compile options {', '.join(map(repr, compile_options))} are recorded "
                      "(thunder.last_compile_options) and otherwise ignored", UserWarning, stacklevel=3)
    if recompile_limit is not None and (type(recompile_limit) is not int or recompile_limit < 0):
        raise ValueError(f"thunder.jit: recompile_limit must be a non-negative int or None, got {recompile_limit!r}")
    return CompileData(fn, cache, executors, sharp_edges, bool(disable_torch_autograd),
                       _normalize_transforms(transforms), debug_options or DebugOptions(), strict,
                       dict(executors=executors, cache=cache, sharp_edges=sharp_edges,
                            disable_torch_autograd=disable_torch_autograd, transforms=transforms,
                            debug_options=debug_options, fusion=fusion, **compile_options),
                       fn if isinstance(fn, torch.nn.Module) else None, fusion=fusion,
                       recompile_limit=recompile_limit)


class ThunderFunction:
    """What thunder.jit returns: call it like the original function."""

    def __init__(self, cd: CompileData):
        self._cd = cd
        self._cs = CompileStats()
        self._entries: list[CacheEntry] = []
        self._last_entry = None
        self._samples = []  # cache="symbolic values": recent compiled calls (runtime/symbolic.py)
        functools.update_wrapper(self, cd.fn, updated=())

    def __call__(self, *args, **kwargs):
        cs = self._cs
        cs.calls += 1
        changed = None
        for entry in self._entries:
            try:
                result = entry.run(args, kwargs)
            except ValueChanged as e:  # a value the entry was specialized on (runtime/reads.py)
                changed = changed or e.reason
                continue
            if result is not MISS:
                cs.cache_hits += 1
                if entry is not self._last_entry:
                    self._last_entry = entry
                    cs.last_traces, cs.last_prologue_traces = entry.traces, entry.prologue_traces
                    cs.last_backward_traces = entry.backward_traces
                return result
        with logs.compiling(self._cd.fn):  # (kernels compiled in it count as its progress)
            return self._miss(args, kwargs, changed)

    def _miss(self, args, kwargs, changed=None):
        # one compile at a time in the process (dialects/mlir.py LOCK; cached calls never take
        # it): a thread that waited for another's compile of this call uses its entry
        with LOCK:
            for entry in self._entries:
                try:
                    result = entry.run(args, kwargs)
                except ValueChanged as e:
                    changed = changed or e.reason
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
        if cd.cache_option == CACHE_OPTIONS.SYMBOLIC_VALUES:
            from thunder.runtime import symbolic

            entry = symbolic.compile_call(self, cd, cs, args, kwargs)
        else:
            entry = self._add(compile_entry(cd, cs, args, kwargs))
        # the call that traced runs the program without the guards: they hold for the state the
        # trace started from, which the trace itself may have changed (a global counter, a list
        # appended to), as the function does when called eagerly
        try:
            return entry.first_run(args, kwargs)
        except ValueChanged as e:
            # the program computed a value that Python read differently from the run of torch's
            # calls while tracing: fused kernels round differently. Without fusion it runs
            # torch's calls, as that run did
            self._entries = [e for e in self._entries if e is not entry]
            if _fusion_policy(cd) is None:
                raise RuntimeError(f"thunder: the compiled program computes a value that Python read while tracing "
                                   f"differently from eager PyTorch: {e.reason}") from None
            entry = self._add(compile_entry(cd, cs, args, kwargs, fusion=False))
            return entry.first_run(args, kwargs)

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
        "thunder.jit(..., recompile_limit=None) silences this.", stacklevel=4)


def _flatten_call(args, kwargs):
    """(specs of the arguments, (name, spec) of the keyword arguments, the tensors in them), as
    the prologue sees a call."""
    inputs = structure.Inputs()
    with tracing.not_tracing():
        specs = [structure.flatten_inputs(a, "x", inputs, strict=False)[0] for a in args]
        kspecs = [(k, structure.flatten_inputs(v, "x", inputs, strict=False)[0]) for k, v in kwargs.items()]
    return specs, kspecs, list(inputs.tensors)


def _describe_inputs(args, kwargs):
    specs, kspecs, tensors = _flatten_call(args, kwargs)
    return specs, kspecs, [_meta(t) for t in tensors]


def _meta(t, strides=True):
    """What the prologue checks of a tensor (its strides only where the trace depends on them)."""
    return (tuple(t.shape), t.dtype, t.device, t.requires_grad, tuple(t.stride()) if strides else None)


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
    import re

    parts = re.findall(r"\[('[^']*')\]|\.(\w+)", expr)
    names = [a.strip("'") if a else b for a, b in parts if (a or b) not in ("_modules", "_parameters", "_buffers", "__dict__")]
    return "module attribute " + ".".join(names) if expr.startswith("_s") else expr


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


def _acquire(cd, args, kwargs, shared=None, sym_shapes=None):
    """Interprets cd.fn on proxies of the inputs; shared: see structure.Inputs; sym_shapes: the
    symbolic dims of the input tensors (runtime/symbolic.py)."""
    from thunder.interpreter import interpret

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
        state.arg_paths = structure.tensor_paths(arg_specs, kw_specs)
        ctx.read_grad = state.read_grad
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
                               on_store=_on_store(cd, state), on_call=state.called)
        finally:
            state.restore()
            ctx.reader = ctx.live = None  # (the values read are not needed any more)
        if any(x.requires_grad for x in inputs.tensors):  # (arguments and tensors read from state)
            tracing.consult("grad_enabled")  # the program differs with grad mode (autograd or not)
        # (an input updated in place has been rebound to its new value: use its input name)
        ctx.inputs = [tracing.Ref(p.input_name or p.name, tuple(p.shape), p.dtype, p.device) for p, _ in inputs.params()]
        ctx.inputs += [tracing.ref(p) for p, _ in inputs.numbers]  # (float arguments: runtime numbers)
    return _Acquired(ctx, inputs, arg_specs, kw_specs, state, ambient, result, reader.splits)


def compile_entry(cd, cs, args, kwargs, fusion=True, sym_shapes=None) -> CacheEntry:
    """The cache entry for this call. fusion=False: no thunder-fuse (see ThunderFunction._miss);
    sym_shapes: see _acquire."""
    times = {}
    t_start = t = time.perf_counter()
    acq = _acquire(cd, args, kwargs, sym_shapes=sym_shapes)
    mutated = [i for i, p in enumerate(acq.inputs.proxies) if p.input_name in acq.ctx.mutated]
    shared = structure.alias_groups(acq.inputs.tensors, mutated) if mutated else {}
    if shared:
        # inputs that share memory, one updated in place: traced again with them as views of their
        # storage (side effects of the function's Python code happen twice in this case)
        first = acq.inputs.tensors
        acq = _acquire(cd, args, kwargs, shared, sym_shapes)
        if [id(x) for x in acq.inputs.tensors] != [id(x) for x in first]:
            raise NotImplementedError("thunder: the function read other tensors when traced again for its inputs "
                                      "that share memory. Workaround: pass a clone of one of them.")
    ctx, inputs, state, ambient = acq.ctx, acq.inputs, acq.state, acq.ambient
    arg_specs, kw_specs, result = acq.arg_specs, acq.kw_specs, acq.result
    cs.last_splits = acq.splits
    logs.splits(cd.fn, acq.splits)
    calls.acquired(acq.ctx)
    record = cd.debug_options.record_interpreter_history
    cs.last_interpreted_instructions = list(result.instructions) if record else None
    cs.last_interpreter_log = list(result.log) if record else None
    out_refs = []
    out_spec = structure.flatten_outputs(result.value, out_refs, inputs)
    writes = state.finish_writes()
    tensor_writes = [v for _, _, v in writes if isinstance(v, (TensorProxy, NumberProxy))]
    if tensor_writes:  # written tensors are returned after the output, for the prologue to store
        out_spec = ("tuple", [out_spec] + [structure.flatten_outputs(v, out_refs, inputs) for v in tensor_writes])
    times["interpretation"] = time.perf_counter() - t

    t = time.perf_counter()
    params = inputs.params()
    tensors, proxies = [t for _, t in params], [p for p, _ in params]
    index = {p.input_name: i for i, p in enumerate(proxies)}
    mutated = [(index[name], tracing.ref(p)) for name, p in ctx.mutated.items()]
    module = emit(ctx, out_refs, mutated=mutated)
    traces = [Trace("interpreter (acquisition)", module, output_spec=out_spec)]
    symbolic_trace = _symbolic_trace(ctx, out_refs, mutated, out_spec) if ctx.sym_shapes else None
    times["mlir emission"] = time.perf_counter() - t

    t = time.perf_counter()
    grad_mode = torch.is_grad_enabled()
    # autograd where an op ran with grad mode on (outside, or under enable_grad inside the function)
    # on inputs that require grad, and something is returned
    training = (ctx.grad_ops and not cd.disable_torch_autograd and any(x.requires_grad for x in tensors)
                and bool(out_refs))
    fusion = _fusion_policy(cd) if fusion else None
    for element in (*DEFAULT_PASSES, *cd.transforms):
        if not callable(element) and pass_name(element) == "thunder-fuse":
            continue  # run below (inference) or after thunder-autograd and thunder-remat (training)
        if callable(element):
            with module.context:
                element(module)
            producer = getattr(element, "__name__", repr(element))
        else:
            with module.context:
                build_pass_manager(f"builtin.module({element})").run(module.operation)
            producer = pass_name(element)
        if cd.debug_options.check_traces:
            _verify(module, producer)
        traces.append(Trace(producer, module, output_spec=out_spec))
    if fusion is not None and not training and _fuse(module, fusion):
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
                                                                 decompose=_requested(cd, "thunder-decompose"))
        times["autograd"] = time.perf_counter() - t
        t = time.perf_counter()
    else:
        source = python_source(module, output_spec=out_spec, constants=constants,
                               header="produced by: torch executor (execution trace)",
                               no_grad_copies={i for i, x in enumerate(tensors) if x.requires_grad},
                               # (no autograd history either where no tensor requires grad)
                               grad_free=(cd.disable_torch_autograd or not grad_mode or not (
                                   ctx.requires_grad or any(x.requires_grad for x in tensors))))
        if not grad_mode and not cd.disable_torch_autograd and onednn.used_in(source):
            ctx.consulted.add("grad_enabled")  # its grad-free code is right with grad mode off only
        computation = compile_source(source, constants=constants)
        if cd.disable_torch_autograd:
            computation = torch.no_grad()(computation)
        traces.append(Trace("torch executor (execution trace)", module, python=source, fn=computation))
    entry_guards = list(state.guards.values()) + guards.ambient_guards(ctx.consulted, ambient)
    read = inputs.tensors
    strided = [i for i, p in enumerate(inputs.proxies) if p.input_name in ctx.stride_dependent]
    mutated_reads = {i for i, p in enumerate(inputs.proxies) if p.input_name in ctx.mutated}
    mutated_reads |= {first for p, _, first in inputs.storages if p.input_name in ctx.mutated}
    prologue_args = dict(guards=entry_guards, reads=state.reads, consts=state.consts,
                         writes=writes, check=cd.cache_option != "same input", strided=strided,
                         shared=inputs.shared, storages=[first for _, _, first in inputs.storages],
                         mutated=sorted(mutated_reads))
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
    entry = CacheEntry(run, traces, [prologue_trace], description, backward_traces, first_run)
    if cd.cache_option == CACHE_OPTIONS.SYMBOLIC_VALUES:
        from thunder.runtime import symbolic

        metas = [symbolic.TensorMeta(x) for x in read]
        entry.parts = symbolic.Parts(source, constants, (arg_specs, kw_specs, metas, prologue_args),
                                     ctx.sym_guards, symbolic.leaks(result.value, writes), [id(x) for x in read],
                                     symbolic_trace, symbolic.float_exprs(ctx.symbols) if ctx.sym_shapes else ())
    return entry


def _symbolic_trace(ctx, out_refs, mutated, out_spec):
    """The trace recorded with symbolic sizes (cache="symbolic values"), emitted with them: `?`
    dims and sizes as SSA values (dialects/sizes.py), checked by the verifier; or a string saying
    why it could not be (a size where the dialect holds no SSA value, a meta function that made
    a size concrete)."""
    from thunder.dialects import sizes

    int_symbols = [name for key, name in ctx.sym_shapes.items() if isinstance(key, tuple)]
    try:
        module = emit(ctx, out_refs, mutated=mutated, int_symbols=int_symbols)
        with module.context:
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


def _fuse(module, fusion):
    """thunder-fuse with (policy, executors) on the module; whether it outlined a region."""
    from thunder.lowering.fuse import fuse_module, fusion_callees

    with module.context:
        fuse_module(module.operation, *fusion)
        callees = fusion_callees(module.operation)
        logs.fusion_regions(regions.summary(callees))
    return bool(callees)


def _autograd_program(cs, module, tensors, proxies, out_spec, traces, constants, fusion=None, decompose=False,
                      grad_mode=True):
    """thunder-autograd on the trace (tensors, proxies: its parameters' values and proxies, runtime
    numbers after the tensors); returns (source, computation, backward traces); constants
    (a dict) gets the names the computation's source refers to.
    grad_mode: the caller's (off: torch.enable_grad() inside the function made the graph).
    fusion: thunder-fuse's policy for @forward and @backward after thunder-remat (None: no
    fusion); decompose: their ltorch ops into prims first (thunder-decompose in transforms)."""
    from thunder.lowering.autograd import REQUIRES_GRAD, autograd_module
    from thunder.lowering.remat import remat_module
    from thunder.runtime.autograd import AutogradProgram
    from thunder.runtime.structure import rebuild_source

    with module.context:
        m = ir.Module.parse(module.operation.get_asm(enable_debug_info=True))
        comp = m.body.operations[0]
        comp.attributes["arg_attrs"] = ir.ArrayAttr.get([
            ir.DictAttr.get({REQUIRES_GRAD: ir.UnitAttr.get()} if isinstance(x, torch.Tensor) and x.requires_grad
                            else {}) for x in tensors])
        autograd_module(m.operation)
        build_pass_manager("builtin.module(cse,canonicalize)").run(m.operation)
        traces.append(Trace("thunder-autograd", m, fn_name="forward"))
        cs.last_saved_bytes = remat_module(m.operation)
        build_pass_manager("builtin.module(cse,canonicalize)").run(m.operation)
        if decompose:
            build_pass_manager("builtin.module(thunder-decompose,cse,canonicalize)").run(m.operation)
    program = AutogradProgram(m, len(tensors))
    traces.append(Trace("thunder-remat (forward)", m, python=program.forward_source, fn_name="forward",
                        fn=program.forward))
    backward = [Trace("thunder-autograd (backward)", m, python=program.backward_source, fn_name="backward",
                      fn=program.backward)]
    # after AutogradProgram, which lifts @forward (func.call has no Python-level form)
    if fusion is not None and _fuse(m, fusion):
        for fn_name in ("forward", "backward"):
            kernels = {}
            src = python_source(m, fn_name, header=f"produced by: thunder-fuse ({fn_name})", constants=kernels,
                                grad_free=True)
            setattr(program, f"{fn_name}_source", src)
            program.constants[fn_name] = kernels
            setattr(program, fn_name, compile_source(src, fn_name, constants=kernels))
        traces.append(Trace("thunder-fuse (forward)", m, python=program.forward_source, fn_name="forward",
                            fn=program.forward))
        backward.append(Trace("thunder-fuse (backward)", m, python=program.backward_source, fn_name="backward",
                              fn=program.backward))
    names = [p.name for p in proxies]
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


def _make_lookup(cd):
    warned = cd.warned_sharp_edges

    def lookup(fn):
        sharp_edges.check(fn, cd.sharp_edges, tracing.current_location(), warned)
        return calls.observe(fn, _lookup(fn))  # (thunder.examine's record of torch calls)

    return lookup


def _no_torch_function(*args, **kwargs):
    return False


# torch's Python functions ask these whether to hand the call to __torch_function__; inside the
# interpreter the answer is no, so their Python bodies run (interpreted) with proxies
_TORCH_FUNCTION_CHECKS = {torch.overrides.has_torch_function, torch.overrides.has_torch_function_unary,
                          torch.overrides.has_torch_function_variadic}


def _is_compiling():
    return True


def _is_compiling_checks():
    """torch's "am I being compiled?" functions: thunder is a compiler, and libraries take their
    trace-friendly path when these answer True (transformers' is_torchdynamo_compiling() calls
    torch.compiler.is_compiling()). torch._dynamo is not imported here (it is slow to import);
    its function is found once user code has imported it."""
    import sys

    checks = {torch.compiler.is_compiling}
    for module in ("torch._dynamo.external_utils", "torch._utils"):
        fn = getattr(sys.modules.get(module), "is_compiling", None)
        if fn is not None:
            checks.add(fn)
    return checks


def _is_tensor_class(classinfo, tensor_class=torch.Tensor):
    if isinstance(classinfo, tuple):
        return any(_is_tensor_class(c, tensor_class) for c in classinfo)
    return isinstance(classinfo, type) and issubclass(tensor_class, classinfo)


def _isinstance(obj, classinfo):
    """isinstance in the jitted code: a proxy is a torch.Tensor (libraries branch on it), not a
    subclass such as Parameter, except the proxy of an nn.Parameter, which is one."""
    if isinstance(obj, TensorProxy) and (_is_tensor_class(classinfo) or obj.is_parameter and
                                         _is_tensor_class(classinfo, torch.nn.Parameter)):
        return True
    if isinstance(obj, NumberProxy):  # a runtime number is an instance of its Python type
        classes = classinfo if isinstance(classinfo, tuple) else (classinfo,)
        if any(isinstance(obj.python_type(), c) for c in classes if isinstance(c, type)):
            return True
    return isinstance(obj, classinfo)


def _eager_type(obj):
    """type(obj) as eager code sees it: a tensor proxy is a torch.Tensor (the proxy of an
    nn.Parameter a Parameter), a runtime number or a symbolic size one of its Python type."""
    if isinstance(obj, TensorProxy):
        return torch.nn.Parameter if obj.is_parameter else torch.Tensor
    if isinstance(obj, NumberProxy):
        return obj.python_type
    if symbols.is_symbolic(obj):
        return obj.value_type
    return type(obj)


def _type(*args, **kwargs):
    """type() in the jitted code: type(x) of a proxy is eager's (`type(x) is torch.Tensor`)."""
    return _eager_type(args[0]) if len(args) == 1 and not kwargs else type(*args, **kwargs)


def _on_load(state):
    """on_load of the interpreter: x.__class__ of a proxy is eager's, as type(x) is; other
    values go to the state tracker (runtime/state.py)."""
    def load(value, provenance):
        if provenance.name == "__class__" and provenance.kind == "attr":
            eager = _eager_type(provenance.owner)
            if eager is not value:  # (a proxy's)
                return eager
        return state.load(value, provenance)

    return load


def _sqrt(x):
    """math.sqrt in the jitted code: of a size computed from symbols, a symbolic float (a scale
    such as 1 / math.sqrt(T): the program writes it as an expression of the symbols)."""
    if symbols.is_symbolic(x):
        return symbols.SymFloat(math.sqrt(x.value_type(x)), f"math.sqrt({x.expr})")
    return math.sqrt(x)


def _runtime_number(cls):
    """int(x) / float(x) inside the interpreter: for a tensor or a runtime number, a runtime
    number (core/numbers.py; Python's own int()/float() must return a real one, which would
    read the value)."""
    def convert(*args, **kwargs):
        if len(args) == 1 and not kwargs:
            x = args[0]
            if isinstance(x, TensorProxy):
                return x._scalar(cls)
            if isinstance(x, NumberProxy):
                return x._unary(cls.__name__)
            if symbols.is_symbolic(x):  # a size computed from symbols stays symbolic
                return symbols.convert(x, cls)
        return cls(*args, **kwargs)

    return convert


_NUMBER_CONVERSIONS = {int: _runtime_number(int), float: _runtime_number(float)}


def _refuse(exc_type, message):
    def refused(*args, **kwargs):
        loc = tracing.current_location()
        where = f" at {loc[0]}:{loc[1]}" if loc else ""
        raise exc_type(message.format(where=where))

    return refused


# calls that thunder refuses inside a jitted function (the exception type and the message)
_REFUSED = {
    torch.compile: (NotImplementedError, "thunder: torch.compile{where} inside a jitted function is not supported "
                    "(thunder compiles the function already). Workaround: call the function itself, or apply "
                    "torch.compile outside thunder.jit"),
    torch.set_default_dtype: (RuntimeError, "Default dtype is changed during the execution of jitted function{where}. "
                              "This is currently unsupported. Workaround: set it before calling the jitted function"),
}


def _compiled_by_dynamo(fn):
    """A function or module that torch.compile returned."""
    try:
        if getattr(fn, "_torchdynamo_disable", False):
            return False  # torch._dynamo.disable's wrapper (torch.manual_seed calls one): runs as itself
        return (getattr(fn, "_torchdynamo_orig_callable", None) is not None
                or type(fn).__module__ == "torch._dynamo.eval_frame")
    except Exception:  # noqa: BLE001 - an object whose attributes cannot be read: not dynamo's
        return False


def _lookup(fn):
    if fn is isinstance:
        return _isinstance
    if fn is type:
        return _type
    if fn is range:  # a loop count taken from a symbolic size is a guard
        return symbols.symbolic_range
    if fn is int or fn is float:
        return _NUMBER_CONVERSIONS[fn]
    if fn is math.sqrt:
        return _sqrt
    try:
        refused = _REFUSED.get(fn)
    except TypeError:  # unhashable
        refused = None
    if refused is None and _compiled_by_dynamo(fn):
        refused = (NotImplementedError, "thunder: calling a function compiled by torch.compile{where} inside a jitted "
                   "function is not supported. Workaround: call the original function (torch.compile's result has "
                   "it as _torchdynamo_orig_callable), or apply torch.compile outside thunder.jit")
    if refused is not None:
        return _refuse(*refused)
    if custom_function.is_apply(fn):  # MyFn.apply: its forward interpreted, its backward for gradients
        if hasattr(fn, "__self__"):
            return functools.partial(custom_function.apply, fn.__self__)
        return custom_function.apply  # (Function.apply itself: called with the class first)
    op = registry.lookup_callable(fn)
    if op is not None:
        return functools.partial(fallback.registered, op, fn)
    try:
        if fn in _TORCH_FUNCTION_CHECKS:
            return _no_torch_function
        if getattr(fn, "__name__", None) == "is_compiling" and fn in _is_compiling_checks():
            return _is_compiling
        query = guards.QUERIES.get(fn)
    except TypeError:  # unhashable
        query = None
    if query is not None:
        return _consulting(fn, query)
    if is_torch_op(fn):  # no registry entry: thunder's fallback records it (ops/fallback.py)
        return functools.partial(fallback.call, fn)
    module = getattr(fn, "__module__", None) or ""
    if module.startswith("thunder.") and not module.startswith("thunder.tests"):
        return fn  # our own machinery (proxy methods, ops) runs natively
    return None


def _consulting(fn, state_name):
    """fn answers with ambient torch state: the trace depends on it."""
    def query(*args, **kwargs):
        tracing.consult(state_name)
        return fn(*args, **kwargs)

    return query


def _on_store(cd, state):
    def on_store(value, provenance):
        if provenance.kind == "global":
            state.stores += 1  # (not bookkeeping: runtime/state.py)
            sharp_edges.check_global_write(provenance, cd.sharp_edges, cd.warned_sharp_edges)
        else:
            state.store(value, provenance)

    return on_store
