"""torch dtypes: their MLIR element types, their categories, and PyTorch's type promotion."""
import sys

import torch

from thunder.core.trace import consult

# torch dtype <-> MLIR element type (text form). Signless integers are torch's signed ones.
_MLIR_NAMES = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "ui8",
    torch.bool: "i1",
    torch.complex64: "complex<f32>",
    torch.complex128: "complex<f64>",
    torch.complex32: "complex<f16>",
    # float8 and float4 (FP8/FP4 training recipes): carried, cast, viewed; no promotion with
    # other dtypes (torch has none); float4_e2m1fn_x2 packs two e2m1 values in each byte
    torch.float8_e4m3fn: "f8E4M3FN",
    torch.float8_e5m2: "f8E5M2",
    torch.float8_e4m3fnuz: "f8E4M3FNUZ",
    torch.float8_e5m2fnuz: "f8E5M2FNUZ",
    torch.float8_e8m0fnu: "f8E8M0FNU",
    torch.float4_e2m1fn_x2: "vector<2xf4E2M1FN>",
}
_FROM_MLIR = {v: k for k, v in _MLIR_NAMES.items()}


def mlir_names():
    """{torch dtype: MLIR element type} of every dtype thunder traces."""
    return dict(_MLIR_NAMES)


def to_mlir_name(dtype: torch.dtype) -> str:
    try:
        return _MLIR_NAMES[dtype]
    except KeyError:
        raise NotImplementedError(f"thunder: dtype {dtype} is not supported") from None


def from_mlir_name(name: str) -> torch.dtype:
    try:
        return _FROM_MLIR[name]
    except KeyError:
        raise ValueError(f"thunder: MLIR element type {name!r} is not a torch dtype") from None


def is_float(dtype):
    return dtype.is_floating_point


def is_complex(dtype):
    return dtype.is_complex


def is_int(dtype):
    return not dtype.is_floating_point and not dtype.is_complex and dtype is not torch.bool


def is_bool(dtype):
    return dtype is torch.bool


# Category order used by promotion: bool < integer < floating < complex.
def _category(dtype):
    if dtype is torch.bool:
        return 0
    if dtype.is_complex:
        return 3
    if dtype.is_floating_point:
        return 2
    return 1


def is_numpy_scalar(v):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(v, np.generic)


def python_number(v, op_name, scalar=True):
    """A number argument of a torch op as torch reads it. numpy scalars: for a Scalar parameter
    (scalar=True), numpy ints as ints, complex128 as complex, the others (bool_, floats,
    complex64) as float(); elsewhere as the Python value they hold. Ints beyond 64 bits raise
    eager's OverflowError."""
    if isinstance(v, (tuple, list)) and any(is_numpy_scalar(x) for x in v):  # x.reshape(np.int64(3), 2)
        return type(v)(python_number(x, op_name, False) for x in v)
    if is_numpy_scalar(v):
        np = sys.modules["numpy"]
        if not scalar:
            v = v.item()
        elif isinstance(v, np.integer):
            v = int(v)
        else:
            v = complex(v) if isinstance(v, complex) else float(v)
    if type(v) is int and not -2 ** 63 <= v < 2 ** 63:
        if v < -2 ** 63:
            raise OverflowError("can't convert negative int to unsigned")
        if v >= 2 ** 64:
            raise OverflowError("int too big to convert")
        raise NotImplementedError(f"thunder: {op_name} with the integer {v} (above int64, below uint64) is not "
                                  "supported. Workaround: pass it as a float or a tensor.")
    return v


def _scalar_category(value):
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return 1
    if isinstance(value, float):
        return 2
    if isinstance(value, complex):
        return 3
    raise TypeError(f"expected a number, got {type(value).__name__}")


def default_dtype():
    """torch.get_default_dtype(), for meta functions: the trace then depends on it (its cache
    entry checks it)."""
    consult("default_dtype")
    return torch.get_default_dtype()


def device_or_default(device):
    """A factory's device: the one given, else torch.get_default_device() (torch.set_default_device,
    `with torch.device(...)`), which the trace then depends on (its cache entry checks it)."""
    if device is not None:
        return torch.device(device)
    consult("default_device")
    return torch.get_default_device()


def scalar_dtype(value):
    """The dtype a Python number takes part in type promotion with."""
    cat = _scalar_category(value)
    if cat == 3:
        return torch.complex128 if default_dtype() is torch.float64 else torch.complex64
    return default_dtype() if cat == 2 else (torch.bool, torch.int64)[cat]


def _join(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return torch.promote_types(a, b)


def real_dtype(dtype):
    """The real dtype of a complex one's parts (abs, var of a complex tensor); others as they are."""
    return {torch.complex128: torch.float64, torch.complex64: torch.float32,
            torch.complex32: torch.float16}.get(dtype, dtype)


def _to_complex(dtype):
    return {torch.float64: torch.complex128, torch.float32: torch.complex64,
            torch.float16: torch.complex32, torch.bfloat16: torch.complex64}.get(dtype, dtype)


def _combine(higher, lower):
    # torch's combine_categories: a lower-priority operand only wins by being of a higher category.
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_complex:
        return higher
    if lower.is_complex:
        return _to_complex(higher) if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if higher is torch.bool or lower.is_floating_point:
        return torch.promote_types(higher, lower)
    return higher


def promote(*operands):
    """Result dtype of an elementwise op, following torch.result_type.

    operands are objects with .dtype and .ndim (tensors or proxies) or Python numbers (None is
    skipped). Dimensioned tensors beat 0-d tensors, which beat Python numbers, unless the lower
    priority operand is of a higher category (bool < int < float < complex)."""
    dim_result = zero_result = number_result = None
    for x in operands:
        if x is None:
            continue
        if isinstance(x, (bool, int, float, complex)):
            number_result = _join(number_result, scalar_dtype(x))
        elif hasattr(x, "python_type"):  # a runtime number (core/numbers.py): a Python number of its type
            number_result = _join(number_result, scalar_dtype(x.python_type()))
        elif x.ndim == 0:
            zero_result = _join(zero_result, x.dtype)
        else:
            dim_result = _join(dim_result, x.dtype)
    return _combine(dim_result, _combine(zero_result, number_result))
