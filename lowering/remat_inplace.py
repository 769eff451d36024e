"""thunder-remat's rewrite of @forward and @backward in place (lowering/remat.py), instead of
lifting both to traces and emitting them again: @forward only returns another set of saved
values; @backward's ops are moved as they are into a func with the new arguments, and the
recomputed forward ops are emitted before their first reader. The result is the module that
lifting and emitting gives (same ops, names, locations and order, constants before their first
user as emission puts them), at a fraction of the cost: most of @backward is not decoded.

It applies where lifting would keep every value's name (`kept_names`); remat.py lifts and
emits otherwise.
"""
from thunder.dialects import attrs, sizes
from thunder.dialects.definitions import LIST_OP, UNLIST_OP
from thunder.dialects.emit import WIDENED, emit_symbol, loc_names, location
from thunder.dialects.mlir import func, ir


def kept_names(func_op, skip=0):
    """The names of func_op's values (its arguments but the first skip, its ops' results) where
    lifting it and emitting it again keeps every name its location has and every op as it is:
    unique identifiers, no list or size ops (whose values lifting reads otherwise), no op marked
    thunder.widened; None elsewhere."""
    block = func_op.regions[0].blocks[0]
    names = []
    for a in block.arguments:
        if sizes.is_dynamic_type(a.type):
            return None
        names += loc_names(a.location)[:1] or [None]
    for op in block.operations:
        name = op.operation.name
        if name in attrs.CONSTANT_OPS or name == "func.return":
            continue
        if name in (LIST_OP, UNLIST_OP) or name in sizes.PYTHON or WIDENED in op.attributes:
            return None  # (thunder.widened: an attribute that lifting drops)
        results = op.operation.results
        if len(results):
            got = loc_names(op.location)
            if len(got) != len(results):
                return None
            names += got
    if len(set(names)) != len(names) or not all([n and n.isidentifier() for n in names]):
        return None
    return set(names[skip:])


class _Constants:
    """Moves the constants of a function's ops before their first user, in operand order, as
    emission creates them (cse and canonicalize then treat the function as they would the
    emitted one)."""

    def __init__(self, ops):
        # (the func's constants by their result, found once: asking each operand of each op for
        # its owner makes an object per operand)
        self.of = {}
        for op in ops:
            if op.operation.name in attrs.CONSTANT_OPS:
                self.of[op.operation.results[0]] = op.operation
        self.placed = set()

    def before(self, op, anchor):
        of, placed = self.of, self.placed
        for v in op.operands:
            c = of.get(v)
            if c is not None and c not in placed:
                placed.add(c)
                c.move_before(anchor)


def producers(recompute):
    """name -> the index of the op of recompute (BoundSymbols) that computes it."""
    return {o.name: i for i, b in enumerate(recompute) for o in b.outputs}


def unplaced(names, recompute, producer, placed):
    """The indices, in forward order, of the ops of recompute not placed yet that compute names
    or what those ops read; placed gets them. (iterative: a checkpointed model recomputes long
    chains)"""
    stack = [producer[n] for n in names if n in producer and producer[n] not in placed]
    ready = []
    while stack:
        i = stack.pop()
        if i in placed:
            continue
        placed.add(i)
        ready.append(i)
        stack.extend(producer[r.name] for r in recompute[i].tensor_args()
                     if r.name in producer and producer[r.name] not in placed)
    return sorted(ready)


def rewrite_forward(fwd_op, values, outputs, clones):
    """@forward returning outputs (Refs; values: name -> ir.Value), after clones (BoundSymbols of
    copies, first in the body), with the attributes emission gives it (new ops at its location,
    as emission under it)."""
    block = fwd_op.regions[0].blocks[0]
    ops = list(block.operations)
    constants = _Constants(ops)
    for op in ops:  # (the constants in the order emission puts them)
        constants.before(op, op)
        if op.operation.name == "func.return":
            ret = op
    values = dict(values)
    with ir.InsertionPoint(block.operations[0]), fwd_op.location:
        for c in clones:
            emit_symbol(c.op, c.args, c.outputs, values, c.location)
    with ir.InsertionPoint(ret), fwd_op.location:
        func.ReturnOp([values[r.name] for r in outputs])
    ret.operation.erase()
    for k in list(fwd_op.attributes):
        if k not in ("sym_name", "function_type", "arg_attrs", "thunder.num_outputs", "thunder.mutated_inputs"):
            del fwd_op.attributes[k]
    inputs = ir.FunctionType(ir.TypeAttr(fwd_op.attributes["function_type"]).value).inputs
    results = [values[r.name].type for r in outputs]
    fwd_op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))


def rewrite_backward(bwd_op, old_saved, saved, recompute, loc):
    """@backward taking saved (Refs of @forward) then its cotangents, where it took old_saved
    (Refs, one per argument) then them: each forward op of recompute (BoundSymbols, in forward
    order) emitted right before the first op that reads its result (remat.py's _just_in_time).
    loc: the location of the new func and ops (as emission under it: @forward's).
    Returns the new func (inserted before bwd_op, which is erased)."""
    old_block = bwd_op.regions[0].blocks[0]
    old_args = list(old_block.arguments)
    n_saved = len(old_saved)
    cotangents = old_args[n_saved:]
    ftype = ir.FunctionType(ir.TypeAttr(bwd_op.attributes["function_type"]).value)
    with ir.InsertionPoint(bwd_op), loc:
        arg_types = [attrs.tensor_type(r.shape, r.dtype, r.device, False) for r in saved]
        arg_types += [a.type for a in cotangents]
        f = func.FuncOp("backward", (arg_types, list(ftype.results)))
        for k in ("thunder.grad_of", "thunder.cotangent_for"):
            f.attributes[k] = bwd_op.attributes[k]
        block = f.add_entry_block([location(r.name) for r in saved]
                                  + [location(loc_names(a.location)[0]) for a in cotangents])
    new_args = list(block.arguments)
    values = {r.name: a for r, a in zip(saved, new_args)}
    producer = producers(recompute)
    wanted = {a: old_saved[i].name for i, a in enumerate(old_args[:n_saved])}  # (old argument -> forward name)
    placed = set()

    def place(names, anchor):
        todo = unplaced(names, recompute, producer, placed) if names else ()
        if not todo:
            return  # (most ops read no saved value: no insertion point to enter)
        with ir.InsertionPoint(anchor), loc:
            for i in todo:
                b = recompute[i]
                emit_symbol(b.op, b.args, b.outputs, values, b.location)

    ops = list(old_block.operations)
    constants = _Constants(ops)
    ret = ops[-1]
    # the old return first (the anchor the others are moved before), its operands fixed below
    ret.operation.detach_from_parent()
    ir.InsertionPoint(block).insert(ret.operation)
    ret.location = loc
    for op in ops:
        if op.operation.name in attrs.CONSTANT_OPS:
            continue
        place([wanted[v] for v in op.operands if v in wanted], ret)
        if op is ret:
            break
        constants.before(op, ret)
        op.operation.move_before(ret)
    for i, a in enumerate(old_args):
        if i < n_saved:
            if next(iter(a.uses), None) is not None:
                a.replace_all_uses_with(values[old_saved[i].name])
        else:
            a.replace_all_uses_with(new_args[len(saved) + i - n_saved])
    bwd_op.erase()
    return f
