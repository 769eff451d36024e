"""Tests for thunder.interpreter: interpreted results must match native execution."""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import dis
import functools
import inspect
import math
import os
import sys
import threading
from typing import NamedTuple

import pytest

from thunder.interpreter import InterpreterError, Provenance, current_source_location, interpret

PY311 = sys.version_info[:2] == (3, 11)


def run_both(fn, *args, **kwargs):
    """Returns (native outcome, interpreted outcome), each ("ok", value) or ("raise", type, message)."""

    def outcome(runner):
        try:
            return ("ok", runner())
        except Exception as e:  # noqa: BLE001
            return ("raise", type(e), str(e))

    native = outcome(lambda: fn(*args, **kwargs))
    interpreted = outcome(lambda: interpret(fn, args, kwargs).value)
    return native, interpreted


def check(fn, *args, **kwargs):
    native, interpreted = run_both(fn, *args, **kwargs)
    assert interpreted == native
    return interpreted


# ----------------------------------------------------------------------------------------------
# a corpus of ordinary Python
# ----------------------------------------------------------------------------------------------
GLOBAL_SCALE = 3
GLOBAL_LIST = [1, 2, 3]


def arith(a, b):
    r = a + b - a * b / (b or 1)
    r += a // 3
    r -= b % 7
    r *= 2
    r /= 3
    x = a
    x **= 2
    x //= 3
    x %= 11
    x <<= 3
    x >>= 1
    x &= 0xFF
    x |= 0x100
    x ^= 0x0F
    return r, x, -a, +b, ~a, not a, a ** 2, a @ b if hasattr(a, "__matmul__") else None, abs(a - b)


def float_arith(a, b):
    r = a * b + a / b - a // b + a % b - b ** 0.5
    r += 1.5
    r *= -1
    return r, round(r, 3), int(r), divmod(a, b), complex(a, b) * 2j


def compare_chain(a, b, c):
    return a < b < c, a <= b, a == b, a != c, a > c >= b, a is b, a is not None, a in [b, c], a not in (b,)


def loops(n):
    total = 0
    for i in range(n):
        if i == 7:
            break
        if i % 2 == 0:
            continue
        total += i
    else:
        total = -1
    j = 0
    while j < n:
        j += 3
        if j > 100:
            break
    else:
        total += 1000
    for i, (a, b) in enumerate(zip(range(n), range(n, 0, -1))):
        total += a * b - i
    return total, j


def comprehensions(n):
    k = GLOBAL_SCALE
    lst = [i * k for i in range(n) if i % 2]
    st = {i % 3 for i in range(n)}
    dct = {i: [j * k for j in range(i)] for i in range(n)}
    gen = sum(i * k for i in range(n))
    nested = [(i, j) for i in range(3) for j in range(i)]
    return lst, st, dct, gen, nested


def make_counter():
    count = 0

    def inc(by=1):
        nonlocal count
        count += by
        return count

    return inc


def closures(n):
    c = make_counter()
    for _ in range(n):
        c()
    c(by=10)
    adders = [lambda x, i=i: x + i for i in range(3)]
    late = [lambda x: x + i for i in range(3)]  # noqa: B023  (late binding)
    y = 5

    def outer():
        z = y * 2

        def inner():
            return y + z

        return inner()

    return c(0), [a(1) for a in adders], [f(1) for f in late], outer()


def varargs_target(a, b=2, /, c=3, *args, d, e=5, **kwargs):
    return a, b, c, args, d, e, sorted(kwargs.items())


def varargs_caller(xs, kw):
    r1 = varargs_target(*xs, d=1)
    r2 = varargs_target(1, *xs, **kw)
    r3 = varargs_target(*xs, **{"d": 9, **kw})
    r4 = varargs_target(0, d=4, c=8, zz=1)
    f = lambda *a, **k: (a, k)  # noqa: E731
    return r1, r2, r3, r4, f(*xs, x=1, **kw)


def kwonly_defaults(a, *, b=10, c):
    return a + b + c


def try_except(x):
    log = []
    try:
        log.append("try")
        if x == 0:
            raise ValueError("zero")
        if x == 1:
            return {}["missing"]
        if x == 2:
            return 1 / 0
        log.append("no error")
    except ValueError as e:
        log.append(("value", str(e)))
    except (KeyError, IndexError) as e:
        log.append(("lookup", repr(e)))
    except Exception:  # noqa: BLE001
        log.append("other")
    else:
        log.append("else")
    finally:
        log.append("finally")
    return log


def finally_return(x):
    try:
        if x:
            raise RuntimeError("boom")
        return "body"
    finally:
        if x > 1:
            return "finally wins"  # noqa: B012


def nested_try(x):
    out = []
    try:
        try:
            raise KeyError(x)
        except KeyError as e:
            out.append("inner")
            raise ValueError("from inner") from e
        finally:
            out.append("inner finally")
    except ValueError as e:
        out.append((type(e.__cause__).__name__, e.__suppress_context__, str(e)))
    try:
        try:
            raise KeyError("a")
        except KeyError:
            raise TypeError("b")  # noqa: B904  implicit chaining
    except TypeError as e:
        out.append(type(e.__context__).__name__)
    try:
        try:
            raise KeyError("a")
        except KeyError:
            raise  # bare re-raise
    except KeyError as e:
        out.append(("reraised", e.args))
    return out


