"""Creation and conversion ops (thunder/ops/creation.py) against eager, traced and decomposed.

torch.zeros(2, 3) and friends take no tensors, so __torch_function__ never sees them while the
harness traces; the interpreter maps them through the registry's aliases. These tests call the
registry ops directly (ltorch.zeros(...) is what the interpreter calls for torch.zeros(...))."""
import pytest
import torch
import thunder

from op_harness import check, trace_module
from thunder.ops import creation as C
from thunder.ops import registry

torch.manual_seed(0)


def ltorch(fn):
    return registry.lookup_callable(fn)


@pytest.mark.parametrize("name", ["zeros", "ones"])
def test_zeros_ones(name):
    op, eager = getattr(C, name), getattr(torch, name)
    assert ltorch(eager) is op
    for args, kw in [((2, 3), {}), (((2, 3),), {}), ((torch.Size([4]),), {}), ((5,), {}), (((),), {}),
                     ((2, 0), {}), ((2, 3), dict(dtype=torch.int64)), ((3,), dict(dtype=torch.bool)),
                     ((3,), dict(dtype=torch.float16, device="cpu")), ((2,), dict(device=torch.device("cpu"))),
                     ((2,), dict(requires_grad=True))]:
        expected = eager(*args, **kw)
        module = check(lambda: op(*args, **kw))
        assert f'"ltorch.{name}"' in str(module)
        assert expected.dtype == trace_dtype(lambda: op(*args, **kw))


def trace_dtype(fn):
    from thunder.core import trace as tracing

    with tracing.tracing(tracing.TraceCtx()):
        return fn().dtype


def test_creation_with_inputs():
    x = torch.randn(2, 3)
    check(lambda a: a + C.ones(2, 3), x)
    check(lambda a: a * C.full((3,), 2.5), x)
    check(lambda a: a + C.arange(3), x)


@pytest.mark.parametrize("value,kw", [(2.5, {}), (3, {}), (True, {}), (1.5, dict(dtype=torch.int64)),
                                      (7, dict(dtype=torch.float64)), (-2, dict(dtype=torch.bfloat16)),
                                      (0, dict(dtype=torch.bool))], ids=str)
def test_full(value, kw):
    assert ltorch(torch.full) is C.full
    module = check(lambda: C.full((2, 3), value, **kw))
    assert '"ltorch.full"' in str(module)
    assert trace_dtype(lambda: C.full((2, 3), value, **kw)) == torch.full((2, 3), value, **kw).dtype


ARANGE = [((5,), {}), ((2, 9), {}), ((2, 9, 3), {}), ((9, 2, -2), {}), ((0.5, 3), {}), ((0, 1, 0.1), {}),
          ((-1.5, 2.25, 0.75), {}), ((5,), dict(dtype=torch.float32)), ((0, 10, 3), dict(dtype=torch.float16)),
          ((1.0, 4.0), dict(dtype=torch.int64)), ((0, 2.5, 0.5), dict(dtype=torch.float64)), ((0,), {}),
          ((3, 3), {}), ((), dict(start=1, end=4)), ((), dict(end=4)), ((10, 0, -3), {})]


@pytest.mark.parametrize("args,kw", ARANGE, ids=str)
def test_arange(args, kw):
    assert ltorch(torch.arange) is C.arange
    module = check(lambda: C.arange(*args, **kw))
    assert '"ltorch.arange"' in str(module)


def test_arange_errors():
    for args in [(0, 5, 0), (5, 0, 1), (0, 5, -1)]:
        with pytest.raises(RuntimeError):
            torch.arange(*args)
        with pytest.raises(RuntimeError):
            trace_module(lambda: C.arange(*args))
    with pytest.raises(RuntimeError):
        torch.zeros(2, -1)
    with pytest.raises(RuntimeError):
        trace_module(lambda: C.zeros(2, -1))


