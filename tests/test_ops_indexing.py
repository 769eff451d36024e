"""Indexing ops (thunder/ops/indexing.py) against eager: forward traced and decomposed (check),
gradients through thunder.jit in float64, in-place variants, eager's exception types."""
import pytest
import torch

import thunder
from op_harness import check, trace_module
from thunder.ops import indexing as I
from thunder.ops import registry

torch.manual_seed(0)


def r(*shape, dtype=torch.float32):
    return (torch.randn(shape) * 4).to(dtype)


def mask(*shape):
    return torch.rand(shape) > 0.5


def idx(*values):
    return torch.tensor(values, dtype=torch.int64)


def test_registered():
    for fn, op in [(torch.masked_fill, I.masked_fill), (torch.Tensor.masked_fill, I.masked_fill),
                   (torch.index_select, I.index_select), (torch.gather, I.gather), (torch.Tensor.gather, I.gather),
                   (torch.scatter_add, I.scatter_add), (torch.index_put, I.index_put),
                   (torch.Tensor.index_put, I.index_put)]:
        assert registry.lookup_callable(fn) is op
    for m in ("masked_fill", "index_select", "gather", "scatter_add", "index_put"):
        assert registry.METHODS[m].name == m


GATHER_INDEX = torch.tensor([[0, 3], [1, 1], [2, 0]])

FORWARD = {
    # masked_fill: numbers, 0-d tensors, broadcasting of mask and input, dtypes
    "masked_fill": (lambda a, m: a.masked_fill(m, 0.5), r(3, 4), mask(3, 4)),
    "masked_fill_fn": (lambda a, m: torch.masked_fill(a, m, -2.0), r(3, 4), mask(3, 4)),
    "masked_fill_bcast_mask": (lambda a, m: a.masked_fill(m, 1.0), r(2, 3, 4), mask(4)),
    "masked_fill_bcast_both": (lambda a, m: torch.masked_fill(a, m, 3.0), r(4), mask(3, 1)),
    "masked_fill_tensor_value": (lambda a, m, v: a.masked_fill(m, v), r(3, 4), mask(3, 1), torch.tensor(7.0)),
    "masked_fill_f64_value": (lambda a, m, v: a.masked_fill(m, v), r(3, 4), mask(3, 4),
                              torch.tensor(2.5, dtype=torch.float64)),
    "masked_fill_int": (lambda a, m: a.masked_fill(m, 1.7), r(3, 4, dtype=torch.int64), mask(3, 4)),
    "masked_fill_int_neg": (lambda a, m: a.masked_fill(m, -1.7), r(3, 4, dtype=torch.int32), mask(3, 4)),
    "masked_fill_bool": (lambda a, m: a.masked_fill(m, 0.5), mask(3, 4), mask(3, 4)),
    "masked_fill_bool_value": (lambda a, m: a.masked_fill(m, True), r(3, 4), mask(3, 4)),
    "masked_fill_f16_inf": (lambda a, m: a.masked_fill(m, float("-inf")), r(2, 5, dtype=torch.float16), mask(2, 5)),
    "masked_fill_0d": (lambda a, m: a.masked_fill(m, 2.0), r(), torch.tensor(True)),
    "masked_fill_empty": (lambda a, m: a.masked_fill(m, 2.0), r(0, 3), mask(0, 3)),
    # index_select: dims (negative), int32/int64, repeats, 0-d index
    "index_select": (lambda a, i: torch.index_select(a, 0, i), r(4, 3), idx(3, 0, 3)),
    "index_select_method": (lambda a, i: a.index_select(1, i), r(4, 3), idx(2, 0)),
    "index_select_negative_dim": (lambda a, i: a.index_select(-1, i), r(2, 4, 3), idx(1, 1, 0, 2)),
    "index_select_int32": (lambda a, i: a.index_select(1, i), r(2, 4, 3), idx(3, 0).int()),
    "index_select_0d_index": (lambda a, i: a.index_select(0, i), r(4, 3), torch.tensor(2)),
    "index_select_int_input": (lambda a, i: a.index_select(0, i), r(4, dtype=torch.int64), idx(1, 2)),
    "index_select_empty": (lambda a, i: a.index_select(0, i), r(4, 2), idx()),
    # gather, scatter_add
    "gather": (lambda a, i: torch.gather(a, 1, i), r(3, 4), GATHER_INDEX),
    "gather_dim0": (lambda a, i: a.gather(0, i), r(4, 3), GATHER_INDEX),
    "gather_negative_dim": (lambda a, i: a.gather(-1, i), r(3, 4), GATHER_INDEX),
    "gather_smaller_index": (lambda a, i: a.gather(0, i), r(5, 6), torch.tensor([[4, 0], [2, 2]])),
    "gather_3d": (lambda a, i: a.gather(1, i), r(2, 3, 4), torch.randint(0, 3, (2, 5, 3))),
    "gather_int32": (lambda a, i: a.gather(1, i), r(3, 4, dtype=torch.int64), GATHER_INDEX.int()),
    "gather_1d": (lambda a, i: a.gather(0, i), r(6), idx(5, 0, 0, 2)),
    "scatter_add": (lambda a, i, s: torch.scatter_add(a, 1, i, s), r(3, 4), GATHER_INDEX, r(3, 2)),
    "scatter_add_dup": (lambda a, i, s: a.scatter_add(0, i, s), r(3, 4), torch.tensor([[0, 0], [0, 1]]), r(2, 2)),
    "scatter_add_big_src": (lambda a, i, s: a.scatter_add(1, i, s), r(3, 4), GATHER_INDEX, r(3, 5)),
    "scatter_add_int": (lambda a, i, s: a.scatter_add(1, i, s), r(3, 4, dtype=torch.int64), GATHER_INDEX,
                        r(3, 2, dtype=torch.int64)),
    # index_put: one or more index tensors (broadcast), negative indices, accumulate, int32
    "index_put": (lambda a, i, v: torch.index_put(a, (i,), v), r(4, 3), idx(2, 0), r(2, 3)),
    "index_put_bcast_values": (lambda a, i, v: torch.index_put(a, (i,), v), r(4, 3), idx(2, -1), r(3)),
    "index_put_scalar_value": (lambda a, i, v: a.index_put((i,), v), r(4, 3), idx(1), torch.tensor(9.0)),
    "index_put_two": (lambda a, i, j, v: a.index_put((i, j), v), r(4, 3), idx(0, 3, -2), idx(2, 0, 1), r(3)),
    "index_put_bcast_indices": (lambda a, i, j, v: a.index_put([i, j], v), r(4, 3, 2), idx(0, 3)[:, None],
                                idx(2, 0, 1), r(2, 3, 2)),
    "index_put_accumulate": (lambda a, i, v: torch.index_put(a, (i,), v, True), r(4, 3), idx(1, 1, 3), r(3, 3)),
    "index_put_accumulate_kw": (lambda a, i, v: a.index_put((i,), v, accumulate=True), r(5), idx(0, 0, -1), r(3)),
    "index_put_int32": (lambda a, i, v: a.index_put((i,), v), r(4, 3, dtype=torch.int64), idx(3).int(),
                        r(1, 3, dtype=torch.int64)),
}


