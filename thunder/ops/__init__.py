"""Every op thunder knows. Importing this package registers them all (see registry.py)."""
from thunder.ops import prims  # noqa: F401  (thunder dialect; ltorch decompositions use them)
from thunder.ops import (elementwise, reductions, shape, join_split, repeat_pad, nn, attention,  # noqa: F401
                         creation, grad, layers, interpolate, normalization, random_ops, indexing, losses, rnn)
from thunder.ops import fallback  # noqa: F401  (ltorch.torch_call: every torch call without an entry)
from thunder.ops import values  # noqa: F401  (runtime numbers and checks of values read while tracing)
from thunder.ops import python_draws  # noqa: F401  (Python's and numpy's random draws, drawn per call)
from thunder.ops import custom_function  # noqa: F401  (torch.autograd.Function subclasses)
from thunder.ops import dtype_views  # noqa: F401  (x.view(dtype); registered after shape.view)
from thunder.ops import unview  # noqa: F401  (how in-place updates of views reach their bases)
from thunder.ops import vjp  # noqa: F401  (the VJP rules of the ops above, thunder/ops/vjp/)
