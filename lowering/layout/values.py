"""The helpers the layout modules share: which ops are transposes and reshapes, shapes,
permutations, and building the layout ops and the retyped ops a sink makes."""
from thunder.dialects.mlir import ir
from thunder.ops import registry

TRANSPOSES = {"ltorch.transpose", "ltorch.permute", "thunder.transpose"}
RESHAPES = {"ltorch.reshape", "ltorch.view", "thunder.reshape"}


def shape(value):
    return list(ir.RankedTensorType(value.type).shape)


def ranked(value):
    return isinstance(value.type, ir.RankedTensorType)


def permutation(operation):
    """The transpose's permutation of its operand's dims, from its operand and result shapes
    and attributes; None where it cannot be read."""
    attrs = operation.attributes
    rank = len(shape(operation.operands[0]))
    if rank == 0:
        return None  # (a 0-d tensor's transpose is itself: no layout to change)
    try:
        for name in ("permutation", "dims"):
            if name in attrs:
                return [d % rank for d in ir.DenseI64ArrayAttr(attrs[name])]
        d0, d1 = (ir.IntegerAttr(attrs[k]).value % rank for k in ("dim0", "dim1"))
    except (KeyError, ValueError, TypeError):
        return None
    perm = list(range(rank))
    perm[d0], perm[d1] = d1, d0
    return perm


def ltorch_elementwise(operation):
    """Whether an ltorch op is elementwise with one tensor result (the registry's knowledge)."""
    op = registry.OPS.get(operation.name)
    return op is not None and op.elementwise and not op.returns_sequence and len(operation.results) == 1


def retyped(operation, operands, new_shape, attributes=None):
    """A copy of a one-result op (at the insertion point) reading operands, its result of
    new_shape (same element type); attributes: its own unless given."""
    r = ir.RankedTensorType(operation.results[0].type)
    if attributes is None:
        attributes = {k: operation.attributes[k] for k in operation.attributes}
    return ir.Operation.create(operation.name, results=[ir.RankedTensorType.get(new_shape, r.element_type, r.encoding)],
                               operands=operands, attributes=attributes, loc=operation.location).results[0]


def _layout_op(name, value, new_shape, attribute, ints, loc):
    t = ir.RankedTensorType(value.type)
    return ir.Operation.create(name, results=[ir.RankedTensorType.get(new_shape, t.element_type, t.encoding)],
                               operands=[value], attributes={attribute: ir.DenseI64ArrayAttr.get(list(ints))},
                               loc=loc).results[0]


def transpose(value, perm, loc):
    """thunder.transpose of value by perm."""
    dims = shape(value)
    return _layout_op("thunder.transpose", value, [dims[p] for p in perm], "permutation", perm, loc)


def reshape(value, new_shape, loc):
    """thunder.reshape of value to new_shape."""
    return _layout_op("thunder.reshape", value, new_shape, "shape", new_shape, loc)
