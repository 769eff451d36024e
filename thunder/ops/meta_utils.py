"""Helpers that meta functions share: broadcasting, type promotion, dims."""
import torch

from thunder.core import dtypes
from thunder.core.proxies import TensorProxy


def is_tensor(x):
    return isinstance(x, TensorProxy)


def broadcast_shapes(*shapes):
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s, start=ndim - len(s)):
            if d == out[i] or d == 1:
                continue
            if out[i] == 1:
                out[i] = d
            else:
                raise RuntimeError(
                    f"The size of tensor a ({out[i]}) must match the size of tensor b ({d}) "
                    f"at non-singleton dimension {i}"
                )
    return tuple(out)


def device_of(*args):
    """The device of the result: the first non-CPU tensor's, as torch does for 0-d CPU tensors."""
    devices = [a.device for a in args if is_tensor(a)]
    for d in devices:
        if d.type != "cpu":
            return d
    return devices[0] if devices else dtypes.device_or_default(None)


def elementwise(*args, result_dtype=None, int_to_float=False, always_bool=False):
    """Output of an elementwise op: broadcast shape, promoted dtype.

    int_to_float: integer and bool inputs compute in the default float dtype (sin, exp, true div).
    always_bool: comparisons and logical ops return bool."""
    tensors = [a for a in args if is_tensor(a)]
    shape = broadcast_shapes(*(t.shape for t in tensors))
    dtype = dtypes.promote(*args)
    if int_to_float and not (dtype.is_floating_point or dtype.is_complex):
        dtype = dtypes.default_dtype()
    if always_bool:
        dtype = torch.bool
    if result_dtype is not None:
        dtype = result_dtype
    return TensorProxy(shape, dtype, device_of(*args))


def canonical_dim(dim, ndim):
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def canonical_dims(dims, ndim):
    if dims is None or dims == ():
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    out = tuple(canonical_dim(d, ndim) for d in dims)
    if len(set(out)) != len(out):
        raise RuntimeError(f"dim {out} appears multiple times in the list of dims")
    return out


def reduced_shape(shape, dims, keepdim):
    return tuple(1 if i in dims else s for i, s in enumerate(shape) if keepdim or i not in dims)


def differentiable(x):
    """A tensor that can have a gradient (floating point or complex)."""
    return is_tensor(x) and (x.dtype.is_floating_point or x.dtype.is_complex)
