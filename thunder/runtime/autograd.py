"""Runtime glue for training: the forward and backward programs that thunder-autograd produced
run inside a torch.autograd.Function, so .backward(), torch.autograd.grad, gradient
accumulation and retain_graph behave as in eager."""
import torch

from thunder.dialects.mlir import ir
from thunder.dialects.emit import find_func
from thunder.ops.custom_function import NONE_GRAD
from thunder.runtime.backward_variants import specialize_backward, unfused_backward
from thunder.runtime.codegen import compile_source, python_source
from thunder.runtime.traces import Trace
from thunder.dialects.lift import lift


class _ThunderAutograd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, program, *inputs):
        with torch.no_grad():
            results = program.forward(*inputs)
        if not isinstance(results, tuple):
            results = (results,)
        n = program.num_outputs
        outputs, saved = results[:n], results[n:]
        # (runtime numbers, core/numbers.py, are outputs and saved values too: kept on ctx)
        ctx.save_for_backward(*(v for v in saved if isinstance(v, torch.Tensor)))
        ctx.saved_numbers = [None if isinstance(v, torch.Tensor) else v for v in saved]
        ctx.program = program
        # unused outputs' cotangents stay None, so inputs that only reach them get None (as eager)
        ctx.set_materialize_grads(False)
        ctx.output_meta = [(o.shape, o.dtype, o.device) if isinstance(o, torch.Tensor) else None for o in outputs]
        # outputs that no gradient reaches (integer results, no_grad regions) are plain tensors,
        # except where eager's require grad (computed from a view made under no_grad of a tensor
        # that requires grad): they get a grad_fn that sends nothing, as eager's
        diff = set(program.cotangent_for) | program.grad_outputs
        non_diff = [o for i, o in enumerate(outputs) if i not in diff and isinstance(o, torch.Tensor)]
        if non_diff:
            ctx.mark_non_differentiable(*non_diff)
        return outputs if n != 1 else outputs[0]

    @staticmethod
    def backward(ctx, *cotangents):
        program = ctx.program
        used = {i for i in program.cotangent_for if cotangents[i] is not None}
        result = [None] * program.num_inputs
        if not used:  # (before reading the saved tensors: outputs with no gradient path need none)
            return (None, *result)
        tensors = iter(ctx.saved_tensors)
        saved = [next(tensors) if v is None else v for v in ctx.saved_numbers]
        cts = [cotangents[i] for i in program.cotangent_for]
        backward, grad_of = program.backward, program.grad_of
        if len(used) < len(cts):
            # outputs without a gradient: a backward that treats their cotangents as zeros
            # without making them (compiled per set of cotangents present), where the program
            # has one (a program for symbolic sizes, or stored by an older version, gets zeros)
            variant = program.backward_for(used) if hasattr(program, "backward_for") else None
            if variant is not None:
                backward, grad_of = variant.backward, variant.grad_of
            else:
                cts = [torch.zeros(ctx.output_meta[i][0], dtype=ctx.output_meta[i][1], device=ctx.output_meta[i][2])
                       if c is None else c for i, c in zip(program.cotangent_for, cts)]
        with torch.no_grad():
            grads = backward(*saved, *cts)
        if not isinstance(grads, tuple):
            grads = (grads,)
        for i, g in zip(grad_of, grads):
            if program.reaches[i] & used and not hasattr(g, NONE_GRAD):
                result[i] = g
        return (None, *result)


class AutogradProgram:
    """The compiled forward/backward pair of one cache entry."""
    backward_mlir = None  # (also for a program made from its portable description: runtime/portable.py)
    fusion = None
    backward_traces = None
    grad_outputs = frozenset()  # the outputs that require grad in eager (set by runtime/compile.py)

    def __init__(self, module, num_inputs, fusion=None, sources=True):
        """sources=False: the programs come later (set_programs): thunder-fuse will outline
        regions, and the programs of the unfused module would be generated for nothing."""
        with module.context:
            fwd = find_func(module.operation, "forward")
            bwd = find_func(module.operation, "backward")
            self.num_outputs = ir.IntegerAttr(fwd.attributes["thunder.num_outputs"]).value
            self.grad_of = list(ir.DenseI64ArrayAttr(bwd.attributes["thunder.grad_of"]))
            self.cotangent_for = list(ir.DenseI64ArrayAttr(bwd.attributes["thunder.cotangent_for"]))
        self.num_inputs = num_inputs
        self.reaches = _reaches(module)  # input index -> indices of the outputs it influences
        self.constants = {"forward": {}, "backward": {}}  # the kernels their sources call (fusion)
        if sources:
            self.set_programs(module, "thunder-autograd")
        # for the backward programs of calls where some outputs get no gradient (backward_for)
        self.backward_mlir = unfused_backward(module) if len(self.cotangent_for) > 1 else None
        self.fusion = fusion  # thunder-fuse's (policy, executors), None: no fusion
        self.variants = {}  # frozenset of the outputs with a cotangent -> backward_variants.Variant
        self.backward_traces = None  # a list to add each variant's trace to (the cache entry's)

    def set_programs(self, module, producer, constants=None, tier=None):
        """forward and backward (their sources and functions) generated from @forward and
        @backward of module; constants: the namespace the sources get (fusion's kernels), by
        func name; tier: what the functions get in its place (runtime/tiered.py tier)."""
        for fn_name in ("forward", "backward"):
            names = constants[fn_name] if constants is not None else {}
            # (both run under torch.no_grad: grad-free code)
            src = python_source(module, fn_name, header=f"produced by: {producer} ({fn_name})", grad_free=True,
                                constants=names if constants is not None else None)
            setattr(self, f"{fn_name}_source", src)
            self.constants[fn_name] = names
            setattr(self, fn_name, compile_source(src, fn_name, constants=tier(names) if tier else names))

    def backward_for(self, used):
        """The backward program for the calls whose cotangents are those of the outputs in used
        (a Variant: takes None for the others), or None where this program cannot make one."""
        key = frozenset(used)
        variants = self.__dict__.setdefault("variants", {})
        variant = variants.get(key)
        if variant is None and self.backward_mlir is not None:
            present = [i in key for i in self.cotangent_for]
            variant = variants[key] = specialize_backward(self.backward_mlir, present,
                                                               lambda i: bool(self.reaches[i] & key), self.fusion)
            if self.backward_traces is not None:
                self.backward_traces.append(Trace(variant.producer, variant.module, python=variant.source,
                                                  fn_name="backward", fn=variant.backward))
        return variant

    def __call__(self, *inputs):
        return _ThunderAutograd.apply(self, *inputs)


def _reaches(module):
    with module.context:
        fwd = lift(find_func(module.operation, "forward"))
    deps = {r.name: {i} for i, r in enumerate(fwd.ctx.inputs)}
    for bsym in fwd.ctx.symbols:
        srcs = set()
        for r in bsym.tensor_args():
            srcs |= deps.get(r.name, set())
        for o in bsym.outputs:
            deps[o.name] = srcs
    reaches = [set() for _ in fwd.ctx.inputs]
    for j, r in enumerate(fwd.outputs):
        for i in deps.get(r.name, ()):
            reaches[i].add(j)
    return reaches
