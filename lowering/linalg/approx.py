"""Polynomial approximations of math functions for f32, emitted as arith ops into a linalg body.

MLIR's own approximations (populateMathPolynomialApproximationPatterns) are only reachable
through the test pass `test-math-polynomial-approximation`, which the wheel does not register;
without them `math.exp`/`math.tanh`/`math.erf`/`math.log`/... end as scalar libm calls (expf,
erff, logf), which stop LLVM's loop vectorizer. These are pure arith (plus math.fma/floor/absf/
copysign, LLVM intrinsics), so loops vectorize. All are branch-free: every path is computed and
the result picked with selects. Accuracy (f32, against torch and float64): a few ulp.

- tanh:  Eigen's rational approximation (odd degree-13 / even degree-6), the one MLIR uses.
- exp:   Cephes expf: x = k ln2 + r, exp(r) by a degree-7 polynomial, 2^k built in the exponent
         bits in two factors 2^(k/2) 2^(k - k/2) so that k in [-150, 128] stays exact (gradual
         underflow to denormals); overflow -> inf, underflow -> 0, nan -> nan.
- log:   musl-style range reduction on the bits: x = 2^k m with m in [sqrt(1/2), sqrt(2))
         (denormals scaled by 2^23 first), log1p(m - 1) by Cephes logf's polynomial
         (f - f^2/2 + f^3 P(f), degree 8), k ln2 added in two parts; 0 -> -inf, x < 0 -> nan,
         +inf -> +inf, nan -> nan.
- log1p: u = 1 + x, log(u) * x / (u - 1) (exact u - 1 corrects the rounding of 1 + x; Goldberg/
         Kahan), x where u == 1, inf where u == inf.
- expm1: exp's reduction x = k ln2 + r, expm1(r) = r + r^2 P(r) (exp's polynomial, no
         cancellation near 0), 2^k expm1(r) + (2^k - 1) (exact 2^k - 1 for |k| <= 24) in one fma;
         x clamped to [-20, 88.72] (-1 below), exp(x) above 20, inf above 88.72, -0 kept, nan.
- erf:   |x| < 0.921875: x P(x^2) (degree 6); above: sign(x) (1 - exp(-Q(|x|))), Q of degree 6
         fitting -log(erfc(t)) on [0.921875, 4] (|x| clamped to 4, where erf rounds to 1), the
         exp without exp_f32's special cases (its argument is in [-17, -1.5]); nan -> nan.
         Coefficients fitted for this module (weighted minimax, Lawson's iteration, in float64 on
         3000-4000 Chebyshev nodes against mpmath): max error 4e-10 relative / 1.5e-9 absolute
         before f32 rounding.

f16 and bf16 versions compute in f32 (extf, the f32 approximation, truncf), as torch does.
"""

TANH_ALPHA = [4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05,
              5.12229709037114e-08, -8.60467152213735e-11, 2.00018790482477e-13,
              -2.76076847742355e-16]
TANH_BETA = [4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04,
             1.19825839466702e-06]
TANH_CLAMP = 7.90531110763549805
TANH_TINY = 0.0004

EXP_P = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
         1.6666665459e-1, 5.0000001201e-1]
EXP_C1, EXP_C2 = 0.693359375, -2.12194440e-4
LOG2E = 1.44269504088896341
EXP_HI, EXP_LO = 88.72283935546875, -103.97208404541016  # beyond: inf / 0


def _horner(b, x, coeffs, t):
    """coeffs from the highest degree down."""
    acc = b.const(coeffs[0], t)
    for c in coeffs[1:]:
        acc = b.op(f"math.fma {acc}, {x}, {b.const(c, t)} : {t}")
    return acc


def tanh_f32(b, x):
    t = "f32"
    hi, lo = b.const(TANH_CLAMP, t), b.const(-TANH_CLAMP, t)
    xc = b.op(f"arith.minimumf {x}, {hi} : {t}")
    xc = b.op(f"arith.maximumf {xc}, {lo} : {t}")
    x2 = b.op(f"arith.mulf {xc}, {xc} : {t}")
    p = _horner(b, x2, TANH_ALPHA[::-1], t)
    p = b.op(f"arith.mulf {p}, {xc} : {t}")
    q = _horner(b, x2, TANH_BETA[::-1], t)
    r = b.op(f"arith.divf {p}, {q} : {t}")
    ax = b.op(f"math.absf {x} : {t}")
    big = b.op(f"arith.cmpf oge, {ax}, {hi} : {t}")  # saturate to exactly +-1
    r = b.op(f"arith.select {big}, {b.op(f'math.copysign {b.const(1.0, t)}, {x} : {t}')}, {r} : {t}")
    tiny = b.op(f"arith.cmpf olt, {ax}, {b.const(TANH_TINY, t)} : {t}")
    return b.op(f"arith.select {tiny}, {x}, {r} : {t}")


