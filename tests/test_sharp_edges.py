"""Python constructs inside thunder.jit: they run as in eager, or raise a clear error."""
import contextlib
import dataclasses
import functools
import random
import warnings

import pytest
import torch

import thunder
from jit_vs_eager import matches_eager


def same(fn, *args):
    """thunder.jit(fn)(*args) equals fn(*args), including mutations of the (cloned) inputs."""
    matches_eager(fn, lambda: [a.clone() if isinstance(a, torch.Tensor) else a for a in args])


# ---- in-place ops
def test_inplace_on_inputs_is_seen_by_the_caller():
    def f(x, buf):
        buf.add_(x)
        buf.mul_(2)
        x.clamp_(min=0)
        return buf.sum()

    same(f, torch.randn(4), torch.randn(4))


def test_inplace_on_intermediates_and_augmented_assignment():
    def f(x):
        y = x * 2
        y.add_(1)
        y += x
        y.masked_fill_(y > 1, 0.0) if hasattr(torch.Tensor, "masked_fill_") and False else None
        y.zero_() if False else y.sub_(0.5)
        return y

    same(f, torch.randn(3, 3))


def test_zero_fill_copy():
    def f(x, out):
        out.zero_()
        out.fill_(2.0)
        out.copy_(x * 3)
        return out + 1

    same(f, torch.randn(5), torch.empty(5))


def test_mutating_a_clone_does_not_leak():
    def f(x):
        c = x.clone()
        c.mul_(10)
        return c

    x = torch.randn(3)
    before = x.clone()
    torch.testing.assert_close(thunder.jit(f)(x), before * 10)
    torch.testing.assert_close(x, before)


def test_inplace_on_views_reaches_the_base_and_other_views():
    def zero_row(x):
        x[0].zero_()
        return x * 2

    def flat_add(x):
        x.view(-1).add_(1)
        return x

    def transposed_mul(x):
        x.t().mul_(2)
        return x.sum()

    def base_then_view(x):
        y = x * 1
        v = y[1:]
        y.add_(10)  # v sees the update, as in eager
        return v * 1

    def split_fill_setitem(x):
        y = x.clone()
        a, b = y.split(2)
        b.fill_(3)
        y[0] = 7
        return y + a.sum()

    def setitem_chain(x):
        x[:, 1] = x[:, 0] * 2
        x[0] += 1
        z = x.transpose(0, 1).unsqueeze(0)
        z[0, 1] = 5
        return x.clone()

    for fn in (zero_row, flat_add, transposed_mul, base_then_view, split_fill_setitem, setitem_chain):
        same(fn, torch.randn(4, 3))


def test_out_arguments():
    def f(a, b, c):
        torch.add(a, b, out=c)
        torch.mul(a, 2, out=a)
        return c * 1

    same(f, torch.randn(3), torch.randn(3), torch.empty(3).zero_())
    with pytest.raises(NotImplementedError, match="out=.*an input of the function"):
        thunder.jit(lambda a, c: torch.add(a, a, out=c))(torch.randn(3), torch.empty(2))


def test_out_tensor_made_inside_is_resized_as_eager():
    def f(a, b):
        c = torch.empty(0)  # the usual form: eager resizes it silently
        torch.add(a, b, out=c)
        d = torch.empty(2, dtype=torch.float64)  # with elements: eager warns, resizes, keeps its dtype
        torch.mul(c, 2, out=d)
        return c, d * 3, c.shape[0] * d.shape[1]

    a, b = torch.randn(3, 4), torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = thunder.jit(f)(a, b)
    expected = f(a, b)
    assert [str(w.message)[:60] for w in seen] == ["An output with one or more elements was resized since it had"]
    assert "shape [2], which does not match the required output shape [3, 4]" in str(seen[0].message)
    assert seen[0].filename == __file__
    for g, e in zip(got[:2], expected[:2]):
        assert g.dtype == e.dtype and torch.equal(g, e)
    assert got[2] == expected[2] == 12


def test_out_tensor_with_views_is_not_resized():
    def f(a):
        c = torch.empty(2)
        v = c[:1]
        torch.add(a, a, out=c)
        return v

    with pytest.raises(NotImplementedError, match="out=.*a tensor that has views"):
        thunder.jit(f)(torch.randn(3))


