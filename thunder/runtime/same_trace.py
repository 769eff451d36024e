"""A recompile whose trace is one compiled before reuses that compile's program.

A miss often traces the very program of an earlier entry: a guard failed on Python state the
trace read but that decided nothing about the tensors. torch's `record_function` (every
optimizer's step runs one) imports an optional module once and sets a module global
(`torch.autograd.profiler._cupti_monitor_checked`) while the first call is traced, so the entry
guarded at its old value missed on the second call; warn-once flags and lazily filled caches do
the same. The miss is still traced (the guards and the state it reads and writes are the new
call's), but where the acquired trace (its MLIR with locations, so the same ops from the same
source lines) and everything else the passes and code generation read are those of an earlier
compile of the same jitted function, the program, its kernels and its autograd program are
that compile's: no passes, no autograd, no code generation, no kernel compile. Only a new
prologue is made.

What else decides the program, compared with the trace (`key`): grad mode, the fusion option of
this compile, whether sizes are being fitted, the input tensors' metadata (type, shape, dtype,
device, requires_grad, strides) and where they are read from, the autograd facts the
interpreter recorded (ops under grad mode, results that require grad, leaves made, inputs
updated), the ambient torch state the trace consulted and the output structure (its constants
by identity). Compiles with symbolic sizes or stand-in inputs (runtime/generalize.py) and
inputs that share memory are never reused."""
from thunder.core import size_choices
from thunder.lowering import fuse

KEEP = 4  # recent compiles of a jitted function kept for comparison


def key(fusion, grad_mode, ctx, tensors, reads, ambient):
    """What the program depends on beyond the acquired trace and the output structure."""
    return (fusion, grad_mode, fuse.fitting_sizes(), size_choices.fitting(),
            tuple((type(t), tuple(t.shape), t.dtype, t.device, t.requires_grad, tuple(t.stride())) for t in tensors),
            tuple(expr for expr, _ in reads),
            (ctx.grad_leaf, ctx.grad_ops, ctx.requires_grad, frozenset(ctx.grad_names), ctx.grad_mutated,
             bool(ctx.made_leaves), tuple(sorted(ctx.mutated))),
            tuple((name, ambient.get(name)) for name in sorted(ctx.consulted)))


def same_spec(a, b):
    """Whether two output specs (runtime/structure.py flatten_outputs) are the same: plain values
    by type and value, other objects (a class, a constant returned, a tensor held) by identity."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_spec(x, y) for x, y in zip(a, b))
    if a is None or isinstance(a, (bool, int, float, str, complex, bytes)):
        return a == b
    return a is b


def find(kept, k, spec, trace):
    """The earlier compile (its `payload`) with this key, output spec and acquired trace, or None.
    The traces are printed only where the rest matches (a recompile of this kind)."""
    for k0, spec0, trace0, payload in kept:
        if k0 == k and same_spec(spec0, spec) and trace0.to_mlir(debug_info=True) == trace.to_mlir(debug_info=True):
            return payload
    return None


def remember(kept, k, spec, trace, payload):
    """Keeps a compile for later misses to compare with (the newest KEEP)."""
    kept.insert(0, (k, spec, trace, payload))
    del kept[KEEP:]
