"""The backward programs of one autograd program specialized to the cotangents present
(lowering/absent_cotangents.py): compiled on the first backward that lacks a given set of
cotangents, kept per set on the program."""
from dataclasses import dataclass

from thunder.dialects.definitions import context
from thunder.dialects.emit import emit_into, find_func
from thunder.dialects.lift import lift
from thunder.dialects.mlir import LOCK, ir
from thunder.lowering.absent_cotangents import specialize
from thunder.lowering.fuse import fuse_module, fusion_callees
from thunder.lowering.passes import build_pass_manager
from thunder.runtime import tiered
from thunder.runtime.codegen import compile_source, python_source


@dataclass
class Variant:
    grad_of: list  # the forward inputs whose gradients it returns, in order
    backward: object  # the compiled function: (saved..., cotangents...) with None for the absent ones
    source: str
    constants: dict  # the kernels its source calls
    module: object  # its MLIR module (@backward and its fusion callees)
    producer: str  # what its trace is called


def unfused_backward(module):
    """@backward of an autograd module (after thunder-remat, before thunder-fuse) as MLIR text
    (what specialize_backward starts from)."""
    with module.context:
        return find_func(module.operation, "backward").operation.get_asm(enable_debug_info=True)


def specialize_backward(backward_mlir, present, keep, fusion):
    """The Variant of @backward (backward_mlir: unfused_backward's text) for the cotangents
    present (bools, one per cotangent input); keep(i): whether the gradient of forward input i
    must be returned even where it is zero; fusion: thunder-fuse's (policy, executors) or None."""
    with LOCK, context():
        module = ir.Module.parse(backward_mlir)
        old = find_func(module.operation, "backward")
        grad_of = list(ir.DenseI64ArrayAttr(old.attributes["thunder.grad_of"]))
        lifted = lift(old)
        ctx, outputs = specialize(lifted, present, keep={j for j, i in enumerate(grad_of) if keep(i)})
        kept = [(i, r) for i, r in zip(grad_of, outputs) if r is not None]
        attributes = {"thunder.grad_of": ir.DenseI64ArrayAttr.get([i for i, _ in kept]),
                      "thunder.cotangent_for": old.attributes["thunder.cotangent_for"]}
        with ir.InsertionPoint(old), old.location:
            emit_into(ctx, [r for _, r in kept], "backward", attributes=attributes)
        old.erase()
        build_pass_manager("builtin.module(cse,canonicalize)").run(module.operation)
        if fusion is not None:
            fuse_module(module.operation, *fusion)
        fused = bool(fusion_callees(module.operation))
        cotangent_for = list(ir.DenseI64ArrayAttr(attributes["thunder.cotangent_for"]))
        absent = ", ".join(str(i) for i, p in zip(cotangent_for, present) if not p)
        producer = f"{'thunder-fuse' if fused else 'thunder-autograd'} (backward; no cotangent for outputs {absent})"
        kernels = {}
        source = python_source(module, "backward", constants=kernels, grad_free=True, header=f"produced by: {producer}")
        # (its kernels tiered as the other programs': runtime/tiered.py)
        return Variant([i for i, _ in kept], compile_source(source, "backward", constants=tiered.tier(kernels)),
                       source, kernels, module, producer)

