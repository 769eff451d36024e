"""torch.autocast inside jitted code: the casts autocast would make are recorded in the trace.

Per op, torch's autocast policy for the device: ops in LOWER_PRECISION run in the autocast dtype
(their eligible floating inputs are cast: float32/float16/bfloat16, not float64), ops in FP32
in float32, ops in PROMOTE in the widest floating type of their inputs."""
import torch

from thunder.core.proxies import TensorProxy

# torch's CPU autocast lists (aten/src/ATen/autocast_mode.cpp), by our op names
LOWER_PRECISION = {
    "cpu": {"conv1d", "conv2d", "conv_transpose2d", "bmm", "mm", "baddbmm", "addmm", "linear", "matmul",
            "rmatmul", "scaled_dot_product_attention"},
    "cuda": {"conv1d", "conv2d", "conv_transpose2d", "bmm", "mm", "baddbmm", "addmm", "linear", "matmul",
             "rmatmul", "scaled_dot_product_attention"},
}
FP32 = {
    "cpu": {"prod", "avg_pool3d", "mse_loss", "binary_cross_entropy", "nll_loss",
            "cross_entropy"},  # (eager: log_softmax in the input dtype, nll_loss in float32)
    "cuda": {"prod", "exp", "log", "log10", "log2", "log1p", "pow", "reciprocal", "rsqrt", "sinh", "tan",
             "softplus", "layer_norm", "group_norm", "rms_norm", "softmax", "log_softmax", "sum", "mean", "var",
             "std", "cumsum", "norm", "mse_loss"},
}
PROMOTE = {  # (cat, stack and where promote natively too; CPU autocast leaves index_put's check to it)
    "cpu": {"cat", "stack", "where"},
    "cuda": {"cat", "stack", "index_put", "setitem", "where"},
}


def _eligible(x):
    return isinstance(x, TensorProxy) and x.dtype in (torch.float32, torch.float16, torch.bfloat16)


def _cast_all(values, dtype):
    def cast(v):
        if _eligible(v) and v.dtype is not dtype:
            return v.to(dtype)
        if isinstance(v, tuple):
            return tuple(cast(x) for x in v)
        return v

    return {k: cast(v) for k, v in values.items()}


# ops whose dtypes under autocast depend on how torch computes them, run as torch's own call in
# the region (ops/fallback.py): einsum casts where it multiplies by bmm (pairs with a contracted
# dim), torch's LSTM kernel and bilinear's products have policies of their own, and padding by
# reflection or replication runs in float32 for some ranks on the CPU
AS_TORCH = {"einsum", "lstm", "bilinear"}


def _as_torch(op, values):
    return op.name in AS_TORCH or op.name == "pad" and values.get("mode", "constant") != "constant"


def apply(op, values):
    """values with the casts the active autocast region asks for (or values unchanged); an op
    autocast treats as torch computes it is refused (NotImplementedError: its caller records
    torch's call)."""
    tensors = [v for v in values.values() if isinstance(v, TensorProxy)]
    for v in values.values():
        if isinstance(v, tuple):
            tensors += [x for x in v if isinstance(x, TensorProxy)]
    if not tensors:
        return values
    device = tensors[0].device.type
    if device not in ("cpu", "cuda") or not torch.is_autocast_enabled(device):
        return values
    if _as_torch(op, values):
        raise NotImplementedError(f"thunder: {op.name} inside torch.autocast runs as torch's call")
    if op.name in LOWER_PRECISION[device]:
        return _cast_all(values, torch.get_autocast_dtype(device))
    if op.name in FP32[device]:
        return _cast_all(values, torch.float32)
    if op.name in PROMOTE[device]:
        floats = [t.dtype for t in tensors if t.dtype.is_floating_point]
        if floats:
            widest = floats[0]
            for d in floats[1:]:
                widest = torch.promote_types(widest, d)
            return _cast_all(values, widest)
    return values