class MyError(Exception):
    def __init__(self, code, msg="bad"):
        super().__init__(f"{msg}: {code}")
        self.code = code


def raises_custom(x):
    if x > 0:
        raise MyError(x, msg="custom")
    raise AttributeError("plain message")


def raises_in_callee(d):
    def helper(v):
        return v["key"]

    return helper(d)


class Resource:
    def __init__(self, log, suppress=False):
        self.log = log
        self.suppress = suppress

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, et, ev, tb):
        self.log.append(("exit", et.__name__ if et else None))
        return self.suppress


def with_statement(fail, suppress):
    log = []
    try:
        with Resource(log, suppress) as r:
            log.append(r is not None)
            if fail:
                raise ValueError("inside with")
            log.append("body done")
        log.append("after with")
    except ValueError as e:
        log.append(("caught", str(e)))
    with Resource(log), Resource(log):
        log.append("two managers")
    with contextlib.suppress(ZeroDivisionError):
        1 / 0  # noqa: B018
    return log


@contextlib.contextmanager
def cm_gen(log):
    log.append("gen enter")
    try:
        yield "value"
    finally:
        log.append("gen exit")


def with_generator_cm():
    log = []
    with cm_gen(log) as v:
        log.append(v)
    return log


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0

    def norm(self):
        return math.hypot(self.x, self.y)


class Pair(NamedTuple):
    a: int
    b: int

    def total(self):
        return self.a + self.b


def match_statement(v):
    match v:
        case 0 | 1:
            return "small"
        case [x, y, *rest]:
            return ("seq", x, y, rest)
        case {"kind": "circle", "r": r, **others}:
            return ("circle", r, others)
        case Point(x=0, y=yy):
            return ("on y axis", yy)
        case Point(x, y) if x == y:
            return ("diagonal", x)
        case Pair(a, b):
            return ("pair", a, b)
        case str() as s if len(s) > 3:
            return ("long str", s)
        case int(n):
            return ("int", n)
        case None:
            return "none"
        case _:
            return "other"


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Base:
    registry = []

    def __init__(self, v):
        self.v = v

    def describe(self):
        return f"Base({self.v})"

    @property
    def doubled(self):
        return self.v * 2

    @doubled.setter
    def doubled(self, value):
        self.v = value / 2

    @classmethod
    def make(cls, v):
        return cls(v)

    @staticmethod
    def helper(a, b):
        return a * b


class Derived(Base):
    def __init__(self, v, w):
        super().__init__(v)
        self.w = w

    def describe(self):
        inner = super().describe()
        return f"Derived[{inner}, {self.w}]"

    def closure_super(self):
        f = lambda: self.v  # noqa: E731  (captures self: first arg becomes a cell)
        return super().describe() + str(f())


def classes(v):
    b = Base.make(v)
    d = Derived(v, w=v + 1)
    d.doubled = 10
    out = [b.describe(), d.describe(), b.doubled, d.v, Base.helper(2, 3), d.helper(3, 4),
           isinstance(d, Base), type(d).__name__, d.closure_super()]
    p = Point(3.0, 4.0)
    pr = Pair(1, b=2)
    out += [p, p.norm(), pr, pr.total(), pr._replace(a=5), dataclasses.asdict(p)]

    class Local:
        def __init__(self):
            self.items = []

        def __call__(self, x):
            self.items.append(x)
            return len(self.items)

        def __len__(self):
            return 42

    loc = Local()
    out += [loc(1), loc(2), len(loc)]
    return out


def partials_and_wraps(x):
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            return ("wrapped", fn(*a, **k))

        return wrapper

    @deco
    def target(a, b=1):
        """doc"""
        return a + b

    p = functools.partial(varargs_target, 1, 2, d=0)
    return target(x, b=2), target.__name__, target.__doc__, p(3, 4, e=6)


def strings(name, n):
    s = f"{name!r:>10}|{n:05d}|{n / 3:.2f}|{name!s}|{name!a}"
    s2 = "%s-%d" % (name, n) + "{}{}".format(name, n)
    return s, s2, name.upper().split("A"), "-".join(str(i) for i in range(n)), name[1:3], name[::-1]


def dict_set_ops(n):
    d = {"a": 1, "b": 2}
    d["c"] = n
    del d["a"]
    d.update(x=5)
    merged = {**d, "y": 6, **{"z": 7}}
    s = {1, 2, 3}
    s |= {4}
    s -= {1}
    lst = [1, 2, 3, 4, 5]
    lst[1:3] = [9, 9, 9]
    del lst[0]
    lst[-1] += 100
    return sorted(d.items()), merged, s, lst, lst[1:-1:2], {*s, *lst}, [*lst, *s], (*lst, 0)


def unpacking(seq):
    a, *b = seq
    *c, d = seq
    e, *f, g = seq
    (h, i), j = (seq[0], seq[1]), seq[2]
    first, second, third = iter(seq[:3])
    return a, b, c, d, e, f, g, h, i, j, first, second, third


def bad_unpack(seq):
    a, b = seq
    return a, b


def bad_star_unpack(seq):
    a, b, *c, d = seq
    return a


