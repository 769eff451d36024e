"""Emission: a recorded trace becomes an MLIR module with `func.func @computation`. The
conventions emission writes (value names in locations, thunder.mutated_inputs) are read back
here too, by passes and code generation."""
from thunder.dialects import attrs
from thunder.dialects.definitions import (attribute_params, context, needs_segments, operand_params,
                                         operand_segments, result_segments)
from thunder.dialects.mlir import func, ir


def location(name, where=None):
    """The location of a value (or of an op's results, names joined by ","): its name, with the
    user's (file, line) as child."""
    if where:
        return ir.Location.name(name, childLoc=ir.Location.file(where[0], where[1], 0))
    return ir.Location.name(name)


def loc_names(loc):
    """The value names a location() carries ([] for an unnamed location)."""
    try:
        return ir.NameLoc(loc).name_str.split(",")
    except (ValueError, TypeError):
        return []


def loc_file_line(loc):
    """(file, line) of a named location's child (traces from thunder.jit) or of a plain file
    location (traces parsed from a .mlir file); None otherwise."""
    for get in (lambda: ir.FileLineColLoc(ir.NameLoc(loc).child_loc), lambda: ir.FileLineColLoc(loc)):
        try:
            f = get()
            return (f.filename, f.start_line)
        except (ValueError, TypeError):
            continue
    return None


def find_func(module_op, name):
    """func.func @name in a module operation, or None."""
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    return None


def mutated_inputs(func_op):
    """Input indices whose new values are the func's last results (thunder.mutated_inputs)."""
    if "thunder.mutated_inputs" not in func_op.attributes:
        return []
    return list(ir.DenseI64ArrayAttr(func_op.attributes["thunder.mutated_inputs"]))


def emit(trace, outputs, fn_name="computation", mutated=()) -> ir.Module:
    """trace: a TraceCtx (inputs and symbols, tensors as Refs); outputs: the Refs returned.
    mutated: (input index, Ref of its new value) for inputs updated in place: each becomes an
    `ltorch.copy_` into the input at the end (thunder-functionalize makes them results)."""
    from thunder.core.trace import BoundSymbol, Ref
    from thunder.ops.registry import OPS

    copies = []
    for i, r in mutated:
        dst = trace.inputs[i]
        out = Ref(trace.new_name(f"{dst.name}_out"), dst.shape, dst.dtype, dst.device)
        copies.append(BoundSymbol(OPS["ltorch.copy_"], {"input": dst, "src": r}, [out], None))
    trace.symbols = trace.symbols + copies
    with context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            emit_into(trace, list(outputs), fn_name)
    return module


def emit_into(trace, outputs, fn_name, arg_attrs=None, attributes=None):
    """Emit func @fn_name at the current insertion point (inside a module)."""
    arg_types = [attrs.tensor_type(r.shape, r.dtype, r.device) for r in trace.inputs]
    out_types = [attrs.tensor_type(r.shape, r.dtype, r.device) for r in outputs]
    f = func.FuncOp(fn_name, (arg_types, out_types))
    if arg_attrs is not None:
        f.attributes["arg_attrs"] = ir.ArrayAttr.get(arg_attrs)
    for k, v in (attributes or {}).items():
        f.attributes[k] = v
    block = f.add_entry_block([location(r.name) for r in trace.inputs])
    values = {r.name: a for r, a in zip(trace.inputs, block.arguments)}
    with ir.InsertionPoint(block):
        for bsym in trace.symbols:
            emit_symbol(bsym.op, bsym.args, bsym.outputs, values, bsym.location)
        func.ReturnOp([values[r.name] for r in outputs])
    return f


def emit_symbol(op, args, outputs, values, where=None):
    """Insert one op at the current insertion point. values maps tensor names to ir.Values and
    gets the op's results."""
    operands = []
    for p in operand_params(op):
        v = args[p.name]
        for x in [] if v is None else list(v) if p.kind.variadic else [v]:
            operands.append(values[x.name] if hasattr(x, "name") else attrs.constant(x))
    attributes = {p.name: attrs.encode(p.kind, args[p.name]) for p in attribute_params(op)}
    if needs_segments(op):
        attributes["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(operand_segments(op, args))
    if op.returns_sequence:
        attributes["resultSegmentSizes"] = ir.DenseI32ArrayAttr.get(result_segments(op, outputs))
    result_types = [attrs.tensor_type(r.shape, r.dtype, r.device) for r in outputs]
    names = ",".join(r.name for r in outputs) or op.name  # codegen splits on ","
    operation = ir.Operation.create(op.qualname, results=result_types, operands=operands,
                                    attributes=attributes, loc=location(names, where))
    for r, res in zip(outputs, operation.results):
        values[r.name] = res
    return operation
