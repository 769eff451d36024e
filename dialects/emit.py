"""Emission: a recorded trace becomes an MLIR module with `func.func @computation`. The
conventions emission writes (value names in locations, thunder.mutated_inputs) are read back
here too, by passes and code generation."""
from thunder.core import symbols
from thunder.dialects import attrs, lists, sizes
from thunder.dialects.definitions import MAX_RESULTS, context, decode_op, layout, operand_segments, segments
from thunder.dialects.mlir import func, ir
from thunder.dialects.texts import shared
from thunder.core.trace import BoundSymbol, Ref
from thunder.ops.registry import OPS


CHECKPOINT = "checkpoint "  # a fused location's metadata "checkpoint N": the op is in checkpoint region N
# a unit attribute on an op a decomposition computes in float64 to round its float32 (float16,
# bfloat16) result once (ops/decomp_utils.widened): its f64 math needs f32's accuracy only, so
# the kernels take it (lowering/linalg/approx.py) where unmarked f64 math stays a torch call
WIDENED = "thunder.widened"


def location(name, where=None):
    """The location of a value (or of an op's results, names joined by ","): its name, with the
    user's (file, line) as child; (file, line, region) for an op in an activation-checkpoint region
    (ops/checkpoint.py): the file location fused with "checkpoint N"."""
    if not where:
        return ir.Location.name(name)
    return ir.Location.name(name, childLoc=_source_location(tuple(where)))


_SOURCES = {}  # where -> its location in the shared context (texts.shared(): never freed)


def _source_location(where):
    if ir.Context.current is shared():
        found = _SOURCES.get(where)
        if found is None:
            found = _SOURCES[where] = _source_location_of(where)
        return found
    return _source_location_of(where)


def _source_location_of(where):
    child = ir.Location.file(where[0], where[1], 0)
    if len(where) > 2:
        child = ir.Location.fused([child], metadata=ir.StringAttr.get(f"{CHECKPOINT}{where[2]}"))
    return child


# kinds of locations, told apart by TypeID: a cast to the wrong kind raises, ~30 us an attempt,
# and every op's location is read (lift, decompose, code generation)
_NAME, _FUSED, _FILE = ir.NameLoc.static_typeid, ir.FusedLoc.static_typeid, ir.FileLineColLoc.static_typeid


def loc_names(loc):
    """The value names a location() carries ([] for an unnamed location)."""
    if loc.typeid != _NAME:
        return []
    return ir.NameLoc(loc).name_str.split(",")


def _inner(loc):
    """What a location() says of the user's source: a named location's child, else the location."""
    return ir.NameLoc(loc).child_loc if loc.typeid == _NAME else loc


def loc_file_line(loc):
    """(file, line) of a named location's child (traces from thunder.jit) or of a plain file
    location (traces parsed from a .mlir file); (file, line, region) for an op in a checkpoint
    region (see location()); None otherwise."""
    region, inner = _checkpoint_region(loc)
    if region is not None:
        where = loc_file_line(inner)
        return (*(where or ("<unknown>", 0)), region)
    inner = _inner(loc)
    if inner.typeid == _FILE:
        f = ir.FileLineColLoc(inner)
        return (f.filename, f.start_line)
    return None


def _checkpoint_region(loc):
    """(region, the fused file location) of a location in a checkpoint region; (None, None) otherwise."""
    inner = _inner(loc)
    if inner.typeid != _FUSED:
        return None, None
    fused = ir.FusedLoc(inner)
    try:
        text = ir.StringAttr(fused.metadata).value
    except (ValueError, TypeError):  # (no metadata, or not a string)
        return None, None
    if text.startswith(CHECKPOINT) and len(fused.locations) == 1:
        return int(text[len(CHECKPOINT):]), fused.locations[0]
    return None, None


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


