"""Regions of one text are decomposed once (thunder-fuse): a model's N identical layers make N
regions whose funcs print alike (names aside). The first is decomposed into prims
(thunder-decompose); the others become copies of it, their value names and source locations made
what decomposing them would have given (the names of a decomposition's values derive from the
name of the op decomposed: `t5` -> `t5_0`, `t5_0_1`; decompose.decompose_op), so the generated
program, whose torch calls outside the kernels may be ops of a region (fuse._split_tail), is
the same.

A region's whole outlining is done once per signature too (`Outcome`, thunder-fuse's
_Graph.region_key: its ops, attributes, types and wiring, numbers and inputs by position,
which of its results the caller reads, which inputs were made before it, what a transpose's
users outside it are): whether it is kept, the ops left to torch at its edges, the split of its
tail, the executor's answers. A region of a signature seen before skips the cost model, the
edge rules and the executor's questions and becomes a renamed copy of the first one's
decomposed func (made from the caller's ops without building its undecomposed func), with the
same edge ops and split: the module is the same as with every region outlined anew
(tests/test_repeated_structure.py compares them with OUTCOMES on and off)."""
from thunder.dialects.emit import loc_file_line, loc_names, location
from thunder.dialects.mlir import ir
from thunder.lowering.decompose import decompose_module

STATS = {"hits": 0, "misses": 0}  # regions copied / decomposed, over all runs (tests)
OUTCOMES = True  # off: every region is outlined anew (its decomposition still shared by text)
OUTCOME_STATS = {"hits": 0, "misses": 0}  # regions replayed / outlined, over all runs (tests)


def _body(func_op):
    return [o.operation for o in func_op.regions[0].blocks[0].operations]


class Decomposed:
    """The regions decomposed in one run of thunder-fuse: text -> (a copy of the decomposed func,
    kept in a module of its own; the value names of its ops before decomposing)."""

    def __init__(self, context):
        self.funcs = {}
        self.outcomes = {}  # region key (fuse's _Graph.region_key) -> Outcome, or None: not kept
        self.last = None  # the text of the last region decomposed
        self.recipes = {}  # text -> _Recipe of its decomposed func's locations
        self.numbers = {}  # text -> how many numbers its func copies
        # text -> the locations of the size computations its func begins with after the numbers
        # (dynamic sizes: fuse._build_func's, computed from its arguments' sizes)
        self.sized = {}
        with context:
            self.module = ir.Module.create()

    def decompose(self, callee, text):
        """callee (a func of a region's ops, text: its text with its name replaced) decomposed;
        returns the func (a new one where it is a copy)."""
        found = self.funcs.get(text)
        self.last = text
        if found is not None:
            ops = _body(callee)[:-1]  # (func.return)
            locations = self.locations(text, [o.location for o in ops])
            if locations is not None:
                copy = clone(found[0], ir.InsertionPoint(callee), callee.attributes["sym_name"],
                             [b.location for b in callee.regions[0].blocks[0].arguments], locations)
                callee.operation.erase()
                STATS["hits"] += 1
                return copy
        STATS["misses"] += 1
        ops = _body(callee)
        names = [loc_names(o.location) for o in ops]
        k = _leading_numbers(ops)
        sized = []
        if "thunder.computed_sizes" in callee.attributes:
            start, count = ir.DenseI64ArrayAttr(callee.attributes["thunder.computed_sizes"])
            sized = [o.location for o in ops[start:start + count]]
        decompose_module(callee.operation)
        if found is None:
            self.funcs[text] = (callee.operation.clone(ip=ir.InsertionPoint(self.module.body)), names)
            self.numbers[text] = k
            self.sized[text] = sized
        return callee

    def locations(self, text, ops_locations):
        """The locations of the ops (func.return aside) of the decomposed func of a region of this
        text (decomposed before) whose func, undecomposed, holds ops at ops_locations (its copies
        of numbers first, then its ops); None where the names do not follow."""
        recipe = self.recipes.get(text)
        if recipe is None:
            template, names = self.funcs[text]
            recipe = self.recipes[text] = _Recipe(template, names, self.numbers[text])
        return recipe.locations(ops_locations)


