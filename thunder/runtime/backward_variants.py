"""The backward programs of one autograd program, one per set of cotangents present: compiled on
the first backward call with that set (thunder-fuse and code generation of @backward happen
then, never at the forward's compile), kept per set on the program (runtime/autograd.py). A set
that lacks some cotangents gets @backward specialized to those present first
(lowering/absent_cotangents.py)."""
from dataclasses import dataclass

from thunder.dialects.definitions import context
from thunder.dialects.emit import emit_into, find_func
from thunder.dialects.lift import lift
from thunder.dialects.mlir import LOCK, ir, module_of
from thunder.lowering.absent_cotangents import specialize, specialize_func
from thunder.lowering import index_add_into
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
    fused: bool = False  # thunder-fuse outlined a region


def unfused_backward(module):
    """@backward of an autograd module (after thunder-remat, before thunder-fuse): (a module of
    its own holding a copy of it, what specialize_backward starts from; its MLIR text, what the
    trace and the program cache keep)."""
    with module.context:
        func = find_func(module.operation, "backward")
        # (verified already: _cleanup's verification, and thunder-remat's passes after it keep IR valid)
        return module_of([func], _parsed_location()), func.operation.get_asm(enable_debug_info=True, assume_verified=True)


def _start(backward):
    """A fresh module of @backward to specialize: a copy of the module unfused_backward made (no
    printing and parsing again: the same context), or parsed from its text (a program from the
    program cache, runtime/portable.py)."""
    if isinstance(backward, str):
        return ir.Module.parse(backward)
    return module_of([find_func(backward.operation, "backward")], _parsed_location())


def _parsed_location():
    return ir.Location.file("-", 0, 0)  # (the location a parsed module gets)


def specialize_backward(backward, present, keep, fusion, first_fusion=0, size_checks=True):
    """The Variant of @backward (backward: unfused_backward's module, or its text) for the cotangents
    present (bools, one per cotangent input; all True: the backward as it is); keep(i): whether
    the gradient of forward input i must be returned even where it is zero; fusion:
    thunder-fuse's (policy, executors) or None; first_fusion: the number of its first fusion
    region (after the forward's, so that names stay unique across the pair); size_checks:
    python_source's."""
    with LOCK, context():
        module = _start(backward)
        old = find_func(module.operation, "backward")
        grad_of = list(ir.DenseI64ArrayAttr(old.attributes["thunder.grad_of"]))
        cotangent_for = list(ir.DenseI64ArrayAttr(old.attributes["thunder.cotangent_for"]))
        if not all(present):
            keep_grads = {j for j, i in enumerate(grad_of) if keep(i)}
            # (the ops reading a zero edited in place; else @backward lifted, specialized, emitted again)
            kept = specialize_func(old, present, keep_grads)
            if kept is None:
                kept = _specialized_by_lifting(old, present, keep_grads)
            grad_of = [grad_of[j] for j in kept]
            find_func(module.operation, "backward").attributes["thunder.grad_of"] = ir.DenseI64ArrayAttr.get(grad_of)
            # (verified: an edit in place replaces values by others, whose types every user's
            # verifier checks; verifying the return alone would not check it against the func)
            build_pass_manager("builtin.module(cse,canonicalize)").run(module.operation)
        index_add_into.rewrite(find_func(module.operation, "backward"))  # (a tied weight's two gradients)
        texts = {}  # (the kernel texts thunder-fuse knows: not printed again by code generation)
        if fusion is not None:
            fuse_module(module.operation, *fusion, first_index=first_fusion, texts=texts)
        fused = bool(fusion_callees(module.operation))
        absent = ", ".join(str(i) for i, p in zip(cotangent_for, present) if not p)
        producer = f"{'thunder-fuse' if fused else 'thunder-autograd'} (backward" + (
            f"; no cotangent for outputs {absent})" if absent else ")")
        kernels = {}
        source = python_source(module, "backward", constants=kernels, grad_free=True, header=f"produced by: {producer}",
                               region_texts=texts, size_checks=size_checks)
        # (its kernels tiered as the other programs': runtime/tiered.py)
        return Variant(grad_of, compile_source(source, "backward", constants=tiered.tier(kernels)),
                       source, kernels, module, producer, fused)


def _specialized_by_lifting(old, present, keep):
    """specialize_func's general path: func old replaced by the func absent_cotangents.specialize
    makes of it; the indices of the results kept."""
    ctx, outputs = specialize(lift(old), present, keep=keep)
    kept = [j for j, r in enumerate(outputs) if r is not None]
    attributes = {"thunder.grad_of": old.attributes["thunder.grad_of"],
                  "thunder.cotangent_for": old.attributes["thunder.cotangent_for"]}
    with ir.InsertionPoint(old), old.location:
        emit_into(ctx, [outputs[j] for j in kept], "backward", attributes=attributes)
    old.erase()
    return kept
