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
import contextvars
import heapq
import re

from thunder.dialects.emit import loc_names
from thunder.dialects.mlir import func, ir
from thunder.dialects.texts import text as text_of
from thunder.dialects import sizes
from thunder.dialects.lift import static_text
from thunder.lowering import detach_cost, edge_ops, executors as executor_registry, region_reuse, symbolic_sizes
from thunder.lowering.executors import is_number
from thunder.lowering.decompose import decompose_module, decompose_op
from thunder.lowering.edge_ops import is_view as _is_view
from thunder.lowering.linalg.scalar import ELEMENTWISE, elt_bytes
from thunder.lowering.layout import move_reshapes_across_conversions, sink_reshapes, sink_transposes
from thunder.lowering.layout.values import TRANSPOSES, ranked, shape as _shape
from thunder.lowering.linalg.types_and_maps import SCALAR_TYPES
from thunder.ops import registry
from thunder.core import size_choices, symbols
from thunder.core.scoped import scoped

POLICIES = ("auto", "always")
# linalg, policy "auto": an untiled CPU kernel runs on one thread, pass after pass over whole
# tensors: only worth it while they fit in cache
UNTILED_MAX_BYTES = 1 << 18
DEFAULT_EXECUTORS = ("linalg", "cuda")
# how far (ops in program order) after a region's last op a sibling (an op reading a value the
# region reads too, and nothing it alone produces) may still join it (_Graph.joins)
SIBLING_WINDOW = 16

EXECUTOR_ATTR = "thunder.executor"
# a region func's (with dynamic sizes, while thunder-fuse runs): [position, count] of the size
# computations it begins with (after its numbers), which are no ops of the region
COMPUTED_SIZES = "thunder.computed_sizes"
ELEMENT_TYPES = {"f16", "bf16", "f32", "f64", "i1", "i8", "i16", "i32", "i64"}
# prims whose lowering is a scalar libm call (no polynomial in linalg/approx.py): they stop
# LLVM's loop vectorizer, and such a kernel is many times slower than torch's vectorized
# (SLEEF) version, so they stay torch calls. The others have polynomials for f32 (f16/bf16
# compute in f32), not for f64.


def is_fusion(func_op):
    return EXECUTOR_ATTR in func_op.attributes


def _static(t, device="cpu", dynamic=False):
    """A tensor type of static shape (or, where dynamic, `?` dims too) and a kernel element type
    on this device type."""
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
    return on == device and (dynamic or t.has_static_shape) and text_of(t.element_type) in ELEMENT_TYPES


def _dynamic(executor):
    """Whether the executor may claim values with `?` dims now: it compiles regions of dynamic
    sizes and the func fused has them (symbolic_sizes.over)."""
    return executor.dynamic_sizes and symbolic_sizes.current() is not None


def _tensor_ok(v, executor):
    """A tensor value the executor can hold: static, or with `?` dims whose sizes are known."""
    dynamic = _dynamic(executor)
    return _static(v.type, executor.device, dynamic) and (not dynamic or symbolic_sizes.known(v))


def _size_value(v):
    """A size (index) a size computation made: a reshape's shape, a layer norm's normalized
    shape. A region computes its own from its arguments' sizes (_build_func), so it takes none."""
    return isinstance(v.type, ir.IndexType) and isinstance(v.owner, ir.OpView) and \
        v.owner.operation.name in sizes.PYTHON


def _runtime_number(v):
    """A runtime number (core/numbers.py: a float argument under cache="symbolic values", t.item())
    of a type kernels take: a region input of scalar type, for executors that take them."""
    return not isinstance(v.type, ir.ShapedType) and not is_number(v) and text_of(v.type) in SCALAR_TYPES


def _operand_ok(operation, v, executor):
    """A number, a tensor the executor can hold, a size (dynamic sizes), or a runtime number of an
    elementwise prim (ltorch ops: checked again on their prims) for an executor that takes them."""
    if is_number(v) or _tensor_ok(v, executor) or (_dynamic(executor) and _size_value(v)):
        return True
    name = operation.name
    return executor.takes_numbers and _runtime_number(v) and (
        not name.startswith("thunder.") or name.removeprefix("thunder.") in ELEMENTWISE)


def claimed(operation, executor=None) -> bool:
    """Whether the executor (default linalg) can run this thunder prim inside a region."""
    executor = executor or executor_registry.get("linalg")
    if not operation.name.startswith("thunder."):
        return False
    if len(operation.results) != 1 or not _tensor_ok(operation.results[0], executor):
        return False
    if not list(operation.results[0].uses):  # dead: a region of dead ops would have no outputs
        return False
    if not all(_operand_ok(operation, v, executor) for v in operation.operands):
        return False
    return executor.supports(operation)


_DECOMPOSES_TO_CLAIMED = {}  # ltorch op signature -> bool


def _may_be_claimable(name):
    """Whether an op of this name may be claimable: a thunder prim, or an ltorch op without side
    effects that has a decomposition."""
    if name.startswith("thunder."):
        return True
    op = registry.OPS.get(name)
    return op is not None and op.dialect == "ltorch" and op.decomposition is not None and not (op.random or op.effects)


def claimable(operation, executor=None, signature=None) -> bool:
    """claimed, or an ltorch op (no side effects, live results of static shape on the
    executor's device) whose decomposition is made of claimed prims. signature: a function
    giving _signature(operation) (_Graph.signature: remembered per op)."""
    executor = executor or executor_registry.get("linalg")
    if operation.name.startswith("thunder."):
        return claimed(operation, executor)
    if not _may_be_claimable(operation.name):
        return False
    # (results nothing uses are fine while one is used: training's native_layer_norm whose
    # mean and rstd the backward recomputes; the region does not return them)
    if not all(_tensor_ok(r, executor) for r in operation.results) or not any(list(r.uses) for r in operation.results):
        return False
    if not all(_operand_ok(operation, v, executor) for v in operation.operands):
        return False
    key = (executor.name, (signature or _signature)(operation), _dims_key([*operation.operands, *operation.results]))
    if key not in _DECOMPOSES_TO_CLAIMED:
        _DECOMPOSES_TO_CLAIMED[key] = _decomposes_to_claimed(operation, executor)
    return _DECOMPOSES_TO_CLAIMED[key]


def _signature(operation, numbers=None):
    """numbers: the numbers among the values operation may read (_Graph.numbers), where known."""
    # (the attributes by their text: str() of the attribute map is its Python object's address)
    attributes = operation.attributes
    # (list comprehensions: a generator costs a frame resumption an item, on every op of a func)
    return (operation.name, tuple(sorted([(k, text_of(attributes[k])) for k in attributes])),
            tuple([text_of(v.owner.attributes["value"]) if (v in numbers if numbers is not None else is_number(v))
                   else text_of(v.type) for v in operation.operands]))


