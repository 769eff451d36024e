"""The VJP rules of the ops of thunder/ops/grad.py (registered on them with OpDef.vjp)."""
from thunder.ops.grad import copy_, no_grad_update


@no_grad_update.vjp
def _(g, out, input, value):
    return {"input": g, "value": None}


@copy_.vjp
def _(g, out, input, src):
    return {"input": None, "src": g}
