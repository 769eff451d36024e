"""Approximations of math functions for f32, emitted as arith ops into a linalg body.

MLIR's own approximations (populateMathPolynomialApproximationPatterns) are only reachable
through the test pass `test-math-polynomial-approximation`, which the wheel does not register;
without them `math.exp`/`math.tanh`/`math.erf`/`math.log`/... end as scalar libm calls (expf,
erff, logf), which stop LLVM's loop vectorizer. These are pure arith (plus math.fma/floor/absf/
copysign, LLVM intrinsics), so loops vectorize. All are branch-free: every path is computed and
the result picked with selects.

Accuracy: each computes in f64 (exact extf of the f32 argument) to a relative error of about
1e-13 and rounds once to f32 (truncf, which also gives the f32 overflow to inf and the gradual
underflow to denormals): at most 0.5 ulp plus ~1e-5 ulp, so never less accurate than eager's
(SLEEF's, 0.5-1 ulp). f16 and bf16 prims compute in f32 (to_linalg: scalar.opmath), so they use
these too and round twice (f64 -> f32 -> f16), like torch's f32 result converted to f16.

- exp:   x = k ln2 + r (|r| <= ln2/2, one fma with ln2 in f64), exp(r) = 1 + expm1(r) by its
         Taylor polynomial to degree 8 (truncation 2e-10 relative, 0.002 f32 ulp: f32 exp; the
         f64 exp of widened ops to degree 11, 2e-14), times 2^k built in the f64
         exponent bits; x clamped to [EXP_ZERO, 89] (inf after the truncf above 88.73, 0 below
         -103.98), no compare or select: at EXP_ZERO (a causal mask's -inf) 2^k's bits are
         those of +0, so the result is an exact 0 (no tiny value rounded), nan propagates.
- expm1: the same reduction, 2^k expm1(r) + (2^k - 1) in one fma (2^k - 1 exact for |k| <= 52),
         x clamped to [-40, 89]; -0 kept, nan -> nan.
- log:   x = 2^k m with m in [sqrt(1/2), sqrt(2)) on the f64 bits (f32 denormals are normal in
         f64), log(m) = 2 atanh(s), s = (m - 1) / (m + 1) (|s| <= 0.172), by the atanh series to
         s^15 (truncation 3e-14 relative), k ln2 added with one fma; 0 -> -inf, x < 0 -> nan,
         +inf -> +inf, nan -> nan.
- log2, log10: log's f64 value times 1/log(2), 1/log(10), rounded once.
- log1p: log of u = 1 + x (exact in f64 where it matters), with m - 1 = x itself where k = 0
         (|x| small: no rounding of 1 + x); -1 -> -inf, x < -1 -> nan, -0 kept.
- tanh:  |x| clamped to 10 (tanh rounds to 1 beyond), e = expm1(2|x|), tanh = e / (e + 2) (no
         cancellation near 0), sign copied; nan -> nan.
- erf:   |x| < 0.921875: x P(x^2), P erf's Taylor series to degree 16 in x^2; above: sign(x)
         (1 - exp(-Q(|x|))), Q of degree 6 fitting -log(erfc(t)) on [0.921875, 4] (|x| clamped to
         4, where erf rounds to 1), fitted for this module (weighted minimax, Lawson's iteration,
         in float64 on 3000-4000 Chebyshev nodes against mpmath): max error 1.5e-9 absolute
         (0.03 f32 ulp) before the rounding to f32; nan -> nan.
"""
import math

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
# expm1(r) = r + r^2 (1/2! + r/3! + ... + r^9/11!): its Taylor polynomial, highest degree first
EXPM1_TAYLOR = [1 / math.factorial(n) for n in range(11, 1, -1)]
# exp_f32 needs only f32's accuracy before its one rounding: the polynomial to degree 8
# (truncation r^9 / 9! <= 2e-10 relative for |r| <= ln2/2, 0.002 f32 ulp)
EXP_F32_TERMS = 7
EXP_HI, EXP_LO = 89.0, -104.0  # exp rounds to f32 inf above 88.73, to 0 below -103.98
# exp_f32's lower clamp: k = round(x log2e) = -1023 there, whose exponent bits (k + 1023) are 0
EXP_ZERO = -709.0
ROUND_SHIFTER = 1.5 * 2.0 ** 52  # x + it rounds x to an integer (|x| < 2^51)
EXPM1_LO = -40.0  # expm1 rounds to -1 below
# atanh(s) / s - 1 = z/3 + z^2/5 + ... + z^7/15 with z = s^2 (here: 1/3, 1/5, ..., highest first)
ATANH_SERIES = [1 / n for n in range(15, 1, -2)]
SQRT_HALF_BITS64 = 0x3FE6A09E667F3BCD  # sqrt(1/2) as f64 bits
MANTISSA64 = (1 << 52) - 1
TANH_CLAMP = 10.0