def _dims_key(values):
    """Which `?` dims of values are one size, in a func with dynamic sizes (what decides, with
    their types, what a decomposition of them makes): each dim numbered by its expression's
    first appearance, so that ops of the same pattern share what is decided by it; () otherwise."""
    if symbolic_sizes.current() is None:
        return ()
    numbers = {}
    return tuple(tuple(numbers.setdefault(d, len(numbers)) for d in symbolic_sizes.dims_attr(v))
                 if isinstance(v.type, ir.RankedTensorType) and not ir.RankedTensorType(v.type).has_static_shape
                 and symbolic_sizes.known(v) else None for v in values)


def _scratch(operation):
    """(module, func): a copy of the op alone in a func of a module of its own."""
    scratch = ir.Module.create()
    tensors = [v for v in operation.operands if not is_number(v) and not _size_value(v)]
    numbers = [v for v in operation.operands if is_number(v)]
    return scratch, _build_func(scratch.body, "scratch", [operation], tensors, numbers, list(operation.results))


def _decomposes_to_claimed(operation, executor):
    if not _sizes_readable([operation], [v for v in operation.operands if not _size_value(v)]):
        return False
    scratch, f = _scratch(operation)
    try:
        decompose_module(scratch.operation)
    except Exception:  # a decomposition that does not take these types
        return False
    body = f.regions[0].blocks[0].operations
    with symbolic_sizes.over(f):
        return all(o.operation.name in ("arith.constant", "func.return") or claimed(o.operation, executor) or
                   _is_input_check(o.operation) or o.operation.name in sizes.PYTHON for o in body)


def _is_check(operation):
    """An op that only checks values and raises (effects, no results)."""
    op = registry.OPS.get(operation.name)
    return op is not None and op.effects and not operation.results


def _is_input_check(operation):
    """An op of a decomposition that only checks the values of the region's inputs and raises
    (nll_loss's check_targets: eager's IndexError, which a kernel cannot raise): it runs as a
    torch call before the kernel (_take_input_checks, _call_region)."""
    return _is_check(operation) and all(isinstance(v.owner, ir.Block) for v in operation.operands)


