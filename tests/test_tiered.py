"""Tiered execution (runtime/tiered.py): a fused region whose kernel is not compiled yet runs as
torch calls while the kernel compiles in the background (lowering/linalg/background.py); later
calls run the kernel. The suite compiles synchronously (conftest.py); these tests switch the
background on, hold the compiles back with background.paused() so the first calls surely find no
kernel, and wait_for_kernels() for them. Sizes are odd so no other test compiled these kernels."""
import os
import subprocess
import sys
import threading

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.lowering import linalg
from thunder.lowering.linalg import background, disk_cache
from thunder.runtime.tiered import TieredRegion

pytestmark = pytest.mark.skipif(not background.available(), reason="no system linker (ld): no background compiles")


@pytest.fixture
def tiered(monkeypatch):
    monkeypatch.setenv("THUNDER_KERNEL_COMPILE", "background")


def _regions(jf, traces=None):
    """The fusion regions a program calls, by name (the program's namespace)."""
    fn = (traces or thunder.last_traces(jf))[-1]._fn
    return {k: v for k, v in fn.__globals__.items() if k.startswith("fusion_")}


def _no_torch(region, monkeypatch):
    def fail(args):
        raise AssertionError("ran as torch calls")

    monkeypatch.setattr(region, "run_torch", fail)


def f(x, b, r):
    return F.gelu(x * 1.5 + b, approximate="tanh") - r


def test_first_call_runs_torch_while_the_kernel_compiles_then_the_kernel(tiered, monkeypatch):
    x, b, r = torch.randn(37, 53), torch.randn(53), torch.randn(37, 53)
    jf = thunder.jit(f, fusion="always")
    with background.paused():
        torch.testing.assert_close(jf(x, b, r), f(x, b, r))  # (the region's ops as torch calls)
        y = jf(x + 1, b, r)
        (name, region), = _regions(jf).items()
        assert isinstance(region, TieredRegion) and not region.ready and not region.kernel.variants
        assert thunder.compile_stats(jf).torch_while_compiling == {name: 2}
    torch.testing.assert_close(y, f(x + 1, b, r))
    assert thunder.wait_for_kernels(120)
    assert linalg.COMPILE_LOG[-1][2] == "background"
    _no_torch(region, monkeypatch)
    torch.testing.assert_close(jf(x, b, r), f(x, b, r))  # the kernel's polynomial GELU
    assert region.ready and thunder.compile_stats(jf).torch_while_compiling == {name: 2}
    assert thunder.compile_stats(jf).kernel_failures == {}


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(24)
        self.fc = torch.nn.Linear(24, 24)

    def forward(self, x):
        h = F.dropout(self.fc(self.norm(x)), 0.25)
        return (F.gelu(h, approximate="tanh") * x).sum()


def test_training_step_equals_eager_while_compiling_and_after(tiered, monkeypatch):
    torch.manual_seed(0)
    m = Block()
    x = torch.randn(9, 24, requires_grad=True)
    jm = thunder.jit(m, fusion="always")

    def step(fn):
        torch.manual_seed(1)  # (dropout: eager and thunder draw the same numbers on either path)
        m.zero_grad()
        x.grad = None
        loss = fn(x)
        loss.backward()
        return [loss] + [t.grad.clone() for t in (x, *m.parameters())]

    expected = step(m)
    with background.paused():
        first = step(jm)
    stats = thunder.compile_stats(jm)
    assert len(stats.torch_while_compiling) >= 2  # (forward and backward regions)
    for a, e in zip(first, expected):
        torch.testing.assert_close(a, e)
    assert thunder.wait_for_kernels(120)
    before = dict(stats.torch_while_compiling)
    for a, e in zip(step(jm), expected):
        torch.testing.assert_close(a, e)
    assert stats.torch_while_compiling == before and stats.kernel_failures == {}


def test_failed_compile_runs_torch_for_good_and_says_why(tiered, monkeypatch, caplog):
    monkeypatch.setattr(disk_cache, "store_object", lambda *a: False)  # (as without a working linker)
    caplog.set_level("INFO", logger="thunder.kernels")
    x, b, r = torch.randn(41, 29), torch.randn(29), torch.randn(41, 29)
    jf = thunder.jit(f, fusion="always")
    with background.paused():
        torch.testing.assert_close(jf(x, b, r), f(x, b, r))
    assert thunder.wait_for_kernels(120)
    (name, region), = _regions(jf).items()
    for _ in range(2):
        torch.testing.assert_close(jf(x, b, r), f(x, b, r))
    stats = thunder.compile_stats(jf)
    assert "could not be linked" in stats.kernel_failures[name] and not region.ready
    assert stats.torch_while_compiling == {name: 1}  # (afterwards: torch calls for good, not "while compiling")
    messages = [rec.getMessage() for rec in caplog.records if rec.name == "thunder.kernels"]
    assert any(f"{name}'s kernel failed to compile" in msg for msg in messages), messages