# erf(x) = x P(x^2) for |x| < ERF_SPLIT: erf's Taylor series 2/sqrt(pi) sum (-1)^n x^(2n+1) /
# (n! (2n + 1)) to n = 16 (truncation below 1e-14 relative), lowest degree first
ERF_SPLIT = 0.921875
ERF_SMALL = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(17)]
# erf(t) = 1 - exp(-Q(t)) for ERF_SPLIT <= t <= ERF_CLAMP (lowest degree first)
ERF_LARGE = [0.0002099226, 1.1276155, 0.6372858, 0.103838846, -0.022181368, 0.0030315926,
             -0.00019473363]
ERF_CLAMP = 4.0

D = "f64"


def _horner(b, x, coeffs, t):
    """coeffs from the highest degree down."""
    acc = b.const(coeffs[0], t)
    for c in coeffs[1:]:
        acc = b.op(f"math.fma {acc}, {x}, {b.const(c, t)} : {t}")
    return acc


def _ext(b, x):
    return b.op(f"arith.extf {x} : f32 to {D}")


def _round(b, y):
    return b.op(f"arith.truncf {y} : {D} to f32")


def _clamp(b, x, lo, hi, t=D):
    x = b.op(f"arith.minimumf {x}, {b.const(hi, t)} : {t}")
    return b.op(f"arith.maximumf {x}, {b.const(lo, t)} : {t}")


def _expm1_reduced(b, x, half=False, taylor=EXPM1_TAYLOR):
    """(expm1(r), 2^k) as f64 with x = k ln2 + r, |r| <= ln2/2, for an f64 x in [-745, 709]
    (half: 2^(k-1), for x in [-707, 710]; nan: poison, to be selected away); taylor: the
    polynomial's coefficients (EXPM1_TAYLOR's tail)."""
    # k = round(x log2e) in the low bits of t (1.5 2^52 added: an ulp of 1), no floor and no
    # float -> int conversion (two slow instructions a vector); 2^k from t's bits, shifted
    t = b.op(f"math.fma {x}, {b.const(LOG2E, D)}, {b.const(ROUND_SHIFTER, D)} : {D}")
    k = b.op(f"arith.subf {t}, {b.const(ROUND_SHIFTER, D)} : {D}")
    r = b.op(f"math.fma {k}, {b.const(-LN2, D)}, {x} : {D}")  # x exactly where k = 0
    p = _horner(b, r, taylor, D)
    q = b.op(f"math.fma {b.op(f'arith.mulf {r}, {r} : {D}')}, {p}, {r} : {D}")
    ki = b.op(f"arith.bitcast {t} : {D} to i64")  # k + bits of ROUND_SHIFTER, whose low 52 bits are 0
    e = b.op(f"arith.addi {ki}, {b.const(1022 if half else 1023, 'i64')} : i64")
    e = b.op(f"arith.shli {e}, {b.const(52, 'i64')} : i64")
    return q, b.op(f"arith.bitcast {e} : i64 to {D}")


def _expm1_f64(b, x):
    """expm1(x) in f64 for x in [-745, 709]: 2^k expm1(r) + (2^k - 1)."""
    q, s = _expm1_reduced(b, x)
    return b.op(f"math.fma {s}, {q}, {b.op(f'arith.subf {s}, {b.const(1.0, D)} : {D}')} : {D}")


def _nan_is_nan(b, x, r):
    """x where x is nan, else r: fptosi of a nan is poison in LLVM, the select keeps it out."""
    return b.op(f"arith.select {b.op(f'arith.cmpf uno, {x}, {x} : f32')}, {x}, {r} : f32")


