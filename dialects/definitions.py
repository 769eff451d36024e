"""The ltorch and thunder dialects, defined with IRDL (dialects.ext) from the op registry.

For every registered op: tensor and number parameters become operands (in signature order),
the other parameters attributes; one result, or result slots for ops returning several tensors.
Ops are Pure unless they draw random numbers.

IRDL gives each operand or result definition one constraint variable, so all values of a
variadic group share one type. A list of tensors (cat's inputs, split's outputs, the generic
op's operands) has tensors of different shapes, so such a list is declared as MAX_LIST variadic
groups (MAX_RESULTS for results) and emitted as runs of equal types, one group per run:
operandSegmentSizes = [2, 1, 0, ...] is two tensors of one type, then one of another. A list with
more runs is emitted as a chain of the same op on parts of it for cat, stack and split, and packed
into !thunder.list values for any other op (thunder.pack, thunder.unpack: dialects/lists.py), so
lists have no limit. (IRDL verifies every value of a variadic definition against one constraint variable,
which binds to the first value's type: one variadic per list, with the types left to the Python
verifier, is not expressible in IRDL.) The verifier runs the op's meta
function on the operand types and attributes and checks the result types against it, so a lit
test can show a wrong shape being rejected.
"""
from collections.abc import Sequence
from typing import Any, NamedTuple

from thunder.core import trace as tracing
from thunder.dialects import attrs, sizes, texts
from thunder.dialects.texts import text
from thunder.dialects.mlir import LOCK, ext, ir
import thunder.ops  # noqa: F401  (registers every op)
from thunder.ops import registry
from thunder.ops.record import run_meta
from thunder.core.proxies import proxy_of_meta

# OpView properties that an IRDL field must not shadow
_RESERVED = {"name", "operation", "operands", "results", "result", "attributes", "location",
             "context", "regions", "parent", "type", "verify", "opview"}


def field_name(param_name):
    return param_name + "_" if param_name in _RESERVED else param_name


class LTorch(ext.Dialect, name="ltorch"):
    pass


class Thunder(ext.Dialect, name="thunder"):
    pass


_DIALECTS = {"ltorch": LTorch, "thunder": Thunder}


MAX_LIST = 32  # runs of equal tensor types in one list operand (cat, stack, torch_call's tensors)
MAX_RESULTS = 16  # runs of equal types in the results of one op (split, unbind, torch_call)


class Layout(NamedTuple):
    """What decode_op and emit_symbol read of an op's parameters, computed once per op (they ask
    for every op they read or write)."""
    params: tuple  # op.params it was computed from (recomputed if they were replaced)
    operands: tuple  # the operand params
    attributes: tuple  # the attribute params
    sized: bool  # takes_sizes
    segmented: bool  # needs_segments
    # of each operand param: (param, name, variadic, (tensor allowed, number allowed), or None
    # for a kind _OPERAND_TAKES lacks)
    operand_plan: tuple
    attribute_plan: tuple  # of each attribute param: (param, name, kind, the kind's base name)


def layout(op) -> Layout:
    found = op.__dict__.get("_layout")
    if found is None or found.params is not op.params:
        operands = tuple(p for p in op.params if p.kind.operand)
        attributes = tuple(p for p in op.params if not p.kind.operand)
        sized = any(p.kind.base_name in sizes.SIZE_KINDS for p in attributes)
        groups = sum(p.kind.variadic or p.kind.optional for p in operands) + sized
        takes = [_OPERAND_TAKES.get(p.kind.base_name) for p in operands]
        operand_plan = tuple((p, p.name, p.kind.variadic, None if t is None else ("tensor" in t, "number" in t))
                             for p, t in zip(operands, takes))
        attribute_plan = tuple((p, p.name, p.kind, p.kind.base_name) for p in attributes)
        found = op._layout = Layout(op.params, operands, attributes, sized, groups > 1 or (groups == 1 and not sized),
                                    operand_plan, attribute_plan)
    return found


def operand_params(op):
    return layout(op)[1]


def attribute_params(op):
    return layout(op)[2]


