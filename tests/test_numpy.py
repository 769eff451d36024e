"""numpy arrays as arguments of jitted functions (core/ndarray.py) and numpy scalars where torch
takes Python numbers, against eager."""
import numpy as np
import pytest
import torch

import thunder


def arr(*shape, dtype=np.float32):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


CONVERSIONS = {
    "from_numpy": lambda x, a: x + torch.from_numpy(a),
    "as_tensor": lambda x, a: x + torch.as_tensor(a),
    "as_tensor_dtype": lambda x, a: x + torch.as_tensor(a, dtype=torch.float64),
    "asarray": lambda x, a: x * torch.asarray(a),
    "tensor": lambda x, a: x + torch.tensor(a),
    "tensor_dtype": lambda x, a: torch.tensor(a, dtype=torch.int64) + 1,
    "shape": lambda x, a: x * a.shape[1] + a.ndim + len(a),
}


@pytest.mark.parametrize("name", list(CONVERSIONS))
def test_conversions_match_eager(name):
    f, x = CONVERSIONS[name], torch.randn(2, 3)
    out, exp = thunder.jit(f)(x, arr(2, 3)), f(x, arr(2, 3))
    assert out.dtype == exp.dtype
    torch.testing.assert_close(out, exp)


def test_values_are_read_at_call_time_and_arrays_are_guarded_like_tensors():
    f = thunder.jit(lambda a: torch.from_numpy(a) * 2)
    torch.testing.assert_close(f(arr(2, 3)), torch.from_numpy(arr(2, 3)) * 2)
    b = np.full((2, 3), 7, dtype=np.float32)
    torch.testing.assert_close(f(b), torch.full((2, 3), 14.0))  # the same program, the new values
    assert thunder.cache_misses(f) == 1
    for other in (arr(3, 2), arr(2, 3, dtype=np.float64), arr(2, 3, dtype=np.int32)):  # shape, dtype: recompiled
        out = f(other)
        assert out.dtype == torch.from_numpy(other).dtype
        torch.testing.assert_close(out, torch.from_numpy(other) * 2)
    assert thunder.cache_misses(f) == 4


def test_from_numpy_shares_memory_as_in_eager():
    def f(a):
        t = torch.from_numpy(a)
        t.mul_(2)
        return t + 1

    a, b = arr(2, 3), arr(2, 3)
    out, exp = thunder.jit(f)(a), f(b)
    np.testing.assert_array_equal(a, b)  # the in-place update reached the array
    torch.testing.assert_close(out, exp)


def test_as_tensor_result_is_the_arrays_memory():
    a = arr(4)
    t = thunder.jit(lambda a: torch.as_tensor(a))(a)
    t[0] = 100.0
    assert a[0] == 100.0
    c = thunder.jit(lambda a: torch.tensor(a))(a)  # a copy
    c[1] = -1.0
    assert a[1] == 1.0


def test_non_contiguous_and_bool_arrays():
    a = arr(4, 6)[:, ::2]
    out = thunder.jit(lambda a: torch.from_numpy(a).sum(0))(a)
    torch.testing.assert_close(out, torch.from_numpy(a).sum(0))
    m = arr(2, 3) > 2
    x = torch.randn(2, 3)
    torch.testing.assert_close(thunder.jit(lambda x, m: x.masked_fill(torch.from_numpy(m), 0))(x, m),
                               x.masked_fill(torch.from_numpy(m), 0))


def test_numpy_operations_on_an_array_argument_are_refused_clearly():
    for f in (lambda a: a.sum(), lambda a: a + 1):
        with pytest.raises(NotImplementedError, match="torch.from_numpy"):
            thunder.jit(f)(arr(2, 3))


def test_array_with_negative_strides_raises_as_eager():
    a = arr(4)[::-1]
    with pytest.raises(ValueError):
        torch.from_numpy(a)
    with pytest.raises(Exception):  # eager's ValueError, or thunder's clear refusal of an opaque array
        thunder.jit(lambda a: torch.from_numpy(a))(a)


SCALARS = {
    "mul": lambda x: x * np.float32(2.0),
    "radd": lambda x: np.int64(3) + x,
    "add_alpha": lambda x: torch.add(x, x, alpha=np.float64(0.5)),
    "reshape": lambda x: x.reshape(np.int64(3), 2),
    "view": lambda x: x.view(np.int64(2), np.int64(3)),
    "full": lambda x: torch.full((np.int64(2),), np.float32(1.5)) + x[:2],
    "zeros": lambda x: torch.zeros(np.int64(3)) + x[:3],
    "getitem": lambda x: x[np.int64(1)],
    "sum_dim": lambda x: x.reshape(2, 3).sum(dim=np.int64(0)),
    "clamp": lambda x: torch.clamp(x, np.float32(-0.5), np.float32(0.5)),
    "pow": lambda x: x.pow(np.int32(2)),
    "dropout_p0": lambda x: torch.nn.functional.dropout(x, p=np.float64(0.0)),
    "where": lambda x: torch.where(x > 0, x, np.float32(0.25)),
}


