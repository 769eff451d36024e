"""The VJP rules of the ops of thunder/ops/random_ops.py (registered on them with OpDef.vjp)."""
from thunder.ops import vjp_utils
from thunder.ops.meta_utils import is_tensor
from thunder.ops.random_ops import (bernoulli, manual_seed, normal, rand, rand_like, randint, randint_like, randn,
                                    randn_like)


def _no_grad_rule(op):
    """No gradient flows into the op's tensor inputs (none for inputs the op only reads the shape of)."""
    tensor_params = [p.name for p in op.params if p.kind.base_name == "Tensor"]
    op.vjp(lambda g, out, **args: {name: None for name in tensor_params})


def _zero_grad_rule(op):
    """Zeros for each differentiable tensor input: eager's gradient of bernoulli and normal."""
    def rule(g, out, **args):
        return {name: vjp_utils.zeros_like(v) if vjp_utils.differentiable(v) else None
                for name, v in args.items() if is_tensor(v)}

    op.vjp(rule)


for _op in (rand, randn, randint):
    _no_grad_rule(_op)


for _op in (rand_like, randn_like, randint_like):
    _no_grad_rule(_op)  # eager: the result does not depend on input's values


_zero_grad_rule(bernoulli)


_zero_grad_rule(normal)


manual_seed.vjp(lambda g, out, seed: {})
