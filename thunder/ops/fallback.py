"""The fallback: every torch call without a registry entry is still recorded and run.

`call(fn, *args, **kwargs)` records such a call. Its output metadata comes from torch itself
(thunder/core/meta_eval.py: the call on meta or fake tensors). If torch decomposes it into ops
the registry has, those ops are recorded instead (ops/aten_decomp.py), so fusion sees through
it; otherwise one generic op:

    %0:2 = "ltorch.torch_call"(%x) {args = "_0, 1", autocast, callable = "torch.sort", ...}

`callable` names the torch callable (resolvable: "torch.cumprod", "torch.Tensor.cumprod",
"torch.ops.aten.cumprod.default"); `args` is the source of the call's arguments with `_i` for
tensor operand i (thunder/core/pysource.py); the results are the tensors of the call's result in
order, then the new values of the operands it writes in place (the program runs the call on
clones of those). Which result goes where in the returned structure (a tuple, a
torch.return_types.sort, ...) is computed by the same evaluation that gives the types, so the
MLIR op carries no more than the call (and `autocast`, the torch.autocast region it runs in).
`ltorch.torch_call_random` is the same for calls that draw random numbers (not Pure);
`ltorch.rng_state` records the generator state such a call starts from, so that its backward
can redraw the same numbers.

Gradients are torch's: the VJP rule records `ltorch.torch_call_vjp`, which runs
impl.torch_call_vjp: the call recomputed on detached inputs under enable_grad (from the saved
generator state for random calls), then torch.autograd.grad with the cotangents. Results torch
gives no gradient (sort's indices, bessel_j0, which has no derivative) are detached.

Registered ops that refuse arguments as a thunder limitation (NotImplementedError("thunder:
..."), e.g. advanced indexing) fall back the same way (`registered`).

In-place calls (`x.foo_()`, `torch.foo_(x)`, `F.foo(x, inplace=True)`) are recorded as the
out-of-place form (`foo`, `inplace=False`) and assigned like registered in-place ops
(core/proxies.py `inplace`); without an out-of-place form (x.uniform_()), or when the
update changes the tensor's shape, the in-place call on a clone. `out=` is the call without it,
then written into out (`write_out`)."""
import ast
import operator

import torch

from thunder.core import dispatch as hooks
from thunder.core import meta_eval, trace as tracing
from thunder.core.callables import callable_name, resolve
from thunder.core.meta_eval import Result, build, encode_call, evaluate, untraceable
from thunder.core.numbers import concrete, has_proxy
from thunder.core.proxies import (DataDependentError, TensorProxy, assign, check_inplace_allowed, inplace, meta_of,
                                  proxy_of_meta, write_out)
from thunder.core.pysource import Name, call_source, parse_call, py_repr
from thunder.core.strides import contiguous
from thunder.ops import registry, shape
from thunder.ops.meta_utils import differentiable
from thunder.ops.registry import Device, Ints, Str, Tensor, Tensors, ltorch
from thunder.ops import aten_decomp
from thunder.ops.execute import inplace_method
from thunder.ops.grad import detach


# --------------------------------------------------------------------------------------------
# The ops


def _autocast_of(text):
    """"cpu:torch.bfloat16" -> ("cpu", torch.bfloat16)."""
    if text is None:
        return None
    device, dtype = text.split(":")
    return device, getattr(torch, dtype.removeprefix("torch."))


def _autocast_text(state):
    return None if state is None else f"{state[0]}:{state[1]}"


def _evaluation(tensors, callable, args, autocast, shapes=None, strides=None):
    """The call's Evaluation; shapes (the source of a tuple of result shapes): a call whose result
    shapes depend on values, with the shapes of the run that traced it (checked by ltorch.check);
    strides (the source of a tuple of each operand's strides): a call that checks them."""
    metas = [(tuple(t.shape), t.dtype, t.device) for t in tensors]
    shapes = None if shapes is None else ast.literal_eval(shapes)
    if strides is not None:
        metas = [(*m, tuple(s)) for m, s in zip(metas, ast.literal_eval(strides), strict=True)]
        return _evaluate_layout(callable, args, metas, _autocast_of(autocast), shapes)
    return evaluate(callable, args, metas, _autocast_of(autocast), shapes=shapes)