@pytest.mark.parametrize("name", FORWARD)
def test_forward(name):
    fn, *args = FORWARD[name]
    module = check(fn, *args)
    for n in ("masked_fill", "index_select", "gather", "scatter_add", "index_put"):
        if name.startswith(n):
            assert f'"ltorch.{n}"' in str(module)


def test_jit_forward():
    def f(a, m, i, g):
        return a.masked_fill(m, 0.0).index_select(0, i).gather(1, g).sum() + torch.index_put(a, (i,), a[0])

    a, m, i = r(4, 4), mask(4, 4), idx(3, 1, 1, 0)
    g = torch.randint(0, 4, (4, 2))
    torch.testing.assert_close(thunder.jit(f)(a, m, i, g), f(a, m, i, g))


def test_inplace_on_intermediate():
    def f(a, m, i, v, j):
        b = a * 2
        b.masked_fill_(m, 0.0)
        c = a + 1
        c.index_put_((i,), v, accumulate=True)
        d = a - 1
        d.scatter_add_(1, j, a[:, :1])
        return b, c, d

    args = r(3, 4), mask(3, 4), idx(0, 2, 0), r(), torch.zeros(3, 1, dtype=torch.int64)
    for got, expected in zip(thunder.jit(f)(*args), f(*args)):
        torch.testing.assert_close(got, expected)
    check(f, *args)


def test_inplace_on_input_is_copied_back():
    a, m = r(3, 4), mask(3, 4)
    e = a.clone()
    e.masked_fill_(m, 0.0)
    thunder.jit(lambda x, m: x.masked_fill_(m, 0.0))(a, m)
    torch.testing.assert_close(a, e)


