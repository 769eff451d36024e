"""thunder-remat: choose what @forward saves for @backward with a min-cut.

The joint graph has a node pair v_in -> v_out per forward value, with the value's size in bytes
as capacity; data dependencies are infinite edges; forward inputs and results of ops that must
not be recomputed (matmuls, attention, random ops) hang off the source, values @backward needs
lead to the sink. A minimum cut is the cheapest set of values to save; everything else @backward
needs is recomputed there from them. Cheap elementwise chains are thus recomputed, not saved.
A cast of a forward input (a float32 weight cast to bfloat16 under torch.autocast) is saved
like an expensive op's result, as eager's autocast saves the weight's cast for the backward: recomputing
it would read the whole input again in every backward.
An input that @forward updates in place is saved as a copy of its old value (it costs its size).

Activation checkpointing (ops/checkpoint.py): an op recorded inside a checkpoint region (its
location says so, dialects/emit.py) is recomputed however expensive, and its values cannot be
saved (no capacity limit), so the cut falls on the region's inputs as in eager; random ops keep
their results saved (the backward must see the numbers the forward drew).
"""
from thunder.core import symbols
from thunder.core.trace import BoundSymbol, Ref, TraceCtx
from thunder.dialects import sizes
from thunder.dialects.attrs import CONSTANT_OPS
from thunder.dialects.emit import emit_into, find_func, mutated_inputs
from thunder.dialects.lift import lift
from thunder.dialects.mlir import ir
from thunder.lowering.mincut import FlowGraph
from thunder.lowering.remat_inplace import kept_names, producers, rewrite_backward, rewrite_forward, unplaced
from thunder.ops.registry import OPS

# ops whose results are saved rather than recomputed: expensive, or random
EXPENSIVE = {"matmul", "mm", "bmm", "linear", "addmm", "baddbmm", "einsum", "native_multi_head_attention",
             "scaled_dot_product_attention", "sdpa_flash", "conv1d", "conv2d", "conv_transpose2d", "embedding", "take",
             "index_add", "zeros_index_add", "rmatmul", "bilinear", "convolution",
             "max_pool2d_with_indices", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm",
             "torch_call",  # (the fallback's generic op: its cost is unknown, it may be an LSTM)
             "logsumexp"}  # (a pass with exp over its input, for a result its size / the row's: cross-entropy's rows)
INPUT_COST = 1  # inputs are alive anyway: saving one costs (almost) nothing


def nbytes(ref):
    """Its size in bytes (of a symbolic size: at the symbols' values, the call's where known)."""
    n = ref.dtype.itemsize
    for s in ref.shape:
        n *= symbols.hint(s)
    return n


def recomputable(op):
    return not op.random and op.name not in EXPENSIVE


def _input_cast(bsym, inputs):
    """Whether the op casts a forward input (one tensor argument, one result of its shape in
    another dtype)."""
    ins = bsym.tensor_args()
    if len(ins) != 1 or ins[0].name not in inputs or len(bsym.outputs) != 1:
        return False
    out = bsym.outputs[0]
    return isinstance(out, Ref) and out.dtype != ins[0].dtype and tuple(out.shape) == tuple(ins[0].shape)


def checkpointed(bsym):
    """Recorded inside an activation-checkpoint region (location (file, line, region))."""
    return bsym.location is not None and len(bsym.location) > 2 and not bsym.op.random


def _rename(v, mapping):
    if isinstance(v, Ref):
        return mapping.get(v.name, v)
    if isinstance(v, tuple):
        return tuple(_rename(x, mapping) for x in v)
    return v


