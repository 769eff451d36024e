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
from thunder.lowering.layout.rule import made_in_region
from thunder.lowering.layout.values import RESHAPES, ranked, reshape, retyped, shape
from thunder.ops import registry


def _is_conversion(operation):
    op = registry.OPS.get(operation.name)
    if op is None or not op.returns_input or len(operation.operands) != 1 or len(operation.results) != 1:
        return False
    if any(k in ("device", "memory_format") and not isinstance(operation.attributes[k], ir.UnitAttr)
           for k in operation.attributes):  # (unit: None)
        return False
    source, result = operation.operands[0], operation.results[0]
    return ranked(source) and ranked(result) and shape(source) == shape(result)


def _only_use(value):
    uses = list(value.uses)
    return uses[0].owner if len(uses) == 1 else None


def move_reshapes_across_conversions(block, fusable):
    """Each such reshape in the block moved once; fusable(op) says whether an op could be in a
    region."""
    for op in [o.operation for o in block.operations if _is_conversion(o.operation)]:
        # hoist the reshape of its result above it
        user = _only_use(op.results[0])
        source = op.operands[0]
        if user is None or user.name not in RESHAPES or made_in_region(source, fusable):
            continue
        with ir.InsertionPoint(user), op.location:
            new = retyped(op, [reshape(source, shape(user.results[0]), user.location)], shape(user.results[0]))
        user.results[0].replace_all_uses_with(new)
        user.erase()
        op.erase()
    for op in [o.operation for o in block.operations if o.operation.name in RESHAPES]:
        # sink it below the conversion of its result
        conversion = _only_use(op.results[0])
        source = op.operands[0]
        if conversion is None or not _is_conversion(conversion) or not ranked(source) \
                or not made_in_region(source, fusable):
            continue
        with ir.InsertionPoint(conversion), conversion.location:
            new = reshape(retyped(conversion, [source], shape(source)), shape(op.results[0]), op.location)
        conversion.results[0].replace_all_uses_with(new)
        conversion.erase()
        op.erase()
