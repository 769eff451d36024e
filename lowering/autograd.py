"""thunder-autograd: split func @computation into func @forward and func @backward.

@forward(inputs) -> (outputs..., saved...)     the original ops; also returns what backward needs
@backward(saved..., cotangents...) -> grads     VJP rules run in reverse order, one grad per
                                                input that requires grad

Which inputs require grad comes from the `thunder.requires_grad` argument attribute. Ops with a
VJP rule are differentiated directly; the others are first decomposed (thunder-decompose) until
only ops with rules remain. Integer and bool values never get gradients.
"""
from dataclasses import dataclass

import torch

from thunder.core import trace as tracing
from thunder.core.proxies import TensorProxy, proxy_of_meta, to_refs
from thunder.core.trace import BoundSymbol, Ref, TraceCtx
from thunder.dialects import attrs
from thunder.dialects.definitions import context, decode_op
from thunder.dialects.emit import emit_into, emit_symbol, find_func, mutated_inputs
from thunder.dialects.sizes import unread_symbols
from thunder.dialects.symbolic_lift import LostExpression, same_recording
from thunder.dialects.lift import lift
from thunder.dialects.mlir import func, ir
from thunder.ops import elementwise, fallback, registry
from thunder.ops.vjp import complex_numbers
from thunder.lowering.decompose import decompose_module
from thunder.lowering.remat_inplace import kept_names, rewrite_forward
from thunder.lowering.vjp_reuse import VjpReuse

REQUIRES_GRAD = "thunder.requires_grad"
IN_PLACE = True  # off: @forward is emitted from the lifted trace (tests compare the two)



def differentiable_dtype(dtype):
    return dtype.is_floating_point or dtype.is_complex


@dataclass
class Split:
    forward: TraceCtx
    forward_outputs: list  # Refs: the outputs, the saved values, then new values of mutated inputs
    num_outputs: int
    backward: TraceCtx  # inputs: saved values, then cotangents
    backward_outputs: list  # Ref or None per input of the forward
    cotangent_for: list  # indices of the forward outputs that receive a cotangent
    lifted_forward: object = None  # where @forward was made in place: what lifting it gives (a Lifted)


def split_forward_backward(lifted, requires_grad, n_mutated=0, guards=None) -> Split:
    """n_mutated: the last results are new values of inputs updated in place (copied back by
    the forward program, not differentiated). guards: for a trace with dynamic sizes, where the
    decisions the rules take on its symbols are recorded (dialects/symbolic_lift.py)."""
    ctx = lifted.ctx
    outputs = lifted.outputs[:len(lifted.outputs) - n_mutated]
    mutated = lifted.outputs[len(outputs):]
    needs = needing_grad(ctx.symbols, {r.name for r, rg in zip(ctx.inputs, requires_grad)
                                       if rg and differentiable_dtype(r.dtype)})
    use_training_forms(ctx.symbols, needs, ctx.new_name)
    forward_names = {r.name for r in ctx.inputs} | {o.name for b in ctx.symbols for o in b.outputs}
    bctx = TraceCtx(prefix="b")
    if guards is not None:
        bctx.sym_guards, bctx.sym_strict = guards, True
    for n in forward_names:
        bctx.new_name(n)  # reserve: backward proxies of forward values keep their names
    fwd = forward_proxies()
    grads = {}
    cotangents, cotangent_for = [], []
    with tracing.tracing(bctx):
        # one cotangent per differentiable output; a value returned twice gets both
        for i, r in enumerate(outputs):
            if r.name in needs:
                g = TensorProxy(r.shape, r.dtype, r.device, name=bctx.new_name(f"g_{r.name}"))
                cotangents.append(g)
                cotangent_for.append(i)
                _accumulate(grads, r, g)

        backpropagate(ctx.symbols, needs, grads, fwd)
        backward_outputs = []
        for r, rg in zip(ctx.inputs, requires_grad):
            g = grads.get(r.name) if rg else None
            backward_outputs.append(tracing.ref(g) if g is not None else None)

    reads = _dce(bctx, backward_outputs)
    # what backward reads from forward is saved
    used = []
    seen = set()
    for refs in reads:
        for r in refs:
            if r.name in forward_names and r.name not in seen:
                seen.add(r.name)
                used.append(r)
    for r in backward_outputs:
        if r is not None and r.name in forward_names and r.name not in seen:
            seen.add(r.name)
            used.append(r)
    bctx.inputs = used + [tracing.ref(g) for g in cotangents]
    return Split(ctx, list(outputs) + used + list(mutated), len(outputs), bctx, backward_outputs, cotangent_for)


