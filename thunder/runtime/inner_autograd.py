"""Autograd inside the jitted function: `loss.backward()`, `torch.autograd.backward` and
`torch.autograd.grad` called by the traced code (a training step with its optimizer inside one
jitted function).

The gradients are recorded in the trace: the VJP rules of the ops recorded so far (those the
outputs depend on, lowering/autograd.py backpropagate) are recorded after them from the given
cotangents, under no_grad unless create_graph (so the results carry no autograd history, as
eager's). backward() then accumulates them into the .grad of the leaves as eager's AccumulateGrad
does: the gradient itself where .grad was None, an in-place add into the existing .grad tensor
otherwise; the traced code reads .grad back from the trace (runtime/state.py write_grad) and
the program sets it on each leaf after the computation. The leaves are the tensors the trace
reads that require grad and are leaves of eager's graph (parameters, arguments). The forward's
values stay in the trace: the backward reads them as eager's saved tensors; nothing is freed, so
retain_graph has no effect.

Refused by name (NotImplementedError), where the trace cannot give eager's result: a backward
reaching an input that is not a leaf (its graph is outside the trace), a leaf with tensor hooks
(eager would run them; a hook registered later recompiles, guarded), backward(create_graph=True),
a tensor created in the function with requires_grad=True, autograd.grad with is_grads_batched.
"""
import dataclasses

import torch

from thunder.core import trace as tracing
from thunder.core.proxies import TensorProxy
from thunder.lowering.autograd import _proxies, backpropagate, forward_proxies, needing_grad, use_training_forms
from thunder.ops.registry import OPS


def _as_list(x, what):
    if isinstance(x, (tuple, list)):
        return list(x)
    if x is None:
        return []
    if not isinstance(x, TensorProxy):
        raise TypeError(f"{what} must be a Tensor or a sequence of Tensors, got {type(x).__name__}")
    return [x]


def _cotangents(outputs, grad_outputs):
    """The cotangent of each output: given, or ones for a scalar (eager's errors otherwise)."""
    given = _as_list(grad_outputs, "grad_tensors") if grad_outputs is not None else [None] * len(outputs)
    if len(given) != len(outputs):
        raise RuntimeError(f"got {len(given)} tensors and {len(outputs)} gradients")
    cotangents = []
    for i, (out, g) in enumerate(zip(outputs, given)):
        if not isinstance(out, TensorProxy) or not out.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if out.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = OPS["ltorch.ones_like"](out)
        elif tuple(g.shape) != tuple(out.shape):
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {tuple(g.shape)} and output[{i}] "
                               f"has a shape of {tuple(out.shape)}.")
        cotangents.append(g)
    return cotangents


def _decompose_in_place(ctx, needs):
    """Replace each op recorded so far that needs a gradient and has no VJP rule by its
    decomposition, in place (as thunder-autograd decomposes a program before differentiating
    it): differentiated otherwise, it would be computed twice, as itself for its value and as its
    decomposition for the gradient (a cross-entropy's pass over the logits). Returns whether
    anything changed."""
    changed, i = False, 0
    while i < len(ctx.symbols):
        bsym = ctx.symbols[i]
        op = bsym.op
        if op.vjp_rule is None and op.decomposition is not None and any(o.name in needs for o in bsym.outputs):
            new = _decomposition(ctx, bsym)
            if new is not None:
                ctx.symbols[i:i + 1] = new
                changed = True
                continue  # (its first op next: decomposed again where it has no rule either)
        i += 1
    return changed


def _decomposition(ctx, bsym):
    """The symbols of bsym's decomposition, its results named as bsym's, or None where it cannot
    stand in place (no decomposition for these arguments, a result that is an argument, the op
    itself again)."""
    start = len(ctx.symbols)
    try:
        out = bsym.op.decomposition(**{k: _proxies(v) for k, v in bsym.args.items()})
    except tracing.NotDecomposable:
        out = None
    new = ctx.symbols[start:]
    del ctx.symbols[start:]
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    made = {o.name for b in new for o in b.outputs}
    if (out is None or len(outs) != len(bsym.outputs) or any(b.op is bsym.op for b in new)
            or not all(isinstance(o, TensorProxy) and o.name in made for o in outs)):
        return None
    names = {o.name: r.name for o, r in zip(outs, bsym.outputs)}

    def renamed(v):
        if isinstance(v, tuple):
            return tuple(renamed(x) for x in v)
        return dataclasses.replace(v, name=names[v.name]) if isinstance(v, tracing.Ref) and v.name in names else v
    return [dataclasses.replace(b, args={k: renamed(v) for k, v in b.args.items()},
                                outputs=[renamed(o) for o in b.outputs]) for b in new]