def _take_input_checks(callee):
    """Remove the input checks from a decomposed callee: [(name, input positions, attributes)]."""
    checks = []
    for o in list(callee.regions[0].blocks[0].operations):
        o = o.operation
        if _is_input_check(o):
            checks.append((o.name, [ir.BlockArgument(v).arg_number for v in o.operands],
                           {k: o.attributes[k] for k in o.attributes}))
            o.erase()
    return checks


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
        self.ops = []
        self.numbers, self.returned = set(), set()  # (is_number's values; what the func returns)
        for o in block.operations:
            o = o.operation
            if o.name == "arith.constant":
                if not isinstance(o.results[0].type, ir.ShapedType):
                    self.numbers.add(o.results[0])
            elif o.name == "func.return":
                self.returned.update(o.operands)
            else:
                self.ops.append(o)
        # (an op holding ops, which may read the block's values: uses are then read from MLIR)
        self.nested = any(len(o.regions) for o in self.ops)
        self.index = {}
        self.result_number = {}  # a result of an op of several -> its position (region_key)
        self.operands = []  # op index -> its operands (read once from MLIR)
        self.results = []  # op index -> its results
        for i, o in enumerate(self.ops):
            results = list(o.results)
            self.results.append(results)
            self.operands.append(list(o.operands))
            for n, r in enumerate(results):
                self.index[r] = i
                if n:
                    self.result_number[r] = n
        self.preds = []
        self.users = [[] for _ in self.ops]  # op index -> the ops using its results (data edges)
        # a value no op of self.ops produces or an op's result -> the ops reading it, in order
        self.readers = {}
        last_effect = last_check = None
        index, readers = self.index, self.readers
        for i, o in enumerate(self.ops):
            ps = set()
            for v in self.operands[i]:
                readers.setdefault(v, []).append(i)
                p = index.get(v)
                if p is not None:
                    ps.add(p)
            for p in ps:
                self.users[p].append(i)
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
        self._signatures = {}  # op -> _signature(op)
        self._keys = {}  # op index -> (its signature, its results' types)
        self._names = {}  # op index -> its results' value names

    def value_name(self, v):
        """_value_name(v), the names of an op's results read once."""
        i = self.index.get(v)
        if i is None:
            return _value_name(v)
        names = self._names.get(i)
        if names is None:
            names = self._names[i] = loc_names(self.ops[i].location)
        n = self.result_number.get(v, 0)
        return names[n] if n < len(names) else None

    def signature(self, operation):
        """_signature(operation), computed once per op."""
        s = self._signatures.get(operation)
        if s is None:
            s = self._signatures[operation] = _signature(operation, None if self.nested else self.numbers)
        return s

    def region_values(self, ops):
        """_region_values of the ops at these indices (sorted), from the graph's readers."""
        if self.nested:
            return _region_values([self.ops[i] for i in ops])
        inside = set(ops)
        inputs, numbers, outputs, seen = [], [], [], set()
        for i in ops:
            for v in self.operands[i]:
                if v not in seen and self.index.get(v) not in inside:
                    seen.add(v)
                    if not _size_value(v):
                        (numbers if v in self.numbers else inputs).append(v)
        for i in ops:
            for r in self.results[i]:
                if r in self.returned or not inside.issuperset(self.readers.get(r, ())):
                    outputs.append(r)
        return inputs, numbers, outputs

    def claim_key(self, i):
        """What claimable decides by: the op's signature and result types, which results are used."""
        o = self.ops[i]
        if self.nested:
            used = tuple(bool(list(r.uses)) for r in o.results)
        else:
            used = tuple([r in self.returned or r in self.readers for r in self.results[i]])
        return self.op_key(i), used

    def op_key(self, i):
        """The op's signature and its results' types, computed once per op."""
        key = self._keys.get(i)
        if key is None:
            o = self.ops[i]
            key = self._keys[i] = (self.signature(o), tuple([text_of(r.type) for r in self.results[i]]),
                                   _dims_key(self.operands[i] + self.results[i]))
        return key

    def region_key(self, ops, inputs, numbers, outputs):
        """What outlining the region of ops (sorted; its _region_values inputs, numbers, outputs)
        decides by, the value names aside (region_reuse.Outcome): each op's signature and result
        types, its operands as (op position, result) in the region, numbers and inputs by
        position, which of its results the caller reads, the users of a transpose (its edge
        rule reads them: layout.copies.reshape_copies), whether a detach costs nothing
        (detach_cost.dropped); which inputs were made before the region's first op
        (edge_ops.head_views)."""
        at = {i: k for k, i in enumerate(ops)}
        args = {v: k for k, v in enumerate(inputs)}
        nums = {v: k for k, v in enumerate(numbers)}
        out = set(outputs)
        parts = []
        for i in ops:
            o = self.ops[i]
            refs = []
            for v in self.operands[i]:
                k = at.get(self.index.get(v))
                refs.append(("n", nums[v]) if k is None and v in nums else ("a", args[v]) if k is None and v in args
                            else ("s", symbols.expr_of(symbolic_sizes.current().meta(v))) if k is None
                            else (k, self.result_number.get(v, 0)))  # (a size from outside: its expression)
            outside = ()  # (what the rules read outside the region)
            if o.name in TRANSPOSES:
                outside = tuple(sorted((u.owner.name, tuple(text_of(t.type) for t in u.owner.results))
                                       for r in o.results for u in r.uses))
            elif o.name == "ltorch.detach":  # (the cost model reads its operand's producer, the program's kind)
                outside = detach_cost.dropped(o)
            parts.append((self.op_key(i), tuple(refs), tuple([r in out for r in self.results[i]]), outside))
        first = ops[0]
        # (dynamic sizes: the inputs' sizes as expressions of the symbols, its funcs' thunder.dims)
        dims = tuple(tuple(symbolic_sizes.dims_attr(v)) if _dims_key([v]) not in ((), (None,)) else None
                     for v in inputs)
        return tuple(parts), tuple([self.index.get(v, -1) < first for v in inputs]), dims

    def find(self, i):
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def last_op(self, n):
        return self.members[n[1]][-1] if n[0] == "r" else n[1]  # (members are kept sorted)

    def joins(self, root, i):
        """Whether op i may join region root (its executor and acyclicity aside): i continues a
        chain of the region (takes a value of it that no other op of the region uses), or it
        is a sibling of ops in it (reads a value they read too: two sums of one value, read
        once) at most SIBLING_WINDOW ops after the region's last op. Farther siblings start a
        region of their own: the same block applied N times reads a shared mask or rotary
        table, and joining it would grow one region with N copies of the block (one kernel
        whose compile time grows with depth) instead of N calls of one kernel."""
        sibling = False
        parent, find = self.parent, self.find
        for p in self.preds[i]:
            if i in self.users[p] and p in parent and find(p) == root:
                for u in self.users[p]:  # (a loop, not any(generator): asked for every claimed op)
                    if u != i and u in parent and find(u) == root:
                        sibling = True
                        break
                else:
                    return True
        return sibling and i - self.last_op(("r", root)) <= SIBLING_WINDOW

    def input_siblings(self, i, claimed_ops, tiny=False):
        """The regions (of op i's executor) whose ops read a value op i reads elementwise (of
        op i's result shape) that no region op produces (an argument, a torch call's result: a
        GEMM's output that an activation's recomputation and its gradient both read), at most
        SIBLING_WINDOW ops before i: joined, the kernel reads the value once. Values broadcast
        into op i (a rotary table, a mask) do not join: the regions reading them may write
        other shapes (q's and k's rotary embeddings in two layouts), which one kernel would
        tile worse than two; except where op i is tiny (Executor.tiny: its kernel runs as well
        untiled), which joins the regions reading any value it reads, a region's too (a decode
        step's q and k rotary embeddings of one token, reading the tables an earlier layer's
        region made: one kernel call, not two)."""
        roots = []
        results = self.ops[i].results
        shape = _shape(results[0]) if len(results) == 1 and ranked(results[0]) else None
        for v in self.ops[i].operands:
            p = self.index.get(v)
            if p is None and not isinstance(v.owner, ir.Block) or p is not None and p in claimed_ops and not tiny:
                continue  # (a constant; a region op's value: joins() handles those)
            if not tiny and (shape is None or not ranked(v) or _shape(v) != shape):
                continue
            for u in self.readers.get(v, ()):
                if u >= i:
                    break
                if u in self.parent and claimed_ops[u] == claimed_ops[i]:
                    r = self.find(u)
                    if r not in roots and i - self.last_op(("r", r)) <= SIBLING_WINDOW:
                        roots.append(r)
        return roots

    def merge_ok(self, roots, i):
        """Whether region roots + op i can be one region: no path from the set back into it
        through an op outside it (checked on the graph of regions, which stays acyclic). Preds
        come earlier in program order, so such a path only visits nodes with an op at or after
        the set's first op: the walk stops at the others (it covers the span of the set, not
        everything upstream of it). With one region, the walk starts from op i's preds only: a
        path from the region back into itself through other nodes was ruled out when it formed
        (and the graph of regions stays acyclic), and one from op i back into the set would
        end at an op after i (preds come earlier), which the set has none of."""
        return self.no_path_back(roots, i, single=len(roots) == 1)

    def no_path_back(self, roots, i, single):
        """merge_ok's walk; single: from op i's preds only (else from those of every op of the
        set: what merge_ok does for several regions, and tests compare with)."""
        members, preds, parent, find = self.members, self.preds, self.parent, self.find
        inside = {i}
        for r in roots:
            inside.update(members[r])
        first = min(inside)
        # (a node: a region's root, or ~op for an op in none)
        seen, stack = set(), []
        for o in (i,) if single else inside:
            for p in preds[o]:
                if p not in inside:
                    n = find(p) if p in parent else ~p
                    if n not in seen:
                        seen.add(n)
                        stack.append(n)
        while stack:
            n = stack.pop()
            ops = members[n] if n >= 0 else (~n,)
            if ops[-1] < first:  # (members are kept sorted)
                continue
            for o in ops:
                for p in preds[o]:
                    if p in inside:
                        return False
                    m = find(p) if p in parent else ~p
                    if m != n and m not in seen:
                        seen.add(m)
                        stack.append(m)
        return True

    def partition(self, claimed_ops, tiny=lambda i: False):
        """Regions of connected ops; claimed_ops: {op index: executor name} (one per region);
        tiny(i): whether op i's results are tiny for its executor (input_siblings)."""
        for i in range(len(self.ops)):
            if i not in claimed_ops:
                continue
            candidates = []
            for p in sorted(self.preds[i]):
                if p in self.parent and claimed_ops[p] == claimed_ops[i]:
                    r = self.find(p)
                    if r not in candidates:
                        candidates.append(r)
            candidates = [r for r in candidates if self.joins(r, i)]
            small = tiny(i)
            if not candidates or small:
                candidates += [r for r in self.input_siblings(i, claimed_ops, small) if r not in candidates]
            # all at once first: regions that reconverge at i (siblings kept apart above) may
            # each be unmergeable alone (a path through the other)
            chosen = candidates if len(candidates) > 1 and self.merge_ok(candidates, i) else []
            for r in candidates if not chosen else ():
                if self.merge_ok(chosen + [r], i):
                    chosen.append(r)
            if not chosen:
                self.parent[i] = i
                self.members[i] = [i]
                continue
            root = chosen[0]
            for r in chosen[1:]:
                self.parent[r] = root
                self.members[root] = sorted(self.members[root] + self.members.pop(r))
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
        def key(n):  # checks as early as they can run (no work is wasted before they raise)
            ops = nodes[n]
            return (not (len(ops) == 1 and _is_check(self.ops[ops[0]])), min(ops))

        heap = [(key(n), n) for n in nodes if indeg[n] == 0]
        heapq.heapify(heap)
        order = []
        while heap:
            _, n = heapq.heappop(heap)
            order.append(regions[n[1]] if n[0] == "r" else n[1])
            for m in succs[n]:
                indeg[m] -= 1
                if indeg[m] == 0:
                    heapq.heappush(heap, (key(m), m))
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
            if v in produced or _size_value(v):
                continue
            if is_number(v):
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
    block = f.add_entry_block(_arg_locations(inputs))
    mapping = dict(zip(inputs, block.arguments))
    symbolic = symbolic_sizes.current()
    if symbolic is not None:
        _dims_of_arguments(f, inputs)
    with ir.InsertionPoint(block):
        for c in numbers:
            new = ir.Operation.create("arith.constant", results=[c.type],
                                      attributes={"value": c.owner.attributes["value"]}, loc=c.owner.location)
            mapping[c] = new.results[0]
        if symbolic is not None:  # (the sizes its ops take from outside, computed from its arguments' sizes)
            emitter = sizes.Emitter([_Sizes(v) for v in inputs], list(block.arguments), [])
            produced = {r for o in members for r in o.results}
            for o in members:
                for v in o.operands:
                    if v not in mapping and v not in produced and _size_value(v):
                        mapping[v] = emitter.size(symbolic.meta(v))
            computed = len(list(block.operations)) - len(numbers)
            if computed:  # (where they are among its ops: region_reuse.Decomposed.sized)
                f.attributes[COMPUTED_SIZES] = ir.DenseI64ArrayAttr.get([len(numbers), computed])
        for o in members:
            attrs = {k: o.attributes[k] for k in o.attributes}
            new = ir.Operation.create(o.name, results=[r.type for r in o.results],
                                      operands=[mapping[v] for v in o.operands], attributes=attrs, loc=o.location)
            for r, nr in zip(o.results, new.results):
                mapping[r] = nr
        func.ReturnOp([mapping[r] for r in outputs])
    return f