def exp_f32(b, x):
    t = "f32"
    under = b.op(f"arith.cmpf olt, {x}, {b.const(EXP_LO, t)} : {t}")
    xc = b.op(f"arith.minimumf {x}, {b.const(EXP_HI, t)} : {t}")
    xc = b.op(f"arith.maximumf {xc}, {b.const(EXP_LO, t)} : {t}")
    # below EXP_LO the result is 0 (selected below): compute exp(0) there rather than exp(EXP_LO),
    # whose scaling makes a denormal, which x86 computes in microcode, ~100 cycles an element (a
    # causal mask's -inf is half a softmax's elements: 0.60 against 0.39 ms)
    xc = b.op(f"arith.select {under}, {b.const(0.0, t)}, {xc} : {t}")
    y, k = _exp_reduced(b, xc)
    k1 = b.op(f"arith.shrsi {k}, {b.const(1, 'i32')} : i32")
    k2 = b.op(f"arith.subi {k}, {k1} : i32")
    for kk in (k1, k2):
        y = b.op(f"arith.mulf {y}, {_pow2(b, kk)} : {t}")
    over = b.op(f"arith.cmpf ogt, {x}, {b.const(EXP_HI, t)} : {t}")
    y = b.op(f"arith.select {over}, {b.const(float('inf'), t)}, {y} : {t}")
    y = b.op(f"arith.select {under}, {b.const(0.0, t)}, {y} : {t}")
    nan = b.op(f"arith.cmpf uno, {x}, {x} : {t}")
    return b.op(f"arith.select {nan}, {x}, {y} : {t}")


# log1p(f) = f - f^2/2 + f^3 P(f) on [sqrt(1/2) - 1, sqrt(2) - 1] (Cephes logf)
LOG_P = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
         -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1]
LOG_C1, LOG_C2 = 0.693359375, -2.12194440e-4  # ln2 = C1 + C2, C1 exact in 9 bits
SQRT_HALF_BITS = 0x3F3504F3
FLT_MIN = 1.1754943508222875e-38  # smallest normal f32

# erf(x) = x P(x^2) for |x| < ERF_SPLIT (lowest degree first)
ERF_SPLIT = 0.921875
ERF_SMALL = [1.1283792, -0.37612635, 0.11283696, -0.026859399, 0.005201033, -0.00081427104,
             8.370122e-05]
# erf(t) = 1 - exp(-Q(t)) for ERF_SPLIT <= t <= ERF_CLAMP (lowest degree first)
ERF_LARGE = [0.0002099226, 1.1276155, 0.6372858, 0.103838846, -0.022181368, 0.0030315926,
             -0.00019473363]
ERF_CLAMP = 4.0

EXPM1_LO = -20.0  # expm1 rounds to -1 below
EXPM1_BIG = 20.0  # above: exp(x) (expm1 rounds to it), its 2^k in two factors