def global_reads(x):
    global GLOBAL_SCALE
    old = GLOBAL_SCALE
    GLOBAL_SCALE = x
    r = GLOBAL_SCALE * len(GLOBAL_LIST)
    GLOBAL_SCALE = old
    return r, math.pi, len


def gen_squares(n):
    for i in range(n):
        yield i * i


def uses_generator(n):
    out = []
    for v in gen_squares(n):
        out.append(v)
    g = gen_squares(3)
    return out, next(g), list(g), max(x for x in gen_squares(n))


def imports_inside(x):
    import json
    import os.path
    from collections import OrderedDict
    from math import floor as fl

    return json.dumps({"a": x}), os.path.join("a", "b"), OrderedDict(a=1), fl(x + 0.5)


def deletes_and_unbound(x):
    y = x
    del y
    try:
        return y  # noqa: F821
    except UnboundLocalError as e:
        return str(e)


def assert_fail(x):
    assert x > 0, f"x must be positive, got {x}"
    return x


def slices_and_subscripts(xs):
    m = [[1, 2], [3, 4]]
    m[1][0] = 30
    return xs[1:], xs[:-1], xs[::2], xs[slice(1, None)], m, xs[len(xs) - 1]


def walrus_and_ternary(xs):
    return [y for x in xs if (y := x * 2) > 2], "big" if len(xs) > 2 else "small"


def boolean_ops(a, b):
    return a and b, a or b, (a and not b) or (b and not a), not (a or b)


def builtins_frame_sensitive(x):
    y = x + 1
    return sorted(locals().items()), globals() is GLOBALS_DICT, eval("x * y"), dir()


GLOBALS_DICT = globals()


def deletes_cells_and_globals(x):
    global TEMP_GLOBAL
    TEMP_GLOBAL = x
    v = TEMP_GLOBAL
    del TEMP_GLOBAL
    c = x

    def read():
        return c

    del c
    try:
        read()
    except NameError as e:
        msg = str(e)
    try:
        TEMP_GLOBAL  # noqa: B018
    except NameError as e:
        msg2 = str(e)
    return v, msg, msg2


def control_flow_in_handlers(n):
    out = []
    for i in range(n):
        try:
            if i == 1:
                continue
            if i == 3:
                break
            with Resource(out):
                if i == 2:
                    continue
                out.append(i)
        finally:
            out.append(("fin", i))
    while True:
        try:
            return out
        finally:
            out.append("last")


class Proxy:
    def __init__(self, target):
        self._target = target

    def __getattr__(self, name):
        return getattr(self._target, name)

    @property
    def upper_name(self):
        return self._target.upper()


def method_star_calls(xs):
    class A:
        def __init__(self, *args, **kwargs):
            self.args, self.kwargs = args, kwargs

        def m(self, *a, **k):
            return a, k

    class B(A):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, extra=1, **kwargs)

        @classmethod
        def build(cls, *a):
            return super(B, cls).__thisclass__.__name__, cls(*a)

    b = B(*xs, key="v")
    p = Proxy("abc")
    return (b.args, b.kwargs, b.m(*xs, **{"q": 1}), B.build(1)[0], p.upper_name, p.upper(),
            sorted(xs, key=lambda v: -v), list(map(lambda v: v * 2, xs)))


def exit_raises():
    class Bad:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            raise KeyError("from exit")

    try:
        with Bad():
            raise ValueError("body")
    except KeyError as e:
        return repr(e), type(e.__context__).__name__


def super_outside_class():
    def f(self):
        return super()

    return f(1)

CASES = [
    (arith, (7, 3)),
    (arith, (7.5, 2.5)),  # float <<= raises: same TypeError both ways
    (float_arith, (7.5, 2.5)),
    (compare_chain, (1, 2, 3)),
    (compare_chain, (3, 3, 1)),
    (loops, (5,)),
    (loops, (20,)),
    (comprehensions, (6,)),
    (closures, (3,)),
    (varargs_caller, ((1, 2, 3), {"d": 7, "q": 8})),
    (kwonly_defaults, (1,), {"c": 2}),
    (kwonly_defaults, (1,), {"b": 0, "c": 2}),
    (try_except, (0,)),
    (try_except, (1,)),
    (try_except, (2,)),
    (try_except, (3,)),
    (finally_return, (0,)),
    (finally_return, (1,)),
    (finally_return, (2,)),
    (nested_try, (1,)),
    (raises_custom, (1,)),
    (raises_custom, (0,)),
    (raises_in_callee, ({},)),
    (with_statement, (False, False)),
    (with_statement, (True, False)),
    (with_statement, (True, True)),
    (with_generator_cm, ()),
    (match_statement, (0,)),
    (match_statement, ([1, 2, 3, 4],)),
    (match_statement, ({"kind": "circle", "r": 2, "c": 0},)),
    (match_statement, (Point(0, 5),)),
    (match_statement, (Point(2, 2),)),
    (match_statement, (Point(2, 3),)),
    (match_statement, (Pair(3, 4),)),
    (match_statement, ("hello",)),
    (match_statement, ("hi",)),
    (match_statement, (42,)),
    (match_statement, (None,)),
    (match_statement, ({"kind": "square"},)),
    (fib, (12,)),
    (classes, (4,)),
    (partials_and_wraps, (3,)),
    (strings, ("thunder", 12)),
    (dict_set_ops, (3,)),
    (unpacking, ([1, 2, 3, 4, 5],)),
    (unpacking, ((1, 2, 3),)),
    (bad_unpack, ([1, 2, 3],)),
    (bad_unpack, ([1],)),
    (bad_unpack, (5,)),
    (bad_unpack, (range(3),)),
    (bad_unpack, ("a",)),
    (bad_star_unpack, ([1, 2],)),
    (global_reads, (5,)),
    (uses_generator, (5,)),
    (imports_inside, (3,)),
    (deletes_and_unbound, (1,)),
    (assert_fail, (1,)),
    (assert_fail, (-1,)),
    (slices_and_subscripts, ([1, 2, 3, 4],)),
    (walrus_and_ternary, ([1, 2, 3],)),
    (boolean_ops, (0, 3)),
    (boolean_ops, ([], "")),
    (builtins_frame_sensitive, (2,)),
    (lambda x, *, y=2: [x ** y for _ in range(2)], (3,)),
    (deletes_cells_and_globals, (3,)),
    (control_flow_in_handlers, (5,)),
    (method_star_calls, ([3, 1, 2],)),
    (exit_raises, ()),
    (super_outside_class, ()),
    (kwonly_defaults, (1,)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].__name__)
