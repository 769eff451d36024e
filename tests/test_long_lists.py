"""Lists of any length in list-taking and list-returning ops (dialects/lists.py): more runs of
differently typed tensors than an op's variadic groups hold, and lists of 0 and 1 elements,
against eager (values, grads, strides), traced, decomposed and fused (tests/op_harness.py)."""
import pytest
import torch

import thunder
from tests.op_harness import check
from thunder.dialects.definitions import MAX_LIST, MAX_RESULTS


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


N = 40
assert N > MAX_LIST and N > MAX_RESULTS  # (the chains are what these tests reach)
ragged = [r(3, i + 1) for i in range(N)]
sizes = list(range(1, N + 1))


@pytest.mark.parametrize("fn, args", [
    (lambda *xs: torch.cat(xs, 1) * 2, ragged),
    (lambda *xs: torch.cat(xs, -1), ragged),
    # 5 * MAX_LIST + 1 runs: the cat of the parts' cats is itself chained
    (lambda *xs: torch.cat(xs), [r(i % 2 + 1, 2) for i in range(5 * MAX_LIST + 1)]),
    # dtypes alternating: each part's promoted dtype is the list's
    (lambda *xs: torch.cat(xs, 1), [r(2, 3, dtype=torch.float64 if i % 2 else torch.float32) for i in range(N)]),
    (lambda *xs: torch.stack(xs, 1), [r(2, 3, dtype=torch.float64 if i % 2 else torch.float32) for i in range(N)]),
    (lambda *xs: torch.stack(xs, -1) + 1, [r(2, 3, dtype=torch.float64 if i % 2 else torch.float32) for i in range(N)]),
    (lambda x: torch.split(x, sizes, 1), [r(3, sum(sizes))]),
    (lambda x: [p.exp() for p in torch.split(x, sizes)], [r(sum(sizes), 2)]),
    (lambda x: torch.split(x, [1, 2] * (5 * MAX_RESULTS), 1), [r(2, 15 * MAX_RESULTS)]),
    (lambda x: x.unbind(1), [r(3, N)]),
    (lambda x: x.chunk(N, 0), [r(N * 2 + 1, 2)]),
    # 0 and 1 elements
    (lambda x: torch.cat([x]), [r(2, 3)]),
    (lambda x: torch.stack([x], 2), [r(2, 3)]),
    (lambda x: torch.split(x, [3], 1), [r(2, 3)]),
    (lambda x: torch.split(x, 2, 0), [r(0, 3)]),
    (lambda x: x.unbind(0), [r(1, 3)]),
    (lambda x: x.unbind(0), [r(0, 3)]),
    (lambda x: x.chunk(1), [r(2, 3)]),
], ids=["cat", "cat_neg_dim", "cat_nested", "cat_mixed_dtypes", "stack_mixed_dtypes", "stack_neg_dim",
        "split", "split_exp", "split_nested", "unbind", "chunk", "cat_1", "stack_1", "split_1", "split_of_empty",
        "unbind_1", "unbind_0", "chunk_1"])
def test_op_harness(fn, args):
    check(fn, *args)


def _grads_equal(fn, args, executors=None):
    """fn jitted (executors: None, fused; ["torch"], unfused) against eager: values, strides, grads."""
    xs = [a.clone().requires_grad_() for a in args]
    ys = [a.clone().requires_grad_() for a in args]
    jfn = thunder.jit(fn, executors=executors)
    out, exp = jfn(*xs), fn(*ys)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    exps = list(exp) if isinstance(exp, (tuple, list)) else [exp]
    for a, e in zip(outs, exps, strict=True):
        torch.testing.assert_close(a, e)
        assert a.stride() == e.stride()
    cots = [torch.randn_like(e) for e in exps]
    torch.autograd.backward(outs, cots)
    torch.autograd.backward(exps, cots)
    for a, e in zip(xs, ys):
        torch.testing.assert_close(a.grad, e.grad)
    return jfn


def test_cat_of_40_grads():
    _grads_equal(lambda *xs: torch.cat(xs, 1).sin(), ragged)


def test_split_into_40_grads():
    _grads_equal(lambda x: [p * i for i, p in enumerate(torch.split(x, sizes, 1))], [r(3, sum(sizes))])


def test_split_into_40_views_share_storage():
    x = r(3, sum(sizes))
    out = thunder.jit(lambda x: torch.split(x, sizes, 1))(x)
    exp = torch.split(x, sizes, 1)
    for a, e in zip(out, exp, strict=True):
        assert (a.stride(), a.storage_offset()) == (e.stride(), e.storage_offset())
        assert a.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_stack_of_40_grads():
    _grads_equal(lambda *xs: torch.stack(xs), [r(2, 3, dtype=torch.float64 if i % 2 else torch.float32)
                                               for i in range(N)])