def needing_grad(symbols, names):
    """The names of the values that need a gradient: names (inputs) and what symbols compute from
    them through differentiable ops."""
    needs = set(names)
    for bsym in symbols:
        if not bsym.op.differentiable:
            continue  # no gradient flows through these (detach is also what no_grad regions record)
        if not needs.isdisjoint([r.name for r in bsym.tensor_args()]):  # (no generator: run per op)
            for o in bsym.outputs:
                if differentiable_dtype(o.dtype):
                    needs.add(o.name)
    return needs


def forward_proxies():
    """fwd(ref): one proxy per forward value, named as it (what backpropagate reads them with)."""
    proxies = {}

    def fwd(ref):
        p = proxies.get(ref.name)
        if p is None:
            p = proxies[ref.name] = proxy_of_meta(ref.shape, ref.dtype, ref.device, name=ref.name)
        return p

    return fwd


def _accumulate(grads, ref, g, reuse=None):
    """reuse: a VjpReuse, to replay the sum of two cotangents as the rules' recordings are."""
    if g is None:
        return
    prev = grads.get(ref.name)
    if prev is None:
        grads[ref.name] = g
    else:
        grads[ref.name] = elementwise.add(prev, g) if reuse is None else reuse.call(elementwise.add, prev, g)


def backpropagate(symbols, needs, grads, fwd, decompose=False, reuse=None):
    """Record, in the current trace, the VJP rules of symbols in reverse order. grads: value name
    -> cotangent proxy, the outputs' cotangents on entry, then accumulated for every value in
    needs; fwd(ref): the proxy standing for a forward value. decompose: an op without a VJP rule
    is decomposed in the current trace (its decomposition recorded there, a recomputation) and
    its decomposition differentiated (thunder-autograd decomposes the whole program first).
    reuse: the rules' templates (lowering/vjp_reuse.py), shared with the recursive calls."""
    if reuse is None:
        reuse = VjpReuse(tracing.current())

    def as_proxies(v):
        if isinstance(v, Ref):
            return fwd(v)
        if isinstance(v, tuple):
            return tuple(as_proxies(x) for x in v)
        return v

    for bsym in reversed(symbols):
        if not any(o.name in grads for o in bsym.outputs):
            continue
        op = bsym.op
        if op.vjp_rule is None and decompose and op.decomposition is not None:
            _backpropagate_decomposition(bsym, needs, grads, fwd, as_proxies, reuse)
            continue
        if op.vjp_rule is None:
            raise NotImplementedError(f"thunder-autograd: {op.qualname} has no VJP rule and no decomposition")
        out_proxies = [fwd(o) for o in bsym.outputs]
        gs = [grads.get(o.name) for o in bsym.outputs]
        if op.returns_sequence:
            g, out = tuple(gs), tuple(out_proxies)
        else:
            g, out = gs[0], out_proxies[0]
        conjugated = _conjugated(bsym)
        if conjugated:
            g = _conj(g)
        needing = {k: _needing(v, needs) for k, v in bsym.args.items()}
        result = reuse.apply(op, g, out, {k: as_proxies(v) for k, v in bsym.args.items()}, needing)
        if conjugated:
            result = {k: _conj(v) for k, v in result.items()}
        for p in op.params:
            v = bsym.args[p.name]
            got = result.get(p.name)
            if isinstance(v, Ref) and v.name in needs:
                _accumulate(grads, v, got, reuse)
            elif isinstance(v, tuple) and got is not None:
                for x, gx in zip(v, got):
                    if isinstance(x, Ref) and x.name in needs:
                        _accumulate(grads, x, gx, reuse)


