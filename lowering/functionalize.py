"""thunder-functionalize: make writes into inputs explicit results.

Every `ltorch.copy_(%input, %new)` whose destination is an argument of the func is removed; %new
becomes an extra result of the func and the `thunder.mutated_inputs` attribute lists which
argument each extra result is for (the last write wins). The generated program copies the results
back into the caller's tensors. In-place updates of intermediates and views are functionalized
while tracing (the proxies are rebound), so copies into arguments are all that is left here."""
from thunder.dialects.mlir import func, ir


def functionalize_func(f):
    block = f.regions[0].blocks[0]
    args = list(block.arguments)
    writes = {}  # argument index -> new value
    for operation in list(block.operations):
        if operation.operation.name != "ltorch.copy_":
            continue
        dst, src = operation.operands[0], operation.operands[1]
        index = next((i for i, a in enumerate(args) if a == dst), None)
        if index is None:
            continue
        writes.pop(index, None)
        writes[index] = src
        operation.results[0].replace_all_uses_with(src)
        operation.operation.erase()
    if not writes:
        return
    ret = next(o for o in block.operations if o.operation.name == "func.return")
    results = list(ret.operands) + list(writes.values())
    with ir.InsertionPoint(ret), ret.location:
        func.ReturnOp(results)
    ret.operation.erase()
    ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
    f.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get(list(ftype.inputs), [v.type for v in results]))
    previous = list(ir.DenseI64ArrayAttr(f.attributes["thunder.mutated_inputs"])) \
        if "thunder.mutated_inputs" in f.attributes else []
    f.attributes["thunder.mutated_inputs"] = ir.DenseI64ArrayAttr.get(previous + list(writes))


def functionalize_module(module_op):
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func":
            functionalize_func(op)
