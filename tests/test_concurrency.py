"""Compiling from several threads and processes at once, and beside torch.compile: every call
equals eager, each cache key compiles once, a failed compile leaves the process compiling, and
reads of torch's bookkeeping are not guards (runtime/state.py)."""
import json
import logging
import os
import subprocess
import sys
import threading

import pytest
import torch

import thunder
from thunder.lowering.linalg import disk_cache

import concurrency_worker
import soak_concurrency

HERE = os.path.dirname(os.path.abspath(__file__))


def run_threads(n, work):
    """work(i) in n threads started together; the exceptions they raised."""
    errors, barrier = [], threading.Barrier(n)

    def run(i):
        try:
            barrier.wait()
            work(i)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    return errors


def neg_exp(x):
    return (-x).exp() * 2 + x.sin()


def row_softmax(x):
    return torch.softmax(x * 0.5, -1)


def gelu_mm(x):
    return torch.nn.functional.gelu(x @ x.transpose(-1, -2))


SHAPES = [(4, 3), (3, 5), (2, 3, 4), (7, 2)]


def test_first_calls_from_threads_compile_once_per_key():
    # (one program per shape: sizes that change stay constants, else the count would depend on the order)
    jitted = [thunder.jit(f, automatic_dynamic=False) for f in (neg_exp, row_softmax, gelu_mm)]
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(s, generator=g) for s in SHAPES]

    def work(i):
        for k in range(len(jitted) * len(SHAPES)):  # every (function, shape), each thread in its own order
            j = (k + i) % (len(jitted) * len(SHAPES))
            jf, x = jitted[j % len(jitted)], inputs[j // len(jitted)]
            torch.testing.assert_close(jf(x), jf.__wrapped__(x))

    assert run_threads(6, work) == []
    for jf in jitted:
        stats = thunder.compile_stats(jf)
        assert stats.cache_misses == len(SHAPES), stats.miss_reasons
        assert stats.miss_reasons.count("first call") == 1


def test_first_backward_from_two_threads_at_once_compiles_it_once():
    # (the backward compiles on the first backward call: runtime/autograd.py backward_for)
    jf = thunder.jit(gelu_mm)
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(3, 4, generator=g, requires_grad=True) for _ in range(2)]
    outs = [jf(x) for x in xs]  # (one program; its backward not compiled yet)
    grads = [None, None]

    def work(i):
        grads[i] = torch.autograd.grad(outs[i].sum(), xs[i])[0]

    assert run_threads(2, work) == []
    assert thunder.compile_stats(jf).backward_compiles == 1
    for x, grad in zip(xs, grads):
        torch.testing.assert_close(grad, torch.autograd.grad(gelu_mm(x).sum(), x)[0])


def raises_while_tracing(x):
    y = x * 2
    if y.shape[0] > 3:
        raise ValueError("too long")
    return y + 1


def refused(x):
    return torch.compile(torch.sin)(x)


def test_failed_compiles_leave_the_process_compiling():
    jf = thunder.jit(raises_while_tracing)
    with pytest.raises(ValueError, match="too long"):
        jf(torch.ones(5))
    jr = thunder.jit(refused)
    with pytest.raises(NotImplementedError, match="torch.compile"):
        jr(torch.ones(3))
    torch.testing.assert_close(jf(torch.ones(2)), raises_while_tracing(torch.ones(2)))

    # the same from threads, failing and good first calls mixed
    fresh = [thunder.jit(f) for f in (raises_while_tracing, neg_exp, refused, row_softmax)]

    def work(i):
        for k in range(len(fresh)):
            jf = fresh[(k + i) % len(fresh)]
            x = torch.randn(5 if k % 2 else 2, 3)
            fn = jf.__wrapped__
            if fn is refused:
                with pytest.raises(NotImplementedError):
                    jf(x)
            elif fn is raises_while_tracing and x.shape[0] > 3:
                with pytest.raises(ValueError, match="too long"):
                    jf(x)
            else:
                torch.testing.assert_close(jf(x), fn(x))

    assert run_threads(4, work) == []
    late = thunder.jit(lambda x: (x - 1).abs().exp())  # a new function compiles afterwards
    x = torch.randn(3, 3)
    torch.testing.assert_close(late(x), (x - 1).abs().exp())


needs_linker = pytest.mark.skipif(not sys.platform.startswith("linux") or disk_cache._linker() is None,
                                  reason="the disk cache needs Linux and a linker (binutils ld)")


