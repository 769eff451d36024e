"""Recording an op: its meta function on proxies, the call appended to the current trace
(core/trace.py's TraceCtx), eager's strides, views linked to their bases, requires_grad as eager
answers it; without a trace the op runs with torch (execute.py). OpDef.__call__ (registry.py)
records through record_op."""
import functools

import torch

from thunder.core import dispatch, strides, trace as tracing
from thunder.core.numbers import example, NumberProxy
from thunder.core.proxies import check_no_grad_view_use, meta_of, TensorProxy, to_refs
from thunder.ops import autocast, meta_runs
from thunder.ops.execute import call_args, resolve, run_eagerly


def record_op(op, values):
    """Run op's meta function on proxies and record the call in the current trace; without a
    trace (plain tensors, no jit) run it with torch."""
    ctx = tracing.current()
    if ctx is None:
        return run_eagerly(op, values)
    _check_no_real_tensors(op, values)
    if ctx.track_grad_mode and op.dialect == "ltorch" and (torch.is_autocast_enabled("cpu")
                                                           or torch.is_autocast_enabled("cuda")):
        values = autocast.apply(op, values)  # casts of an active torch.autocast region
    try:
        out = run_meta(op, values)
    except Exception as e:  # eager's exception for a bad call, or a refusal: say where it came from
        _note_location(e, op)
        raise
    if op.returns_input and any(out is v for v in values.values()):
        return out  # eager returns the input itself (x.to(x.dtype), x.contiguous()): no op, no new tensor
    outs = list(out) if isinstance(out, (tuple, list)) else [out]

    first = next((v for v in values.values() if isinstance(v, TensorProxy)), None)
    metas = _eager_strides(ctx, op, values, outs) if ctx.track_strides else None
    if op.is_view:
        for o, m in zip(outs, metas or [None] * len(outs)):
            # reshape, flatten, contiguous: a view where eager's strides allow one, else a copy
            o.is_view = m is None or first is None or _aliases(m, first.meta)
    for i, o in enumerate(outs):
        if not isinstance(o, TensorProxy):
            continue  # a runtime number
        base = o.base if o.base is not None else first  # (a meta function may name the base)
        if o.is_view and base is not None:
            # remember how o was made from base, so in-place updates can flow between them
            o.base, o.recipe = base, (op, dict(values), i)
            base.views.append(o)
    loc = tracing.current_location()
    if ctx.checkpoint is not None:  # (lowering/remat.py recomputes the region's values)
        loc = (*(loc or ("<unknown>", 0)), ctx.checkpoint)
    ctx.symbols.append(tracing.BoundSymbol(op, {k: to_refs(v) for k, v in values.items()},
                                           [tracing.ref(o) for o in outs], loc, ctx.widened))
    if ctx.on_record is not None:
        ctx.on_record(op, values, outs)
    if ctx.track_grad_mode:
        # requires_grad as eager answers it: a floating result of a differentiable op on a tensor
        # that requires grad, with grad mode on
        grad = torch.is_grad_enabled()
        ctx.grad_ops |= grad
        needs = grad and op.differentiable and any(
            x.requires_grad for v in values.values() for x in (v if isinstance(v, tuple) else (v,))
            if isinstance(x, TensorProxy))
        if needs:
            for v in values.values():
                for x in (v if isinstance(v, tuple) else (v,)):
                    if isinstance(x, TensorProxy):
                        check_no_grad_view_use(x)
        leaf = values.get("requires_grad") is True  # torch.ones(..., requires_grad=True): whatever grad mode
        for o in outs:
            if isinstance(o, TensorProxy):
                floating = o.dtype.is_floating_point or o.dtype.is_complex
                if leaf and not floating:
                    raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
                o.requires_grad = (needs or leaf) and floating
                ctx.requires_grad |= o.requires_grad
                ctx.grad_leaf |= leaf and o.requires_grad
                if o.requires_grad:
                    ctx.grad_names.add(o.name)
    if ctx.track_grad_mode and not torch.is_grad_enabled() and op.name not in ("detach", "no_grad_update"):
        # under torch.no_grad() the results carry no autograd history: record that in the trace
        # where an operand requires grad (elsewhere there is no history to cut)
        if any(x.requires_grad for v in values.values() for x in (v if isinstance(v, tuple) else (v,))
               if isinstance(x, TensorProxy)):
            outs = [_detach(o) for o in outs]
            out = tuple(outs) if isinstance(out, (tuple, list)) else outs[0]
        if torch.is_inference_mode_enabled():
            for o in outs:
                if isinstance(o, TensorProxy):
                    o.inference = True
    return tuple(outs) if isinstance(out, (tuple, list)) else out


def run_meta(op, values):
    """op's meta function on bound values; runtime numbers (NumberProxy operands) are seen as
    an example value of their type (metadata depends on their type only: the ops whose metadata
    depends on values read them when binding, see OpDef.bind)."""
    if any(isinstance(v, NumberProxy) for v in values.values()):
        values = {k: example(v) for k, v in values.items()}
    return op.meta(**values)


