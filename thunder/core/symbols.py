"""Symbolic sizes for cache="symbolic values" (runtime/symbolic.py).

A SymInt is an int (its value at the call being traced) that also knows how it was computed from
the symbols of the inputs' dims (`expr`, Python source over the symbol names, e.g.
"(_sym0 * 4)"). Tensor proxies of the inputs get SymInt dims where a dim is symbolic; arithmetic
keeps the expression (meta functions and user code compute sizes with +, *, //, ...), so a
decision taken on a size can be recorded as a guard on the symbols: the prologue of the symbolic
entry checks the same outcome on every call. Comparisons return plain bools. <, <=, >, >=
record themselves wherever they run (user code, `min`/`max`, a meta function clamping a slice);
== and != are recorded by the interpreter for the function's own code only (dict lookups compare
keys with ==), as are branches on a size (`truth`) and `range(n)` (`symbolic_range`).

SymFloat is the same for a float computed from sizes (`n / 2`, `math.sqrt(d)`)."""
import math
import operator

from thunder.core import trace as tracing


def expr_of(v):
    """Python source computing v from the symbols (a literal for plain numbers)."""
    if isinstance(v, (SymInt, SymFloat)):
        return v.expr
    return repr(v)


def is_symbolic(v):
    return isinstance(v, (SymInt, SymFloat))


def _make(value, expr):
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return SymInt(value, expr)
    if isinstance(value, float):
        return SymFloat(value, expr)
    return value


# x op n that is x itself (for an int n): its expression stays x's, so expressions do not grow
# with `1 * x`, `x + 0`, `x // 1` through layers of meta functions
_IDENTITY_RIGHT = {"+": 0, "-": 0, "*": 1, "//": 1}
_IDENTITY_LEFT = {"+": 0, "*": 1}


def _binary(fn, sym):
    def method(self, other):
        if not isinstance(other, (int, float)):
            return NotImplemented
        if type(other) is int and isinstance(self, SymInt):
            if _IDENTITY_RIGHT.get(sym) == other:
                return self
            folded = _folded(self, sym, other)
            if folded is not None:
                return folded
        value = fn(self.plain(), other.plain() if is_symbolic(other) else other)
        return _noted(_make(value, f"({self.expr} {sym} {expr_of(other)})"), self, sym, other)

    def rmethod(self, other):
        if not isinstance(other, (int, float)):
            return NotImplemented
        if type(other) is int and _IDENTITY_LEFT.get(sym) == other and isinstance(self, SymInt):
            return self
        value = fn(other, self.plain())
        return _noted(_make(value, f"({expr_of(other)} {sym} {self.expr})"), self, sym, other, reflected=True)

    return method, rmethod


# A SymInt made as `base + k` or `base * k` (k an int) keeps (base, k), so that an offset taken
# back or a factor divided out again gives base itself: `(T + 1) - 1` is T, `((B * T) * 64) //
# 64` is B * T (a slice's, a view's sizes; else expressions grow layer by layer, and a size
# equal to a symbol is not read as that symbol)
def _noted(result, base, sym, k, reflected=False):
    if isinstance(result, SymInt) and type(k) is int and isinstance(base, SymInt):
        if sym == "+" or sym == "-" and not reflected:
            result._offset = (base, k if sym == "+" else -k)
        elif sym == "*":
            result._factor = (base, k)
    return result