class _Sizes:
    """A value as sizes.Emitter reads its symbols: its dims (at the symbols' values)."""

    def __init__(self, v):
        self.shape = symbolic_sizes.shape(v) if isinstance(v.type, ir.RankedTensorType) else ()


def _sizes_readable(members, inputs):
    """Whether the sizes members take from outside (a reshape's shape) are expressions of
    symbols that are dims of inputs (a region computes them from those: _build_func)."""
    symbolic = symbolic_sizes.current()
    taken = [v for o in members for v in o.operands if _size_value(v)]
    if symbolic is None or not taken:
        return True
    bare = {symbols.expr_of(d) for v in inputs if isinstance(v.type, ir.RankedTensorType)
            for d in symbolic_sizes.shape(v)}
    try:
        return all(sizes.symbol_names(symbols.expr_of(symbolic.meta(v))) <= bare for v in taken)
    except (KeyError, ValueError):
        return False


def _dims_of_arguments(f, inputs):
    """A func made of a func with dynamic sizes (its inputs: values there, symbolic_sizes.over
    it) takes them with their sizes: sizes.DIMS on its `?` arguments, the symbols' values there
    as its sizes.VALUES (what its decomposition sees, as the caller's did). An int argument
    named like a symbol is renamed (it would be read as that symbol)."""
    dims = [symbolic_sizes.dims_attr(v) if isinstance(v.type, ir.RankedTensorType) and
            not ir.RankedTensorType(v.type).has_static_shape else None for v in inputs]
    if not any(dims):
        return
    names = set().union(*(sizes.symbol_names(d) for ds in dims if ds for d in ds))
    f.attributes["arg_attrs"] = ir.ArrayAttr.get([
        ir.DictAttr.get({} if ds is None else {sizes.DIMS: ir.ArrayAttr.get([ir.StringAttr.get(d) for d in ds])})
        for ds in dims])
    hints = symbolic_sizes.current().hints
    i64 = ir.IntegerType.get_signless(64)
    f.attributes[sizes.VALUES] = ir.DictAttr.get({n: ir.IntegerAttr.get(i64, hints[n]) for n in sorted(names)})
    for a in f.regions[0].blocks[0].arguments:
        found = loc_names(a.location)
        if found and found[0] in names:
            a.set_location(ir.Location.name(f"{found[0]}_value"))


def _arg_locations(inputs, name=_value_name):
    """The locations of a region func's arguments: the names of its inputs (name(value): its
    name, _value_name or _Graph.value_name)."""
    return [ir.Location.name(n) if (n := name(v)) else ir.Location.unknown() for v in inputs]


def worth_fusing(members, inputs, outputs, cost=None):
    """Policy "auto": whether one kernel call is expected to beat the ops as torch calls (each a
    dispatch plus reading its operands and writing its results; views move no data; an op that
    torch runs as several, `torch_composite`, costs those; plus the compute of math prims), with
    the executor's cost model (default linalg's, measured by benchmarks/cost_model.py)."""
    cost = cost or executor_registry.get("linalg").cost
    torch_seconds = sum(_torch_seconds(o, cost) for o in members)
    kernel_seconds = cost.call_seconds + (sum(_bytes(v) for v in inputs) +
                                          sum(_bytes(v) for v in outputs)) / cost.bytes_per_second
    # math whose compute sets the time: in the kernel, the prims of the region's decomposition;
    # in torch, prims run as torch calls (an ltorch op such as gelu runs torch's own kernel, whose
    # math is often faster than the sum of its prims': its memory traffic is counted, ...)
    elements = [(o.name, _prim_elements(o)) for o in members]
    for prim, on_torch, in_kernel in cost.element_seconds:
        kernel_seconds += in_kernel * sum(counts.get(prim, 0) for _, counts in elements)
        torch_seconds += on_torch * sum(counts.get(prim, 0) for name, counts in elements if name == prim)
    # ... plus the math of torch's own kernels where measured (F.gelu's tanh form: 1.2 ns/element)
    for name, attributes, on_torch in cost.op_element_seconds:
        torch_seconds += on_torch * sum(symbolic_sizes.numel(o.results[0]) for o in members
                                        if o.name == name and _has_attributes(o, attributes))
    return kernel_seconds < torch_seconds


def _has_attributes(operation, attributes):
    for key, value in attributes:
        if key not in operation.attributes or ir.StringAttr(operation.attributes[key]).value != value:
            return False
    return True


_PRIM_ELEMENTS = {}  # op signature -> {prim name: elements it computes}


def _prim_elements(operation):
    """{prim: result elements} of an op, a prim or the prims of an ltorch op's decomposition."""
    if operation.name.startswith("thunder."):
        return {operation.name: symbolic_sizes.numel(operation.results[0])} \
            if len(operation.results) == 1 and isinstance(operation.results[0].type, ir.RankedTensorType) else {}
    key = (_signature(operation), _sizes_key(operation))
    if key not in _PRIM_ELEMENTS:
        counts = {}
        scratch, f = _scratch(operation)
        try:
            decompose_module(scratch.operation)
        except Exception:  # (not claimable then; no count)
            pass
        with symbolic_sizes.over(f):
            for o in f.regions[0].blocks[0].operations:
                if o.operation.name.startswith("thunder."):
                    for prim, n in _prim_elements(o.operation).items():
                        counts[prim] = counts.get(prim, 0) + n
        _PRIM_ELEMENTS[key] = counts
    return _PRIM_ELEMENTS[key]


