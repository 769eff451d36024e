"""Runtime glue for training: the forward and backward programs that thunder-autograd produced
run inside a torch.autograd.Function, so .backward(), torch.autograd.grad, gradient
accumulation and retain_graph behave as in eager; a backward with create_graph=True recomputes
the forward and runs the backward as torch calls that autograd records."""
import contextlib
import time

import torch

from thunder.dialects.mlir import LOCK, ir
from thunder.dialects.emit import find_func
from thunder.ops import packed_linear
from thunder.ops.custom_function import NONE_GRAD
from thunder.runtime import tiered
from thunder.runtime.autocast_casts import outside_autocast
from thunder.runtime.backward_variants import Variant, specialize_backward, unfused_backward
from thunder.runtime.codegen import compile_source, python_source
from thunder.runtime.gc_pause import full_collections_deferred
from thunder.runtime.traces import Trace
from thunder.dialects import attrs, sizes
from thunder.dialects.definitions import LIST_OP, context, is_list_type
from thunder.dialects.lift import lift
from thunder.lowering import decompose_reuse


def distinct_tensors(values):
    """values with a tensor that repeats copied: the trace's outputs are distinct tensors, which
    cse may have merged (codegen.distinct_results)."""
    seen = set()
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            if id(v) in seen:
                v = v.clone()
            seen.add(id(v))
        out.append(v)
    return tuple(out)


class _ThunderAutograd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, program, *inputs):
        # (a gradient of the gradient recomputes the forward from the inputs: _gradients_with_history;
        # their versions tell whether one changed in place since, the forward's own updates included)
        ctx.inputs = inputs
        ctx.versions = [v._version if isinstance(v, torch.Tensor) else None for v in inputs]
        with torch.no_grad():
            results = program.forward(*inputs)
        ctx.updates_inputs = any(v is not None and x._version != v for x, v in zip(inputs, ctx.versions))
        if not isinstance(results, tuple):
            results = (results,)
        n = program.num_outputs
        outputs, saved = distinct_tensors(results[:n]), results[n:]
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
        if not used:  # (before reading the saved tensors: outputs with no gradient path need none)
            return (None,) * (1 + program.num_inputs)
        if torch.is_grad_enabled():  # (autograd runs a backward in grad mode for create_graph=True only)
            return (None, *_gradients_with_history(ctx, used, cotangents))
        tensors = iter(ctx.saved_tensors)
        saved = [next(tensors) if v is None else v for v in ctx.saved_numbers]
        cts = [cotangents[i] for i in program.cotangent_for]
        # the backward for the cotangents present (compiled on the first call with them; outputs
        # without a gradient: their cotangents treated as zeros without making them), where the
        # program has one (a program for symbolic sizes, or stored by an older version: its one
        # backward, zeros for the absent cotangents)
        variant = program.backward_for(used) if hasattr(program, "backward_for") else None
        if variant is not None:
            backward, grad_of = variant.backward, variant.grad_of
        else:
            backward, grad_of = program.backward, program.grad_of
            cts = _with_zeros(ctx, cotangents)
        with torch.no_grad():  # (loss.backward() inside the autocast region: its casts are in the trace)
            grads = outside_autocast(backward)(*saved, *cts, *_backward_symbols(ctx))
        return (None, *_gradients(program, grad_of, grads, used))


def _backward_symbols(ctx):
    """The symbols a program for all sizes' backward takes after the cotangents (none elsewhere)."""
    symbolic = getattr(ctx.program, "symbolic", None)
    return symbolic(ctx.inputs) if symbolic is not None else ()


def _with_zeros(ctx, cotangents):
    """The cotangents @backward takes, zeros for the outputs that got none."""
    return [torch.zeros(ctx.output_meta[i][0], dtype=ctx.output_meta[i][1], device=ctx.output_meta[i][2])
            if cotangents[i] is None else cotangents[i] for i in ctx.program.cotangent_for]


