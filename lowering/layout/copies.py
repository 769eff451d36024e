"""Whether leaving a transpose to torch (a strided view of a kernel's row-major result) makes the
reshape after it copy: `x.transpose(1, 2).reshape(B, S, H * D)` of a fused kernel's [B, H, S, D]
result copies it, while a kernel that writes the transposed value row-major makes that reshape
a view (thunder-fuse keeps such a transpose in the region, lowering/fuse.py)."""
import torch

from thunder.dialects.mlir import ir

TRANSPOSES = {"ltorch.transpose", "ltorch.permute", "thunder.transpose"}
RESHAPES = {"ltorch.reshape", "ltorch.view", "thunder.reshape"}


def _shape(value):
    return tuple(ir.RankedTensorType(value.type).shape)


def permutation(operation):
    """The transpose's permutation of its operand's dims, from its operand and result shapes
    and attributes; None where it cannot be read."""
    attrs = operation.attributes
    rank = len(_shape(operation.operands[0]))
    if rank == 0:
        return None  # (a 0-d tensor's transpose is itself: no layout to change)
    try:
        for name in ("permutation", "dims"):
            if name in attrs:
                return [d % rank for d in ir.DenseI64ArrayAttr(attrs[name])]
        d0, d1 = (ir.IntegerAttr(attrs[k]).value % rank for k in ("dim0", "dim1"))
    except (KeyError, ValueError, TypeError):
        return None
    perm = list(range(rank))
    perm[d0], perm[d1] = d1, d0
    return perm


def reshape_copies(operation):
    """Whether operation, a transpose of a row-major value, feeds a reshape that torch cannot run
    as a view of it."""
    if operation.name not in TRANSPOSES or not isinstance(operation.operands[0].type, ir.RankedTensorType):
        return False
    perm = permutation(operation)
    if perm is None:
        return False
    view = torch.empty(_shape(operation.operands[0]), device="meta").permute(perm)
    for use in operation.results[0].uses:
        user = use.owner
        if user.name in RESHAPES and isinstance(user.results[0].type, ir.RankedTensorType):
            try:
                view.view(_shape(user.results[0]))
            except RuntimeError:  # (not expressible as a view of those strides)
                return True
    return False