def takes_sizes(op):
    """Whether op has attributes that may hold sizes, and so the operand group for their
    symbolic entries (dialects/sizes.py), last."""
    return layout(op)[3]


def needs_segments(op):
    return layout(op)[4]


def run_key(v):
    """What values in one run of a list share: (shape, dtype, device) of a tensor value (a Ref
    or proxy); numbers make runs of their own."""
    return (tuple(v.shape), v.dtype, v.device) if hasattr(v, "shape") else ("number", type(v))


def runs_of(keys):
    """Lengths of the runs of equal keys."""
    sizes, last = [], object()
    for k in keys:
        if sizes and k == last:
            sizes[-1] += 1
        else:
            sizes.append(1)
        last = k
    return sizes


def segments(types, groups):
    """The sizes of `groups` variadic groups holding values of these MLIR types, in order: one
    group per run of equal types (at most `groups` runs: a longer list is packed first,
    dialects/lists.py)."""
    runs = runs_of([text(t) for t in types])
    assert len(runs) <= groups, (len(runs), groups)
    return runs + [0] * (groups - len(runs))


def operand_segments(op, operands, n_dynamic=0):
    """operandSegmentSizes for a call: one entry per operand group (operands: the ir.Values of
    each operand parameter, by name; n_dynamic: the number of dynamic size operands,
    dialects/sizes.py)."""
    segs = []
    for p in operand_params(op):
        v = operands[p.name]
        segs += segments([x.type for x in v], MAX_LIST) if p.kind.variadic else [len(v)]
    return segs + ([n_dynamic] if takes_sizes(op) else [])


# ---- lists of any length: a list with more runs of equal types than an op's groups hold is
# packed (dialects/lists.py): the op takes its first runs and a value of type !thunder.list, made
# by a `thunder.pack` op of the next runs (and, last, the list of the rest); an op returns its
# first runs and a !thunder.list that `thunder.unpack` unpacks likewise.
LIST_OP, UNLIST_OP = "thunder.pack", "thunder.unpack"


def is_list_type(t):
    # (a tensor, the common case, without printing its type: ~20 us a value)
    return not isinstance(t, ir.RankedTensorType) and text(t) == "!thunder.list"


def expand(values):
    """ir.Values with each !thunder.list replaced by what it holds (its thunder.pack op's
    operands, expanded)."""
    out = []
    for v in values:
        if is_list_type(v.type):
            out += expand(v.owner.operands)
        else:
            out.append(v)
    return out


def results_of(operation):
    """The results of an op, a trailing !thunder.list replaced by what its thunder.unpack gives."""
    results = list(operation.results)
    if results and is_list_type(results[-1].type):
        users = [u.owner for u in results[-1].uses if u.owner.name == UNLIST_OP]
        if len(users) != 1:
            raise ValueError(f"a !thunder.list result must be unpacked by one {UNLIST_OP} (found {len(users)})")
        return results[:-1] + results_of(users[0])
    return results


def _define(op):
    ann, ns = {}, {}
    for p in operand_params(op):
        f = field_name(p.name)
        if p.kind.variadic:
            for i in range(MAX_LIST):
                ann[f"{f}_{i}"], ns[f"{f}_{i}"] = Sequence[ext.Operand[Any]], ext.operand(kw_only=True)
        elif p.kind.optional:
            ann[f], ns[f] = ext.Operand[Any] | None, None
        else:
            ann[f], ns[f] = ext.Operand[Any], ext.operand(kw_only=True)
    if takes_sizes(op):
        ann[sizes.OPERAND], ns[sizes.OPERAND] = Sequence[ext.Operand[Any]], ext.operand(kw_only=True)
    for p in attribute_params(op):
        f = field_name(p.name)
        ann[f], ns[f] = Any, ext.attribute(kw_only=True)
    if op.returns_sequence:
        for i in range(MAX_RESULTS):
            ann[f"out_{i}"], ns[f"out_{i}"] = Sequence[ext.Result[Any]], ext.result(kw_only=True)
    else:
        ann["out"], ns["out"] = ext.Result[Any], ext.result(kw_only=True)
    ns["__annotations__"] = ann
    ns["verify_invariants"] = _verifier(op)
    traits = [] if op.random or op.effects else [ext.Pure]
    cls_name = "".join(w.capitalize() for w in op.name.split("_")) + "Op"
    return type(cls_name, (_DIALECTS[op.dialect].Operation,), ns, name=op.name, traits=traits)