def log_f32(b, x):
    t, i = "f32", "i32"
    tiny = b.op(f"arith.cmpf olt, {x}, {b.const(FLT_MIN, t)} : {t}")  # denormals (and <= 0)
    xs = b.op(f"arith.mulf {x}, {b.const(8388608.0, t)} : {t}")  # 2^23, exact
    xn = b.op(f"arith.select {tiny}, {xs}, {x} : {t}")
    kadj = b.op(f"arith.select {tiny}, {b.const(-23.0, t)}, {b.const(0.0, t)} : {t}")
    ix = b.op(f"arith.bitcast {xn} : {t} to {i}")
    ix = b.op(f"arith.subi {ix}, {b.const(SQRT_HALF_BITS, i)} : {i}")
    k = b.op(f"arith.shrsi {ix}, {b.const(23, i)} : {i}")
    m = b.op(f"arith.andi {ix}, {b.const(0x7FFFFF, i)} : {i}")
    m = b.op(f"arith.addi {m}, {b.const(SQRT_HALF_BITS, i)} : {i}")
    m = b.op(f"arith.bitcast {m} : {i} to {t}")  # in [sqrt(1/2), sqrt(2))
    f = b.op(f"arith.subf {m}, {b.const(1.0, t)} : {t}")  # exact
    kf = b.op(f"arith.sitofp {k} : {i} to {t}")
    kf = b.op(f"arith.addf {kf}, {kadj} : {t}")
    z = b.op(f"arith.mulf {f}, {f} : {t}")
    p = _horner(b, f, LOG_P, t)
    y = b.op(f"arith.mulf {b.op(f'arith.mulf {f}, {z} : {t}')}, {p} : {t}")
    y = b.op(f"math.fma {kf}, {b.const(LOG_C2, t)}, {y} : {t}")
    y = b.op(f"math.fma {z}, {b.const(-0.5, t)}, {y} : {t}")
    r = b.op(f"arith.addf {f}, {y} : {t}")
    r = b.op(f"math.fma {kf}, {b.const(LOG_C1, t)}, {r} : {t}")
    zero = b.const(0.0, t)
    inf = b.const(float("inf"), t)
    r = b.op(f"arith.select {b.op(f'arith.cmpf oeq, {x}, {inf} : {t}')}, {inf}, {r} : {t}")
    r = b.op(f"arith.select {b.op(f'arith.cmpf oeq, {x}, {zero} : {t}')}, "
             f"{b.const(float('-inf'), t)}, {r} : {t}")
    # x < 0 and nan: nan
    neg = b.op(f"arith.cmpf ult, {x}, {zero} : {t}")
    return b.op(f"arith.select {neg}, {b.const(float('nan'), t)}, {r} : {t}")


def log1p_f32(b, x):
    t = "f32"
    one = b.const(1.0, t)
    u = b.op(f"arith.addf {x}, {one} : {t}")
    lu = log_f32(b, u)
    um1 = b.op(f"arith.subf {u}, {one} : {t}")
    r = b.op(f"arith.mulf {lu}, {b.op(f'arith.divf {x}, {um1} : {t}')} : {t}")
    inf = b.const(float("inf"), t)
    r = b.op(f"arith.select {b.op(f'arith.cmpf oeq, {u}, {inf} : {t}')}, {u}, {r} : {t}")
    return b.op(f"arith.select {b.op(f'arith.cmpf oeq, {u}, {one} : {t}')}, {x}, {r} : {t}")


def _pow2(b, k):
    """2^k as f32 for an i32 k in [-126, 127], built in the exponent bits."""
    e = b.op(f"arith.addi {k}, {b.const(127, 'i32')} : i32")
    e = b.op(f"arith.shli {e}, {b.const(23, 'i32')} : i32")
    return b.op(f"arith.bitcast {e} : i32 to f32")


def expm1_f32(b, x):
    t, i = "f32", "i32"
    xc = b.op(f"arith.minimumf {x}, {b.const(EXP_HI, t)} : {t}")
    xc = b.op(f"arith.maximumf {xc}, {b.const(EXPM1_LO, t)} : {t}")  # below: -1 in f32
    fx = b.op(f"math.fma {xc}, {b.const(LOG2E, t)}, {b.const(0.5, t)} : {t}")
    fx = b.op(f"math.floor {fx} : {t}")
    r = b.op(f"math.fma {fx}, {b.const(-EXP_C1, t)}, {xc} : {t}")
    r = b.op(f"math.fma {fx}, {b.const(-EXP_C2, t)}, {r} : {t}")
    p = _horner(b, r, EXP_P, t)
    em = b.op(f"math.fma {p}, {b.op(f'arith.mulf {r}, {r} : {t}')}, {r} : {t}")  # expm1(r)
    k = b.op(f"arith.fptosi {fx} : {t} to {i}")
    k1 = b.op(f"arith.shrsi {k}, {b.const(1, i)} : {i}")
    k2 = b.op(f"arith.subi {k}, {k1} : {i}")
    s1, s2 = (_pow2(b, kk) for kk in (k1, k2))
    two = b.op(f"arith.mulf {s1}, {s2} : {t}")  # 2^k; inf only for k = 128 (the big side)
    one = b.const(1.0, t)
    # 2^k expm1(r) + (2^k - 1), 2^k - 1 exact for |k| <= 24 (beyond, it is 2^k or -1 anyway)
    y = b.op(f"math.fma {two}, {em}, {b.op(f'arith.subf {two}, {one} : {t}')} : {t}")
    big = b.op(f"arith.mulf {b.op(f'arith.addf {em}, {one} : {t}')}, {s1} : {t}")
    big = b.op(f"arith.mulf {big}, {s2} : {t}")  # exp(x), no overflow of 2^k before the end
    is_big = b.op(f"arith.cmpf ogt, {x}, {b.const(EXPM1_BIG, t)} : {t}")
    y = b.op(f"arith.select {is_big}, {big}, {y} : {t}")
    over = b.op(f"arith.cmpf ogt, {x}, {b.const(EXP_HI, t)} : {t}")
    y = b.op(f"arith.select {over}, {b.const(float('inf'), t)}, {y} : {t}")
    zero = b.op(f"arith.cmpf oeq, {x}, {b.const(0.0, t)} : {t}")  # keeps -0
    return _nan_is_nan(b, x, b.op(f"arith.select {zero}, {x}, {y} : {t}"))


