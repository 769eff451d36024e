"""numpy arrays passed to a jitted function.

An array argument is an input like a tensor: the prologue takes torch.from_numpy(array) (its
memory, read at call time) and checks its dtype and shape as a tensor's; the function sees an
ArrayProxy, which torch.from_numpy, torch.as_tensor, torch.asarray and torch.tensor turn into the
input's tensor proxy (sharing memory as in eager: in-place updates of it reach the array) or a
copy of it. numpy itself stays optional: arrays are recognized by their type's module and name.
"""
import sys

import torch


def numpy_random():
    """numpy.random where numpy is imported (torch imports it where installed), else None."""
    np = sys.modules.get("numpy")
    return np.random if np is not None else None


def is_array(v):
    """A numpy.ndarray (numpy need not be installed: then nothing is one)."""
    np = sys.modules.get("numpy")
    return np is not None and type(v) is np.ndarray


def as_input_tensor(a):
    """torch.from_numpy(a), or None where torch cannot share a's memory (object or string dtypes,
    negative strides): such an array stays an opaque object."""
    try:
        return torch.from_numpy(a)
    except (TypeError, ValueError):
        return None


class ArrayProxy:
    """A numpy array argument inside the trace: its metadata, and its tensor for the torch
    functions that take arrays. numpy operations on it are not traced."""

    def __init__(self, tensor, example):
        self.tensor = tensor  # the TensorProxy of torch.from_numpy(array)
        self.shape = tuple(example.shape)
        self.dtype = example.dtype
        self.ndim = example.ndim
        self.size = example.size
        self.itemsize = example.itemsize
        self.nbytes = example.nbytes

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)  # (protocol probes: __torch_function__, __array__, ...)
        raise NotImplementedError(
            f"thunder: numpy's ndarray.{name} on an array argument of a jitted function is not traced (thunder "
            "traces torch). Workaround: convert it with torch.from_numpy(a) (inside or outside the function) "
            "and use torch operations.")


def _refuse_operator(name):
    def op(self, *args):
        raise NotImplementedError(
            f"thunder: numpy's {name} on an array argument of a jitted function is not traced (thunder traces "
            "torch). Workaround: convert it with torch.from_numpy(a) (inside or outside the function) and use "
            "torch operations.")
    return op


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
              "lshift", "rshift"):
    setattr(ArrayProxy, f"__{_name}__", _refuse_operator(f"operator {_name}"))
    setattr(ArrayProxy, f"__r{_name}__", _refuse_operator(f"operator {_name}"))
for _name in ("neg", "pos", "abs", "invert", "getitem", "setitem", "iter", "lt", "le", "gt", "ge", "bool",
              "float", "int", "index"):
    setattr(ArrayProxy, f"__{_name}__", _refuse_operator(f"__{_name}__"))


def from_numpy(a):
    """torch.from_numpy of an array argument: its tensor (the same memory)."""
    return a.tensor


def as_tensor(a, dtype=None, device=None):
    """torch.as_tensor / torch.asarray of an array argument: its tensor where dtype and device
    match (the same memory), else a converted copy."""
    t = a.tensor
    if (dtype is None or dtype == t.dtype) and (device is None or _same_device(device, t.device)):
        return t
    return t.to(dtype=dtype, device=device)


def tensor(a, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """torch.tensor of an array argument: a copy."""
    if requires_grad or pin_memory:
        raise NotImplementedError(
            "thunder: torch.tensor(array, requires_grad=True / pin_memory=True) inside a jitted function is not "
            "supported. Workaround: make the tensor outside the function and pass it.")
    return a.tensor.to(dtype=dtype, device=device, copy=True)


def _same_device(device, other):
    return torch.device(device) == other
