"""thunder-decompose: replace ltorch ops by their decompositions into thunder prims.

Each ltorch op's decomposition (registered with @op.decompose) is run on proxies built from the
op's operand types; what it records is emitted in place of the op. Decompositions may use other
ltorch ops, so the pass repeats until no decomposable op is left. `keep` names ops an executor
claims (they stay)."""
from thunder.core import trace as tracing
from thunder.core.proxies import DataDependentError, proxy_of_meta
from thunder.core.trace import NotDecomposable
from thunder.dialects import attrs, sizes
from thunder.dialects.definitions import decode_op
from thunder.dialects.emit import WIDENED, emit_symbol, loc_file_line, loc_names
from thunder.dialects.mlir import ir
from thunder.ops import registry
from thunder.lowering import decompose_reuse


def _decomposable(operation, keep):
    op = registry.OPS.get(operation.name)
    return (op is not None and op.dialect == "ltorch" and op.decomposition is not None and op.name not in keep
            and not _makes_leaf(operation))


def _makes_leaf(operation):
    """torch.ones(..., requires_grad=True) and the like: torch must make the tensor (a leaf that
    requires grad, which autograd records from); prims would make one that does not."""
    flag = operation.attributes["requires_grad"] if "requires_grad" in operation.attributes else None
    return isinstance(flag, ir.BoolAttr) and ir.BoolAttr(flag).value


def decompose_op(operation):
    """Replace one ltorch operation by its decomposition (inside decompose_reuse.shared(): run
    once per signature, the others emitted from it renamed)."""
    if any(sizes.is_dynamic_type(v.type) for v in [*operation.operands, *operation.results]):
        sizes.refuse_dynamic(operation.name)
    base = (loc_names(operation.location) or ["d"])[0]
    key, template = decompose_reuse.lookup(operation)
    if template is not None and not decompose_reuse.refused(template):
        symbols, outs, values = decompose_reuse.replay(template, operation, base)
        _emit(operation, registry.OPS[operation.name], symbols, outs, values)
        return
    ctx = tracing.TraceCtx(prefix=f"{base}_")
    values = {}  # proxy name -> ir.Value

    def proxy_of(v):
        p = proxy_of_meta(*attrs.tensor_meta(v.type), name=ctx.new_name())
        values[p.name] = v
        return p

    with tracing.tracing(ctx):
        op, args = decode_op(operation, proxy_of)
        out = op.decomposition(**args)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if template is None:
        decompose_reuse.record(key, operation, base, ctx.symbols, outs, values)
    _emit(operation, op, [(b.op, b.args, b.outputs, b.widened) for b in ctx.symbols], [o.name for o in outs], values)


def _emit(operation, op, symbols, outs, values):
    """Emit the decomposition's ops (op, args, outputs, widened) before operation, its results
    (names) in place of operation's."""
    where = loc_file_line(operation.location)
    with ir.InsertionPoint(operation), operation.location:
        for bop, args, outputs, widened in symbols:
            emitted = emit_symbol(bop, args, outputs, values, where)
            if widened or WIDENED in operation.attributes:  # (an ltorch op of a widened decomposition too)
                emitted.attributes[WIDENED] = ir.UnitAttr.get()
    if len(outs) != len(operation.results):
        raise RuntimeError(f"decomposition of {op.qualname} returned {len(outs)} values, expected "
                           f"{len(operation.results)}")
    for res, name in zip(operation.results, outs):
        new = values[name]
        if new.type != res.type:
            raise RuntimeError(f"decomposition of {op.qualname} gives {new.type}, expected {res.type}")
        res.replace_all_uses_with(new)
    operation.erase()


def decompose_module(module_op, keep=()):
    changed = True
    kept = set()  # ops whose decomposition needs the value of a runtime number: they stay
    while changed:
        changed = False
        todo = []

        def collect(o):
            if _decomposable(o, keep) and o not in kept:
                todo.append(o)
            return ir.WalkResult.ADVANCE

        module_op.walk(collect)
        for o in todo:
            try:
                decompose_op(o)
            except (DataDependentError, NotDecomposable):  # (x * t.item() in an integer dtype: int(n) is Python's)
                kept.add(o)
                continue
            changed = True


def decompose_pass(op, pass_):
    decompose_module(op)