def exp_f32(b, x):
    # No compare or select (each lane of 8 paid five instructions for them: softmax's kernel
    # 0.55 -> 0.48 ms, one Zen 5 core): below -103.98 the result rounds to 0, and at the clamp
    # EXP_ZERO (a causal mask's -inf, half a softmax's elements) 2^k is +0, so exp is an exact 0
    # with no tiny f64 value rounded (the underflow or denormal an exp(-104) would make is slow
    # on x86); min/max propagate nan, and every later op too (2^k's bits from nan's are a number)
    xc = _clamp(b, x, EXP_ZERO, EXP_HI, "f32")
    q, s = _expm1_reduced(b, _ext(b, xc), taylor=EXPM1_TAYLOR[-EXP_F32_TERMS:])
    return _round(b, b.op(f"math.fma {s}, {q}, {s} : {D}"))  # 2^k (1 + expm1(r)); inf past f32's range


# ---- f32 exp computed in f32, for values that are only summed (scalar.py, Body.summed: a
# log-sum-exp's sum(exp(x - max)), cross-entropy's and logsumexp's rows): no value of it is
# ever seen, the sum's own rounding (torch sums in f32 too) is larger than its error, and it
# takes half the instructions of the f64 form at twice the vector width (cross-entropy's forward
# is bound by it). As eager's log_softmax (SLEEF's f32 expf): ~1 ulp.
# x = k ln2 + r, |r| <= ln2/2 (k ln2 subtracted in two fmas, LN2_HI exact in 16 bits so k LN2_HI
# is exact for |k| <= 150), exp(r) by its Taylor polynomial to degree 7 (truncation 5e-9
# relative, 0.04 ulp), times 2^(k >> 1) then 2^(k - (k >> 1)): both normal f32 for k in [-150,
# 128], the second product rounds once into the denormals and overflows to inf past 88.72.
LN2_HI, LN2_LO = 0.693145751953125, 1.4286068203094172e-06
EXP_TAYLOR32 = [1 / math.factorial(n) for n in range(7, -1, -1)]


def _pow2_f32(b, k):
    """2^k as an f32 for an i32 k in [-126, 127]."""
    e = b.op(f"arith.addi {k}, {b.const(127, 'i32')} : i32")
    e = b.op(f"arith.shli {e}, {b.const(23, 'i32')} : i32")
    return b.op(f"arith.bitcast {e} : i32 to f32")


def exp_f32_summed(b, x):
    t = "f32"
    under = b.op(f"arith.cmpf olt, {x}, {b.const(EXP_LO, t)} : {t}")
    xc = _clamp(b, x, EXP_LO, EXP_HI, t)
    k = b.op(f"math.floor {b.op(f'math.fma {xc}, {b.const(LOG2E, t)}, {b.const(0.5, t)} : {t}')} : {t}")
    nk = b.op(f"arith.negf {k} : {t}")
    r = b.op(f"math.fma {nk}, {b.const(LN2_HI, t)}, {xc} : {t}")
    r = b.op(f"math.fma {nk}, {b.const(LN2_LO, t)}, {r} : {t}")
    p = _horner(b, r, EXP_TAYLOR32, t)
    ki = b.op(f"arith.fptosi {k} : {t} to i32")
    k1 = b.op(f"arith.shrsi {ki}, {b.const(1, 'i32')} : i32")
    k2 = b.op(f"arith.subi {ki}, {k1} : i32")
    y = b.op(f"arith.mulf {b.op(f'arith.mulf {p}, {_pow2_f32(b, k1)} : {t}')}, {_pow2_f32(b, k2)} : {t}")
    y = b.op(f"arith.select {under}, {b.const(0.0, t)}, {y} : {t}")
    return _nan_is_nan(b, x, y)


def expm1_f32(b, x):
    xd = _clamp(b, _ext(b, x), EXPM1_LO, EXP_HI)
    y = _round(b, _expm1_f64(b, xd))
    zero = b.op(f"arith.cmpf oeq, {x}, {b.const(0.0, 'f32')} : f32")  # keeps -0
    return _nan_is_nan(b, x, b.op(f"arith.select {zero}, {x}, {y} : f32"))