def _results(tensors, callable, args, autocast, random, shapes=None, strides=None):
    ev = _evaluation(tensors, callable, args, autocast, shapes, strides)
    if ev.random != random:
        raise ValueError(f"{callable} {'draws' if ev.random else 'draws no'} random numbers: it is recorded as "
                         f"ltorch.torch_call{'_random' if ev.random else ''}")
    if not ev.results:
        raise ValueError(f"{callable}({args}) produces no tensors")
    outs = tuple(proxy_of_meta(*r) for r in ev.results)
    for i, j in ev.views:  # (record_op links them, so in-place updates flow between the two)
        outs[i].is_view, outs[i].base = True, tensors[j]
    return outs


@ltorch("(callable)", returns_sequence=True)
def torch_call(tensors: Tensors, *, callable: Str, args: Str, autocast: Str | None = None, shapes: Str | None = None,
               strides: Str | None = None):
    """A torch call without a registry entry (thunder's fallback): `callable` with the arguments
    `args` (`_i` is tensor operand i), run by the generated program as that torch call; results:
    its result tensors, then the new values of operands it updates in place. `autocast`
    ("cpu:torch.bfloat16"): the torch.autocast region it runs in. `shapes` ("((2, 1),)"): the
    result shapes of a call whose result shapes depend on values (torch.nonzero), as in the run
    that traced it (ltorch.check checks them; numbers it reads from tensors are results of type
    f64/i64/i1). `strides` ("((1, 16), (1,))"): the operands' strides, for a call that checks them
    (torch._scaled_mm; the program's entry checks the inputs' strides). Not fusible; gradient:
    torch's (torch_call_vjp)."""
    return _results(tensors, callable, args, autocast, False, shapes, strides)


@ltorch("(callable)", returns_sequence=True, random=True)
def torch_call_random(tensors: Tensors, rng_state: Tensor | None = None, *, callable: Str, args: Str,
                      autocast: Str | None = None, shapes: Str | None = None, strides: Str | None = None):
    """ltorch.torch_call of a callable that draws random numbers (not Pure). rng_state: the
    generator state it starts from (ltorch.rng_state), read by its gradient only."""
    return _results(tensors, callable, args, autocast, True, shapes, strides)


@ltorch("impl.torch_call_vjp", returns_sequence=True, differentiable=False)
def torch_call_vjp(tensors: Tensors, rng_state: Tensor | None = None, *, callable: Str, args: Str,
                   autocast: Str | None = None, shapes: Str | None = None, strides: Str | None = None, grads_for: Ints,
                   cotangent_for: Ints):
    """torch's gradient of a ltorch.torch_call: tensors are the call's operands, then the
    cotangents of its results `cotangent_for`; results: the gradients of operands `grads_for`.
    Runs impl.torch_call_vjp (the call recomputed under enable_grad, from rng_state when given,
    then torch.autograd.grad)."""
    n = len(tensors) - len(cotangent_for)
    inputs, cotangents = tensors[:n], tensors[n:]
    ev = _evaluation(inputs, callable, args, autocast, shapes, strides)
    for i, g in zip(cotangent_for, cotangents):
        if not 0 <= i < len(ev.results) or (tuple(g.shape), g.dtype) != ev.results[i][:2]:
            raise ValueError(f"cotangent {i} of type {tuple(g.shape)} {g.dtype} does not match result {i} of {callable}")
    if any(not 0 <= i < n for i in grads_for):
        raise ValueError(f"grads_for {grads_for} out of range for {n} operands")
    return tuple(TensorProxy.like(inputs[i]) for i in grads_for)


@ltorch("torch.get_rng_state", random=True, differentiable=False)
def rng_state(device: Device):
    """The state of `device`'s random generator (a uint8 tensor on the CPU), read right before a
    random ltorch.torch_call_random whose gradient may be needed. Not Pure: it stays in order."""
    return TensorProxy((_state_size(torch.device(device)),), torch.uint8, torch.device("cpu"))


def _state_size(device):
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device).numel()
    return torch.get_rng_state().numel()


# --------------------------------------------------------------------------------------------
# Gradients


