"""VJP rules at special points: gradients through thunder.jit equal torch.autograd's where inputs
are 0, -0, negative, tied, inf or NaN (eager's conventions: prod's gradient at a zero is the
product of the others, relu passes g where its result is NaN, max/min share ties, clamp and
hardtanh at their bounds, atan2 at the origin, ...). One entry per ltorch op with a VJP rule whose
result depends on the input's values; a test checks that every such rule has one."""
import math

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.dialects.definitions import define_all
from thunder.ops import registry

inf, nan = math.inf, math.nan


def vec(*v):
    return torch.tensor(v, dtype=torch.float64)


SPECIAL = vec(0., -0., 1., -1., 2., -2.5, 0.5, inf, -inf, nan)
A = vec(1., 2., 0., -1., 3., inf, nan, 0., -inf)  # against B: ties, zeros, signed zeros, inf, NaN
B = vec(1., 1., 0., -1., 4., inf, 1., -0., 2.)
ZEROS = torch.tensor([[1., 0., 3.], [0., 0., 2.], [4., 5., 6.], [0., nan, 1.], [2., inf, 0.]], dtype=torch.float64)
TIES = torch.tensor([[1., 3., 3.], [2., 2., 2.], [nan, 1., 1.], [-inf, -inf, 0.], [inf, 1., inf]],
                    dtype=torch.float64)
FLAT = torch.tensor([[1., 1., 1.], [0., 1., 2.], [-1., 0., 1.]], dtype=torch.float64)  # zero spread

