"""torch.func inside jitted functions (thunder/runtime/torch_func.py) against eager: values, and
grads where the outer function is differentiated."""
import pytest
import torch
from torch.func import functional_call, grad, grad_and_value, hessian, jacfwd, jacrev, vjp, vmap
from torch.utils._pytree import tree_flatten

import thunder

_g = torch.Generator().manual_seed(0)
X, W = torch.randn(3, 4, generator=_g), torch.randn(4, 2, generator=_g)
LIN = torch.nn.Linear(4, 3)
PARAMS = {k: v.detach().clone() for k, v in LIN.named_parameters()}


def _loss(r):
    return (r.sin() * r).sum()


def _per_sample_loss(p, r):
    return functional_call(LIN, p, (r,)).pow(2).sum()


_PREMADE = vmap(grad(_loss))  # (made before the jitted call: reaches torch's implementations)

CASES = {
    "premade_transforms": (lambda x: _PREMADE(x), (X,)),
    "functional_call": (lambda p, x: functional_call(LIN, p, (x,)), (PARAMS, X)),
    "vmap": (lambda x: torch.vmap(lambda r: r.sin() @ W)(x), (X,)),
    "vmap_in_dims": (lambda x, w: vmap(lambda r, v: (r * v).sum(), in_dims=(1, None))(x, w[:3, 0]), (X, W)),
    "vmap_tuple_out": (lambda x: vmap(lambda r: (r.cos(), r.sum()), out_dims=(1, 0))(x), (X,)),
    "grad": (lambda x: grad(_loss)(x), (X,)),
    "grad_has_aux": (lambda x: grad(lambda r: (_loss(r), r.mean()), has_aux=True)(x), (X,)),
    "grad_and_value": (lambda x, w: grad_and_value(lambda r, v: (r @ v).tanh().sum(), argnums=(0, 1))(x, w), (X, W)),
    "jacrev": (lambda x: jacrev(lambda r: r.sin() @ W)(x), (X,)),
    "jacfwd": (lambda x: jacfwd(lambda r: r.exp().cumsum(0))(x[0]), (X,)),
    "hessian": (lambda x: hessian(_loss)(x[0]), (X,)),
    "vjp": (lambda x: vjp(lambda r: r.sin() @ W, x)[1](torch.ones(3, 2))[0], (X,)),
    "per_sample_grads": (lambda p, x: vmap(grad(_per_sample_loss), in_dims=(None, 0))(p, x), (PARAMS, X)),
    # in_dims as a prefix of the arguments' structure: per part of a tuple argument (torch's
    # associative_scan vmaps its combine function so)
    "vmap_nested_in_dims": (lambda x, w: vmap(lambda p, v: p[0].sin() * p[1] + v.sum(), in_dims=((0, 1), None))(
        (x, x.t()), w), (X, W)),
    "vmap_empty_batch": (lambda x: vmap(lambda r: (r.exp() @ W, r.sum()))(x[:0]), (X,)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_torch_func_values_as_eager(name):
    fn, args = CASES[name]
    got, expected = thunder.jit(fn)(*args), fn(*args)
    got, expected = tree_flatten(got)[0], tree_flatten(expected)[0]
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)


def _outputs_and_grads(f, args):
    """f's flat outputs on fresh leaves copied from args (tensors, dicts of tensors), and the
    grads of those leaves from the sum of the outputs' squares."""
    ts = [t.detach().clone().requires_grad_() for t in tree_flatten(args)[0]]
    it = iter(ts)
    out = tree_flatten(f(*[{k: next(it) for k in a} if isinstance(a, dict) else next(it) for a in args]))[0]
    sum(o.float().pow(2).sum() for o in out).backward()
    return out, [t.grad for t in ts]


@pytest.mark.parametrize("name", ["functional_call", "vmap", "grad", "jacrev", "per_sample_grads"])
def test_torch_func_gradients_of_the_outer_function(name):
    fn, args = CASES[name]
    results = [_outputs_and_grads(f, args)[1] for f in (thunder.jit(fn), fn)]
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b)


def test_torch_func_refusals_name_the_construct():
    with pytest.raises(NotImplementedError, match=r"torch\.func\.jvp at \S+ inside a jitted function"):
        thunder.jit(lambda x: torch.func.jvp(torch.sin, (x,), (x,)))(X)
    with pytest.raises(NotImplementedError, match='randomness="different"'):
        thunder.jit(lambda x: vmap(torch.sin, randomness="different")(x))(X)


# vmap as batched ops (runtime/batching.py): one copy of the body whatever the batch size
B64 = torch.randn(64, 5, 4, generator=_g)
V4 = torch.randn(4, generator=_g)