@pytest.mark.parametrize("name", list(SCALARS))
def test_numpy_scalars_where_torch_takes_numbers(name):
    f, x = SCALARS[name], torch.randn(6)
    out, exp = thunder.jit(f)(x), f(x)
    assert out.dtype == exp.dtype
    torch.testing.assert_close(out, exp)


def test_numpy_scalar_arguments():
    f = lambda x, s: x * s  # noqa: E731
    x = torch.randn(3)
    for s in (np.float32(2.0), np.float64(-1.5), np.int64(4)):
        out, exp = thunder.jit(f)(x, s), f(x, s)
        assert out.dtype == exp.dtype
        torch.testing.assert_close(out, exp)


def test_a_float_reshape_size_raises_as_eager():
    x = torch.randn(6)
    with pytest.raises(TypeError):
        x.reshape(np.float32(3), 2)
    with pytest.raises(TypeError):
        thunder.jit(lambda x: x.reshape(np.float32(3), 2))(x)


def test_arrays_made_inside_the_function_and_numpy_random_as_a_sharp_edge():
    # (BigBird draws its random attention blocks with np.random and makes tensors of them)
    def fn(x):
        order = np.random.permutation(x.shape[0])
        return x[torch.tensor(order)] + torch.tensor(np.arange(3.0))

    x = torch.randn(4, 3)
    np.random.seed(0)
    expected = fn(x)
    np.random.seed(0)
    torch.testing.assert_close(thunder.jit(fn)(x), expected)  # (the draw of the trace, as Python's random)
    assert torch.tensor(np.arange(3.0)).dtype == torch.float64
    with pytest.raises(thunder.JITSharpEdgeError, match="numpy.random.permutation"):
        thunder.jit(fn, sharp_edges="error")(x)


def _table(n, d):
    """A sinusoidal position table made with numpy (models build these inside forward too)."""
    pos, i = np.arange(n)[:, None], np.arange(d)[None, :]
    angle = pos / np.power(10000, (2 * (i // 2)) / d)
    angle[:, 0::2], angle[:, 1::2] = np.sin(angle[:, 0::2]), np.cos(angle[:, 1::2])
    return angle


@pytest.mark.parametrize("convert", [torch.from_numpy, torch.as_tensor, torch.asarray,
                                     lambda a: torch.as_tensor(a, dtype=torch.float32)])
def test_torch_of_an_array_made_inside_the_function(convert):
    # (torch.from_numpy of such an array was refused: "an argument has no literal form in a trace")
    def fn(x):
        return x + convert(_table(x.shape[1], x.shape[2]))

    x = torch.randn(2, 16, 8)
    out, expected = thunder.jit(fn)(x), fn(x)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected)


class _WithTable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = np.arange(4.0)

    def forward(self, x):
        return x + torch.tensor(self.table) + torch.from_numpy(self.table) * 2


TABLE = np.arange(3.0)


def test_an_array_read_from_state_is_read_at_call_time():
    # an array attribute or global is an input, as an array argument: updating its values between
    # calls was silently missed (the values of the first call were constants of the program)
    m = _WithTable()
    jm = thunder.jit(m)
    x = torch.zeros(4, dtype=torch.float64)
    torch.testing.assert_close(jm(x), m(x))
    m.table[0] = 100.0
    torch.testing.assert_close(jm(x), m(x))
    m.table = np.ones(4)
    torch.testing.assert_close(jm(x), m(x))

    def bump(x):
        t = torch.from_numpy(TABLE)
        t.add_(1)  # (the array's memory, as in eager)
        return x * t

    jb = thunder.jit(bump)
    x = torch.ones(3, dtype=torch.float64)
    torch.testing.assert_close(jb(x), torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    assert TABLE.tolist() == [1.0, 2.0, 3.0]
    TABLE[:] = 10.0
    torch.testing.assert_close(jb(x), torch.full((3,), 11.0, dtype=torch.float64))
    assert TABLE.tolist() == [11.0, 11.0, 11.0]


class _WithFreqs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.freqs = np.arange(4.0)

    def forward(self, x):
        return x + torch.tensor(np.sin(self.freqs))  # numpy computes with the array natively


def test_values_computed_natively_from_a_state_array_follow_its_updates():
    m = _WithFreqs()
    jm = thunder.jit(m)
    x = torch.zeros(4, dtype=torch.float64)
    torch.testing.assert_close(jm(x), m(x))
    m.freqs[0] = 1.0  # (in place: the constants computed from it are stale; the prologue compares its bytes)
    torch.testing.assert_close(jm(x), m(x))
    torch.testing.assert_close(jm(x), m(x))
    assert thunder.compile_stats(jm).miss_reasons == ["first call", "the numpy array 'freqs': the values of the "
                                                                   "array changed"]