class Outcome:
    """How thunder-fuse outlined a region of ops (None in Decomposed.outcomes where it kept none):
    `positions`, the ops kept (positions among the region's ops; the others went to torch at its
    edges); `text`, the text of their func before decomposing (Decomposed.funcs), whose ops'
    positions `survivors` are those of the func kept, `full` (a copy: its input checks, `checks`,
    and its dead ops taken out); `split`, None, or a Split where its tail went to torch."""

    def __init__(self, positions, text, survivors, full, checks, split):
        self.positions, self.text, self.survivors, self.full, self.checks, self.split = (
            positions, text, survivors, full, checks, split)
        self.kernel_text = None  # (fuse.kernel_text of its replays' kernel, once printed)


class Split:
    """fuse._split_tail's split of a kept region: the positions among full's ops (numbers
    aside) of the `tail` and `head` ops torch runs; `kernel` (a copy) and, for each of its ops,
    the position among full's ops (numbers included) of the op it copies (`sources`); its
    arguments (positions of full's) and results (("a", argument) or (op position, result))."""

    def __init__(self, tail, head, kernel, sources, args, results):
        self.tail, self.head, self.kernel, self.sources, self.args, self.results = (
            tail, head, kernel, sources, args, results)


def _leading_numbers(ops):
    """How many ops at the start are numbers (the copies of the numbers a region uses,
    fuse._build_func: decomposing inserts its ops after them)."""
    k = 0
    while k < len(ops) and ops[k].name == "arith.constant":
        k += 1
    return k


def clone(template, ip, name, arg_locations, locations):
    """A copy of the func template at ip, named name, its arguments and ops (func.return
    aside) at these locations."""
    copy = template.clone(ip=ip)
    copy.attributes["sym_name"] = name if isinstance(name, ir.Attribute) else ir.StringAttr.get(name)
    for a, loc in zip(copy.regions[0].blocks[0].arguments, arg_locations):
        a.set_location(loc)
    for o, loc in zip(_body(copy), locations):
        o.location = loc
    return copy


class _Recipe:
    """How the locations of a decomposed func (the template) follow from those of the ops of its
    func before decomposing (names: their value names; the first k, numbers), worked out once:
    each value name of the template is one of those ops' (slot (op, position)) plus a suffix
    (decompose.decompose_op names a decomposition's values after the op decomposed)."""

    def __init__(self, template, names, k):
        self.k, self.names = k, names
        slots = {}  # a value name of the ops -> its slots
        for j in range(k, len(names)):
            for n, t in enumerate(names[j]):
                slots.setdefault(t, []).append((j, n))
        # a name on two ops (a view and the op it views, named alike by a VJP rule) must map
        # alike in both: what derives from it is named and located alike
        self.alike = [found for found in slots.values() if len(found) > 1]
        self.ops = []  # per op of the template after the numbers: its location, or its names' parts
        for o in _body(template)[k:-1]:  # (func.return)
            derived = []
            for n in loc_names(o.location):
                base = n
                while base not in slots and "_" in base:
                    base = base.rsplit("_", 1)[0]
                if base not in slots:
                    self.ops = None  # (a name not derived from an op's: never copied)
                    return
                derived.append((*slots[base][-1], n[len(base):], n == base))
            # (per op: its names' parts, the op whose source line it gets, whether every name is
            # that op's own; or its location, where it has no name)
            self.ops.append((derived, derived[-1][0], all(same for *_, same in derived)) if derived else o.location)

    def locations(self, ops_locations):
        """The template's op locations (func.return aside) for a func whose ops before decomposing
        are at ops_locations, its values named after theirs; None where the names do not follow."""
        if self.ops is None:
            return None
        k = self.k
        new = [None] * k + [loc_names(where) for where in ops_locations[k:]]
        if any(len(new[j]) < len(self.names[j]) for j in range(k, len(new))):
            return None
        for found in self.alike:
            j, n = found[0]
            if any(new[i][m] != new[j][n] or ops_locations[i] != ops_locations[j] for i, m in found[1:]):
                return None
        locations = ops_locations[:k]  # (the numbers' as in the func)
        lines = {}
        for op in self.ops:
            if not isinstance(op, tuple):
                locations.append(op)
                continue
            derived, j, same = op
            names = [new[i][n] + suffix for i, n, suffix, _ in derived]
            # (an op of the region left as it was keeps its location; an op of a decomposition
            # gets the name and the source line of the op decomposed: emit.emit_symbol)
            if same and new[j] == names:
                locations.append(ops_locations[j])
                continue
            if j not in lines:
                lines[j] = loc_file_line(ops_locations[j])
            locations.append(location(",".join(names), lines[j]))
        return locations
