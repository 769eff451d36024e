"""Reshapes sunk below the elementwise ops that use them, before thunder-fuse partitions a func.

    y = reshape(x, S); z = add(g, y)     ->     g2 = reshape(g, shape(x)); z2 = add(g2, x); z = reshape(z2, S)

where y's only use is the elementwise op, the op's other tensor operands have y's shape (no
broadcast) and none of them is computed by an op of the func that a fusion region could hold
(they are the func's arguments or results of torch calls: g's reshape is then a view torch makes
before the kernel, free for a contiguous g, and z's a view after it). A loss's backward computes the
logits' gradient as [rows, C] and adds the logits' own cotangent in their [B, T, C] shape through
such a reshape: in the kernel the reshape splitting the rows keeps it from tiling by rows; sunk,
the add joins the [rows, C] elementwise pass and torch views its result as [B, T, C]."""
from thunder.dialects.mlir import ir
from thunder.lowering.executors import is_number
from thunder.lowering.layout.rule import made_in_region
from thunder.lowering.layout.values import RESHAPES, ltorch_elementwise, ranked, reshape, retyped, shape
from thunder.ops import prims


def _elementwise(operation):
    if operation.name.startswith("thunder."):
        return operation.name.removeprefix("thunder.") in prims.ELEMENTWISE
    return ltorch_elementwise(operation)


def sink_reshapes(block, fusable):
    """Sink each such reshape in the block once; fusable(op) says whether an op could be in a
    region (its results then are no operands to view)."""
    for reshape_op in [o.operation for o in block.operations if o.operation.name in RESHAPES]:
        uses = list(reshape_op.results[0].uses)
        if len(uses) != 1:
            continue
        user = uses[0].owner
        source = reshape_op.operands[0]
        if not ranked(source) or not _elementwise(user):
            continue
        out_shape = shape(reshape_op.results[0])
        others = [v for v in user.operands if v != reshape_op.results[0] and not is_number(v)]
        if any(not ranked(v) or shape(v) != out_shape for v in others):
            continue
        if any(made_in_region(v, fusable) for v in others):
            continue
        source_shape = shape(source)
        with ir.InsertionPoint(user):
            operands = []
            for v in user.operands:
                if v == reshape_op.results[0]:
                    operands.append(source)
                elif is_number(v):
                    operands.append(v)
                else:
                    operands.append(reshape(v, source_shape, user.location))
            back = reshape(retyped(user, operands, source_shape), shape(user.results[0]), user.location)
        user.results[0].replace_all_uses_with(back)
        user.erase()
        reshape_op.erase()
