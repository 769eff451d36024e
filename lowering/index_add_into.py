"""A gradient summed from a GEMM's result and an embedding gradient, written into the GEMM's result.

A tensor that is both gathered from (an embedding, `take`) and multiplied (a tied weight: GPT-2's
`wte` is its LM head; runtime/tied_inputs.py makes it one value of the trace) gets its gradient
as `add(matmul(gT, h), zeros_index_add(shape, 0, ids, rows))`: zeros of the weight's size, the
rows added into them, then a sum of two weight-sized tensors (GPT-2: three passes over 103 MB).
`rewrite(func_op)` turns it into `index_add_into(matmul(gT, h), 0, ids, rows)`: the rows added in
place into the GEMM's fresh result, which nothing else reads (what inductor's `addmm` with the
embedding gradient as its bias reaches with one pass more).

Under autocast the GEMM's result is bfloat16 and the sum reads its float32 cast
(`to(matmul(gT, h), float32)`): the rows are added into the cast's result, as fresh.

Only where the GEMM's result (or its cast) has no other reader and the sum's operands have its
type (no broadcast, no dtype promotion) and the sum's alpha is 1."""
from thunder.dialects.mlir import ir
from thunder.lowering.executors import is_number, number_value

GEMMS = ("ltorch.matmul", "ltorch.mm")
CASTS = ("ltorch.to", "thunder.convert_element_type")


def rewrite(func_op):
    """The sums of a GEMM's result and a zeros_index_add in func_op's body, as index_add_into;
    returns how many."""
    done = 0
    for operation in list(func_op.regions[0].blocks[0].operations):
        if operation.operation.name != "ltorch.add" or not _alpha_one(operation):
            continue
        result = operation.results[0]
        pair = [_producer(v) for v in list(operation.operands)[:2]]
        for k in (0, 1):
            gemm, scatter = pair[k], pair[1 - k]
            if gemm is None or scatter is None or not _fresh_product(gemm) or \
                    scatter.name != "thunder.zeros_index_add":
                continue
            x, z = operation.operands[k], operation.operands[1 - k]
            if x.type != result.type or z.type != result.type or not _one_use(x) or not _one_use(z):
                continue
            with ir.InsertionPoint(operation), operation.location:
                new = ir.Operation.create("thunder.index_add_into", results=[result.type],
                                          operands=[x, scatter.operands[0], scatter.operands[1]],
                                          attributes={"dim": scatter.attributes["dim"]})
            result.replace_all_uses_with(new.results[0])
            operation.erase()
            scatter.erase()
            done += 1
            break
    return done


def _producer(value):
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def _alpha_one(add):
    """Whether `ltorch.add(a, b, alpha)` has alpha 1 (an arith.constant)."""
    if len(add.operands) == 2:
        return True
    return len(add.operands) == 3 and is_number(add.operands[2]) and number_value(add.operands[2]) == 1


def _one_use(value):
    return sum(1 for _ in value.uses) == 1


def _fresh_product(operation):
    """Whether operation is a GEMM, or a cast to another element type (a new tensor) of a GEMM's
    result that nothing else reads."""
    if operation.name in GEMMS:
        return True
    if operation.name not in CASTS:
        return False
    source = operation.operands[0]
    gemm = _producer(source)
    return (gemm is not None and gemm.name in GEMMS and _one_use(source)
            and ir.RankedTensorType(source.type).element_type != ir.RankedTensorType(operation.results[0].type).element_type)
