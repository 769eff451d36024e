"""torch.func inside jitted code, traced through (what the interpreter's lookup returns for them).

- `functional_call(module, params, args, kwargs)`: the module called with the given tensors in
  place of its parameters and buffers (tied ones too, as torch's tie_weights), put back after.
- `vmap(f, in_dims, out_dims)(*args)`: f interpreted once, on the first example (the slices of
  the batched arguments), and its ops recorded again as batched ops (runtime/batching.py:
  elementwise, matmul, reductions, softmax, linear, ...), one copy of the body whatever the batch
  size; where an op has no batching rule, batching by unrolling: f interpreted for every example
  and the results stacked, exact for any f (shape reads, Python control flow on sizes), the trace
  growing with the batch size.
- `grad`, `grad_and_value`, `jacrev`, `jacfwd`, `hessian`: f interpreted in the trace (under grad
  mode), then the VJP rules of the ops it recorded (lowering/autograd.py backpropagate) recorded
  after them, from a cotangent of ones (grad) or of each one-hot direction (jacobians; jacfwd is
  the same matrix computed the same way); so the results are ordinary values of the trace, which
  the outer function may differentiate again (hessian is jacrev of jacrev).

- `vjp(f, *primals)`: the same, the cotangent given by the caller of the returned function.

Anything else about them (randomness="different", has_aux with jacobians, in_dims other than
ints and None (per argument, or per part of a tuple argument, as torch's prefix of the arguments'
structure), arguments that are not structures of tensors, jvp, linearize) is
refused with a NotImplementedError that names it; chunk_size is accepted and has no effect."""
import functools
import importlib

import torch
import torch.utils._pytree as pytree

from thunder.core import trace as tracing
from thunder.core.proxies import TensorProxy
from thunder.interpreter import interpret_inner
from thunder.lowering.autograd import backpropagate, forward_proxies, needing_grad, use_training_forms
from thunder.ops import fallback
from thunder.ops.registry import OPS
from thunder.runtime import batching


def _op(name, *args, **kwargs):
    return OPS[f"ltorch.{name}"](*args, **kwargs)


# --------------------------------------------------------------------------------------------
# functional_call


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    dicts = parameter_and_buffer_dicts if isinstance(parameter_and_buffer_dicts, (tuple, list)) \
        else (parameter_and_buffer_dicts,)
    given = {}
    for d in dicts:
        for k, v in d.items():
            if k in given:
                raise ValueError(f"{k} appeared in multiple dictionaries; behavior of functional call is ambiguous")
            given[k] = v
    names = dict(module.named_parameters(remove_duplicate=False))
    names.update(module.named_buffers(remove_duplicate=False))
    if strict:
        missing, unexpected = sorted(set(names) - set(given)), sorted(set(given) - set(names))
        if missing or unexpected:
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}: missing keys {missing}, "
                               f"unexpected keys {unexpected}")
    if tie_weights:  # a tensor registered under several names is replaced under all of them
        by_tensor = {id(names[k]): v for k, v in given.items() if k in names}
        for k, t in names.items():
            if k not in given and id(t) in by_tensor:
                given[k] = by_tensor[id(t)]
    originals = []
    try:
        for name, value in given.items():
            *path, leaf = name.split(".")
            owner = functools.reduce(getattr, path, module)
            for store in (owner._parameters, owner._buffers, None):
                if store is None:
                    originals.append((owner, None, leaf, owner.__dict__.get(leaf)))
                    object.__setattr__(owner, leaf, value)
                elif leaf in store:
                    originals.append((owner, store, leaf, store[leaf]))
                    store[leaf] = value
                    break
        args = args if isinstance(args, tuple) else () if args is None else (args,)
        return interpret_inner(module, args, kwargs or {})
    finally:
        for owner, store, leaf, value in reversed(originals):
            if store is not None:
                store[leaf] = value
            elif value is None:
                owner.__dict__.pop(leaf, None)
            else:
                object.__setattr__(owner, leaf, value)