def _needing(v, needs):
    """Whether an op's argument v needs a gradient (a tuple of flags for a tensor list)."""
    if isinstance(v, tuple):
        return tuple(isinstance(x, Ref) and x.name in needs for x in v)
    return isinstance(v, Ref) and v.name in needs


def _conjugated(bsym):
    """Whether bsym's rule runs on conjugated cotangents, its gradients conjugated
    (thunder/ops/vjp/complex_numbers.py): an op of complex tensors with a rule for real ones.
    An op on complex tensors whose rule would give other than torch's gradient is refused."""
    if not any(getattr(r.dtype, "is_complex", False) for r in (*bsym.tensor_args(), *bsym.outputs)):
        return False
    name = bsym.op.qualname
    if name in complex_numbers.AS_IS:
        return False
    if name not in complex_numbers.CONJUGATED:
        where = f" at {bsym.location[0]}:{bsym.location[1]}" if bsym.location else ""
        raise NotImplementedError(
            f"thunder: the gradient of {bsym.op.torch_name or name} with complex tensors{where} is not supported "
            "(only ops holomorphic in their complex inputs, shape ops and casts have torch's complex gradient here). "
            "Workaround: compute it from the real and imaginary parts (torch.view_as_real), or outside thunder.jit")
    return True


def _conj(v):
    """The complex conjugate of a cotangent or gradient (tensors of other dtypes as they are)."""
    if isinstance(v, tuple):
        return tuple(_conj(x) for x in v)
    if isinstance(v, TensorProxy) and v.dtype.is_complex:
        return fallback.call(torch.conj_physical, v)
    return v


def _backpropagate_decomposition(bsym, needs, grads, fwd, as_proxies, reuse):
    ctx = tracing.current()
    start = len(ctx.symbols)
    out = bsym.op.decomposition(**{k: as_proxies(v) for k, v in bsym.args.items()})
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    symbols = ctx.symbols[start:]
    for o, new in zip(bsym.outputs, outs):
        if o.name in grads and isinstance(new, TensorProxy):
            _accumulate(grads, tracing.ref(new), grads[o.name], reuse)
    inner = needing_grad(symbols, {r.name for r in bsym.tensor_args() if r.name in needs})
    backpropagate(symbols, inner, grads, fwd, decompose=True, reuse=reuse)


def use_training_forms(symbols, needs, new_name):
    """Replace each differentiated op that has a training form by that form (its first result
    keeps the op's name; the others, what its backward reads, get names from new_name())."""
    for i, bsym in enumerate(symbols):
        form = bsym.op.training_form
        if form is None or not any(r.name in needs for r in bsym.tensor_args()):
            continue
        proxies = {k: _proxies(v) for k, v in bsym.args.items()}
        replaced = form(**proxies)
        if replaced is None:
            continue
        op, args = replaced
        with tracing.tracing(TraceCtx(prefix="_")):
            metas = op.meta(**args)
        extra = [Ref(new_name(), tuple(m.shape), m.dtype, m.device) for m in metas[1:]]
        args = {k: to_refs(v) for k, v in args.items()}  # (the proxies carry the Refs' names)
        symbols[i] = tracing.BoundSymbol(op, args, [bsym.outputs[0], *extra], bsym.location)


def _proxies(v):
    if isinstance(v, Ref):
        return TensorProxy(v.shape, v.dtype, v.device, name=v.name)
    return tuple(_proxies(x) for x in v) if isinstance(v, tuple) else v


