"""Encoding of Python values as MLIR attributes, constants and types, and back."""
import torch

from thunder.core import dtypes, symbols
from thunder.dialects.mlir import arith, complex_, ir
from thunder.dialects.texts import shared, text
from thunder.ops.impl import TENSOR_INDEX


# ---- tensor types, and the scalar types of runtime numbers
_NUMBER_TYPES = {torch.float64: "f64", torch.int64: "i64", torch.bool: "i1"}
NUMBER_TYPE_NAMES = frozenset(_NUMBER_TYPES.values())


# (shape, dtype, device) -> its type in the shared context (texts.shared(): never freed), for
# shapes of plain ints (a symbolic dim, an int subclass, may be `?`)
_TYPES = {}


def tensor_type(shape, dtype, device, dynamic=False):
    """The MLIR type of a value of this metadata: a ranked tensor type, or for device None (a
    runtime number, core/numbers.py) the scalar type f64, i64 or i1. dynamic: symbolic dims
    (core/symbols.py) are `?`."""
    key = (tuple(shape), dtype, device)
    if ir.Context.current is not shared() or not all(type(d) is int for d in key[0]):
        return _tensor_type(shape, dtype, device, dynamic)
    t = _TYPES.get(key)
    if t is None:
        t = _TYPES[key] = _tensor_type(shape, dtype, device, dynamic)
    return t


def _tensor_type(shape, dtype, device, dynamic):
    if device is None:
        return ir.Type.parse(_NUMBER_TYPES[dtype])
    if dynamic:
        shape = [ir.ShapedType.get_dynamic_size() if symbols.is_symbolic(d) else d for d in shape]
    elt = ir.Type.parse(dtypes.to_mlir_name(dtype))
    device = torch.device(device)
    if device.type == "cpu":
        return ir.RankedTensorType.get(list(shape), elt)
    return ir.RankedTensorType.get(list(shape), elt, encoding=ir.StringAttr.get(str(device)))


_CPU = torch.device("cpu")
_META = {}  # the shared context's types (texts.shared(): uniqued, never freed) -> tensor_meta


def tensor_meta(t):
    """(shape, dtype, device) of an MLIR tensor type; ((), dtype, None) of a scalar type (a
    runtime number)."""
    meta = _META.get(t)
    if meta is None:
        meta = _tensor_meta(t)
        if t.context is shared():
            _META[t] = meta
    return meta


def _tensor_meta(t):
    if not isinstance(t, ir.RankedTensorType):
        try:
            t = ir.RankedTensorType(t)
        except ValueError:
            # (index: a size computed from symbols, dialects/sizes.py: an int)
            return (), {"f64": torch.float64, "i64": torch.int64, "i1": torch.bool, "index": torch.int64}[str(t)], None
    device = torch.device(ir.StringAttr(t.encoding).value) if t.encoding is not None else _CPU
    return tuple(t.shape), dtypes.from_mlir_name(text(t.element_type)), device


def is_constant(value: ir.Value):
    """Whether a value is a number constant (arith.constant, complex.constant) rather than a tensor
    or a runtime number."""
    return is_constant_op(value.owner)


def is_constant_op(owner):
    """Whether a value's owner (value.owner: an op, or the block of an argument) makes a number
    constant."""
    return isinstance(owner, ir.OpView) and owner.name in CONSTANT_OPS


def is_tensor_type(t):
    return isinstance(t, ir.RankedTensorType)


# ---- numbers: operands of scalar type
CONSTANT_OPS = ("arith.constant", "complex.constant")  # the ops that make numbers


def number_type(value):
    if isinstance(value, bool):
        return ir.IntegerType.get_signless(1)
    if isinstance(value, int):
        return ir.IntegerType.get_signless(64)
    if isinstance(value, float):
        return ir.F64Type.get()
    if isinstance(value, complex):
        return ir.ComplexType.get(ir.F64Type.get())
    raise NotImplementedError(f"thunder: numbers of type {type(value).__name__} are not supported")


def constant(value):
    t = number_type(value)
    if isinstance(value, complex):
        parts = [ir.FloatAttr.get(ir.F64Type.get(), x) for x in (value.real, value.imag)]
        return complex_.ConstantOp(t, ir.ArrayAttr.get(parts)).result
    if isinstance(value, float):
        attr = ir.FloatAttr.get(t, value)
    else:
        attr = ir.IntegerAttr.get(t, int(value))
    return arith.ConstantOp(t, attr).result


def constant_value(value: ir.Value):
    """The Python number an arith.constant (complex.constant) stands for, or raise ValueError."""
    return constant_of(value.owner)


# (op name, value attribute) -> the number, for the shared context's attributes (texts.shared():
# uniqued and never freed, so an attribute stands for its value)
_CONSTANTS = {}


def constant_of(owner):
    """The Python number of a constant op (a value's owner), or raise ValueError."""
    if not is_constant_op(owner):
        raise ValueError("not a constant")
    attr = owner.attributes["value"]
    key = (owner.name, attr)
    v = _CONSTANTS.get(key)
    if v is None:
        v = _constant_number(owner.name, attr)
        if attr.context is shared():
            _CONSTANTS[key] = v
    return v


