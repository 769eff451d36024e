"""Draws from Python's `random` and numpy's global generator inside a jitted function, drawn by
the program on every call as eager draws them.

    %n0 = "ltorch.python_draw"(%c2, %c2) {fn = "numpy.random.beta"} : (f64, f64) -> f64
                                             n0 = impl.python_draw('numpy.random.beta', 2.0, 2.0)

A scalar draw (a mixup's `lam = np.random.beta(a, a)`, `random.random() < p`, `random.randint(0,
3)`) is a runtime number (core/numbers.py) of the trace: tensor ops take it as an operand (fused
kernels as an argument), and where Python needs its value (`if random.random() < p:`) the trace
is split on it as on a number read from a tensor (runtime/reads.py), so each outcome runs its own
program with eager's draws. Nothing is drawn while tracing: the Reader's runs of the trace
restore the generators after them and the program draws when it runs (impl.rng_snapshot with
python=True: Python's and numpy's states too). The op is not Pure, so it is never merged or
dropped and keeps its order among the draws. Draws with a size, of a sequence (choice, shuffle,
sample) or with array arguments still run once while tracing (runtime/sharp_edges.py)."""
import random

from thunder.core import ndarray
from thunder.core.numbers import NumberProxy
from thunder.core.pysource import py_repr
from thunder.ops.registry import Number, Str, ltorch


def _draws():
    """{function: (its name, the Python type it returns, most positional arguments)}."""
    table = {}
    for name, returns, most in (("random", float, 0), ("uniform", float, 2), ("gauss", float, 2),
                                ("normalvariate", float, 2), ("lognormvariate", float, 2),
                                ("expovariate", float, 1), ("betavariate", float, 2), ("gammavariate", float, 2),
                                ("triangular", float, 3), ("vonmisesvariate", float, 2),
                                ("paretovariate", float, 1), ("weibullvariate", float, 2),
                                ("randint", int, 2), ("randrange", int, 3), ("getrandbits", int, 1)):
        table[getattr(random, name)] = (f"random.{name}", returns, most)
    np_random = ndarray.numpy_random()
    if np_random is not None:
        for name, returns, most in (("rand", float, 0), ("random", float, 0), ("random_sample", float, 0),
                                    ("uniform", float, 2), ("normal", float, 2), ("standard_normal", float, 0),
                                    ("beta", float, 2), ("gamma", float, 2), ("exponential", float, 1),
                                    ("lognormal", float, 2), ("laplace", float, 2), ("randint", int, 2),
                                    ("poisson", int, 1), ("binomial", int, 2), ("geometric", int, 1)):
            table[getattr(np_random, name)] = (f"numpy.random.{name}", returns, most)
    return table


DRAWS = _draws()
BY_NAME = {name: fn for fn, (name, _, _) in DRAWS.items()}


def scalar_draw(fn, args, kwargs):
    """(name, Python type) where fn(*args, **kwargs) is a scalar draw the program can make (plain
    or runtime numbers for its arguments, no keyword arguments), else None."""
    try:
        spec = DRAWS.get(fn)
    except TypeError:  # (unhashable)
        return None
    if spec is None or kwargs or len(args) > spec[2]:
        return None
    if not all(type(a) in (int, float) or isinstance(a, NumberProxy) for a in args):
        return None
    return spec[0], spec[1]


def record(name, returns, args):
    """The draw as a runtime number of the trace."""
    return python_draw(*args, fn=name, returns="int" if returns is int else "float")


@ltorch("(python_draw)", random=True, differentiable=False)
def python_draw(a: Number | None = None, b: Number | None = None, c: Number | None = None, *, fn: Str,
                returns: Str):
    """A draw of Python's random module or numpy's global generator (fn: "random.betavariate",
    "numpy.random.beta", ...) with up to three number arguments; its result is a runtime number
    of type returns ("float" or "int")."""
    if fn not in BY_NAME:
        raise ValueError(f"ltorch.python_draw: unknown draw {fn!r}")
    return NumberProxy(int if returns == "int" else float)


def _python_draw(values, outs):
    args = [py_repr(values[k]) for k in ("a", "b", "c") if values[k] is not None]
    return [f"{outs[0]} = impl.python_draw({', '.join([repr(values['fn'])] + args)})"]


python_draw.python = _python_draw
