"""Scalar semantics of the thunder prims inside a linalg body: element types, literals, type
conversions, one scalar function per elementwise prim, reduction identities and combiners.
Emitted as text through `Body` (one SSA value per line)."""
from __future__ import annotations

import math as _pymath
import struct

from thunder.lowering.linalg import approx


class UnsupportedOp(NotImplementedError):
    pass


# ---- element types
_FLOATS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}


def is_float(t):
    return t in _FLOATS


def int_width(t):
    assert t.startswith("i"), t
    return int(t[1:])


def _bits(t):
    return _FLOATS[t] if is_float(t) else int_width(t)


def _category(t):
    return 2 if is_float(t) else (0 if t == "i1" else 1)


def float_literal(value: float, t: str) -> str:
    """An MLIR literal for a float constant of type t (hex for inf/nan)."""
    if _pymath.isfinite(value):
        r = repr(float(value))
        if "e" in r and "." not in r:  # MLIR wants a '.' in float literals: 1e-05 -> 1.0e-05
            mantissa, exp = r.split("e")
            r = f"{mantissa}.0e{exp}"
        return r
    if t == "f64":
        return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]
    if t == "f32":
        return "0x%08X" % struct.unpack("<I", struct.pack("<f", value))[0]
    if t == "f16":
        return "0x%04X" % struct.unpack("<H", struct.pack("<e", value))[0]
    raise UnsupportedOp(f"non-finite constant of type {t}")


def literal(value, t: str) -> str:
    if is_float(t):
        return float_literal(float(value), t)
    if t == "i1":
        return "1" if value else "0"
    return str(int(value))


# ---- scalar conversions inside a body
def convert_scalar(b, v, src, dst):
    """Emit (through body builder b) the conversion of scalar v from type src to dst."""
    if src == dst:
        return v
    if is_float(src) and is_float(dst):
        op = "arith.extf" if _bits(dst) > _bits(src) else "arith.truncf"
        return b.op(f"{op} {v} : {src} to {dst}")
    if not is_float(src) and is_float(dst):
        op = "arith.uitofp" if src == "i1" else "arith.sitofp"
        return b.op(f"{op} {v} : {src} to {dst}")
    if is_float(src) and dst == "i1":
        zero = b.op(f"arith.constant 0.0 : {src}")
        return b.op(f"arith.cmpf une, {v}, {zero} : {src}")
    if is_float(src):
        return b.op(f"arith.fptosi {v} : {src} to {dst}")
    if dst == "i1":
        zero = b.op(f"arith.constant 0 : {src}")
        return b.op(f"arith.cmpi ne, {v}, {zero} : {src}")
    if src == "i1":
        return b.op(f"arith.extui {v} : {src} to {dst}")
    op = "arith.extsi" if int_width(dst) > int_width(src) else "arith.trunci"
    return b.op(f"{op} {v} : {src} to {dst}")


class Body:
    """Builds the scalar body of a linalg.generic."""

    def __init__(self, approx=False):
        self.lines, self.n, self.approx = [], 0, approx

    def op(self, text):
        name = f"%s{self.n}"
        self.n += 1
        self.lines.append(f"{name} = {text}")
        return name

    def const(self, value, t):
        return self.op(f"arith.constant {literal(value, t)} : {t}")


# ---- scalar semantics of the elementwise prims: fn(body, [values], compute type) -> value
def _unary_float(mathop):
    def f(b, xs, t):
        if not is_float(t):
            raise UnsupportedOp(f"{mathop} on {t}")
        if b.approx and (mathop, t) in approx.APPROX:
            return approx.APPROX[mathop, t](b, xs[0])
        return b.op(f"{mathop} {xs[0]} : {t}")
    return f


