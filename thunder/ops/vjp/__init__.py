"""The VJP rules of the ops, one module per module of op definitions (thunder/ops/vjp/M.py holds
the rules of the ops of thunder/ops/M.py), registered on the OpDefs with `@op.vjp` when
thunder.ops imports this package, after every op is defined. A reader of an op module sees what
the op is; a reader of this package sees how every op differentiates (lowering/autograd.py
applies the rules)."""
from thunder.ops.vjp import (attention, complex_numbers, creation, custom_function, elementwise, grad,  # noqa: F401
                             indexing, layers, nn, prims, random_ops, reductions, shape)
