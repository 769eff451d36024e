"""Thunder on MLIR: a source-to-source compiler for PyTorch programs.

    jfn = thunder.jit(fn)
    jfn(x)                              # same result as fn(x)
    thunder.last_traces(jfn)[-1]        # the program that ran, as Python
    thunder.last_traces(jfn)[0].to_mlir()
"""
import torch

from thunder import distributed, functional
from thunder.core.logs import set_logs
from thunder.examine import Examination, examine
from thunder.runtime.jit import ThunderFunction
from thunder.runtime.module import ThunderModule
from thunder.runtime.options import CACHE_OPTIONS, CompileStats, DebugOptions, make_compile_data
from thunder.runtime.sharp_edges import JITSharpEdgeError
from thunder.runtime.tiered import wait_for_kernels

__all__ = [
    "jit", "functional", "compile_data", "compile_stats", "last_traces", "last_prologue_traces",
    "last_backward_traces", "cache_option", "cache_hits", "cache_misses", "list_transforms", "last_interpreted_instructions",
    "last_interpreter_log", "last_compile_options", "DebugOptions", "CompileStats", "ThunderModule", "JITSharpEdgeError",
    "CACHE_OPTIONS", "set_logs", "examine", "Examination", "wait_for_kernels",
]


def jit(fn, /, *, executors=None, cache=None, sharp_edges=None, disable_torch_autograd=False,
        transforms=None, debug_options=None, **compile_options):
    """Compile fn (a function) with thunder. Returns a callable with fn's behaviour.

    cache: a thunder.CACHE_OPTIONS member or its string: CONSTANT_VALUES / "constant values"
    (default: recompile when shapes, dtypes, devices, requires_grad or Python scalar values
    change), SAME_INPUT / "same input" (assume every call matches the first: no checks),
    NO_CACHING / "no caching" (recompile on every call), SYMBOLIC_VALUES / "symbolic values"
    (every size and int argument is a symbol from the first call on: one program for all of
    them; see docs/api.md). Under the default, a size or int argument that changes between two
    calls becomes a symbol at that call (automatic dynamic; automatic_dynamic=False keeps every
    size a constant).
    Other keyword options are recorded (last_compile_options) with a warning.
    An FSDP2 module (fully_shard) comes back as itself with its forward compiled: FSDP2's hooks
    run natively around it (thunder/distributed.py).
    transforms: MLIR pass names (ours or upstream) or
    callables on the trace module, run after the default passes. recompile_limit (default 8, None
    for never): more recompiles than this warn once, naming the input that keeps changing.
    persist (default True): compiled programs are stored on disk and reused by later processes
    (the program cache, docs/api.md; THUNDER_PROGRAM_CACHE=off turns it off everywhere)."""
    def compile_data(f):
        return make_compile_data(f, executors=executors, cache=cache, sharp_edges=sharp_edges,
                                 disable_torch_autograd=disable_torch_autograd, transforms=transforms,
                                 debug_options=debug_options, **compile_options)

    if distributed.is_fully_sharded(fn):  # FSDP2: its hooks run natively, its forward compiled
        return distributed.jit_fully_sharded(fn, compile_data)
    cd = compile_data(fn)
    if isinstance(fn, torch.nn.Module):
        return ThunderModule(fn, cd)
    return ThunderFunction(cd)


def _jitted(fn, what):
    if isinstance(fn, ThunderModule):
        return fn._jfn
    if distributed.jitted_forward(fn) is not None:  # an FSDP2 module thunder.jit compiled
        return distributed.jitted_forward(fn)
    if not isinstance(fn, ThunderFunction):
        raise TypeError(f"thunder.{what} expects a function returned by thunder.jit, got {type(fn).__name__}")
    return fn


def _called(fn, what):
    fn = _jitted(fn, what)
    if fn._cs.calls == 0:
        raise TypeError(f"thunder.{what}: the jitted function has not been called yet")
    return fn


def compile_data(fn):
    """The options fn was jitted with (CompileData)."""
    return _jitted(fn, "compile_data")._cd


def compile_stats(fn):
    """Calls, cache hits/misses, compile time per stage, the last miss reason and the reason of
    every miss (miss_reasons: why each recompile happened) (CompileStats)."""
    return _jitted(fn, "compile_stats")._cs


def last_traces(fn):
    """The traces of the last call, from acquisition to the execution trace that ran."""
    return list(_called(fn, "last_traces")._cs.last_traces)


def last_backward_traces(fn):
    """The backward traces of the last call whose inputs required grad (Python via str(),
    MLIR via to_mlir()); empty when the last call needed no backward."""
    return list(_called(fn, "last_backward_traces")._cs.last_backward_traces)


def last_prologue_traces(fn):
    """The prologue (input checks and unpacking) of the last call's cache entry."""
    return list(_called(fn, "last_prologue_traces")._cs.last_prologue_traces)


def cache_option(fn):
    return _jitted(fn, "cache_option")._cd.cache_option


def cache_hits(fn):
    return _jitted(fn, "cache_hits")._cs.cache_hits


def cache_misses(fn):
    return _jitted(fn, "cache_misses")._cs.cache_misses


def list_transforms(fn):
    return list(_jitted(fn, "list_transforms")._cd.transforms)


def last_compile_options(fn):
    """The keyword options fn was jitted with (unknown ones included: they are recorded, with a
    warning, and otherwise ignored)."""
    return dict(_jitted(fn, "last_compile_options")._cd.compile_options)


def _interpreter_record(fn, what, attr):
    fn = _called(fn, what)
    value = getattr(fn._cs, attr)
    if value is None:
        raise TypeError(
            f"thunder.{what}: nothing was recorded. Jit with "
            "debug_options=thunder.DebugOptions(record_interpreter_history=True) and call it "
            "(the record is of the last cache miss)")
    return value


def last_interpreted_instructions(fn):
    """The bytecode instructions the interpreter ran in the last cache miss."""
    return list(_interpreter_record(fn, "last_interpreted_instructions", "last_interpreted_instructions"))


def last_interpreter_log(fn):
    """Call and return events of the interpreter in the last cache miss."""
    return list(_interpreter_record(fn, "last_interpreter_log", "last_interpreter_log"))