def _binary(fop, iop, bop=None):
    def f(b, xs, t):
        if is_float(t):
            return b.op(f"{fop} {xs[0]}, {xs[1]} : {t}")
        op = bop if (t == "i1" and bop) else iop
        if op is None:
            raise UnsupportedOp(f"{fop} on {t}")
        return b.op(f"{op} {xs[0]}, {xs[1]} : {t}")
    return f


def _neg(b, xs, t):
    if is_float(t):
        return b.op(f"arith.negf {xs[0]} : {t}")
    zero = b.const(0, t)
    return b.op(f"arith.subi {zero}, {xs[0]} : {t}")


def _abs(b, xs, t):
    if is_float(t):
        return b.op(f"math.absf {xs[0]} : {t}")
    if t == "i1":
        return xs[0]
    return b.op(f"math.absi {xs[0]} : {t}")


def _rsqrt(b, xs, t):
    if not is_float(t):
        raise UnsupportedOp(f"rsqrt on {t}")
    s = b.op(f"math.sqrt {xs[0]} : {t}")
    one = b.const(1.0, t)
    return b.op(f"arith.divf {one}, {s} : {t}")


def _reciprocal(b, xs, t):
    one = b.const(1.0, t)
    return b.op(f"arith.divf {one}, {xs[0]} : {t}")


def _div(b, xs, t):
    if is_float(t):
        return b.op(f"arith.divf {xs[0]}, {xs[1]} : {t}")
    return b.op(f"arith.divsi {xs[0]}, {xs[1]} : {t}")  # torch: rounding_mode="trunc"


def _pow(b, xs, t):
    if is_float(t):
        return b.op(f"math.powf {xs[0]}, {xs[1]} : {t}")
    return b.op(f"math.ipowi {xs[0]}, {xs[1]} : {t}")


def _sign(b, xs, t):
    if not is_float(t):
        raise UnsupportedOp(f"sign on {t}")
    zero, one, mone = b.const(0.0, t), b.const(1.0, t), b.const(-1.0, t)
    gt = b.op(f"arith.cmpf ogt, {xs[0]}, {zero} : {t}")
    lt = b.op(f"arith.cmpf olt, {xs[0]}, {zero} : {t}")
    pos = b.op(f"arith.select {gt}, {one}, {zero} : {t}")
    return b.op(f"arith.select {lt}, {mone}, {pos} : {t}")


def _bitwise_not(b, xs, t):
    if is_float(t):
        raise UnsupportedOp("bitwise_not on floats")
    ones = b.const(-1 if t != "i1" else True, t)
    return b.op(f"arith.xori {xs[0]}, {ones} : {t}")


def _cmp(fpred, ipred, upred):
    def f(b, xs, t):
        if is_float(t):
            return b.op(f"arith.cmpf {fpred}, {xs[0]}, {xs[1]} : {t}")
        return b.op(f"arith.cmpi {upred if t == 'i1' else ipred}, {xs[0]}, {xs[1]} : {t}")
    return f


def _isnan(b, xs, t):
    if not is_float(t):
        return b.const(False, "i1")
    return b.op(f"arith.cmpf uno, {xs[0]}, {xs[0]} : {t}")


def _where(b, xs, t):
    return b.op(f"arith.select {xs[0]}, {xs[1]}, {xs[2]} : {t}")


