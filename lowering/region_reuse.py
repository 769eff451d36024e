"""Regions of one text are decomposed once (thunder-fuse): a model's N identical layers make N
regions whose funcs print alike (names aside). The first is decomposed into prims
(thunder-decompose); the others become copies of it, their value names and source locations made
what decomposing them would have given (the names of a decomposition's values derive from the
name of the op decomposed: `t5` -> `t5_0`, `t5_0_1`; decompose.decompose_op), so the generated
program, whose torch calls outside the kernels may be ops of a region (fuse._split_tail), is
the same."""
from thunder.dialects.emit import loc_file_line, loc_names, location
from thunder.dialects.mlir import ir
from thunder.lowering.decompose import decompose_module

STATS = {"hits": 0, "misses": 0}  # regions copied / decomposed, over all runs (tests)


def _body(func_op):
    return [o.operation for o in func_op.regions[0].blocks[0].operations]


class Decomposed:
    """The regions decomposed in one run of thunder-fuse: text -> (a copy of the decomposed func,
    kept in a module of its own; the value names of its ops before decomposing)."""

    def __init__(self, context):
        self.funcs = {}
        with context:
            self.module = ir.Module.create()

    def decompose(self, callee, text):
        """callee (a func of a region's ops, text: its text with its name replaced) decomposed;
        returns the func (a new one where it is a copy)."""
        found = self.funcs.get(text)
        if found is not None:
            copy = _renamed_copy(callee, *found)
            if copy is not None:
                STATS["hits"] += 1
                return copy
        STATS["misses"] += 1
        names = [loc_names(o.location) for o in _body(callee)]
        decompose_module(callee.operation)
        if found is None:
            self.funcs[text] = (callee.operation.clone(ip=ir.InsertionPoint(self.module.body)), names)
        return callee


def _leading_numbers(ops):
    """How many ops at the start are numbers (the copies of the numbers a region uses,
    fuse._build_func: decomposing inserts its ops after them)."""
    k = 0
    while k < len(ops) and ops[k].name == "arith.constant":
        k += 1
    return k


def _renamed_copy(callee, template, template_names):
    """A copy of template in place of callee (same text before decomposing), its values named
    after callee's; None where a name of the template is not derived from an op's name."""
    ops = _body(callee)
    k = _leading_numbers(ops)
    members = {}  # the template's op name -> (callee's name, callee's op location)
    for names, o in zip(template_names[k:], ops[k:]):
        for t, c in zip(names, loc_names(o.location)):
            # a name on two ops (a view and the op it views, named alike by a VJP rule) maps
            # alike in both: what derives from it is named and located alike
            if t in members and members[t] != (c, o.location):
                return None
            members[t] = (c, o.location)
    locations = [o.location for o in ops[:k]]  # (the numbers' as in callee)
    for o in _body(template)[k:-1]:  # (func.return)
        names = loc_names(o.location)
        if not names:
            locations.append(o.location)
            continue
        new, where = [], None
        for n in names:
            base = n
            while base not in members and "_" in base:
                base = base.rsplit("_", 1)[0]
            if base not in members:
                return None
            c, where = members[base]
            new.append(c + n[len(base):])
        # (an op of the region left as it was keeps its location; an op of a decomposition gets
        # the name and the source line of the op decomposed: emit.emit_symbol)
        exact = all(n in members for n in names) and loc_names(where) == new
        locations.append(where if exact else location(",".join(new), loc_file_line(where)))
    copy = template.clone(ip=ir.InsertionPoint(callee))
    copy.attributes["sym_name"] = callee.attributes["sym_name"]
    for a, b in zip(copy.regions[0].blocks[0].arguments, callee.regions[0].blocks[0].arguments):
        a.set_location(b.location)
    for o, loc in zip(_body(copy), locations):
        o.location = loc
    callee.operation.erase()
    return copy
