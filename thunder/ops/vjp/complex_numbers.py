"""Gradients of complex tensors, as torch defines them: for a real loss L of z = x + iy, the
gradient torch stores is dL/dx + i dL/dy. For an op holomorphic in its complex inputs (mul,
matmul, exp, ...) that is the cotangent times the conjugate of the derivative, `g * conj(y)` for
`x * y`, where the rules of this package, written for real tensors, compute `g * y`. So
lowering/autograd.py runs the rule of an op of CONJUGATED on the conjugated cotangents and
conjugates the gradients it returns: conj(conj(g) * y) = g * conj(y). That is also right for
ops linear with real coefficients (shapes, indexing, sums, casts, where), where conjugating
twice changes nothing.

The fallback's torch calls differentiate with torch's own derivative (ltorch.torch_call_vjp),
which is already torch's complex gradient, a torch.autograd.Function's backward is the user's,
and the rules of abs, var and std give it themselves (`g * sgn(z)`, `g * 2 (z - mean) / (n - c)`):
AS_IS. Any other op on complex tensors (norms, normalize: not holomorphic) is refused by name where
it is differentiated, never given a real rule's gradient."""

import torch

from thunder.ops import fallback

_ELEMENTWISE = ("add", "sub", "rsub", "mul", "div", "true_divide", "rtruediv", "neg", "exp", "expm1", "log",
                "log1p", "log2", "log10", "sqrt", "rsqrt", "reciprocal", "square", "pow", "rpow", "sin", "cos",
                "tanh", "sigmoid", "where")
_LINEAR = ("as_strided", "broadcast_to", "cat", "chunk", "contiguous", "expand", "expand_as", "flatten", "flip",
           "getitem", "movedim", "narrow", "permute", "repeat_interleave", "reshape", "reshape_as", "roll",
           "select", "split", "squeeze", "stack", "t", "transpose", "unbind", "unflatten", "unsqueeze", "view",
           "view_as", "gather", "index", "index_put", "index_select", "masked_fill", "scatter_add", "setitem",
           "clone", "to", "type", "float", "double", "half", "bfloat16", "sum", "mean", "cumsum", "prod",
           "matmul", "mm", "bmm", "rmatmul", "linear", "addmm", "baddbmm", "embedding", "copy_")
_PRIMS = ("add", "sub", "mul", "div", "neg", "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "rsqrt",
          "reciprocal", "pow", "sin", "cos", "tanh", "where", "matmul", "sum", "prod", "broadcast_in_dim", "cat",
          "reshape", "slice", "transpose", "take", "convert_element_type")

CONJUGATED = frozenset([f"ltorch.{n}" for n in _ELEMENTWISE + _LINEAR] + [f"thunder.{n}" for n in _PRIMS])
# (var and std: g * 2 (z - mean) / (n - correction), torch's formula for complex z too)
AS_IS = frozenset({"ltorch.torch_call", "ltorch.torch_call_random", "ltorch.autograd_function", "ltorch.abs",
                   "thunder.abs", "ltorch.var", "ltorch.std"})


def sgn(z):
    """z / |z| (0 at 0) of a complex tensor: the derivative abs's rule multiplies by."""
    return fallback.call(torch.sgn, z)