# name -> (scalar fn, kind); kind "arith": operands computed in the result type;
# "cmp": operands in their promoted type, i1 result; "where": first operand i1
ELEMENTWISE = {
    "add": (_binary("arith.addf", "arith.addi", "arith.ori"), "arith"),
    "sub": (_binary("arith.subf", "arith.subi"), "arith"),
    "mul": (_binary("arith.mulf", "arith.muli", "arith.andi"), "arith"),
    "div": (_div, "arith"),
    "pow": (_pow, "arith"),
    "maximum": (_binary("arith.maximumf", "arith.maxsi", "arith.ori"), "arith"),
    "minimum": (_binary("arith.minimumf", "arith.minsi", "arith.andi"), "arith"),
    "atan2": (_binary("math.atan2", None), "arith"),
    "bitwise_and": (_binary(None, "arith.andi"), "arith"),
    "bitwise_or": (_binary(None, "arith.ori"), "arith"),
    "bitwise_xor": (_binary(None, "arith.xori"), "arith"),
    "neg": (_neg, "arith"),
    "abs": (_abs, "arith"),
    "exp": (_unary_float("math.exp"), "arith"),
    "expm1": (_unary_float("math.expm1"), "arith"),
    "log": (_unary_float("math.log"), "arith"),
    "log1p": (_unary_float("math.log1p"), "arith"),
    "sqrt": (_unary_float("math.sqrt"), "arith"),
    "rsqrt": (_rsqrt, "arith"),
    "reciprocal": (_reciprocal, "arith"),
    "tanh": (_unary_float("math.tanh"), "arith"),
    "sin": (_unary_float("math.sin"), "arith"),
    "cos": (_unary_float("math.cos"), "arith"),
    "erf": (_unary_float("math.erf"), "arith"),
    "floor": (_unary_float("math.floor"), "arith"),
    "ceil": (_unary_float("math.ceil"), "arith"),
    "round": (_unary_float("math.roundeven"), "arith"),
    "trunc": (_unary_float("math.trunc"), "arith"),
    "sign": (_sign, "arith"),
    "bitwise_not": (_bitwise_not, "arith"),
    "eq": (_cmp("oeq", "eq", "eq"), "cmp"),
    "ne": (_cmp("une", "ne", "ne"), "cmp"),
    "lt": (_cmp("olt", "slt", "ult"), "cmp"),
    "le": (_cmp("ole", "sle", "ule"), "cmp"),
    "gt": (_cmp("ogt", "sgt", "ugt"), "cmp"),
    "ge": (_cmp("oge", "sge", "uge"), "cmp"),
    "isnan": (_isnan, "isnan"),
    "where": (_where, "where"),
    "convert_element_type": (None, "convert"),
}

REDUCTIONS = {"sum", "amax", "amin", "prod"}
SHAPE_OPS = {"broadcast_in_dim", "reshape", "transpose", "full"}
SUPPORTED = set(ELEMENTWISE) | REDUCTIONS | SHAPE_OPS


def supported(op_name: str) -> bool:
    """Whether `thunder.<name>` (or `<name>`) has a linalg lowering here (for a partitioner)."""
    return op_name.removeprefix("thunder.") in SUPPORTED


def reduction_identity(kind, t):
    if kind == "sum":
        return 0
    if kind == "prod":
        return 1
    if is_float(t):
        return float("-inf") if kind == "amax" else float("inf")
    if t == "i1":
        return kind == "amin"
    w = int_width(t)
    return -(1 << (w - 1)) if kind == "amax" else (1 << (w - 1)) - 1


def reduce_combine(kind):
    fop, iop, bop = {"sum": ("arith.addf", "arith.addi", "arith.ori"),
                     "prod": ("arith.mulf", "arith.muli", "arith.andi"),
                     "amax": ("arith.maximumf", "arith.maxsi", "arith.ori"),
                     "amin": ("arith.minimumf", "arith.minsi", "arith.andi")}[kind]

    def f(b, xs, t):
        if is_float(t):
            # reassoc lets LLVM vectorize the reduction loop (partial sums, like torch's)
            fm = " fastmath<reassoc>" if kind in ("sum", "prod") else ""
            return b.op(f"{fop} {xs[0]}, {xs[1]}{fm} : {t}")
        return b.op(f"{bop if t == 'i1' else iop} {xs[0]}, {xs[1]} : {t}")
    return f


def promote(types):
    """The compute type of a comparison: torch-like category promotion over operand types."""
    best = None
    for t in types:
        if best is None or _category(t) > _category(best) or (
                _category(t) == _category(best) and _bits(t) > _bits(best)):
            best = t
    return best
