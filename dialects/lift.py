"""Lifting: an MLIR func of ltorch/thunder ops back into a Python-level trace (the inverse of
emit.py), so passes can run Python rules (VJPs, decompositions) over it and emit the result."""
from dataclasses import dataclass

from thunder.core.trace import BoundSymbol, Ref, TraceCtx
from thunder.dialects import attrs, sizes
from thunder.dialects.definitions import LIST_OP, UNLIST_OP, decode_op, results_of
from thunder.dialects.emit import loc_file_line, loc_names
from thunder.dialects.mlir import ir


@dataclass
class Lifted:
    ctx: TraceCtx  # inputs and symbols, tensors as Refs
    outputs: list  # Refs returned by the func
    values: dict  # name -> ir.Value of the original func


def lift(func_op) -> Lifted:
    ctx = TraceCtx()
    refs, values = {}, {}

    def new_ref(value, wanted):
        name = ctx.new_name(wanted) if wanted and wanted.isidentifier() else ctx.new_name()
        r = Ref(name, *attrs.tensor_meta(value.type))
        refs[value] = r
        values[name] = value
        return r

    block = func_op.regions[0].blocks[0]
    for a in block.arguments:
        if sizes.is_dynamic_type(a.type):
            sizes.refuse_dynamic(f"@{ir.StringAttr(func_op.attributes['sym_name']).value}'s argument of type {a.type}")
    ctx.inputs = [new_ref(a, (loc_names(a.location) or [None])[0]) for a in block.arguments]
    outputs = []
    for operation in block.operations:
        name = operation.operation.name
        if name in attrs.CONSTANT_OPS:
            continue
        if name in sizes.PYTHON:
            sizes.refuse_dynamic(f"{name} (a size computation)")
        if name in (LIST_OP, UNLIST_OP):
            continue  # (read as the operands and results of the op they pack for: decode_op, results_of)
        if name == "func.return":
            outputs = [refs[v] for v in operation.operands]
            continue
        op, args = decode_op(operation.operation, refs.__getitem__)
        loc = operation.location
        wanted = loc_names(loc)
        outs = [new_ref(r, wanted[i] if i < len(wanted) else None) for i, r in enumerate(results_of(operation))]
        ctx.symbols.append(BoundSymbol(op, args, outs, loc_file_line(loc)))
    return Lifted(ctx, outputs, values)
