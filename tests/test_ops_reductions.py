"""Reduction ops (thunder/ops/reductions.py) against eager, traced and decomposed."""
import pytest
import torch

from op_harness import check, trace_module

torch.manual_seed(0)

F32, F64, F16, BF16, I64, I32, U8, B = (torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                        torch.int64, torch.int32, torch.uint8, torch.bool)
LOW = {F16: dict(rtol=2e-3, atol=2e-3), BF16: dict(rtol=2e-2, atol=2e-2)}


def make(*shape, dtype=F32):
    if dtype is B:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=torch.float64).to(dtype)
    return torch.randint(0 if dtype is U8 else -5, 6, shape, dtype=dtype)


X = make(3, 4, 5)

DIMS = [None, 0, -1, (0, 2), (-1, 1), ()]


def test_sum_dims_and_keepdim():
    for dim in DIMS:
        for keepdim in (False, True):
            if dim is None:
                check(lambda x: torch.sum(x, dim=None, keepdim=keepdim), X)
                continue
            check(lambda x: torch.sum(x, dim, keepdim), X)
            check(lambda x: x.sum(dim=dim, keepdim=keepdim), X)
    check(torch.sum, X)
    check(lambda x: x.sum(), X)


@pytest.mark.parametrize("dtype", [F32, F64, F16, BF16, I64, I32, U8, B])
def test_sum_prod_dtypes(dtype):
    x = make(3, 4, dtype=dtype)
    t = LOW.get(dtype, {})
    check(torch.sum, x, **t)
    check(lambda y: y.sum(1), x, **t)
    check(lambda y: y.sum(0, dtype=torch.float64), x)
    check(lambda y: torch.prod(y, 1), x, **t)
    check(lambda y: y.prod(0, keepdim=True), x, **t)
    if not dtype.is_floating_point:
        check(lambda y: y.prod(), x)  # exact for integers; floats multiply in another order


def test_prod_floats():
    x = make(3, 4) + 2
    check(torch.prod, x)
    check(lambda y: torch.prod(y, -1, dtype=torch.float64), x)
    check(lambda y: y.prod(dtype=torch.float64), make(3, 4, dtype=I64))


@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_mean(dim, keepdim):
    check(lambda x: torch.mean(x, dim, keepdim), X)
    check(lambda x: x.mean(dim, keepdim=keepdim, dtype=torch.float64), X)
    check(lambda x: x.mean(dim, keepdim), X.half(), **LOW[F16])
    check(lambda x: x.mean(dim, keepdim, dtype=torch.float32), make(3, 4, 5, dtype=I64))


@pytest.mark.parametrize("name", ["amax", "amin"])
@pytest.mark.parametrize("dtype", [F32, I64, B, F16])
def test_amax_amin(name, dtype):
    x = make(3, 4, 5, dtype=dtype)
    for dim in [(), 0, -1, (0, 2)]:
        check(lambda y: getattr(torch, name)(y, dim), x)
        check(lambda y: getattr(y, name)(dim, keepdim=True), x)
    check(lambda y: getattr(y, name)(), x)


def test_logsumexp():
    inf, nan = float("inf"), float("nan")
    special = torch.tensor([[inf, 1., 2.], [-inf, -inf, -inf], [nan, 1., 0.], [-inf, 0., 1.], [1e30, 1e30, 0.]])
    check(lambda y: (torch.logsumexp(y, 1), y.logsumexp(-1, keepdim=True), torch.logsumexp(y, (0, 2))), X)
    check(lambda y: torch.logsumexp(y, 1), special)
    check(lambda y: (torch.logsumexp(y, 1), torch.logsumexp(y[:, :0], 1), torch.logsumexp(y[:0], 1)), make(3, 4))
    check(lambda y: torch.logsumexp(y, 0), make(3, 4, dtype=I64))
    check(lambda y: torch.logsumexp(y, 1), make(3, 4, dtype=BF16), **LOW[BF16])


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", [F32, F64, I64, U8, F16])
def test_argmax_argmin(name, dtype):
    x = make(3, 4, 5, dtype=dtype)
    fn = getattr(torch, name)
    check(fn, x)
    check(lambda y: fn(y, keepdim=True), x)
    for dim in (0, 1, -1):
        check(lambda y: fn(y, dim), x)
        check(lambda y: getattr(y, name)(dim=dim, keepdim=True), x)