class ListType(Thunder.Type, name="list"):
    """A list of values of any types (see LIST_OP)."""


def _define_list_ops():
    """thunder.pack: its operands, in MAX_LIST - 1 groups (runs of one type) and an optional
    last !thunder.list (the rest), as one value; thunder.unpack: a list's values, likewise."""
    ann, ns = {}, {}
    for i in range(MAX_LIST - 1):
        ann[f"values_{i}"], ns[f"values_{i}"] = Sequence[ext.Operand[Any]], ext.operand(kw_only=True)
    ann["rest"], ns["rest"] = ext.Operand[ListType] | None, None
    ann["out"], ns["out"] = ext.Result[ListType], ext.result(kw_only=True)
    ns["__annotations__"] = ann
    type("PackOp", (Thunder.Operation,), ns, name="pack", traits=[ext.Pure])
    ann, ns = {"list_": ext.Operand[ListType]}, {"list_": ext.operand(kw_only=True)}
    for i in range(MAX_RESULTS - 1):
        ann[f"out_{i}"], ns[f"out_{i}"] = Sequence[ext.Result[Any]], ext.result(kw_only=True)
    ann["rest"], ns["rest"] = Sequence[ext.Result[ListType]], ext.result(kw_only=True)
    ns["__annotations__"] = ann
    # (not Pure: dropping an unpack whose results are unused would lose its producer's results)
    type("UnpackOp", (Thunder.Operation,), ns, name="unpack", traits=[])


# what an operand of each operand kind may be (a kind without an entry here is a KeyError:
# add it when adding the kind)
_OPERAND_TAKES = {"Tensor": {"tensor"}, "Tensors": {"tensor"}, "Number": {"number"},
                  "TensorOrNumber": {"tensor", "number"}}


def _check_operand(p, value):
    """A tensor where the op wants a number (ltorch.add's alpha) or the reverse is an error: the
    meta function may ignore the operand, the generated call would not."""
    is_tensor = attrs.is_tensor_type(value.type)
    takes = _OPERAND_TAKES[p.kind.base_name]
    if ("tensor" if is_tensor else "number") not in takes:
        raise ValueError(f"operand '{p.name}' ({p.kind.base_name}) must be a {' or a '.join(sorted(takes))}, "
                         f"not a value of type {value.type}")


def decode_op(operation, tensor_of):
    """(OpDef, {param: value}) of an ltorch/thunder operation. tensor_of maps an ir.Value of
    tensor type or a runtime number (scalar type) or a size (index type, dialects/sizes.py) to
    what stands for it (a proxy, a name); constant numbers come from their arith.constant."""
    op = registry.OPS.get(operation.name)
    if op is None:
        raise NotImplementedError(f"{operation.name} is not an ltorch or thunder op")
    _, operand_ps, _, sized, segmented, operand_plan, attribute_plan = layout(op)
    operands = list(operation.operands)
    attributes = operation.attributes
    if segmented:
        if "operandSegmentSizes" not in attributes:
            raise ValueError("missing attribute 'operandSegmentSizes'")
        segs = _segment_sizes(attributes["operandSegmentSizes"])
    else:
        segs = [1] * len(operand_ps)
    values, i, slot = {}, 0, 0
    for p, name, variadic, takes in operand_plan:
        if variadic:
            n = sum(segs[slot:slot + MAX_LIST])
            slot += MAX_LIST
            group = expand(operands[i:i + n])
        else:
            n = sum(segs[slot:slot + 1])
            slot += 1
            group = operands[i:i + n]
        i += n
        for v in group:
            if takes is None or not takes[0 if isinstance(v.type, ir.RankedTensorType) else 1]:
                _check_operand(p, v)  # (raises)
        conv = []
        for v in group:
            owner = v.owner
            conv.append(attrs.constant_of(owner) if attrs.is_constant_op(owner) else tensor_of(v))
        values[name] = tuple(conv) if variadic else (conv[0] if conv else None)
    rest = operands[i:] if sized else []  # (a wrong operand count is IRDL's error)
    if segmented and sized and slot < len(segs) and segs[slot] != len(rest):
        raise ValueError(f"{len(operands)} operands do not match operandSegmentSizes")
    dynamic = iter([attrs.constant_value(v) if attrs.is_constant(v) else tensor_of(v) for v in rest])
    for p, name, kind, base in attribute_plan:
        if name not in attributes:
            raise ValueError(f"missing attribute '{p.name}' ({p.kind.name})")
        value, holds_dynamic = _decoded(kind, base, attributes[name])
        values[name] = sizes.fill(kind, value, dynamic) if holds_dynamic else value
    if next(dynamic, None) is not None:
        raise ValueError(f"more '{sizes.OPERAND}' operands than dynamic attribute entries")
    return op, values