def test_matches_native(case):
    fn, args, *rest = case
    kwargs = rest[0] if rest else {}
    check(fn, *args, **kwargs)


# ----------------------------------------------------------------------------------------------
# argument binding errors have CPython's messages
# ----------------------------------------------------------------------------------------------
def _sig(a, b, /, c, *, d, e=1):
    return a


def _sig2(a, b=2):
    return a


@pytest.mark.parametrize("fn,args,kwargs", [
    (_sig, (1,), {}),
    (_sig, (1, 2), {"d": 1}),
    (_sig, (1, 2, 3), {}),
    (_sig, (1, 2, 3, 4), {"d": 1}),
    (_sig, (1,), {"b": 2, "c": 3, "d": 4}),
    (_sig, (1, 2, 3), {"c": 3, "d": 4}),
    (_sig, (1, 2, 3), {"d": 4, "zz": 1}),
    (_sig2, (1, 2, 3), {}),
    (_sig2, (), {}),
    (_sig2, (1,), {"a": 1}),
])
def test_binding_errors(fn, args, kwargs):
    native, interpreted = run_both(fn, *args, **kwargs)
    assert native[0] == "raise"
    assert interpreted == native


def test_call_function_ex_errors():
    def star_bad():
        return _sig2(*5)

    def kw_bad():
        return _sig2(**5)

    def dup():
        return _sig2(**{"a": 1}, **{"a": 2})

    for f in (star_bad, kw_bad, dup):
        native, interpreted = run_both(f)
        assert native[0] == "raise"
        assert interpreted == native


def test_exception_identity_and_chaining():
    def f():
        try:
            raise KeyError("k")
        except KeyError:
            raise ValueError("v")  # noqa: B904

    with pytest.raises(ValueError, match="v") as info:
        interpret(f, (), {})
    assert isinstance(info.value.__context__, KeyError)
    assert not info.value.__suppress_context__


def test_native_exception_chains_to_interpreted_handler():
    def f():
        try:
            1 / 0  # noqa: B018
        except ZeroDivisionError:
            {}["x"]  # noqa: B018

    with pytest.raises(KeyError) as info:
        interpret(f, (), {})
    assert isinstance(info.value.__context__, ZeroDivisionError)


def test_bare_raise_sees_callers_exception():
    def f():
        raise

    try:
        raise LookupError("outer")
    except LookupError:
        with pytest.raises(LookupError, match="outer"):
            interpret(f, (), {})
    with pytest.raises(RuntimeError, match="No active exception to reraise"):
        interpret(f, (), {})


def test_native_exception_caught_by_interpreted_code():
    def f(d):
        try:
            return d["nope"]
        except KeyError as e:
            return ("caught", e.args)

    assert interpret(f, ({},), {}).value == ("caught", ("nope",))


def test_bool_is_native():
    class NoBool:
        def __bool__(self):
            raise RuntimeError("ambiguous truth value")

    def f(x):
        if x:
            return 1
        return 0

    with pytest.raises(RuntimeError, match="ambiguous truth value"):
        interpret(f, (NoBool(),), {})

    class Falsy:
        def __bool__(self):
            return False

    assert interpret(f, (Falsy(),), {}).value == 0


def test_operators_use_dunders():
    class V:
        def __init__(self, v):
            self.v = v

        def __add__(self, o):
            return V(self.v + o.v)

        def __iadd__(self, o):
            self.v += 10 * o.v
            return self

        def __lt__(self, o):
            return self.v < o.v

        def __neg__(self):
            return V(-self.v)

        def __getitem__(self, k):
            return (self.v, k)

    def f(a, b):
        c = a + b
        a += b
        return c.v, a.v, a < b, (-b).v, b[1:2]

    assert interpret(f, (V(1), V(2)), {}).value == f(V(1), V(2))