def test_setitem_gradients():
    def f(x, v):
        y = x * 2
        y[1:, 0] = v * 3
        return (y * y).sum()

    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(3, dtype=torch.float64, requires_grad=True)
    g = torch.autograd.grad(thunder.jit(f)(x, v), (x, v))
    e = torch.autograd.grad(f(x, v), (x, v))
    for a, b in zip(g, e):
        torch.testing.assert_close(a, b)


def test_setitem_value_with_leading_size_1_dims():
    # eager drops a value's leading size-1 dims beyond the target's rank (found by the fuzzer:
    # thunder raised "shape mismatch")
    def f(x, v):
        y = x * 2
        y[0] = v
        y[1:, :1] = v * 3
        return y * y

    x = torch.randn(3, 3, 2, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 1, 2, dtype=torch.float64, requires_grad=True)
    out, expected = thunder.jit(f)(x, v), f(x, v)
    torch.testing.assert_close(out, expected)
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (x, v), g), torch.autograd.grad(expected, (x, v), g)):
        torch.testing.assert_close(a, b)
    with pytest.raises(RuntimeError, match="shape mismatch"):  # a leading dim of 2 is still an error
        thunder.jit(f)(x, torch.randn(2, 1, 2, dtype=torch.float64))


def test_inplace_errors_like_eager():
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        thunder.jit(lambda x: x.add_(1))(torch.randn(2, requires_grad=True))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        thunder.jit(lambda x: x.expand(3, 2).add_(1))(torch.randn(1, 2))


# ---- grad mode
def test_no_grad_enable_grad_set_grad_enabled():
    def f(x, w):
        with torch.no_grad():
            s = (x * w).sum()
        with torch.set_grad_enabled(False):
            t = w * 3
        with torch.enable_grad():
            y = x * w * s + t
        return y.sum(), t

    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    jf = thunder.jit(f)
    out, t = jf(x, w)
    grads = torch.autograd.grad(out, (x, w))
    out_e, t_e = f(x, w)
    expected = torch.autograd.grad(out_e, (x, w))
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e)
    assert t.requires_grad == t_e.requires_grad


# ---- control constructs
def test_try_except_finally_and_raise():
    def f(x, n):
        log = []
        try:
            if n > 2:
                raise ValueError(f"n too large: {n}")
            y = x * n
        except ValueError:
            y = x
        finally:
            log.append(1)
        return y + len(log)

    same(f, torch.randn(2), 1)
    same(f, torch.randn(2), 5)

    def g(x):
        raise KeyError("missing key")

    with pytest.raises(KeyError, match="missing key"):
        thunder.jit(g)(torch.randn(2))


def test_user_context_manager_generators_closures_nonlocal():
    events = []

    @contextlib.contextmanager
    def scope(name):
        events.append(name)
        yield 2
        events.append("/" + name)

    def pairs(xs):
        for a, b in zip(xs, xs[1:]):
            yield a * b

    def f(x, w):
        count = 0

        def bump(t):
            nonlocal count
            count += 1
            return t + count

        with scope("s") as k:
            y = x * k
        ys = [bump(p) for p in pairs([y, w, y])]
        return sum(ys) + count

    same(f, torch.randn(3), torch.randn(3))
    assert events[-2:] == ["s", "/s"]