@pytest.mark.parametrize("name", ["zeros_like", "ones_like", "full_like"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
def test_like(name, dtype):
    x = torch.randn(2, 3).to(dtype)
    fn = getattr(torch, name)
    extra = (2.7,) if name == "full_like" else ()
    check(lambda a: fn(a, *extra), x)
    check(lambda a: fn(a, *extra, dtype=torch.float64), x)
    check(lambda a: fn(a, *extra, device="cpu", dtype=torch.int32), x)
    module = check(lambda a: fn(a, *extra), torch.randn(()))
    assert f'"ltorch.{name}"' in str(module)


CONVERSIONS = ["float", "double", "half", "bfloat16", "long", "int", "short", "byte", "bool"]


@pytest.mark.parametrize("name", CONVERSIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
def test_conversion_methods(name, dtype):
    x = (torch.randn(2, 3) * 5).to(dtype)
    check(lambda a: getattr(a, name)() * 1, x)  # "* 1": eager may return x itself
    module = check(lambda a: getattr(a, name)(), x)
    # eager returns x itself where it has the dtype already: so does thunder (no op recorded)
    same = getattr(x, name)() is x
    assert (f'"ltorch.{name}"' in str(module)) != same
    assert (thunder.jit(lambda a: getattr(a, name)() is a)(x)) == same


def test_to_and_type():
    x, y = torch.randn(2, 3), torch.randint(0, 5, (3,))
    check(lambda a: a.to(torch.float16), x)
    check(lambda a: a.to(dtype=torch.int32), x)
    check(lambda a: a.to("cpu"), x)
    check(lambda a: a.to(torch.device("cpu"), torch.float64), x)
    check(lambda a: a.to(device="cpu", dtype=torch.bfloat16), x)
    check(lambda a: a.to(torch.float64, copy=True), x)
    check(lambda a, b: a.to(b), x, y)
    check(lambda a, b: b.to(a) + a, x, y)
    module = check(lambda a: a.to(torch.int64), x)
    assert '"ltorch.to"' in str(module)
    module = check(lambda a: a.type(torch.float64), x)
    assert '"ltorch.type"' in str(module)
    check(lambda a: a.type(dtype=torch.int16), x)


def test_noop_conversion_is_a_view():
    # eager returns x itself, so an in-place update of the result changes x too
    import thunder

    def fn(a):
        b = a * 2
        c = b.float()
        c.add_(1)
        return b, c

    a = torch.randn(3)
    for x, y in zip(thunder.jit(fn)(a), fn(a)):
        torch.testing.assert_close(x, y)

    def fn2(a):
        c = a.double()  # a real conversion: a new tensor
        c.add_(1)
        return c

    check(fn2, torch.randn(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_clone(dtype):
    x = torch.randn(3, 4).to(dtype)
    m = check(lambda a: torch.clone(a), x)
    assert '"ltorch.clone"' in str(m)
    check(lambda a: a.t().clone(), x)


NEW = {
    "new_zeros": lambda a: a.new_zeros(2, 3), "new_zeros_tuple": lambda a: a.new_zeros((4,), dtype=torch.int32),
    "new_ones": lambda a: a.new_ones(torch.Size([2, 2])) + a[:2, :2],
    "new_ones_0d": lambda a: a.new_ones(()), "new_ones_empty": lambda a: a.new_ones(0, 3),
    "new_full": lambda a: a.new_full((2, 3), 7), "new_full_dtype": lambda a: a.new_full((3,), 2.5, dtype=torch.int64),
    "new_full_bool": lambda a: a.new_full((3,), True),
    "new_tensor": lambda a: a.new_tensor([[1, 2], [3, 4]]) * a[:2, :2],
    "new_tensor_dtype": lambda a: a.new_tensor([1.5, -2.5], dtype=torch.int32),
    "new_tensor_of_tensor": lambda a: a.new_tensor(a[:, 0], dtype=torch.float16),
    "tensor_floats": lambda a: C.tensor([1.5, float("nan"), float("-inf"), 2]),
    "tensor_ints": lambda a: C.tensor([[1, -2, 5], [3, 4, 0]]) + a[:2].long(),
    "tensor_bools": lambda a: C.tensor([True, False, True]) & (a[0] > 0),
    "tensor_number": lambda a: C.tensor(3) * a, "tensor_bool_number": lambda a: C.tensor(False),
    "tensor_empty": lambda a: C.tensor([]), "tensor_nested_empty": lambda a: C.tensor([[], []]),
    "tensor_dtype": lambda a: C.tensor([[1, 2]], dtype=torch.bfloat16, device="cpu"),
    "tensor_of_tensors": lambda a: C.tensor([a[0, 0], a[1, 2]]),
    "tensor_of_tensor": lambda a: C.tensor(a[1], dtype=torch.float64),
}


@pytest.mark.filterwarnings("ignore:To copy construct")
@pytest.mark.parametrize("name", NEW)
def test_new_and_tensor(name):
    x = torch.randn(3, 3)
    module = check(NEW[name], x)
    op = "tensor" if name.startswith("tensor_") and "of_tensor" not in name else name.split("_of")[0]
    for suffix in ("_tuple", "_0d", "_empty", "_dtype", "_bool"):
        op = op.removesuffix(suffix)
    assert f'"ltorch.{op}"' in str(module) or "of_tensor" in name


def test_tensor_through_jit():
    import thunder

    assert ltorch(torch.tensor) is C.tensor and ltorch(torch.Tensor.new_tensor) is C.new_tensor
    f = lambda a: torch.tensor([[1.5, 2], [3, 4]]) @ a + a.new_tensor([1, 2])  # noqa: E731
    x = torch.randn(2, 2)
    torch.testing.assert_close(thunder.jit(f)(x), f(x))


def test_new_empty_shape_and_dtype():
    module = check(lambda a: a.new_empty((2, 5), dtype=torch.int16), torch.randn(2), random=True)
    assert '"ltorch.new_empty"' in str(module) and "-> tensor<2x5xi16" in str(module)


@pytest.mark.filterwarnings("ignore:To copy construct")
def test_tensor_of_tensors_has_no_gradient():
    import thunder

    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    f = lambda a: torch.tensor(a * 2) * a  # noqa: E731
    out = thunder.jit(f)(x)
    torch.testing.assert_close(out, f(x))
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(g, x.detach() * 2)


def test_tensor_errors_as_eager():
    import thunder

    for data in ([[1, 2], [3]], [[1], 2], [2, [1]], [[[1]], [2]]):
        with pytest.raises(Exception) as eager:
            torch.tensor(data)
        with pytest.raises(eager.type):
            thunder.jit(lambda a: torch.tensor(data) + a)(torch.ones(2))
    with pytest.raises(RuntimeError):
        torch.ones(2).new_zeros(-1)
    with pytest.raises(RuntimeError):
        thunder.jit(lambda a: a.new_zeros(-1))(torch.ones(2))


def test_factories_follow_the_default_device():
    # torch.set_default_device / `with torch.device(...)`: factories without a device make their
    # tensors there in eager; the trace depends on it, so its cache entry checks it
    import thunder

    def f(x):
        return x + torch.ones(3) * torch.arange(3) + torch.full((3,), 2.0) + torch.zeros(3).new_ones(3)

    jf = thunder.jit(f)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x), f(x))
    with torch.device("meta"):
        xm = torch.randn(3)
        assert jf(xm).device == f(xm).device == torch.device("meta")
    torch.set_default_device("meta")
    try:
        assert jf(torch.empty(3)).device.type == "meta"
    finally:
        torch.set_default_device(None)
    torch.testing.assert_close(jf(x), f(x))
    assert thunder.cache_misses(jf) == 2


def test_device_transfer_stays_an_op_when_decomposed():
    # a transfer has no prims: the decomposition keeps it for torch to run
    check(lambda a: (a * 2).to("meta").sum(0), torch.randn(2, 3), decompose=True, random=True)


def test_cpu_program_under_another_default_device():
    # kernels and trace-time constants of a CPU program stay on the CPU whatever the default device
    # is (the CPU kernels once allocated their outputs there and wrote through its pointers)
    import thunder
    import torch.nn.functional as F

    def f(x, i):
        y = F.gelu(x * 2 + 1)
        return y[[0, 2]] + torch.ones(3, device="cpu") + i.sum(), torch.zeros_like(y)

    jf = thunder.jit(f, fusion="always")
    x, i = torch.randn(4, 3), torch.arange(3)
    expected = f(x, i)
    torch.set_default_device("meta")
    try:
        out = jf(x, i)
    finally:
        torch.set_default_device(None)
    assert [o.device.type for o in out] == ["cpu", "cpu"]
    torch.testing.assert_close(out, expected)


def test_python_types_as_dtypes_as_eager():
    """torch reads dtype=int/float/bool as torch.int64/float64/bool (transformers' chunked causal
    mask: torch.zeros(batch_size, dtype=int)); thunder refused them as not a dtype."""
    def fn(x):
        return (torch.zeros(3, dtype=int), torch.ones(2, 2, dtype=float), torch.full((2,), 1, dtype=bool),
                torch.arange(4, dtype=float), x.new_zeros(2, dtype=int), torch.tensor([1, 2], dtype=float))

    x = torch.randn(2)
    for got, expected in zip(thunder.jit(fn)(x), fn(x), strict=True):
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got, expected)
    with pytest.raises(TypeError, match="'dtype' must be"):
        thunder.jit(lambda x: torch.zeros(2, dtype=str))(x)
