"""Edge ops of a fused region that torch runs outside the kernel (lowering/fuse.py): ops at the
region's head or tail that torch runs for free (a view moves no data) or that keep the kernel
from tiling by rows (a reshape merging dims, a loss's small label work on a few elements).

One mechanism: an edge is a closure from one end of the region (its ops, MLIR operations in
program order). From the head, an op leaves when it is of the rule's kind and the region's ops
it reads from left before it (`from_head`); from the tail, when it is of the rule's kind and
every op of the region reading it left too (`from_tail`). The rules, each with why it exists:

- tail_views: views whose results only leave the region (the kernel would write a transposed or
  reshaped copy; torch's view of the kernel's result costs nothing);
- head_views: views of what was made before the region (a loss's logits.view(-1, classes): in the
  kernel a reshape merging dims hides the rows it could tile by; torch's view moves no data); in
  a tiny region (executors.Executor.tiny: untiled as fast as tiled), only those whose results
  are read outside it too (the kernel would write them out as copies), the others staying in
  the kernel (a decode step's rotary slices of one token's q: no torch call each);
- small_prologue: ops on values many times smaller than the region's largest (a loss's labels
  shifted and flattened: in the kernel they keep it from tiling; as torch calls a few calls
  on small tensors);
- tail_reshapes: reshapes that only the region's torch-run tail or its caller read, of a
  decomposed region body (the rows to sum reshaped (b, s, n) -> (b * s, n): torch views the
  kernel's contiguous result with the strides the kernel would have written).
"""

from thunder.dialects.mlir import ir
from thunder.lowering import symbolic_sizes
from thunder.lowering.layout import reshape_copies
from thunder.ops import registry

# prims that torch runs as views of their operand (thunder.reshape may copy, but mostly does not)
VIEW_PRIMS = {"thunder.reshape", "thunder.transpose", "thunder.broadcast_in_dim", "thunder.squeeze", "thunder.slice"}
BROADCASTS = {"thunder.broadcast_in_dim", "ltorch.expand", "ltorch.expand_as", "ltorch.broadcast_to"}
# a region that does not run well: its ops on tensors this many times smaller than its largest,
# computed from such tensors only, may go to torch (small_prologue)
SMALL_RATIO = 8


def is_view(operation):
    op = registry.OPS.get(operation.name)
    return operation.name in VIEW_PRIMS or (op is not None and op.is_view)


def elements(v):
    return symbolic_sizes.numel(v)


def from_head(ops, leaves):
    """The ops (program order) that leave from the head: in program order, each op for which
    leaves(op, made_by, left) holds; made_by: value -> the op of `ops` making it; left: the set of
    ops found so far (leaves may add others to it: the producers that leave with op)."""
    made_by = {r: o for o in ops for r in o.results}
    left = set()
    for o in ops:
        if leaves(o, made_by, left):
            left.add(o)
    return left


def from_tail(ops, kind, left=()):
    """The ops (program order) that leave from the tail: in reverse program order, each op of
    the kind (kind(op)) whose results no op of `ops` reads but those that left; left: the ops
    already leaving."""
    readers = {}
    for o in ops:
        for v in o.operands:
            readers.setdefault(v, []).append(o)
    left = set(left)
    for o in reversed(ops):
        if o not in left and kind(o) and all(u in left for r in o.results for u in readers.get(r, ())):
            left.add(o)
    return left


def tail_views(ops):
    """Views whose results only leave the region (read by nothing in it but other such views).
    A transpose whose reshape would copy stays (reshape_copies)."""
    return from_tail(ops, lambda o: is_view(o) and not reshape_copies(o))


def head_views(ops, made_before, only=lambda o: True):
    """Views (not broadcasts, which the kernel tiles through) of values made before the region
    (made_before(value)) or of other head views; only: a further condition on each (a tiny
    region gives torch only the views whose results are read outside it too, which the kernel
    would write out as copies)."""
    def leaves(o, made_by, left):
        return is_view(o) and o.name not in BROADCASTS and only(o) and \
            all(made_before(v) or made_by.get(v) in left for v in o.operands)
    return from_head(ops, leaves)


def small_prologue(ops):
    """Ops computing values at most 1/SMALL_RATIO of the region's largest (in elements) from
    small values only, made outside the region or by other such ops, and the small fills and
    iotas of the region they use (ops without tensor operands)."""
    largest = max(elements(r) for o in ops for r in o.results)

    def small(v):
        return not isinstance(v.type, ir.ShapedType) or elements(v) * SMALL_RATIO <= largest

    def generator(o):  # a fill or iota: no tensor operands
        return not any(isinstance(v.type, ir.ShapedType) for v in o.operands)

    def leaves(o, made_by, left):
        tensors = [v for v in o.operands if isinstance(v.type, ir.ShapedType)]
        if not tensors or not all(small(v) for v in list(o.operands) + list(o.results)):
            return False
        producers = [made_by[v] for v in tensors if v in made_by]
        if not all(p in left or (generator(p) and small(p.results[0])) for p in producers):
            return False
        left.update(producers)
        return True
    return from_head(ops, leaves)


def tail_reshapes(body, tail):
    """tail (ops of a decomposed region body that torch runs after the kernel) and the reshapes
    only it or the caller read, in program order."""
    if not tail:
        return tail
    left = from_tail(body, lambda o: o.name == "thunder.reshape", tail)
    return [o for o in body if o in left]
