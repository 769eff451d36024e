"""Torch implementations of ops that have no single torch function with our signature."""
import torch


def convert_element_type(a, dtype):
    return a.to(dtype)


def broadcast_in_dim(a, shape, broadcast_dims):
    view = [1] * len(shape)
    for i, d in enumerate(broadcast_dims):
        view[d] = a.shape[i]
    return a.reshape(view).expand(shape)


def slice_prim(a, start_indices, end_indices, strides):
    return a[tuple(slice(s, e, st) for s, e, st in zip(start_indices, end_indices, strides))]


def sum_prim(a, dims):
    return torch.sum(a, dims) if dims else a.clone()


def prod_prim(a, dims):
    for d in sorted(dims, reverse=True):
        a = torch.prod(a, d)
    return a


def amax_prim(a, dims):
    return torch.amax(a, dims) if dims else a.clone()


def amin_prim(a, dims):
    return torch.amin(a, dims) if dims else a.clone()


def full(shape, fill_value, *, dtype, device):
    return torch.full(shape, fill_value, dtype=dtype, device=device)


def iota(length, *, start, step, dtype, device):
    return torch.arange(start, start + length * step, step, dtype=dtype, device=device)[:length]


def uniform(shape, low, high, *, dtype, device):
    return torch.empty(shape, dtype=dtype, device=device).uniform_(low, high)


def div_prim(a, b):
    t = a if isinstance(a, torch.Tensor) else b
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")