def test_argmax_ties_and_nan():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, float("nan"), 1.0, float("nan")], [0.0, 0.0, -1.0, -1.0]])
    for name in ("argmax", "argmin"):
        check(getattr(torch, name), x)
        check(lambda y: getattr(torch, name)(y, 1), x)
    check(lambda y: torch.argmin(y, 0), torch.tensor([[3, 1], [1, 1], [-9223372036854775808, 5]]))


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dtype", [F32, I64, B, F16])
def test_max_min(name, dtype):
    x = make(3, 4, dtype=dtype)
    fn = getattr(torch, name)
    check(fn, x)  # full reduction: one tensor
    check(lambda y: getattr(y, name)(), x)


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dtype", [F32, I64, B, F16], ids=str)
def test_max_min_dim(name, dtype):
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, float("nan"), 1.0, float("nan")], [0.0, 0.0, -1.0, -1.0]])
    x = x.to(dtype) if dtype.is_floating_point else make(3, 4, dtype=dtype)
    fn = getattr(torch, name)
    for dim in (0, -1):
        check(lambda y: fn(y, dim), x)  # (values, indices)
        check(lambda y: getattr(y, name)(dim=dim, keepdim=True), x)

    def unpack(y):
        values, indices = fn(y, 1)
        return values * 1, indices + 1

    if dtype is not B:
        check(unpack, x)


@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std(name, ):
    fn = getattr(torch, name)
    for x in (X, X.double(), X.half()):
        t = LOW.get(x.dtype, {})
        check(fn, x, **t)
        check(lambda y: fn(y, 1), x, **t)
        check(lambda y: fn(y, (0, 2), keepdim=True), x, **t)
        check(lambda y: fn(y, -1, unbiased=False), x, **t)
        check(lambda y: fn(y, dim=1, correction=0), x, **t)
        check(lambda y: getattr(y, name)(1, True, True), x, **t)
        check(lambda y: getattr(y, name)(dim=0, correction=2.5), x, **t)
    check(lambda y: fn(y, 0), make(1, 3))  # n - correction == 0 -> inf/nan


def test_zero_dim_tensors():
    x = make()
    for fn in (torch.sum, torch.mean, torch.amax, torch.argmax, torch.argmin, torch.max, torch.min):
        check(fn, x)
    check(lambda y: y.sum(0, keepdim=True), x)
    check(lambda y: y.mean(-1), x)
    check(lambda y: y.argmax(0, keepdim=True), x)


def test_max_dim_traces_values_and_indices():
    # torch.return_types.max of two proxies, as eager's
    from thunder.core import trace as tracing
    from thunder.core.proxies import proxy_for

    with tracing.tracing(tracing.TraceCtx()):
        result = torch.max(proxy_for(make(3, 4)), 1, keepdim=True)
    values, indices = result
    assert type(result) is torch.return_types.max and result.values is values and result.indices is indices
    assert (values.shape, values.dtype, indices.shape, indices.dtype) == ((3, 1), F32, (3, 1), I64)


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_return_types_and_overloads(name):
    import thunder

    x, y = make(3, 4), make(4, dtype=F64)
    fn = getattr(torch, name)
    out = thunder.jit(lambda a: fn(a, dim=1))(x)  # returned as eager's structseq
    assert type(out) is getattr(torch.return_types, name)
    torch.testing.assert_close(tuple(out), tuple(fn(x, dim=1)))
    f = lambda a: getattr(a, name)(-1, keepdim=True).values * 2 + getattr(a, name)(0).indices  # noqa: E731
    torch.testing.assert_close(thunder.jit(f)(x), f(x))
    # two tensors: torch.maximum / torch.minimum (broadcasting, type promotion)
    for g in (lambda a, b: fn(a, b), lambda a, b: getattr(a, name)(b), lambda a, b: fn(a, other=b)):
        module = check(g, x, y)
        assert f'"ltorch.{name}imum"' in str(module)


