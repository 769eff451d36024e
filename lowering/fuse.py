"""thunder-fuse: outline regions of ops that a fusion executor (lowering/executors.py) can run.

An op is claimed by the first of the executors (option `executors`, default linalg,cuda) whose
device its tensors are on (static shapes, element types the kernels handle) and that supports
it: a thunder prim (linalg and cuda: the prims `lowering/linalg` lowers, `kernel_prim`), or an
ltorch op whose decomposition consists of such prims only (found by decomposing a copy of it;
cached per signature). Each func (not the fusion callees themselves) is partitioned into
regions of connected ops claimed by one executor. Regions grow greedily in program order: an op
joins the regions of its producers when the merge keeps the graph of regions acyclic (no path
from the merged set back into itself through an op outside it), else it starts a region of its
own. Policy "auto" keeps the regions the executor's cost model (`worth_fusing`) expects to be
faster than torch's calls; "always" keeps every region. A kept region becomes

    func.func private @fusion_N(inputs) -> outputs attributes {thunder.executor = "linalg"}

(its ops decomposed into prims, with copies of the numbers they use) and, in the caller,
`func.call @fusion_N`. The caller is rescheduled in a topological order that keeps program order
where it can and the order of ops with side effects (random ops) as it was. Codegen binds
`fusion_N` to the executor's `compile(<callee>, "fusion_N")`."""
import heapq
import math
import re

from thunder.dialects.emit import loc_names
from thunder.dialects.mlir import func, ir
from thunder.lowering import executors as executor_registry
from thunder.lowering.decompose import decompose_module
from thunder.lowering.linalg.scalar import ELEMENTWISE, POW_SPECIAL, elt_bytes
from thunder.lowering.linalg.to_linalg import supported
from thunder.ops import registry

POLICIES = ("auto", "always")
# linalg, policy "auto": an untiled CPU kernel runs on one thread, pass after pass over whole
# tensors: only worth it while they fit in cache
UNTILED_MAX_BYTES = 1 << 18
DEFAULT_EXECUTORS = ("linalg", "cuda")

EXECUTOR_ATTR = "thunder.executor"
ELEMENT_TYPES = {"f16", "bf16", "f32", "f64", "i1", "i8", "i16", "i32", "i64"}
# prims whose lowering is a scalar libm call (no polynomial in linalg/approx.py): they stop
# LLVM's loop vectorizer, and such a kernel is many times slower than torch's vectorized
# (SLEEF) version, so they stay torch calls. The others have polynomials for f32 (f16/bf16
# compute in f32), not for f64.
LIBM_CALLS = {"thunder.sin", "thunder.cos", "thunder.atan2", "thunder.pow"}
NO_F64 = {"thunder.exp", "thunder.tanh", "thunder.erf", "thunder.log", "thunder.log1p", "thunder.expm1"}


def is_fusion(func_op):
    return EXECUTOR_ATTR in func_op.attributes


def _static(t, device="cpu"):
    """A tensor type of static shape and a kernel element type on this device type."""
    if not isinstance(t, ir.RankedTensorType):
        try:
            t = ir.RankedTensorType(t)
        except ValueError:
            return False
    if t.encoding is None:
        on = "cpu"
    else:
        try:
            on = ir.StringAttr(t.encoding).value.split(":")[0]
        except ValueError:
            return False
    return on == device and t.has_static_shape and str(t.element_type) in ELEMENT_TYPES


def _is_number(v):
    owner = v.owner
    return isinstance(owner, ir.OpView) and owner.operation.name == "arith.constant" and \
        not isinstance(v.type, ir.ShapedType)


# runtime numbers (core/numbers.py: a float argument under cache="symbolic values", t.item())
# that an elementwise prim takes: region inputs of scalar type, for executors that take them
RUNTIME_NUMBER_TYPES = ("f64", "i64")


def _runtime_number(v):
    return not isinstance(v.type, ir.ShapedType) and not _is_number(v) and str(v.type) in RUNTIME_NUMBER_TYPES


def _operand_ok(operation, v, executor):
    """A number, a tensor the executor can hold, or a runtime number of an elementwise prim
    (ltorch ops: checked again on their prims) for an executor that takes them."""
    if _is_number(v) or _static(v.type, executor.device):
        return True
    name = operation.name
    return executor.takes_numbers and _runtime_number(v) and (
        not name.startswith("thunder.") or name.removeprefix("thunder.") in ELEMENTWISE)


def _nonzero_number(v):
    if not _is_number(v):
        return False
    try:
        return ir.IntegerAttr(v.owner.attributes["value"]).value != 0
    except ValueError:
        return False