# --------------------------------------------------------------------------------------------
# vmap


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    if randomness == "different":
        tracing.refuse_inside('torch.vmap(..., randomness="different")')

    def batched(*args, **kwargs):
        # in_dims as torch reads it: a prefix of the arguments' structure (an int or None for a
        # whole argument, or a tuple of them for the parts of a tuple argument), one dim per leaf
        leaves, spec = pytree.tree_flatten(args)
        dims = pytree._broadcast_to_and_flatten(tuple(in_dims) if isinstance(in_dims, list) else in_dims, spec)
        if dims is None:
            raise ValueError(f"vmap: in_dims={in_dims!r} is not compatible with the structure of the inputs "
                             f"({len(args)} arguments): in_dims must be an int, None, or a prefix of the arguments' "
                             "structure")
        if any(not (d is None or isinstance(d, int)) for d in dims):
            tracing.refuse_inside(f"torch.vmap with in_dims={in_dims!r} (an int or None per tensor is supported)")
        mapped = [(t, d) for t, d in zip(leaves, dims) if d is not None and isinstance(t, TensorProxy)]
        sizes = {t.shape[d] for t, d in mapped}
        if len(sizes) != 1:
            raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped dimension, got "
                             f"sizes {sorted(sizes)} for the mapped dimension")
        size = sizes.pop()

        def example(i):
            return list(pytree.tree_unflatten([_op("select", t, d, i) if d is not None and isinstance(t, TensorProxy)
                                               else t for t, d in zip(leaves, dims)], spec))

        if size == 0:  # (a batch of none: f runs on zeros of an example's shape, for its results' shapes)
            zeros = list(pytree.tree_unflatten([
                _op("new_zeros", t, tuple(n for k, n in enumerate(t.shape) if k != d % t.ndim))
                if d is not None and isinstance(t, TensorProxy) else t for t, d in zip(leaves, dims)], spec))
            out = interpret_inner(func, zeros, kwargs)
            return _place(pytree.tree_map(lambda o: _op("expand", _op("unsqueeze", o, 0), (0, *o.shape))
                                          if isinstance(o, TensorProxy) else o, out), out_dims)

        ctx = tracing.current()
        mark = len(ctx.symbols)
        first = example(0)
        with batching.Recording(ctx) as recording:
            out = interpret_inner(func, first, kwargs)
        if any(b.op.random for b in ctx.symbols[mark:]):
            if randomness == "error":
                raise RuntimeError("vmap: called random operation while in randomness error mode. Please either use the "
                                   "'same' or 'different' randomness flags on vmap or perform the randomness operation "
                                   "out of vmap")
            # (unrolled, each example would draw its own numbers: randomness="different", not "same")
            tracing.refuse_inside('torch.vmap(..., randomness="same") of a function that draws random numbers')
        # the body as batched ops where every op it recorded has a batching rule
        examples = [t for t, d in zip(pytree.tree_flatten(tuple(first))[0], dims)
                    if d is not None and isinstance(t, TensorProxy)]
        out_leaves, out_spec = pytree.tree_flatten(out)
        found = batching.batch(recording, mark, examples, mapped, out_leaves, size)
        if found is not None:
            return _place(pytree.tree_unflatten(found, out_spec), out_dims)
        # else unrolled: the first example's trace is kept, the others interpreted
        results = [out] + [interpret_inner(func, example(i), kwargs) for i in range(1, size)]
        return _stack(results, out_dims)

    return batched


def _place(result, out_dims):
    """The batched result (batch dims first) with each batch dim moved to its out_dims."""
    if isinstance(out_dims, (tuple, list)):
        return type(result)(_place(r, d) for r, d in zip(result, out_dims))
    return pytree.tree_map(lambda t: t if out_dims == 0 else _op("movedim", t, 0, out_dims), result)


def _stack(results, out_dims):
    if isinstance(out_dims, (tuple, list)):
        return type(results[0])(_stack([r[k] for r in results], d) for k, d in enumerate(out_dims))
    flat = [pytree.tree_flatten(r)[0] for r in results]
    leaves = []
    for j, leaf in enumerate(flat[0]):
        if not isinstance(leaf, TensorProxy):
            tracing.refuse_inside(f"torch.vmap of a function returning a {type(leaf).__name__}")
        leaves.append(_op("stack", tuple(f[j] for f in flat), out_dims))
    return pytree.tree_unflatten(leaves, pytree.tree_flatten(results[0])[1])


# --------------------------------------------------------------------------------------------
# grad and jacobians


def _argnums(argnums, args):
    """[(argument index, its tensors, its pytree spec)] of the arguments differentiated."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    result = []
    for i in nums:
        leaves, spec = pytree.tree_flatten(args[i])
        if not leaves or any(not isinstance(t, TensorProxy) for t in leaves):
            tracing.refuse_inside(f"torch.func differentiation with respect to a {type(args[i]).__name__} that is not "
                                  f"a tensor or a structure of tensors (argument {i})")
        result.append((i, leaves, spec))
    return result


class _Recorded:
    """f run in the trace, with what is needed to record VJPs of its ops for a given cotangent."""

    def __init__(self, func, args, nums, has_aux):
        ctx = tracing.current()
        if ctx is None:
            tracing.refuse_inside("torch.func transforms outside a trace")
        self.ctx, self.nums, self.args = ctx, nums, args
        start = len(ctx.symbols)
        with torch.enable_grad():
            out = interpret_inner(func, args)
        self.aux = None
        if has_aux:
            if not isinstance(out, tuple) or len(out) != 2:
                raise RuntimeError("grad_and_value(f)(*args): output of function f should be a tuple: (output, aux) "
                                   "if has_aux is True")
            out, self.aux = out
        if not isinstance(out, TensorProxy):
            tracing.refuse_inside(f"torch.func differentiation of a function returning a {type(out).__name__}")
        self.out = out
        self.symbols = ctx.symbols[start:]
        self.needs = needing_grad(self.symbols, {t.name for _, leaves, _ in nums for t in leaves})
        use_training_forms(self.symbols, self.needs, ctx.new_name)
        ctx.symbols[start:] = self.symbols

    def vjp(self, cotangent):
        """The gradients of the arguments nums for the output's cotangent."""
        grads = {self.out.name: cotangent} if self.out.name in self.needs else {}
        backpropagate(self.symbols, self.needs, grads, forward_proxies(), decompose=True)
        return [pytree.tree_unflatten([_op("zeros_like", t) if grads.get(t.name) is None else grads[t.name]
                                       for t in leaves], spec) for _, leaves, spec in self.nums]