def _log_f64(b, u, f_near_one=None):
    """log(u) in f64 for a positive finite f64 u (others: garbage, to be selected away).
    f_near_one: an exact value of u - 1 to use where u is in [sqrt(1/2), sqrt(2)) (log1p's x)."""
    i = "i64"
    ix = b.op(f"arith.bitcast {u} : {D} to {i}")
    ix = b.op(f"arith.subi {ix}, {b.const(SQRT_HALF_BITS64, i)} : {i}")
    k = b.op(f"arith.shrsi {ix}, {b.const(52, i)} : {i}")
    m = b.op(f"arith.andi {ix}, {b.const(MANTISSA64, i)} : {i}")
    m = b.op(f"arith.addi {m}, {b.const(SQRT_HALF_BITS64, i)} : {i}")
    m = b.op(f"arith.bitcast {m} : {i} to {D}")  # in [sqrt(1/2), sqrt(2))
    f = b.op(f"arith.subf {m}, {b.const(1.0, D)} : {D}")  # exact
    if f_near_one is not None:
        k0 = b.op(f"arith.cmpi eq, {k}, {b.const(0, i)} : {i}")
        f = b.op(f"arith.select {k0}, {f_near_one}, {f} : {D}")
    s = b.op(f"arith.divf {f}, {b.op(f'arith.addf {f}, {b.const(2.0, D)} : {D}')} : {D}")
    s2 = b.op(f"arith.addf {s}, {s} : {D}")
    z = b.op(f"arith.mulf {s}, {s} : {D}")
    p = _horner(b, z, ATANH_SERIES, D)
    r = b.op(f"math.fma {b.op(f'arith.mulf {s2}, {z} : {D}')}, {p}, {s2} : {D}")  # 2 atanh(s)
    kf = b.op(f"arith.sitofp {k} : {i} to {D}")
    return b.op(f"math.fma {kf}, {b.const(LN2, D)}, {r} : {D}")


def log_f32(b, x, scale=None):
    """log(x), or log(x) * scale (log2, log10) rounded once."""
    t = "f32"
    r = _log_f64(b, _ext(b, x))
    if scale is not None:
        r = b.op(f"arith.mulf {r}, {b.const(scale, D)} : {D}")
    r = _round(b, r)
    zero, inf = b.const(0.0, t), b.const(float("inf"), t)
    r = b.op(f"arith.select {b.op(f'arith.cmpf oeq, {x}, {inf} : {t}')}, {inf}, {r} : {t}")
    r = b.op(f"arith.select {b.op(f'arith.cmpf oeq, {x}, {zero} : {t}')}, "
             f"{b.const(float('-inf'), t)}, {r} : {t}")
    neg = b.op(f"arith.cmpf ult, {x}, {zero} : {t}")  # x < 0 and nan: nan
    return b.op(f"arith.select {neg}, {b.const(float('nan'), t)}, {r} : {t}")


def log1p_f32(b, x):
    t = "f32"
    xd = _ext(b, x)
    u = b.op(f"arith.addf {xd}, {b.const(1.0, D)} : {D}")
    r = _round(b, _log_f64(b, u, xd))
    zero, inf = b.const(0.0, t), b.const(float("inf"), t)
    r = b.op(f"arith.select {b.op(f'arith.cmpf oeq, {x}, {inf} : {t}')}, {inf}, {r} : {t}")
    r = b.op(f"arith.select {b.op(f'arith.cmpf oeq, {x}, {b.const(-1.0, t)} : {t}')}, "
             f"{b.const(float('-inf'), t)}, {r} : {t}")
    r = b.op(f"arith.select {b.op(f'arith.cmpf oeq, {x}, {zero} : {t}')}, {x}, {r} : {t}")  # keeps -0
    below = b.op(f"arith.cmpf ult, {x}, {b.const(-1.0, t)} : {t}")  # x < -1 and nan: nan
    return b.op(f"arith.select {below}, {b.const(float('nan'), t)}, {r} : {t}")


def tanh_f32(b, x):
    xd = _ext(b, x)
    a = b.op(f"arith.minimumf {b.op(f'math.absf {xd} : {D}')}, {b.const(TANH_CLAMP, D)} : {D}")
    e = _expm1_f64(b, b.op(f"arith.addf {a}, {a} : {D}"))
    r = b.op(f"arith.divf {e}, {b.op(f'arith.addf {e}, {b.const(2.0, D)} : {D}')} : {D}")
    r = _round(b, b.op(f"math.copysign {r}, {xd} : {D}"))
    return _nan_is_nan(b, x, r)


