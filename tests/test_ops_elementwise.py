"""Elementwise ops (thunder/ops/elementwise.py) against eager, traced and decomposed."""
import operator

import pytest
import torch
import torch.nn.functional as F

import thunder

from op_harness import check, trace_module

torch.manual_seed(0)

F32, F64, F16, BF16, I64, I32, U8, B = (torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                        torch.int64, torch.int32, torch.uint8, torch.bool)
LOW = {F16: dict(rtol=2e-3, atol=2e-3), BF16: dict(rtol=2e-2, atol=2e-2)}


def make(*shape, dtype=F32, low=-3, high=3):
    if dtype is B:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return (torch.rand(shape, dtype=torch.float64) * (high - low) + low).to(dtype)
    return torch.randint(max(low, 0) if dtype is U8 else low, high + 1, shape, dtype=dtype)


def positive(*shape, dtype=F32):
    return make(*shape, dtype=dtype, low=1, high=4) if not dtype.is_floating_point else \
        (torch.rand(shape, dtype=torch.float64) * 3 + 0.1).to(dtype)


def tol(*args):
    for a in args:
        if isinstance(a, torch.Tensor) and a.dtype in LOW:
            return LOW[a.dtype]
    return {}


# --------------------------------------------------------------------------------------------
# Binary arithmetic: operators, torch functions and methods, broadcasting, scalars on either side

OPS = {
    "add": (operator.add, torch.add), "sub": (operator.sub, torch.sub), "mul": (operator.mul, torch.mul),
    "truediv": (operator.truediv, torch.div), "floordiv": (operator.floordiv, torch.floor_divide),
    "mod": (operator.mod, torch.remainder), "pow": (operator.pow, torch.pow),
}
SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1, 3), (2, 1)), ((), (2, 3)), ((2, 3), ())]


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_binary_tensor_tensor(name, shapes):
    a = make(*shapes[0])
    b = positive(*shapes[1]) if name in ("truediv", "floordiv", "mod", "pow") else make(*shapes[1])
    for fn in OPS[name]:
        check(fn, a.abs() + 0.5 if name == "pow" else a, b)


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("dtype", [F32, F64, I64, I32, F16, BF16])
def test_binary_dtypes_and_scalars(name, dtype):
    a = positive(2, 3, dtype=dtype) if name == "pow" else make(2, 3, dtype=dtype)
    b = positive(2, 3, dtype=dtype)
    op = OPS[name][0]
    check(op, a, b, **tol(a))
    for s in (2, 1.5):
        check(lambda x: op(x, s), a, **tol(a))  # tensor <op> number
        check(lambda x: op(s, x), positive(2, 3, dtype=dtype), **tol(a))  # number <op> tensor (reflected)