def emit(trace, outputs, fn_name="computation", mutated=(), int_symbols=None) -> ir.Module:
    """trace: a TraceCtx (inputs and symbols, tensors as Refs); outputs: the Refs returned.
    mutated: (input index, Ref of its new value) for inputs updated in place: each becomes an
    `ltorch.copy_` into the input at the end (thunder-functionalize makes them results).
    int_symbols: for a trace recorded with symbolic sizes, to emit them as such (`?` dims,
    dialects/sizes.py; sizes.Inexpressible where the trace holds one it cannot express): the
    names of the symbols that are int arguments (i64 parameters after the inputs); None: the
    sizes of the call traced, as constants."""
    copies = []
    for i, r in mutated:
        dst = trace.inputs[i]
        out = Ref(trace.new_name(f"{dst.name}_out"), dst.shape, dst.dtype, dst.device)
        copies.append(BoundSymbol(OPS["ltorch.copy_"], {"input": dst, "src": r}, [out], None))
    with context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            emit_into(trace, list(outputs), fn_name, bsyms=trace.symbols + copies, int_symbols=int_symbols)
    return module


def emit_into(trace, outputs, fn_name, arg_attrs=None, attributes=None, bsyms=None, int_symbols=None,
              symbol_values=None):
    """Emit func @fn_name at the current insertion point (inside a module): the trace's bound
    symbols (or bsyms); int_symbols: see emit; symbol_values: the symbols' values (a pass's
    func: sizes.VALUES, else found in the trace)."""
    dynamic = int_symbols is not None
    i64 = ir.IntegerType.get_signless(64)
    arg_types = [attrs.tensor_type(r.shape, r.dtype, r.device, dynamic) for r in trace.inputs]
    arg_types += [i64] * len(int_symbols or ())
    out_types = [attrs.tensor_type(r.shape, r.dtype, r.device, dynamic) for r in outputs]
    f = func.FuncOp(fn_name, (arg_types, out_types))
    if dynamic:
        arg_attrs, values = sizes.signature_attributes(
            trace.inputs, int_symbols, _numbers_in(trace.symbols if bsyms is None else bsyms), arg_attrs,
            known=symbol_values)
        attributes = {**values, **(attributes or {})}
    if arg_attrs is not None:
        f.attributes["arg_attrs"] = ir.ArrayAttr.get(arg_attrs)
    for k, v in (attributes or {}).items():
        f.attributes[k] = v
    block = f.add_entry_block([location(r.name) for r in trace.inputs] + [location(n) for n in int_symbols or ()])
    values = {r.name: a for r, a in zip(trace.inputs, block.arguments)}
    with ir.InsertionPoint(block):
        emitter = sizes.Emitter(trace.inputs, list(block.arguments), int_symbols) if dynamic else None
        for bsym in trace.symbols if bsyms is None else bsyms:
            emit_symbol(bsym.op, bsym.args, bsym.outputs, values, bsym.location, emitter)
        func.ReturnOp([values[r.name] for r in outputs])
    return f


def _numbers_in(bsyms):
    """The numbers among the ops' arguments (the values of int symbols, where they appear)."""
    for b in bsyms:
        for v in b.args.values():
            yield from v if isinstance(v, (tuple, list)) else (v,)