def erf_f32(b, x):
    xd = _ext(b, x)
    ax = b.op(f"math.absf {xd} : {D}")
    s = b.op(f"arith.mulf {xd}, {xd} : {D}")
    small = b.op(f"arith.mulf {xd}, {_horner(b, s, ERF_SMALL[::-1], D)} : {D}")
    c = b.op(f"arith.minimumf {ax}, {b.const(ERF_CLAMP, D)} : {D}")
    q = _horner(b, c, ERF_LARGE[::-1], D)
    em = _expm1_f64(b, b.op(f"arith.negf {q} : {D}"))  # exp(-Q) - 1, Q in [1.5, 17]
    large = b.op(f"math.copysign {b.op(f'arith.negf {em} : {D}')}, {xd} : {D}")
    is_small = b.op(f"arith.cmpf olt, {ax}, {b.const(ERF_SPLIT, D)} : {D}")
    r = _round(b, b.op(f"arith.select {is_small}, {small}, {large} : {D}"))
    return _nan_is_nan(b, x, r)


# ---- widened f64 (dialects/emit.py WIDENED): a decomposition of an op on float32 (or
# float16/bfloat16) values computes it in f64 and rounds once to the result's type (F.softplus's
# log1p(exp(x)), F.elu's expm1(x) * alpha): its f64 math needs f32's accuracy, not f64's. These
# take any f64 (the range past f32's: exp(x * beta), huge log1p operands) to a relative error of
# about 1e-13 (as above, without the rounding to f32); exp flushes results below 2^-1021 (x <
# -707) to 0, log scales f64 denormals up first. They are not f64-accurate: unmarked f64 math
# stays a torch call (lowering/executors.py).
EXP64_LO, EXP64_HI = -707.0, 710.0  # 2^(k-1) stays a normal f64 between; exp(710) is inf
TANH64_CLAMP = 20.0  # tanh rounds to 1 in f64 beyond 19.1
TINY64 = 2.2250738585072014e-308  # the smallest normal f64


def _nan_is_nan64(b, x, r):
    return b.op(f"arith.select {b.op(f'arith.cmpf uno, {x}, {x} : {D}')}, {x}, {r} : {D}")


def _select(b, cond, a, r):
    return b.op(f"arith.select {cond}, {a}, {r} : {D}")


def _cmp(b, pred, x, value):
    return b.op(f"arith.cmpf {pred}, {x}, {b.const(value, D)} : {D}")


def exp_f64(b, x):
    q, t = _expm1_reduced(b, _clamp(b, x, EXP64_LO, EXP64_HI), half=True)
    y = b.op(f"arith.mulf {b.op(f'math.fma {t}, {q}, {t} : {D}')}, {b.const(2.0, D)} : {D}")  # inf past 709.78
    return _nan_is_nan64(b, x, _select(b, _cmp(b, "olt", x, EXP64_LO), b.const(0.0, D), y))


def expm1_f64(b, x):
    q, t = _expm1_reduced(b, _clamp(b, x, EXPM1_LO, EXP64_HI), half=True)
    # 2^k expm1(r) + 2^k - 1 = 2 (2^(k-1) expm1(r) + 2^(k-1) - 1/2): no overflow of 2^k below exp's
    y = b.op(f"math.fma {t}, {q}, {b.op(f'arith.subf {t}, {b.const(0.5, D)} : {D}')} : {D}")
    y = b.op(f"arith.mulf {y}, {b.const(2.0, D)} : {D}")
    return _nan_is_nan64(b, x, _select(b, _cmp(b, "oeq", x, 0.0), x, y))  # keeps -0


def _log_specials64(b, x, r, at_zero, below):
    r = _select(b, _cmp(b, "oeq", x, float("inf")), b.const(float("inf"), D), r)
    r = _select(b, _cmp(b, "oeq", x, at_zero), b.const(float("-inf"), D), r)
    return _select(b, _cmp(b, "ult", x, below), b.const(float("nan"), D), r)  # and nan


def log_f64(b, x, scale=None):
    tiny = _cmp(b, "olt", x, TINY64)  # a denormal (or 0, < 0: selected below): scaled by 2^54
    u = _select(b, tiny, b.op(f"arith.mulf {x}, {b.const(2.0 ** 54, D)} : {D}"), x)
    r = _log_f64(b, u)
    r = b.op(f"arith.subf {r}, {_select(b, tiny, b.const(54 * LN2, D), b.const(0.0, D))} : {D}")
    if scale is not None:
        r = b.op(f"arith.mulf {r}, {b.const(scale, D)} : {D}")
    return _log_specials64(b, x, r, 0.0, 0.0)