def _grad_check(fn, *args):
    """Outputs and gradients of thunder.jit(fn) equal eager's (float64, random cotangent)."""
    expected = fn(*args)
    ct = torch.randn_like(expected)
    diff = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    ge = torch.autograd.grad(expected, diff, ct)
    out = thunder.jit(fn)(*args)
    torch.testing.assert_close(out, expected)
    go = torch.autograd.grad(out, diff, ct)
    for g, e in zip(go, ge):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e)


def d(*shape):
    return torch.randn(shape, dtype=torch.float64, requires_grad=True)


GRADS = {
    "masked_fill": (lambda a, m: a.masked_fill(m, 0.5) * a, d(3, 4), mask(3, 4)),
    "masked_fill_bcast_input": (lambda a, m: torch.masked_fill(a, m, 2.0), d(4), mask(3, 4)),
    "masked_fill_tensor_value": (lambda a, m, v: a.masked_fill(m, v), d(3, 4), mask(3, 1), d()),
    "masked_fill_value_only": (lambda a, m, v: a.masked_fill(m, v), torch.randn(3, 4, dtype=torch.float64),
                               mask(2, 3, 4), d()),
    "index_select": (lambda a, i: a.index_select(0, i), d(4, 3), idx(3, 0, 3, 3)),
    "index_select_negative_dim": (lambda a, i: torch.index_select(a, -1, i), d(2, 4, 3), idx(1, 1, 0)),
    "index_select_0d_index": (lambda a, i: a.index_select(1, i), d(4, 3), torch.tensor(2)),
    "gather": (lambda a, i: a.gather(1, i), d(3, 4), GATHER_INDEX),
    "gather_dup": (lambda a, i: torch.gather(a, 0, i), d(3, 4), torch.tensor([[0, 0], [0, 1], [2, 0]])),
    "gather_3d": (lambda a, i: a.gather(-2, i), d(2, 3, 4), torch.randint(0, 3, (2, 5, 3))),
    "scatter_add": (lambda a, i, s: a.scatter_add(1, i, s), d(3, 4), GATHER_INDEX, d(3, 2)),
    "index_put": (lambda a, i, v: torch.index_put(a, (i,), v), d(4, 3), idx(2, 0), d(2, 3)),
    "index_put_bcast": (lambda a, i, v: a.index_put((i,), v), d(4, 3), idx(2, -1), d(3)),
    "index_put_two": (lambda a, i, j, v: a.index_put((i, j), v), d(4, 3), idx(0, 3, -2), idx(2, 0, 1), d(1)),
    "index_put_accumulate": (lambda a, i, v: a.index_put((i,), v, accumulate=True), d(4, 3), idx(1, 1, 3), d(3, 3)),
}


@pytest.mark.parametrize("name", GRADS)
def test_grad(name):
    fn, *args = GRADS[name]
    _grad_check(fn, *args)


def test_grad_of_inplace_masked_fill():
    def f(a, m):
        b = a * 3
        b.masked_fill_(m, 0.0)
        return b * a

    _grad_check(f, d(3, 4), mask(3, 4))


Z = torch.zeros(2, 2, dtype=torch.int64)