def _gradients(program, grad_of, grads, used):
    """A backward's results as the gradients of the program's inputs (None where no used
    output depends on an input, or where a custom Function's backward gave none)."""
    if not isinstance(grads, tuple):
        grads = (grads,)
    result = [None] * program.num_inputs
    for i, g in zip(grad_of, grads):
        if program.reaches[i] & used and not hasattr(g, NONE_GRAD):
            result[i] = g
    return result


def _no_double_backward(reason):
    return NotImplementedError(
        "thunder: a gradient of a gradient through a thunder.jit function (torch.autograd.grad or .backward "
        f"with create_graph=True) is not supported where {reason}. Workaround: compute the part that is "
        "differentiated twice with the function itself, not its jitted version.")


def _gradients_with_history(ctx, used, cotangents):
    """The backward for create_graph=True (a gradient penalty, a Hessian-vector product): the
    saved tensors were computed without history and the backward runs fused kernels, so its
    gradients would have none, and a loss adding them would lose their part of its gradient.
    Here the forward is recomputed from the call's inputs and the backward run after it, both as
    torch calls that autograd records (AutogradProgram.differentiable)."""
    program = ctx.program
    fwd, bwd, reason = program.differentiable()
    if ctx.updates_inputs:  # (its recompute would update them again)
        reason = "the function updates its inputs in place (BatchNorm's running statistics)"
    if reason:
        raise _no_double_backward(reason)
    if any(v is not None and x._version != v for x, v in zip(ctx.inputs, ctx.versions)):
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an inplace operation "
            "(an input of a thunder.jit call, from which a gradient with create_graph=True recomputes the call)")
    tensors = [x for x in ctx.inputs if isinstance(x, torch.Tensor)]
    cuda = sorted({x.device.index or 0 for x in tensors if x.device.type == "cuda"})
    with torch.random.fork_rng(devices=cuda):  # (the caller's generators as they were, drawn from or not)
        before = _generator_states(cuda)
        results = outside_autocast(fwd)(*ctx.inputs)
        if any(not torch.equal(a, b) for a, b in zip(before, _generator_states(cuda))):
            raise _no_double_backward("the function draws random numbers (dropout: a recompute of the call "
                                      "draws others)")
    if not isinstance(results, tuple):
        results = (results,)
    grads = outside_autocast(bwd)(*results[program.num_outputs:], *_with_zeros(ctx, cotangents),
                                  *_backward_symbols(ctx))
    return _gradients(program, program.grad_of, grads, used)


def _generator_states(cuda):
    return [torch.get_rng_state(), *(torch.cuda.get_rng_state(i) for i in cuda)]