def _elementwise_meta(op, values, out):
    """out's meta tensor with the strides eager's TensorIterator gives it (core/strides.py); None
    where the rule is not used: an empty result, symbolic sizes (their comparisons are guards)."""
    if values.get("inplace"):
        return None  # (eager's result is the input itself, with its strides)
    operands = []
    for p in op.params:
        v = values.get(p.name)
        if isinstance(v, TensorProxy):
            m = meta_of(v)
            operands.append((tuple(m.shape), m.stride()))
        elif (op.numbers_are_operands and p.kind.base_name == "TensorOrNumber"
              and isinstance(v, (bool, int, float, complex, NumberProxy))):
            operands.append(((), ()))
    shape = tuple(out.shape)
    if not all(type(n) is int for n in shape) or 0 in shape or not all(
            type(x) is int for s, st in operands for x in (*s, *st)):
        return None
    return torch.empty_strided(shape, _elementwise_strides(shape, tuple(operands)), dtype=out.dtype, device="meta")


# (a pure function of sizes and strides: every layer of a model asks it the same questions)
_elementwise_strides = functools.lru_cache(maxsize=4096)(strides.elementwise)


_NO_DEPS = frozenset()


def _eager_strides(ctx, op, values, outs):
    """Runs op on meta tensors (torch's own kernels) for eager's strides of its results, which
    become the results' meta tensors; None when torch cannot (a data-dependent op, say): the
    results count as contiguous. Ops whose validity depends on strides (view of a transposed
    tensor) raise eager's error here."""
    tensors = [x for v in values.values() for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, TensorProxy)]
    deps = _NO_DEPS
    for t in tensors:  # (their union; a tensor's own set where it is the only one: no copy)
        d = t.stride_deps
        if d and d is not deps:
            deps = d if not deps else deps | d
    if not all(isinstance(o, TensorProxy) for o in outs):
        return None  # (runtime numbers: no strides)
    for o in outs:
        o.stride_deps = deps
    if all(o.meta is not None for o in outs):
        return [o.meta for o in outs]  # (the meta function gave eager's strides: CPU conv, batch_norm)
    if op.strided:
        ctx.stride_dependent |= deps
    if op.random:
        return None  # (torch's random kernels would draw from the generator even on meta tensors)
    if op.contiguous:
        return None
    if op.elementwise and len(outs) == 1:
        m = _elementwise_meta(op, values, outs[0])
        if m is not None:
            outs[0].meta = m
            return [m]


    # as eager calls it: Tensor.view checks strides, the program reshapes
    try:
        fn = op.aliases[0] if op.strided and op.aliases else resolve(op.torch_name)
    except Exception:  # noqa: BLE001 - no callable (ltorch.torch_call's "(callable)"): no answer
        return None
    # (the same run for every layer of a model: remembered)
    key, operands = meta_runs.signature(op, fn, values, outs)
    results = meta_runs.recall(key, operands) if key is not None else None
    if results is None:
        results = _run_on_meta(op, fn, values, outs)
        if key is not None:
            meta_runs.remember(key, operands, results)
    elif results is meta_runs.NONE:
        return None
    if results is None:
        return None
    for o, m in zip(outs, results):
        o.meta = m
    return results


def _run_on_meta(op, fn, values, outs):
    """fn (op's callable) on meta tensors of values: its results, or None where torch gives no
    answer (no meta kernel, results unlike outs'); eager's error where op's strides do not allow it."""

    def meta(v):
        if isinstance(v, TensorProxy):
            return meta_of(v)
        return tuple(meta(x) for x in v) if isinstance(v, tuple) else example(v)

    try:
        with tracing.not_tracing():
            if op.strided and op.aliases:
                args, kwargs = call_args(op, {k: meta(v) for k, v in values.items()})
                result = fn(*args, **kwargs)
            else:
                result = run_eagerly(op, {k: meta(v) for k, v in values.items()})
    except RuntimeError:
        if op.strided:
            raise  # eager's error: the strides do not allow it
        return None
    except Exception:  # noqa: BLE001 - no meta kernel: strides unknown
        return None
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(results) != len(outs) or any(not isinstance(m, torch.Tensor) or m.shape != o.shape for m, o in zip(results, outs)):
        return None
    return results


def _aliases(m, base):
    """Whether meta tensor m shares memory with meta tensor base (the same storage object)."""
    return base is not None and m.untyped_storage()._cdata == base.untyped_storage()._cdata


def _note_location(e, op):
    loc = tracing.current_location()
    if loc is not None and not any(n.startswith("thunder: in ") for n in getattr(e, "__notes__", ())):
        e.add_note(f"thunder: in {op.torch_name} at {loc[0]}:{loc[1]}")


def _detach(p):
    """p, the result of an op under torch.no_grad() on a tensor that requires grad, cut off from
    autograd. Where p is a view, it requires grad as in eager where its base does (a view made
    under no_grad: it sends its base no gradient, and the function's result is made so by
    impl.no_grad_view)."""
    if not isinstance(p, TensorProxy) or not (p.dtype.is_floating_point or p.dtype.is_complex):
        return p
    out = dispatch.OPS["ltorch.detach"](p)
    if p.is_view and p.base is not None and p.base.requires_grad:
        out.requires_grad = out.no_grad_view = True
        tracing.current().grad_names.add(out.name)
    return out


def _check_no_real_tensors(op, values):
    for v in values.values():
        for x in v if isinstance(v, (tuple, list)) else (v,):
            if isinstance(x, torch.Tensor):
                raise NotImplementedError(
                    f"thunder: {op.torch_name} got a tensor that is not an input of the jitted function "
                    f"(created outside thunder's view, e.g. by code run natively); shape {tuple(x.shape)}. "
                    "Workaround: pass it as an argument.")