def grad_and_value(func, argnums=0, has_aux=False):
    def run(*args, **kwargs):
        if kwargs:
            args_func = functools.partial(func, **kwargs)
        else:
            args_func = func
        nums = _argnums(argnums, args)
        rec = _Recorded(args_func, args, nums, has_aux)
        if rec.out.numel() != 1:
            raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got tensor "
                               f"with {rec.out.ndim} dims. Maybe you wanted to use the vjp or jacrev APIs instead?")
        grads = rec.vjp(_op("ones_like", rec.out))
        g = grads[0] if isinstance(argnums, int) else tuple(grads)
        return (g, (rec.out, rec.aux)) if has_aux else (g, rec.out)

    return run


def grad(func, argnums=0, has_aux=False):
    inner = grad_and_value(func, argnums, has_aux)

    def run(*args, **kwargs):
        g, value = inner(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return run


def vjp(func, *primals, has_aux=False):
    rec = _Recorded(func, primals, _argnums(tuple(range(len(primals))), primals), has_aux)

    def vjp_fn(cotangent):
        return tuple(rec.vjp(cotangent))

    return (rec.out, vjp_fn, rec.aux) if has_aux else (rec.out, vjp_fn)


def _refused(name):
    def refused(*args, **kwargs):
        tracing.refuse_inside(f"torch.func.{name}")
    return refused


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    if has_aux:
        tracing.refuse_inside("torch.func.jacrev/jacfwd with has_aux=True")

    def run(*args):
        nums = _argnums(argnums, args)
        rec = _Recorded(func, args, nums, False)
        n = rec.out.numel()
        eye = fallback.call(torch.eye, n, dtype=rec.out.dtype, device=rec.out.device)
        rows = [rec.vjp(_op("reshape", _op("select", eye, 0, i), tuple(rec.out.shape))) for i in range(n)]
        jacs = []
        for k, (_, leaves, spec) in enumerate(nums):
            per_leaf = [pytree.tree_flatten(r[k])[0] for r in rows]
            jacs.append(pytree.tree_unflatten(
                [_op("reshape", _op("stack", tuple(r[j] for r in per_leaf), 0), (*rec.out.shape, *t.shape))
                 for j, t in enumerate(leaves)], spec))
        return jacs[0] if isinstance(argnums, int) else tuple(jacs)

    return run


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    return jacrev(func, argnums, has_aux=has_aux)


def hessian(func, argnums=0):
    return jacrev(jacrev(func, argnums), argnums)


# what the interpreter's lookup replaces (torch.vmap is torch.func.vmap)
REPLACEMENTS = {torch.vmap: vmap, torch.func.vmap: vmap, torch.func.grad: grad,
                torch.func.grad_and_value: grad_and_value, torch.func.jacrev: jacrev, torch.func.jacfwd: jacfwd,
                torch.func.hessian: hessian, torch.func.functional_call: functional_call, torch.func.vjp: vjp,
                torch.func.jvp: _refused("jvp"), torch.func.linearize: _refused("linearize")}
# transforms made before the call (`fast = torch.vmap(f)` at import time) reach torch's
# implementations: those too
_IMPLS = (("torch._functorch.vmap", "vmap_impl",
           lambda func, in_dims, out_dims, randomness, chunk_size, *args, **kwargs:
           vmap(func, in_dims, out_dims, randomness)(*args, **kwargs)),
          ("torch._functorch.eager_transforms", "grad_impl",
           lambda func, argnums, has_aux, args, kwargs: grad(func, argnums, has_aux)(*args, **kwargs)),
          ("torch._functorch.eager_transforms", "grad_and_value_impl",
           lambda func, argnums, has_aux, args, kwargs: grad_and_value(func, argnums, has_aux)(*args, **kwargs)))
for _module, _name, _replacement in _IMPLS:
    _impl = getattr(importlib.import_module(_module), _name, None)
    if _impl is not None:
        REPLACEMENTS[_impl] = _replacement
