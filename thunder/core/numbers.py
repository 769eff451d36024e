"""NumberProxy: a Python number that the program computes at run time.

`t.item()`, `float(t)`, `int(t)` and `t.tolist()` inside thunder.jit give NumberProxies. While
a NumberProxy is only carried (returned, stored, passed as the number operand of an op, combined
with other numbers by arithmetic) it stays a runtime value: its ops are recorded (`ltorch.item`,
`ltorch.number_op`) and the compiled program computes it on every call, so
`return out, loss.item()` compiles once for all values. Where Python needs the value itself
(`bool()`, a comparison driving a branch, `__index__`, `range()`, formatting, hashing, native
code calling `float()`), the value is read (`concrete`): the trace's reader runs the recorded
prefix on the real inputs, the value becomes a constant of the trace and the program checks
that it is the same on later calls (`ltorch.check`; a different value is a cache miss). Checking
the outcome of a comparison rather than the number (`if loss.item() > 1:` guards the bool) comes
for free: the comparison is itself a NumberProxy of type bool.

A NumberProxy stands for one SSA value of scalar type (f64, i64, i1) in the MLIR trace; `name`
is its name there. `value` is the example value: given when the number is known (an input, say),
else read on demand through the recording context's reader (core/trace.py: TraceCtx.reader).
Outside jit's tracing (inside passes) there is no reader and reading raises DataDependentError.
"""
import operator

import torch

from thunder.core import dispatch
from thunder.core import trace as tracing

_UNKNOWN = object()

# Python number type <-> the dtype of its SSA value in a trace (f64, i64, i1)
DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64}
PYTHON_TYPES = {v: k for k, v in DTYPES.items()}
# a value of each type that meta functions see in place of a NumberProxy: type promotion and
# checks depend only on the Python type; ops whose metadata depends on values read them instead
EXAMPLES = {bool: True, int: 3, float: 1.5}


def python_type_of_dtype(dtype):
    """The Python number type that `t.item()` gives for a tensor of dtype."""
    if dtype is torch.bool:
        return bool
    if dtype.is_floating_point:
        return float
    if dtype.is_complex:
        return complex
    return int


def is_number(v):
    """A Python number (not bool-like tensors) or a NumberProxy."""
    return isinstance(v, (bool, int, float, complex, NumberProxy))


def number_type(v):
    """bool, int, float or complex: the Python type of a number or NumberProxy."""
    if isinstance(v, NumberProxy):
        return v.python_type
    for t in (bool, int, float, complex):
        if isinstance(v, t):
            return t
    raise TypeError(f"expected a number, got {type(v).__name__}")


def example(v):
    """v, with a NumberProxy replaced by an example value of its type (for meta functions)."""
    return EXAMPLES[v.python_type] if isinstance(v, NumberProxy) else v


def concrete(v, why):
    """v with every NumberProxy in it (nested in tuples/lists/slices/dicts) replaced by its value,
    read and checked (a split: see the module doc). why: what needs the value, for reports."""
    if isinstance(v, NumberProxy):
        return v.concrete(why)
    if isinstance(v, (tuple, list)) and any(_has_proxy(x) for x in v):
        items = [concrete(x, why) for x in v]
        return type(v)(items) if type(v) in (tuple, list) else type(v)(*items)
    if isinstance(v, slice) and _has_proxy(v):
        return slice(concrete(v.start, why), concrete(v.stop, why), concrete(v.step, why))
    if isinstance(v, dict) and any(_has_proxy(x) for x in v.values()):
        return {k: concrete(x, why) for k, x in v.items()}
    return v


def _has_proxy(v):
    if isinstance(v, NumberProxy):
        return True
    if isinstance(v, (tuple, list)):
        return any(_has_proxy(x) for x in v)
    if isinstance(v, slice):
        return any(_has_proxy(x) for x in (v.start, v.stop, v.step))
    if isinstance(v, dict):
        return any(_has_proxy(x) for x in v.values())
    return False


def has_proxy(v):
    """Whether v holds a NumberProxy (nested in tuples/lists/slices/dicts)."""
    return _has_proxy(v)