class AutogradProgram:
    """The compiled forward/backward pair of one cache entry. The forward is generated when the
    entry compiles; each backward (thunder-fuse and code generation of @backward) on the first
    backward call with its set of cotangents present (backward_for), so a backward never run is
    never compiled and none is compiled twice. `backward`/`backward_source`: the backward for all
    cotangents, compiled when first read."""
    backward_mlir = None  # (also for a program made from its portable description: runtime/portable.py)
    fusion = None
    backward_traces = None
    grad_outputs = frozenset()  # the outputs that require grad in eager (set by runtime/compile.py)
    first_fusion = 0
    reporting = None
    # a program for all sizes compiled with its symbols (runtime/symbolic_program.py): the
    # symbols its backward takes, read from the forward's inputs (BackwardSymbols). Its forward
    # and backward check no sizes: the prologue checks the inputs' and both programs' guards,
    # the saved tensors are the forward's and autograd gives cotangents the outputs' sizes
    symbolic = None
    on_compiled = None  # called after each backward compiled (runtime/persist.py store_backwards)

    def __init__(self, module, num_inputs, fusion=None):
        with module.context:
            fwd = find_func(module.operation, "forward")
            bwd = find_func(module.operation, "backward")
            self.num_outputs = ir.IntegerAttr(fwd.attributes["thunder.num_outputs"]).value
            self.grad_of = list(ir.DenseI64ArrayAttr(bwd.attributes["thunder.grad_of"]))
            self.cotangent_for = list(ir.DenseI64ArrayAttr(bwd.attributes["thunder.cotangent_for"]))
        self.num_inputs = num_inputs
        self.reaches = _reaches(module)  # input index -> indices of the outputs it influences
        self.constants = {"forward": {}, "backward": {}}  # the kernels their sources call (fusion)
        # (each backward is compiled from a copy of the module; the text is what the program cache keeps)
        self._backward_module, self.backward_mlir = unfused_backward(module)
        with module.context:  # (the forward before fusion: differentiable() prints it as torch calls)
            self.forward_mlir = find_func(module.operation, "forward").operation.get_asm(
                enable_debug_info=True, assume_verified=True)
        self.fusion = fusion  # thunder-fuse's (policy, executors), None: no fusion
        self.first_fusion = 0  # the number of the backward's first fusion region (after the forward's)
        self.variants = {}  # frozenset of the outputs with a cotangent -> backward_variants.Variant
        self.backward_traces = None  # a list to add each backward's trace to (the cache entry's)
        self.reporting = tiered.reporting_target()  # (the function and stats its kernels report to)

    def set_forward(self, module, producer, constants=None, tier=None, region_texts=None):
        """forward (its source and function) generated from @forward of module; constants: the
        namespace the source gets (fusion's kernels); tier: what the function gets in its place
        (runtime/tiered.py tier); region_texts: python_source's."""
        names = constants if constants is not None else {}
        # (it runs under torch.no_grad: grad-free code)
        with packed_linear.training_forward():  # (auto packs no weights there: ops/packed_linear.py)
            self.forward_source = python_source(module, "forward", header=f"produced by: {producer} (forward)",
                                                grad_free=True, constants=names if constants is not None else None,
                                                region_texts=region_texts, size_checks=self.symbolic is None)
        self.constants["forward"] = names
        self.forward = compile_source(self.forward_source, "forward", constants=tier(names) if tier else names)

    def differentiable(self):
        """(forward, backward, None): @forward before fusion and @backward before fusion as torch
        calls that autograd records (grad-free code left out), for a gradient of a gradient; or
        (None, None, why not) for a program stored without its forward's MLIR. Made on first use."""
        made = self.__dict__.get("_differentiable")
        if made is None:
            made = self._differentiable = self._make_differentiable()
        return made

    def _make_differentiable(self):
        sources = self.differentiable_sources()
        if isinstance(sources, str):
            return None, None, sources
        return compile_source(sources[0], "forward"), compile_source(sources[1], "backward"), None

    def differentiable_sources(self):
        """(forward source, backward source) of differentiable(), or why there are none."""
        text = self.__dict__.get("forward_mlir")
        if text is None or self.backward_mlir is None:
            return "the program came from the program cache of an older thunder version"
        with LOCK, context():
            return tuple(python_source(ir.Module.parse(mlir), name, comments=False)
                         for name, mlir in (("forward", text), ("backward", self.backward_mlir)))

    def __getattr__(self, name):
        # (called for attributes not set: the backward for all cotangents, compiled when first read)
        if name in ("backward", "backward_source") and "cotangent_for" in self.__dict__ and \
                self.backward_for(self.cotangent_for) is not None and name in self.__dict__:
            return self.__dict__[name]
        raise AttributeError(name)

    def backward_for(self, used):
        """The backward program for the calls whose cotangents are those of the outputs in used
        (a Variant: takes None for the others), or None where this program cannot make one."""
        key = frozenset(used)
        variants = self.__dict__.setdefault("variants", {})
        variant = variants.get(key)
        if variant is None:
            # (one compile per set: a thread that waited for another's compile of it uses that)
            with LOCK, full_collections_deferred():
                variant = variants.get(key)
                if variant is None:
                    variant = self._compile_backward(key)
                    if variant is not None:
                        variants[key] = variant
                        if self.on_compiled is not None:
                            self.on_compiled()
        return variant

    def _compile_backward(self, key):
        full = key >= set(self.cotangent_for)
        if not full and self.symbolic is not None:  # (the backward for all: zeros for the absent cotangents)
            return None
        if full and "backward" in self.__dict__:  # (compiled in another process: the program cache)
            return Variant(self.grad_of, self.backward, self.backward_source, self.constants["backward"], None,
                           "backward")
        if self.backward_mlir is None:
            return None
        t = time.perf_counter()
        present = [i in key for i in self.cotangent_for]
        # (decompositions shared by signature as in the forward's compile: the N layers' backward ops)
        with tiered.reporting_to(*self.reporting) if self.reporting else contextlib.nullcontext(), \
                decompose_reuse.shared():
            # (a program from the program cache has only the text: runtime/portable.py)
            start = self.__dict__.get("_backward_module") or self.backward_mlir
            variant = specialize_backward(start, present, lambda i: bool(self.reaches[i] & key),
                                          self.fusion, self.first_fusion, size_checks=self.symbolic is None)
        if full:
            self.backward, self.backward_source = variant.backward, variant.source
            self.constants["backward"] = variant.constants
        if self.backward_traces is not None and (variant.fused or not full):
            # (unfused, the backward for all cotangents is the trace "thunder-autograd (backward)" already there)
            self.backward_traces.append(Trace(variant.producer, variant.module, python=variant.source,
                                              fn_name="backward", fn=variant.backward))
        if self.reporting:
            stats = self.reporting[1]
            stats.backward_compiles += 1
            stats.last_backward_compile_time = time.perf_counter() - t
        return variant

    def __call__(self, *inputs):
        return _ThunderAutograd.apply(self, *inputs)


