"""Whether leaving a transpose to torch (a strided view of a kernel's row-major result) makes the
reshape after it copy: `x.transpose(1, 2).reshape(B, S, H * D)` of a fused kernel's [B, H, S, D]
result copies it, while a kernel that writes the transposed value row-major makes that reshape
a view (thunder-fuse keeps such a transpose in the region: edge_ops.tail_views; the rule of
lowering/layout/rule.py seen from the region's tail)."""
import torch

from thunder.lowering.layout.values import RESHAPES, TRANSPOSES, permutation, ranked
from thunder.lowering.symbolic_sizes import hint_shape, known


def reshape_copies(operation):
    """Whether operation, a transpose of a row-major value, feeds a reshape that torch cannot run
    as a view of it."""
    if operation.name not in TRANSPOSES or not ranked(operation.operands[0]):
        return False
    perm = permutation(operation)
    if perm is None:
        return False
    if not known(operation.operands[0]):
        return True
    # (dynamic sizes: at the symbols' values, the call traced)
    view = torch.empty(hint_shape(operation.operands[0]), device="meta").permute(perm)
    for use in operation.results[0].uses:
        user = use.owner
        if user.name in RESHAPES and ranked(user.results[0]):
            if not known(user.results[0]):
                return True
            try:
                view.view(hint_shape(user.results[0]))
            except RuntimeError:  # (not expressible as a view of those strides)
                return True
    return False
