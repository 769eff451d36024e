"""Re-inplacing: the generated program updates an input in place where the trace computes the
input's new value functionally and copies it back at the end.

thunder records an in-place update of an input (`cache.index_copy_(2, pos, k)`, `x[i] = v`,
`n.add_(1)`) as the functional op, whose result stands for the input from then on
(`t = torch.Tensor.index_copy(cache, 2, pos, k)`); thunder-functionalize makes the input's last
value an extra result, which the program copies back (`cache.copy_(t)`). That is a copy of the
whole tensor in the functional op and another in the copy back, where eager writes one slice (a
decode step with a static KV cache: two copies of every layer's cache per token). `plan` finds the
updates the program may run in place instead (`t = torch.Tensor.index_copy_(cache, 2, pos, k)`:
t is then the input itself, and its copy back is dropped), where nothing can tell the difference:

- the input's new value comes from a chain of such ops (each op's first tensor operand is the
  previous one's result, the first one's the input; `ltorch.no_grad_update` and `ltorch.detach`
  between them pass the value on), each with an in-place form (`inplace_form`) and a result of
  the input's shape, dtype and device;
- no value that shares memory with an earlier version of the input (the input itself, views of
  it, the results of ops that may return it) is read at or after the op that overwrites that
  version, except as that op's own first operand (once); what `PASS_ON` ops do with a value is
  no read (their results' readers are); the results (the return) read the last version only;
- the function has no `ltorch.check` (a failing check runs another program on the same inputs,
  which must still hold their old values).

Only programs that record no autograd history (codegen's grad_free) are re-inplaced: there an
in-place update of a tensor that requires grad is what eager did too (under no_grad). `mark`
writes the plan into the func (runtime/grad_free_rewrites.py, before code generation), which
codegen follows: an op with IN_PLACE is printed in its in-place form, and the inputs in
UPDATED_IN_PLACE are not copied back."""
from thunder.core.pysource import Name, py_repr
from thunder.dialects import attrs
from thunder.dialects.definitions import LIST_OP, UNLIST_OP, decode_op, expand, results_of
from thunder.dialects.emit import mutated_inputs
from thunder.dialects.mlir import ir
from thunder.ops.execute import call_args, inplace_method

# ops whose result, in a program that records no autograd history, is one of their operands (or
# a tensor sharing its memory) and which read no values: op name -> that operand's index
PASS_ON = {"ltorch.no_grad_update": 1, "ltorch.detach": 0}
IN_PLACE = "thunder.in_place"  # on an op the program runs in place: the index of the operand it updates
UPDATED_IN_PLACE = "thunder.updated_in_place"  # on the func: the inputs updated in place (no copy back)


def inplace_form(op, values, outs):
    """(the operand the op may update in place with its result, the statements that do so and
    bind the result to outs[0]) or None: values are the op's decoded arguments (Names). The op's
    own `python_inplace` where it has one (the fallback's torch calls), else the in-place flag of
    ops that have one (F.relu(x, inplace=True)), else the `_` method of a torch op
    (torch.add -> torch.Tensor.add_, with the same arguments) or of an impl function
    (impl.setitem -> impl.setitem_)."""
    if op.python_inplace is not None:
        return op.python_inplace(values, outs)
    if (op.dialect != "ltorch" or op.python is not None or op.is_view or op.returns_input or op.random
            or op.effects or op.strided or op.returns_sequence or not op.params):
        return None
    first = values.get(op.params[0].name)
    if not isinstance(first, Name) or first.device is None:  # (a tensor, not a number)
        return None
    if any(p.name == "inplace" for p in op.params):
        target, values = op.torch_name, {**values, "inplace": True}
    else:
        target = inplace_method(op.torch_name)
        if target is None:
            return None
    args, kwargs = call_args(op, values)
    if not args or args[0] is not first:
        return None
    call = ", ".join([py_repr(a) for a in args] + [f"{k}={py_repr(v)}" for k, v in kwargs.items()])
    return first, [f"{outs[0]} = {target}({call})"]


class Plan:
    """What the program runs in place: `ops` (each operation to emit in its in-place form -> the
    operand it updates) and `dropped` (the inputs whose copy back at the end is left out)."""

    def __init__(self):
        self.ops, self.dropped = {}, set()