def _vjp(g, out, tensors, callable, args, autocast=None, rng_state=None, shapes=None, strides=None):
    # torch is asked for the gradients the program needs only: it refuses some it has no formula
    # for (batch_norm's running_mean, binary_cross_entropy_with_logits' pos_weight)
    needing = (tracing.inputs_needing_grad() or {}).get("tensors")
    grads_for = tuple(i for i, t in enumerate(tensors) if differentiable(t) and (needing is None or needing[i]))
    cotangent_for = tuple(i for i, gi in enumerate(g) if gi is not None)
    if not grads_for or not cotangent_for:
        return {"tensors": (None,) * len(tensors)}
    grads = torch_call_vjp((*tensors, *(g[i] for i in cotangent_for)), rng_state, callable=callable, args=args,
                           autocast=autocast, shapes=shapes, strides=strides, grads_for=grads_for,
                           cotangent_for=cotangent_for)
    result = [None] * len(tensors)
    for i, gi in zip(grads_for, grads):
        result[i] = gi
    return {"tensors": tuple(result)}


torch_call.vjp(_vjp)
torch_call_random.vjp(_vjp)
rng_state.vjp(lambda g, out, device: {})


# --------------------------------------------------------------------------------------------
# Code generation


def _call_expr(callable, args, operand_names):
    """`torch.cumprod(t0, 1)`: the call with the operands' names in place of `_i`."""
    a, k = parse_call(args, [Name(n) for n in operand_names])
    return f"{callable}({call_source(a, k, lambda v: None)})"


def _target(template, names):
    """The assignment target that unpacks the call's result (result tensors get their names,
    everything else `_`), or None when it holds no result tensor."""
    def t(v):
        if isinstance(v, Result):
            return names[v.index]
        if isinstance(v, (tuple, list)) and v:
            return "(" + ", ".join(t(x) for x in v) + ("," if len(v) == 1 else "") + ")"
        return "_"

    if not any(isinstance(v, Result) for v in _leaves(template)):
        return None
    if isinstance(template, (tuple, list)) and template:
        return ", ".join(t(x) for x in template) + ("," if len(template) == 1 else "")
    return t(template)


def _leaves(template):
    if isinstance(template, (tuple, list)):
        for x in template:
            yield from _leaves(x)
    else:
        yield template


def _with_autocast(lines, autocast):
    state = _autocast_of(autocast)
    if state is None:
        return lines
    return [f"with torch.autocast({state[0]!r}, dtype={py_repr(state[1])}):"] + ["  " + ln for ln in lines]


def _python(values, outs):
    """Statements of a (random) torch_call: operands it writes are cloned first (into the names
    of their new values), then the call itself."""
    tensors = values["tensors"]
    ev = _evaluation(tensors, values["callable"], values["args"], values["autocast"], values["shapes"],
                     values["strides"])
    names = [t.name for t in tensors]
    lines = []
    for k, j in enumerate(ev.mutated):
        new = outs[ev.num_outputs + k]
        lines.append(f"{new} = {names[j]}.clone()")
        names[j] = new
    call = _call_expr(values["callable"], values["args"], names)
    target = _target(ev.template, outs)
    lines.append(call if target is None else f"{target} = {call}")
    return _with_autocast(lines, values["autocast"])


def _python_vjp(values, outs):
    """`b1, = impl.torch_call_vjp(lambda _0: torch.cumprod(_0, 1), (x,), (g,), ...)`."""
    tensors = values["tensors"]
    n = len(tensors) - len(values["cotangent_for"])
    ev = _evaluation(tensors[:n], values["callable"], values["args"], values["autocast"], values["shapes"],
                     values["strides"])
    params = [f"_{i}" for i in range(n)]
    call = f"lambda {', '.join(params)}: {_call_expr(values['callable'], values['args'], params)}"
    inputs = py_repr(tuple(tensors[:n]))
    cotangents = py_repr(tuple(tensors[n:]))
    state = values["rng_state"].name if values["rng_state"] is not None else "None"
    target = ", ".join(outs) + ("," if len(outs) == 1 else "")
    return [f"{target} = impl.torch_call_vjp({call}, {inputs}, {cotangents}, grads_for={py_repr(values['grads_for'])}, "
            f"cotangent_for={py_repr(values['cotangent_for'])}, mutated={py_repr(ev.mutated)}, rng_state={state}, "
            f"autocast={py_repr(_autocast_of(values['autocast']))})"]


def _python_rng_state(values, outs):
    device = torch.device(values["device"])
    if device.type == "cuda":
        return [f"{outs[0]} = torch.cuda.get_rng_state({str(device)!r})"]
    return [f"{outs[0]} = torch.get_rng_state()"]