def _reaches(module):
    """input index -> the indices of the outputs of @forward it influences (through the tensors
    and runtime numbers its ops read): read from the MLIR (_reaches_of), or where that cannot
    tell (sizes computed by ops, lists of lists) from the func lifted, as thunder-autograd sees it."""
    with module.context:
        func_op = find_func(module.operation, "forward")
        found = _reaches_of(func_op)
        return found if found is not None else _reaches_lifted(lift(func_op))


def _reaches_of(func_op):
    """_reaches of func_op from its ops' operands and results, as lifting it would give (a lifted
    op reads every value it takes but numbers, a list as what it holds); None where the lifted
    func could differ."""
    block = func_op.regions[0].blocks[0]
    args = list(block.arguments)
    if any(sizes.is_dynamic_type(a.type) for a in args):
        return None
    # (the inputs a value depends on as the bits of an int: an op's union of its operands' is an
    # `or`, not a new set as large as the inputs, for every op of @forward)
    deps = {a: 1 << i for i, a in enumerate(args)}
    returned = []
    for operation in block.operations:
        operation = operation.operation
        name = operation.name
        if name in attrs.CONSTANT_OPS:
            continue
        if name in sizes.PYTHON or len(operation.regions) or \
                name == LIST_OP and any(is_list_type(v.type) for v in operation.operands):
            return None
        if name == "func.return":
            returned = list(operation.operands)
            continue
        srcs = 0
        for v in operation.operands:
            d = deps.get(v)
            if d:
                srcs |= d
        for r in operation.results:
            deps[r] = srcs
    reaches = [set() for _ in args]
    for j, r in enumerate(returned):
        bits = deps.get(r, 0)
        while bits:  # (each set bit, lowest first)
            low = bits & -bits
            reaches[low.bit_length() - 1].add(j)
            bits ^= low
    return reaches


def _reaches_lifted(fwd):
    """_reaches of a lifted @forward."""
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
