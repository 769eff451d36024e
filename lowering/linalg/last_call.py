"""The cheap path of a fused kernel's call: a call whose tensors have exactly the metadata of the
last call that ran the kernel in this thread reuses that call's frame.

A kernel's full call (Kernel.call) checks each argument in Python (a CPU tensor of the compiled
shape and dtype), reads its strides to pick the compiled variant and its CallFrame, then
allocates the outputs: ~10 us a call, 25 calls a Llama decode step. Here one C++ check of
torch's TensorGuards (dynamo's) compares the arguments with the last call's: Python type,
dtype, device, dispatch keys, requires_grad, sizes and strides, all exact, and distinct tensors
(it returns False for a tensor passed twice). That is stricter than the full call's checks, so a
call it passes would have passed them and picked the same frame; any other call takes the full
path, which arms this one again for its tensors."""
import threading

import torch

from thunder.core import fresh_memory
from thunder.lowering.linalg.tiling import row_major_strides

try:  # torch's C++ check of tensor metadata (dynamo's guards use it), part of torch._C
    from torch._C._dynamo.guards import TensorGuards
except ImportError:  # (a torch without it: every call takes the full path)
    TensorGuards = None


class LastCall:
    """What a kernel's full call leaves for the next call with the same tensors: the thread and
    torch thread count it ran under, the TensorGuards of its arguments, its CallFrame, and how
    each output is made: `torch.empty_like` of an argument of its shape, dtype and row-major
    strides (the strides the frame writes; the guards hold them), else `Tensor.new_empty` of a
    plain torch.Tensor argument, else torch.empty."""

    __slots__ = ("thread", "threads", "guards", "frame", "makers")

    def __init__(self, args, strides, frame, outputs):
        self.thread, self.threads = threading.get_ident(), torch.get_num_threads()
        self.guards = TensorGuards(*args, dynamic_dims_sizes=[list(a.shape) for a in args],
                                   dynamic_dims_strides=[list(s) for s in strides])
        self.frame = frame
        template = next((i for i, a in enumerate(args) if type(a) is torch.Tensor), None)
        self.makers = tuple(_maker(args, strides, shape, dtype, template) for shape, dtype in outputs)

    @staticmethod
    def arm(args, strides, frame, outputs):
        """A LastCall for a full call with these tensor arguments (no runtime numbers) and
        outputs ((shape, dtype)s), or None where the check cannot describe them (a tensor
        passed twice, no TensorGuards)."""
        if TensorGuards is None or len({id(a) for a in args}) != len(args):
            return None
        return LastCall(args, strides, frame, outputs)

    def matches(self, args):
        return (self.thread == threading.get_ident() and self.threads == torch.get_num_threads()
                and self.guards.check(*args))

    def run(self, args):
        """Run the frame on args with new outputs; return them."""
        outs = tuple([make(args) for make in self.makers])
        self.frame(args + outs)
        return outs


def _maker(args, strides, shape, dtype, template):
    """args -> a new tensor of (shape, dtype), row-major, on the CPU (torch.empty_like: less time
    than new_empty's and torch.empty's argument parsing)."""
    if fresh_memory.is_large(shape, dtype):  # (its own huge pages: no 4 KiB page faults)
        return lambda args: fresh_memory.empty(shape, dtype)
    row_major = tuple(row_major_strides(shape))
    for i, a in enumerate(args):
        if type(a) is torch.Tensor and a.dtype == dtype and tuple(a.shape) == tuple(shape) and \
                tuple(strides[i]) == row_major:
            return lambda args, i=i: torch.empty_like(args[i])
    if template is not None:
        return lambda args: args[template].new_empty(shape, dtype=dtype)
    return lambda args: torch.empty(shape, dtype=dtype, device="cpu")
