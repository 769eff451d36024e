"""Ops of data-dependent Python: tensor values read into Python numbers, arithmetic on those
runtime numbers, and the checks of values a trace was specialized on.

    %n0 = "ltorch.item"(%t1) : (tensor<f32>) -> f64                   n0 = torch.Tensor.item(t1)
    %n1 = "ltorch.number_op"(%n0, %c1) {fn = "gt"} : (f64, f64) -> i1  n1 = n0 > 1.0
    "ltorch.check"(%n1) {expected = "True", what = "bool() of ... at f.py:3"} : (i1) -> ()
                                   if n1 is not True: impl.value_changed(n1, True, '...', _rng)

Runtime numbers (thunder/core/numbers.py: NumberProxy) are SSA values of type f64, i64 or i1;
ops take them as number operands like constants. `ltorch.check` is how a split shows in a
trace (runtime/reads.py): the value Python needed while tracing is compared with this call's
(a number's value, or a tensor's shape for ops whose result shape depends on values); a
different value raises impl.ValueChanged after restoring the random generator to its state at
the program's start (`_rng`), so the call moves on to the next cache entry (a miss naming the
read, its line and both values) without having changed anything.
"""
import torch

from thunder.core import dispatch
from thunder.core.numbers import BINARY, UNARY, NumberProxy, apply, python_type_of_dtype
from thunder.core.pysource import py_repr
from thunder.ops.registry import Bool, Float, Number, Str, Tensor, TensorOrNumber, ltorch


def _python_type(input, what):
    t = python_type_of_dtype(input.dtype)
    if t is complex:
        raise NotImplementedError(f"thunder: {what} of a complex tensor is not supported. Workaround: read "
                                  "t.real and t.imag separately.")
    return t


@ltorch("torch.Tensor.item", aliases=(torch.Tensor.item,), differentiable=False)
def item(input: Tensor):
    """The value of a one-element tensor as a runtime Python number: a float for floating
    tensors, an int for integer ones, a bool for bool ones (f64, i64, i1 in the trace)."""
    if input.numel() != 1:
        raise RuntimeError(f"a Tensor with {input.numel()} elements cannot be converted to Scalar")
    return NumberProxy(_python_type(input, ".item()"))


@ltorch("torch.Tensor.tolist", returns_sequence=True, differentiable=False)
def tolist(input: Tensor):
    """The elements of a tensor (at least one) as runtime numbers, in row-major order (Tensor.tolist
    nests them as the shape)."""
    if input.numel() == 0:
        raise ValueError("ltorch.tolist of an empty tensor (it has no elements to read)")
    t = _python_type(input, ".tolist()")
    return tuple(NumberProxy(t) for _ in range(input.numel()))


def _python_tolist(values, outs):
    return [f"{', '.join(outs)}, = {values['input'].name}.reshape(-1).tolist()"]


tolist.python = _python_tolist


@ltorch("(number_op)", differentiable=False)
def number_op(a: Number, b: Number | None = None, *, fn: Str):
    """Python arithmetic or a comparison on runtime numbers, computed by the program as Python
    does: fn is an operator ("add", "truediv", "gt", ...; with b) or "neg", "abs", "int",
    "float", "bool" (without b). The result's type is Python's (an int / an int is a float)."""
    if fn not in BINARY and fn not in UNARY:
        raise ValueError(f"unknown number operation {fn!r}")
    if (fn in BINARY) != (b is not None):
        raise ValueError(f"number operation {fn!r} takes {'two operands' if fn in BINARY else 'one operand'}")
    return NumberProxy(type(apply(fn, a, b)))


def _python_number_op(values, outs):
    fn, a, b = values["fn"], values["a"], values["b"]
    if fn in UNARY:
        return [f"{outs[0]} = {UNARY[fn].format(py_repr(a))}"]
    return [f"{outs[0]} = {BINARY[fn].format(py_repr(a), py_repr(b))}"]


number_op.python = _python_number_op
dispatch.number_op = number_op  # NumberProxy arithmetic (core/numbers.py) records this op


@ltorch("(check)", returns_sequence=True, effects=True, differentiable=False)
def check(value: TensorOrNumber, *, expected: Str, what: Str):
    """A value the trace was specialized on, checked on every call: a number must equal
    `expected` (Python source), a tensor must have the shape `expected` (the result of an op whose
    shape depends on values). `what` names the read and its line. A different value raises
    impl.ValueChanged (a cache miss) after restoring the random generator state `_rng`."""
    return ()


def _python_check(values, outs):
    v, expected, what = values["value"], values["expected"], values["what"]
    if v.device is not None:  # a tensor: its shape
        got, cond = f"tuple({v.name}.shape)", f"{v.name}.shape != {expected}"
    elif v.dtype is torch.bool:
        got, cond = v.name, f"{v.name} is not {expected}"
    elif v.dtype.is_floating_point and expected in ("0.0", "-0.0", "float('nan')"):
        got, cond = v.name, f"impl.float_differs({v.name}, {expected})"  # (the sign of zero; nan != nan)
    else:
        got, cond = v.name, f"{v.name} != {expected}"
    return [f"if {cond}: impl.value_changed({got}, {expected}, {what!r}, _rng)"]


check.python = _python_check


@ltorch("torch.equal", methods=("equal",), aliases=(torch.equal,), differentiable=False)
def equal(input: Tensor, other: Tensor):
    """Whether input and other have the same shape and values (a runtime bool)."""
    return NumberProxy(bool)


@ltorch("torch.allclose", methods=("allclose",), aliases=(torch.allclose,), differentiable=False)
def allclose(input: Tensor, other: Tensor, rtol: Float = 1e-05, atol: Float = 1e-08, equal_nan: Bool = False):
    """Whether all of input and other are close (torch.isclose), a runtime bool."""
    if input.dtype != other.dtype:
        raise RuntimeError(f"{other.dtype} did not match {input.dtype}")
    torch.broadcast_shapes(input.shape, other.shape)
    return NumberProxy(bool)
