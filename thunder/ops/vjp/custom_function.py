"""The VJP rules of the ops of thunder/ops/custom_function.py (registered on them with OpDef.vjp)."""
from thunder.ops.custom_function import _record, autograd_function, autograd_function_backward
from thunder.ops.vjp_utils import differentiable


@autograd_function.vjp
def _(g, out, outputs, inputs, saved, *, key):
    record = _record(key)
    cotangent_for = tuple(i for i, gi in enumerate(g) if gi is not None)
    grads_for = tuple(j for j, x in enumerate(inputs)
                      if differentiable(x) and record.needs_input_grad[record.input_positions[j]])
    none = {"outputs": (None,) * len(outputs), "inputs": (None,) * len(inputs), "saved": (None,) * len(saved)}
    if not cotangent_for or not grads_for:
        return none
    grads = autograd_function_backward((*saved, *(g[i] for i in cotangent_for)), key=key,
                                       cotangent_for=cotangent_for, grads_for=grads_for)
    result = [None] * len(inputs)
    for j, gj in zip(grads_for, grads):
        result[j] = gj
    return {**none, "inputs": tuple(result)}