def _python_inplace(values, outs):
    """`t = torch.Tensor.index_copy_(x, 2, i, s)` for `torch.Tensor.index_copy(x, 2, i, s)` (how
    x.index_copy_(...) is recorded), for a program that re-inplaces x's update: a call of a
    torch.Tensor method with an in-place form, with x its first argument and one result, a new
    tensor (no view; no operand written)."""
    target = inplace_method(values["callable"])
    if (target is None or not values["callable"].startswith("torch.Tensor.") or values["autocast"]
            or values["shapes"] or values["strides"]):
        return None
    tensors = values["tensors"]
    ev = _evaluation(tensors, values["callable"], values["args"], None)
    if ev.mutated or ev.views or len(ev.results) != 1 or not isinstance(ev.template, Result):
        return None
    args, _ = parse_call(values["args"], tensors)
    if not args or not any(args[0] is t for t in tensors):
        return None
    return args[0], [f"{outs[0]} = {_call_expr(target, values['args'], [t.name for t in tensors])}"]


torch_call.python = torch_call_random.python = _python
torch_call.python_inplace = _python_inplace
torch_call_vjp.python = _python_vjp
rng_state.python = _python_rng_state


# --------------------------------------------------------------------------------------------
# Recording


def dispatch(fn, *args, **kwargs):
    """fn(*args, **kwargs) while tracing: its registry entry, else the fallback."""
    op = registry.lookup_callable(fn)
    if op is not None:
        return registered(op, fn, *args, **kwargs)
    return call(fn, *args, **kwargs)


def registered(op, fn, *args, **kwargs):
    """op(*args, **kwargs), op being fn's registry entry (or a method wrapping it); where op
    refuses the arguments as a thunder limitation (NotImplementedError("thunder: ..."): a
    combination it does not model, e.g. advanced indexing, return_indices=True), the fallback
    records fn itself, which torch then checks. (NotImplementedErrors that are eager's own,
    '"softmax" not implemented for \'Long\'', stay.)"""
    ctx = tracing.current()
    n = len(ctx.symbols) if ctx is not None else 0
    proxies = [a for a in (*args, *kwargs.values()) if isinstance(a, TensorProxy)]
    # (a tensor among the arguments: not numbers only)
    if ctx is not None and not proxies and _numbers_only(op, args, kwargs) and callable_name(fn) is not None:
        return call(fn, *args, **kwargs)  # torch.add(2, 3): torch's answer (a 0-d tensor) or its error
    views = [list(p.views) for p in proxies]
    try:
        return op(*args, **kwargs)
    except NotImplementedError as e:
        if (ctx is None or isinstance(e, (DataDependentError, meta_eval.UntraceableError))
                or not str(e).startswith("thunder:") or callable_name(fn) is None):
            raise
    del ctx.symbols[n:]  # what the op recorded before it refused (autocast's casts, a view)
    for p, v in zip(proxies, views):
        p.views[:] = v
    return call(fn, *args, **kwargs)


def _numbers_only(op, args, kwargs):
    """A call of an op on tensors (torch.add) without any tensor among its arguments."""
    if not isinstance(op, registry.OpDef):
        return False
    if not registry.binding(op).takes_tensors:
        return False  # a factory (torch.ones(3))

    def has_proxy(v):
        return isinstance(v, TensorProxy) or isinstance(v, (tuple, list)) and any(has_proxy(x) for x in v)

    return not any(has_proxy(a) for a in (*args, *kwargs.values()))


def call(fn, *args, **kwargs):
    """Record fn(*args, **kwargs), a torch call without a registry entry (see the module doc)."""
    if fn in _STORAGE_VIEWS and tracing.strides_known():
        return _STORAGE_VIEWS[fn](*args, **kwargs)
    name = callable_name(fn)
    if name is None:
        raise untraceable(meta_eval.display_name(fn), "thunder cannot name it in a trace")
    if kwargs.get("out") is not None:
        out = kwargs.pop("out")
        return write_out(name, out, dispatch(fn, *args, **kwargs))
    args, kwargs = tuple(_sizes_read(a) for a in args), {k: _sizes_read(v) for k, v in kwargs.items()}
    if has_proxy((args, kwargs)):  # runtime numbers: the call's arguments are constants of the trace (a split)
        args, kwargs = concrete((args, kwargs), f"an argument of {name}")
    operands, source = encode_call(name, args, kwargs)
    autocast = meta_eval.autocast_state([(tuple(t.shape), t.dtype, t.device) for t in operands])
    try:
        ev, strides = _evaluate_strided(name, source, operands, autocast)
    except DataDependentError:
        if _reader() is None:
            raise
        return _data_dependent(fn, name, args, kwargs, operands, source, autocast)
    if ev.mutated:
        return _mutating(fn, name, args, kwargs, operands, source, autocast, ev, strides)
    if not ev.results:
        return build(ev.template, [], operands)
    outs = None
    if autocast is None and not ev.random and not ev.views:
        outs = aten_decomp.replay(name, source, operands, ev)
    if outs is None:
        outs = _record(name, source, operands, autocast, ev, strides=strides)
    return build(ev.template, _no_gradient_where_torch_has_none(outs, operands, ev), operands)