ERRORS = {
    "masked_fill_float_mask": (lambda a: a.masked_fill(a.float(), 0.0), r(3)),
    "masked_fill_uint8_mask": (lambda a: a.masked_fill((a > 0).to(torch.uint8), 0.0), r(3)),
    "masked_fill_1d_value": (lambda a: a.masked_fill(a > 0, a[:1]), r(3)),
    "masked_fill_shapes": (lambda a, m: a.masked_fill(m, 0.0), r(3), mask(2)),
    "masked_fill_inplace_bcast": (lambda a, m: (a * 1).masked_fill_(m, 0.0), r(3), mask(2, 3)),
    "index_select_dim": (lambda a, i: a.index_select(2, i), r(3, 4), idx(0)),
    "index_select_float_index": (lambda a, i: a.index_select(0, i.float()), r(3, 4), idx(0)),
    "index_select_2d_index": (lambda a, i: a.index_select(0, i[None]), r(3, 4), idx(0)),
    "gather_ndim": (lambda a, i: a.gather(1, i), r(3, 4), idx(0, 1)),
    "gather_size": (lambda a, i: a.gather(0, i), r(3, 4), torch.zeros(4, 5, dtype=torch.int64)),
    "gather_float_index": (lambda a, i: a.gather(0, i.float()), r(3, 4), Z),
    "gather_dim": (lambda a, i: a.gather(3, i), r(3, 4), Z),
    "scatter_add_dtype": (lambda a, i, s: a.scatter_add(0, i, s.double()), r(3, 4), Z, r(2, 2)),
    "index_put_dtype": (lambda a, i, v: torch.index_put(a, (i,), v.double()), r(3, 4), idx(0), r()),
    "index_put_float_index": (lambda a, i, v: torch.index_put(a, (i.float(),), v), r(3, 4), idx(0), r()),
    "index_put_too_many": (lambda a, i, v: torch.index_put(a, (i, i, i), v), r(3, 4), idx(0), r()),
    "index_put_values_shape": (lambda a, i, v: torch.index_put(a, (i,), v), r(3, 4), idx(0, 1), r(3)),
    "index_put_none": (lambda a, i, v: torch.index_put(a, (i, None), v), r(3, 4), idx(0), r()),
    "index_put_number_values": (lambda a, i: torch.index_put(a, (i,), 1.0), r(3, 4), idx(0)),
}


@pytest.mark.parametrize("name", ERRORS)
def test_errors_as_eager(name):
    fn, *args = ERRORS[name]
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(eager.type):
        thunder.jit(fn)(*args)


def test_index_put_mask_runs_as_torch():
    # the registered op refuses boolean masks; the fallback records torch.index_put itself (its
    # result shape does not depend on the mask's values)
    a, v = r(3, 4), r()
    fn = lambda a, v: torch.index_put(a, (a > 0,), v)  # noqa: E731
    jf = thunder.jit(fn)
    torch.testing.assert_close(jf(a, v), fn(a, v))
    assert 'callable = "torch.index_put"' in thunder.last_traces(jf)[0].to_mlir()


def test_decompositions_use_prims():
    from thunder.dialects.definitions import context
    from thunder.dialects.mlir import ir
    from thunder.lowering.decompose import decompose_module

    for fn, args in [(lambda a, m: a.masked_fill(m, 1.0), (r(3), mask(3))),
                     (lambda a, i: a.index_select(0, i), (r(3), idx(1))),
                     (lambda a, i: a.gather(0, i), (r(3), idx(1))),
                     (lambda a, i: a.index_put((i,), a[:1]), (r(3), idx(1)))]:
        module = trace_module(fn, *args)
        with context():
            m = ir.Module.parse(str(module))
            decompose_module(m.operation)
            assert '"ltorch.' not in str(m)


# --------------------------------------------------------------------------------------------
# x[key] / x[key] = v with tensors, lists and masks in the key (advanced indexing)

X = r(4, 5, 6)
IX, JX = idx(0, 3, -1, 2), idx(1, 4)[:, None]


def setting(key, value):
    """fn(x, *tensors): a copy of x with copy[key] = value (tensors fill the key's and value's
    callables)."""
    def fn(x, *ts):
        y = x * 1
        k = key(*ts) if callable(key) else key
        y[k] = value(*ts) if callable(value) else value
        return y

    return fn