def choose_saved(forward_ctx, needed, copied=()):
    """Min-cut: the forward values to save so that `needed` (names) can be computed. copied:
    names of inputs that forward updates in place: saving one saves a copy of it (its size)."""
    if not needed:
        return []
    g = FlowGraph()
    src, sink = "__source__", "__sink__"
    refs = {}
    for r in forward_ctx.inputs:
        refs[r.name] = r
        g.add_edge(src, (r.name, "in"))
        g.add_edge((r.name, "in"), (r.name, "out"), nbytes(r) or 1 if r.name in copied else INPUT_COST)
    inputs = {r.name for r in forward_ctx.inputs}
    for bsym in forward_ctx.symbols:
        ins = bsym.tensor_args()
        region = checkpointed(bsym) and ins
        for o in bsym.outputs:
            refs[o.name] = o
            if region:
                g.add_edge((o.name, "in"), (o.name, "out"))  # (no capacity: never saved)
            else:
                g.add_edge((o.name, "in"), (o.name, "out"), nbytes(o) or 1)
            # (results computed from no input (iota, full) are recomputed where backward reads them:
            # a fused backward computes them in its kernel instead of reading a saved copy)
            if not (region or recomputable(bsym.op)) or (not region and _input_cast(bsym, inputs)):
                g.add_edge(src, (o.name, "in"))
            for r in ins:
                g.add_edge((r.name, "out"), (o.name, "in"))
    for name in needed:
        g.add_edge((name, "out"), sink)
    _, reachable = g.min_cut(src, sink)
    saved = [refs[n] for n in refs if (n, "in") in reachable and (n, "out") not in reachable]
    return saved


def remat_module(module_op, lifted_forward=None):
    """lifted_forward: what lifting @forward gave before cse and canonicalize (thunder-autograd's
    Split.lifted_forward), used where they removed none of its ops."""
    fwd_op, bwd_op = find_func(module_op, "forward"), find_func(module_op, "backward")
    if fwd_op is None or bwd_op is None:
        raise ValueError("thunder-remat needs func @forward and func @backward (run thunder-autograd first)")
    num_outputs = ir.IntegerAttr(fwd_op.attributes["thunder.num_outputs"]).value
    handed = lifted_forward is not None and _lifts(fwd_op, lifted_forward)
    fwd = lifted_forward if handed else lift(fwd_op)
    n_mutated = len(mutated_inputs(fwd_op))
    mutated = fwd.outputs[len(fwd.outputs) - n_mutated:] if n_mutated else []
    old_saved = fwd.outputs[num_outputs:len(fwd.outputs) - n_mutated]
    n_saved = len(old_saved)
    taken = {r.name for r in fwd.ctx.inputs} | {o.name for b in fwd.ctx.symbols for o in b.outputs}
    # (where lifting keeps every name and backward's own names are not forward's, both funcs are
    # rewritten in place, as emitting them again would give them: lowering/remat_inplace.py)
    # (a forward made in place kept every name)
    bwd_names = kept_names(bwd_op, skip=n_saved) if handed or kept_names(fwd_op) is not None else None
    in_place = bwd_names is not None and not bwd_names & taken
    backward_symbolic = None
    if not in_place:
        bsyms, bouts, cotangents, backward_symbolic = _lift_backward(bwd_op, old_saved, taken)

    needed = [r.name for r in old_saved]
    # an input forward updates in place holds its new value once forward returns: backward gets
    # a copy of its old value where it needs one
    updated = {fwd.ctx.inputs[i].name for i in mutated_inputs(fwd_op)}
    saved = choose_saved(fwd.ctx, needed, copied=updated)
    saved_names = {r.name for r in saved}
    fwd_saved, clones = [], []
    for r in saved:
        if r.name in updated:
            copy = Ref(_fresh(r.name, taken), r.shape, r.dtype, r.device)
            clones.append(BoundSymbol(OPS["ltorch.clone"], {"input": r, "memory_format": None}, [copy], None))
            r = copy
        fwd_saved.append(r)
    # recompute, in forward order, what backward needs and was not saved
    need = set(needed) - saved_names
    recompute = []
    for bsym in reversed(fwd.ctx.symbols):
        if not need.isdisjoint([o.name for o in bsym.outputs]):  # (no generator: run per op)
            recompute.append(bsym)
            need.update(r.name for r in bsym.tensor_args() if r.name not in saved_names)
    recompute.reverse()

    outputs = fwd.outputs[:num_outputs] + fwd_saved + mutated
    result = {"saved_before": sum(nbytes(r) for r in old_saved), "saved_after": sum(nbytes(r) for r in saved)}
    if in_place:
        rewrite_forward(fwd_op, fwd.values, outputs, clones)
        rewrite_backward(bwd_op, old_saved, saved, recompute, fwd_op.location)
        return result
    fwd.ctx.symbols[:0] = clones
    new_bwd = TraceCtx()
    new_bwd.inputs = saved + cotangents
    new_bwd.symbols = _just_in_time(recompute, bsyms, bouts)
    attrs_f = {k: fwd_op.attributes[k] for k in ("thunder.num_outputs", "thunder.mutated_inputs", sizes.GUARDS)
               if k in fwd_op.attributes}
    attrs_b = {k: bwd_op.attributes[k] for k in ("thunder.grad_of", "thunder.cotangent_for", sizes.GUARDS)
               if k in bwd_op.attributes}
    arg_attrs = fwd_op.attributes["arg_attrs"] if "arg_attrs" in fwd_op.attributes else None
    dynamic_f, dynamic_b = _symbolic_emission(fwd, backward_symbolic, new_bwd, bouts)
    with ir.InsertionPoint(fwd_op), fwd_op.location:
        emit_into(fwd.ctx, outputs, "forward",
                  arg_attrs=list(arg_attrs) if arg_attrs is not None else None, attributes=attrs_f, **dynamic_f)
        emit_into(new_bwd, bouts, "backward", attributes=attrs_b, **dynamic_b)
    fwd_op.erase()
    bwd_op.erase()
    return result