def _dce(ctx, outputs):
    """Drop backward symbols whose results nothing needs (VJP rules compute every cotangent, also
    for inputs that do not require grad). Returns the Refs each symbol kept reads, in order
    (tensor_args, read once per symbol)."""
    live = {r.name for r in outputs if r is not None}
    kept, reads = [], []
    for bsym in reversed(ctx.symbols):
        if not live.isdisjoint([o.name for o in bsym.outputs]):
            refs = bsym.tensor_args()
            kept.append(bsym)
            reads.append(refs)
            live.update([r.name for r in refs])
    ctx.symbols = kept[::-1]
    return reads[::-1]


def requires_grad_flags(func_op):
    flags = []
    arg_attrs = func_op.attributes["arg_attrs"] if "arg_attrs" in func_op.attributes else None
    n = len(func_op.regions[0].blocks[0].arguments)
    for i in range(n):
        d = ir.DictAttr(arg_attrs[i]) if arg_attrs is not None else None
        flags.append(d is not None and REQUIRES_GRAD in d)
    return flags


def autograd_module(module_op):
    """The pass: replace @computation by @forward and @backward."""
    keep = {op.name for op in registry.OPS.values() if op.dialect == "ltorch" and op.vjp_rule is not None}
    keep.add("detach")
    decompose_module(module_op, keep=keep)
    comp = find_func(module_op, "computation")
    if comp is None:
        raise ValueError("thunder-autograd needs a func @computation")
    flags = requires_grad_flags(comp)
    n_mutated = len(mutated_inputs(comp))
    lifted = lift(comp)
    symbolic = lifted.symbolic  # (dynamic sizes: the rules compute with the func's symbols)
    if symbolic is not None:
        ints = symbolic.int_symbol_arguments()
        flags = [f for f, a in zip(flags, comp.regions[0].blocks[0].arguments) if a not in ints]
    # (where lifting keeps every name, @computation becomes @forward in place, as emitting it
    # again would give it: lowering/remat_inplace.py)
    in_place = IN_PLACE and symbolic is None and kept_names(comp) is not None
    lifted_symbols = list(lifted.ctx.symbols)
    with tracing.tracing(_guarding(symbolic)):
        split = split_forward_backward(lifted, flags, n_mutated, symbolic.guards if symbolic is not None else None)
    if symbolic is not None:
        _check_symbolic(comp, split, symbolic, flags, n_mutated)
    # (a training form keeps the op's results: the first, and the others after it)
    in_place = in_place and all(new is old or old.outputs and [o.name for o in old.outputs] == [
        o.name for o in new.outputs[:len(old.outputs)]] for old, new in zip(lifted_symbols, split.forward.symbols))
    block = module_op.regions[0].blocks[0]
    if in_place and block.operations[0].operation != comp.operation:
        comp.move_before(block.operations[0])
    with ir.InsertionPoint.at_block_begin(block), comp.location:
        fwd_attrs = {"thunder.num_outputs": attrs.i64(split.num_outputs)}
        if "thunder.mutated_inputs" in comp.attributes:
            fwd_attrs["thunder.mutated_inputs"] = comp.attributes["thunder.mutated_inputs"]
        if in_place:
            _forward_in_place(comp, lifted, lifted_symbols, split, _arg_attrs(flags), fwd_attrs)
        else:
            forward = emit_into(split.forward, split.forward_outputs, "forward",
                                arg_attrs=_arg_attrs(flags + [False] * len(symbolic.int_symbols))
                                if symbolic is not None else _arg_attrs(flags),
                                attributes=fwd_attrs, **_symbolic_emission(symbolic, symbolic and symbolic.int_symbols))
    after = [o.operation for o in block.operations]
    at = after.index(comp.operation) + 1 if in_place else 1
    with (ir.InsertionPoint(after[at]) if at < len(after) else ir.InsertionPoint(block)), comp.location:
        grad_of = [i for i, r in enumerate(split.backward_outputs) if r is not None]
        backward = emit_into(split.backward, [r for r in split.backward_outputs if r is not None], "backward",
                             attributes={"thunder.grad_of": ir.DenseI64ArrayAttr.get(grad_of),
                                         "thunder.cotangent_for": ir.DenseI64ArrayAttr.get(split.cotangent_for)},
                             **_symbolic_emission(symbolic, symbolic and unread_symbols(
                                 split.backward, [r for r in split.backward_outputs if r is not None],
                                 list(symbolic.symbols))))
    if symbolic is not None:
        for f in (forward, backward):
            symbolic.write_guards(f)
    if not in_place:
        comp.erase()
    return split