def _folded(x, sym, k):
    """x sym k for an int k where x is base + j or base * j: in terms of base, else None."""
    offset, factor = getattr(x, "_offset", None), getattr(x, "_factor", None)
    if offset is not None and sym in ("+", "-"):
        base, j = offset
        total = j + (k if sym == "+" else -k)
        return base if total == 0 else base + total if total > 0 else base - -total
    if factor is not None and sym == "//" and k > 0 and factor[1] % k == 0:
        return factor[0] * (factor[1] // k)
    return None


_OPS = {"add": (operator.add, "+"), "sub": (operator.sub, "-"), "mul": (operator.mul, "*"),
        "floordiv": (operator.floordiv, "//"), "mod": (operator.mod, "%"), "truediv": (operator.truediv, "/"),
        "pow": (operator.pow, "**")}


class _Symbolic:
    __slots__ = ()

    def __neg__(self):
        return _make(-self.plain(), f"(-{self.expr})")

    def __pos__(self):
        return self

    def __bool__(self):
        result = self.plain() != 0
        if _strict():
            decided(f"({self.expr} != 0)", result)
        return result

    def __abs__(self):  # (the sign is a decision: the program's sizes may hold `abs` unseen)
        value = self.plain()
        decided(f"({self.expr} >= 0)", value >= 0)
        return _make(abs(value), f"abs({self.expr})")

    def __floor__(self):
        return _int_or(self, lambda: SymInt(math.floor(self.plain()), f"math.floor({self.expr})"))

    def __ceil__(self):
        return _int_or(self, lambda: SymInt(math.ceil(self.plain()), f"math.ceil({self.expr})"))

    def __trunc__(self):
        return _int_or(self, lambda: SymInt(math.trunc(self.plain()), f"int({self.expr})"))

    def __reduce__(self):  # a copy or a pickle is the plain number
        return self.value_type, (self.plain(),)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __round__(self, ndigits=None):
        if ndigits is not None:
            return round(self.plain(), ndigits)
        return _int_or(self, lambda: SymInt(round(self.plain()), f"round({self.expr})"))


def _int_of(v):
    """The SymInt whose float v is (float(T): its floor, ceil, int and round are T), else None."""
    return v if isinstance(v, SymInt) else getattr(v, "_int", None)


def _int_or(v, made):
    """_int_of(v), else made() (compared with None: a SymInt's truth is a recorded decision)."""
    found = _int_of(v)
    return found if found is not None else made()


def _ordering(op):
    """<, <=, >, >= record their outcome (a size clamped by a meta function, `min(T, n)` in native
    code); == and != do not (dict lookups compare keys; the interpreter records those of the
    function's own code)."""
    def method(self, other):
        if not isinstance(other, (int, float)):
            return NotImplemented
        result = COMPARISONS[op](self.plain(), other.plain() if is_symbolic(other) else other)
        compared(self, op, other, result)
        return result

    return method


for _name, _op in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")):
    setattr(_Symbolic, f"__{_name}__", _ordering(_op))


def _equality(op):
    """== and != record their outcome only where the trace being made asks for it (_strict)."""
    def method(self, other):
        if not isinstance(other, (int, float)):
            return NotImplemented
        result = COMPARISONS[op](self.plain(), other.plain() if is_symbolic(other) else other)
        if _strict():
            compared(self, op, other, result)
        return result

    return method


for _name, _op in (("eq", "=="), ("ne", "!=")):
    setattr(_Symbolic, f"__{_name}__", _equality(_op))

for _name, (_fn, _sym) in _OPS.items():
    _m, _r = _binary(_fn, _sym)
    setattr(_Symbolic, f"__{_name}__", _m)
    setattr(_Symbolic, f"__r{_name}__", _r)


def _strict():
    """Whether the trace being made records every use of a symbolic number that keeps no
    expression (`sym_strict`: a pass running native rules on symbolic sizes,
    dialects/symbolic_lift.py, where nothing else would see such a use; the interpreter
    intercepts int(), float(), == and != in the function's own code itself)."""
    return getattr(tracing.current(), "sym_strict", False)


def _lost(v, value):
    """A use of v as a plain number: under _strict, the trace holds only where v has this value."""
    if _strict():
        decided(v.expr, value)
    return value


class SymInt(_Symbolic, int):
    value_type = int
    plain = int.__int__

    def __new__(cls, value, expr):
        self = int.__new__(cls, value)
        self.expr = expr
        return self

    def __int__(self):
        return _lost(self, int.__int__(self))

    def __index__(self):
        return _lost(self, int.__index__(self))

    def __float__(self):
        return float(_lost(self, int.__int__(self)))

    __hash__ = int.__hash__


class SymFloat(_Symbolic, float):
    value_type = float
    plain = float.__float__

    def __new__(cls, value, expr):
        self = float.__new__(cls, value)
        self.expr = expr
        return self

    def __float__(self):
        return _lost(self, float.__float__(self))

    def __int__(self):
        return int(_lost(self, float.__float__(self)))

    __hash__ = float.__hash__


# the comparisons and the decisions the interpreter records (see decided)
COMPARISONS = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
               ">=": operator.ge}


def decided(source, outcome):
    """Record that the traced program depends on `source` (a Python expression over the symbols)
    being `outcome` (a bool, or the int a size was read as)."""
    ctx = tracing.current()
    guards = getattr(ctx, "sym_guards", None)
    if guards is not None:
        guards.setdefault(source, outcome)


def compared(lhs, op, rhs, result):
    """The interpreter compared lhs op rhs (one of them symbolic) and got result."""
    if type(result) is bool and (is_symbolic(lhs) or is_symbolic(rhs)):
        a, b = expr_of(lhs), expr_of(rhs)
        if a != b:
            decided(f"({a} {op} {b})", result)


def truth(v):
    """bool(v) for a symbolic v, recorded."""
    result = bool(v.plain())
    decided(f"({v.expr} != 0)", result)
    return result


def concrete(v):
    """v's value for a use that keeps no expression (range(n), indexing a list): specialized."""
    if is_symbolic(v):
        value = v.plain()
        decided(v.expr, value)
        return value
    return v


def convert(v, cls):
    """int(v) / float(v) of a symbolic v, still symbolic (int(float(T)) is T)."""
    if cls is int and _int_of(v) is not None:
        return _int_of(v)
    value = cls(v.plain())
    out = _make(value, v.expr if type(value) is v.value_type else f"{cls.__name__}({v.expr})")
    if isinstance(out, SymFloat) and isinstance(v, SymInt):
        out._int = v
    return out


def hint(v):
    """v's value, symbolic or not, for a choice that is no decision of the program (a cost)."""
    return v.plain() if is_symbolic(v) else v


def to_float(v):
    """float(v), keeping a symbolic number's expression (Python's float() must return a plain
    float: native rules that divide by a count use this)."""
    return convert(v, float) if is_symbolic(v) else float(v)


def to_int(v):
    """int(v), keeping a symbolic number's expression."""
    return convert(v, int) if is_symbolic(v) else int(v)


def sqrt(v):
    """math.sqrt(v); of a symbolic number, a SymFloat (a scale such as 1 / math.sqrt(T))."""
    if is_symbolic(v):
        return SymFloat(math.sqrt(v.plain()), f"math.sqrt({v.expr})")
    return math.sqrt(v)


def symbolic_range(*args):
    """range() in interpreted code (runtime/jit.py _lookup): a loop count taken from a size fixes
    it (min and max need nothing of the kind: their comparisons record themselves)."""
    return range(*map(concrete, args))
