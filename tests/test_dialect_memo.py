"""What the dialect layer remembers per op, type and attribute (dialects/definitions.py,
attrs.py, emit.py) changes no result: a verified signature does not let a wrong op through, the
shared context's objects are the only keys, and symbolic dims are never taken for the int they
equal."""
import pytest
import torch

from thunder.core import symbols
from thunder.dialects import attrs, definitions
from thunder.dialects.mlir import ir
from thunder.dialects.texts import shared

_GOOD = """func.func @computation(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %0 = "ltorch.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}"""
_BAD = _GOOD.replace("2x4xf32", "2x3xf32")
_ERROR = ("'ltorch.matmul' op result types (tensor<2x3xf32>) do not match the inferred types "
          "(tensor<2x4xf32>)")


def _refusal(ctx, text):
    """The verifier's message for a module, or None where it verifies."""
    with ctx:
        try:
            ir.Module.parse(text).operation.verify()  # (parsing verifies too)
        except ir.MLIRError as e:
            return str(e)
    return None


def _other_context():
    ctx = ir.Context()
    with ctx:
        definitions.LTorch.load()
        definitions.Thunder.load()
    return ctx


@pytest.mark.parametrize("where", ["shared", "other"])
def test_a_wrong_op_is_refused_after_the_right_one_verified(where):
    ctx = definitions.context() if where == "shared" else _other_context()
    assert _refusal(ctx, _GOOD) is None
    for _ in range(2):  # (a refusal is not remembered as a verification either)
        assert _ERROR in (_refusal(ctx, _BAD) or "")
    assert _refusal(ctx, _GOOD) is None


def test_only_the_shared_contexts_objects_are_remembered():
    other = _other_context()
    with other, ir.Location.unknown():
        t = ir.RankedTensorType.get([5, 7], ir.F32Type.get())
        assert attrs.tensor_meta(t) == ((5, 7), torch.float32, torch.device("cpu"))
        assert attrs.tensor_type((5, 7), torch.float32, "cpu").context is other
    assert _refusal(other, _GOOD.replace("2x", "6x")) is None
    ctx = definitions.context()
    with ctx, ir.Location.unknown():
        assert attrs.tensor_type((5, 7), torch.float32, "cpu").context is ctx
    assert all(t.context is shared() for t in [*attrs._META, *attrs._TYPES.values()])
    assert all(a.context is shared() for _, a in [*attrs._CONSTANTS, *definitions._DECODED])


def test_a_symbolic_dim_stays_dynamic_after_its_value_was_a_type():
    n = symbols._make(4, "s0")
    assert isinstance(n, int) and n == 4 and symbols.is_symbolic(n)
    with definitions.context(), ir.Location.unknown():
        assert str(attrs.tensor_type((4, 3), torch.float32, "cpu")) == "tensor<4x3xf32>"
        assert str(attrs.tensor_type((n, 3), torch.float32, "cpu", dynamic=True)) == "tensor<?x3xf32>"
        assert str(attrs.tensor_type((n, 3), torch.float32, "cpu")) == "tensor<4x3xf32>"
