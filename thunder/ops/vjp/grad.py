"""The VJP rules of the ops of thunder/ops/grad.py (registered on them with OpDef.vjp)."""
from thunder.ops.grad import copy_, no_grad_update


@no_grad_update.vjp
def _(g, out, input, value):
    if tuple(g.shape) != tuple(input.shape) or g.dtype != input.dtype:
        # (eager's engine refuses it too: the history's last op made the tensor's old shape)
        raise NotImplementedError("thunder: a gradient through a tensor whose shape or dtype an in-place op "
                                  "changed under torch.no_grad() is not supported")
    return {"input": g, "value": None}


@copy_.vjp
def _(g, out, input, src):
    return {"input": None, "src": g}
