"""Every prim the kernels fuse (lowering/linalg/scalar.py's SUPPORTED, the set thunder-fuse claims
for the linalg and cuda executors) through the CUDA executor's lowering without a GPU: for each
prim, the dtypes its meta and eager accept (casts: every pair), its region's kernels run by the
emulator (lowering/gpu/emulate.py) against the prim run by torch, and the PTX of all of them
assembled by ptxas for sm_80 and sm_90 in one batch (tests/conftest.py flushes op_harness's batch
after this module). The samples come from the prim registry (parameter kinds): only the shape
ops and reductions, whose attributes no signature gives, have written samples, and
test_every_fusible_prim_is_walked fails for a prim added to SUPPORTED without one. Patterns
beyond single prims (cat of computed parts, pads, strided slices, a rotary embedding) follow."""
import importlib.util

import pytest
import torch

from op_harness import _emulated_kernels, fused_variant, trace_module
from thunder.dialects.definitions import context
from thunder.dialects.mlir import ir
from thunder.lowering.decompose import decompose_module
from thunder.lowering.executors import LIBM_CALLS
from thunder.lowering.linalg.scalar import ELEMENTWISE, REDUCTIONS, SUPPORTED
from thunder.ops import prims
from thunder.ops.registry import OPS
from thunder.runtime.codegen import compile_source, python_source

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llvmlite") is None,
                                reason="llvmlite (the cuda extra) is not installed")

F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
DTYPES = [F32, F16, BF16, F64, torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool]
LOW = {F16: dict(rtol=2e-3, atol=2e-3), BF16: dict(rtol=1.6e-2, atol=1.6e-2)}
SHAPE = (3, 40)  # 40: vector loads of 4 f32 / 8 f16 along the last dim


def _make(shape, dtype, second=False):
    g = torch.Generator().manual_seed(len(shape) + second)
    if dtype is torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        return (x.abs() + 0.25 if second else x * 3).to(dtype)
    low = 1 if second else (0 if dtype is torch.uint8 else -6)
    return torch.randint(low, 7, shape, generator=g, dtype=dtype)