def claimed(operation, executor=None) -> bool:
    """Whether the executor (default linalg) can run this thunder prim inside a region."""
    executor = executor or executor_registry.get("linalg")
    if not operation.name.startswith("thunder."):
        return False
    if len(operation.results) != 1 or not _static(operation.results[0].type, executor.device):
        return False
    if not list(operation.results[0].uses):  # dead: a region of dead ops would have no outputs
        return False
    if not all(_operand_ok(operation, v, executor) for v in operation.operands):
        return False
    return executor.supports(operation)


def kernel_prim(operation) -> bool:
    """Whether a prim has a kernel lowering (lowering/linalg, shared by the linalg and cuda
    executors) without libm calls or integer division by a tensor."""
    name = operation.name
    if not supported(name):
        return False
    elt = str(ir.RankedTensorType(operation.results[0].type).element_type)
    is_int = elt.startswith("i")
    if name == "thunder.pow" and (is_int or (_is_number(operation.operands[1]) and
                                             _number(operation.operands[1]) in POW_SPECIAL)):
        pass  # integer pow, x ** 2, x ** 0.5, ...: multiplications or a sqrt, no libm call
    elif name in LIBM_CALLS or (name in NO_F64 and elt == "f64"):
        return False
    if name == "thunder.div" and is_int and not _nonzero_number(operation.operands[1]):
        return False  # torch raises ZeroDivisionError for x / 0, which a kernel cannot
    return True


_DECOMPOSES_TO_CLAIMED = {}  # ltorch op signature -> bool


def claimable(operation, executor=None) -> bool:
    """claimed, or an ltorch op (no side effects, live results of static shape on the
    executor's device) whose decomposition is made of claimed prims."""
    executor = executor or executor_registry.get("linalg")
    if operation.name.startswith("thunder."):
        return claimed(operation, executor)
    op = registry.OPS.get(operation.name)
    if op is None or op.dialect != "ltorch" or op.decomposition is None or op.random or op.effects:
        return False
    device = executor.device
    if not operation.results or not all(_static(r.type, device) and list(r.uses) for r in operation.results):
        return False
    if not all(_operand_ok(operation, v, executor) for v in operation.operands):
        return False
    key = (executor.name, operation.name, str(operation.attributes),
           tuple(str(v.owner.attributes["value"]) if _is_number(v) else str(v.type) for v in operation.operands))
    if key not in _DECOMPOSES_TO_CLAIMED:
        _DECOMPOSES_TO_CLAIMED[key] = _decomposes_to_claimed(operation, executor)
    return _DECOMPOSES_TO_CLAIMED[key]


def _decomposes_to_claimed(operation, executor):
    scratch = ir.Module.create()
    tensors = [v for v in operation.operands if not _is_number(v)]
    numbers = [v for v in operation.operands if _is_number(v)]
    f = _build_func(scratch.body, "scratch", [operation], tensors, numbers, list(operation.results))
    try:
        decompose_module(scratch.operation)
    except Exception:  # a decomposition that does not take these types
        return False
    body = f.regions[0].blocks[0].operations
    return all(o.operation.name in ("arith.constant", "func.return") or claimed(o.operation, executor) for o in body)


def _number(v):
    attr = v.owner.attributes["value"]
    return ir.FloatAttr(attr).value if isinstance(attr, ir.FloatAttr) else ir.IntegerAttr(attr).value


def _pure(operation):
    name = operation.name
    if name == "arith.constant":
        return True
    op = registry.OPS.get(name)
    return op is not None and not (op.random or op.effects)


def _value_name(v):
    owner = v.owner
    if isinstance(owner, ir.Block):
        names = loc_names(v.location)
        return names[0] if names else None
    names = loc_names(owner.location)
    for i, r in enumerate(owner.results):
        if r == v:
            return names[i] if i < len(names) else None
    return None