def emit_symbol(op, args, outputs, values, where=None, emitter=None):
    """Insert one op at the current insertion point. values maps tensor names to ir.Values and
    gets the op's results. emitter: a sizes.Emitter, to emit symbolic sizes as SSA values.
    A list longer than the op's variadic groups hold is emitted as a chain (dialects/lists.py);
    the last op of the chain is returned."""
    steps = lists.chain(op, args, outputs)
    if steps is not None:
        return [emit_symbol(*step, values, where, emitter) for step in steps][-1]
    loc = location(",".join([r.name for r in outputs]) or op.name, where)  # (codegen splits the names on ",")
    _, _, _, sized, segmented, operand_plan, attribute_plan = layout(op)
    by_param = {}
    for _, name, variadic, _ in operand_plan:
        v = args[name]
        group = []
        for x in [] if v is None else list(v) if variadic else [v]:
            if hasattr(x, "name"):
                group.append(values[x.name])
            elif emitter is not None and symbols.is_symbolic(x):
                group.append(emitter.number(x))
            else:
                group.append(attrs.constant(x))
        by_param[name] = lists.pack(group, loc) if variadic else group
    operands = [v for group in by_param.values() for v in group]
    attributes, dynamic = {}, []
    for _, name, kind, _ in attribute_plan:
        value = args[name]
        if emitter is not None:
            value, found = sizes.split(kind, value)
            dynamic += [emitter.size(x) for x in found]
        attributes[name] = attrs.encode(kind, value)
    if dynamic and not sized:
        raise sizes.Inexpressible(f"{op.qualname} has no operands for sizes")
    operands += dynamic
    if segmented:
        attributes["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(operand_segments(op, by_param, len(dynamic)))
    result_types = [attrs.tensor_type(r.shape, r.dtype, r.device, emitter is not None) for r in outputs]
    first, unpack = lists.split_results(result_types) if op.returns_sequence else (result_types, None)
    if op.returns_sequence:
        attributes["resultSegmentSizes"] = ir.DenseI32ArrayAttr.get(segments(first, MAX_RESULTS))
    operation = ir.Operation.create(op.qualname, results=first, operands=operands, attributes=attributes, loc=loc)
    results = list(operation.results)
    if unpack is not None:
        results = results[:-1] + unpack(results[-1], loc)
    for r, res in zip(outputs, results):
        values[r.name] = res
    return operation


def mismatch(symbolic_func, concrete_func, int_values):
    """Where the func with symbolic sizes, its sizes taken from a call (concrete_func: the trace of
    that call; int_values: the int symbols' values in it, by name), is not that call's trace (an
    op, a number, an attribute or a static dim of another value); None where it is the same. A
    number computed from sizes where the recording lost its expression (a constant in one trace,
    another in the next) shows here."""
    sym_block, con_block = symbolic_func.regions[0].blocks[0], concrete_func.regions[0].blocks[0]
    shapes = {a: ir.RankedTensorType(c.type).shape for a, c in zip(sym_block.arguments, con_block.arguments)
              if isinstance(c.type, ir.RankedTensorType)}

    class Shaped:
        def __init__(self, shape):
            self.shape = shape

    def leaf(v):
        if v in shapes:
            return Shaped(shapes[v])
        if isinstance(v.owner, ir.Block) and str(v.type) == "i64":
            return int_values.get((loc_names(v.location) or [None])[0])
        return None

    def fits(sym_t, con_t):
        if not isinstance(sym_t, ir.RankedTensorType):
            return str(sym_t) == str(con_t)
        sym_t, con_t = ir.RankedTensorType(sym_t), ir.RankedTensorType(con_t)
        return (sym_t.element_type == con_t.element_type and sym_t.rank == con_t.rank
                and all(a == sizes.DYNAMIC or a == b for a, b in zip(sym_t.shape, con_t.shape)))

    def kind(v):  # what is compared of a tensor or a runtime number: that it is one
        return "tensor" if isinstance(v.type, ir.RankedTensorType) else "number"

    def sym_value(v):  # a size takes the call's value
        value = None if isinstance(v.type, ir.RankedTensorType) else sizes.evaluate(v, leaf)
        return kind(v) if value is None else value

    args = list(sym_block.arguments)[:len(con_block.arguments)]
    if not all(fits(a.type, c.type) for a, c in zip(args, con_block.arguments)):
        return "the func's arguments"
    skip = set(attrs.CONSTANT_OPS) | set(sizes.PYTHON)
    sym_ops = [o.operation for o in sym_block.operations if o.operation.name not in skip]
    con_ops = [o.operation for o in con_block.operations if o.operation.name not in attrs.CONSTANT_OPS]
    if [o.name for o in sym_ops] != [o.name for o in con_ops]:
        return "the ops"
    for s, c in zip(sym_ops, con_ops):
        if s.name == "func.return":
            if not all(fits(a.type, b.type) for a, b in zip(s.operands, c.operands)):
                return "the results"
            continue
        _, sym_values = decode_op(s, sym_value)
        _, con_values = decode_op(c, kind)
        if sym_values != con_values:
            return f"{s.name}'s arguments ({sym_values} against {con_values})"
        if not all(fits(a.type, b.type) for a, b in zip(s.results, c.results)):
            return f"{s.name}'s result types"
    return None