def test_entry_points():
    class C:
        def __init__(self, k):
            self.k = k

        def m(self, x):
            return x * self.k

        def __call__(self, x):
            return x + self.k

    c = C(3)
    assert interpret(c.m, (2,), {}).value == 6
    assert interpret(c, (2,), {}).value == 5
    assert interpret(functools.partial(c.m, 5), (), {}).value == 15
    assert interpret(lambda: 7, (), {}).value == 7
    assert interpret(C, (9,), {}).value.k == 9
    assert interpret(len, ([1, 2],), {}).value == 2
    assert interpret(make_counter(), (), {"by": 4}).value == 4
    # a generator function's call returns a generator whose frame is interpreted when resumed
    gen = interpret(gen_squares, (4,), {}).value
    assert inspect.isgenerator(gen) and gen.__name__ == "gen_squares" and list(gen) == [0, 1, 4, 9]
    # kwargs may be omitted
    assert interpret(fib, (10,)).value == 55


def test_deep_recursion():
    def count(n):
        return 0 if n == 0 else 1 + count(n - 1)

    assert interpret(count, (60,), {}).value == 60


def test_enum_and_abc():
    import abc
    import enum

    class Color(enum.Enum):
        RED = 1

    class A(abc.ABC):
        @abc.abstractmethod
        def f(self): ...

    def f():
        return Color(1), Color["RED"].name

    def g():
        return A()

    check(f)
    check(g)


# ----------------------------------------------------------------------------------------------
# lookup
# ----------------------------------------------------------------------------------------------
def uses_sqrt(x):
    return math.sqrt(x) + 1


def level2(x):
    return math.sqrt(x)


def level1(x):
    return level2(x) * 2


def test_lookup_replaces_native_call():
    seen = []

    def lookup(fn):
        seen.append(fn)
        if fn is math.sqrt:
            return lambda x: ("fake sqrt", x)
        return None

    with pytest.raises(TypeError):  # ("fake sqrt", x) + 1
        interpret(uses_sqrt, (4,), {}, lookup=lookup)
    assert math.sqrt in seen

    def lookup2(fn):
        return (lambda x: -1.0) if fn is math.sqrt else None

    assert interpret(uses_sqrt, (4,), {}, lookup=lookup2).value == 0.0


def test_lookup_sees_nested_calls():
    seen = []

    def lookup(fn):
        seen.append(fn)
        return (lambda x: 100.0) if fn is math.sqrt else None

    # math.sqrt is only called two user frames deep: it can only be seen if level1/level2 are interpreted
    assert interpret(level1, (9,), {}, lookup=lookup).value == 200.0
    assert level2 in seen and math.sqrt in seen
    assert level1 not in seen  # the entry point itself is not looked up


def test_lookup_replaces_user_function():
    def lookup(fn):
        return (lambda x: "replaced") if fn is level2 else None

    assert interpret(level1, (9,), {}, lookup=lookup).value == "replacedreplaced"


def test_lookup_sees_methods_classes_and_partials():
    seen = []

    def lookup(fn):
        seen.append(fn)
        return None

    interpret(classes, (2,), {}, lookup=lookup)
    assert Base.make.__func__ in seen  # classmethod, unwrapped from the bound method
    assert Derived in seen and Derived.__init__ in seen and Base.__init__ in seen
    assert Base.describe in seen
    seen.clear()
    interpret(partials_and_wraps, (1,), {}, lookup=lookup)
    assert varargs_target in seen


def test_lookup_sees_context_manager_methods():
    seen = []

    def lookup(fn):
        seen.append(getattr(fn, "__func__", fn))
        return None

    interpret(with_statement, (False, False), {}, lookup=lookup)
    assert Resource.__enter__ in seen and Resource.__exit__ in seen


# ----------------------------------------------------------------------------------------------
# on_load
# ----------------------------------------------------------------------------------------------
class Holder:
    def __init__(self):
        self.value = 5


HOLDER = Holder()


def make_loader():
    captured = 10

    def loads(x):
        return HOLDER.value + captured + x

    return loads


def test_on_load_provenance():
    events = []

    def on_load(value, prov):
        assert isinstance(prov, Provenance)
        events.append((prov.kind, prov.name, prov.owner, prov.fn_name, prov.filename, prov.lineno))
        return value

    fn = make_loader()
    assert interpret(fn, (1,), {}, on_load=on_load).value == 16
    kinds = {(k, n) for k, n, *_ in events}
    assert ("global", "HOLDER") in kinds
    assert ("attr", "value") in kinds
    assert ("closure", "captured") in kinds
    for kind, name, owner, fn_name, filename, lineno in events:
        assert fn_name == "loads" and filename == __file__
        assert lineno == fn.__code__.co_firstlineno + 1
        if kind == "global":
            assert owner is globals()
        elif kind == "attr":
            assert owner is HOLDER
        else:
            assert owner is fn.__closure__[0]


def test_on_load_replaces_values():
    def on_load(value, prov):
        if prov.kind == "attr" and prov.name == "value":
            return 1000
        if prov.kind == "closure":
            return 0
        return value

    assert interpret(make_loader(), (1,), {}, on_load=on_load).value == 1001


def test_on_load_skips_builtins():
    names = []

    def f(x):
        return len(x) + GLOBAL_SCALE

    interpret(f, ([1],), {}, on_load=lambda v, p: names.append((p.kind, p.name)) or v)
    # the builtin `len` is not a global load; its call's result passes on_load as a native result
    assert names == [("native", "len"), ("global", "GLOBAL_SCALE")]


