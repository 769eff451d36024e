"""torch.autograd.Function subclasses called inside jitted code (`MyFn.apply(x, 2.0)`).

The user's forward is interpreted with proxies, under no_grad as torch runs it, so its ops are
recorded (and fused) like any other; `ctx` is a recording object (_ForwardCtx) that keeps what
save_for_backward, mark_non_differentiable, mark_dirty and set_materialize_grads say and the
attributes the forward sets on it. When an input needs a gradient, the forward's differentiable
results then pass through one op,

    %r:2 = "ltorch.autograd_function"(%out0, %out1, %x, %saved0) {key = "MyFn#3", ...}

the identity in the program, whose VJP is the user's backward:
`ltorch.autograd_function_backward` takes the saved tensors and the cotangents, and the backward
program runs `impl.autograd_function_backward`, which calls `MyFn.backward` on real tensors with
a ctx that has the forward's attributes, saved_tensors and needs_input_grad (once_differentiable
backwards work as they are: the backward program runs without grad). `key` names the apply's
record (_Applied: the Function class, the non-tensor ctx attributes, the inputs' and outputs'
metadata), kept for the life of the process like the compiled programs that refer to it."""
import itertools
from dataclasses import dataclass

import torch

from thunder.core.proxies import TensorProxy, assign
from thunder.ops.registry import Ints, Str, Tensors, ltorch
from thunder.ops import impl
from thunder.ops.meta_utils import differentiable
from thunder.core import trace as tracing
from thunder.core.pysource import py_repr
from thunder.interpreter import interpret_inner

_APPLY = torch.autograd.Function.apply.__func__
_BASE_SETUP_CONTEXT = torch.autograd.function._SingleLevelFunction.setup_context
_counter = itertools.count()
RECORDS = {}  # key -> _Applied


def is_apply(fn):
    """fn is torch.autograd.Function.apply (of any subclass: a bound classmethod or the function)."""
    return getattr(fn, "__func__", fn) is _APPLY


@dataclass
class _Applied:
    function: type  # the torch.autograd.Function subclass
    attributes: dict  # the ctx attributes that are not tensors
    saved: list  # what save_for_backward got: index into the saved operands, or None
    # (name, where) of ctx attributes holding tensors: where is an index into the saved operands, or
    # for a tuple/list holding tensors (type, [where or (value,) per item])
    tensor_attributes: list
    needs_input_grad: tuple  # per forward argument
    materialize_grads: bool
    inputs: list  # (shape, dtype, device) of the tensor arguments
    input_positions: list  # their places among the forward's arguments
    num_args: int
    outputs: list  # (shape, dtype, device) per forward output, None for non-tensors
    routed: list  # indices of the forward outputs that pass through ltorch.autograd_function


class _ForwardCtx:
    """`ctx` of a forward interpreted by thunder: records what torch's FunctionCtx would keep."""
    OWN = ("needs_input_grad", "_saved", "_dirty", "_non_differentiable", "_materialize_grads")

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self._saved = ()
        self._dirty = ()
        self._non_differentiable = ()
        self._materialize_grads = True

    def save_for_backward(self, *tensors):
        self._saved = tensors

    def mark_dirty(self, *tensors):
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable = tensors

    def set_materialize_grads(self, value):
        self._materialize_grads = bool(value)

    @property
    def saved_tensors(self):
        return self._saved

    def save_for_forward(self, *tensors):
        raise NotImplementedError("thunder: ctx.save_for_forward (forward-mode AD of a torch.autograd.Function) "
                                  "is not supported")


class _BackwardCtx:
    """`ctx` of the user's backward at run time: the forward's attributes, saved_tensors and
    needs_input_grad."""

    def __init__(self, record, saved):
        self.__dict__.update(record.attributes)
        for name, where in record.tensor_attributes:
            setattr(self, name, _rebuilt(where, saved))
        self.saved_tensors = tuple(None if i is None else saved[i] for i in record.saved)
        self.needs_input_grad = record.needs_input_grad
        self.materialize_grads = record.materialize_grads

    def mark_non_differentiable(self, *args):
        pass

    def set_materialize_grads(self, value):
        pass