def plan(f, aliases):
    """The Plan for func f. aliases(values) -> a tracker of what may share memory with values
    (codegen's _GradLeaves: holds(value), update(operation))."""
    out = Plan()
    mutated = mutated_inputs(f)
    if not mutated:
        return out
    block = f.regions[0].blocks[0]
    ops = [o for o in block.operations if o.operation.name not in (LIST_OP, UNLIST_OP)
           and o.operation.name not in attrs.CONSTANT_OPS]
    if any(o.operation.name == "ltorch.check" for o in ops):
        return out
    ret = ops[-1]
    tail = expand(ret.operands)[-len(mutated):]
    for i, new in zip(mutated, tail):
        x = block.arguments[i]
        chain = _chain(x, new)
        if chain and _safe(x, chain, ops, aliases):
            out.ops.update(chain)
            out.dropped.add(i)
    return out


def mark(f, plan):
    """Writes plan into func f: IN_PLACE on its ops, UPDATED_IN_PLACE on f."""
    i64 = ir.IntegerType.get_signless(64)
    for operation, operand in plan.ops.items():
        operation.attributes[IN_PLACE] = ir.IntegerAttr.get(i64, list(operation.operands).index(operand))
    if plan.dropped:
        f.attributes[UPDATED_IN_PLACE] = ir.DenseI64ArrayAttr.get(sorted(plan.dropped))


def updated_operand(operation):
    """The operand an op marked IN_PLACE updates, None for the other ops."""
    if IN_PLACE not in operation.attributes:
        return None
    return operation.operands[ir.IntegerAttr(operation.attributes[IN_PLACE]).value]


def updated_in_place(f):
    """The inputs (indices) of func f updated in place, whose copy back is left out."""
    return set(ir.DenseI64ArrayAttr(f.attributes[UPDATED_IN_PLACE])) if UPDATED_IN_PLACE in f.attributes else set()


def _self_operand(operation):
    """The ir.Value the operation may update in place (inplace_form), or None."""
    try:
        values_of = {}

        def name(v):
            n = Name("_", *attrs.tensor_meta(v.type))
            values_of[id(n)] = v
            return n

        op, values = decode_op(operation.operation, name)
        form = inplace_form(op, values, ["_"])
    except (NotImplementedError, ValueError):
        return None
    return None if form is None else values_of[id(form[0])]


def _chain(x, new):
    """[(operation, the operand it updates)] from x to new, or None (see the module's doc)."""
    chain, value, meta = [], new, attrs.tensor_meta(x.type)
    while value != x:
        operation = value.owner
        if isinstance(operation, ir.Block):
            return None  # another argument
        if operation.operation.name in PASS_ON:
            value = operation.operands[PASS_ON[operation.operation.name]]
            continue
        if operation.operation.name == UNLIST_OP:  # (results of a variadic op: dialects/lists.py)
            operation = operation.operands[0].owner
        if results_of(operation) != [value] or attrs.tensor_meta(value.type) != meta:
            return None
        self = _self_operand(operation)
        if self is None:
            return None
        chain.append((operation.operation, self))
        value = self
    return chain[::-1] or None


def _safe(x, chain, ops, aliases):
    """Whether running chain in place changes nothing any op or result reads (module doc)."""
    at = {op.operation: k for k, op in enumerate(ops)}
    writes = [at[op] for op, _ in chain]  # where version k + 1 of x overwrites version k
    version = {x: 0}
    for k, (op, _) in enumerate(chain):
        version[results_of(op)[0]] = k + 1
    for o in ops:  # (what passes a version on holds it too)
        i = PASS_ON.get(o.operation.name)
        if i is not None and o.operands[i] in version:
            version[o.results[0]] = version[o.operands[i]]
    last = len(chain)
    chained = {op for op, _ in chain}
    for k in range(last):  # the readers of version k, which the write at writes[k] overwrites
        tracker = aliases([v for v, j in version.items() if j == k])
        for index, o in enumerate(ops):
            operation = o.operation
            i = PASS_ON.get(operation.name)
            if i is not None:  # (no read: its result's readers are)
                if tracker.holds(o.operands[i]):
                    tracker.values.update(results_of(operation))
                continue
            if operation not in chained:
                tracker.update(o)
            read = expand(o.operands)
            held = [v for v in read if tracker.holds(v)]
            if not held or index < writes[k]:
                continue
            if index == writes[k] and held == [chain[k][1]] and operation == chain[k][0]:
                continue  # the op updating it, as its first operand only
            return False
    return True