# ----------------------------------------------------------------------------------------------
# record / current_source_location
# ----------------------------------------------------------------------------------------------
def test_record():
    r = interpret(level1, (4,), {}, record=True)
    assert r.value == 4.0
    assert all(isinstance(i, dis.Instruction) for i in r.instructions)
    opnames = [i.opname for i in r.instructions]
    assert "RETURN_VALUE" in opnames and opnames.count("RETURN_VALUE") == 2
    fname = os.path.basename(__file__)
    assert r.log[0] == f"call level1 ({fname}:{level1.__code__.co_firstlineno})"
    assert f"call level2 ({fname}:{level2.__code__.co_firstlineno})" in r.log
    assert r.log[-1] == "return level1"
    assert "return level2" in r.log

    plain = interpret(level1, (4,), {})
    assert plain.instructions == [] and plain.log == []


def test_current_source_location():
    locations = []

    def probe(x):
        locations.append(current_source_location())
        return x

    def user(x):
        y = x + 1
        return probe(y)  # the call site line

    assert current_source_location() is None
    assert interpret(user, (1,), {}, lookup=lambda fn: probe if fn is probe else None).value == 2
    filename, lineno, fn_name = locations[0]
    assert filename == __file__ and fn_name == "user"
    assert lineno == user.__code__.co_firstlineno + 2
    assert current_source_location() is None


