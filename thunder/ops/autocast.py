"""torch.autocast inside jitted code: the casts autocast would make are recorded in the trace.

Per op, torch's autocast policy for the device: ops in LOWER_PRECISION run in the autocast dtype
(their eligible floating inputs are cast: float32/float16/bfloat16, not float64), ops in FP32
in float32, ops in PROMOTE in the widest floating type of their inputs."""
import torch

from thunder.core.proxies import TensorProxy

# torch's autocast lists (aten/src/ATen/autocast_mode.cpp) for the ops we register, by our op
# names; checked against eager by tests/test_ops_autocast.py (CUDA: benchmarks/gpu/run.sh's ops part)
LOWER_PRECISION = {
    "cpu": {"conv1d", "conv2d", "conv_transpose2d", "bmm", "mm", "baddbmm", "addmm", "linear", "matmul",
            "rmatmul", "scaled_dot_product_attention"},
    "cuda": {"conv1d", "conv2d", "conv_transpose2d", "bmm", "mm", "baddbmm", "addmm", "linear", "matmul",
             "rmatmul", "scaled_dot_product_attention"},
}
FP32 = {
    "cpu": {"prod", "avg_pool3d", "mse_loss", "binary_cross_entropy", "nll_loss",
            "cross_entropy"},  # (eager: log_softmax in the input dtype, nll_loss in float32)
    # (2 ** x and 1 / x: pow and reciprocal; F.normalize: a float32 norm; mean, var, std and
    # rms_norm keep the input's dtype: measured on an H200, torch 2.11)
    "cuda": {"prod", "exp", "expm1", "log", "log10", "log2", "log1p", "logsumexp", "pow", "rpow", "reciprocal",
             "rtruediv", "rsqrt", "sinh", "tan", "softplus", "layer_norm", "group_norm", "softmax", "log_softmax",
             "sum", "cumsum", "norm", "normalize", "mse_loss", "nll_loss", "cross_entropy"},
}
PROMOTE = {  # (cat, stack and where promote natively too; x[i] = v is index_put_, which autocast leaves to its check)
    "cpu": {"cat", "stack", "where"},
    "cuda": {"cat", "stack", "index_put", "where"},
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
# dim), torch's LSTM kernel and bilinear's products have policies of their own, padding by
# reflection or replication runs in float32 for some ranks on the CPU, upsampling by mode on CUDA
AS_TORCH = {"cpu": {"einsum", "lstm", "bilinear"}, "cuda": {"einsum", "lstm", "bilinear", "interpolate"}}


def _as_torch(op, values, device):
    return op.name in AS_TORCH[device] or op.name == "pad" and values.get("mode", "constant") != "constant"


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
    if _as_torch(op, values, device):
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