class NumberProxy:
    """A runtime Python number (bool, int or float) in a trace; see the module doc."""

    __slots__ = ("name", "python_type", "expr", "_value", "__weakref__")

    def __init__(self, python_type, name=None, value=_UNKNOWN, expr=None):
        if python_type not in DTYPES:
            raise NotImplementedError(f"thunder: runtime numbers of type {python_type.__name__} are not supported")
        self.python_type = python_type
        self.name = name if name is not None else tracing.new_number_name()
        self._value = value
        self.expr = expr or self.name  # how the program computes it, for messages: "t1.item() > 1"
        tracing.track(self)

    @property
    def dtype(self):
        """The dtype of its SSA value in a trace (float64, int64, bool)."""
        return DTYPES[self.python_type]

    def __repr__(self):
        return f"<NumberProxy {self.name}: {self.python_type.__name__}>"

    # --- the value
    @property
    def value(self):
        """The example value (read through the tracing context's reader when not known yet)."""
        if self._value is _UNKNOWN:
            self._value = tracing.read_value(self, self.expr)
        return self._value

    def concrete(self, why):
        """The value, which Python needs (why: "bool()", "an index", ...): from here on the trace
        is specialized on it, and the program checks it."""
        return tracing.split(self, why)

    # Python needs the value
    def __bool__(self):
        if self.python_type is not bool:  # the truth value is what the branch needs: check that
            b = self._unary("bool")
            b.expr = self.expr
            return b.concrete("bool()")
        return self.concrete("bool()")

    def __index__(self):
        if self.python_type is float:
            raise TypeError("'float' object cannot be interpreted as an integer")
        return operator.index(self.concrete("use as an index"))

    def __int__(self):
        return int(self.concrete("int()"))

    def __float__(self):
        return float(self.concrete("float()"))

    def __complex__(self):
        return complex(self.concrete("complex()"))

    def __hash__(self):
        return hash(self.concrete("hash()"))

    def __format__(self, spec):
        return format(self.concrete("formatting"), spec)

    def __str__(self):
        return str(self.concrete("str()"))

    def __round__(self, ndigits=None):
        v = self.concrete("round()")
        return round(v) if ndigits is None else round(v, ndigits)

    def __trunc__(self):
        return self.concrete("math.trunc()").__trunc__()

    def __floor__(self):
        return self.concrete("math.floor()").__floor__()

    def __ceil__(self):
        return self.concrete("math.ceil()").__ceil__()

    def __getattr__(self, name):
        # the value's methods and attributes (x.is_integer(), x.bit_length()); others do not exist
        if name not in _VALUE_ATTRIBUTES:
            raise AttributeError(f"'{self.python_type.__name__}' object has no attribute '{name}'")
        return getattr(self.concrete(f".{name}"), name)

    # --- arithmetic and comparisons: recorded, the result stays a runtime value
    def _unary(self, fn):
        if fn in ("bool", "int", "float") and self.python_type.__name__ == fn:
            return self
        out = dispatch.number_op(self, None, fn=fn)
        out.expr = UNARY[fn].format(self.expr)
        return out

    def _binary(self, other, fn, reflected=False):
        if not isinstance(other, (NumberProxy, bool, int, float)):
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        if fn == "pow":
            a, b = _pow_operands(a, b)
            if not isinstance(a, NumberProxy) and not isinstance(b, NumberProxy):
                return a ** b
        out = dispatch.number_op(a, b, fn=fn)
        out.expr = BINARY[fn].format(*(x.expr if isinstance(x, NumberProxy) else repr(x) for x in (a, b)))
        return out

    def __neg__(self):
        return self._unary("neg")

    def __pos__(self):
        return self._unary("pos")

    def __abs__(self):
        return self._unary("abs")

    def __invert__(self):
        if self.python_type is float:
            raise TypeError("bad operand type for unary ~: 'float'")
        return self._unary("invert")

    def __divmod__(self, other):
        return (self // other, self % other)

    def __rdivmod__(self, other):
        return (other // self, other % self)

    def conjugate(self):
        return self

    @property
    def real(self):
        return self

    @property
    def imag(self):
        return 0.0 if self.python_type is float else 0


_VALUE_ATTRIBUTES = {"is_integer", "hex", "as_integer_ratio", "bit_length", "bit_count", "to_bytes", "numerator",
                     "denominator"}


def _pow_operands(a, b):
    """a ** b's operands, read where the result's type depends on their values: int ** int is an
    int or a float by the exponent's sign; float ** float a float or a complex by the base's."""
    ta, tb = number_type(a), number_type(b)
    if ta in (bool, int) and tb in (bool, int):
        return a, concrete(b, "the exponent of an integer power")
    if tb in (bool, int):
        return a, b  # a float to an integer power is a float
    if isinstance(a, NumberProxy):
        if not (a >= 0).concrete("the sign of the base of a power"):
            return concrete(a, "a negative base of a power"), concrete(b, "the exponent of a power")
    elif a < 0:
        return a, concrete(b, "the exponent of a power of a negative number")
    return a, b


BINARY = {  # operator name -> Python source template of number_op
    "add": "{} + {}", "sub": "{} - {}", "mul": "{} * {}", "truediv": "{} / {}", "floordiv": "{} // {}",
    "mod": "{} % {}", "pow": "{} ** {}", "and": "{} & {}", "or": "{} | {}", "xor": "{} ^ {}",
    "lshift": "{} << {}", "rshift": "{} >> {}",
    "eq": "{} == {}", "ne": "{} != {}", "lt": "{} < {}", "le": "{} <= {}", "gt": "{} > {}", "ge": "{} >= {}",
    "max": "max({}, {})", "min": "min({}, {})",
}
UNARY = {"neg": "-{}", "pos": "+{}", "abs": "abs({})", "invert": "~{}", "bool": "bool({})", "int": "int({})",
         "float": "float({})"}


def _binary_method(fn, reflected):
    def method(self, other):
        return self._binary(other, fn, reflected)

    return method


for _fn in BINARY:
    if _fn in ("max", "min"):
        continue
    _py = {"and": "and_", "or": "or_"}.get(_fn, _fn)
    setattr(NumberProxy, f"__{_fn}__", _binary_method(_fn, False))
    if _fn not in ("eq", "ne", "lt", "le", "gt", "ge"):
        setattr(NumberProxy, f"__r{_fn}__", _binary_method(_fn, True))


def apply(fn, a, b=None):
    """Python's result of number_op `fn` on plain numbers (what the program computes)."""
    if fn in UNARY:
        return {"neg": operator.neg, "pos": operator.pos, "abs": abs, "invert": operator.invert, "bool": bool,
                "int": int, "float": float}[fn](a)
    return {"and": operator.and_, "or": operator.or_, "max": max, "min": min}.get(fn, getattr(operator, fn, None))(a, b)