def test_a_worker_that_dies_fails_its_job_and_the_next_job_starts_another(tiered):
    x, b, r = torch.randn(23, 31), torch.randn(31), torch.randn(23, 31)
    jf = thunder.jit(f, fusion="always")
    with background.paused():
        jf(x, b, r)
        service = background._SERVICE
        service._worker().kill()
        service.proc.wait()
        # in its place a worker that dies when its job arrives (killing the real one alone is a
        # race: the feeding thread may see it dead first and start another)
        service.proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert thunder.wait_for_kernels(120)
    torch.testing.assert_close(jf(x, b, r), f(x, b, r))  # (torch calls: the failure is reported)
    stats = thunder.compile_stats(jf)
    assert "worker exited" in next(iter(stats.kernel_failures.values()))
    jg = thunder.jit(lambda x, r: torch.tanh(x) * r - x, fusion="always")
    y = jg(x, r)
    assert thunder.wait_for_kernels(120) and not thunder.compile_stats(jg).kernel_failures
    torch.testing.assert_close(jg(x, r), torch.tanh(x) * r - x)
    torch.testing.assert_close(y, torch.tanh(x) * r - x)


def test_two_threads_first_calls_at_once(tiered, monkeypatch):
    x, b, r = torch.randn(19, 43), torch.randn(43), torch.randn(19, 43)
    jf = thunder.jit(f, fusion="always")
    barrier, results, errors = threading.Barrier(2), {}, []

    def call(i):
        try:
            barrier.wait()
            results[i] = jf(x + i, b, r)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    log_before = len(linalg.COMPILE_LOG)
    with background.paused():
        threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors and thunder.compile_stats(jf).cache_misses == 1
    for i in range(2):
        torch.testing.assert_close(results[i], f(x + i, b, r))
    assert thunder.wait_for_kernels(120)
    assert [how for _, _, how in linalg.COMPILE_LOG[log_before:]] == ["background"]  # one compile
    (_, region), = _regions(jf).items()
    _no_torch(region, monkeypatch)
    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(2):
        torch.testing.assert_close(results[i], f(x + i, b, r))


def test_sync_switch_compiles_in_the_first_call():
    assert os.environ["THUNDER_KERNEL_COMPILE"] == "sync"  # (conftest.py)
    x, b, r = torch.randn(17, 47), torch.randn(47), torch.randn(17, 47)
    jf = thunder.jit(f, fusion="always")
    jf(x, b, r)
    (_, region), = _regions(jf).items()
    assert isinstance(region, linalg.Kernel) and region.variants  # compiled in the call
    assert thunder.compile_stats(jf).torch_while_compiling == {}


def test_stop_at_exit_ends_the_worker_and_the_thread_without_compiling_what_is_left():
    service = background._Service()  # (what atexit stops: background._shutdown)
    proc = service._worker()
    job = background.Job(("not compiled", "loops", 2), "0" * 64)
    with background.paused():
        service.jobs.put(job)
        service.stop()
    assert proc.poll() is not None and not service.thread.is_alive()
    assert job.failed and job.error == "the process exited"


def test_a_program_from_the_program_cache_tiers_too(tiered, tmp_path, monkeypatch):
    monkeypatch.setenv("THUNDER_PROGRAM_CACHE", str(tmp_path))
    x, b, r = torch.randn(29, 61), torch.randn(61), torch.randn(29, 61)
    with background.paused():
        thunder.jit(f, fusion="always")(x, b, r)  # (stored)
        jf = thunder.jit(f, fusion="always")
        torch.testing.assert_close(jf(x, b, r), f(x, b, r))
        stats = thunder.compile_stats(jf)
        assert stats.disk_loads == 1 and list(stats.torch_while_compiling.values()) == [1]
    assert thunder.wait_for_kernels(120)
    torch.testing.assert_close(jf(x, b, r), f(x, b, r))
    assert list(stats.torch_while_compiling.values()) == [1]


