"""thunder.jit's options: what a call of thunder.jit asks for (CompileData), what it records (CompileStats), a cache entry."""
from dataclasses import dataclass, field
import enum
import warnings

import torch

from thunder.lowering.passes import split_pipeline
from thunder.lowering import executors as executor_registry
from thunder.runtime import sharp_edges


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
    # the first change the last compile's trace made to state for real (a global's, a container's
    # plain values: runtime/state.py), in words, or None
    last_state_change: str | None = None
    # cache="symbolic values": the outcome of the last attempt to make one program for changing
    # sizes ("generalized: _sym0: tensor argument 0 dim 0" or "not generalized: <why>")
    last_generalization: str | None = None
    # every such attempt's outcome, in order: what became a symbol and why ("generalized
    # (automatic dynamic: the sizes that changed since the call before): _sym0: tensor argument 0 dim 1")
    generalizations: list = field(default_factory=list)
    # how the last program for changing sizes was made: "compiled once with symbolic sizes"
    # (runtime/symbolic_program.py), or "fitted from three compiles (one compile with symbolic
    # sizes refused: <why>)" (runtime/symbolic.py)
    last_symbolic_compile: str | None = None
    # calls that used a program from the program cache on disk instead of compiling (runtime/persist.py)
    disk_loads: int = 0
    # fused regions run as torch calls while their kernel compiled in the background
    # (runtime/tiered.py): region name -> calls; and those whose compile failed: name -> why
    torch_while_compiling: dict = field(default_factory=dict)
    kernel_failures: dict = field(default_factory=dict)
    # backward programs compiled (thunder-fuse and code generation of @backward, on the first
    # backward call per set of cotangents present: runtime/autograd.py) and the last one's seconds
    backward_compiles: int = 0
    last_backward_compile_time: float = 0.0

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
    draws_warn: bool = False  # sharp_edges not given: Python's and numpy's random draws warn (sharp_edges.DRAWS)
    # cache="constant values": sizes and ints that change between calls become symbols (runtime/symbolic.py)
    automatic_dynamic: bool = True
    persist: bool = True  # the program cache on disk (runtime/persist.py)
    # recent compiles, for a miss that traces the same program again (runtime/same_trace.py)
    compiled: list = field(default_factory=list)


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
    # what runtime/persist.py stores of the entry (sources, constants, prologue), or None
    persist: object = None
    # a training entry's runtime/autograd.py AutogradProgram (its backward compiles on its first call), or None
    program: object = None


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
                      automatic_dynamic=True, persist=True, **compile_options):
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
        _check_option("executor", name, ("torch", *executor_registry.EXECUTORS))
        if name != "torch":
            require = executor_registry.get(name).require
            if require is not None:
                require()
    draws_warn = sharp_edges is None
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
    if type(persist) is not bool:
        raise ValueError(f"thunder.jit: persist must be True or False, got {persist!r}")
    return CompileData(fn, cache, executors, sharp_edges, bool(disable_torch_autograd),
                       _normalize_transforms(transforms), debug_options or DebugOptions(), strict,
                       dict(executors=executors, cache=cache, sharp_edges=sharp_edges,
                            disable_torch_autograd=disable_torch_autograd, transforms=transforms,
                            debug_options=debug_options, fusion=fusion, **compile_options),
                       fn if isinstance(fn, torch.nn.Module) else None, fusion=fusion,
                       recompile_limit=recompile_limit, automatic_dynamic=bool(automatic_dynamic),
                       persist=persist, draws_warn=draws_warn)