class _Graph:
    """The ops of one block (constants aside), their producers, and a union-find of regions."""

    def __init__(self, block):
        self.ops = [o.operation for o in block.operations
                    if o.operation.name not in ("arith.constant", "func.return")]
        self.index = {}
        for i, o in enumerate(self.ops):
            for r in o.results:
                self.index[r] = i
        self.preds = []
        last_effect = last_check = None
        for i, o in enumerate(self.ops):
            ps = {self.index[v] for v in o.operands if v in self.index}
            if not _pure(o):  # keep ops with side effects in their order
                if last_effect is not None:
                    ps.add(last_effect)
                last_effect = i
            if last_check is not None:
                # nothing runs before a check of a value the trace was specialized on (ops/values.py):
                # what follows it may hold only for that value (a shape read from a tensor, say)
                ps.add(last_check)
            if o.name == "ltorch.check":
                last_check = i
            self.preds.append(ps)
        self.parent = {}  # op index -> parent op index (union-find); only ops in a region
        self.members = {}  # root -> [op indices]

    def find(self, i):
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def node(self, i):
        return ("r", self.find(i)) if i in self.parent else ("o", i)

    def node_ops(self, n):
        return self.members[n[1]] if n[0] == "r" else [n[1]]

    def merge_ok(self, roots, i):
        """Whether region roots + op i can be one region: no path from the set back into it
        through an op outside it (checked on the graph of regions, which stays acyclic)."""
        inside = {i}
        for r in roots:
            inside.update(self.members[r])
        seen, stack = set(), []
        for o in inside:
            for p in self.preds[o]:
                if p not in inside:
                    n = self.node(p)
                    if n not in seen:
                        seen.add(n)
                        stack.append(n)
        while stack:
            n = stack.pop()
            for o in self.node_ops(n):
                for p in self.preds[o]:
                    if p in inside:
                        return False
                    m = self.node(p)
                    if m != n and m not in seen:
                        seen.add(m)
                        stack.append(m)
        return True

    def partition(self, claimed_ops):
        """Regions of connected ops; claimed_ops: {op index: executor name} (one per region)."""
        for i in range(len(self.ops)):
            if i not in claimed_ops:
                continue
            candidates = []
            for p in sorted(self.preds[i]):
                if p in self.parent and claimed_ops[p] == claimed_ops[i]:
                    r = self.find(p)
                    if r not in candidates:
                        candidates.append(r)
            chosen = []
            for r in candidates:
                if self.merge_ok(chosen + [r], i):
                    chosen.append(r)
            if not chosen:
                self.parent[i] = i
                self.members[i] = [i]
                continue
            root = chosen[0]
            for r in chosen[1:]:
                self.parent[r] = root
                self.members[root] += self.members.pop(r)
            self.parent[i] = root
            self.members[root].append(i)
        return [sorted(m) for _, m in sorted(self.members.items())]

    def dissolve(self, ops):
        for o in ops:
            self.parent.pop(o, None)
        for o in ops:
            self.members.pop(o, None)

    def schedule(self, regions):
        """Nodes (regions as lists, single ops as ints) in a topological order, earliest first."""
        node_of = {}
        for k, ops in enumerate(regions):
            for o in ops:
                node_of[o] = ("r", k)
        nodes = {}
        for i in range(len(self.ops)):
            n = node_of.get(i, ("o", i))
            nodes.setdefault(n, []).append(i)
        succs = {n: set() for n in nodes}
        indeg = {n: 0 for n in nodes}
        for n, ops in nodes.items():
            for o in ops:
                for p in self.preds[o]:
                    m = node_of.get(p, ("o", p))
                    if m != n and n not in succs[m]:
                        succs[m].add(n)
                        indeg[n] += 1
        heap = [(min(ops), n) for n, ops in nodes.items() if indeg[n] == 0]
        heapq.heapify(heap)
        order = []
        while heap:
            _, n = heapq.heappop(heap)
            order.append(regions[n[1]] if n[0] == "r" else n[1])
            for m in succs[n]:
                indeg[m] -= 1
                if indeg[m] == 0:
                    heapq.heappush(heap, (min(nodes[m]), m))
        if len(order) != len(nodes):
            raise RuntimeError("thunder-fuse: the regions form a cycle (internal error)")
        return order


def _region_values(members):
    """(inputs, numbers, outputs) of a region of ops: values from outside (tensors, numbers)
    and results used outside."""
    produced = {r for o in members for r in o.results}
    inputs, numbers = [], []
    for o in members:
        for v in o.operands:
            if v in produced:
                continue
            if _is_number(v):
                if v not in numbers:
                    numbers.append(v)
            elif v not in inputs:
                inputs.append(v)
    outputs = []
    for o in members:
        for r in o.results:
            if any(not _inside(u.owner, produced) for u in r.uses):
                outputs.append(r)
    return inputs, numbers, outputs