def test_partial_wraps_args_kwargs_lambda_recursion_match():
    def scaled(x, *, scale):
        return x * scale

    def deco(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            return fn(*args, **kwargs) + 1

        return inner

    @deco
    def g(x, *rest, **kw):
        return x + sum(rest) + kw.get("b", 0)

    def power(x, n):
        return x if n == 1 else x * power(x, n - 1)

    def f(x, mode):
        h = functools.partial(scaled, scale=3)
        match mode:
            case "a":
                y = h(x)
            case _:
                y = (lambda t: t - 1)(x)
        return g(y, x, 2, b=x) + power(x, 3)

    same(f, torch.randn(3), "a")
    same(f, torch.randn(3), "b")


@dataclasses.dataclass
class Config:
    scale: float
    shift: float


def test_classes_super_properties_dataclass_inputs():
    class Base:
        def __init__(self, k):
            self.k = k

        def apply(self, x):
            return x * self.k

    class Child(Base):
        def __init__(self, k):
            super().__init__(k + 1)

        @property
        def double(self):
            return self.k * 2

        @staticmethod
        def shift(x):
            return x - 1

        def apply(self, x):
            return self.shift(super().apply(x)) + self.double

    def f(x, cfg):
        return Child(2).apply(x) * cfg.scale + cfg.shift

    same(f, torch.randn(3), Config(2.0, 0.5))


# ---- values from outside
SCALE = torch.tensor(2.0)
FACTOR = 3


def test_globals_are_read_at_call_time():
    global SCALE, FACTOR

    def f(x):
        return x * SCALE * FACTOR

    jf = thunder.jit(f)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x), f(x))
    SCALE = torch.tensor(5.0)
    torch.testing.assert_close(jf(x), f(x))
    SCALE = torch.tensor(2.0)


def test_closure_tensor_is_read_at_call_time():
    w = torch.randn(3)

    def f(x):
        return x * w

    jf = thunder.jit(f)
    x = torch.randn(3)
    jf(x)
    w.mul_(2)
    torch.testing.assert_close(jf(x), f(x))


# ---- sharp edges
def test_python_random_and_print_are_sharp_edges():
    # (scalar draws are drawn by the program on every call: tests/test_python_draws.py; a draw of
    # a sequence's element runs while tracing)
    def f(x):
        return x * random.choice([2.0, 3.0])

    with pytest.raises(thunder.JITSharpEdgeError, match=r"random.choice\(\) at .*test_sharp_edges.py"):
        thunder.jit(f, sharp_edges="error")(torch.randn(2))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        jf = thunder.jit(f, sharp_edges="warn")
        jf(torch.randn(2))
        jf(torch.randn(3))
    assert len([x for x in w if "random.choice()" in str(x.message)]) == 1
    jf = thunder.jit(lambda x: (print("tracing"), x + 1)[1], sharp_edges="allow")
    torch.testing.assert_close(jf(torch.ones(1)), torch.full((1,), 2.0))
    # without sharp_edges given, a random draw that runs while tracing warns (its value, the same
    # on every call, would silently differ from eager's new draws: a mixup's weights drawn with a
    # size); "allow" keeps it quiet
    np = pytest.importorskip("numpy")

    def mixup(x):
        return x * float(np.random.beta(0.4, 0.4, size=1)[0])
    for option, warns in [({}, 1), ({"sharp_edges": "allow"}, 0)]:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            thunder.jit(mixup, **option)(torch.randn(2))
        assert len([x for x in w if "numpy.random.beta()" in str(x.message)]) == warns


def test_autocast_cpu_bfloat16_inside_and_around():
    import torch.nn.functional as F

    def f(a, w, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = F.gelu(F.linear(a, w, b))
            s = torch.softmax(h, -1)
            c = torch.cat([h, a], -1)
            m = torch.bmm(a[None], w.t()[None])
        return h, s, c, m, a @ w.t()

    a, w, b = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6)
    for x, y in zip(thunder.jit(f)(a, w, b), f(a, w, b)):
        assert x.dtype == y.dtype
        torch.testing.assert_close(x, y, rtol=1e-2, atol=1e-2)
    jf = thunder.jit(lambda a, w: a @ w)
    assert jf(a, w.t()).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert jf(a, w.t()).dtype == torch.bfloat16  # the ambient region is part of the cache key
    assert thunder.cache_misses(jf) == 2


def test_profiler_record_function():
    def f(x):
        with torch.profiler.record_function("my_region"):
            return x * 2

    same(f, torch.randn(3))


def test_attribute_writes_on_modules_and_input_objects_are_replayed():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            y = self.lin(x)
            self.last = y.detach() * 2
            self.mode = "done"
            return y

    m = Counter()
    tm = thunder.jit(m)
    x = torch.randn(2, 3)
    for i in range(1, 4):
        tm(x)
        assert m.calls == i and m.mode == "done"
        assert type(m.last) is torch.Tensor
        torch.testing.assert_close(m.last, m.lin(x).detach() * 2)

    class Box:
        pass

    def f(x, box):
        box.t = x * 3
        return x + 1

    box = Box()
    jf = thunder.jit(f)
    for k in range(2):
        x = torch.full((2,), float(k))
        jf(x, box)
        torch.testing.assert_close(box.t, x * 3)
    assert thunder.cache_misses(jf) == 1


