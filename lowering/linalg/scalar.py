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


def elt_bytes(t):
    """Bytes per element as torch stores it (bool: 1)."""
    return max(1, _bits(t) // 8)


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
    if t == "bf16":  # the upper half of the f32 bits (inf and nan are exact there)
        return "0x%04X" % (struct.unpack("<I", struct.pack("<f", value))[0] >> 16)
    raise UnsupportedOp(f"non-finite constant of type {t}")


_MAX_FINITE = {"f16": 65504.0, "bf16": 3.3895313892515355e38, "f32": 3.4028234663852886e38}
_HALF_ULP_OF_MAX = {"f16": 16.0, "bf16": 2.0 ** 119, "f32": 2.0 ** 103}


def _rounded(value: float, t: str) -> float:
    """A finite value past float type t's range as t rounds it (the largest finite value, or an
    infinity), as torch's cast of a Python float to the tensor's dtype does (MLIR rejects such
    literals)."""
    top = _MAX_FINITE.get(t)
    if top is None or not _pymath.isfinite(value) or abs(value) <= top:
        return value
    if abs(value) < top + _HALF_ULP_OF_MAX[t]:
        return _pymath.copysign(top, value)
    return _pymath.copysign(float("inf"), value)


def wrap_int(value: int, width: int) -> int:
    """value in a signed integer type of this width, wrapping as torch's casts of Python ints do
    (an int32 tensor + 2**40 adds 0, int8 > 300 compares with 44)."""
    value &= (1 << width) - 1
    return value - (1 << width) if value >> (width - 1) else value


def literal(value, t: str) -> str:
    if is_float(t):
        return float_literal(_rounded(float(value), t), t)
    if t == "i1":
        return "1" if value else "0"
    return str(wrap_int(int(value), int_width(t)))


# ---- scalar conversions inside a body
def convert_scalar(b, v, src, dst, once=False):
    """Emit (through body builder b) the conversion of scalar v from type src to dst.

    f16/bf16 convert through f32 as torch does (c10::Half/BFloat16 are built from and read as
    float): f64 -> f32 -> f16 and i64 -> f32 -> bf16 round twice, like torch; f16 <-> bf16
    and f16/bf16 -> ints go through an exact extf to f32. once: f64 -> f16/bf16 rounds once
    (a widened decomposition's result, dialects/emit.py WIDENED)."""
    if src == dst:
        return v
    low = ("f16", "bf16")
    if once and src == "f64" and dst in low:
        return b.op(f"arith.truncf {_to_f32_odd(b, v)} : f32 to {dst}")
    if src in low and dst != "f32":
        return convert_scalar(b, b.op(f"arith.extf {v} : {src} to f32"), "f32", dst)
    if dst in low and src != "f32":
        return b.op(f"arith.truncf {convert_scalar(b, v, src, 'f32')} : f32 to {dst}")
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
        r = b.op(f"arith.fptosi {v} : {src} to {dst}")
        if dst not in ("i32", "i64"):
            return r
        # nan, infinities and values out of range: x86's conversion, as eager's (the lowest int),
        # where LLVM's fptosi gives poison (inf.long() came out positive)
        edge = 2.0 ** (int_width(dst) - 1)
        lo, hi = (b.op(f"arith.constant {c!r} : {src}") for c in (-edge, edge))
        inside = b.op(f"arith.andi {b.op(f'arith.cmpf oge, {v}, {lo} : {src}')}, "
                      f"{b.op(f'arith.cmpf olt, {v}, {hi} : {src}')} : i1")
        return b.op(f"arith.select {inside}, {r}, {b.op(f'arith.constant {-int(edge)} : {dst}')} : {dst}")
    if dst == "i1":
        zero = b.op(f"arith.constant 0 : {src}")
        return b.op(f"arith.cmpi ne, {v}, {zero} : {src}")
    if src == "i1":
        return b.op(f"arith.extui {v} : {src} to {dst}")
    op = "arith.extsi" if int_width(dst) > int_width(src) else "arith.trunci"
    return b.op(f"{op} {v} : {src} to {dst}")


def _to_f32_odd(b, v):
    """f64 v rounded to f32 to odd: truncated toward zero, the last bit set where that was
    inexact. Rounding that to nearest f16/bf16 (13 and 16 bits fewer) rounds v once."""
    t = b.op(f"arith.truncf {v} : f64 to f32")
    back = b.op(f"arith.extf {t} : f32 to f64")
    inexact = b.op(f"arith.cmpf one, {back}, {v} : f64")
    away = b.op(f"arith.cmpf ogt, {b.op(f'math.absf {back} : f64')}, {b.op(f'math.absf {v} : f64')} : f64")
    bits = b.op(f"arith.bitcast {t} : f32 to i32")
    down = b.op(f"arith.subi {bits}, {b.const(1, 'i32')} : i32")  # one ulp toward zero (sign and magnitude)
    odd = b.op(f"arith.ori {b.op(f'arith.select {away}, {down}, {bits} : i32')}, {b.const(1, 'i32')} : i32")
    return b.op(f"arith.bitcast {b.op(f'arith.select {inexact}, {odd}, {bits} : i32')} : i32 to f32")


def opmath(t):
    """The type an elementwise prim on t computes in: f32 for f16/bf16 (torch's opmath: each op
    converts its operands to float, computes and rounds its result once), else t."""
    return "f32" if t in ("f16", "bf16") else t


class Body:
    """Builds the scalar body of a linalg.generic."""

    def __init__(self, approx=False):
        self.lines, self.n, self.approx = [], 0, approx
        self.values = {}  # ssa name -> the number a constant holds (pow specializes on it)
        self.storage = None  # the type the prim's result is rounded to, where it computes in opmath
        self.widened = False  # the prim is marked widened (approx.py): its f64 math needs f32 accuracy
        self.summed = False  # the prim's values are only summed (approx.SUMMED)

    def op(self, text):
        name = f"%s{self.n}"
        self.n += 1
        self.lines.append(f"{name} = {text}")
        return name

    def const(self, value, t):
        name = self.op(f"arith.constant {literal(value, t)} : {t}")
        self.values[name] = value
        return name


# ---- scalar semantics of the elementwise prims: fn(body, [values], compute type) -> value
def _unary_float(mathop):
    def f(b, xs, t):
        if not is_float(t):
            raise UnsupportedOp(f"{mathop} on {t}")
        if b.approx and b.summed and (mathop, t) in approx.SUMMED:
            return approx.SUMMED[mathop, t](b, xs[0])
        if b.approx and (mathop, t) in approx.APPROX and (t != "f64" or b.widened):
            return approx.APPROX[mathop, t](b, xs[0])
        return b.op(f"{mathop} {xs[0]} : {t}")
    f.mathop = mathop
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
        # no fastmath<arcp>: with it LLVM turns x / sqrt(y) into x * an rsqrt estimate, which
        # is NaN at y = 0 and y = inf (and x * (1 / y) is not x / y for tiny or huge y)
        return b.op(f"arith.divf {xs[0]}, {xs[1]} : {t}")
    if t == "i1":
        raise UnsupportedOp("div on i1")
    # torch: rounding_mode="trunc". A division by 0 (torch raises ZeroDivisionError) or of the
    # minimum by -1 would trap (SIGFPE) and kill the process: such lanes divide by 1 instead and
    # give 0 and the wrapped -x. thunder-fuse does not claim integer divisions by tensors.
    zero, one, mone = b.const(0, t), b.const(1, t), b.const(-1, t)
    is_zero = b.op(f"arith.cmpi eq, {xs[1]}, {zero} : {t}")
    is_mone = b.op(f"arith.cmpi eq, {xs[1]}, {mone} : {t}")
    bad = b.op(f"arith.ori {is_zero}, {is_mone} : i1")
    d = b.op(f"arith.select {bad}, {one}, {xs[1]} : {t}")
    q = b.op(f"arith.divsi {xs[0]}, {d} : {t}")
    neg = b.op(f"arith.subi {zero}, {xs[0]} : {t}")
    q = b.op(f"arith.select {is_mone}, {neg}, {q} : {t}")
    return b.op(f"arith.select {is_zero}, {zero}, {q} : {t}")


# float exponents with an exact cheap form (torch's pow special-cases the same ones); other
# exponents are libm calls, which fuse.py keeps out of regions
POW_SPECIAL = (0.5, -0.5, 1.0, -1.0, 2.0, 3.0, -2.0)


def _pow(b, xs, t):
    e = b.values.get(xs[1])
    if is_float(t) and e in POW_SPECIAL:
        x = xs[0]
        if abs(e) == 0.5:
            if b.storage == "f16":  # torch's float16 pow is std::pow, not sqrt: (-0) ** 0.5 = +0, (-inf) ** 0.5 = inf
                ninf = b.const(float("-inf"), t)
                is_ninf = b.op(f"arith.cmpf oeq, {x}, {ninf} : {t}")
                x = b.op(f"arith.addf {x}, {b.const(0.0, t)} : {t}")  # -0 + 0 = +0
                x = b.op(f"arith.select {is_ninf}, {b.const(float('inf'), t)}, {x} : {t}")
            r = b.op(f"math.sqrt {x} : {t}")
        elif abs(e) == 1.0:
            r = x
        elif abs(e) == 2.0:
            r = b.op(f"arith.mulf {x}, {x} : {t}")
        else:
            r = _bf16_step(b, b.op(f"arith.mulf {x}, {x} : {t}"), t)
            r = b.op(f"arith.mulf {r}, {x} : {t}")
        if e < 0:
            one = b.const(1.0, t)
            r = b.op(f"arith.divf {one}, {_bf16_step(b, r, t) if e == -2.0 else r} : {t}")
        return r
    if is_float(t):
        return b.op(f"math.powf {xs[0]}, {xs[1]} : {t}")
    if t == "i1":
        raise UnsupportedOp("pow on i1")
    # torch's integer pow: wrapping square-and-multiply for exponents >= 0; for negative ones
    # 1 ** e = 1, (-1) ** e = +-1, anything else 0 (math.ipowi's lowering divides by 0 for 0 ** -1)
    x, e = xs
    zero, one, mone = b.const(0, t), b.const(1, t), b.const(-1, t)
    neg = b.op(f"arith.cmpi slt, {e}, {zero} : {t}")
    e0 = b.op(f"arith.select {neg}, {zero}, {e} : {t}")
    p = b.op(f"math.ipowi {x}, {e0} : {t}")
    odd = b.op(f"arith.andi {e}, {one} : {t}")
    is_odd = b.op(f"arith.cmpi ne, {odd}, {zero} : {t}")
    m = b.op(f"arith.select {is_odd}, {mone}, {one} : {t}")
    x_one = b.op(f"arith.cmpi eq, {x}, {one} : {t}")
    x_mone = b.op(f"arith.cmpi eq, {x}, {mone} : {t}")
    r = b.op(f"arith.select {x_mone}, {m}, {zero} : {t}")
    r = b.op(f"arith.select {x_one}, {one}, {r} : {t}")
    return b.op(f"arith.select {neg}, {r}, {p} : {t}")


def _bf16_step(b, v, t):
    """v rounded to bf16 where the prim's result is bf16: torch's bfloat16 pow with exponents
    3 and -2 multiplies (and takes the reciprocal) in BFloat16 arithmetic, each step rounded."""
    if b.storage != "bf16":
        return v
    return b.op(f"arith.extf {b.op(f'arith.truncf {v} : {t} to bf16')} : bf16 to {t}")


def _sign(b, xs, t):
    if t == "i1":
        return xs[0]
    if not is_float(t):  # (x > 0) - (x < 0)
        zero = b.const(0, t)
        gt = b.op(f"arith.cmpi sgt, {xs[0]}, {zero} : {t}")
        lt = b.op(f"arith.cmpi slt, {xs[0]}, {zero} : {t}")
        gt = b.op(f"arith.extui {gt} : i1 to {t}")
        lt = b.op(f"arith.extui {lt} : i1 to {t}")
        return b.op(f"arith.subi {gt}, {lt} : {t}")
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
    "log2": (_unary_float("math.log2"), "arith"),
    "log10": (_unary_float("math.log10"), "arith"),
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
SHAPE_OPS = {"broadcast_in_dim", "reshape", "transpose", "slice", "full", "iota", "cat", "unslice"}
SUPPORTED = set(ELEMENTWISE) | REDUCTIONS | SHAPE_OPS


def widened_math(op_name: str) -> bool:
    """Whether `thunder.<name>` on f64, marked widened, has a polynomial (approx.py)."""
    fn = ELEMENTWISE.get(op_name.removeprefix("thunder."), (None,))[0]
    return getattr(fn, "mathop", None) is not None and (fn.mathop, "f64") in approx.APPROX


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