class InnerAutograd:
    """ctx.autograd while one call is traced: the state (runtime/state.py) gives the trace's
    inputs and their .grad."""

    def __init__(self, state):
        self.state = state

    def _outside_graphs(self, outputs, ctx):
        """Refuse where eager would backpropagate into a graph outside the trace: an input that
        requires grad and is not a leaf (computed with autograd history before the call) that
        the outputs depend on; a tensor created in the function with requires_grad=True."""
        if ctx.grad_leaf:
            tracing.refuse_inside("a backward over a tensor created with requires_grad=True in the function",
                                  "create it outside and pass it as an argument")
        outside = [p for p in self.state.inputs.proxies if p.requires_grad and not p.leaf]
        if outside:
            reached = needing_grad(ctx.symbols, {p.name for p in outside})
            for p in outside:
                if any(o.name in reached for o in outputs) and p.name in reached:
                    tracing.refuse_inside(f"a backward reaching {p.input_name or p.name}, an input that is not a "
                                          "leaf (its autograd graph is outside the call)",
                                          "pass it detached (x.detach().requires_grad_()), or call backward outside")

    def _gradients(self, outputs, cotangents, wrt, create_graph):
        """{name: gradient} of the proxies wrt for the outputs' cotangents, recorded in the trace."""
        ctx = tracing.current()
        needs = needing_grad(ctx.symbols, {p.name for p in wrt})
        if _decompose_in_place(ctx, needs):
            needs = needing_grad(ctx.symbols, {p.name for p in wrt})
        use_training_forms(ctx.symbols, needs, ctx.new_name)
        grads = {}
        for out, g in zip(outputs, cotangents):
            if out.name in needs:
                grads[out.name] = g if out.name not in grads else OPS["ltorch.add"](grads[out.name], g)
        symbols = list(ctx.symbols)
        with torch.set_grad_enabled(create_graph):
            backpropagate(symbols, needs, grads, forward_proxies(), decompose=True)
            found = {p.name: grads.get(p.name) for p in wrt}
            if not create_graph:  # (eager's gradients carry no history: cut for the outer autograd too)
                found = {k: None if g is None else OPS["ltorch.detach"](g) for k, g in found.items()}
        return found

    def backward(self, tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
        ctx = tracing.current()
        outputs = _as_list(tensors, "tensors")
        cotangents = _cotangents(outputs, grad_tensors)
        if create_graph:
            tracing.refuse_inside("backward(create_graph=True)", "use torch.autograd.grad(..., create_graph=True)")
        self._outside_graphs(outputs, ctx)
        made = [p for p, _ in ctx.made_leaves.values() if p.requires_grad]
        if made and needing_grad(ctx.symbols, {p.name for p in made}) & {o.name for o in outputs}:
            tracing.refuse_inside("a backward into a tensor made a leaf with requires_grad_() (eager accumulates its "
                                  ".grad)",
                                  "take its gradient with torch.autograd.grad(outputs, tensor)")
        leaves = [p for p in self.state.inputs.proxies if p.requires_grad and p.leaf]
        if inputs is not None:
            chosen = _as_list(inputs, "inputs")
            for p in chosen:
                if not any(p is q for q in leaves):
                    tracing.refuse_inside("backward(inputs=...) with a tensor that is not a leaf the function reads")
            leaves = chosen
        grads = self._gradients(outputs, cotangents, leaves, create_graph=False)
        for p in leaves:
            g = grads[p.name]
            if g is None:
                continue  # (not in the graph of the outputs: its .grad stays)
            self._check_hooks(p)
            with torch.no_grad():
                current = self.state.read_grad(p)
                if current is None:
                    self.state.write_grad(p, g)
                elif isinstance(current, TensorProxy) and self.state._input_of(current) is not None:
                    current.add_(g)  # (eager's AccumulateGrad: in place into the existing .grad)
                else:
                    self.state.write_grad(p, OPS["ltorch.add"](current, g))

    def _check_hooks(self, p):
        """A leaf with tensor hooks (register_hook, register_post_accumulate_grad_hook): eager
        runs them in its backward, this trace would not: refused; their absence is guarded."""
        real, expr = self.state._input_of(p)
        for attr in ("_backward_hooks", "_post_accumulate_grad_hooks"):
            if getattr(real, attr, None):
                tracing.refuse_inside(f"a backward into {p.input_name or p.name}, which has tensor hooks ({attr})",
                                      "call backward outside the jitted function")
            if expr is not None:
                self.state.guard(f"{expr}.{attr}", "is", None, f"the hooks of {p.input_name or p.name}")

    def grad(self, outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
             allow_unused=None, is_grads_batched=False, materialize_grads=False):
        ctx = tracing.current()
        if is_grads_batched:
            tracing.refuse_inside("torch.autograd.grad(is_grads_batched=True)")
        outs = _as_list(outputs, "outputs")
        # (a tensor native code handed over, `list(model.parameters())`: its proxy where the trace
        # read it; one it never read is in no graph of the trace)
        wrt = [self.state.inputs.proxy_of(p) for p in _as_list(inputs, "inputs")]
        for p in wrt:
            if not isinstance(p, (TensorProxy, torch.Tensor)):
                tracing.refuse_inside(f"torch.autograd.grad with respect to a {type(p).__name__}")
            if not p.requires_grad:
                raise RuntimeError("One of the differentiated Tensors does not require grad")
        cotangents = _cotangents(outs, grad_outputs)
        self._outside_graphs(outs, ctx)
        grads = self._gradients(outs, cotangents, [p for p in wrt if isinstance(p, TensorProxy)], create_graph)
        result = []
        for p in wrt:
            g = grads.get(p.name) if isinstance(p, TensorProxy) else None
            if g is None:
                if materialize_grads:
                    g = OPS["ltorch.zeros_like"](p)
                elif not allow_unused:
                    raise RuntimeError("One of the differentiated Tensors appears to not have been used in the graph. "
                                       "Set allow_unused=True if this is the desired behavior.")
            result.append(g)
        return tuple(result)


def _autograd():
    ctx = tracing.current()
    autograd = getattr(ctx, "autograd", None)
    if autograd is None:
        tracing.refuse_inside("torch.autograd.backward/grad outside a trace")
    return autograd


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    """torch.autograd.backward while tracing."""
    return _autograd().backward(tensors, grad_tensors if grad_tensors is not None else grad_variables,
                                retain_graph, create_graph, inputs)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """torch.autograd.grad while tracing (a tuple, as eager's, also for one input)."""
    return _autograd().grad(outputs, inputs, grad_outputs, retain_graph, create_graph, only_inputs, allow_unused,
                            is_grads_batched, materialize_grads)


# what the interpreter's lookup replaces
REPLACEMENTS = {torch.autograd.backward: backward, torch.autograd.grad: grad}