# views of a tensor's storage: recorded on the storage eager lays out (not the program's tensor)
_STORAGE_VIEWS = {torch.as_strided: shape.as_strided_of_eager_storage,
                  torch.Tensor.as_strided: shape.as_strided_of_eager_storage}


def _sizes_read(v):
    """A size given as numbers some of which are 0-d integer tensors (Longformer's as_strided
    size holds torch.div(seq_len, w, rounding_mode='trunc') + 1) with the tensors' values read (a
    split), as torch's parser reads them for an int list; other arguments as they are (a list of
    tensors only is a tensor list)."""
    if type(v) not in (tuple, list) or not any(type(x) is int for x in v):
        return v
    if not any(isinstance(x, TensorProxy) for x in v):
        return v
    return type(v)(operator.index(x) if isinstance(x, TensorProxy) and not x.shape else x for x in v)


def _evaluate_strided(name, source, operands, autocast):
    """evaluate() on contiguous operands; where torch refuses those, on the operands' strides
    (_evaluate_layout): the trace then depends on them."""
    metas = [(tuple(t.shape), t.dtype, t.device) for t in operands]
    try:
        return evaluate(name, source, metas, autocast), None
    except (DataDependentError, meta_eval.UntraceableError):
        raise
    except RuntimeError:
        strides = tuple(tuple(meta_of(t).stride()) for t in operands)
        if all(s == contiguous(m[0]) for s, m in zip(strides, metas)) and not _on_cpu(metas, autocast):
            raise
    ev = _evaluate_layout(name, source, [(*m, s) for m, s in zip(metas, strides)], autocast)
    for t in operands:
        tracing.strides_decide(t)
    return ev, repr(strides)


def _on_cpu(metas, autocast):
    return autocast is None and bool(metas) and all(m[2].type == "cpu" for m in metas)


def _evaluate_layout(name, source, metas, autocast, shapes=None):
    """evaluate() of a call on operands with their strides (a call that checks them: torch._scaled_mm
    on CUDA wants a column-major mat2). Where the meta kernel refuses them and every operand is on
    the CPU, eager's CPU kernel decides, run on zeros of that layout (meta_eval.evaluate_on_cpu:
    torch._scaled_mm's meta kernel checks CUDA's layout rules, which the CPU kernel does not); an
    error is then eager's."""
    try:
        return evaluate(name, source, metas, autocast, shapes=shapes)
    except (DataDependentError, meta_eval.UntraceableError):
        raise  # (values decide: a run on zeros would not say what the call gives)
    except RuntimeError:
        if shapes is not None or not _on_cpu(metas, autocast):
            raise
    return meta_eval.evaluate_on_cpu(name, source, metas)


def _data_dependent(fn, name, args, kwargs, operands, source, autocast):
    """A call whose result shapes depend on values (torch.nonzero, masked_select, unique, x[mask]):
    it runs on the real values (runtime/reads.py: a split), the result shapes of that run become
    constants of the trace that the program checks (a different shape is a cache miss)."""
    metas = [(tuple(t.shape), t.dtype, t.device) for t in operands]
    dynamic = evaluate(name, source, metas, autocast, shapes=meta_eval.DYNAMIC)
    if dynamic.mutated or dynamic.views:
        raise DataDependentError(f"thunder: {name}{meta_eval.where()} writes or returns views of its arguments and "
                                 "its result shapes depend on their values, which thunder cannot trace. Workaround: "
                                 "compute it outside the jitted function.")
    reader = _reader()
    what = f"{name}{'()' if not name.endswith(')') else ''}"
    real = reader.run_call(fn, args, kwargs, f"the result shape of {what}")
    found = {}
    _match(dynamic.template, real, found)
    values = [found[i] for i in range(len(dynamic.results))]
    shapes = tuple(tuple(v.shape) if isinstance(v, torch.Tensor) else () for v in values)
    ev = meta_eval.with_shapes(dynamic, shapes)
    outs = _record(name, source, operands, autocast, ev, shapes=repr(shapes))
    reader.provide(outs, values)
    reader.check_shapes([o for o, r in zip(outs, dynamic.results) if None in r[0]], f"the result shape of {what}")
    return build(ev.template, _no_gradient_where_torch_has_none(outs, operands, ev), operands)


