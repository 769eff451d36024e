"""Which values of a region are never seen at f32 precision: each reaches the region's results
only summed, or rounded to bf16/f16.

approx.SUMMED's f32 exp (~1 ulp, as SLEEF's expf that eager's f32 kernels call) computes in f32
at twice the vector width of the correctly rounded f64 form (approx.exp_f32), which LLVM
vectorizes 4 lanes wide (256-bit doubles): the correctly rounded form is what a value someone
reads in f32 needs, not one that is summed (the sum's own rounding is larger) or rounded to a
16-bit float before anyone reads it (bf16 keeps 8 significant bits, f16 11: an f32 ulp of the
exp is 2^-16 of a bf16 ulp, so the rounded result is eager's unless the f32 value lies within
an ulp of a bf16 rounding boundary, where eager's own 1-ulp exp may fall either side too).
Cross-entropy's backward under bf16 autocast (`exp(logits - lse) * g`, rounded to the bf16
gradient of the logits) computes 16 M exps a step for a 32000-word vocabulary.

A value is seen coarsely where every use is a thunder.sum, the region's return of a bf16/f16
value, or an elementwise float op continuous in the value (add, mul, exp, ...; not sin, cos,
pow; where's branches; conversions between float types; broadcasts, reshapes, transposes,
slices) whose result is itself seen coarsely. A comparison, a discontinuous op (floor, round,
sign, ...), a reduction other than sum (amax picks one value exactly), the return of an f32/f64
value or anything else makes it seen exactly: a bf16 value that a discontinuous op reads (kept
rounded after each op as eager's, bf16_intermediates.py) is not coarse, so an ulp of the exp
cannot move a floor's result."""
from thunder.dialects.mlir import address, ir

COARSE_FLOATS = ("bf16", "f16")
# continuous elementwise ops that carry a relative error of their operand into their result
# (not sin, cos or pow: a large argument or exponent multiplies it)
_THROUGH = {"add", "sub", "mul", "div", "neg", "abs", "exp", "expm1", "log", "log1p", "log2", "log10",
            "sqrt", "rsqrt", "reciprocal", "tanh", "erf", "maximum", "minimum",
            "broadcast_in_dim", "reshape", "transpose", "slice"}


def _elt(value):
    t = value.type
    return str(ir.RankedTensorType(t).element_type) if isinstance(t, ir.RankedTensorType) else None


def _float(elt):
    return elt in ("f16", "bf16", "f32", "f64")


def seen_coarsely(value) -> bool:
    """Whether value (an op result in a region of thunder prims) reaches the region's results only
    through sums or as bf16/f16 values (the module's docstring); False for an unused value."""
    todo, seen = [value], set()
    while todo:
        v = todo.pop()
        uses = list(v.uses)
        if not uses:
            return False
        for use in uses:
            owner = use.owner
            if owner.name == "func.return":
                if _elt(v) in COARSE_FLOATS:
                    continue
                return False
            name = owner.name.removeprefix("thunder.")
            if name == "sum" and owner.name.startswith("thunder."):
                continue
            through = owner.name.startswith("thunder.") and len(owner.results) == 1 and (
                name in _THROUGH or name == "convert_element_type" or
                (name == "where" and use.operand_number != 0))
            if not through or not _float(_elt(owner.results[0])):
                return False
            if address(owner) not in seen:
                seen.add(address(owner))
                todo.append(owner.results[0])
    return True