def test_cat_of_zero_tensors_raises_as_eager():
    with pytest.raises(Exception) as e:
        torch.cat([])
    with pytest.raises(type(e.value)):
        thunder.jit(lambda x: torch.cat([]))(r(2))


def test_unbind_into_no_pieces():  # (an op with no results: the program calls it, binding nothing)
    x = r(0, 3)
    assert thunder.jit(lambda x: x.unbind(0))(x) == x.unbind(0) == ()


# Any other list-taking or list-returning op packs what its groups do not hold
# (dialects/lists.py pack, split_results): the fallback's torch_call, einsum, an RNN's
# parameters, autograd.Function; through jit (grads, with and without CPU fusion)
EXECUTORS = [None, ["torch"]]  # (None: the default, fused; ["torch"]: unfused)
vectors = [r(i + 1) for i in range(N)]


@pytest.mark.parametrize("executors", EXECUTORS, ids=["fused", "unfused"])
def test_a_fallback_call_of_40_operands_and_results(executors):
    # torch._foreach_clone is a fallback call (no per-tensor op: ops/foreach.py): one
    # ltorch.torch_call of 40 operands, 40 results
    jfn = _grads_equal(lambda *xs: [y * 3 for y in torch._foreach_clone(xs)], vectors, executors)
    text = str(thunder.last_traces(jfn)[0].to_mlir())
    assert text.count('"ltorch.torch_call"') == 1
    assert '"thunder.pack"' in text and '"thunder.unpack"' in text


def test_a_fallback_call_of_160_results_without_grads():  # (a pack of a pack of ...)
    xs = [r(i % 80 + 1, dtype=torch.float64 if i % 2 else torch.float32) for i in range(160)]
    out = thunder.jit(lambda *xs: torch._foreach_add(xs, 1.5))(*xs)
    for a, e in zip(out, torch._foreach_add(xs, 1.5), strict=True):
        torch.testing.assert_close(a, e)
        assert a.dtype == e.dtype


letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
chain_dims = [2 + i % 5 for i in range(N + 1)]
chain_equation = ",".join(letters[i] + letters[i + 1] for i in range(N)) + "->" + letters[0] + letters[N]
chain_operands = [r(chain_dims[i], chain_dims[i + 1]) * 0.5 for i in range(N)]


def test_einsum_of_40_operands_op_harness():
    check(lambda *xs: torch.einsum(chain_equation, *xs), *chain_operands, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("executors", EXECUTORS, ids=["fused", "unfused"])
def test_einsum_of_40_operands_grads(executors):
    jfn = _grads_equal(lambda *xs: torch.einsum(chain_equation, *xs).tanh(), chain_operands, executors)
    assert '"thunder.pack"' in str(thunder.last_traces(jfn)[0].to_mlir())


def test_lstm_parameter_list_of_more_types_than_groups_grads():
    torch.manual_seed(0)
    # (w_ih, w_hh, b_ih, b_hh, w_hr: 3 runs of types a layer, 4 in the first: 37 runs, more
    # than MAX_LIST; 12 layers, not 40, and unfused: the decomposed layers' compile takes seconds)
    lstm = torch.nn.LSTM(3, 4, num_layers=12, proj_size=2)
    x = r(2, 1, 3)
    jfn = thunder.jit(lambda x: lstm(x)[0].sum(), executors=["torch"])
    out = jfn(x)
    assert '"thunder.pack"' in str(thunder.last_traces(jfn)[0].to_mlir())
    grads = torch.autograd.grad(out, list(lstm.parameters()))
    exp_grads = torch.autograd.grad(lstm(x)[0].sum(), list(lstm.parameters()))
    torch.testing.assert_close(out, lstm(x)[0].sum())
    for a, e in zip(grads, exp_grads, strict=True):
        torch.testing.assert_close(a, e)


class Scale(torch.autograd.Function):  # (a backward unlike the forward's derivative: the user's runs)
    @staticmethod
    def forward(ctx, *xs):
        ctx.save_for_backward(*xs)
        return tuple(x * 2 for x in xs)

    @staticmethod
    def backward(ctx, *gs):
        return tuple(g * 3 + x for g, x in zip(gs, ctx.saved_tensors))


@pytest.mark.parametrize("executors", EXECUTORS, ids=["fused", "unfused"])
def test_autograd_function_of_40_inputs_and_outputs(executors):
    jfn = _grads_equal(lambda *xs: Scale.apply(*xs), vectors, executors)
    text = str(thunder.last_traces(jfn)[0].to_mlir())
    assert '"ltorch.autograd_function"' in text and '"thunder.unpack"' in text