COUNTER = 0


def test_global_writes_are_sharp_edges():
    def f(x):
        global COUNTER
        COUNTER += 1
        return x * 2

    with pytest.raises(thunder.JITSharpEdgeError, match="global 'COUNTER'"):
        thunder.jit(f, sharp_edges="error")(torch.randn(2))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        thunder.jit(f, sharp_edges="warn")(torch.randn(2))
    assert any("COUNTER" in str(x.message) for x in w)


def test_functionalize_pass_shows_the_write_into_the_input():
    def f(x, buf):
        buf.add_(x)
        return x * 2

    jf = thunder.jit(f)
    jf(torch.ones(2), torch.zeros(2))
    traces = thunder.last_traces(jf)
    assert '"ltorch.copy_"' in traces[0].to_mlir()
    assert traces[1].producer == "thunder-functionalize"
    assert "thunder.mutated_inputs = array<i64: 1>" in traces[1].to_mlir()
    assert "torch.Tensor.add_(buf, x)" in str(traces[-1])  # (the program updates it in place: runtime/reinplace.py)


def test_nonlocal_writes_to_variables_captured_from_outside():
    def make():
        count = 0
        last = None

        def f(x):
            nonlocal count, last
            count += 1
            last = x * count
            return x + 1

        return f, lambda: (count, last)

    f, state = make()
    jf = thunder.jit(f)
    for i in range(1, 4):
        jf(torch.ones(2))
        count, last = state()
        assert count == i
        torch.testing.assert_close(last, torch.full((2,), float(i)))


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    y: torch.Tensor
    scale: float = 1.0


@dataclasses.dataclass
class Result:
    loss: torch.Tensor
    n: int


def test_dataclasses_as_inputs_and_outputs():
    def f(b):
        return Result(((b.x - b.y) ** 2).mean() * b.scale, b.x.shape[0])

    jf = thunder.jit(f)
    for _ in range(3):  # a new instance each call: same structure, no recompile
        b = Batch(torch.randn(4), torch.randn(4), 2.0)
        out, expected = jf(b), f(b)
        assert type(out) is Result and out.n == expected.n
        torch.testing.assert_close(out.loss, expected.loss)
    assert thunder.cache_misses(jf) == 1
    jf(Batch(torch.randn(4), torch.randn(4), 3.0))
    assert thunder.cache_misses(jf) == 2  # a changed scalar field recompiles
    with pytest.raises(ValueError, match="Cannot unpack object of type Batch"):
        thunder.functional.jit(f)(b)


def test_yield_from_classmethod_and_objects_with_tensor_attributes():
    class Scaler:
        factor = 3

        def __init__(self, w):
            self.w = w

        @classmethod
        def make(cls, w):
            return cls(w)

        def apply(self, x):
            return x * self.w * self.factor

    def inner(xs):
        for x in xs:
            yield x + 1

    def outer(xs):
        yield from inner(xs)
        yield xs[0] * 0

    def f(x, obj):
        parts = list(outer([x, x * 2]))
        return Scaler.make(obj.w).apply(sum(parts))

    class Holder:
        def __init__(self, w):
            self.w = w

    holder = Holder(torch.randn(3))
    jf = thunder.jit(f)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x, holder), f(x, holder))
    holder.w = torch.randn(3)  # a tensor attribute of an input object is read at call time
    torch.testing.assert_close(jf(x, holder), f(x, holder))
    assert thunder.cache_misses(jf) == 1


# ---- errors keep the user's line
class ModelError(Exception):
    pass


def _user_failure(kind, x):
    if kind == "value":
        raise ValueError("bad value")
    if kind == "key":
        return {"a": x}["b"]
    if kind == "assert":
        assert x.shape[0] > 10, "too short"
    if kind == "stop":
        return next(iter(()))
    if kind == "torch":
        return x + torch.ones(5)  # shapes do not broadcast
    raise ModelError("custom")


