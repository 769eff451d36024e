"""The rule by which layout ops move out of fusion regions: a sink may bring a layout op to a
region's edge only where torch then runs it as a view of a value no region makes or reads (a
kernel's input before it, its result after it), never where it would be a copy or sit between
two ops a region could hold. `fusable(op)` says whether an op could be in a region."""
from thunder.dialects.mlir import ir


def made_in_region(value, fusable):
    """Whether value is the result of an op a region could hold (a func argument is not)."""
    return not isinstance(value.owner, ir.Block) and fusable(value.owner)


def visible(f):
    """Whether a use of a value by f's func.return (an OpOperand) returns it where its strides are
    user-visible: every result, or the first thunder.num_outputs of a training @forward (the
    others are saved for @backward). (A predicate on the use, not the set of the returned
    values: listing them per sink made sinking a model's transposes quadratic in its depth.)"""
    n = ir.IntegerAttr(f.attributes["thunder.num_outputs"]).value if "thunder.num_outputs" in f.attributes else None
    return lambda use: n is None or use.operand_number < n


def leaves_regions(ops, values, keep, fusable, visible_use):
    """Whether every use of values (but keep's) by an op outside ops is outside any region and
    no user-visible result (visible_use: visible(f)): the layout op a sink puts before such a
    use is then a torch view."""
    for v in values:
        if v == keep:
            continue
        for use in v.uses:
            u = use.owner.operation
            if u in ops:
                continue
            if u.name == "func.return":
                if visible_use(use):
                    return False
            elif fusable(u):
                return False
    return True
