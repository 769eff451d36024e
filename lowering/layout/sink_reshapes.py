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
from thunder.ops import prims, registry

RESHAPES = ("thunder.reshape", "ltorch.reshape", "ltorch.view")


def _elementwise(operation):
    op = registry.OPS.get(operation.name)
    if operation.name.startswith("thunder."):
        return operation.name.removeprefix("thunder.") in prims.ELEMENTWISE
    return op is not None and op.elementwise and not op.returns_sequence and len(operation.results) == 1


def _reshape(value, shape, loc):
    t = ir.RankedTensorType(value.type)
    result = ir.RankedTensorType.get(shape, t.element_type, t.encoding)
    return ir.Operation.create("thunder.reshape", results=[result], operands=[value],
                               attributes={"shape": ir.DenseI64ArrayAttr.get(list(shape))}, loc=loc).results[0]


def sink_reshapes(block, fusable):
    """Sink each such reshape in the block once; fusable(op) says whether an op could be in a
    region (its results then are no operands to view)."""
    for reshape in [o.operation for o in block.operations if o.operation.name in RESHAPES]:
        uses = list(reshape.results[0].uses)
        if len(uses) != 1:
            continue
        user = uses[0].owner
        source = reshape.operands[0]
        if not isinstance(source.type, ir.RankedTensorType) or not _elementwise(user):
            continue
        out_type = ir.RankedTensorType(reshape.results[0].type)
        others = [v for v in user.operands if v != reshape.results[0] and not is_number(v)]
        if any(not isinstance(v.type, ir.RankedTensorType) or ir.RankedTensorType(v.type).shape != out_type.shape
               for v in others):
            continue
        if any(not isinstance(v.owner, ir.Block) and fusable(v.owner) for v in others):
            continue
        shape = ir.RankedTensorType(source.type).shape
        with ir.InsertionPoint(user):
            operands = []
            for v in user.operands:
                if v == reshape.results[0]:
                    operands.append(source)
                elif is_number(v):
                    operands.append(v)
                else:
                    operands.append(_reshape(v, shape, user.location))
            r = ir.RankedTensorType(user.results[0].type)
            new = ir.Operation.create(user.name, results=[ir.RankedTensorType.get(shape, r.element_type, r.encoding)],
                                      operands=operands, attributes={k: user.attributes[k] for k in user.attributes},
                                      loc=user.location)
            back = _reshape(new.results[0], r.shape, user.location)
        user.results[0].replace_all_uses_with(back)
        user.erase()
        reshape.erase()