# ltorch op name -> [(function, inputs)]
CASES = {
    "neg": [(torch.neg, [SPECIAL])],
    "abs": [(torch.abs, [SPECIAL])],
    "exp": [(torch.exp, [SPECIAL])],
    "log": [(torch.log, [SPECIAL]), (lambda x: torch.relu(torch.log(x)), [SPECIAL])],
    "sqrt": [(torch.sqrt, [SPECIAL])],
    "rsqrt": [(torch.rsqrt, [SPECIAL])],
    "tanh": [(torch.tanh, [SPECIAL])],
    "sigmoid": [(torch.sigmoid, [SPECIAL])],
    "add": [(lambda a, b: torch.add(a, b, alpha=-2), [A, B])],
    "sub": [(lambda a, b: torch.sub(a, b, alpha=3), [A, B])],
    "rsub": [(lambda a: 1. - a, [SPECIAL])],
    "mul": [(torch.mul, [A, B])],
    "div": [(torch.div, [A, B]), (lambda a, b: torch.div(a, b, rounding_mode="floor"), [A, B])],
    "true_divide": [(torch.true_divide, [A, B])],
    "rtruediv": [(lambda a: 1. / a, [SPECIAL])],
    "pow": [(torch.pow, [A, B]), (lambda x: x ** 2, [SPECIAL]), (lambda x: x ** 0, [SPECIAL]),
            (lambda x: x ** 0.5, [SPECIAL]), (lambda x: x ** -1, [SPECIAL]), (lambda x: x ** 2.5, [SPECIAL]),
            (torch.pow, [vec(0., 0., 0., -1., 2., 0.), vec(0., 1., -1., 2., 0., 0.5)])],
    "rpow": [(lambda x: 2. ** x, [SPECIAL]), (lambda x: 0. ** x, [SPECIAL]), (lambda x: (-2.) ** x, [SPECIAL])],
    "maximum": [(torch.maximum, [A, B])],
    "minimum": [(torch.minimum, [A, B])],
    "where": [(lambda x: torch.where(x > 0, torch.log(x), x), [SPECIAL]),
              (lambda a, b: torch.where(a > b, a, b), [A, B])],
    "clamp": [(lambda x: x.clamp(-1., 1.), [SPECIAL]),
              (lambda x, lo, hi: x.clamp(lo, hi),
               [vec(0., 1., 2., 3., nan, 5., 0.), vec(0., 2., 2., 4., 0., nan, 2.), vec(1., 1., 2., 2., 1., 6., 1.)])],
    "clamp_min": [(lambda x: x.clamp(min=0.), [SPECIAL]), (torch.clamp_min, [A, B])],
    "clamp_max": [(lambda x: x.clamp(max=0.), [SPECIAL]), (torch.clamp_max, [A, B])],
    "relu": [(torch.relu, [SPECIAL]), (lambda x: F.relu(x.sum(0)), [TIES])],
    "hardtanh": [(lambda x: F.hardtanh(x, -1., 1.), [SPECIAL])],
    "leaky_relu": [(lambda x: F.leaky_relu(x, 0.2), [SPECIAL])],
    "threshold": [(lambda x: F.threshold(x, 0.5, -1.), [SPECIAL])],
    # the activations' backward ops (a gradient of their gradient): zeros for the input, as eager's
    "threshold_backward": [(lambda g, x: torch.ops.aten.threshold_backward(g, x, 0.5), [B, SPECIAL[:9]])],
    "leaky_relu_backward": [(lambda g, x: torch.ops.aten.leaky_relu_backward(g, x, 0.2, False), [B, SPECIAL[:9]])],
    "hardtanh_backward": [(lambda g, x: torch.ops.aten.hardtanh_backward(g, x, -1., 1.), [B, SPECIAL[:9]])],
    # no +-inf for the erf form: eager's vectorized f32 gelu gives NaN there (its scalar path and
    # f64 give +-inf and 0, as the fused kernel does)
    "gelu": [(F.gelu, [SPECIAL[SPECIAL.isfinite() | SPECIAL.isnan()]]),
             (lambda x: F.gelu(x, approximate="tanh"), [SPECIAL])],
    "silu": [(lambda x: F.silu(x), [SPECIAL])],
    "softplus": [(F.softplus, [SPECIAL]), (lambda x: F.softplus(x, 2., 1.), [SPECIAL])],
    "sum": [(lambda x: x.sum(1), [TIES])],
    "mean": [(lambda x: x.mean(1), [TIES])],
    "prod": [(lambda x: x.prod(), [ZEROS]), (lambda x: x.prod(), [vec(2., 0., 3., inf)]),
             (lambda x: x.prod(), [vec(2., 0., 3., 0.5)]), (lambda x: x.prod(), [vec(0., 0., nan)]),
             (lambda x: x.prod(), [vec(2., 4., inf)]), (lambda x: x.prod(1), [ZEROS]),
             (lambda x: x.prod(0, keepdim=True), [ZEROS]), (lambda x: x.prod(-1), [ZEROS[2:3]]),
             (lambda x: x.prod(1), [vec(inf, 2., 0.)[:, None]]), (lambda x: x.prod(1), [vec(inf, 2.)[:, None]])],
    # ltorch.remainder has no rule of its own: prims.remainder's runs (decomposed in the forward)
    "remainder": [(torch.remainder, [vec(inf, -inf, nan, 5., -5., 7., 0., 1.), vec(2., 3., 1., 3., 3., -2., inf, -inf)])],
    # 0-d inputs: a product and a max of one element
    "prod_max_0d": [(lambda x: x.prod() + x.prod(0) + x.max() + x.max(0)[0], [vec(0.)[0]])],
    "amax": [(lambda x: x.amax(1), [TIES]), (lambda x: x.amax(), [TIES[:2]])],
    "amin": [(lambda x: x.amin(1), [TIES])],
    # a 0-d NaN: torch's gradient is NaN (0 / 0 ties), not g
    "amax_amin_0d": [(lambda x: x.amax(0) - x.amin(0) * 2, [vec(nan)[0]]), (lambda x: x.amax(0), [vec(-inf)[0]])],
    "max": [(lambda x: x.max(), [TIES]), (lambda x: x.max(), [TIES[:2]]), (lambda x: x.max(1)[0], [TIES]),
            (lambda x: x.max(0, keepdim=True)[0] * 2, [TIES])],
    "min": [(lambda x: x.min(), [TIES]), (lambda x: x.min(1)[0], [TIES])],
    "var": [(lambda x: x.var(1), [FLAT]), (lambda x: x.var(1), [TIES])],
    "std": [(lambda x: x.std(1), [FLAT]), (lambda x: x.std(), [FLAT[:1]]), (lambda x: x.std(1), [TIES])],
    "softmax": [(lambda x: torch.softmax(x, 1), [TIES])],
    "log_softmax": [(lambda x: torch.log_softmax(x, 1), [TIES])],
    "logsumexp": [(lambda x: torch.logsumexp(x, 1), [TIES]), (lambda x: torch.logsumexp(x, (0, 1), True), [FLAT])],
    "layer_norm": [(lambda x: F.layer_norm(x, (3,)), [FLAT])],
    # (what layer_norm runs as when differentiated: its mean and rstd saved for backward)
    "native_layer_norm": [(lambda x, w: F.layer_norm(x, (3,), w, w), [FLAT, vec(1., 0., -2.)])],
    "rms_norm": [(lambda x: F.rms_norm(x, (3,)), [FLAT * 0])],
    "batch_norm": [(lambda x: F.batch_norm(x, None, None, training=True), [FLAT.t().contiguous()])],
    # (what an affine batch_norm with running stats runs as in training: torch's kernels)
    "native_batch_norm": [(lambda x, w: F.batch_norm(x, x.new_zeros(3), x.new_ones(3), w, w, training=True),
                           [FLAT.t().contiguous(), vec(1., 0., -2.)])],
    "group_norm": [(lambda x: F.group_norm(x, 1), [FLAT[None]])],
    "max_pool2d": [(lambda x: F.max_pool2d(x, 2), [torch.tensor([[[[1., 1.], [1., 0.]]]], dtype=torch.float64)])],
    "masked_fill": [(lambda x: x.masked_fill(x > 1, 0.), [SPECIAL])],
    "square": [(torch.square, [SPECIAL])],
    "relu6": [(F.relu6, [SPECIAL]), (F.relu6, [vec(0., 6., 3., -1., 7.)])],
    "hardsigmoid": [(F.hardsigmoid, [SPECIAL]), (F.hardsigmoid, [vec(-3., 3., 0., -4., 4.)])],
    "hardswish": [(F.hardswish, [SPECIAL]), (F.hardswish, [vec(-3., 3., 0., -4., 4.)])],
    "mish": [(F.mish, [SPECIAL[SPECIAL.isfinite() | SPECIAL.isnan()]])],
    "normalize": [(lambda x: F.normalize(x, dim=1), [FLAT]), (lambda x: F.normalize(x * 0, dim=1), [FLAT])],
    "sort": [(lambda x: torch.sort(x, 1)[0] * vec(1., 2., 3.), [TIES])],
    "topk": [(lambda x: torch.topk(x, 2, 1)[0] * vec(1., 2.), [TIES])],
}