def test_empty_dims():
    x = torch.ones(0, 3)
    check(torch.sum, x)
    check(lambda y: y.sum(0), x)
    check(lambda y: y.mean(0), x)
    check(lambda y: y.amax(1), x)
    check(lambda y: y.prod(0), x)


ERRORS = [
    ("dim_range", lambda x: x.sum(3), IndexError),
    ("dim_range_mean", lambda x: x.mean(-4), IndexError),
    ("dim_repeated", lambda x: x.sum((0, 0)), RuntimeError),
    ("mean_int", lambda x: x.long().mean(), RuntimeError),
    ("mean_bool", lambda x: (x > 0).mean(), RuntimeError),
    ("var_int", lambda x: x.long().var(), RuntimeError),
    ("argmax_bool", lambda x: (x > 0).argmax(), RuntimeError),
    ("amax_empty", lambda x: x[:0].amax(), RuntimeError),
    ("max_empty", lambda x: x[:0].max(), RuntimeError),
    ("max_empty_dim", lambda x: x[:0].max(0), IndexError),
    ("argmax_empty", lambda x: x[:0].argmax(), IndexError),
    ("argmax_dim_range", lambda x: x.argmax(2), IndexError),
    ("logsumexp_no_dims", lambda x: x.logsumexp(()), RuntimeError),
]


@pytest.mark.parametrize("fn,exc", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_match_eager(fn, exc):
    x = make(3, 4)
    with pytest.raises(exc):
        fn(x)
    with pytest.raises(exc):
        trace_module(fn, x)


NAMED = {
    "sum": torch.sum, "mean": torch.mean, "prod": torch.prod, "amax": torch.amax, "amin": torch.amin,
    "argmax": torch.argmax, "argmin": torch.argmin, "max": torch.max, "min": torch.min, "var": torch.var,
    "std": torch.std,
}


@pytest.mark.parametrize("name", NAMED)
def test_op_name_in_module(name):
    module = check(NAMED[name], make(2, 3))
    assert f'"ltorch.{name}"' in str(module)


@pytest.mark.parametrize("name", ["any", "all"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.uint8])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), (-1, True), ((0, 1), False)])
def test_any_all(name, dtype, dim, keepdim):
    x = (torch.randn(3, 4, 2) > 0.3).to(dtype) * (torch.rand(3, 4, 2) > 0.5).to(dtype)
    if dim is None:
        m = check(lambda a: getattr(torch, name)(a), x)
    else:
        m = check(lambda a: getattr(a, name)(dim, keepdim), x)
    assert f'"ltorch.{name}"' in str(m)
    check(lambda a: getattr(torch, name)(a), torch.ones(2, 2, dtype=dtype))


# --------------------------------------------------------------------------------------------
# Through the fused path (op_harness runs every claimed region as a linalg kernel): strided
# inputs, 0-d and empty tensors, nan and inf, integer wrap-around, bool, f16/bf16


@pytest.mark.parametrize("layout", ["transposed", "stepped", "expanded", "0d", "empty"])
def test_fused_reduction_layouts(layout):
    x = {"transposed": lambda: make(5, 4).t(), "stepped": lambda: make(8, 9)[::2, 1::3],
         "expanded": lambda: make(4, 1).expand(4, 3), "0d": lambda: make(),
         "empty": lambda: make(0, 3)}[layout]()
    dims = [None, 0, -1] if x.dim() == 2 else [None]
    for dim in dims:
        kw = {} if dim is None else {"dim": dim}
        check(lambda y: (y * 2).sum(**kw), x)
        check(lambda y: (y + 1).mean(**kw), x)
        if x.numel():
            check(lambda y: ((y - 1).amax(**kw), (y - 1).amin(**kw)), x)
            check(lambda y: (y * 0.5 + 1).prod(**kw), x)
    if x.dim() == 2 and x.numel():
        check(lambda y: torch.softmax(y, -1) + torch.log_softmax(y, 0), x)
        check(lambda y: y.var(0) + y.std(-1, keepdim=True), x)