def _constant_number(name, attr):
    if name == "complex.constant":
        re, im = (ir.FloatAttr(a).value for a in ir.ArrayAttr(attr))
        return complex(re, im)
    if isinstance(attr, ir.FloatAttr):
        return ir.FloatAttr(attr).value
    v = ir.IntegerAttr(attr).value
    if isinstance(ir.IntegerAttr(attr).type, ir.IndexType):  # a size (dialects/sizes.py)
        return v
    return bool(v) if ir.IntegerType(ir.IntegerAttr(attr).type).width == 1 else v


# ---- attributes, by parameter kind
def i64(v):
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def _encode_index_entry(e):
    if e is None:
        return ir.UnitAttr.get()
    if e is Ellipsis:
        return ir.StringAttr.get("...")
    if e is TENSOR_INDEX:  # where the next index tensor operand goes
        return ir.StringAttr.get("tensor")
    if isinstance(e, bool):
        return ir.BoolAttr.get(e)
    if isinstance(e, int):
        return i64(e)
    if isinstance(e, slice):
        return ir.DictAttr.get({k: i64(getattr(e, k)) for k in ("start", "stop", "step")
                                if getattr(e, k) is not None})
    raise NotImplementedError(f"thunder: index of type {type(e).__name__} is not supported")


def _decode_index_entry(a):
    if isinstance(a, ir.UnitAttr):
        return None
    if isinstance(a, ir.StringAttr):
        return Ellipsis if ir.StringAttr(a).value == "..." else TENSOR_INDEX
    if isinstance(a, ir.BoolAttr):
        return ir.BoolAttr(a).value
    if isinstance(a, ir.IntegerAttr):
        return ir.IntegerAttr(a).value
    d = ir.DictAttr(a)
    return slice(*(ir.IntegerAttr(d[k]).value if k in d else None for k in ("start", "stop", "step")))


def _encode_data(v):
    if isinstance(v, (tuple, list)):
        return ir.ArrayAttr.get([_encode_data(x) for x in v])
    if isinstance(v, bool):
        return ir.BoolAttr.get(v)
    if isinstance(v, int):
        return i64(v)
    return ir.FloatAttr.get(ir.F64Type.get(), v)


def _decode_data(a):
    if isinstance(a, ir.ArrayAttr):
        return tuple(_decode_data(x) for x in ir.ArrayAttr(a))
    if isinstance(a, ir.BoolAttr):
        return ir.BoolAttr(a).value
    if isinstance(a, ir.IntegerAttr):
        return ir.IntegerAttr(a).value
    return ir.FloatAttr(a).value


def encode(kind, value):
    if value is None:
        return ir.UnitAttr.get()
    k = kind.base_name
    if k == "int":
        return i64(value)
    if k == "float":
        return ir.FloatAttr.get(ir.F64Type.get(), float(value))
    if k == "bool":
        return ir.BoolAttr.get(value)
    if k == "str":
        return ir.StringAttr.get(value)
    if k == "Ints" or (k == "Dims" and isinstance(value, tuple)):
        return ir.DenseI64ArrayAttr.get(list(value))
    if k == "Dims":
        return i64(value)
    if k == "dtype":
        return ir.TypeAttr.get(ir.Type.parse(dtypes.to_mlir_name(value)))
    if k == "device":
        return ir.StringAttr.get(str(torch.device(value)))
    if k == "memory_format":
        return ir.StringAttr.get(str(value).removeprefix("torch."))  # "channels_last"
    if k == "Index":
        return ir.ArrayAttr.get([_encode_index_entry(e) for e in value])
    if k == "Data":
        return _encode_data(value)
    if k == "Floats":
        return ir.DenseF64ArrayAttr.get([float(x) for x in value])
    raise TypeError(f"no attribute encoding for parameter kind {kind}")


def decode(kind, attr):
    if isinstance(attr, ir.UnitAttr):
        return None
    k = kind.base_name
    if k == "int":
        return ir.IntegerAttr(attr).value
    if k == "float":
        return ir.FloatAttr(attr).value
    if k == "bool":
        return ir.BoolAttr(attr).value
    if k == "str":
        return ir.StringAttr(attr).value
    if k in ("Ints", "Dims"):
        if isinstance(attr, ir.DenseI64ArrayAttr):
            return tuple(ir.DenseI64ArrayAttr(attr))
        return ir.IntegerAttr(attr).value
    if k == "dtype":
        return dtypes.from_mlir_name(str(ir.TypeAttr(attr).value))
    if k == "device":
        return torch.device(ir.StringAttr(attr).value)
    if k == "memory_format":
        value = getattr(torch, ir.StringAttr(attr).value, None)
        if not isinstance(value, torch.memory_format):
            raise ValueError(f"{ir.StringAttr(attr).value!r} is not a torch memory format")
        return value
    if k == "Index":
        return tuple(_decode_index_entry(a) for a in ir.ArrayAttr(attr))
    if k == "Data":
        return _decode_data(attr)
    if k == "Floats":
        return tuple(ir.DenseF64ArrayAttr(attr))
    raise TypeError(f"no attribute encoding for parameter kind {kind}")
