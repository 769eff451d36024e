"""Lifting: an MLIR func of ltorch/thunder ops back into a Python-level trace (the inverse of
emit.py), so passes can run Python rules (VJPs, decompositions) over it and emit the result."""
from dataclasses import dataclass

from thunder.core.trace import BoundSymbol, Ref, TraceCtx
from thunder.dialects import attrs, sizes
from thunder.dialects.definitions import LIST_OP, UNLIST_OP, context, decode_op, results_of
from thunder.dialects.emit import emit_into, loc_file_line, loc_names
from thunder.dialects.mlir import ir
from thunder.dialects.symbolic_lift import SymbolicFunc


@dataclass
class Lifted:
    ctx: TraceCtx  # inputs and symbols, tensors as Refs
    outputs: list  # Refs returned by the func
    values: dict  # name -> ir.Value of the original func
    symbolic: object = None  # for a func with dynamic sizes, its SymbolicFunc (dialects/symbolic_lift.py)


def lift(func_op, symbol_values=None) -> Lifted:
    """A func with dynamic sizes lifts with SymInt dims (dialects/symbolic_lift.py): its size
    computations are the SymInts in the ops' arguments, its int symbols' parameters are no
    inputs (Lifted.symbolic.int_symbols); symbol_values: the symbols' values (else the func's)."""
    ctx = TraceCtx()
    refs, values = {}, {}
    block = func_op.regions[0].blocks[0]
    dynamic = any(sizes.is_dynamic_type(a.type) for a in block.arguments) or any(
        o.operation.name in sizes.PYTHON for o in block.operations)
    symbolic = SymbolicFunc(func_op, symbol_values) if dynamic else None

    def new_ref(value, wanted):
        name = ctx.new_name(wanted) if wanted and wanted.isidentifier() else ctx.new_name()
        r = Ref(name, *(symbolic.meta(value) if symbolic is not None else attrs.tensor_meta(value.type)))
        refs[value] = r
        values[name] = value
        return r

    def lookup(v):
        r = refs.get(v)
        return r if r is not None or symbolic is None else symbolic.value(v)

    ints = symbolic.int_symbol_arguments() if symbolic is not None else ()
    ctx.inputs = [new_ref(a, (loc_names(a.location) or [None])[0]) for a in block.arguments if a not in ints]
    outputs = []
    for operation in block.operations:
        name = operation.operation.name
        if name in attrs.CONSTANT_OPS or name in sizes.PYTHON:
            continue  # (numbers and sizes: read where ops use them)
        if name in (LIST_OP, UNLIST_OP):
            continue  # (read as the operands and results of the op they pack for: decode_op, results_of)
        if name == "func.return":
            outputs = [lookup(v) for v in operation.operands]
            continue
        op, args = decode_op(operation.operation, lookup)
        loc = operation.location
        wanted = loc_names(loc)
        outs = [new_ref(r, wanted[i] if i < len(wanted) else None) for i, r in enumerate(results_of(operation))]
        ctx.symbols.append(BoundSymbol(op, args, outs, loc_file_line(loc)))
    return Lifted(ctx, outputs, values, symbolic)


def static_text(func_op, values, name=None):
    """The func at these values of its symbols ({name: int}), as text: every `?` dim and every
    size computation the number it is there (what a kernel compiles for one size: a fused
    region's code for all sizes is checked against it, and falls back to it)."""
    lifted = lift(func_op, symbol_values=values)
    if lifted.symbolic is not None and lifted.symbolic.int_symbols:
        raise ValueError("static_text: a func whose int symbols are parameters")
    name = name or ir.StringAttr(func_op.attributes["sym_name"]).value
    with context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            f = emit_into(lifted.ctx, lifted.outputs, name)
        return f.operation.get_asm(enable_debug_info=False, use_local_scope=True)
