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
from thunder.dialects.symbolic_lift import LostExpression, SymbolicFunc, same_recording
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


def decompose_op(operation, symbolic=None):
    """Replace one ltorch operation by its decomposition (inside decompose_reuse.shared(): run
    once per signature, the others emitted from it renamed). symbolic: {func: SymbolicFunc} for
    ops on dynamic sizes (dialects/symbolic_lift.py; None: such an op is refused)."""
    if any(sizes.is_dynamic_type(v.type) for v in [*operation.operands, *operation.results]):
        if symbolic is None:
            sizes.refuse_dynamic(operation.name)
        _decompose_dynamic(operation, symbolic)
        return
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


def _decompose_dynamic(operation, symbolic):
    """decompose_op of an op on dynamic sizes: its decomposition runs on proxies whose `?` dims
    are the func's symbols (SymInts), computes its sizes from them, and they are emitted as size
    computations; the decisions it takes on them become the func's guards. (Not shared by
    signature: two ops of one type may differ in what their `?` dims are.)"""
    func_op = operation.parent
    found = symbolic.get(func_op)
    if found is None:
        found = symbolic[func_op] = SymbolicFunc(func_op)
    base = (loc_names(operation.location) or ["d"])[0]
    values = {}

    def run(guards, at=None):
        ctx = tracing.TraceCtx(prefix=f"{base}_")
        ctx.sym_guards, ctx.sym_strict = guards, True

        def proxy_of(v):
            p = found.value(v, ctx.new_name(), at)
            if hasattr(p, "name"):
                values[p.name] = v
            return p

        with tracing.tracing(ctx):
            op, args = decode_op(operation, proxy_of)
            out = op.decomposition(**args)
        return op, ctx.symbols, list(out) if isinstance(out, (tuple, list)) else [out]

    before = dict(found.guards)
    try:
        op, recorded, outs = run(found.guards)
        # run again with the symbols at other values: a size that lost its expression on the
        # way (`len(range(T))`) differs there (the op is left as it is)
        if not same_recording((recorded, outs), run({}, found.other_values())[1:]):
            raise LostExpression(f"{operation.name}'s decomposition computes a size as a plain number")
    except Exception:
        found.restore(before)
        raise
    _emit(operation, op, [(b.op, b.args, b.outputs, b.widened) for b in recorded], [o.name for o in outs], values,
          found.emitter(), found)


def _emit(operation, op, symbols, outs, values, emitter=None, symbolic=None):
    """Emit the decomposition's ops (op, args, outputs, widened) before operation, its results
    (names) in place of operation's. emitter, symbolic: for an op on dynamic sizes, the
    sizes.Emitter and SymbolicFunc of its func (which learns the new values' sizes)."""
    where = loc_file_line(operation.location)
    with ir.InsertionPoint(operation), operation.location:
        for bop, args, outputs, widened in symbols:
            emitted = emit_symbol(bop, args, outputs, values, where, emitter)
            if symbolic is not None:
                for r in outputs:
                    symbolic.note(values[r.name], (r.shape, r.dtype, r.device))
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
        symbolic = {}  # func -> its SymbolicFunc, for ops on dynamic sizes (this round's)
        for o in todo:
            try:
                decompose_op(o, symbolic)
            except (DataDependentError, NotDecomposable):  # (x * t.item() in an integer dtype: int(n) is Python's)
                kept.add(o)
                continue
            except Exception:
                if not any(sizes.is_dynamic_type(v.type) for v in [*o.operands, *o.results]):
                    raise
                kept.add(o)  # (its rule failed at the symbols' values: `?` dims not known equal)
                continue
            changed = True
        for found in symbolic.values():  # (the decisions of this round's rules: the funcs' guards)
            found.write_guards()


def decompose_pass(op, pass_):
    decompose_module(op)