def _walk(fn, *args, **tol):
    """fn's (prim calls') regions run as emulated CUDA kernels, against fn run by torch (the traced
    program, undecomposed); False when thunder-fuse claims no region or eager refuses the call."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    try:
        module = trace_module(fn, *args)
    except (ValueError, TypeError, RuntimeError, NotImplementedError):
        return False  # the prim's meta refuses these dtypes
    with context():
        try:
            expected = compile_source(python_source(module))(*tensors)
        except (RuntimeError, ZeroDivisionError):
            return False  # so does eager
        d = ir.Module.parse(module.operation.get_asm(enable_debug_info=True))
        decompose_module(d.operation)
        f, n = fused_variant(d)
        if n == 0:
            return False
        kernels = {}
        src = python_source(f, constants=kernels)
        _emulated_kernels(f, kernels)
        out = compile_source(src, constants=kernels)(*tensors)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    out = list(out) if isinstance(out, tuple) else [out]
    for a, e in zip(out, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, e.dtype, a.shape, e.shape)
        t = tol or LOW.get(e.dtype) or next((LOW[x.dtype] for x in tensors if x.dtype in LOW), {})
        torch.testing.assert_close(a, e, equal_nan=True, **t)
    return True


def _prim(name):
    return OPS[f"thunder.{name}"]


def _kinds(name):
    return [p.kind.base_name for p in _prim(name).params]


ELEMENTWISE_PRIMS = sorted(n for n in ELEMENTWISE if f"thunder.{n}" in OPS)


@pytest.mark.parametrize("name", ELEMENTWISE_PRIMS)
def test_elementwise_prim(name):
    """Every elementwise prim on every dtype its meta and eager take (operands from its signature:
    tensors of one shape; a DType parameter: every target dtype)."""
    op = _prim(name)
    kinds = _kinds(name)
    walked = 0
    for dtype in DTYPES:
        if "dtype" in kinds:  # convert_element_type: every target
            for to in DTYPES:
                walked += _walk(lambda a, to=to: op(a, to), _make(SHAPE, dtype))
            continue
        args = []
        for k, p in zip(kinds, op.params):
            if k in ("Tensor", "TensorOrNumber"):
                want = torch.bool if (name == "where" and not args) else dtype
                args.append(_make(SHAPE, want, second=len(args) > 0))
        walked += _walk(lambda *xs: op(*xs), *args)
    # (sin, cos, atan2 and pow by a tensor call libm: thunder-fuse leaves them to torch)
    assert walked or f"thunder.{name}" in LIBM_CALLS, f"thunder.{name}: no dtype reached a CUDA kernel"


REDUCTION_DIMS = [(1,), (0,), (0, 1)]  # rows (cooperative), columns (a loop per output), everything


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_prim(name):
    op = _prim(name)
    walked = 0
    for dtype in [F32, F16, BF16, torch.int64, torch.int32]:
        for dims in REDUCTION_DIMS:
            x = _make((5, 300), dtype) if dtype.is_floating_point else _make((5, 300), dtype).clamp(-1, 2)
            walked += _walk(lambda a, dims=dims: op(a, dims), x, **({} if dtype in LOW else dict(rtol=1e-5, atol=1e-5)))
    assert walked


# the shape ops' attributes: no signature gives them
SHAPE_SAMPLES = {
    "broadcast_in_dim": [lambda a: prims.add(prims.broadcast_in_dim(a[0], (4, 3, 40), (1, 2)),
                                             prims.full((4, 3, 40), 1.0, dtype=a[0].dtype, device=a[0].device))],
    "reshape": [lambda a: prims.neg(prims.reshape(a[0], (6, 20))), lambda a: prims.reshape(prims.neg(a[0]), (120,))],
    "transpose": [lambda a: prims.neg(prims.transpose(a[0], (1, 0)))],
    "slice": [lambda a: prims.neg(prims.slice(a[0], (1, 3), (3, 40), (1, 1))),
              lambda a: prims.neg(prims.slice(a[0], (0, 1), (3, 40), (2, 3)))],  # strided
    "full": [lambda a: prims.add(a[0], prims.full((3, 40), 2, dtype=a[0].dtype, device=a[0].device))],
    "iota": [lambda a: prims.add(prims.reshape(prims.convert_element_type(
        prims.iota(120, start=-3, step=2, dtype=torch.int64, device=a[0].device), a[0].dtype), (3, 40)), a[0])],
    "cat": [lambda a: prims.cat((prims.neg(a[0]), a[0]), 1),  # along the last dim
            lambda a: prims.cat((a[0], prims.mul(a[0], a[0]), a[0]), 0),  # along the first
            lambda a: prims.mul(prims.cat((prims.slice(a[0], (0, 20), (3, 40), (1, 1)),
                                           prims.slice(a[0], (0, 0), (3, 20), (1, 1))), 1), a[0])],
    # a slice's gradient: two halves swapped and added (a rotary embedding's backward, parts along
    # the last dim), two dims sliced, strided (written into zeros)
    "unslice": [lambda a: prims.add(prims.unslice(prims.slice(a[0], (0, 0), (3, 20), (1, 1)), (3, 40), (0, 20), (3, 40),
                                                  (1, 1)),
                                    prims.unslice(prims.slice(a[0], (0, 20), (3, 40), (1, 1)), (3, 40), (0, 0), (3, 20),
                                                  (1, 1))),
                lambda a: prims.neg(prims.unslice(prims.slice(a[0], (1, 3), (3, 40), (1, 1)), (3, 40), (1, 3), (3, 40),
                                                  (1, 1))),
                lambda a: prims.neg(prims.unslice(prims.slice(a[0], (0, 1), (3, 40), (2, 3)), (3, 40), (0, 1), (3, 40),
                                                  (2, 3)))],
}


SHAPE_OPS = sorted(set(SUPPORTED) - set(ELEMENTWISE) - REDUCTIONS)


@pytest.mark.parametrize("name", SHAPE_OPS)
def test_shape_prim(name):
    assert name in SHAPE_SAMPLES, f"thunder.{name} is fused but has no sample here: add one to SHAPE_SAMPLES"
    for sample in SHAPE_SAMPLES[name]:
        for dtype in [F32, BF16, F16, torch.int64]:
            assert _walk(lambda a, s=sample: s([a]), _make(SHAPE, dtype)), f"{name} on {dtype}"


def test_every_fusible_prim_is_walked():
    """Every prim the kernels fuse is one of the tests above (a prim added to SUPPORTED without a
    way to call it here fails)."""
    walked = set(ELEMENTWISE_PRIMS) | REDUCTIONS | set(SHAPE_SAMPLES)
    assert set(SUPPORTED) <= walked, f"no CUDA lowering test for {sorted(set(SUPPORTED) - walked)}"