def test_the_worker_runs_at_the_lowest_priority():
    # (on a few cores it would take a core from the caller's torch threads: docs/fusion.md)
    service = background._Service()
    proc = service._worker()
    try:
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == 19
    finally:
        service.stop()


def _scaled_softmax(x, w):
    return torch.softmax(torch.tanh(x * w) * 1.37, 1) * x.shape[1] ** -0.5 - 0.41


def test_a_program_for_all_sizes_runs_torch_while_its_kernel_for_all_sizes_compiles(tiered, monkeypatch):
    """The kernel for every size of a program for all sizes (lowering/linalg/any_size.py: here a
    softmax over the changing length) compiles in the background too: calls at any size run the
    region as torch calls until it is ready, then the kernel, equal to eager's throughout.
    Before, the call that made the sizes symbols compiled every such kernel in it (a 24-layer
    Llama's step at its second length under the default option: 8.4 s -> 3.7 s)."""
    from thunder.lowering.linalg import any_size
    answers = []
    call = any_size.AnySizeKernel.call
    monkeypatch.setattr(any_size.AnySizeKernel, "call", lambda self, *a: answers.append(call(self, *a)) or answers[-1])
    jf = thunder.jit(_scaled_softmax, cache="symbolic values", fusion="always")
    w = torch.randn(13)
    with background.paused():
        for T in (7, 11, 19):
            x = torch.randn(3, T, 13)
            torch.testing.assert_close(jf(x, w), _scaled_softmax(x, w))
    assert answers and all(a is any_size.COMPILING for a in answers)
    assert thunder.wait_for_kernels(120)
    answers.clear()
    for T in (23, 29, 7):
        x = torch.randn(3, T, 13)
        torch.testing.assert_close(jf(x, w), _scaled_softmax(x, w))
    assert answers and all(isinstance(a, tuple) for a in answers)  # (the kernel's outputs)
    assert thunder.compile_stats(jf).cache_misses == 1


def test_the_gemm_probes_run_while_no_kernel_compiles(tiered):
    # ops/onednn.py times its kernels inside background.quiet(): a compile on the other core would
    # decide a two-thread GEMM's time (and so the library chosen); a compile running is waited for,
    # none starts inside, and an outer paused() still holds after it
    from thunder.ops import onednn

    x, b, r = torch.randn(41, 59), torch.randn(59), torch.randn(41, 59)
    jf = thunder.jit(f, fusion="always")
    seen = []
    jf(x, b, r)  # (its kernel starts compiling in the background now)
    onednn.best_times({"probe": lambda: seen.append(background._RUNNING.locked())}, 1, rounds=3)
    assert seen and not any(seen)
    assert thunder.wait_for_kernels(120)
    with background.paused():
        jf(x + 0.5, b, r.t().contiguous().t())  # (another layout: another kernel, held back)
        onednn.best_times({"probe": lambda: seen.append(background.pending())}, 1, rounds=1)
        assert not background._GO.is_set()  # (quiet() restored the pause)
    assert thunder.wait_for_kernels(120)


def test_a_region_with_dynamic_sizes_runs_torch_while_its_kernel_for_every_size_compiles(tiered):
    # thunder-fuse on a trace with `?` dims (linalg/dynamic_region.py): the region's kernel for
    # every size compiles in the background, its torch calls at the call's sizes meanwhile; then
    # every size runs that one kernel
    from test_symbolic_passes import _symbolic_module
    from thunder.lowering.fuse import fuse_module
    from thunder.lowering.linalg.dynamic_region import DynamicRegion
    from thunder.runtime.codegen import compile_source, python_source
    from thunder.runtime.tiered import tier

    def g(x):
        return F.gelu(x * 1.5, approximate="tanh").sum(1) / x.shape[1]

    module = _symbolic_module(g, lambda T: (torch.randn(T, 31),), (3, 4, 5))
    with module.context:
        fuse_module(module.operation, "always")
    constants = {}
    program = compile_source(python_source(module, constants=constants), constants=tier(constants))
    (region,) = [v for v in constants.values() if isinstance(v, DynamicRegion)]
    with background.paused():
        x = torch.randn(13, 31)
        torch.testing.assert_close(program(x), g(x))  # (torch calls: the kernel is compiling)
        assert region.in_background and not region.any_size[0].variants
    assert thunder.wait_for_kernels(120)
    for T in (13, 17, 40):
        x = torch.randn(T, 31)
        torch.testing.assert_close(program(x), g(x))
    assert len(region.any_size[0].variants) == 1 and not region.per_size
