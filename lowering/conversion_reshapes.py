"""Reshapes moved across dtype conversions, before thunder-fuse partitions a func, so that they
become views torch makes outside a kernel instead of a reshape splitting the rows inside it.

A loss under autocast upcasts the bf16 logits, then flattens them (transformers' ForCausalLMLoss:
`logits.float().view(-1, vocab)`); its backward computes the gradient as [rows, C] and casts it
back to bf16 in the logits' [B, T, C] shape. With the reshape between the conversion and the row
reductions (or between the elementwise pass and the conversion), the loss region does not tile by
rows and, at a realistic vocabulary, stays unfused torch calls with f32 copies of the logits.

- hoisted: `y = convert(x); z = reshape(y, S)` -> `x2 = reshape(x, S); z = convert(x2)`, where y's
  only use is the reshape and x is no value a fusion region could compute (an argument or a torch
  call's result, such as the head's matmul): x's reshape is a view before the kernel, which reads
  the bf16 logits and converts per element;
- sunk: `y = reshape(x, S); z = convert(y)` -> `z2 = convert(x); z = reshape(z2, S)`, where y's
  only use is the conversion and x is computed by an op a region could hold: the conversion
  joins x's region and z's reshape is a view after the kernel.

A conversion here is an op that may return its input (x.float(), x.to(dtype), ...: registry's
returns_input) with one tensor operand of its result's shape and no device or memory format."""
from thunder.dialects.mlir import ir
from thunder.lowering.sink_reshapes import RESHAPES, _reshape
from thunder.ops import registry


def _is_conversion(operation):
    op = registry.OPS.get(operation.name)
    if op is None or not op.returns_input or len(operation.operands) != 1 or len(operation.results) != 1:
        return False
    if any(k in ("device", "memory_format") and not isinstance(operation.attributes[k], ir.UnitAttr)
           for k in operation.attributes):  # (unit: None)
        return False
    source, result = operation.operands[0].type, operation.results[0].type
    return (isinstance(source, ir.RankedTensorType) and isinstance(result, ir.RankedTensorType)
            and ir.RankedTensorType(source).shape == ir.RankedTensorType(result).shape)


def _only_use(value):
    uses = list(value.uses)
    return uses[0].owner if len(uses) == 1 else None


def _computed_in_region(value, fusable):
    return not isinstance(value.owner, ir.Block) and fusable(value.owner)


def _converted(conversion, value, loc):
    """conversion applied to value (of another shape): a new op, before the insertion point."""
    r = ir.RankedTensorType(conversion.results[0].type)
    shape = ir.RankedTensorType(value.type).shape
    return ir.Operation.create(conversion.name, results=[ir.RankedTensorType.get(shape, r.element_type, r.encoding)],
                               operands=[value], attributes={k: conversion.attributes[k] for k in conversion.attributes},
                               loc=loc).results[0]


def move_reshapes_across_conversions(block, fusable):
    """Each such reshape in the block moved once; fusable(op) says whether an op could be in a
    region."""
    for op in [o.operation for o in block.operations if _is_conversion(o.operation)]:
        # hoist the reshape of its result above it
        reshape = _only_use(op.results[0])
        source = op.operands[0]
        if reshape is None or reshape.name not in RESHAPES or _computed_in_region(source, fusable):
            continue
        out = ir.RankedTensorType(reshape.results[0].type)
        with ir.InsertionPoint(reshape):
            new = _converted(op, _reshape(source, out.shape, reshape.location), op.location)
        reshape.results[0].replace_all_uses_with(new)
        reshape.erase()
        op.erase()
    for op in [o.operation for o in block.operations if o.operation.name in RESHAPES]:
        # sink it below the conversion of its result
        conversion = _only_use(op.results[0])
        source = op.operands[0]
        if (conversion is None or not _is_conversion(conversion) or not isinstance(source.type, ir.RankedTensorType)
                or not _computed_in_region(source, fusable)):
            continue
        shape = ir.RankedTensorType(op.results[0].type).shape
        with ir.InsertionPoint(conversion):
            new = _reshape(_converted(conversion, source, conversion.location), shape, op.location)
        conversion.results[0].replace_all_uses_with(new)
        conversion.erase()
        op.erase()