def _lifts(fwd_op, lifted):
    """Whether lifted is still what lifting fwd_op gives: one op per symbol, as when it was made
    (cse and canonicalize remove ops, or fold them into constants, which lifting reads as
    values; they make none of ours)."""
    ops = fwd_op.regions[0].blocks[0].operations
    n = len([op for op in ops if op.operation.name not in CONSTANT_OPS]) - 1  # (and func.return)
    return n == len(lifted.ctx.symbols)


def _lift_backward(bwd_op, old_saved, taken):
    """(bound symbols, outputs, cotangent Refs) of @backward lifted, its saved values under
    forward's names and its own values renamed where forward has their names (taken gets the
    new names)."""
    bwd = lift(bwd_op)
    n_saved = len(old_saved)
    # backward's names for saved values -> forward's; its own names must not clash with forward's
    mapping = {b.name: f for b, f in zip(bwd.ctx.inputs[:n_saved], old_saved)}
    for bsym in bwd.ctx.symbols:
        for o in bsym.outputs:
            if o.name in taken and o.name not in mapping:
                mapping[o.name] = Ref(_fresh(o.name, taken), o.shape, o.dtype, o.device)
    cotangents = [mapping.get(r.name, r) for r in bwd.ctx.inputs[n_saved:]]
    for r in bwd.ctx.inputs[n_saved:]:
        if r.name in taken:
            new = Ref(_fresh(r.name, taken), r.shape, r.dtype, r.device)
            mapping[r.name] = new
            cotangents[cotangents.index(r)] = new
    bsyms = [type(b)(b.op, {k: _rename(v, mapping) for k, v in b.args.items()},
                     [_rename(o, mapping) for o in b.outputs], b.location) for b in bwd.ctx.symbols]
    return bsyms, [_rename(r, mapping) for r in bwd.outputs], cotangents, bwd.symbolic


def _symbolic_emission(fwd, backward_symbolic, new_bwd, bouts):
    """emit_into's arguments for @forward and @backward with dynamic sizes: their int symbols'
    parameters (@backward's: the symbols no dim of its new inputs is) and the symbols' values."""
    if fwd.symbolic is None and backward_symbolic is None:
        return {}, {}
    values = {**(backward_symbolic.hints if backward_symbolic is not None else {}),
              **(fwd.symbolic.hints if fwd.symbolic is not None else {})}
    forward = {"int_symbols": fwd.symbolic.int_symbols if fwd.symbolic is not None else [], "symbol_values": values}
    backward = {"int_symbols": sizes.unread_symbols(new_bwd, bouts, list(values)), "symbol_values": values}
    return forward, backward


def _just_in_time(recompute, bsyms, outputs):
    """backward's symbols with each recomputed one (in forward order among themselves) right
    before the first that reads it: a recomputed activation lives only around its use, as in
    eager's checkpointing, and thunder-fuse joins it with its consumer without a region that
    spans the whole backward (whose merge checks then walk all of it)."""
    producer = producers(recompute)
    placed, order = set(), []

    def place(refs):
        order.extend(recompute[i] for i in unplaced([r.name for r in refs], recompute, producer, placed))

    for b in bsyms:
        place(b.tensor_args())
        order.append(b)
    place([r for r in outputs if isinstance(r, Ref)])
    return order


def _fresh(name, taken):
    i = 0
    while f"{name}_r{i}" in taken:
        i += 1
    taken.add(f"{name}_r{i}")
    return f"{name}_r{i}"
