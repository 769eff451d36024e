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


def _grads_equal(fn, args):
    xs = [a.clone().requires_grad_() for a in args]
    ys = [a.clone().requires_grad_() for a in args]
    out = thunder.jit(fn)(*xs)
    exp = fn(*ys)
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


def test_a_fallback_call_beyond_its_groups_is_refused_naming_the_call():
    # (torch calls without a registry entry take at most MAX_LIST operand types: docs/sharp_edges.md)
    xs = [r(i + 1) for i in range(MAX_LIST + 8)]
    with pytest.raises(NotImplementedError, match=f"torch._foreach_mul of a list of {len(xs)} tensors"):
        thunder.jit(lambda *xs: torch._foreach_mul(xs, 2))(*xs)