def _check_symbolic(comp, split, symbolic, flags, n_mutated):
    """The split run again with the symbols at other values must record the same program: a
    size a rule made a plain number (Python's C code reads an int's value: `range(T)`) shows as
    a difference, and the pass refuses rather than emit a program that holds at one size."""
    other = lift(comp, symbolic.other_values())
    with tracing.tracing(_guarding(other.symbolic, {})):
        again = split_forward_backward(other, flags, n_mutated, {})

    def parts(s):
        return (s.forward.symbols, s.forward_outputs, s.backward.symbols, s.backward.inputs, s.backward_outputs)

    if not same_recording(parts(split), parts(again)):
        raise LostExpression("thunder-autograd: a VJP rule or decomposition computes a size of this trace as a "
                             "plain number (the backward recorded at other sizes differs)")


def _guarding(symbolic, guards=None):
    """The trace in which training forms are chosen: for dynamic sizes, one that records the
    decisions taken on the symbols (a form's conditions on the shapes)."""
    ctx = TraceCtx(prefix="_")
    if symbolic is not None:
        ctx.sym_guards, ctx.sym_strict = symbolic.guards if guards is None else guards, True
    return ctx


def _symbolic_emission(symbolic, int_symbols):
    """emit_into's arguments for a func with dynamic sizes: its int symbols' parameters and the
    symbols' values (none for a static one)."""
    if symbolic is None:
        return {}
    return {"int_symbols": list(int_symbols), "symbol_values": dict(symbolic.hints)}


def _forward_in_place(comp, lifted, lifted_symbols, split, arg_attrs, attributes):
    """@computation made @forward: the ops use_training_forms replaced (lifted_symbols: the
    symbols before it) emitted in place of theirs, the results split.forward_outputs."""
    values = lifted.values
    symbols = split.forward.symbols
    for i, (old, new) in enumerate(zip(lifted_symbols, symbols)):
        if new is old:
            continue
        operation = values[old.outputs[0].name].owner.operation
        with ir.InsertionPoint(operation), comp.location:
            made = emit_symbol(new.op, new.args, new.outputs, values, new.location)
        refs = {values[r.name]: r for r in new.tensor_args()}
        # (its arguments as lifting reads them, in the op's order)
        symbols[i] = BoundSymbol(*decode_op(made, refs.__getitem__), new.outputs, new.location, new.widened)
        for r, res in zip(old.outputs, operation.results):
            res.replace_all_uses_with(values[r.name])
        operation.erase()
    loc = comp.location
    for op in comp.regions[0].blocks[0].operations:
        if op.operation.name in attrs.CONSTANT_OPS:
            op.location = loc  # (as emission under it makes them; a decomposition's have its op's)
    rewrite_forward(comp, values, split.forward_outputs, [])
    lifted.outputs = split.forward_outputs
    split.lifted_forward = lifted
    comp.attributes["sym_name"] = ir.StringAttr.get("forward")
    comp.attributes["arg_attrs"] = ir.ArrayAttr.get(arg_attrs)
    for k, v in attributes.items():
        comp.attributes[k] = v


def _arg_attrs(flags):
    return [ir.DictAttr.get({REQUIRES_GRAD: ir.UnitAttr.get()}) if f else ir.DictAttr.get({}) for f in flags]


def autograd_pass(module_op):
    with context():
        autograd_module(module_op)