@pytest.mark.parametrize("kind", ["value", "key", "assert", "stop", "torch", "custom"])
def test_exceptions_from_user_code_carry_the_user_frames(kind):
    import traceback

    def forward(x):
        y = x * 2
        return _user_failure(kind, y)

    with pytest.raises(Exception) as eager:
        forward(torch.ones(3))
    with pytest.raises(type(eager.value)) as info:
        thunder.jit(forward)(torch.ones(3))
    frames = [(f.filename, f.name) for f in traceback.extract_tb(info.value.__traceback__)]
    assert (__file__, "forward") in frames and (__file__, "_user_failure") in frames
    line = [f.lineno for f in traceback.extract_tb(info.value.__traceback__) if f.name == "_user_failure"][0]
    eager_line = [f.lineno for f in traceback.extract_tb(eager.value.__traceback__) if f.name == "_user_failure"][0]
    assert line == eager_line


def test_an_exception_does_not_keep_the_inputs_alive():
    import gc
    import weakref

    def f(x, w):
        y = x * w
        raise ValueError("boom")

    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    refs = [weakref.ref(x), weakref.ref(w)]
    jf = thunder.jit(f)
    gc.disable()
    try:
        try:
            jf(x, w)
        except ValueError:
            pass
        del x, w
        assert [r() for r in refs] == [None, None]  # no reference cycle keeps them
    finally:
        gc.enable()


# ---- Python values as inputs: every value round-trips through the prologue
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 2 ** 62, 1 + 2j, -1j, True],
                         ids=str)
def test_python_number_inputs_round_trip(value):
    jf = thunder.jit(lambda x, s: x * s)
    x = torch.tensor([1.0, -2.0, 0.0])
    for _ in range(2):
        out, expected = jf(x, value), x * value
        assert out.dtype == expected.dtype
        torch.testing.assert_close(out, expected, equal_nan=True)
        assert torch.equal(torch.signbit(out.real), torch.signbit(expected.real))
    assert thunder.cache_misses(jf) == 1


def test_number_inputs_that_compare_equal_are_different_entries():
    jf = thunder.jit(lambda x, s: x * s, fusion="always")
    x = torch.ones(2)
    for s in (0.0, -0.0, 1, 1.0, True, 0.0, -0.0):
        out, expected = jf(x, s), x * s
        assert out.dtype == expected.dtype and torch.equal(torch.signbit(out), torch.signbit(expected)), s
    assert thunder.cache_misses(jf) == 5


def test_huge_ints_raise_eagers_overflow_error():
    for v in (2 ** 70, -2 ** 64):
        with pytest.raises(OverflowError) as eager:
            torch.ones(2) * v
        with pytest.raises(OverflowError, match=str(eager.value)):
            thunder.jit(lambda x, s: x * s)(torch.ones(2), v)


def test_numpy_scalars_as_torch_reads_them():
    np = pytest.importorskip("numpy")
    x, xi = torch.arange(1.0, 4.0), torch.arange(1, 4, dtype=torch.int32)
    cases = [(x, np.float32(2.5)), (xi, np.float32(2.5)), (xi, np.int64(3)), (x, np.float64(-0.0)),
             (x, np.complex128(1 + 1j)), (xi, np.bool_(True))]
    for t, s in cases:
        jf = thunder.jit(lambda t, s: t * s + torch.full((2,), s).sum())
        for _ in range(2):
            out, expected = jf(t, s), t * s + torch.full((2,), s).sum()
            assert out.dtype == expected.dtype, (s, out.dtype, expected.dtype)
            torch.testing.assert_close(out, expected)
        assert thunder.cache_misses(jf) == 1
    jf = thunder.jit(lambda t, s: t * s)
    jf(x, np.float32(2.0))
    jf(x, np.float64(2.0))  # another type: another entry
    assert thunder.cache_misses(jf) == 2


