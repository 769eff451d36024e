"""The rule by which layout ops move out of fusion regions: a sink may bring a layout op to a
region's edge only where torch then runs it as a view of a value no region makes or reads (a
kernel's input before it, its result after it), never where it would be a copy or sit between
two ops a region could hold. `fusable(op)` says whether an op could be in a region."""
from thunder.dialects.mlir import ir


def made_in_region(value, fusable):
    """Whether value is the result of an op a region could hold (a func argument is not)."""
    return not isinstance(value.owner, ir.Block) and fusable(value.owner)


def visible(f, ret=None):
    """The values f returns (ret: its func.return, where the caller has it: listing the block per
    call is linear in its length) where their strides are user-visible: all its results, or the
    first thunder.num_outputs of a training @forward (the others are saved for @backward)."""
    if ret is None:
        ret = list(f.regions[0].blocks[0].operations)[-1]
    values = list(ret.operands)
    if "thunder.num_outputs" in f.attributes:
        values = values[:ir.IntegerAttr(f.attributes["thunder.num_outputs"]).value]
    return set(values)


def leaves_regions(ops, values, keep, fusable, visible_values):
    """Whether every use of values (but keep's) by an op outside ops is outside any region and
    no user-visible result: the layout op a sink puts before such a use is then a torch view."""
    for v in values:
        if v == keep:
            continue
        for use in v.uses:
            u = use.owner.operation
            if u in ops:
                continue
            if u.name == "func.return":
                if v in visible_values:
                    return False
            elif fusable(u):
                return False
    return True
