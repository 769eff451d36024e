"""x.view(dtype): the same memory read as another dtype (a bitcast), as FP8/FP4 recipes use it
(x.to(torch.float8_e4m3fn).view(torch.uint8) and back). A view of its input, not differentiable
(as in eager); it runs as torch's Tensor.view in the program (no decomposition, not fused)."""
import torch

from thunder.core.proxies import TensorProxy
from thunder.ops import registry, shape
from thunder.ops.registry import DType, Tensor, ltorch


def _name(dtype):
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int",
            torch.int64: "Long", torch.bool: "Bool"}.get(dtype, str(dtype).removeprefix("torch."))


@ltorch("torch.Tensor.view", view=True, strided=True, differentiable=False, name="view_dtype")
def view_dtype(input: Tensor, dtype: DType):
    """x.view(dtype): a dtype of another element size changes the size of the last dim (eager's
    errors where it cannot: a 0-d input, a last dim not divisible, strides eager refuses)."""
    old, new = input.dtype.itemsize, dtype.itemsize
    size = input.shape
    if old != new:
        what = f"to view {_name(input.dtype)} as {_name(dtype)} (different element sizes)"
        if input.ndim == 0:
            raise RuntimeError(f"self.dim() cannot be 0 {what}")
        last = input.shape[-1]
        if new > old and last % (new // old):
            raise RuntimeError(f"self.size(-1) must be divisible by {new // old} {what}, but got {last}")
        size = (*input.shape[:-1], last // (new // old) if new > old else last * (old // new))
    return TensorProxy(size, dtype, input.device)


def _view(self, *args, **kwargs):
    """Tensor.view: of a dtype (view_dtype), else of a shape (shape.view)."""
    if len(args) == 1 and isinstance(args[0], torch.dtype) or "dtype" in kwargs:
        return view_dtype(self, *args, **kwargs)
    return shape.view(self, *args, **kwargs)


registry.method("view", _view)
