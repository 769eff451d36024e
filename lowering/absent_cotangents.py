"""A backward program for the calls where some outputs receive no gradient.

torch's autograd gives a thunder program's backward `None` for an output nothing was
differentiated through (a model's `logits` beside the `loss` that `.backward()` ran on, a KV
cache it returns). @backward takes one cotangent per differentiable output; feeding it zeros for
the absent ones costs a full-size fill and an add per such output, work eager never does. Here
@backward is specialized to the cotangents present: an absent one is a known zero, propagated
forward through the ops that keep a zero a zero (views, sums, products, matmuls, adds of two
zeros), and where an add meets a zero the other operand is used as is. An op no rule covers gets
a materialized zero operand, so the result is always that of the full backward; gradients that
are zero for want of any cotangent are dropped (`keep` says which must still be returned).
"""
from thunder.core.trace import BoundSymbol, Ref, TraceCtx
from thunder.ops.registry import OPS

# op name -> its parameters of which any one being zero makes all its results zero (ops linear in
# each of those, with f(0) = 0: views and layout changes, reductions, products, the backward ops
# whose results are linear in the incoming gradient)
ZERO_IF_ANY = {name: ("input", "a", "tensor") for name in (
    "neg", "reshape", "view", "transpose", "permute", "expand", "broadcast_in_dim", "unsqueeze",
    "squeeze", "contiguous", "clone", "narrow", "slice", "sum", "mean", "to", "convert_element_type",
    "flatten", "movedim", "getitem", "t", "split", "chunk", "unflatten", "real", "conj")}
ZERO_IF_ANY.update({
    "mul": ("input", "other", "a", "b"),
    "div": ("input", "a"),
    "matmul": ("input", "other"), "mm": ("input", "mat2"), "bmm": ("input", "mat2"),
    "unslice": ("g",), "zeros_index_add": ("source",),
    "sdpa_flash_backward": ("grad_out",),
    "native_layer_norm_backward": ("grad_output",),
})
# op name -> its tensor parameters that must all be zero for a zero result
ZERO_IF_ALL = {"add": ("input", "other", "a", "b"), "sub": ("input", "other", "a", "b"),
               "where": ("input", "other", "a", "b"), "cat": ("tensors",), "stack": ("tensors",)}


def drop_absent(ctx, outputs, absent, keep=()):
    """ctx, outputs: @backward lifted (dialects/lift.py); absent: names of its cotangent inputs
    that are None at run time. Returns (symbols, outputs): the outputs a list of Refs, None for
    each that is zero, unless its index is in keep (then a materialized zero)."""
    zero = set(absent)
    rename = {}
    materialized = {}
    taken = {r.name for r in ctx.inputs} | {o.name for b in ctx.symbols for o in b.outputs}
    symbols = []

    def zeros_like(ref):
        z = materialized.get(ref.name)
        if z is None:
            name = f"{ref.name}_zeros"
            while name in taken:
                name += "_"
            taken.add(name)
            z = materialized[ref.name] = Ref(name, ref.shape, ref.dtype, ref.device)
            fill = 0.0 if ref.dtype.is_floating_point or ref.dtype.is_complex else 0
            symbols.append(BoundSymbol(OPS["thunder.full"], {"shape": tuple(ref.shape), "fill_value": fill,
                                                             "dtype": ref.dtype, "device": ref.device}, [z], None))
        return z

    def subst(v, fn):
        if isinstance(v, Ref):
            return fn(v)
        if isinstance(v, tuple):
            return tuple(subst(x, fn) for x in v)
        return v

    for bsym in ctx.symbols:
        args = {k: subst(v, lambda r: rename.get(r.name, r)) for k, v in bsym.args.items()}
        zero_params = {k for k, v in args.items() if any(r.name in zero for r in _refs(v))}
        if not zero_params:
            symbols.append(BoundSymbol(bsym.op, args, bsym.outputs, bsym.location, bsym.widened))
            continue
        name = bsym.op.name
        if _all_zero(name, args, zero_params, zero) or zero_params & set(ZERO_IF_ANY.get(name, ())):
            zero.update(o.name for o in bsym.outputs)
            continue
        other = _identity_operand(name, args, zero_params, bsym.outputs)
        if other is not None:
            rename[bsym.outputs[0].name] = other
            continue
        args = {k: subst(v, lambda r: zeros_like(r) if r.name in zero else r) for k, v in args.items()}
        symbols.append(BoundSymbol(bsym.op, args, bsym.outputs, bsym.location, bsym.widened))

    result = []
    for i, r in enumerate(outputs):
        r = rename.get(r.name, r)
        if r.name in zero:
            r = zeros_like(r) if i in keep else None
        result.append(r)
    return symbols, result


def _refs(v):
    if isinstance(v, Ref):
        return [v]
    if isinstance(v, tuple):
        return [x for item in v for x in _refs(item)]
    return []


def _all_zero(name, args, zero_params, zero):
    params = [p for p in ZERO_IF_ALL.get(name, ()) if p in args]
    return bool(params) and all(p in zero_params and all(r.name in zero for r in _refs(args[p])) for p in params)


def _identity_operand(name, args, zero_params, outputs):
    """x for `x + 0`, `0 + x` and `x - 0` of x shaped and typed as the result, else None."""
    if name not in ("add", "sub") or len(outputs) != 1 or len(zero_params) != 1:
        return None
    first, second = ("input", "other") if "input" in args else ("a", "b")
    (z,) = zero_params
    if z not in (first, second) or args.get("alpha", 1) != 1 and z == first:
        return None
    if name == "sub" and z == first:
        return None  # (0 - x is -x)
    keep = args[second if z == first else first]
    out = outputs[0]
    if isinstance(keep, Ref) and keep.shape == out.shape and keep.dtype == out.dtype and keep.device == out.device:
        return keep
    return None


def specialize(lifted, present, keep=()):
    """A TraceCtx for @backward with the cotangent inputs (the last len(present)) where present is
    False known to be zero; and its outputs (Refs, None where dropped): drop_absent."""
    cotangents = lifted.ctx.inputs[len(lifted.ctx.inputs) - len(present):]
    absent = {r.name for r, p in zip(cotangents, present) if not p}
    ctx = TraceCtx(prefix="b")
    ctx.inputs = list(lifted.ctx.inputs)
    ctx.symbols, outputs = drop_absent(lifted.ctx, lifted.outputs, absent, keep)
    return ctx, outputs