def _worker(cache, barrier, n, *extra):
    env = dict(os.environ, THUNDER_KERNEL_CACHE=str(cache), OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, os.path.join(HERE, "concurrency_worker.py"), str(barrier), str(n), *extra],
                            env=env, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@needs_linker
def test_processes_share_one_kernel_cache(tmp_path, monkeypatch):
    cache = tmp_path / "kernels"
    # two processes compiling the same kernels into one fresh cache at once; the second first
    # fails part way through its first definition of the dialects
    procs = [_worker(cache, tmp_path, 2), _worker(cache, tmp_path, 2, "--fail-define", "40")]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in results)
    assert sum(r["stats"]["compiled"] + r["stats"]["disk"] for r in results) >= 2 * len(concurrency_worker.FUNCTIONS)
    entries = [p for p in cache.iterdir() if p.suffix == ".so"]
    assert len(entries) >= len(concurrency_worker.FUNCTIONS)
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary file left
    for p in entries:
        assert disk_cache._read_verified(str(p), p.stem) is not None
        data = p.read_bytes()  # truncated (a writer killed mid-write, a full disk): a miss
        p.write_bytes(data[:len(data) // 2])
    monkeypatch.setenv("THUNDER_KERNEL_CACHE", str(cache))
    rejected = disk_cache.stats["rejected"]
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 40, generator=g), torch.randn(16, 40, generator=g)
    for fn in concurrency_worker.FUNCTIONS:
        torch.testing.assert_close(thunder.jit(fn)(x, y), fn(x, y))
    assert disk_cache.stats["rejected"] - rejected == len(entries)
    for p in entries:  # replaced by intact entries
        assert disk_cache._read_verified(str(p), p.stem) is not None


_LOG = logging.getLogger("thunder.tests.block")


class Block(torch.nn.Module):
    """A Llama-style MLP block whose forward makes a module (dynamo's patch of nn.Module.__init__
    then runs while thunder traces)."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        act = torch.nn.SiLU()
        _LOG.debug("forward of %s", type(self).__name__)  # (logging's level cache: bookkeeping)
        return x + self.down(act(self.up(self.norm(x))))


def test_alternating_with_torch_compile():
    pytest.importorskip("torch._dynamo")
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    model = Block().eval()
    tm, cm = thunder.jit(model), torch.compile(model, backend="aot_eager")
    x = torch.randn(2, 5, 16)
    graphs = []
    with torch.no_grad():
        for i in range(4):
            torch.testing.assert_close(cm(x), model(x))  # (installs dynamo's patch, bumps its generation)
            torch.testing.assert_close(tm(x), model(x))
            _LOG.setLevel(logging.DEBUG if i % 2 else logging.INFO)
            graphs.append(counters["stats"]["unique_graphs"])
    assert thunder.compile_stats(tm).miss_reasons == ["first call"]
    assert graphs[0] > 0 and graphs == graphs[:1] * 4  # torch.compile compiled on its first call only


CONFIG = {"scale": 2.0}


def _scale_from_config():
    """User code returning None with an effect on a container: its reads stay guards."""
    CONFIG["used"] = CONFIG["scale"]


def test_reads_that_decide_the_result_stay_guarded():
    def f(x):
        _scale_from_config()
        return x * CONFIG["used"]

    jf = thunder.jit(f)
    x = torch.ones(3)
    torch.testing.assert_close(jf(x), x * 2)
    CONFIG["scale"] = 3.0
    try:
        torch.testing.assert_close(jf(x), x * 3)
    finally:
        CONFIG["scale"] = 2.0
    assert thunder.compile_stats(jf).cache_misses == 2


def test_soak_short():
    report = soak_concurrency.soak(seconds=3, threads=4, functions=4)
    assert report["mismatches"] == 0 and report["unexpected"] == [], report
    assert report["calls"] > 0 and report["raised"] > 0 and report["compiles_after"]


def test_library_reads_that_decide_the_result_stay_guarded():
    """Module._call_impl (torch's code, returning the output) reads the global forward hooks: a
    hook registered after the first call recompiles and applies."""
    model = torch.nn.Linear(3, 3)
    tm = thunder.jit(model)
    x = torch.randn(2, 3)
    torch.testing.assert_close(tm(x), model(x))
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: out * 2)
    try:
        torch.testing.assert_close(tm(x), model(x))
        torch.testing.assert_close(tm(x), (x @ model.weight.T + model.bias) * 2)
    finally:
        handle.remove()
    torch.testing.assert_close(tm(x), model(x))
    assert thunder.compile_stats(tm).cache_misses == 2