GETITEM = {
    "one": (lambda a, i: a[i], X, IX),
    "two": (lambda a, i: a[i, i], X, IX),
    "broadcast": (lambda a, i, j: a[j, i[:3]], X, IX, idx(1, 2)[:, None]),
    "after_slice": (lambda a, i: a[:, i], X, IX[:3]),
    "separated": (lambda a, i: a[i, :, i], X, IX[:3]),
    "int_then_tensor": (lambda a, i: a[0, :, i], X, IX),
    "none_around": (lambda a, i, j: a[None, i, None, j], X, IX[:2], JX),
    "ellipsis": (lambda a, i: (a[..., i], a[i, ..., i]), X, IX),
    "python_bool": (lambda a, i, j: (a[i, True], a[:, j, True, i[:2]]), X, IX, JX),
    "arange_pool": (lambda a, n, i: a[n, i], r(4, 5), torch.arange(4), idx(4, 0, 1, 2)),
    "int32_0d": (lambda a, i, k, n: (a[i.int()], a[k], a[:, n, 1:]), X, IX, torch.tensor(2), torch.tensor(-2)),
    "list": (lambda a: (a[[0, 2, -1]], a[[0, 2], [1, 3]], a[[[0, 2], [1, 3]],]), X),
    "list_floats_truncate": (lambda a: a[[1.7, 0]], X),
    "bool_list": (lambda a: (a[[True, False, True, True]], a[:, [False] * 4 + [True]], a[[True, False, True, True], 1:3]),
                  X),
    "bool_list_2d": (lambda a: a[:, [[True, False, True, False, False, True]] * 5],
                     X),
    "step_slice": (lambda a, i: a[::2, i[:2]], X, IX),
    "empty_index": (lambda a, i: a[i], X, idx()),
    "empty_input": (lambda a, i: a[:, i], r(0, 3), idx(2, 0)),
    "noncontig": (lambda a, i: a[i, 1:], r(6, 4).t(), IX[:3]),
    "ints_bools": (lambda a, b, i: (a[i], b[i]), torch.arange(24).reshape(4, 6), torch.rand(4, 2) > 0.5, IX),
    "f16_bf16": (lambda a, b, i: (a[:, i], b[i, ::2]), r(3, 5, dtype=torch.float16), r(5, 4, dtype=torch.bfloat16),
                 idx(1, 4, 0)),
    "method_and_arith": (lambda a, i: a.__getitem__((i, 1)) * 2 + a[i].sum(1), X, IX),
}


@pytest.mark.parametrize("name", GETITEM)
def test_advanced_getitem(name):
    fn, *args = GETITEM[name]
    module = check(fn, *args)
    assert '"ltorch.index"' in str(module)


SETITEM = {
    "number": (setting(lambda i: i[:3], 0.5), X, IX),
    "tensor_value": (setting(lambda i, v: (i[:3], slice(None), 2), lambda i, v: v), X, IX, r(3, 5)),
    "broadcast_value": (setting(lambda i, v: (slice(None), i), lambda i, v: v), X, IX, r(6)),
    "separated": (setting(lambda i, v: (i, slice(None), i), lambda i, v: v), X, IX, r(4, 5)),
    "list": (setting([0, 2], -1.0), X),
    "bool_list": (setting([True, False, True, False], 2.0), X),
    "duplicates": (setting(lambda i, v: i, lambda i, v: v), X, idx(1, 1, 2, 1), torch.arange(4.0)[:, None, None]),
    "mask": (setting(lambda m: m, 0.0), X, torch.rand(4, 5) > 0.5),
    "mask_full_rank": (setting(lambda m: m, -3), torch.arange(24).reshape(4, 6), torch.rand(4, 6) > 0.5),
    "mask_after_slice": (setting(lambda m: (slice(None), m), 1.5), X, torch.rand(5) > 0.5),
    "mask_after_int": (setting(lambda m, v: (1, m), lambda m, v: v), X, torch.rand(5) > 0.5, r(6)),
    "mask_0d_value": (setting(lambda m, v: m, lambda m, v: v), X, torch.rand(4) > 0.5, torch.tensor(7.0, dtype=torch.float64)),
    "mask_of_values": (lambda a: _set_where_positive(a), X),
    "f16": (setting(lambda i: i, 2.5), r(4, 3, dtype=torch.float16), IX[:2]),
}


def _set_where_positive(a):
    y = a.clone()
    y[y > 0] = 0.0
    return y


@pytest.mark.parametrize("name", SETITEM)
def test_advanced_setitem(name):
    fn, *args = SETITEM[name]
    saved = torch.are_deterministic_algorithms_enabled()
    # which duplicate wins is defined only by deterministic algorithms (on CUDA)
    torch.use_deterministic_algorithms(saved or name == "duplicates")
    try:
        check(fn, *args)
    finally:
        torch.use_deterministic_algorithms(saved)


@pytest.mark.parametrize("value", [torch.ones(5, dtype=torch.float64), torch.ones(5, dtype=torch.int64)], ids=str)
def test_masked_setitem_value_dtype(value):
    # eager converts only a one-element CPU value (masked_fill's way); others must have x's dtype
    fn = setting(lambda m, v: m, lambda m, v: v)
    x, m = torch.randn(4, 5), torch.tensor([True, False, True, True])
    with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
        fn(x, m, value)
    with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
        thunder.jit(fn)(x, m, value)