def test_fused_reduction_special_values():
    x = torch.tensor([[1.0, float("nan"), 3.0], [float("inf"), -2.0, 0.5], [-float("inf"), -0.0, 0.0],
                      [float("inf"), float("inf"), 2.0]])
    check(lambda y: ((y * 1).amax(0), (y * 1).amin(0), (y * 1).amax(1), (y * 1).amin(1)), x)
    check(lambda y: ((y * 1).sum(0), (y * 1).sum(1), (y * 1).prod(1), (y * 1).mean(0)), x)
    check(lambda y: torch.where(torch.isnan(y), 0.0, y).sum(), x)


@pytest.mark.parametrize("dtype", [I64, I32, torch.int16, torch.int8, B])
def test_fused_integer_reductions(dtype):
    x = make(4, 5, dtype=dtype)
    if dtype is not B:
        info = torch.iinfo(dtype)
        x[0, :2] = torch.tensor([info.max, info.min])  # sums and products wrap around
    check(lambda y: ((y * 1).sum(), (y * 1).sum(0), (y * 1).sum(1, dtype=I64)), x)
    check(lambda y: ((y * 1).amax(0), (y * 1).amin(1), (y * 1).prod(1)), x)
    check(lambda y: ((y * 1).any(1), (y * 1).all(0), (y * 1).sum(0, dtype=torch.float32)), x)


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_fused_low_precision_reductions(dtype):
    x = make(6, 8, dtype=dtype)
    t = LOW[dtype]
    check(lambda y: ((y * 2).sum(), (y * 2).sum(0), (y + 1).mean(-1)), x, **t)
    check(lambda y: ((y * 2).amax(0), (y - 1).amin(1), (y * 0.5 + 1).prod(1)), x, **t)
    check(lambda y: ((y * 2).sum(1, dtype=torch.float32), y.t().sum(0)), x, **t)
    check(lambda y: torch.softmax(y, -1) * 2, x, **t)


@pytest.mark.parametrize("dtype", [F32, F64, I64, B, F16])
def test_cumsum(dtype):
    x = make(3, 4, dtype=dtype)
    t = LOW.get(dtype, {})
    module = check(lambda y: (torch.cumsum(y, 0), y.cumsum(-1), y.cumsum(1, dtype=torch.float64)), x, **t)
    assert '"ltorch.cumsum"' in str(module)
    check(lambda y: y.t().cumsum(0), x, **t)
    check(lambda y: y.cumsum(0), make(dtype=dtype))
    check(lambda y: y.cumsum(1), make(2, 0, dtype=dtype))
    with pytest.raises(IndexError):
        trace_module(lambda y: y.cumsum(2), x)


@pytest.mark.parametrize("dtype", [F32, F64, I64, F16])
def test_topk_sort_argsort(dtype):
    x = make(4, 6, dtype=dtype)
    module = check(lambda y: (torch.topk(y, 3), y.topk(2, 0, largest=False), y.topk(6, sorted=True)), x)
    assert '"ltorch.topk"' in str(module)
    module = check(lambda y: (torch.sort(y), y.sort(0, True), torch.sort(y, dim=1, stable=True),
                              torch.argsort(y, dim=0, stable=True), y.argsort(1, True)), x)
    assert '"ltorch.sort"' in str(module) and '"ltorch.argsort"' in str(module)
    check(lambda y: (y.t().topk(1), y.t().sort(stable=True)), x)  # non-contiguous
    check(lambda y: (y.topk(1, 0), y.sort(0), y.argsort(0)), make(dtype=dtype))  # 0-d
    check(lambda y: (y.topk(0), y.sort(dim=0, stable=True)), make(0, 3, dtype=dtype))


def test_sort_bool_and_return_types():
    import thunder

    check(lambda y: torch.sort(y, stable=True), make(3, 5, dtype=B))
    x = make(3, 5)
    for name in ("topk", "sort"):
        out = thunder.jit(lambda y: getattr(y, name)(*((2,) if name == "topk" else ())))(x)
        assert type(out) is getattr(torch.return_types, name)
        torch.testing.assert_close(out.values, getattr(x, name)(*((2,) if name == "topk" else ())).values)
    for fn in (lambda y: y.topk(7), lambda y: y.topk(-1), lambda y: (y > 0).topk(1), lambda y: y.sort(2)):
        with pytest.raises(Exception) as eager:
            fn(x)
        with pytest.raises(eager.type):
            trace_module(fn, x)