def test_nested_interpret_and_threads():
    def inner(x):
        return x * 2

    def outer(x):
        return interpret(inner, (x,), {}).value + 1

    assert interpret(outer, (3,), {}).value == 7

    results = []

    def worker(n):
        results.append(interpret(fib, (n,), {}).value)

    threads = [threading.Thread(target=worker, args=(10 + i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [fib(10 + i) for i in range(4)]


# ----------------------------------------------------------------------------------------------
# unsupported constructs
# ----------------------------------------------------------------------------------------------
async def async_fn(x):
    return x


def calls_async(x):
    coro = async_fn(x)
    return coro


def test_unsupported_async():
    with pytest.raises(InterpreterError) as info:
        interpret(calls_async, (1,), {})
    msg = str(info.value)
    assert msg.startswith("thunder interpreter: unsupported bytecode RETURN_GENERATOR in async_fn (")
    assert os.path.basename(__file__) in msg
    assert f":{async_fn.__code__.co_firstlineno}" in msg
    assert "coroutines" in msg
    assert isinstance(info.value, NotImplementedError)


def except_star():
    try:
        raise ExceptionGroup("eg", [ValueError(1)])
    except* ValueError:
        pass
    return "handled"


def test_unsupported_not_catchable_by_program():
    def f():
        try:
            except_star()
        except NotImplementedError:
            return "swallowed"
        except Exception:  # noqa: BLE001
            return "swallowed"

    with pytest.raises(InterpreterError, match="except\\*"):
        interpret(f, (), {})


def test_large_function_extended_args():
    # Long bodies need EXTENDED_ARG jumps and multi-byte exception-table varints.
    body = "\n".join(f"        acc += i * {k} if i % 3 else -{k}" for k in range(400))
    src = (
        "def big(n):\n"
        "    acc = 0\n"
        "    for i in range(n):\n"
        "      try:\n"
        f"{body}\n"
        "        if i == 2:\n"
        "            raise ValueError(i)\n"
        "      except ValueError:\n"
        "        acc -= 1\n"
        "    return acc\n"
    )
    ns = {}
    exec(compile(src, "<big>", "exec"), ns)
    big = ns["big"]
    assert any(i.opname == "EXTENDED_ARG" for i in dis.get_instructions(big))
    assert interpret(big, (5,), {}).value == big(5)


def test_exception_table_parser_matches_dis():
    from thunder.interpreter.frame import parse_exception_table

    for fn in (with_statement, nested_try, control_flow_in_handlers, try_except):
        ours = [tuple(e) for e in parse_exception_table(fn.__code__)]
        theirs = [(e.start, e.end, e.target, e.depth, e.lasti) for e in dis._parse_exception_table(fn.__code__)]
        assert ours == theirs


# ----------------------------------------------------------------------------------------------
# on_load: items, defaults, hasattr; on_call; special methods written in Python
# ----------------------------------------------------------------------------------------------
TABLE = {"k": [10, 20]}


def test_on_load_items_defaults_and_hasattr():
    events = []

    def on_load(value, prov):
        events.append((prov.kind, prov.name))
        return value

    def f(x, scale=3, *, shift=1):
        a, b = TABLE["k"]
        total = 0
        for v in TABLE["k"]:
            total += v
        return (x + a + b + total) * scale + shift + getattr(HOLDER, "missing", 0) + hasattr(HOLDER, "value")

    called = []
    assert interpret(f, (1,), {}, on_load=on_load, on_call=called.append).value == f(1)
    assert ("item", "k") in events and ("item", 0) in events and ("item", 1) in events
    assert ("default", "scale") in events and ("default", "shift") in events
    assert ("hasattr", "missing") in events and ("hasattr", "value") in events
    assert called == [f]


class Bag:
    def __init__(self):
        self.items = {"a": 1, "b": 2}

    def __getitem__(self, key):
        return self.items[key]

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def __contains__(self, key):
        return key in self.items


def test_special_methods_in_python_are_interpreted():
    def f(bag):
        n = 0
        if bag:
            n += len(bag) + bag["a"]
        return n + sum(1 for k in bag) + ("b" in bag)

    seen = []

    def on_load(value, prov):
        if prov.kind == "attr" and prov.name == "items":
            seen.append(prov.fn_name)
        return value

    assert interpret(f, (Bag(),), {}, on_load=on_load).value == f(Bag())
    assert {"__getitem__", "__len__", "__iter__", "__contains__"} <= set(seen)
    check(lambda: len(Bag()))
    check(lambda: Bag()["zz"])


# ----------------------------------------------------------------------------------------------
# exceptions keep the user's frames, and no reference cycles
# ----------------------------------------------------------------------------------------------
class CustomError(Exception):
    pass


def _raises_value_error(x):
    raise ValueError(f"bad {x}")


def _raises_key_error(x):
    return {}[x]


def _fails_assert(x):
    assert x < 0, "x must be negative"


def _stops(x):
    return next(iter([]))


def _raises_custom(x):
    raise CustomError(x)


def _converts(x):
    return int("not a number")


@pytest.mark.parametrize("raiser", [_raises_value_error, _raises_key_error, _fails_assert, _stops, _raises_custom,
                                    _converts])
def test_traceback_has_the_user_frames(raiser):
    import traceback

    def outer(x):
        y = x + 1
        return middle(y)

    def middle(y):
        return raiser(y) * 2

    with pytest.raises(Exception) as native:
        outer(1)
    with pytest.raises(type(native.value)) as info:
        interpret(outer, (1,))
    frames = [(f.name, f.lineno) for f in traceback.extract_tb(info.value.__traceback__)]
    expected = [(f.name, f.lineno) for f in traceback.extract_tb(native.value.__traceback__)][-3:]
    assert frames[-3:] == expected
    interpreter_dir = os.path.dirname(sys.modules["thunder.interpreter"].__file__)
    assert not [f for f in traceback.extract_tb(info.value.__traceback__)[-3:]
                if f.filename.startswith(interpreter_dir)]
    text = "".join(traceback.format_exception(info.value))
    assert "return raiser(y) * 2" in text  # the source lines print as in eager


def _inner_raises():
    raise KeyError("k")


def _through_finally():
    try:
        _inner_raises()
    finally:
        cleanup = 1  # noqa: F841


def _bare_reraise():
    try:
        _inner_raises()
    except KeyError:
        handled = 2  # noqa: F841
        raise


def _raise_caught():
    try:
        _inner_raises()
    except KeyError as e:
        raise e


def _through_with():
    with contextlib.nullcontext():
        _inner_raises()


def _chained():
    try:
        _inner_raises()
    except KeyError as e:
        raise ValueError("wrapped") from e


@pytest.mark.parametrize("fn", [_through_finally, _bare_reraise, _raise_caught, _through_with, _chained])
def test_handled_and_reraised_exceptions_have_eagers_traceback(fn):
    import traceback

    def user_frames(e):
        return [(f.name, f.lineno) for f in traceback.extract_tb(e.__traceback__) if f.filename == __file__
                and f.name != "test_handled_and_reraised_exceptions_have_eagers_traceback"]

    with pytest.raises(Exception) as native:
        fn()
    with pytest.raises(type(native.value)) as info:
        interpret(fn)
    assert user_frames(info.value) == user_frames(native.value)
    if native.value.__cause__ is not None:
        assert user_frames(info.value.__cause__) == user_frames(native.value.__cause__)


def test_exception_does_not_keep_the_call_alive():
    import gc
    import weakref

    class Payload:
        pass

    def inner(p):
        keep = [p]  # noqa: F841 - a local of the raising frame
        raise ValueError("boom")

    def f(p):
        try:
            inner(p)
        except ValueError:
            raise

    payload = Payload()
    ref = weakref.ref(payload)
    gc.disable()
    try:
        try:
            interpret(f, (payload,))
        except ValueError:
            pass
        del payload
        assert ref() is None  # freed by reference counting: no cycle holds it
    finally:
        gc.enable()


# ----------------------------------------------------------------------------------------------
# generators: their frames are interpreted on every resumption, with CPython's semantics
# ----------------------------------------------------------------------------------------------
def _squares(n):
    for i in range(n):
        yield i * i
    return "done"


def _gen_send():
    def acc():
        total = 0
        while True:
            x = yield total
            if x is None:
                return total
            total += x
    g = acc()
    next(g)
    out = [g.send(1), g.send(5)]
    try:
        g.send(None)
    except StopIteration as e:
        out.append(e.value)
    return out


def _gen_throw_and_finally():
    log = []

    def gen():
        try:
            yield 1
            yield 2
        except ValueError as e:
            yield ("caught", str(e))
        finally:
            log.append("finally")
    g = gen()
    out = [next(g), g.throw(ValueError("boom"))]
    out.append(next(g, "exhausted"))
    return out, log


def _gen_close():
    log = []

    def gen():
        try:
            yield 1
        finally:
            log.append("closed")
    g = gen()
    next(g)
    g.close()
    return log, list(g)


def _gen_stop_iteration_inside():
    def gen():
        yield 1
        raise StopIteration("x")
    return list(gen())


def _gen_yield_from():
    def inner():
        try:
            yield "a"
        except ValueError:
            yield "inner caught"
        return "inner ret"

    def outer():
        r = yield from inner()
        yield ("outer got", r)
        yield from [1, 2]
        yield from (c for c in "xy")

    def outer2():
        try:
            yield from iter([1])
        except ValueError:
            yield "outer caught"
    g = outer()
    out = [next(g), g.throw(ValueError()), *g]
    g2 = outer2()
    return out, [next(g2), g2.throw(ValueError())]


def _gen_yield_from_close():
    log = []

    def inner():
        try:
            yield 1
        finally:
            log.append("inner closed")

    def outer():
        try:
            yield from inner()
        finally:
            log.append("outer closed")
    g = outer()
    next(g)
    g.close()
    return log


def _genexprs(xss):
    return ([sum(x for x in xs if x % 2) for xs in xss], dict((k, v) for k, v in zip("ab", _squares(5))),
            all(isinstance(x, int) for x in xss[0]), list(zip(_squares(3), (c for c in "xyz"))))


def _gen_before_start():
    g = _squares(3)
    try:
        g.send(1)
    except TypeError as e:
        first = str(e)
    try:
        g.throw(ValueError("early"))
    except ValueError as e:
        return first, str(e), list(g)


@pytest.mark.parametrize("fn,args", [
    (_gen_send, ()), (_gen_throw_and_finally, ()), (_gen_close, ()),
    (_gen_stop_iteration_inside, ()), (_gen_yield_from, ()), (_gen_yield_from_close, ()),
    (_genexprs, ([[1, 2, 3], [5]],)), (_gen_before_start, ()),
])
def test_generators_behave_as_in_cpython(fn, args):
    def outcome(call):
        try:
            return "ok", call()
        except Exception as e:  # noqa: BLE001 - compared with CPython's
            return "raised", type(e), str(e)

    assert outcome(lambda: interpret(fn, args, {}).value) == outcome(lambda: fn(*args))


def test_generator_frames_are_interpreted():
    seen = []

    def lookup(fn):
        if fn is isinstance:
            return lambda obj, cls: (seen.append(obj), isinstance(obj, cls))[1]
        return None

    def f(xs):
        return sum(isinstance(x, int) for x in xs)  # the generator runs inside native sum()

    assert interpret(f, ([1, "a", 2],), {}, lookup=lookup).value == 2
    assert seen == [1, "a", 2]


def test_generator_expressions_of_torch_modules_are_interpreted():
    """torch's generator functions (Module.parameters()) run natively, its generator expressions
    are interpreted: `any(not isinstance(x, torch.Tensor) for x in leaves)` in torch's own code
    (associative_scan) must see what the code around it sees (a proxy is a tensor there)."""
    torch = pytest.importorskip("torch")
    where = os.path.join(os.path.dirname(torch.__file__), "_probe_of_thunder_tests.py")  # (never written)
    ns = {}
    exec(compile("def f(xs):\n    return all(x > 0 for x in xs)\n\n\ndef g(xs):\n    yield from xs\n", where, "exec"), ns)
    seen = []

    def on_call(fn):
        seen.append(fn.__code__.co_name)

    assert interpret(ns["f"], ([1, 2],), {}, on_call=on_call).value is True
    assert seen == ["f", "<genexpr>"]
    seen.clear()
    assert list(interpret(ns["g"], ([3],), {}, on_call=on_call).value) == [3]
    assert seen == []


def _exc_info_everywhere():
    import traceback

    seen = [sys.exc_info()[0]]
    try:
        raise KeyError("inner")
    except KeyError:
        seen.append(sys.exc_info()[0])
        seen.append(type(sys.exception()).__name__ if hasattr(sys, "exception") else "KeyError")
        seen.append(traceback.format_exc().strip().splitlines()[-1])
        try:
            raise ValueError("nested")
        except ValueError as e:
            seen.append(sys.exc_info()[1] is e)
        seen.append(sys.exc_info()[0])  # (the outer handler's again)
    seen.append(sys.exc_info())
    return seen


def test_sys_exc_info_and_format_exc_in_except_blocks():
    # (they ran natively and saw no exception: the interpreter handles exceptions outside Python's
    # own except blocks)
    assert check(_exc_info_everywhere) == ("ok", [None, KeyError, "KeyError", "KeyError: 'inner'", True, KeyError,
                                                  (None, None, None)])


def test_stack_functions_run_natively_without_guarding_linecache():
    # torch.cuda's lazy calls keep traceback.format_stack() (Reformer's seeding reaches it):
    # interpreted, every read of linecache's cache of all files' lines was a guard with a deep
    # snapshot (a Reformer training step compiled for 8 minutes)
    import traceback

    import torch

    import thunder

    def fn(x):
        lines = traceback.format_stack()
        return x * (len(lines) > 0)

    jf = thunder.jit(fn)
    torch.testing.assert_close(jf(torch.ones(2)), torch.ones(2))
    assert "linecache" not in str(thunder.last_prologue_traces(jf)[0])