def test_setitem_through_views_and_inputs():
    def f(a, i, m):
        b = a * 2
        b[0][i] = 1.0  # through a view of an intermediate
        a[m] = -1.0  # an input, copied back to the caller
        return b

    args = r(3, 4), idx(3, 0), torch.rand(3, 4) > 0.5
    a0 = args[0].clone()
    out = thunder.jit(f)(*args)
    expected_a = a0.clone()
    expected = f(expected_a, *args[1:])
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(args[0], expected_a)


ADV_GRADS = {
    "getitem": (lambda a, i: a[i, :, i] * 2, d(4, 5, 6), IX[:3]),
    "getitem_dup_none": (lambda a, i, j: a[None, j, i], d(5, 4), idx(1, 1, 0), idx(2, 2)[:, None]),
    "getitem_list_bool": (lambda a: a[[0, 0, 2]] + a[[True, True, False]][:1, :1], d(3, 4)),
    "setitem_index": (lambda a, i, v: _set(a, (slice(None), i), v), d(3, 4), idx(2, 0), d(3, 2)),
    "setitem_dup": (lambda a, i, v: _set(a, i, v), d(4, 2), idx(1, 1, 3), d(2)),
    "setitem_mask": (lambda a, m, v: _set(a, m, v), d(3, 4), mask(3, 4), d()),
    "setitem_mask_row_value": (lambda a, m, v: _set(a, m, v), d(3, 4), mask(3), d(4)),
}


def _set(a, key, v):
    b = a * 1
    b[key] = v
    return b


@pytest.mark.parametrize("name", ADV_GRADS)
def test_advanced_indexing_grad(name):
    fn, *args = ADV_GRADS[name]
    _grad_check(fn, *args)


ADV_ERRORS = {
    "list_out_of_range": (lambda a: a[[0, 5]], r(4, 5)),
    "float_tensor": (lambda a, i: a[i.float()], r(4, 5), IX),
    "short_tensor": (lambda a, i: a[i.short()], r(4, 5), IX),
    "mask_shape_list": (lambda a: a[[True, False]], r(4, 5)),
    "broadcast": (lambda a, i: a[i, i[:3]], r(4, 5), IX),
    "too_many": (lambda a, i: a[0, 0, i], r(4, 5), IX),
    "set_value_shape": (setting(lambda i, v: i, lambda i, v: v), r(4, 5), IX, r(3, 5)),
    "set_mask_shape": (setting(lambda m: m, 0.0), r(4, 5), torch.rand(5, 4) > 0.5),
    "set_uint8_mask_number": (setting(lambda m: m.to(torch.uint8), 1.0), r(4), torch.rand(4) > 0.5),
}


@pytest.mark.parametrize("name", ADV_ERRORS)
def test_advanced_indexing_errors_as_eager(name):
    fn, *args = ADV_ERRORS[name]
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(eager.type):
        thunder.jit(fn)(*args)


def test_data_dependent_masks():
    """x[mask] and a value per masked element have data-dependent shapes: the number of True
    elements is read while tracing (a split, tests/test_data_dependent.py), the rest are ops."""
    for fn, args in ((lambda a: a[a > 0], (r(4, 4),)), (lambda a: _set(a, a > 0, a[a > 0] * 2), (r(4, 4),)),
                     (lambda a, i: a[i, a[0] > 0], (r(4, 4), idx(0))),
                     (lambda a, v: _set(a, a > 0, v[:int((a > 0).sum())]), (r(4), r(4)))):
        torch.testing.assert_close(thunder.jit(fn)(*args), fn(*args))


def test_data_dependent_masks_without_values_name_the_construct():
    from thunder.core import trace as tracing
    from thunder.core.proxies import DataDependentError, TensorProxy
    from thunder.ops import shape

    x = TensorProxy((4, 4), torch.float32, "cpu", name="x")
    m = TensorProxy((4, 4), torch.bool, "cpu", name="m")
    with tracing.tracing(tracing.TraceCtx()), pytest.raises(DataDependentError, match=r"bool mask.*Workaround"):
        shape.getitem(x, m)


def test_index_decomposes_to_take():
    from thunder.dialects.definitions import context
    from thunder.dialects.mlir import ir
    from thunder.lowering.decompose import decompose_module

    module = trace_module(lambda a, i: a[i, 1:, i], X, IX)
    with context():
        m = ir.Module.parse(str(module))
        decompose_module(m.operation)
        text = str(m)
    assert '"thunder.take"' in text and '"ltorch.' not in text