def log1p_f64(b, x):
    u = b.op(f"arith.addf {x}, {b.const(1.0, D)} : {D}")  # x itself is used where u is near 1
    r = _log_specials64(b, x, _log_f64(b, u, x), -1.0, -1.0)
    return _select(b, _cmp(b, "oeq", x, 0.0), x, r)  # keeps -0


def tanh_f64(b, x):
    a = b.op(f"arith.minimumf {b.op(f'math.absf {x} : {D}')}, {b.const(TANH64_CLAMP, D)} : {D}")
    e = _expm1_f64(b, b.op(f"arith.addf {a}, {a} : {D}"))
    r = b.op(f"arith.divf {e}, {b.op(f'arith.addf {e}, {b.const(2.0, D)} : {D}')} : {D}")
    return _nan_is_nan64(b, x, b.op(f"math.copysign {r}, {x} : {D}"))


APPROX = {("math.tanh", "f32"): tanh_f32, ("math.exp", "f32"): exp_f32,
          ("math.log", "f32"): log_f32, ("math.log1p", "f32"): log1p_f32,
          ("math.expm1", "f32"): expm1_f32, ("math.erf", "f32"): erf_f32,
          ("math.log2", "f32"): lambda b, x: log_f32(b, x, 1 / LN2),
          ("math.log10", "f32"): lambda b, x: log_f32(b, x, 1 / math.log(10)),
          # widened f64 only (scalar.py): f64 math that is not marked stays a libm call
          ("math.tanh", "f64"): tanh_f64, ("math.exp", "f64"): exp_f64, ("math.log", "f64"): log_f64,
          ("math.log1p", "f64"): log1p_f64, ("math.expm1", "f64"): expm1_f64,
          ("math.log2", "f64"): lambda b, x: log_f64(b, x, 1 / LN2),
          ("math.log10", "f64"): lambda b, x: log_f64(b, x, 1 / math.log(10))}


# ---- f32 tanh computed in f32, for values seen only through bf16/f16 roundings or sums (as
# exp_f32_summed; coarse_uses.py): |x| < TANH_SPLIT by tanh's Taylor series to x^21 (truncation
# below 1e-8 relative there), above by 1 - 2 / (exp(2|x|) + 1) with exp_f32_summed's exp (|x|
# clamped to 10, where tanh rounds to 1), sign copied: within ~3 f32 ulp (eager's SLEEF tanh: 1),
# 2^-16 of a bf16 ulp; -0, +-inf -> +-1 and nan as eager's.
TANH_SPLIT = 0.625


def _tanh_taylor(n):
    """tanh(x) = sum a_k x^(2k+1), k < n, from tanh' = 1 - tanh^2: (2k+1) a_k = -sum a_i a_j
    over i + j = k - 1."""
    a = [1.0]
    for k in range(1, n):
        a.append(-sum(a[i] * a[k - 1 - i] for i in range(k)) / (2 * k + 1))
    return a


TANH_TAYLOR32 = _tanh_taylor(11)[::-1]  # highest degree first


def tanh_f32_summed(b, x):
    t = "f32"
    a = b.op(f"arith.minimumf {b.op(f'math.absf {x} : {t}')}, {b.const(TANH_CLAMP, t)} : {t}")
    small = b.op(f"arith.mulf {a}, {_horner(b, b.op(f'arith.mulf {a}, {a} : {t}'), TANH_TAYLOR32, t)} : {t}")
    e = exp_f32_summed(b, b.op(f"arith.addf {a}, {a} : {t}"))
    q = b.op(f"arith.divf {b.const(2.0, t)}, {b.op(f'arith.addf {e}, {b.const(1.0, t)} : {t}')} : {t}")
    large = b.op(f"arith.subf {b.const(1.0, t)}, {q} : {t}")
    below = b.op(f"arith.cmpf olt, {a}, {b.const(TANH_SPLIT, t)} : {t}")
    r = b.op(f"arith.select {below}, {small}, {large} : {t}")
    return _nan_is_nan(b, x, b.op(f"math.copysign {r}, {x} : {t}"))


# where the values are only summed or rounded to bf16/f16 (scalar.py Body.summed; coarse_uses.py)
SUMMED = {("math.exp", "f32"): exp_f32_summed, ("math.tanh", "f32"): tanh_f32_summed}