_COMPOSITE_SECONDS = {}  # (cost model, op signature) -> seconds of a torch_composite op


def _torch_seconds(operation, cost):
    """The cost model's seconds of an op as torch calls."""
    op = registry.OPS.get(operation.name)
    if op is None or not op.torch_composite:
        if detach_cost.dropped(operation):  # (the generated program leaves it out)
            return 0.0
        if _is_view(operation):
            return cost.op_seconds
        moved = sum(_bytes(v) for v in operation.operands if not is_number(v)) + sum(_bytes(r) for r in operation.results)
        return cost.op_seconds + moved / cost.bytes_per_second
    key = (cost, _signature(operation), _sizes_key(operation))
    if key not in _COMPOSITE_SECONDS:  # the ops of its decomposition (one level), costed alike
        scratch, f = _scratch(operation)
        block = f.regions[0].blocks[0]
        decompose_op(list(o.operation for o in block.operations if o.operation.name == operation.name)[0])
        with symbolic_sizes.over(f):
            _COMPOSITE_SECONDS[key] = sum(_torch_seconds(o.operation, cost) for o in block.operations
                                          if o.operation.name not in ("arith.constant", "func.return")
                                          and o.operation.name not in sizes.PYTHON)
    return _COMPOSITE_SECONDS[key]


REDUCTION_PRIMS = {"thunder.sum", "thunder.amax", "thunder.amin", "thunder.prod"}


def _sizes_key(operation):
    """What an op's cost depends on beyond its signature: where its sizes are `?`, their dims
    and their values now."""
    dims = _dims_key(operation.operands)
    if not any(dims):
        return ()
    return dims, tuple(symbolic_sizes.numel(v) for v in operation.operands)


def _bytes(v):
    if not isinstance(v.type, ir.ShapedType):  # a runtime number
        return 8
    t = ir.RankedTensorType(v.type)
    return symbolic_sizes.numel(v) * elt_bytes(text_of(t.element_type))


_SIZES_FITTED = contextvars.ContextVar("thunder_fuse_sizes_fitted", default=False)


def sizes_fitted():
    """Inside: the compiles a program for all sizes is fitted from (runtime/generalize.py: the
    call and its samples at other sizes). Their fusion makes no decision by a region's size that
    a size far from the samples' would make otherwise: no region is `tiny` (a small first call's
    decisions differed from its samples', so no program for all sizes could be fitted)."""
    return scoped(_SIZES_FITTED, True)


def fitting_sizes():
    """Whether the compile under way is one a program for all sizes is fitted from (sizes_fitted)."""
    return _SIZES_FITTED.get()


_TINY = {}  # (executor, the values' types) -> _tiny


def _tiny(executor, values, types=None):
    """Executor.tiny of the bytes values move; never where a size is a symbol (`?`: unknown until
    run) nor where a program for all sizes is being fitted (sizes_fitted). types: the values'
    types' texts, where known."""
    if _SIZES_FITTED.get():
        return False
    key = (executor, types if types is not None else tuple(text_of(v.type) for v in values))
    tiny = _TINY.get(key)
    if tiny is None:
        if len(_TINY) >= _ANSWERS_MAX:
            _TINY.clear()
        tiny = _TINY[key] = not any(ranked(v) and not ir.RankedTensorType(v.type).has_static_shape for v in values) \
            and executor.tiny(sum(_bytes(v) for v in values))
    return tiny


def _symbols_read(callee):
    """Whether a region func with dynamic sizes can read each symbol its arguments' sizes.DIMS
    name from an argument dim that is that symbol alone (its kernel reads them so:
    linalg/dynamic_region.py); True for a static one."""
    block = callee.regions[0].blocks[0]
    bare, needed = set(), set()
    for dims in sizes.argument_dims(callee, len(block.arguments)):
        for d in dims or ():
            (bare.add(d) if d.isidentifier() else needed.update(sizes.symbol_names(d)))
    return needed <= bare


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


def _without_edge(graph, ops, edge):
    """ops (graph indices) without those of edge (edge_ops' rule: MLIR operations of the region
    -> those torch runs outside the kernel)."""
    left = edge([graph.ops[i] for i in ops])
    return [i for i in ops if graph.ops[i] not in left]


class _Kept:
    """A region kept as a kernel: its ops (graph indices) and the values it takes and gives in
    the caller; `full`, the whole region decomposed into prims (a func whose arguments are
    `inputs`, whose results are `outputs`); `kernel`, the func the executor runs: `full`
    itself, or, when its tail went to torch (_split_tail), a func of full's other ops taking
    `kernel_args` (arguments of full) and returning `kernel_results` (values of full), whose
    `head` and `tail` ops (of full) the caller runs before and after the kernel; `checks`, its
    input checks."""

    def __init__(self, ops, full, inputs, outputs, name, checks):
        self.ops, self.full, self.inputs, self.outputs, self.name, self.checks = ops, full, inputs, outputs, name, checks
        block = full.regions[0].blocks[0]
        self.kernel, self.kernel_args, self.head, self.tail = full, list(block.arguments), [], []
        self.kernel_results = list(list(block.operations)[-1].operands)
        self.outcome = None  # (a replay: the region_reuse.Outcome it copies)


