"""Runtime glue for training: the forward and backward programs that thunder-autograd produced
run inside a torch.autograd.Function, so .backward(), torch.autograd.grad, gradient
accumulation and retain_graph behave as in eager."""
import torch

from thunder.dialects.mlir import ir
from thunder.dialects.emit import find_func
from thunder.ops.custom_function import NONE_GRAD
from thunder.runtime.codegen import compile_source, python_source
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
        # outputs that no gradient reaches (integer results, no_grad regions) are plain tensors
        diff = set(program.cotangent_for)
        non_diff = [o for i, o in enumerate(outputs) if i not in diff and isinstance(o, torch.Tensor)]
        if non_diff:
            ctx.mark_non_differentiable(*non_diff)
        return outputs if n != 1 else outputs[0]

    @staticmethod
    def backward(ctx, *cotangents):
        program = ctx.program
        tensors = iter(ctx.saved_tensors)
        saved = [next(tensors) if v is None else v for v in ctx.saved_numbers]
        used = {i for i in program.cotangent_for if cotangents[i] is not None}
        result = [None] * program.num_inputs
        if not used:
            return (None, *result)
        cts = []
        for i in program.cotangent_for:
            c = cotangents[i]
            if c is None:
                shape, dtype, device = ctx.output_meta[i]
                c = torch.zeros(shape, dtype=dtype, device=device)
            cts.append(c)
        with torch.no_grad():
            grads = program.backward(*saved, *cts)
        if not isinstance(grads, tuple):
            grads = (grads,)
        for i, g in zip(program.grad_of, grads):
            if program.reaches[i] & used and not hasattr(g, NONE_GRAD):
                result[i] = g
        return (None, *result)


class AutogradProgram:
    """The compiled forward/backward pair of one cache entry."""

    def __init__(self, module, num_inputs, sources=True):
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
