"""Sharp edges: Python calls whose effect or result does not belong in a trace (random numbers
from Python's `random` and numpy's global generator other than the scalar draws the program makes
itself (ops/python_draws.py), clocks, printing). They run once, while tracing, and their results
are constants of the compiled program. sharp_edges="allow" does that silently, "warn" warns once
per source line, "error" raises JITSharpEdgeError naming the call and the line."""
import builtins
import random
import sys
import time
import warnings


class JITSharpEdgeError(RuntimeError):
    pass


def _side_effects():
    fns = {builtins.print: "print()", builtins.input: "input()"}
    for name in ("random", "randint", "randrange", "uniform", "gauss", "normalvariate", "choice",
                 "choices", "shuffle", "sample", "getrandbits", "seed", "betavariate", "expovariate",
                 "gammavariate", "lognormvariate", "triangular", "vonmisesvariate", "paretovariate",
                 "weibullvariate", "binomialvariate", "randbytes"):
        if hasattr(random, name):
            fns[getattr(random, name)] = f"random.{name}()"
    for name in ("time", "perf_counter", "monotonic", "process_time", "time_ns", "perf_counter_ns", "sleep"):
        fns[getattr(time, name)] = f"time.{name}()"
    numpy = sys.modules.get("numpy")  # (imported by torch where installed; none without it)
    if numpy is not None:  # numpy's global generator, as Python's (BigBird draws its random blocks so)
        for name in ("rand", "randn", "randint", "random", "random_sample", "permutation", "shuffle", "choice",
                     "uniform", "normal", "binomial", "seed", "beta", "gamma", "exponential", "poisson",
                     "standard_normal", "lognormal", "laplace", "dirichlet", "multinomial", "geometric",
                     "random_integers", "sample", "ranf", "bytes"):
            if hasattr(numpy.random, name):
                fns[getattr(numpy.random, name)] = f"numpy.random.{name}()"
    return fns


SIDE_EFFECTS = _side_effects()
# the random draws (not the seeding, clocks or printing) that run while tracing (a size, a
# sequence's elements): their values baked into the program are silently different from eager's
# on every later call, so they warn unless sharp_edges is given (draws_warn)
DRAWS = frozenset(fn for fn, what in SIDE_EFFECTS.items() if "random." in what and not what.endswith(".seed()"))


def check(fn, mode, where, warned, draws_warn=False):
    """Called by the interpreter's lookup for every call; returns nothing, may warn or raise.
    draws_warn: under "allow" (sharp_edges not given), the random draws warn."""
    try:
        what = SIDE_EFFECTS.get(fn)
    except TypeError:
        return
    if what is not None and mode == "allow" and draws_warn and fn in DRAWS:
        mode = "warn"
    if what is None or mode == "allow":
        return
    loc = f"{where[0]}:{where[1]}" if where else "unknown line"
    msg = (f"thunder: {what} at {loc} runs only while tracing; its result is a constant of the "
           "compiled program and its effect does not happen on later calls. Move it out of the "
           "jitted function (or use torch random functions, which are traced).")
    if mode == "error":
        raise JITSharpEdgeError(msg)
    if (what, loc) not in warned:
        warned.add((what, loc))
        warnings.warn(msg, stacklevel=2)


def check_global_write(provenance, mode, warned):
    """A write to a module global, or a change of a list, dict or set that outlives the call
    (plain values: runtime/state.py container_write), from jitted code happens only while tracing."""
    if mode == "allow":
        return
    loc = f"{provenance.filename}:{provenance.lineno}"
    msg = (f"thunder: {described(provenance)} at {loc} happens only while tracing, not on later "
           "calls. Return the value instead, or move the write out of the jitted function.")
    if mode == "error":
        raise JITSharpEdgeError(msg)
    if ("global", loc) not in warned:
        warned.add(("global", loc))
        warnings.warn(msg, stacklevel=2)


def described(provenance):
    """A write in words: "writing global 'x'", "list.append()", "writing an item of a dict"."""
    if provenance.kind == "global":
        return f"writing global '{provenance.name}'"
    if provenance.kind == "mutator":
        return f"{type(provenance.owner).__name__}.{provenance.name}()"
    return f"writing an item of a {type(provenance.owner).__name__}"