def apply(function, *args, **kwargs):
    """`function.apply(*args, **kwargs)` while tracing (what the interpreter's lookup returns for
    torch.autograd.Function.apply)."""
    if kwargs:  # (apply takes positional arguments; torch binds defaults of forward the same way)
        raise NotImplementedError(f"thunder: {function.__qualname__}.apply with keyword arguments is not supported")
    grad = tracing.grad_enabled()
    needs = tuple(bool(grad and isinstance(a, TensorProxy) and a.requires_grad) for a in args)
    ctx = _ForwardCtx(needs)
    with torch.no_grad():
        if function.setup_context is not _BASE_SETUP_CONTEXT:  # forward(*args) + setup_context(ctx, ...)
            out = interpret_inner(function.forward, args)
            interpret_inner(function.setup_context, (ctx, args, out))
        else:
            out = interpret_inner(function.forward, (ctx, *args))
    if not any(needs):
        return out
    flat = list(out) if isinstance(out, tuple) else [out]
    excluded = {id(t) for t in ctx._non_differentiable}
    routed = [i for i, o in enumerate(flat)
              if isinstance(o, TensorProxy) and differentiable(o) and id(o) not in excluded]
    if not routed:
        return out
    operands, position = [], {}

    def operand(t):
        if id(t) not in position:
            position[id(t)] = len(operands)
            operands.append(t)
        return position[id(t)]

    saved = [None if t is None else operand(t) for t in ctx._saved]
    if any(t is not None and not isinstance(t, TensorProxy) for t in ctx._saved):
        raise TypeError("save_for_backward can only save variables, but argument 0 is not a Variable")
    tensor_attributes, attributes = [], {}
    for name, value in vars(ctx).items():
        if name in _ForwardCtx.OWN:
            continue
        if _holds_tensors(value):
            tensor_attributes.append((name, _where(value, operand)))
        else:
            attributes[name] = value
    input_positions = [i for i, a in enumerate(args) if isinstance(a, TensorProxy)]
    inputs = [args[i] for i in input_positions]
    key = f"{function.__qualname__}#{next(_counter)}"
    RECORDS[key] = _Applied(function, attributes, saved, tensor_attributes, needs, ctx._materialize_grads,
                            [_meta(a) for a in inputs], input_positions, len(args),
                            [_meta(o) if isinstance(o, TensorProxy) else None for o in flat], routed)
    results = autograd_function(tuple(flat[i] for i in routed), tuple(inputs), tuple(operands), key=key)
    dirty = {id(t) for t in ctx._dirty}
    for i, r in zip(routed, results):
        if id(flat[i]) in dirty:  # an input the forward updated in place: that tensor gets the gradient path
            assign(flat[i], r)
        else:
            flat[i] = r
    return tuple(flat) if isinstance(out, tuple) else flat[0]


def _holds_tensors(value):
    if type(value) is dict:
        value = list(value.values())
    return isinstance(value, TensorProxy) or (type(value) in (tuple, list) and any(_holds_tensors(v) for v in value))


def _where(value, operand):
    """Where the backward finds a ctx attribute holding tensors (_Applied.tensor_attributes):
    Reformer's reversible layers set ctx.all_buckets to a tuple of tensors."""
    if isinstance(value, TensorProxy):
        return operand(value)
    if not _holds_tensors(value):
        return (value,)
    if type(value) is dict:
        return dict, [(k, _where(v, operand)) for k, v in value.items()]
    return type(value), [_where(v, operand) for v in value]


def _rebuilt(where, saved):
    if isinstance(where, int):
        return saved[where]
    if len(where) == 1:
        return where[0]
    kind, items = where
    if kind is dict:
        return {k: _rebuilt(w, saved) for k, w in items}
    return kind(_rebuilt(w, saved) for w in items)


def _meta(t):
    return (tuple(t.shape), t.dtype, t.device)


def _record(key):
    record = RECORDS.get(key)
    if record is None:
        raise ValueError(f"no torch.autograd.Function application {key!r} in this process")
    return record


@ltorch("(autograd_function)", returns_sequence=True)
def autograd_function(outputs: Tensors, inputs: Tensors, saved: Tensors, *, key: Str):
    """The differentiable results `outputs` of a torch.autograd.Function's forward (the apply
    `key`), unchanged; their gradient is the Function's own backward
    (ltorch.autograd_function_backward). inputs: its tensor arguments; saved: the tensors its
    backward reads (save_for_backward, tensors set on ctx)."""
    record = _record(key)
    if len(outputs) != len(record.routed) or len(inputs) != len(record.inputs):
        raise ValueError(f"{key}: {len(outputs)} outputs and {len(inputs)} inputs, the apply has "
                         f"{len(record.routed)} and {len(record.inputs)}")
    return tuple(TensorProxy(o.shape, o.dtype, o.device) for o in outputs)


@ltorch("impl.autograd_function_backward", returns_sequence=True, differentiable=False)
def autograd_function_backward(tensors: Tensors, *, key: Str, cotangent_for: Ints, grads_for: Ints):
    """The user's backward of the torch.autograd.Function apply `key`: tensors are its saved
    tensors, then the cotangents of its outputs `cotangent_for`; results: the gradients of its
    tensor arguments `grads_for`."""
    record = _record(key)
    if any(not 0 <= j < len(record.inputs) for j in grads_for):
        raise ValueError(f"{key}: grads_for {grads_for} out of range")
    return tuple(TensorProxy(*record.inputs[j]) for j in grads_for)