def _reader():
    """The reader of the trace being recorded (runtime/reads.py), None where values are not known."""
    ctx = tracing.current()
    return ctx.reader if ctx is not None else None


def _match(template, real, found):
    """found[i] = the part of the real result where template has Result(i)."""
    if isinstance(template, Result):
        found[template.index] = real
    elif isinstance(template, (tuple, list)):
        for t, r in zip(template, real):
            _match(t, r, found)


def _record(name, source, operands, autocast, ev, shapes=None, strides=None):
    values = {"tensors": tuple(operands), "callable": name, "args": source, "autocast": _autocast_text(autocast),
              "shapes": shapes, "strides": strides}
    op = torch_call
    if ev.random:
        op = torch_call_random
        needs_state = tracing.grad_enabled() and any(differentiable(t) for t in operands)
        values["rng_state"] = rng_state(_device(operands, ev)) if needs_state else None
    return list(op(**values))


def _no_gradient_where_torch_has_none(outs, operands, ev):
    """Results that torch gives no gradient (bessel_j0 has no derivative, sort's indices) are
    detached, as eager's do not require grad."""
    if not tracing.grad_enabled() or not any(differentiable(t) for t in operands):
        return outs

    return [detach(o) if ev.differentiable[i] is False and differentiable(o) else o for i, o in enumerate(outs)]


def _device(operands, ev):
    devices = [t.device for t in operands] + [r[2] for r in ev.results]
    return next((d for d in devices if d.type != "cpu"), torch.device("cpu"))


def _mutating(fn, name, args, kwargs, operands, source, autocast, ev, strides=None):
    """An in-place call: the out-of-place form assigned to self where there is one and the update
    keeps self's shape and dtype; else the in-place call on clones, whose new values are assigned."""
    self = args[0] if args else None
    if (isinstance(self, TensorProxy) and len(ev.mutated) == 1 and operands[ev.mutated[0]] is self
            and ev.results[-1] == (tuple(self.shape), self.dtype, self.device)):
        if kwargs.get("inplace") is True:  # F.relu(x, inplace=True): F.relu(x), assigned to x
            return inplace(lambda s, *a, **k: dispatch(fn, s, *a, **k), name, self, *args[1:],
                           **{**kwargs, "inplace": False})
        base = _out_of_place(name)
        if base is not None:
            return inplace(lambda s, *a, **k: dispatch(base, s, *a, **k), name, self, *args[1:], **kwargs)
    outs = _no_gradient_where_torch_has_none(_record(name, source, operands, autocast, ev, strides=strides),
                                             operands, ev)
    for k, j in enumerate(ev.mutated):
        target, new = operands[j], outs[ev.num_outputs + k]
        if (tuple(new.shape), new.dtype) != (tuple(target.shape), target.dtype) and (
                target.is_input or target.base is not None or target.views):
            raise NotImplementedError(
                f"thunder: {name}{meta_eval.where()} changes the shape or dtype of {target.name} in place, which is "
                "an input or shares memory with other tensors. Workaround: use the out-of-place form and the result.")
        if ev.recorded_writes[k] is not False:  # (eager's errors come from autograd recording the write)
            check_inplace_allowed(target)
        assign(target, new)
    return build(ev.template, outs, operands)


def _out_of_place(name):
    """torch.foo for torch.foo_, torch.Tensor.foo for torch.Tensor.foo_ (None if there is none)."""
    if not name.endswith("_") or name.endswith("__") or name.startswith("torch.ops."):
        return None
    try:
        base = resolve(name[:-1])
    except (AttributeError, KeyError):
        return None
    return base if callable(base) and not isinstance(base, type) else None


# TensorProxy's methods, operators and __torch_function__ (core/proxies.py) call these
hooks.fallback_call, hooks.fallback_registered, hooks.fallback_dispatch = call, registered, dispatch