# (kind's base name, attribute) -> (its value, whether it holds DYNAMIC entries): the attributes
# of the shared context (texts.shared()), uniqued by MLIR and never freed, so one stands for its
# value; decoded values are immutable (numbers, tuples, dtypes, devices, slices). A Data
# attribute (a tensor's literal values) may be long: decoded each time.
_DECODED = {}


def _segment_sizes(attr):
    """The entries of an operandSegmentSizes attribute (remembered as _decoded's)."""
    key = ("operandSegmentSizes", attr)
    found = _DECODED.get(key)
    if found is None:
        found = tuple(ir.DenseI32ArrayAttr(attr))
        if attr.context is texts.shared():
            _DECODED[key] = found
    return found


def _decoded(kind, base, attr):
    key = (base, attr)
    found = _DECODED.get(key)
    if found is not None:
        return found
    value = attrs.decode(kind, attr)
    try:
        sizes.fill(kind, value, iter(()))
        found = (value, False)
    except ValueError:  # (a DYNAMIC entry: fill wanted an operand)
        found = (value, True)
    if base != "Data" and attr.context is texts.shared():
        _DECODED[key] = found
    return found


# signatures of ops that verified: an op's verification depends only on its name, attributes,
# operand types (and constant operands' values) and result types where every operand is a
# static tensor or a constant, so the same op repeated (N layers of one block) runs its meta
# function once, not once per copy and per verification of the module
_VERIFIED = set()


def _signature(operation):
    """The op's verification key, or None where it depends on more (a runtime number, a size
    computed by other ops, a `?` dim). Its types and attributes are the objects themselves in the
    shared context (texts.shared(): uniqued, so equal where their texts are, and never freed;
    printing them would cost more), their texts in any other."""
    operands = []
    for v in operation.operands:
        t = v.type
        if isinstance(t, ir.RankedTensorType):
            if not t.has_static_shape:
                return None
            operands.append(t)
        else:
            owner = v.owner
            if not attrs.is_constant_op(owner):
                return None
            operands.append((t, owner.attributes["value"]))
    attributes = operation.attributes
    key = (operation.name, tuple([(k, attributes[k]) for k in attributes]), tuple(operands),
           tuple(operation.results.types))
    return key if operation.context is texts.shared() else _printed(key)


def _printed(key):
    """A signature with its types and attributes as their texts (they may outlive their context)."""
    name, attributes, operands, results = key
    return (name, tuple((k, text(a)) for k, a in attributes),
            tuple(text(o) if isinstance(o, ir.Type) else (text(o[0]), text(o[1])) for o in operands),
            tuple(text(r) for r in results))


def _verifier(op):
    def verify_invariants(self):
        operation = self.operation
        key = _signature(operation)
        if key is not None and key in _VERIFIED:
            return True
        with operation.context, operation.location:
            ok = _verify(op, operation)
        if ok and key is not None:
            _VERIFIED.add(key)
        return ok

    return verify_invariants