def _outline_region(f, graph, ops, name, policy, executor, heads=True, prologue=True, decomposed=None):
    """The _Kept region for these ops when the policy keeps it, or None. With policy auto, a
    region the executor would not run well (linalg: a kernel that is not tiled, see
    to_linalg.tiling) leaves its head views (a loss's logits.view(-1, classes)), then its small
    prologue (a loss's labels shifted and flattened) and its tail reductions (a bias gradient
    summed over rows, a loss averaged over rows) to torch, so the rest tiles by rows (the rules:
    lowering/edge_ops.py). decomposed: a region_reuse.Decomposed (or None: every region decomposed
    anew)."""
    ops = _without_edge(graph, ops, edge_ops.tail_views)
    if not ops:
        return None
    members = [graph.ops[i] for i in ops]
    inputs, numbers, outputs = _region_values(members)
    if not _sizes_readable(members, inputs):
        return None
    if policy == "auto" and not size_choices.choose("fuse: worth a kernel",
                                                    worth_fusing(members, inputs, outputs, executor.cost)):
        return None
    callee = _build_func(f, name, members, inputs, numbers, outputs)
    callee.attributes[EXECUTOR_ATTR] = ir.StringAttr.get(executor.name)
    if decomposed is None:
        decompose_module(callee.operation)
    else:  # (regions of one text: decomposed once)
        callee = decomposed.decompose(callee, region_text(callee).replace(f"@{name}(", "@region(", 1))
    checks = _take_input_checks(callee)
    _erase_dead(callee.regions[0].blocks[0])
    text = region_text(callee)
    if not _symbols_read(callee) or not _ask("accepts", executor, text, name, callee):
        callee.operation.erase()
        return None
    kept = _Kept(ops, callee, inputs, outputs, name, checks)
    if policy == "always" or executor.runs_well is None or size_choices.choose(
            "fuse: runs well", _ask("runs_well", executor, text, name, callee)):
        return kept
    first = min(ops)  # (head views read values made before the region's first op)
    tiny = _tiny(executor, inputs + outputs)  # (its edge ops stay in it but copies)
    if tiny:
        produced = {r for o in members for r in o.results}
        escapes = lambda o: any(not _inside(u.owner, produced) for r in o.results for u in r.uses)  # noqa: E731
    else:
        escapes = lambda o: True  # noqa: E731
    rest = _without_edge(graph, ops, lambda region: edge_ops.head_views(
        region, lambda v: graph.index.get(v, -1) < first, escapes)) if heads else ops
    if tiny and rest == ops:
        return kept
    if rest != ops:
        callee.operation.erase()
        return _outline_region(f, graph, rest, name, policy, executor, heads=False, prologue=prologue,
                               decomposed=decomposed)
    rest = ops
    if prologue:  # (small by the sizes at hand: the set is a choice the fitted compiles replay)
        small = set(ops) - set(_without_edge(graph, ops, edge_ops.small_prologue))
        small = set(size_choices.choose("fuse: small prologue to torch", tuple(sorted(small))))
        rest = [i for i in ops if i not in small]
    if rest and rest != ops:
        callee.operation.erase()
        return _outline_region(f, graph, rest, name, policy, executor, heads=False, prologue=False,
                               decomposed=decomposed)
    if _split_tail(kept, executor):
        # (the region was worth a kernel with its tail: without it, a cat whose bias-gradient sum
        # went to torch, the kernel may save nothing and move the same bytes as torch's op)
        if policy == "auto" and not size_choices.choose("fuse: split kernel worth it", _kernel_worth(kept, executor)):
            kept.kernel.operation.erase()
            kept.full.operation.erase()
            return None
        return kept
    # an untiled kernel runs on one thread, pass after pass over whole tensors: only worth it
    # while they fit in cache
    if not size_choices.choose("fuse: untiled fits in cache",
                               sum(_bytes(v) for v in inputs + outputs) <= UNTILED_MAX_BYTES):
        callee.operation.erase()
        return None
    return kept


def _outline(f, graph, ops, name, policy, executor, decomposed):
    """_outline_region, done once per region key (_Graph.region_key, region_reuse.Outcome): a
    region of a key outlined before is outlined as that one was (not kept; or kept with the
    same ops, a renamed copy of its decomposed func, the same split)."""
    if decomposed is None or not region_reuse.OUTCOMES:
        return _outline_region(f, graph, ops, name, policy, executor, decomposed=decomposed)
    values = graph.region_values(ops)
    key = (executor.name, policy, _SIZES_FITTED.get(), graph.region_key(ops, *values))
    if key in decomposed.outcomes:
        outcome = decomposed.outcomes[key]
        kept = None if outcome is None else _replay(f, graph, ops, name, outcome, decomposed,
                                                    values if len(outcome.positions) == len(ops) else None)
        if outcome is None or kept is not None:
            region_reuse.OUTCOME_STATS["hits"] += 1
            if kept is not None:
                kept.outcome = outcome
            return kept
    region_reuse.OUTCOME_STATS["misses"] += 1
    kept = _outline_region(f, graph, ops, name, policy, executor, decomposed=decomposed)
    if key not in decomposed.outcomes:
        outcome = None if kept is None else _outcome(kept, ops, decomposed)
        if kept is None or outcome is not None:
            decomposed.outcomes[key] = outcome
    return kept


def _outcome(kept, ops, decomposed):
    """The region_reuse.Outcome of kept, outlined from the region of ops (its func before
    decomposing: the last decomposed's text); None where it cannot be replayed."""
    text = decomposed.last
    full = decomposed.funcs[text][0].clone(ip=ir.InsertionPoint(decomposed.module.body))
    for k, o in enumerate(_body_all(full)):  # (the positions, told by location after the erasures)
        o.location = ir.Location.name(str(k))
    _take_input_checks(full)
    _erase_dead(full.regions[0].blocks[0])
    survivors = [int(loc_names(o.location)[0]) for o in _body_all(full)]
    split = None
    if kept.kernel is not kept.full:
        body, ops_all = _body_ops(kept.full), _body_all(kept.full)
        at_all = {o: k for k, o in enumerate(ops_all)}
        rest = [o for o in body if o not in kept.tail]
        numbers = _region_values(rest)[1]
        sources = [at_all[c.owner.operation] for c in numbers] + [at_all[o] for o in rest]
        if len(sources) != len(_body_all(kept.kernel)):
            return None
        at_body = {o: k for k, o in enumerate(body)}
        results = [("a", ir.BlockArgument(v).arg_number) if isinstance(v.owner, ir.Block) else
                   (at_all[v.owner.operation], ir.OpResult(v).result_number) for v in kept.kernel_results]
        split = region_reuse.Split([at_body[o] for o in kept.tail], [at_body[o] for o in kept.head],
                                   kept.kernel.operation.clone(ip=ir.InsertionPoint(decomposed.module.body)),
                                   sources, [ir.BlockArgument(v).arg_number for v in kept.kernel_args], results)
    at = {i: k for k, i in enumerate(ops)}
    return region_reuse.Outcome([at[i] for i in kept.ops], text, survivors, full, kept.checks, split)


def _replay(f, graph, ops, name, outcome, decomposed, values=None):
    """The _Kept region of ops outlined as outcome says (values: the kept ops' _region_values
    where known), or None where its decomposed func's names do not follow (region_reuse)."""
    kept_ops = [ops[k] for k in outcome.positions]
    members = [graph.ops[i] for i in kept_ops]
    inputs, numbers, outputs = values or graph.region_values(kept_ops)
    locations = decomposed.locations(outcome.text, [c.owner.location for c in numbers] +
                                     decomposed.sized.get(outcome.text, []) + [o.location for o in members])
    if locations is None:
        return None
    region_reuse.STATS["hits"] += 1
    full = region_reuse.clone(outcome.full, ir.InsertionPoint(f), name, _arg_locations(inputs, graph.value_name),
                              [locations[k] for k in outcome.survivors])
    kept = _Kept(kept_ops, full, inputs, outputs, name, outcome.checks)
    split = outcome.split
    if split is not None:  # (as _split made it)
        full.attributes["sym_name"] = ir.StringAttr.get(name + "_unsplit")
        args, body, ops_all = list(full.regions[0].blocks[0].arguments), _body_ops(full), _body_all(full)
        kept.kernel_args = [args[k] for k in split.args]
        kept.kernel = region_reuse.clone(split.kernel, ir.InsertionPoint(full), name, _arg_locations(kept.kernel_args),
                                         [ops_all[k].location for k in split.sources])
        kept.kernel_results = [args[r] if k == "a" else ops_all[k].results[r] for k, r in split.results]
        kept.tail, kept.head = [body[k] for k in split.tail], [body[k] for k in split.head]
    return kept


