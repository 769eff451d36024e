"""Polynomial approximations of math functions for f32, emitted as arith ops into a linalg body.

MLIR's own approximations (populateMathPolynomialApproximationPatterns) are only reachable
through the test pass `test-math-polynomial-approximation`, which the wheel does not register;
without them `math.exp`/`math.tanh` end as scalar libm calls (expf), which stop LLVM's loop
vectorizer. These are pure arith (plus math.floor, an LLVM intrinsic), so loops vectorize.

- tanh: Eigen's rational approximation (odd degree-13 / even degree-6), the one MLIR uses.
- exp:  Cephes expf: x = k ln2 + r, exp(r) by a degree-7 polynomial, 2^k built in the exponent
        bits in two factors 2^(k/2) 2^(k - k/2) so that k in [-150, 128] stays exact (gradual
        underflow to denormals); overflow -> inf, underflow -> 0, nan -> nan.
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
    xc = b.op(f"arith.minimumf {x}, {b.const(EXP_HI, t)} : {t}")
    xc = b.op(f"arith.maximumf {xc}, {b.const(EXP_LO, t)} : {t}")
    fx = b.op(f"math.fma {xc}, {b.const(LOG2E, t)}, {b.const(0.5, t)} : {t}")
    fx = b.op(f"math.floor {fx} : {t}")
    r = b.op(f"math.fma {fx}, {b.const(-EXP_C1, t)}, {xc} : {t}")
    r = b.op(f"math.fma {fx}, {b.const(-EXP_C2, t)}, {r} : {t}")
    p = _horner(b, r, EXP_P, t)
    r2 = b.op(f"arith.mulf {r}, {r} : {t}")
    y = b.op(f"math.fma {p}, {r2}, {r} : {t}")
    y = b.op(f"arith.addf {y}, {b.const(1.0, t)} : {t}")
    k = b.op(f"arith.fptosi {fx} : {t} to i32")
    k1 = b.op(f"arith.shrsi {k}, {b.const(1, 'i32')} : i32")
    k2 = b.op(f"arith.subi {k}, {k1} : i32")
    for kk in (k1, k2):
        e = b.op(f"arith.addi {kk}, {b.const(127, 'i32')} : i32")
        e = b.op(f"arith.shli {e}, {b.const(23, 'i32')} : i32")
        y = b.op(f"arith.mulf {y}, {b.op(f'arith.bitcast {e} : i32 to {t}')} : {t}")
    over = b.op(f"arith.cmpf ogt, {x}, {b.const(EXP_HI, t)} : {t}")
    y = b.op(f"arith.select {over}, {b.const(float('inf'), t)}, {y} : {t}")
    under = b.op(f"arith.cmpf olt, {x}, {b.const(EXP_LO, t)} : {t}")
    y = b.op(f"arith.select {under}, {b.const(0.0, t)}, {y} : {t}")
    nan = b.op(f"arith.cmpf uno, {x}, {x} : {t}")
    return b.op(f"arith.select {nan}, {x}, {y} : {t}")


APPROX = {("math.tanh", "f32"): tanh_f32, ("math.exp", "f32"): exp_f32}