def _verify(op, operation):
        def proxy_of(v):
            shape, dtype, device = attrs.tensor_meta(v.type)
            if device is not None and sizes.DYNAMIC in shape:  # `?`: a placeholder size
                shape = tuple(sizes.placeholder() if d == sizes.DYNAMIC else d for d in shape)
            return proxy_of_meta(shape, dtype, device, name="v")

        def leaf(v):  # (a func parameter of type i64 is an int symbol, or a runtime number)
            if isinstance(v.type, ir.RankedTensorType):
                return proxy_of(v)
            return sizes.placeholder() if str(v.type) == "i64" else None

        def value_of(v):  # (a tensor is its proxy; a runtime number not computed from sizes, a NumberProxy)
            value = sizes.evaluate(v, leaf)
            return proxy_of(v) if value is None else value

        # with `?` dims (or sizes given by operands) the meta function sees one placeholder size
        # for every `?`: what it cannot decide that way (e.g. a reshape of a `?` that is the product
        # of two symbols) is not an error; a dim it computes from a `?` must be `?`
        dynamic = any(sizes.is_dynamic_type(v.type) for v in operation.operands)
        try:
            with tracing.not_tracing():
                _, values = decode_op(operation, value_of)
        except Exception as e:  # noqa: BLE001 - operands that do not match the op's definition
            operation.location.emit_error(f"'{op.qualname}' op invalid operands: {e}")
            return False
        try:
            with tracing.not_tracing():
                out = run_meta(op, values)
        except Exception as e:  # the meta function's own check, e.g. shapes that do not broadcast
            if dynamic:
                return True
            operation.location.emit_error(f"'{op.qualname}' op invalid operands: {e}")
            return False
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        refs = [tracing.ref(o) for o in outs]
        expected = [attrs.tensor_type(r.shape, r.dtype, r.device, dynamic=True) for r in refs]
        try:
            got = [r.type for r in results_of(operation)]
        except ValueError as e:
            operation.location.emit_error(f"'{op.qualname}' op {e}")
            return False
        if len(expected) != len(got) or not all(_type_fits(g, e, dynamic) for g, e in zip(got, expected)):
            operation.location.emit_error(
                f"'{op.qualname}' op result types ({', '.join(map(str, got))}) do not match the inferred "
                f"types ({', '.join(map(str, expected))})")
            return False
        return True


def _type_fits(got, expected, dynamic):
    """A result type against the meta function's: equal; for an op on dynamic sizes, the same
    rank and element type where each dim computed from a `?` is `?` (a static dim the placeholder
    gives may not be the true one)."""
    if str(got) == str(expected):
        return True
    if not (dynamic and attrs.is_tensor_type(got) and attrs.is_tensor_type(expected)):
        return False
    got, expected = ir.RankedTensorType(got), ir.RankedTensorType(expected)
    return (got.element_type == expected.element_type and got.encoding == expected.encoding
            and got.rank == expected.rank
            and all(g == sizes.DYNAMIC or e != sizes.DYNAMIC for g, e in zip(got.shape, expected.shape)))


_defined = False
_context = None


def define_all():
    """The IRDL classes of every registered op, once per process (under mlir.LOCK). A failure
    part way leaves no class behind: the dialects' operation lists are as before, so the next
    call starts again (a half-defined dialect would make every later load fail)."""
    global _defined
    if _defined:
        return
    with LOCK:
        if _defined:
            return
        before = {name: list(d.operations) for name, d in _DIALECTS.items()}
        try:
            for op in registry.OPS.values():
                _define(op)
            _define_list_ops()
        except BaseException:
            for name, d in _DIALECTS.items():
                d.operations[:] = before[name]
            raise
        _defined = True


def context() -> ir.Context:
    """The MLIR context with our dialects loaded (one per process; use it under mlir.LOCK)."""
    global _context
    if _context is None:
        with LOCK:
            if _context is None:
                define_all()
                ctx = ir.Context()
                with ctx, ir.Location.unknown():
                    LTorch.load()
                    Thunder.load()
                texts.share(ctx)
                _context = ctx
    return _context


def op_class(qualname):
    define_all()
    for d in _DIALECTS.values():
        for cls in d.operations:
            if cls.OPERATION_NAME == qualname:
                return cls
    raise KeyError(qualname)
