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
from thunder.dialects import attrs, sizes
from thunder.dialects.definitions import LIST_OP, UNLIST_OP, decode_op
from thunder.dialects.emit import emit_symbol, loc_names
from thunder.dialects.mlir import func, ir
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
            z = materialized[ref.name] = Ref(_zeros_name(ref.name, taken), ref.shape, ref.dtype, ref.device)
            symbols.append(BoundSymbol(OPS["thunder.full"], _zeros_args(ref.shape, ref.dtype, ref.device), [z], None))
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


def _zeros_name(base, taken):
    """`<base>_zeros`, made unique among the names taken (and taken from now on)."""
    name = f"{base}_zeros"
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _zeros_args(shape, dtype, device):
    """thunder.full's arguments for a zero tensor of this metadata."""
    fill = 0.0 if dtype.is_floating_point or dtype.is_complex else 0
    return {"shape": tuple(shape), "fill_value": fill, "dtype": dtype, "device": device}


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


def specialize_func(func_op, present, keep=()):
    """@backward (an MLIR func.func; its cotangent arguments the last len(present)) specialized
    in place to the cotangents present, as specialize() and emitting its result would make it,
    touching only the ops that read a zero (a model's logits without gradient: one add); the
    rest of the func, thousands of ops at depth, is neither lifted nor emitted again. Returns
    the indices of the results kept (the others were zero and dropped), or None, the func
    unchanged, where an op reading a zero needs the general path (a list of tensors, an op
    returning a sequence, sizes computed by ops, a value without a name)."""
    block = func_op.regions[0].blocks[0]
    args = list(block.arguments)
    if any(sizes.is_dynamic_type(a.type) for a in args):
        return None
    refs = {}  # ir.Value -> its Ref (names unique per value: what the rules compare)

    def ref_of(value):
        r = refs.get(value)
        if r is None:
            r = refs[value] = Ref(f"v{len(refs)}", *attrs.tensor_meta(value.type))
        return r

    zero = {ref_of(a).name for a, p in zip(args[len(args) - len(present):], present) if not p}
    dropped, renames, fills, returned = [], [], [], None
    renamed = {}  # name of a renamed op's result -> the name of the value standing for it
    for index, operation in enumerate(block.operations):
        operation = operation.operation
        if not any(v in refs and refs[v].name in zero for v in operation.operands):
            continue
        name = operation.name
        if name == "func.return":
            returned = [v in refs and refs[v].name in zero for v in operation.operands]
            continue
        if name in (LIST_OP, UNLIST_OP) or name in sizes.PYTHON or name not in OPS or OPS[name].returns_sequence:
            return None
        op, args_of = decode_op(operation, ref_of)
        outputs = [ref_of(r) for r in operation.results]
        zero_params = {k for k, v in args_of.items() if any(r.name in zero for r in _refs(v))}
        if _all_zero(op.name, args_of, zero_params, zero) or zero_params & set(ZERO_IF_ANY.get(op.name, ())):
            zero.update(o.name for o in outputs)
            dropped.append((index, operation))
            continue
        other = _identity_operand(op.name, args_of, zero_params, outputs)
        if other is not None:
            # (x + 0 where x is itself a renamed y + 0: y, not the op about to be erased)
            target = renamed.get(other.name, other.name)
            renamed[outputs[0].name] = target
            renames.append((index, operation, target))
            continue
        fills += [(operation, v) for v in operation.operands if v in refs and refs[v].name in zero]
    if returned is None:
        returned = [False] * len(list(block.operations)[-1].operands)
    ret = list(block.operations)[-1].operation
    fills += [(ret, v) for v, z, i in zip(ret.operands, returned, range(len(returned))) if z and i in keep]
    values = {ref.name: v for v, ref in refs.items()}
    names = _zero_names(block, [v for _, v in fills])
    if names is None:
        return None
    # (from here on the func changes: nothing above returned None after an edit)
    made = {}
    for user, v in fills:  # a zero where an op no rule covers reads one (before its first reader)
        z = made.get(v)
        if z is None:
            shape, dtype, device = attrs.tensor_meta(v.type)
            zref, emitted = Ref(names[v], shape, dtype, device), {}
            with ir.InsertionPoint(user), func_op.location:  # (the location emission gives its constants)
                emit_symbol(OPS["thunder.full"], _zeros_args(shape, dtype, device), [zref], emitted, None)
            z = made[v] = emitted[zref.name]
        user.replace_uses_of_with(v, z)
    for index, operation, target in renames:  # x + 0: x
        operation.results[0].replace_all_uses_with(values[target])
        dropped.append((index, operation))
    kept = [i for i, z in enumerate(returned) if not z or i in keep]
    results = [ret.operands[i] for i in kept]
    with ir.InsertionPoint(ret), ret.location:
        func.ReturnOp(results)
    ret.erase()
    func_op.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get([a.type for a in args], [v.type for v in results]))
    for _, operation in sorted(dropped, key=lambda d: -d[0]):  # (each after the ops reading it)
        operation.erase()
    return kept


def _zero_names(block, zeros):
    """value -> the name of the zeros made for it (`<its name>_zeros`, made unique among the
    func's names as specialize() does), or None where a value has no name."""
    if not zeros:
        return {}
    owners = {}
    for a in block.arguments:
        owners[a] = (loc_names(a.location) or [None])[0]
    taken = {n for n in owners.values() if n}
    for operation in block.operations:
        found = loc_names(operation.location)
        taken.update(found)
        for i, r in enumerate(operation.results):
            owners[r] = found[i] if i < len(found) else None
    names = {}
    for v in zeros:
        base = owners.get(v)
        if not base or not base.isidentifier():
            return None
        if v not in names:
            names[v] = _zeros_name(base, taken)
    return names