# rules whose cotangent does not depend on the input's values (linear maps: shapes, indexing,
# matmul-like, conversions, copies) or that have no special points of their own (random ops)
# fallback: the generic op's VJP is torch's own derivative of the call, special points included
# (fallback and custom_function: the gradient is torch's own, or the user's autograd.Function backward)
LINEAR_MODULES = {"thunder.ops.shape", "thunder.ops.join_split", "thunder.ops.repeat_pad", "thunder.ops.creation",
                  "thunder.ops.grad", "thunder.ops.random_ops", "thunder.ops.fallback", "thunder.ops.custom_function"}
LINEAR = {"matmul", "rmatmul", "mm", "bmm", "linear", "embedding", "conv1d", "conv2d", "conv_transpose2d",
          "avg_pool2d", "adaptive_avg_pool2d", "bilinear", "index_select", "gather", "scatter_add", "index_put",
          "scaled_dot_product_attention", "sdpa_flash", "index", "setitem", "addmm", "baddbmm", "cumsum"}


def test_every_value_dependent_rule_has_special_points():
    define_all()
    rules = {op.name for op in registry.OPS.values() if op.dialect == "ltorch" and op.vjp_rule is not None
             and op.meta.__module__ not in LINEAR_MODULES and op.name not in LINEAR}
    assert rules - set(CASES) == set()