def _build_func(where, name, members, inputs, numbers, outputs):
    """A private func @name (before `where`, an op, or at the end of a block) holding copies of
    members (in order) and of the numbers they use, taking inputs and returning outputs."""
    with ir.InsertionPoint(where):
        f = func.FuncOp(name, ([v.type for v in inputs], [v.type for v in outputs]))
    f.attributes["sym_visibility"] = ir.StringAttr.get("private")
    arg_locs = [ir.Location.name(n) if (n := _value_name(v)) else ir.Location.unknown() for v in inputs]
    block = f.add_entry_block(arg_locs)
    mapping = dict(zip(inputs, block.arguments))
    with ir.InsertionPoint(block):
        for c in numbers:
            new = ir.Operation.create("arith.constant", results=[c.type],
                                      attributes={"value": c.owner.attributes["value"]}, loc=c.owner.location)
            mapping[c] = new.results[0]
        for o in members:
            attrs = {k: o.attributes[k] for k in o.attributes}
            new = ir.Operation.create(o.name, results=[r.type for r in o.results],
                                      operands=[mapping[v] for v in o.operands], attributes=attrs, loc=o.location)
            for r, nr in zip(o.results, new.results):
                mapping[r] = nr
        func.ReturnOp([mapping[r] for r in outputs])
    return f


def worth_fusing(members, inputs, outputs, cost=None):
    """Policy "auto": whether one kernel call is expected to beat the ops as torch calls (each a
    dispatch plus reading its operands and writing its results; views move no data), with the
    executor's cost model (default linalg's)."""
    cost = cost or executor_registry.get("linalg").cost
    torch_seconds = sum(cost.op_seconds + (0 if _is_view(o) else
                                           sum(_bytes(v) for v in o.operands if not _is_number(v)) +
                                           sum(_bytes(r) for r in o.results)) / cost.bytes_per_second
                        for o in members)
    kernel_seconds = cost.call_seconds + (sum(_bytes(v) for v in inputs) +
                                          sum(_bytes(v) for v in outputs)) / cost.bytes_per_second
    return kernel_seconds < torch_seconds


# prims that torch runs as views of their operand (thunder.reshape may copy, but mostly does not)
VIEW_PRIMS = {"thunder.reshape", "thunder.transpose", "thunder.broadcast_in_dim", "thunder.squeeze", "thunder.slice"}


def _is_view(operation):
    op = registry.OPS.get(operation.name)
    return operation.name in VIEW_PRIMS or (op is not None and op.is_view)


def _bytes(v):
    if not isinstance(v.type, ir.ShapedType):  # a runtime number
        return 8
    t = ir.RankedTensorType(v.type)
    return math.prod(t.shape) * elt_bytes(str(t.element_type))


def _inside(user, produced):
    op = user.operation if hasattr(user, "operation") else user
    return len(op.results) > 0 and op.results[0] in produced


def _child_loc(loc):
    try:
        return ir.NameLoc(loc).child_loc
    except (ValueError, TypeError):
        return loc


def _next_index(module_block):
    n = 0
    for op in module_block.operations:
        if op.operation.name == "func.func":
            m = re.fullmatch(r"fusion_(\d+)", ir.StringAttr(op.attributes["sym_name"]).value)
            if m:
                n = max(n, int(m.group(1)) + 1)
    return n


def _without_tail_views(graph, ops):
    """The region without views whose results only leave it (a transposed or reshaped copy of
    a result, written by the kernel, costs memory traffic; torch's view of it costs none)."""
    ops = list(ops)
    while True:
        inside = {r for i in ops for r in graph.ops[i].results}
        used_inside = {v for i in ops for v in graph.ops[i].operands if v in inside}
        tail = [i for i in ops if _is_view(graph.ops[i]) and not any(r in used_inside for r in graph.ops[i].results)]
        if not tail:
            return ops
        ops = [i for i in ops if i not in tail]


def _outline_region(f, graph, ops, name, policy, executor):
    """(ops, callee, inputs, outputs, name) for a region kept by the policy, or None. With
    policy auto, a region the executor would not run well (linalg: a kernel that is not tiled,
    see to_linalg.tiling) first leaves its tail reductions (a bias gradient summed over rows) to
    torch, so the rest tiles by rows."""
    while True:
        ops = _without_tail_views(graph, ops)
        if not ops:
            return None
        members = [graph.ops[i] for i in ops]
        inputs, numbers, outputs = _region_values(members)
        if policy == "auto" and not worth_fusing(members, inputs, outputs, executor.cost):
            return None
        callee = _build_func(f, name, members, inputs, numbers, outputs)
        callee.attributes[EXECUTOR_ATTR] = ir.StringAttr.get(executor.name)
        decompose_module(callee.operation)
        _erase_unused_numbers(callee.regions[0].blocks[0])
        text = region_text(callee)
        if not executor.accepts(text, name):
            callee.operation.erase()
            return None
        if policy == "always" or executor.runs_well is None or executor.runs_well(text, name):
            return ops, callee, inputs, outputs, name
        callee.operation.erase()
        tail = _tail_reductions(graph, ops)
        if not tail or len(tail) == len(ops):
            # an untiled kernel runs on one thread, pass after pass over whole tensors: only
            # worth it while they fit in cache
            if sum(_bytes(v) for v in inputs + outputs) > UNTILED_MAX_BYTES:
                return None
            return _outline_region(f, graph, ops, name, "always", executor)
        ops = [i for i in ops if i not in tail]


