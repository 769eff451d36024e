"""What a `detach` costs as a torch call, for thunder-fuse's cost model (fuse.worth_fusing).

Under torch.no_grad() the trace records a detach after each op on a tensor that requires grad
(to cut thunder-autograd's gradient flow). Generated programs that record no autograd history
(codegen's grad_free: thunder-autograd's @forward and @backward, inference programs compiled
with grad mode off or with no tensor that requires grad) drop a detach unless its operand may
require grad when the program runs (an input, a view of one, what the fallback's torch calls or
a fusion region may return of an argument: runtime/codegen.py _GradLeaves): such a detach
costs nothing, and a region holding it saves no call by fusing it. Elsewhere (a program that
records history) a detach is a dispatch, like a view.

recording_history(True) around a fusion pass marks its program as one that records history."""
import contextvars

from thunder.dialects.mlir import ir
from thunder.lowering.edge_ops import is_view
from thunder.ops import registry
from thunder.core.scoped import scoped

_RECORDING = contextvars.ContextVar("thunder_fuse_recording_history", default=False)
# ops whose result may be (a view of) an operand: a detach of it may cut real history
_ALIASING = ("ltorch.torch_call", "ltorch.torch_call_random")


def recording_history(recording=True):
    """Inside: the program being fused records autograd history when it runs (its detaches run)."""
    return scoped(_RECORDING, recording)


def dropped(operation):
    """Whether the generated program leaves out this ltorch.detach: its program records no
    history and its operand is made by an op whose result cannot be an argument or a view of
    one."""
    if operation.name != "ltorch.detach" or _RECORDING.get():
        return False
    owner = operation.operands[0].owner
    if isinstance(owner, ir.Block):
        return False  # a block argument: an input of the program
    producer = owner.operation
    op = registry.OPS.get(producer.name)
    return not (is_view(producer) or producer.name in _ALIASING or producer.name == "func.call"
                or (op is not None and op.returns_input))