def _split_tail(kept, executor):
    """Give torch what keeps kept's region from tiling, when the rest then tiles (runs well):
    its tail (_tail_ops: a loss's mean over rows) and the results computed from no input (an
    iota saved for the backward, computed by torch before the kernel; the kernel still computes
    what it uses of it). kept.kernel becomes a func of the other ops. Whether it did."""
    full = kept.full
    block = full.regions[0].blocks[0]
    body = _body_ops(full)
    tail = _tail_ops(body)
    returned = set(list(block.operations)[-1].operands)
    dependent = set(block.arguments)
    for o in body:
        if any(v in dependent for v in o.operands):
            dependent.update(o.results)
    # the ops computing returned values from no input, and their producers
    produced = {r: o for o in body for r in o.results}
    head = {o for o in body if o not in tail and o.results[0] not in dependent and
            any(r in returned for r in o.results)}
    stack = list(head)
    while stack:
        for v in stack.pop().operands:
            p = produced.get(v)
            if p is not None and p not in head:
                head.add(p)
                stack.append(p)
    head = [o for o in body if o in head]
    if not tail and not head:
        return False
    split = _split(kept, body, tail, head)
    if split is None:
        return False
    kernel, args, results = split
    text = region_text(kernel)
    if not size_choices.choose("fuse: split tail runs well", _ask("accepts", executor, text, kept.name, kernel) and
                               _ask("runs_well", executor, text, kept.name, kernel)):  # (by size: replayed)
        kernel.operation.erase()
        kept.full.attributes["sym_name"] = ir.StringAttr.get(kept.name)
        return False
    kept.kernel, kept.kernel_args, kept.kernel_results, kept.head, kept.tail = kernel, args, results, head, tail
    return True


def _kernel_worth(kept, executor):
    """worth_fusing of kept's kernel alone (its prims against running them as torch calls)."""
    block = kept.kernel.regions[0].blocks[0]
    results = list(list(block.operations)[-1].operands)
    with symbolic_sizes.over(kept.kernel):
        return worth_fusing([o for o in _body_ops(kept.kernel) if o.name not in sizes.PYTHON],
                            list(block.arguments), results, executor.cost)


def _body_ops(func_op):
    """A func's ops but its numbers and its return."""
    return [o.operation for o in func_op.regions[0].blocks[0].operations
            if o.operation.name not in ("arith.constant", "func.return")]


def _body_all(func_op):
    """A func's ops but its return."""
    return [o.operation for o in func_op.regions[0].blocks[0].operations][:-1]


def _split(kept, body, tail, head):
    """(kernel, its arguments, its results): the func of kept.full's ops (body) but tail and head,
    named kept.name (full renamed <name>_unsplit); None where it would have no result or no op."""
    full = kept.full
    rest = [o for o in body if o not in tail]
    args, numbers, results = _region_values(rest)
    results = [v for v in results if v.owner not in head]
    if not results or len(tail) == len(body):
        return None
    full.attributes["sym_name"] = ir.StringAttr.get(kept.name + "_unsplit")
    with symbolic_sizes.over(full):
        kernel = _build_func(full, kept.name, rest, args, numbers, results)
    kernel.attributes[EXECUTOR_ATTR] = full.attributes[EXECUTOR_ATTR]
    return kernel, args, results


def _tail_ops(body):
    """The tail of a region (ops, in program order): its rank-reducing reductions and the ops
    computed from their results only (a mean's division), where nothing else in the region uses
    them (cross-entropy's mean over rows: the rows' losses stay in the kernel, their sum and
    the division go to torch)."""
    produced = {r: o for o in body for r in o.results}
    tail = []
    for o in body:
        tensors = [v for v in o.operands if isinstance(v.type, ir.ShapedType)]
        inner = [produced[v] for v in tensors if v in produced]
        reduces = o.name in REDUCTION_PRIMS and tensors and \
            ir.RankedTensorType(o.results[0].type).rank < ir.RankedTensorType(tensors[0].type).rank
        if reduces or (inner and all(p in tail for p in inner)):
            tail.append(o)
    while True:  # leave in the kernel what the rest of the region uses
        used = {produced[v] for o in body if o not in tail for v in o.operands if v in produced}
        rest = [o for o in tail if o not in used]
        if rest == tail:
            return edge_ops.tail_reshapes(body, tail)
        tail = rest


def _call_region(kept, replaced, where, loc, check_loc):
    """Emit kept's input checks, its head, the kernel's call and its tail before `where` (in the
    caller); returns the caller values of kept.outputs."""
    block = kept.full.regions[0].blocks[0]
    env = {a: replaced.get(v, v) for a, v in zip(block.arguments, kept.inputs)}  # full's values -> caller's
    returned = dict(zip(list(block.operations)[-1].operands, kept.outputs))  # full's results -> the caller's
    names = ",".join(_value_name(returned.get(v, v)) or "t" for v in kept.kernel_results)
    with ir.InsertionPoint(where):
        for check, positions, attributes in kept.checks:  # before the kernel, as torch calls
            ir.Operation.create(check, operands=[env[block.arguments[k]] for k in positions], attributes=attributes,
                                loc=check_loc)
        _copy_ops(kept.head, env)
        call = ir.Operation.create("func.call", results=[v.type for v in kept.kernel_results],
                                   operands=[env[a] for a in kept.kernel_args],
                                   attributes={"callee": ir.FlatSymbolRefAttr.get(kept.name)},
                                   loc=ir.Location.name(names, childLoc=loc))
        env.update(zip(kept.kernel_results, call.results))
        _copy_ops(kept.tail, env)
    results = [env[v] for v in list(block.operations)[-1].operands]
    if kept.kernel is not kept.full:
        kept.full.operation.erase()
    return results


def _copy_ops(ops, env):
    """Copies of ops (and of the numbers they use) at the current insertion point, their
    operands mapped through env (which gets their results)."""
    for o in ops:
        for v in o.operands:
            if v not in env:  # a number
                env[v] = ir.Operation.create("arith.constant", results=[v.type],
                                             attributes={"value": v.owner.attributes["value"]}).results[0]
        new = ir.Operation.create(o.name, results=[r.type for r in o.results], operands=[env[v] for v in o.operands],
                                  attributes={k: o.attributes[k] for k in o.attributes}, loc=o.location)
        env.update(zip(o.results, new.results))


def fuse_func(f, module_block, counter, policy="auto", executors=DEFAULT_EXECUTORS, decomposed=None, texts=None):
    """thunder-fuse on func f; texts (a dict, or None): gets kernel_texts of the regions outlined."""
    block = f.regions[0].blocks[0]
    candidates = [executor_registry.get(e) for e in executors]
    def fusable(o):  # (whether an op could be in a region)
        return any(claimable(o.operation, e) for e in candidates)

    if not symbolic_sizes.is_dynamic(f):  # (the layout rules build ops of static shapes)
        move_reshapes_across_conversions(block, fusable)
        sink_reshapes(block, fusable)
        sink_transposes(f, fusable)
    with symbolic_sizes.over(f):
        return _fuse_block(f, block, counter, policy, candidates, decomposed, texts)