def test_binary_mixed_dtypes():
    i, f, h, b = make(2, 3, dtype=I64), make(2, 3), make(3, dtype=F16), make(2, 3, dtype=B)
    check(operator.add, i, f)
    check(operator.mul, h, f)
    check(operator.truediv, i, positive(3, dtype=I32))  # int / int -> float
    check(operator.add, b, b)
    check(operator.mul, b, i)
    check(operator.add, f, torch.tensor(2.5, dtype=torch.float64))  # 0-d tensors do not promote
    check(operator.add, i, torch.tensor(2.5))  # ... unless of a higher category
    check(lambda x: x + True, i)
    check(lambda x: x * 2.5, i)
    check(lambda x: x ** 2, i)
    check(lambda x: x ** 0.5, positive(3, dtype=I64))
    check(lambda x: 2 ** x, positive(3, dtype=I64))
    check(lambda x: 2.5 ** x, positive(3, dtype=I64))


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype", [F32, F64, I64, F16])
def test_div_rounding_mode(mode, dtype):
    a = make(3, 4, dtype=dtype, low=-9, high=9)
    b = positive(4, dtype=dtype) * torch.tensor([1, -1, 1, -1]).to(dtype)
    check(lambda x, y: torch.div(x, y, rounding_mode=mode), a, b, **tol(a))
    check(lambda x: x.div(-3, rounding_mode=mode), a, **tol(a))
    check(lambda x: torch.divide(7, x, rounding_mode=mode), b, **tol(a))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_floor_divide_by_infinities_and_signed_zero_quotients(dtype):
    # torch's div_floor: an infinite divisor gives -1 where the signs differ, else a signed zero
    # (the decomposition gave NaN: found by the fuzzer, as -1 // x with x requiring grad runs the
    # decomposition in the forward); a zero quotient has a / b's sign
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([-1.0, 1.0, -1.0, 1.0, 0.0, inf, -inf, nan, -1.0, 1.0, -0.0, 1.0], dtype=dtype)
    b = torch.tensor([inf, inf, -inf, -inf, inf, inf, inf, inf, -2.5, -2.5, 3.0, 0.0], dtype=dtype)
    check(torch.floor_divide, a, b)
    jf = thunder.jit(torch.floor_divide, transforms=["thunder-decompose"])
    out = jf(a, b)
    torch.testing.assert_close(out, torch.floor_divide(a, b), equal_nan=True)
    assert torch.equal(torch.signbit(out), torch.signbit(torch.floor_divide(a, b)))
    x = b.clone().requires_grad_()
    torch.testing.assert_close(thunder.jit(lambda x: -1 // x)(x), -1 // b, equal_nan=True)


def test_floor_divide_and_remainder_signs():
    a = torch.tensor([7.0, -7.0, 7.0, -7.0, 0.0, 5.5, -0.0, 6.0])
    b = torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, 0.0, 2.0, 3.0])
    check(torch.floor_divide, a, b)
    check(torch.remainder, a, b)
    ai = torch.tensor([7, -7, 7, -7, 0, 6])
    bi = torch.tensor([2, 2, -2, -2, 3, 3])
    check(torch.floor_divide, ai, bi)
    check(operator.floordiv, ai, bi)
    check(lambda x: x // -2, ai)
    check(lambda x: -7 // x, bi)
    check(lambda x: x % -3, ai)
    check(lambda x: 7 % x, bi)


def test_alpha_and_rsub():
    a, b = make(2, 3), make(3)
    check(lambda x, y: torch.add(x, y, alpha=2), a, b)
    check(lambda x, y: torch.sub(x, y, alpha=0.5), a, b)
    check(lambda x: torch.sub(x, 2, alpha=3), a)
    check(lambda x: torch.add(x, 2, alpha=3), make(3, dtype=I64))
    check(lambda x, y: torch.rsub(x, y, alpha=2), a, b)
    check(lambda x: torch.rsub(x, 2), make(3, dtype=I64))
    check(lambda x, y: x.subtract(y), a, b)
    check(lambda x, y: x.multiply(y), a, b)
    check(lambda x, y: torch.true_divide(x, y), make(3, dtype=I64), positive(3, dtype=I64))


# --------------------------------------------------------------------------------------------
# Comparisons, bitwise and logical ops

CMP = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
       torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge, torch.greater, torch.less_equal]


@pytest.mark.parametrize("fn", CMP, ids=lambda f: getattr(f, "__name__", str(f)))
def test_comparisons(fn):
    a = make(2, 3, dtype=I64)
    check(fn, a, make(3, dtype=I64))
    check(fn, a.float(), make(2, 1, dtype=F64))
    check(fn, a, make(2, 3))  # int vs float compares in float
    check(lambda x: fn(x, 1), a)
    check(lambda x: fn(x, 0.5), a)
    check(lambda x: fn(x, 0), make(4, dtype=B))


def test_comparison_methods_and_reflected():
    a, b = make(2, 3), make(2, 3)
    for m in ("eq", "ne", "lt", "le", "gt", "ge"):
        check(lambda x, y: getattr(x, m)(y), a, b)
    check(lambda x: 0.5 < x, a)  # Python turns this into x > 0.5
    check(lambda x: 1 == x, make(4, dtype=I64))


@pytest.mark.parametrize("dtype", [B, I64, I32, U8])
def test_bitwise(dtype):
    a, b = make(2, 3, dtype=dtype), make(3, dtype=dtype)
    for op in (operator.and_, operator.or_, operator.xor, torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor):
        check(op, a, b)
    check(operator.invert, a)
    check(torch.bitwise_not, a)
    check(lambda x: x & 1, a)
    check(lambda x: 6 | x, a)
    check(lambda x: True ^ x, a)


@pytest.mark.parametrize("fn", [torch.logical_and, torch.logical_or, torch.logical_xor])
def test_logical(fn):
    a = make(2, 3)
    a[0, 0] = 0
    a[1, 1] = float("nan")
    check(fn, a, make(3, dtype=I64, low=0, high=1))
    check(fn, make(2, 3, dtype=B), make(2, 3, dtype=B))
    check(lambda x: x.logical_not(), a)
    check(torch.logical_not, make(4, dtype=I64, low=0, high=1))
    check(torch.logical_not, make(4, dtype=B))


# --------------------------------------------------------------------------------------------
# Unary ops

FLOAT_UNARY = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
               "tanh", "sigmoid", "erf", "reciprocal"]
POSITIVE_ONLY = {"log", "log2", "log10", "sqrt", "rsqrt", "reciprocal"}


@pytest.mark.parametrize("name", FLOAT_UNARY)
@pytest.mark.parametrize("dtype", [F32, F64, I64, B, F16, BF16])
def test_float_unary(name, dtype):
    x = positive(2, 3, dtype=dtype) if name in POSITIVE_ONLY else make(2, 3, dtype=dtype)
    fn = getattr(torch, name)
    check(fn, x, **tol(x))
    check(lambda t: getattr(t, name)(), x, **tol(x))


@pytest.mark.parametrize("name", ["neg", "abs", "floor", "ceil", "round", "trunc", "sign", "isnan", "isinf",
                                  "isfinite", "relu"])