def _tail_reductions(graph, ops):
    """Ops of the region that reduce rank (reductions) and whose results only leave it."""
    inside = {r for i in ops for r in graph.ops[i].results}
    used_inside = {v for i in ops for v in graph.ops[i].operands if v in inside}
    tail = []
    for i in ops:
        o = graph.ops[i]
        tensors = [v for v in o.operands if isinstance(v.type, ir.ShapedType)]
        if tensors and not any(r in used_inside for r in o.results) and \
                ir.RankedTensorType(o.results[0].type).rank < ir.RankedTensorType(tensors[0].type).rank:
            tail.append(i)
    return tail


def fuse_func(f, module_block, counter, policy="auto", executors=DEFAULT_EXECUTORS):
    block = f.regions[0].blocks[0]
    graph = _Graph(block)
    candidates = [executor_registry.get(e) for e in executors]
    claimed_ops = {}
    for i, o in enumerate(graph.ops):
        for e in candidates:  # the first executor that claims it
            if claimable(o, e):
                claimed_ops[i] = e.name
                break
    # outline; a region the lowering rejects stays as torch calls (dropping it keeps the
    # graph of the other regions acyclic)
    outlined = []
    for ops in graph.partition(claimed_ops):
        executor = executor_registry.get(claimed_ops[ops[0]])
        region = _outline_region(f, graph, ops, f"fusion_{counter}", policy, executor)
        if region is not None:
            counter += 1
            outlined.append(region)
    if not outlined:
        return counter
    order = graph.schedule([o[0] for o in outlined])
    by_first = {o[0][0]: o for o in outlined}
    terminator = list(block.operations)[-1]
    replaced = {}  # region output -> call result
    for item in order:
        if isinstance(item, int):
            graph.ops[item].move_before(terminator)
            continue
        ops, callee, inputs, outputs, name = by_first[item[0]]
        names = ",".join(_value_name(v) or "t" for v in outputs)
        with ir.InsertionPoint(terminator):
            call = ir.Operation.create("func.call", results=[v.type for v in outputs], operands=[replaced.get(v, v) for v in inputs],
                                       attributes={"callee": ir.FlatSymbolRefAttr.get(name)},
                                       loc=ir.Location.name(names, childLoc=_child_loc(graph.ops[ops[-1]].location)))
        for v, nv in zip(outputs, call.results):
            v.replace_all_uses_with(nv)
            replaced[v] = nv
    for ops, *_ in outlined:
        for i in reversed(ops):
            graph.ops[i].erase()
    _erase_unused_numbers(block)  # numbers only the regions used
    return counter


def _erase_unused_numbers(block):
    for o in list(block.operations):
        if o.operation.name == "arith.constant" and not list(o.results[0].uses):
            o.operation.erase()


def fuse_module(module_op, policy="auto", executors=DEFAULT_EXECUTORS):
    """executors: names (or one comma-separated string, as the pass option
    `thunder-fuse{executors=linalg,cuda}` gives it), in order of preference."""
    if policy not in POLICIES:
        raise ValueError(f"thunder-fuse: unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    if isinstance(executors, str):
        executors = [e for e in executors.split(",") if e]
    for e in executors:
        executor_registry.get(e)
    module_block = module_op.regions[0].blocks[0]
    with module_op.context, ir.Location.unknown():
        counter = _next_index(module_block)
        funcs = [op for op in module_block.operations
                 if op.operation.name == "func.func" and not is_fusion(op) and len(op.regions[0].blocks) > 0]
        for f in funcs:
            counter = fuse_func(f, module_block, counter, policy, executors)


def region_text(func_op):
    """The callee as text for lowering/linalg. Printed in its own scope, without verifying:
    the default would verify (and number values over) the whole module for every region."""
    return func_op.operation.get_asm(enable_debug_info=False, use_local_scope=True, assume_verified=True)


def fusion_callees(module_op):
    """name -> func op of the fusion callees in a module."""
    out = {}
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and is_fusion(op):
            out[ir.StringAttr(op.attributes["sym_name"]).value] = op
    return out