def _python_identity(values, outs):
    names = [t.name for t in values["outputs"]]
    return [f"{', '.join(outs)}{',' if len(outs) == 1 else ''} = {', '.join(names)}{',' if len(names) == 1 else ''}"]


def _python_backward(values, outs):
    """`g0, = impl.autograd_function_backward("MyFn#3", (s0,), (ct0,), cotangent_for=(0,), grads_for=(0,))`."""
    tensors = values["tensors"]
    n = len(tensors) - len(values["cotangent_for"])
    target = ", ".join(outs) + ("," if len(outs) == 1 else "")
    return [f"{target} = impl.autograd_function_backward({values['key']!r}, {py_repr(tuple(tensors[:n]))}, "
            f"{py_repr(tuple(tensors[n:]))}, cotangent_for={py_repr(values['cotangent_for'])}, "
            f"grads_for={py_repr(values['grads_for'])})"]


autograd_function.python = _python_identity
autograd_function_backward.python = _python_backward


# the attribute marking the zeros that stand for a None gradient the user's backward returned
NONE_GRAD = "_thunder_none_grad"


def run_backward(key, saved, cotangents, cotangent_for, grads_for):
    """The user's backward on real tensors (impl.autograd_function_backward): the cotangents of
    the outputs `cotangent_for` (the others None, or zeros unless the forward called
    set_materialize_grads(False)); returns the gradients of the tensor arguments `grads_for`,
    checked and summed to their shapes as torch does."""
    record = _record(key)
    function = record.function
    grads_out = [None] * len(record.outputs)
    for i, g in zip(cotangent_for, cotangents):
        grads_out[record.routed[i]] = g
    if record.materialize_grads:
        grads_out = [torch.zeros(m[0], dtype=m[1], device=m[2]) if g is None and m is not None else g
                     for g, m in zip(grads_out, record.outputs)]
    result = function.backward(_BackwardCtx(record, saved), *grads_out)
    if not isinstance(result, tuple):
        result = (result,)
    if len(result) != record.num_args:
        # (torch allows trailing Nones beyond the arguments)
        if len(result) < record.num_args or any(r is not None for r in result[record.num_args:]):
            raise RuntimeError(f"function {function.__name__}Backward returned an incorrect number of gradients "
                               f"(expected {record.num_args}, got {len(result)})")
    grads = []
    for j in grads_for:
        shape, dtype, device = record.inputs[j]
        g = result[record.input_positions[j]]
        if g is None:  # zeros for the backward program, marked: an input they reach unchanged gets None
            g = torch.zeros(shape, dtype=dtype, device=device)
            setattr(g, NONE_GRAD, True)
        elif not isinstance(g, torch.Tensor):
            raise TypeError(f"function {function.__name__}Backward returned a gradient different than None at "
                            f"position {record.input_positions[j] + 1}, but the corresponding forward input was "
                            "not a Variable")
        elif tuple(g.shape) != shape:
            try:
                g = g.sum_to_size(shape)
            except RuntimeError:
                raise RuntimeError(f"Function {function.__name__}Backward returned an invalid gradient at index "
                                   f"{record.input_positions[j]} - got {list(g.shape)} but expected shape "
                                   f"compatible with {list(shape)}") from None
        grads.append(g.to(dtype))
    return tuple(grads)


# the generated programs call impl.autograd_function_backward, which runs this
impl.custom_function_backward = run_backward


def higher_order_apply(fwd, bwd, *args, **kwargs):
    """`torch.ops.higher_order.autograd_function_apply(fwd, bwd, *args, non_differentiable_idx=...,
    saved_for_backward_idx=..., dirty_idx=...)` (what torch.compile makes of a Function): fwd(*args)
    returns (output, saved values), bwd(*grads, *saved values) the gradients. Run as the
    torch.autograd.Function it stands for, through `apply`: fwd interpreted, bwd for gradients."""
    non_differentiable = list(kwargs["non_differentiable_idx"])  # (required, as in eager)
    kwargs["saved_for_backward_idx"]  # noqa: B018 - required, as in eager (a KeyError without it)
    dirty = list(kwargs.get("dirty_idx", ()))

    def chosen(output, idx):
        flat = output if isinstance(output, (tuple, list)) else (output,)
        return [x for i, x in enumerate(flat) if i in idx]

    class HigherOrderApply(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            output, saved = fwd(*inputs)
            ctx.save_for_backward(*saved)
            if dirty:
                ctx.mark_dirty(*chosen(output, dirty))
            if non_differentiable:
                ctx.mark_non_differentiable(*chosen(output, non_differentiable))
            return output

        @staticmethod
        def backward(ctx, *grads):
            return bwd(*grads, *ctx.saved_tensors)

    return apply(HigherOrderApply, *args)