def _exp_reduced(b, x):
    """(exp(r), k) with x = k ln2 + r, |r| <= ln2/2: the polynomial part of exp, k as i32."""
    t = "f32"
    fx = b.op(f"math.fma {x}, {b.const(LOG2E, t)}, {b.const(0.5, t)} : {t}")
    fx = b.op(f"math.floor {fx} : {t}")
    r = b.op(f"math.fma {fx}, {b.const(-EXP_C1, t)}, {x} : {t}")
    r = b.op(f"math.fma {fx}, {b.const(-EXP_C2, t)}, {r} : {t}")
    p = _horner(b, r, EXP_P, t)
    y = b.op(f"math.fma {p}, {b.op(f'arith.mulf {r}, {r} : {t}')}, {r} : {t}")
    y = b.op(f"arith.addf {y}, {b.const(1.0, t)} : {t}")
    return y, b.op(f"arith.fptosi {fx} : {t} to i32")


def _exp_bounded(b, x):
    """exp(x) for x in [-87, 88] (or nan): exp_f32 without its clamps and special cases."""
    y, k = _exp_reduced(b, x)
    return b.op(f"arith.mulf {y}, {_pow2(b, k)} : f32")


def erf_f32(b, x):
    t = "f32"
    ax = b.op(f"math.absf {x} : {t}")
    s = b.op(f"arith.mulf {x}, {x} : {t}")
    small = b.op(f"arith.mulf {x}, {_horner(b, s, ERF_SMALL[::-1], t)} : {t}")
    c = b.op(f"arith.minimumf {ax}, {b.const(ERF_CLAMP, t)} : {t}")
    q = _horner(b, c, ERF_LARGE[::-1], t)
    e = _exp_bounded(b, b.op(f"arith.negf {q} : {t}"))
    large = b.op(f"arith.subf {b.const(1.0, t)}, {e} : {t}")
    large = b.op(f"math.copysign {large}, {x} : {t}")
    is_small = b.op(f"arith.cmpf olt, {ax}, {b.const(ERF_SPLIT, t)} : {t}")
    r = b.op(f"arith.select {is_small}, {small}, {large} : {t}")
    return _nan_is_nan(b, x, r)


def _nan_is_nan(b, x, r):
    """x where x is nan, else r: fptosi of a nan is poison in LLVM, the select keeps it out."""
    return b.op(f"arith.select {b.op(f'arith.cmpf uno, {x}, {x} : f32')}, {x}, {r} : f32")


APPROX = {("math.tanh", "f32"): tanh_f32, ("math.exp", "f32"): exp_f32,
          ("math.log", "f32"): log_f32, ("math.log1p", "f32"): log1p_f32,
          ("math.expm1", "f32"): expm1_f32, ("math.erf", "f32"): erf_f32}


def _in_f32(fn, t):
    """fn computed in f32 for a 16-bit float type t (torch's opmath for f16/bf16)."""
    def f(b, x):
        y = fn(b, b.op(f"arith.extf {x} : {t} to f32"))
        return b.op(f"arith.truncf {y} : f32 to {t}")
    return f


for (_op, _t), _fn in list(APPROX.items()):
    for _low in ("f16", "bf16"):
        APPROX[_op, _low] = _in_f32(_fn, _low)