@pytest.mark.parametrize("dtype", [F32, F64, I64, I32, F16])
def test_unary_keeping_dtype(name, dtype):
    x = make(3, 4, dtype=dtype) * (2.7 if dtype.is_floating_point else 1)
    if dtype.is_floating_point:
        x[0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
        x[1, :2] = torch.tensor([0.5, -2.5])  # round half to even
    check(getattr(torch, name), x, **tol(x))
    check(lambda t: getattr(t, name)(), x, **tol(x))


def test_unary_operators_and_0d():
    x = make(3, 4)
    check(operator.neg, x)
    check(operator.abs, make(3, dtype=I64))
    check(torch.negative, x)
    check(torch.absolute, x)
    check(torch.exp, make())
    check(lambda t: -t + t.abs(), make())
    check(torch.round, make(3) * 100, decimals=0)
    check(lambda t: torch.round(t, decimals=2), make(5) * 10)
    check(lambda t: torch.round(t, decimals=-1), make(5) * 100)
    check(torch.sign, make(4, dtype=B))
    check(torch.isnan, make(4, dtype=B))


# --------------------------------------------------------------------------------------------
# Activations


@pytest.mark.parametrize("dtype", [F32, F64, F16, BF16])
def test_activations(dtype):
    x = make(4, 5, dtype=dtype, low=-6, high=6)
    t = tol(x)
    check(torch.relu, x, **t)
    check(F.relu, x, **t)
    check(lambda y: y.relu(), x, **t)
    check(torch.sigmoid, x, **t)
    check(F.sigmoid, x, **t)
    check(F.gelu, x, **t)
    check(lambda y: F.gelu(y, approximate="tanh"), x, **t)
    check(F.silu, x, **t)
    check(F.softplus, x, **t)
    check(lambda y: F.softplus(y, beta=2, threshold=3.0), x, **t)
    check(F.leaky_relu, x, **t)
    check(lambda y: F.leaky_relu(y, 0.2), x, **t)
    check(F.hardtanh, x, **t)
    check(lambda y: F.hardtanh(y, -2.0, 0.5), x, **t)
    check(F.relu6, x, **t)
    check(F.elu, x, **t)
    check(lambda y: F.elu(y, alpha=0.5), x, **t)
    check(F.selu, x, **t)
    check(lambda y: F.celu(y, 2.0), x, **t)
    check(F.mish, x, **t)
    check(F.hardswish, x, **t)
    check(F.hardsigmoid, x, **t)
    check(lambda y: F.threshold(y, 0.5, -2.0), x, **t)
    edges = torch.tensor([-6.0, -3.0, -1.0, 0.0, 1.0, 3.0, 6.0, 30.0, -30.0, float("nan")]).to(dtype)
    for fn in (F.relu6, F.hardswish, F.hardsigmoid, F.mish, F.elu, lambda y: F.threshold(y, 1.0, 5.0)):
        check(fn, edges, **t)


def test_activations_ints():
    x = make(3, 4, dtype=I64, low=-8, high=8)
    check(F.relu6, x)
    check(lambda y: F.threshold(y, 2, -1), x)
    check(lambda y: F.threshold(y, 2.5, 7.0), make(3, 4, dtype=U8, high=8))


def test_relu_ints_and_nan():
    check(torch.relu, make(5, dtype=I64))
    check(torch.relu, torch.tensor([float("nan"), -1.0, 0.0, 2.0]))
    check(lambda y: torch.nn.ReLU()(y), make(3, 3))


# --------------------------------------------------------------------------------------------
# where, clamp, maximum/minimum, lerp


@pytest.mark.parametrize("dtype", [F32, F64, I64, I32, U8, B, F16, BF16])
def test_square(dtype):
    x = make(3, 4, dtype=dtype)
    check(torch.square, x, **tol(x))
    check(lambda y: y.square() + 1, x, **tol(x))
    check(torch.square, make(dtype=dtype))
    check(torch.square, make(0, 2, dtype=dtype))
    check(torch.square, make(4, 3, dtype=dtype).t())


def test_where_overloads():
    import thunder
    from thunder.core.proxies import DataDependentError

    c, x, y = make(2, 3, dtype=B), make(2, 3), make(3, dtype=F64)
    check(lambda m, a, b: a.where(m, b), c, x, y)  # Tensor.where(condition, other)
    check(lambda m, a: a.where(m, 0.5), c, x)
    check(lambda m, a: torch.where(m, 2, 1.5), c, x)
    # (the indices of the True elements: their number is read while thunder.jit traces, a split)
    torch.testing.assert_close(thunder.jit(lambda m: torch.where(m))(c), torch.where(c))
    from thunder.core import trace as tracing
    from thunder.core.proxies import TensorProxy
    from thunder.ops import registry

    with tracing.tracing(tracing.TraceCtx()), pytest.raises(DataDependentError, match=r"torch.where\(condition\)"):
        registry.OPS["ltorch.where"](TensorProxy((2, 3), torch.bool, "cpu", name="m"))  # (no values: not in jit)


def test_where():
    c = make(2, 3, dtype=B)
    a, b = make(2, 3), make(3, dtype=F64)
    check(torch.where, c, a, b)
    check(lambda m, x: torch.where(m, x, 0.0), c, a)
    check(lambda m, x: torch.where(m, 1, x), c, make(1, 3, dtype=I64))
    check(lambda m: torch.where(m, 1.0, 0), c)
    check(lambda m: torch.where(m, 1, 0), c)
    check(lambda m, x: torch.where(m, x, 2.5), make(3, 1, dtype=B), make(2, 1, 3, dtype=I64))


@pytest.mark.parametrize("dtype", [F32, I64, F16])
def test_clamp(dtype):
    x = make(3, 4, dtype=dtype, low=-5, high=5)
    t = tol(x)
    check(lambda y: torch.clamp(y, -1, 2), x, **t)
    check(lambda y: torch.clamp(y, min=0.5), x, **t)
    check(lambda y: y.clamp(max=1), x, **t)
    check(lambda y: y.clip(-2, 2), x, **t)
    check(lambda y, lo: torch.clamp(y, min=lo), x, make(4, dtype=dtype), **t)
    check(lambda y, lo, hi: torch.clamp(y, lo, hi), x, make(3, 1, dtype=dtype, low=-5, high=0),
          make(4, dtype=dtype, low=0, high=5), **t)
    check(lambda y: torch.clamp_min(y, 0.5), x, **t)
    check(lambda y: y.clamp_max(1), x, **t)


def test_clamp_nan_and_bool():
    check(lambda y: torch.clamp(y, 0, 1), torch.tensor([float("nan"), -1.0, 0.5, 3.0]))
    check(lambda y: torch.clamp(y, 0, 2), make(4, dtype=B))  # promotes to int64


def test_maximum_minimum():
    a, b = make(2, 3), make(3, dtype=F64)
    a[0, 0] = float("nan")
    for fn in (torch.maximum, torch.minimum):
        check(fn, a, b)
        check(fn, make(2, 3, dtype=I64), make(2, 3, dtype=I32))
        check(lambda x, y: getattr(x, fn.__name__)(y), a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addcmul_and_addcdiv_are_eagers_bits(name, dtype):
    # Adam's updates (a tensor value when compiled: torch reads it as a number); in place too
    x, a, b = make(4, 8, dtype=dtype), make(8, dtype=dtype), (torch.rand(4, 1) + 0.5).to(dtype)
    fn = getattr(torch, name)
    tol = {"rtol": 0, "atol": 0} if dtype is not F64 else {}  # (float64: no wider type for addcmul's fma)
    for value in (1, 0.37, -2):
        check(lambda x, a, b: fn(x, a, b, value=value), x, a, b, **tol)
        check(lambda x, a, b: getattr(x.clone(), f"{name}_")(a, b, value=value), x, a, b, **tol)
    for value in (torch.tensor(0.31), torch.tensor(-0.7, dtype=F64)):
        check(lambda x, a, b, v: fn(x, a, b, value=v), x, a, b, value, **tol)
        check(lambda x, a, b, v: getattr(x.clone(), f"{name}_")(a, b, value=v), x, a, b, value, **tol)
    with pytest.raises(TypeError, match="must be Number, not Tensor"):  # (as eager's)
        thunder.jit(lambda x, v: fn(x, x, x, value=v))(x, torch.tensor(2.0, requires_grad=True))


def test_lerp_and_atan2():
    a, b = make(2, 3), make(3)
    check(torch.lerp, a, b, 0.3)
    check(torch.lerp, a, b, 0.7)
    check(lambda x, y, w: x.lerp(y, w), a, b, torch.rand(2, 3))
    check(torch.lerp, a.half(), b.half(), 0.25, rtol=2e-3, atol=2e-3)
    check(torch.atan2, a, make(2, 1, dtype=F64))
    check(torch.atan2, make(3, dtype=I64), make(3, dtype=I64))


# --------------------------------------------------------------------------------------------
# In-place forms go through the same ops


def test_inplace_on_intermediate():
    def fn(x):
        y = x * 2
        y += 1
        y.mul_(3)
        y.clamp_(min=0)
        return y

    check(fn, make(2, 3))


INPLACE_ACTIVATIONS = {
    "relu": (F.relu, torch.relu_), "relu6": (F.relu6, None), "elu": (F.elu, F.elu_), "selu": (F.selu, torch.selu_),
    "celu": (F.celu, torch.celu_), "silu": (F.silu, None), "mish": (F.mish, None), "hardswish": (F.hardswish, None),
    "hardsigmoid": (F.hardsigmoid, None), "leaky_relu": (F.leaky_relu, F.leaky_relu_),
    "hardtanh": (F.hardtanh, F.hardtanh_), "threshold": (lambda x, inplace: F.threshold(x, 0.1, 2.0, inplace),
                                                      lambda x: F.threshold_(x, 0.1, 2.0)),
    "dropout_p0": (lambda x, inplace: F.dropout(x, 0.0, True, inplace), None),
}


@pytest.mark.parametrize("name", INPLACE_ACTIVATIONS)
def test_inplace_activations(name):
    """inplace=True and the `<name>_` functions: the functional op assigned to the input (an
    intermediate, a view of one, an input whose new value is copied back)."""
    import thunder

    fn, fn_ = INPLACE_ACTIVATIONS[name]
    variants = [lambda y: fn(y, inplace=True)] + ([fn_] if fn_ is not None else [])
    for act in variants:
        def f(x):
            y = x * 2
            out = act(y)
            z = x + 1
            act(z[1:])
            return y, out, z

        check(f, make(3, 4))
        a, b = make(3, 4), None
        b = a.clone()
        act(b)
        thunder.jit(lambda x: act(x))(a)
        torch.testing.assert_close(a, b)
    module = str(trace_module(lambda y: fn(y, inplace=True), make(2)))
    if name == "dropout_p0":  # (a dropout that does nothing records nothing, as eager returns its input)
        assert '"ltorch.dropout"' not in module
    else:
        assert f'"ltorch.{name}"' in module


def test_inplace_activation_of_leaf_requiring_grad_raises_as_eager():
    import thunder

    x = make(3).requires_grad_()
    with pytest.raises(RuntimeError, match="leaf Variable"):
        F.relu(x, inplace=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        thunder.jit(lambda x: F.relu(x, inplace=True))(x)


def test_inplace_activation_modules_train_as_eager():
    import thunder
    from torch import nn

    def model(inplace):
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(5, 6), nn.ReLU(inplace), nn.Linear(6, 6), nn.Hardswish(inplace),
                             nn.Linear(6, 6), nn.ReLU6(inplace), nn.Linear(6, 6), nn.SiLU(inplace))

    x = make(4, 5)
    m, ref = model(True), model(False)
    out = thunder.jit(m)(x)
    expected = ref(x)
    torch.testing.assert_close(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


# --------------------------------------------------------------------------------------------
# Errors: the exception types eager raises


ERRORS = [
    ("broadcast", lambda x: x + x[:2], RuntimeError),
    ("sub_bool", lambda x: (x > 0) - (x > 1), RuntimeError),
    ("neg_bool", lambda x: -(x > 0), RuntimeError),
    ("abs_bool", lambda x: torch.abs(x > 0), NotImplementedError),
    ("floor_bool", lambda x: torch.floor(x > 0), NotImplementedError),
    ("bitwise_float", lambda x: x & x, NotImplementedError),
    ("bitwise_not_float", lambda x: torch.bitwise_not(x), NotImplementedError),
    ("invert_float", lambda x: ~x, TypeError),  # the operator checks first, with another type
    ("int_neg_pow", lambda x: x.long() ** -1, RuntimeError),
    ("pow_bool", lambda x: torch.pow(x > 0, x > 1), NotImplementedError),
    ("div_mode", lambda x: torch.div(x, x, rounding_mode="round"), RuntimeError),
    ("floor_divide_bool", lambda x: (x > 0) // (x > 1), NotImplementedError),
    ("alpha_float_int", lambda x: torch.add(x.long(), x.long(), alpha=0.5), RuntimeError),
    ("gelu_int", lambda x: F.gelu(x.long()), NotImplementedError),
    ("gelu_approx", lambda x: F.gelu(x, approximate="fast"), RuntimeError),
    ("silu_int", lambda x: F.silu(x.long()), NotImplementedError),
    ("relu_bool", lambda x: torch.relu(x > 0), RuntimeError),
    ("clamp_none", lambda x: torch.clamp(x), RuntimeError),
    ("where_float_cond", lambda x: torch.where(x, x, x), RuntimeError),
    ("where_broadcast", lambda x: torch.where(x > 0, x, x[:2]), RuntimeError),
    ("maximum_number", lambda x: torch.maximum(x, 2), TypeError),
    ("logical_number", lambda x: torch.logical_and(x, 1), TypeError),
    ("lerp_dtype", lambda x: torch.lerp(x, x.double(), 0.5), RuntimeError),
    ("hardtanh_uint8", lambda x: F.hardtanh(x.to(torch.uint8)), RuntimeError),
    ("relu6_bool", lambda x: F.relu6(x > 0), RuntimeError),
    ("elu_int", lambda x: F.elu(x.long()), NotImplementedError),
    ("hardswish_int", lambda x: F.hardswish(x.long()), NotImplementedError),
    ("mish_bool", lambda x: F.mish(x > 0), NotImplementedError),
    ("threshold_bool", lambda x: F.threshold(x > 0, 0.5, 1.0), NotImplementedError),
]


@pytest.mark.parametrize("fn,exc", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_match_eager(fn, exc):
    x = make(3, 4)
    with pytest.raises(exc):
        fn(x)
    with pytest.raises(exc):
        trace_module(fn, x)


# --------------------------------------------------------------------------------------------
# Each op shows up under its own name in the traced module

NAMED = {
    "add": lambda x: x + 1, "sub": lambda x: x - 1, "rsub": lambda x: 1 - x, "mul": lambda x: x * 2,
    "div": lambda x: x / 2, "true_divide": lambda x: torch.true_divide(x, 2), "rtruediv": lambda x: 2 / x,
    "floor_divide": lambda x: x // 2, "rfloordiv": lambda x: 2 // x, "remainder": lambda x: x % 2,
    "rmod": lambda x: 2 % x, "pow": lambda x: x ** 2, "rpow": lambda x: 2 ** x,
    "neg": lambda x: -x, "abs": abs, "eq": lambda x: x == 1, "ne": lambda x: x != 1, "lt": lambda x: x < 1,
    "le": lambda x: x <= 1, "gt": lambda x: x > 1, "ge": lambda x: x >= 1,
    "bitwise_and": lambda x: x.long() & 1, "bitwise_or": lambda x: x.long() | 1, "bitwise_xor": lambda x: x.long() ^ 1,
    "bitwise_not": lambda x: ~x.long(), "logical_not": torch.logical_not,
    "logical_and": lambda x: torch.logical_and(x, x), "logical_or": lambda x: torch.logical_or(x, x),
    "logical_xor": lambda x: torch.logical_xor(x, x),
    **{n: getattr(torch, n) for n in FLOAT_UNARY + ["floor", "ceil", "round", "trunc", "sign", "isnan", "isinf",
                                                    "isfinite", "relu"]},
    "square": torch.square, "gelu": F.gelu, "silu": F.silu, "softplus": F.softplus, "leaky_relu": F.leaky_relu, "hardtanh": F.hardtanh,
    "relu6": F.relu6, "elu": F.elu, "selu": F.selu, "celu": F.celu, "mish": F.mish, "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid, "threshold": lambda x: F.threshold(x, 1.0, 0.0),
    "clamp": lambda x: x.clamp(0, 1), "clamp_min": lambda x: x.clamp_min(0), "clamp_max": lambda x: x.clamp_max(0),
    "where": lambda x: torch.where(x > 0, x, 0.0), "maximum": lambda x: torch.maximum(x, x),
    "minimum": lambda x: torch.minimum(x, x), "atan2": lambda x: torch.atan2(x, x),
    "lerp": lambda x: torch.lerp(x, x, 0.5),
}


@pytest.mark.parametrize("name", NAMED)
def test_op_name_in_module(name):
    x = positive(2, 3)
    module = check(NAMED[name], x)
    assert f'"ltorch.{name}"' in str(module)


# --------------------------------------------------------------------------------------------
# Through the fused path: check also runs every region thunder-fuse claims as a linalg kernel,
# so these cover what kernels must get right: layouts (strides, offsets, stride 0), broadcasting,
# 0-d and empty tensors, special values, integer and bool semantics, f16/bf16 (computed in f32)

I16, I8 = torch.int16, torch.int8


def special(dtype):
    """16 values at the edges of dtype's semantics (nan, infs, signed zeros, halves for round
    half to even, extremes, wrap-around), in a fixed order."""
    if dtype is B:
        return torch.tensor([True, False, False, True] * 4)
    if dtype.is_floating_point:
        big = 6e4 if dtype is F16 else 1e30
        v = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.5, 3.0, -7.0, big,
             -1e-3, 7.25, -1.0]
        return torch.tensor(v, dtype=F64).to(dtype)
    info = torch.iinfo(dtype)
    return torch.tensor([0, 1, -1, 2, -2, 3, -3, 7, -7, 100, -100, info.max, info.min, 5, -5, 6],
                        dtype=I64).to(dtype)


def nonzero(dtype):
    """Divisors for special(dtype): no 0 (torch raises for integers) and no -1 (min // -1)."""
    v = special(dtype).flip(0)
    return torch.where((v == 0) | (v == -1), torch.full_like(v, 3), v)


LAYOUTS = {
    "transposed": lambda: make(5, 4).t(),
    "stepped": lambda: make(8, 9)[::2, 1::3],
    "offset": lambda: make(6, 5)[2:, 1:4],
    "expanded": lambda: make(4, 1).expand(4, 3),
    "permuted": lambda: make(2, 3, 4).permute(2, 0, 1),
    "size1_dims": lambda: make(1, 3, 1),
    "0d": lambda: make(),
    "0d_view": lambda: make(3, 4)[1, 2],
    "empty": lambda: make(0, 3),
    "empty_transposed": lambda: make(3, 0).t(),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fused_layouts(layout):
    x = LAYOUTS[layout]()
    check(lambda y: torch.tanh(y * 2) + y, x)
    check(lambda y, z: y * z - z, x, x.clone())  # one strided, one contiguous input
    check(lambda y: torch.where(y > 0, y, 0.5) * 3, x)
    check(lambda y: ((y * 3).long() + 1, (y > 0) & (y < 1)), x)
    check(lambda y: (y + 1).reshape(-1) * 2, x)
    check(lambda y: (y.reshape(-1), y.reshape(-1) * 2), x)  # a view of an input is a region result
    if x.dim() >= 2:
        check(lambda y: y.mT * 2 + y.mT.exp(), x)


BROADCASTS = [((4, 1, 3), (5, 1)), ((3,), (2, 3)), ((), (2, 3)), ((2, 3), ()), ((1, 3), (4, 1)),
              ((0, 3), (1, 3)), ((2, 1), (2, 0))]


@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_fused_broadcasting(shapes):
    a, b = make(*shapes[0]), make(*shapes[1])
    check(lambda x, y: (x + y) * y - x, a, b)
    check(lambda x, y: torch.where(x > y, x, y) * 2, a, b)
    check(lambda x, y: torch.maximum(x, y).long() - 1, a, b)
    check(lambda x, y: (x > 0) ^ (y > 0), a, b)
    check(lambda x, y: (x + y) * 2, a.t().contiguous().t() if a.dim() == 2 else a, b)  # column-major


@pytest.mark.parametrize("dtype", [F32, F64, F16, BF16])
def test_fused_float_special_values(dtype):
    x, y = special(dtype), special(dtype).flip(0)
    t = tol(x)
    for op in (operator.add, operator.sub, operator.mul, operator.truediv, torch.maximum, torch.minimum):
        check(lambda a, b: op(a, b) * 2, x, y, **t)
    for op in (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge):
        check(lambda a, b: op(a * 1, b), x, y)
    for name in ("neg", "abs", "floor", "ceil", "round", "trunc", "sign", "relu", "sigmoid", "exp", "tanh",
                 "sqrt", "rsqrt", "reciprocal"):
        check(lambda a: getattr(torch, name)(a) * 2, x, **t)
    check(lambda a: (torch.isnan(a * 1), torch.isinf(a * 1), torch.isfinite(a * 1)), x)
    check(lambda a: (a * 1).clamp(-1, 1) + 0.5, x, **t)
    check(lambda a, b: torch.where(a > b, a, b) - 1, x, y, **t)
    check(lambda a: ((a * 2).bool(), (a * 2).double(), (a * 2).float()), x, **t)
    check(lambda a: (a * 2 + 1e39, a * 1e300), x, **t)  # numbers past the dtype's range: inf
    check(lambda a: (a + 2.5) // 2, x, **t)


@pytest.mark.parametrize("dtype", [I64, I32, I16, I8])
def test_fused_integer_ops(dtype):
    x, y = special(dtype), nonzero(dtype)
    for op in (operator.add, operator.sub, operator.mul, torch.maximum, torch.minimum, operator.and_,
               operator.or_, operator.xor, operator.eq, operator.ne, operator.lt, operator.le, operator.gt,
               operator.ge):
        check(lambda a, b: op(a * 1, b), x, y)  # wraps around like torch
    for op in (operator.floordiv, operator.mod, operator.truediv,
               lambda a, b: torch.div(a, b, rounding_mode="trunc")):
        check(lambda a, b: op(a, b) + 1, x, y)
    for name in ("neg", "abs", "sign", "bitwise_not", "relu"):
        check(lambda a: getattr(torch, name)(a) * 2, x)
    check(lambda a: (a // 3 + a // -3, a % 3 + a % -3, torch.div(a, -2, rounding_mode="trunc") * 1), x)
    check(lambda a, b: (a ** b + 1, a ** (b - 3) + 1), x, y.abs() % 4)  # negative exponents too
    check(lambda a: (a ** 2 + 1, a ** 0 + a), x)
    check(lambda a: ((a * 1).clamp(-5, 50), (a * 1).clamp(min=-2.5)), x)
    check(lambda a: (a * 2 + 2 ** 40, (a * 2 > 300) & (a < 2 ** 33)), x)  # numbers past the range wrap
    check(lambda a: ((a + 1).float(), (a + 1).bool(), (a + 1).to(I8), (a + 1).to(I64), (a + 1).half()), x)
    check(lambda a: ((a * 1) > 2.5, (a * 1) + 0.5, (a * 1) == True), x)  # noqa: E712


def test_fused_bool_ops():
    a, b = special(B), special(B).flip(0)
    check(lambda x, y: ((x & y) | ~x, x ^ y, x == y, x < y, x >= y), a, b)
    check(lambda x, y: (torch.maximum(x, y) & x, torch.minimum(x, y) | y), a, b)
    check(lambda x, y: (torch.where(x, y, ~y) & x, torch.where(x, 2, 0.5) * 2), a, b)
    check(lambda x: ((x & x).long() + 1, (x | x).float() * 2, x * 1 + True, x + x), a)
    check(lambda x: (torch.sign(x & x), torch.logical_not(x) ^ x, torch.isnan(x & x)), a)
    check(lambda x, y: (x * 1.5 + y, (x & y).sum(), (x | y).any()), a, b)


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_fused_low_precision(dtype):
    """f16/bf16 inputs: torch computes in f32 and rounds each op's result."""
    x, y = make(3, 4, dtype=dtype), make(4, dtype=dtype)
    t = tol(x)
    check(lambda a, b: (a * b + a) / (b.abs() + 1), x, y, **t)
    check(lambda a: torch.tanh(a) * torch.sigmoid(a) + F.gelu(a), x, **t)
    check(lambda a, b: (a > b, torch.maximum(a, b) * 2, (a + b).float(), (a * 3).long()), x, y, **t)
    check(lambda a: (a.float() * 2).to(dtype) + 1, x, **t)
    check(lambda a: (a * 2).half() + (a * 2).bfloat16().half(), x, **t)
    check(lambda a, b: a * b.double() + 1, x, y)  # promotes to f64
    check(lambda a: a.t() * 2 + 1, x, **t)
    check(lambda a: torch.softmax(a, -1) * 2, x, **t)


def test_clamp_of_bools_as_eager():
    """clamp of a bool tensor by one tensor bound runs (eager's clamp_min/clamp_max of tensors);
    by numbers, or by both bounds, eager raises NotImplementedError naming its kernel (found by
    the fuzzer: thunder refused clamp(b, min=b))."""
    import thunder

    b = torch.tensor([True, False, True])
    for fn in (lambda x, t: torch.clamp(x, min=t), lambda x, t: torch.clamp(x, max=t)):
        assert torch.equal(thunder.jit(fn, fusion="always")(b, ~b), fn(b, ~b))
    for fn, kernel in ((lambda x, t: torch.clamp(x, min=True), "clamp_min_scalar_cpu"),
                       (lambda x, t: torch.clamp(x, min=t, max=t), "clamp_cpu"),
                       (lambda x, t: torch.clamp(x, min=False, max=True), "clamp_scalar_cpu")):
        with pytest.raises(NotImplementedError, match=kernel):
            fn(b, b)
        with pytest.raises(NotImplementedError, match=kernel):
            thunder.jit(fn)(b, b)


def test_pow_of_bools_by_zero_or_one_as_eager():
    """torch.pow(bool tensor, True / False) copies / fills ones, as torch short-cuts exponents 0
    and 1 before its kernel's dtype check (found by the fuzzer: thunder raised "pow" not
    implemented for 'Bool'); a bool exponent tensor still raises eager's error."""
    import thunder

    b = torch.tensor([True, False, True])
    for fn in (lambda x: torch.pow(x, True), lambda x: x ** False, lambda x: x.pow(1), lambda x: x ** 0.0):
        for fusion in ("auto", "always"):
            got, want = thunder.jit(fn, fusion=fusion)(b), fn(b)
            assert got.dtype == want.dtype and torch.equal(got, want)
    with pytest.raises(NotImplementedError, match="pow"):
        thunder.jit(lambda x: torch.pow(x, x))(b)


def test_complex32_as_eager():
    """torch.complex32 (x.half() of a complex64 tensor, x.chalf()) is traced (complex<f16>):
    found by the fuzzer, where thunder refused the dtype; its ops give eager's results, eager's
    error where its kernel has none (sum)."""
    import thunder

    x = torch.tensor([1 + 2j, 3 - 1j, -0.5 + 0.25j], dtype=torch.complex64)
    for fn in (lambda x: x.half().reshape(-1) + x, lambda x: x.chalf() * x.chalf() - x.chalf(),
               lambda x: x.chalf().abs(), lambda x: torch.view_as_real(torch.cat([x.chalf(), -x.chalf()]))):
        for fusion in ("auto", "always"):
            got, want = thunder.jit(fn, fusion=fusion)(x), fn(x)
            assert got.dtype == want.dtype
            assert torch.equal(torch.view_as_real(got.to(torch.complex64)) if got.is_complex() else got,
                               torch.view_as_real(want.to(torch.complex64)) if want.is_complex() else want)
    with pytest.raises(NotImplementedError, match="ComplexHalf"):
        thunder.jit(lambda x: x.chalf().sum())(x)


@pytest.mark.parametrize("fusion", ["always", None])
def test_an_integer_tensor_meets_float16_in_float16_first(fusion):
    # torch converts the int64 operand to the result's dtype before its kernel computes in
    # float32: 2049 rounds to 2048, and inf's int64 (the lowest) to -inf, so -inf + inf is nan;
    # the widened decomposition (a + alpha * b rounded once) converted it to float64 directly,
    # and in a kernel LLVM's fptosi of inf (poison) came out positive
    def f(a, b):
        return torch.add(a, b, alpha=2)

    a = torch.tensor([2049, 4097, -2049, 70000], dtype=torch.int64)
    b = torch.tensor([0.5, 0.25, 1.0, 2.0], dtype=torch.float16)
    jf = thunder.jit(f, fusion=fusion) if fusion else thunder.jit(f)
    assert torch.equal(jf(a, b), f(a, b))
    x = torch.tensor([float("inf"), 1.0], dtype=torch.float16)
    jg = thunder.jit(lambda x: torch.add(x.long(), x, alpha=2), fusion=fusion) if fusion else \
        thunder.jit(lambda x: torch.add(x.long(), x, alpha=2))
    torch.testing.assert_close(jg(x), torch.add(x.long(), x, alpha=2), equal_nan=True)