# thunder prim -> [(function whose decomposition is that prim, inputs)]: with thunder-decompose
# before autograd, the prims' own rules run (other ltorch ops' decompositions are formulas whose
# derivatives need not follow eager's conventions at special points)
PRIM_CASES = {
    "abs": [(torch.abs, [SPECIAL])],
    "exp": [(torch.exp, [SPECIAL])],
    "log": [(torch.log, [SPECIAL])],
    "sqrt": [(torch.sqrt, [SPECIAL])],
    "rsqrt": [(torch.rsqrt, [SPECIAL])],
    "reciprocal": [(torch.reciprocal, [SPECIAL])],
    "tanh": [(torch.tanh, [SPECIAL])],
    "div": [(torch.div, [A, B])],
    "pow": [(torch.pow, [A, B]), (torch.exp2, [SPECIAL]), (lambda x: 0. ** x, [SPECIAL]),
            (torch.pow, [vec(0., 0., 0., -1., 2., 0.), vec(0., 1., -1., 2., 0., 0.5)])],
    "maximum": [(torch.maximum, [A, B])],
    "minimum": [(torch.minimum, [A, B])],
    # the divisor's cotangent uses torch's floor division (NaN for an infinite dividend): found
    # by the fuzzer
    "remainder": [(torch.remainder, [vec(inf, -inf, nan, 5., -5., 7., 0., 1.), vec(2., 3., 1., 3., 3., -2., inf, -inf)])],
    "atan2": [(torch.atan2, [vec(0., 0., 1., -1., 1e-200, 0., nan, inf), vec(0., 1., 0., -0., 0., 1e-200, 0., 1.)])],
    "where": [(lambda a, b: torch.where(a > b, a, b), [A, B])],
    # (a whole product with two zeros beside inf/NaN: eager's shortcut, which only ltorch.prod's rule knows)
    "prod": [(lambda x: x.prod(1), [ZEROS]), (lambda x: x.prod(0), [ZEROS]), (lambda x: x.prod(), [vec(2., 0., 3., inf)]),
             (lambda x: x.prod(), [vec(2., 4., inf)])],
    "amax": [(lambda x: x.amax(1), [TIES])],
}

PARAMS = [pytest.param(fn, inputs, id=f"{name}-{i}") for name, cases in CASES.items()
          for i, (fn, inputs) in enumerate(cases)]
PRIM_PARAMS = [pytest.param(fn, inputs, id=f"{name}-{i}") for name, cases in PRIM_CASES.items()
               for i, (fn, inputs) in enumerate(cases)]


def _check(fn, inputs, options, dtype):
    expected, expected_grads = _grads(fn, inputs, None, dtype)
    out, grads = _grads(fn, inputs, options, dtype)
    torch.testing.assert_close(out, expected, equal_nan=True)
    for g, e in zip(grads, expected_grads):
        if e is None:
            assert g is None
        else:
            torch.testing.assert_close(g, e, equal_nan=True)


def _grads(fn, inputs, jit_options, dtype):
    xs = [t.to(dtype).requires_grad_() for t in inputs]
    f = thunder.jit(fn, **jit_options) if jit_options is not None else fn
    out = f(*xs)
    g = torch.full_like(out, 2.)
    return out, torch.autograd.grad(out, xs, g, allow_unused=True)


@pytest.mark.parametrize("fn, inputs", PARAMS)
@pytest.mark.parametrize("options, dtype", [({}, torch.float64), ({"fusion": "always"}, torch.float32)],
                         ids=["default-f64", "fused-f32"])
def test_gradient_at_special_points(fn, inputs, options, dtype):
    _check(fn, inputs, options, dtype)


@pytest.mark.parametrize("fn, inputs", PRIM_PARAMS)
def test_prim_gradient_at_special_points(fn, inputs):
    _check(fn, inputs, {"transforms": ["thunder-decompose"], "executors": ["torch"]}, torch.float64)
