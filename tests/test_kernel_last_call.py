"""A fused kernel's cheap call path (lowering/linalg/last_call.py): a call whose tensors match the
last full call's exactly reuses its frame; every other call (other strides, a subclass, a tensor
passed twice, another thread or thread count, a wrong shape or dtype) takes the full path and
gets the same values and errors as before."""
import threading

import pytest
import torch

import thunder
from thunder.lowering.linalg import compile_region


def fn(a, b):
    return torch.tanh(a * b + 1), a - b


@pytest.fixture(scope="module")
def kernel():
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    jf = thunder.jit(fn, transforms=["thunder-decompose"], executors=["torch"])
    jf(a, b)
    return compile_region(str(thunder.last_traces(jf)[-2].to_mlir()), "computation")


def check(kernel, a, b):
    outs = kernel(a, b)
    for o, r in zip(outs, fn(a, b)):
        assert type(o) is torch.Tensor and o.dtype == r.dtype and o.shape == r.shape and o.is_contiguous()
        torch.testing.assert_close(o, r)
    return outs


def test_same_metadata_takes_the_last_call(kernel):
    check(kernel, torch.randn(4, 8), torch.randn(4, 8))
    last = kernel.last_call
    assert last is not None
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    assert kernel.call_as_last((a, b)) is not None  # (new tensors, same metadata)
    check(kernel, a, b)
    assert kernel.last_call is last  # not armed again: the cheap path ran
    # new output tensors on each call
    o1, o2 = kernel(a, b), kernel(a, b)
    assert all(x.data_ptr() != y.data_ptr() for x, y in zip(o1, o2))


def test_other_calls_take_the_full_path(kernel):
    check(kernel, torch.randn(4, 8), torch.randn(4, 8))
    a = torch.randn(8, 4).t()  # same shape, other strides
    assert kernel.call_as_last((a, torch.randn(4, 8))) is None
    check(kernel, a, torch.randn(4, 8))
    check(kernel, torch.randn(4, 8), torch.randn(4, 8))
    p = torch.nn.Parameter(torch.randn(4, 8), requires_grad=False)  # a subclass
    assert kernel.call_as_last((p, torch.randn(4, 8))) is None
    with torch.no_grad():
        check(kernel, torch.nn.Parameter(torch.randn(4, 8)), torch.randn(4, 8))
    x = torch.randn(4, 8)
    check(kernel, x, x)  # a tensor passed twice: the full path, and it arms nothing
    check(kernel, x, x)
    check(kernel, torch.randn(4, 8), torch.randn(4, 8))
    assert kernel.call_as_last((x, x)) is None
    with pytest.raises(TypeError, match="input 0 is"):
        kernel(torch.randn(4, 9), torch.randn(4, 8))
    with pytest.raises(TypeError, match="input 1 is"):
        kernel(torch.randn(4, 8), torch.randn(4, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="expected 2 tensors"):
        kernel(torch.randn(4, 8))
    with pytest.raises(TypeError, match="must be a CPU tensor"):
        kernel(torch.randn(4, 8), 1.0)


def test_other_thread_and_thread_count(kernel):
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    check(kernel, a, b)
    got = []
    t = threading.Thread(target=lambda: got.append(kernel.call_as_last((a, b))))
    t.start()
    t.join()
    assert got == [None]  # (the frame holds the other thread's pointers)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert kernel.call_as_last((a, b)) is None
        check(kernel, a, b)
    finally:
        torch.set_num_threads(threads)