def _attention_like(r, w):  # elementwise, matmul, reductions, softmax
    s = (r @ w).tanh() * 0.5 + 1
    p = torch.softmax(s @ s.t(), -1)
    return (p @ s).sum(0) / s.abs().amax() + s.mean(-1).log_softmax(0).sum()


BATCHED = {
    "attention_like": (lambda x, w: vmap(_attention_like, in_dims=(0, None))(x, w), (B64, W)),
    "in_out_dims": (lambda x, w: vmap(lambda r: (r @ w).exp().sum(-1, keepdim=True), in_dims=2, out_dims=1)(
        x.permute(1, 2, 0)), (B64, W)),
    "vectors": (lambda x, v: vmap(lambda r, u: (r @ u, u @ r.t() @ r, u @ u, (r.t() @ r) @ u))(x, v.expand(64, 4)), (B64, V4)),
    "per_sample_grads": (lambda p, x: vmap(grad(_per_sample_loss), in_dims=(None, 0))(p, x[:, 0]), (PARAMS, B64)),
    "nested": (lambda x: vmap(vmap(lambda r: (r.sin() * r).sum()))(x), (B64,)),
    "indexing_shapes": (lambda x: vmap(lambda r: (r[:1, :2].expand(3, 2) * r.new_ones(2) + r[:3, 2:]).flatten()
                                       .unsqueeze(0).permute(1, 0).squeeze() @ r.reshape(-1, 2)[:6])(x), (B64,)),
}


@pytest.mark.parametrize("executors", [None, ["torch"]], ids=["fused", "unfused"])
@pytest.mark.parametrize("name", list(BATCHED))
def test_vmap_traces_one_batched_body_values_and_grads_as_eager(name, executors):
    fn, args = BATCHED[name]
    jfn = thunder.jit(fn, executors=executors)
    (out, grads), (exp, exp_grads) = _outputs_and_grads(jfn, args), _outputs_and_grads(fn, args)
    for a, b in zip(out + grads, exp + exp_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    first = str(thunder.last_traces(jfn)[0])
    assert "select" not in first  # (unrolling selects each example: 64 copies of the body)
    key = {"attention_like": "tanh", "per_sample_grads": "linear", "indexing_shapes": "expand",
           "nested": "sin"}.get(name, "matmul")
    assert 0 < first.count(key) <= 6  # (the body's ops once, not once per example)


def test_vmap_of_an_op_without_a_batching_rule_unrolls():
    fn = lambda x: vmap(lambda r: torch.cumsum(r, 0).sin())(x)  # noqa: E731
    jfn = thunder.jit(fn)
    torch.testing.assert_close(jfn(X), fn(X))
    assert str(thunder.last_traces(jfn)[0]).count("cumsum") == X.shape[0]


@pytest.mark.parametrize("body", [lambda x: x + torch.randn(3), lambda x: torch.nn.functional.dropout(x, 0.5)],
                         ids=["randn", "dropout"])
def test_vmap_of_random_ops_raises_as_eager(body):
    # eager's default randomness="error" refuses random ops inside vmap; "same" (one draw for the
    # whole batch) is refused by name rather than unrolled into a draw per example
    x = torch.ones(4, 3)
    message = "vmap: called random operation while in randomness error mode"
    with pytest.raises(RuntimeError, match=message):
        torch.vmap(body)(x)
    with pytest.raises(RuntimeError, match=message):
        thunder.jit(lambda x: torch.vmap(body)(x))(x)
    with pytest.raises(NotImplementedError, match='randomness="same"'):
        thunder.jit(lambda x: torch.vmap(body, randomness="same")(x))(x)


def _combine(left, right):  # the linear recurrence h = a * h + b as an associative combine
    return left[0] * right[0], right[0] * left[1] + right[1]


def test_torch_associative_scan_generic_values_and_grads_as_eager():
    """torch's associative_scan (transformers' Mamba takes it where torch.compiler.is_compiling(),
    as inside thunder.jit) checks `any(not isinstance(x, torch.Tensor) for x in leaves)` in a
    generator expression of torch's own module: generator expressions there are interpreted, so
    they see proxies as tensors (torch's generator functions, Module.parameters(), run natively),
    then vmaps its combine function with in_dims per part of a tuple, down to empty batches."""
    from torch._higher_order_ops.associative_scan import associative_scan

    def fn(a, b):
        return associative_scan(_combine, (a, b), dim=2, combine_mode="generic")[1]

    for steps in (1, 5, 8):
        g = torch.Generator().manual_seed(steps)
        args = (torch.rand(2, 3, steps, 4, generator=g), torch.randn(2, 3, steps, 4, generator=g))
        (out, grads), (exp, exp_grads) = _outputs_and_grads(thunder.jit(fn), args), _outputs_and_grads(fn, args)
        for a, b in zip(out + grads, exp + exp_grads, strict=True):
            torch.testing.assert_close(a, b)