def _fuse_block(f, block, counter, policy, candidates, decomposed, texts):
    graph = _Graph(block)
    claimed_ops = {}
    # (once per claim key: an executor's `supports` reads the prim's name, attributes, types and
    # constant operands, as kernel_prim does)
    claims = {}
    for i, o in enumerate(graph.ops):
        if not _may_be_claimable(o.name):  # (no signature to compute)
            continue
        key = graph.claim_key(i)
        if key not in claims:
            claims[key] = next((e.name for e in candidates if claimable(o, e, graph.signature)), None)
        if claims[key] is not None:  # the first executor that claims it
            claimed_ops[i] = claims[key]
    # outline; a region the lowering rejects stays as torch calls (dropping it keeps the
    # graph of the other regions acyclic)
    outlined = []
    tinies = {}  # (executor, result types) -> _tiny: asked for every claimed op by partition

    def tiny(i):
        key = (claimed_ops[i], graph.op_key(i)[1])
        found = tinies.get(key)
        if found is None:
            found = tinies[key] = _tiny(executor_registry.get(claimed_ops[i]), graph.results[i], key[1])
        return found

    for ops in graph.partition(claimed_ops, tiny):
        executor = executor_registry.get(claimed_ops[ops[0]])
        region = _outline(f, graph, ops, f"fusion_{counter}", policy, executor, decomposed)
        if region is not None:
            counter += 1
            outlined.append(region)
    if not outlined:
        return counter
    order = graph.schedule([o.ops for o in outlined])
    by_first = {o.ops[0]: o for o in outlined}
    terminator = list(block.operations)[-1]
    replaced = {}  # region output -> call result
    guards = []  # (the regions' decompositions' decisions on the symbols: the caller's now)
    for item in order:
        if isinstance(item, int):
            graph.ops[item].move_before(terminator)
            continue
        kept = by_first[item[0]]
        guards += _take_guards(kept)
        results = _call_region(kept, replaced, terminator, _child_loc(graph.ops[kept.ops[-1]].location),
                               graph.ops[kept.ops[0]].location)
        for v, nv in zip(kept.outputs, results):
            v.replace_all_uses_with(nv)
            replaced[v] = nv
    for kept in outlined:
        for i in reversed(kept.ops):
            graph.ops[i].erase()
    _erase_unused_numbers(block)  # numbers only the regions used
    if guards:
        sizes.set_guards(f, sizes.guards(f) + guards)
    if texts is not None:
        _kernel_texts(outlined, texts)
    return counter


def _take_guards(kept):
    """The sizes.GUARDS of kept's funcs (its decomposition's decisions on the symbols), taken
    off them with their sizes.VALUES: the kernel's text holds for all values of the symbols."""
    found = []
    for f in dict.fromkeys([kept.full, kept.kernel]):
        found += sizes.guards(f)
        for name in (sizes.GUARDS, sizes.VALUES, COMPUTED_SIZES):
            if name in f.attributes:
                del f.attributes[name]
    return found


def _kernel_texts(outlined, texts):
    """texts gets, for each replayed region of outlined (_Kept) whose outcome's kernel was
    printed before, its kernel's text named @fusion (what code generation keys the kernel by,
    runtime/codegen.py): a replay's kernel is a copy of its outcome's with other names and
    locations, which its text (printed without locations) leaves out; the first replay of an
    outcome prints its kernel."""
    for kept in outlined:
        if kept.outcome is None:
            continue
        if kept.outcome.kernel_text is None:
            kept.outcome.kernel_text = kernel_text(kept.kernel, kept.name)
        texts[kept.name] = kept.outcome.kernel_text


def kernel_text(func_op, name):
    """region_text of the fusion callee @name, named @fusion (one name for identical regions)."""
    return region_text(func_op).replace(f"@{name}(", "@fusion(", 1)


def _erase_dead(block):
    """Erase the prims nothing uses (a decomposition's results the region does not return:
    native_layer_norm's output where only its mean and rstd are used), which no kernel would
    tile, and then the numbers nothing uses."""
    for o in reversed(list(block.operations)):
        o = o.operation
        if o.name.startswith("thunder.") and o.results and not any(list(r.uses) for r in o.results):
            o.erase()
    _erase_unused_numbers(block)


def _erase_unused_numbers(block):
    for o in list(block.operations):
        if o.operation.name == "arith.constant" and not list(o.results[0].uses):
            o.operation.erase()


def fuse_module(module_op, policy="auto", executors=DEFAULT_EXECUTORS, first_index=0, texts=None):
    """executors: names (or one comma-separated string, as the pass option
    `thunder-fuse{executors=linalg,cuda}` gives it), in order of preference; first_index: the
    number of the first region outlined (at least; a backward fused apart from its forward
    numbers its regions after the forward's: runtime/backward_variants.py); texts (a dict): gets
    {callee name: kernel_text} of fusion callees whose text is known without printing them
    (replayed regions: _kernel_texts), for code generation (runtime/codegen.py python_source's
    region_texts), valid while the callees are not changed."""
    if policy not in POLICIES:
        raise ValueError(f"thunder-fuse: unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    if isinstance(executors, str):
        executors = [e for e in executors.split(",") if e]
    for e in executors:
        executor_registry.get(e)
    module_block = module_op.regions[0].blocks[0]
    with module_op.context, ir.Location.unknown():
        counter = max(_next_index(module_block), first_index)
        funcs = [op for op in module_block.operations
                 if op.operation.name == "func.func" and not is_fusion(op) and len(op.regions[0].blocks) > 0]
        decomposed = region_reuse.Decomposed(module_op.context)  # (regions of every func, forward's and backward's)
        for f in funcs:
            counter = fuse_func(f, module_block, counter, policy, executors, decomposed, texts)


_ANSWERS = {}  # (question, executor, region text with its name replaced) -> answer
_ANSWERS_MAX = 4096


def _ask(question, executor, text, name, func_op):
    """executor.accepts / executor.runs_well of a region (func_op, text: its text), asked once per
    text (each answer lowers the region to linalg or GPU kernels): a model's N identical layers
    make N regions of one text. A region with dynamic sizes is asked about at the symbols'
    values (sizes.VALUES: the call traced)."""
    key = (question, executor, text.replace(f"@{name}(", "@region(", 1))
    answer = _ANSWERS.get(key)
    if answer is None:
        if symbolic_sizes.is_dynamic(func_op):
            try:
                text = static_text(func_op, None)
            except Exception:  # noqa: BLE001 - sizes its ops' rules refuse at those values
                return False
        answer = bool(getattr(executor, question)(text, name))
        if len(_ANSWERS) >= _ANSWERS_MAX:
            _ANSWERS.clear()
        _ANSWERS[key] = answer
    return answer


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
