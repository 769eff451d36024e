"""The cuda executor on a real GPU (skipped without one; benchmarks/gpu/run.sh runs this file
in its ops part): regions launched from threads where torch has made no context current yet.
torch's autograd engine runs a CUDA backward on a worker thread of its own, so a jitted training
step's backward launches the regions' kernels there (the first device run failed there with
CUDA_ERROR_INVALID_CONTEXT, lowering/gpu/launch.py "Contexts")."""
import importlib.util
import threading

import pytest
import torch
import torch.nn.functional as F

import thunder

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
for _module, _extra in [("cuda.bindings", "cuda-bindings"), ("llvmlite", "llvmlite")]:
    try:
        _found = importlib.util.find_spec(_module) is not None
    except ModuleNotFoundError:  # (the parent package `cuda` is absent)
        _found = False
    if not _found:
        pytest.skip(f"{_extra} (the cuda extra) is not installed", allow_module_level=True)

from thunder.lowering.gpu import launch  # noqa: E402


def step(x, w, b):
    return F.gelu(F.layer_norm(x + 1, (x.shape[-1],), w, b), approximate="tanh")


@pytest.fixture
def launch_threads(monkeypatch):
    """The names of the threads that launched a kernel (the process's launcher, recording)."""
    launcher, threads = launch.launcher(), []
    real = launcher.launch

    def recording(*args):
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(launcher, "launch", recording)
    return threads


def test_training_step_backward_on_autograd_thread(launch_threads):
    """Values and every grad equal eager's; the backward's kernels launched on autograd's thread."""
    torch.manual_seed(0)
    x, w, b = torch.randn(64, 96, device="cuda"), torch.randn(96, device="cuda"), torch.randn(96, device="cuda")
    ours = [t.clone().requires_grad_() for t in (x, w, b)]
    ref = [t.clone().requires_grad_() for t in (x, w, b)]
    jf = thunder.jit(step, executors=["cuda", "torch"], fusion="always")
    out = jf(*ours)
    forward = len(launch_threads)
    assert forward and set(launch_threads) == {threading.current_thread().name}
    grad = torch.randn_like(out)
    out.backward(grad)
    expected = step(*ref)
    expected.backward(grad)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    for a, e in zip(ours, ref):
        torch.testing.assert_close(a.grad, e.grad, rtol=1e-4, atol=1e-4)
    backward = launch_threads[forward:]
    assert backward, "the backward launched no kernel"
    # (a CUDA backward runs on the engine's device thread, not the one calling backward())
    assert set(backward) - {threading.current_thread().name}, backward


def test_region_called_from_a_new_thread():
    """A new Python thread has no context current until it makes one: the regions run there."""
    x, w, b = torch.randn(8, 32, device="cuda"), torch.randn(32, device="cuda"), torch.randn(32, device="cuda")
    jf = thunder.jit(step, executors=["cuda", "torch"], fusion="always")
    results = []

    def body():
        try:
            results.append(jf(x, w, b))
            torch.cuda.synchronize()
        except Exception as e:  # handed to the test's thread
            results.append(e)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if isinstance(results[0], Exception):
        raise results[0]
    torch.testing.assert_close(results[0], step(x, w, b), rtol=1e-5, atol=1e-5)