def test_complex_scalars():
    x = torch.arange(1.0, 4.0)
    for fn in (lambda x: x * (1 + 2j), lambda x: x.add(2j, alpha=2), lambda x: torch.full((2,), 1 - 1j) + x[:2],
               lambda x: (x.to(torch.int64) + 1j).abs()):
        out, expected = thunder.jit(fn)(x), fn(x)
        assert out.dtype == expected.dtype
        torch.testing.assert_close(out, expected)


# ---- views whose validity depends on strides
def test_view_of_a_non_contiguous_tensor_raises_as_eager():
    for fn in (lambda a: a.t().view(-1), lambda a: (a.t() + 1).view(6), lambda a: a[:, :2].view(4)):
        with pytest.raises(RuntimeError) as eager:
            fn(torch.ones(2, 3))
        with pytest.raises(RuntimeError, match=r"view size is not compatible"):
            thunder.jit(fn)(torch.ones(2, 3))
        assert "view size is not compatible" in str(eager.value)
    same(lambda a: a.t().reshape(-1) * 1, torch.randn(2, 3))
    same(lambda a: a.t().contiguous().view(-1) * 1, torch.randn(2, 3))


def test_reshape_and_contiguous_copy_where_eager_copies():
    def f(x):
        y = x.t().reshape(-1)
        y.add_(1)  # a copy in eager: x unchanged
        z = x.t().contiguous()
        z.mul_(2)  # a copy
        w = x.reshape(-1)
        w.sub_(3)  # a view: reaches x
        return x.clone(), y, z

    same(f, torch.randn(2, 3))


COLLECTED, STATE = [], {}


def test_changes_of_containers_that_outlive_the_call():
    # a tensor of the trace stored in a dict from outside is written by the program on every call
    # (it left the proxy standing for it there, then was refused: an optimizer's state); a
    # change of a list other than an append still is refused
    def remember(x):
        STATE["last"] = x * 2
        return x + 1

    jf = thunder.jit(remember)
    for k in range(3):
        x = torch.randn(2)
        torch.testing.assert_close(jf(x), x + 1)
        torch.testing.assert_close(STATE.pop("last"), x * 2)  # (written again by each call)

    def replace(x):
        COLLECTED.append(x)
        COLLECTED[0] = x * 2
        return x

    with pytest.raises(NotImplementedError, match="an item of a list.* outlives the call"):
        thunder.jit(replace)(torch.randn(2))
    assert COLLECTED == []

    def count(x):  # (plain values: a change made while tracing only, as a global write)
        STATE["calls"] = STATE.get("calls", 0) + 1
        return x * 2

    with pytest.raises(thunder.JITSharpEdgeError, match="writing an item of a dict"):
        thunder.jit(count, sharp_edges="error")(torch.randn(2))
    local = thunder.jit(lambda x: [x * 2, {"k": x}])  # (containers the call makes: as eager)
    out = local(torch.ones(2))
    torch.testing.assert_close(out[0], torch.full((2,), 2.0))


def test_appends_to_a_list_that_outlives_the_call_are_replayed():
    # (a forward hook collecting activations for a distillation or feature loss)
    def make(store):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        model[1].register_forward_hook(lambda module, args, out: store.append(out))
        return model

    features, expected_features = [], []
    model, reference = make(features), make(expected_features)
    jitted = thunder.jit(model)
    for _ in range(3):
        features.clear(), expected_features.clear()
        x = torch.randn(3, 4)
        out, expected = jitted(x), reference(x)
        assert len(features) == len(expected_features) == 1 and type(features[0]) is torch.Tensor
        torch.testing.assert_close(features[0], expected_features[0])
        (out.sum() + features[0].pow(2).sum()).backward()
        (expected.sum() + expected_features[0].pow(2).sum()).backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    assert thunder.compile_stats(jitted).cache_misses == 1  # (cleared between calls: one program)

    def two(x):  # two appends per call to a list that keeps growing: in order, on every call
        COLLECTED.append(x * 2)
        COLLECTED.append(x + 1)
        return x.sum()

    jitted_two = thunder.jit(two)
    for i in range(3):
        jitted_two(torch.full((2,), float(i)))
    assert [t.tolist() for t in COLLECTED] == [[0, 0], [1, 1], [2, 2], [2, 2], [4, 4], [3, 3]]
    COLLECTED.clear()
