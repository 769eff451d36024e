"""Kernels compiled in the background: a worker process compiles, the caller goes on.

    job = submit(kernel, strides)    # None: the kernel runs now (code in memory or on disk, or no
                                     # background compiles here: its call compiles it)
    job.ready / job.error            # poll; wait(timeout) for every job submitted so far

The MLIR bindings hold the GIL while they run passes and LLVM (measured: a thread compiling left
another Python thread 7-15% of its speed), so the compiles run in a child process
(compile_worker.py, started on the first job; it loads the MLIR bindings and pipeline.py, not
torch: ~0.5 s). A daemon thread of this process feeds it one job at a time and waits for its
answer (reads and the linker's subprocess release the GIL): the worker writes the kernel's object
code, the thread links it and stores it as a kernel cache entry (disk_cache.store_object: in the
kernel cache, so later processes load it, or in a private folder when the cache is off, deleted
at exit), loads it and installs it in the kernels waiting for it (Kernel.variants, _ENGINES).
Jobs are shared by lowered text: identical regions (every layer's) compile once.

A failed compile (an MLIR or LLVM error, a worker that died, a link that failed) makes its job
fail for good: its regions run as torch calls in this process (runtime/tiered.py), the reason in
job.error and logged (THUNDER_LOGS=kernels). Without a system linker or on another OS than Linux
nothing runs in the background (submit returns None: the kernel compiles in the call).
At exit the worker is stopped and the thread ends (atexit); a forked child starts its own.
"""
import atexit
import contextlib
import json
import logging
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from thunder.core import logs
from thunder.dialects import mlir
from thunder.dialects.mlir import LOCK
from thunder.lowering.linalg import COMPILE_LOG, _ENGINES, compile_worker, disk_cache
from thunder.lowering.linalg.pipeline import lower_to_llvm
from thunder.ops import onednn

log = logs.logger("kernels")

_JOBS = {}  # engine key -> Job pending or failed (a failed one stays: no second try in this process)
_JOBS_LOCK = threading.Lock()  # (taken under mlir.LOCK, never the other way round)
_SERVICE = None
_GO = threading.Event()  # cleared by paused(): no job starts
_RUNNING = threading.Lock()  # held while a job compiles
_GO.set()


class Job:
    """One kernel's code compiling in the worker, and the kernels (variants) waiting for it."""

    def __init__(self, ekey, digest):
        self.ekey, self.digest = ekey, digest
        self.waiters = []  # (Kernel, variant key, lowered region)
        self.finished = threading.Event()
        self.error = None  # why it failed, or None
        self.seconds = None  # the compile's seconds in the worker, with linking and loading

    @property
    def ready(self):
        return self.finished.is_set() and self.error is None

    @property
    def failed(self):
        return self.finished.is_set() and self.error is not None


def available():
    """Whether kernels can compile in the background here (Linux and a system linker)."""
    return sys.platform.startswith("linux") and disk_cache.can_link()


def submit(kernel, strides):
    """The background job of kernel's variant for inputs of these strides, or None where the
    variant runs now: its code was compiled by this process or is in the disk cache (installed
    here), or nothing compiles in the background here (the kernel's call compiles it)."""
    key = kernel._key(strides)
    if key in kernel.variants:
        return None
    with LOCK:  # (the lowering uses MLIR's shared contexts)
        if key in kernel.variants or not available():
            return None
        lowered, ekey = kernel.engine_key(key)
        with _JOBS_LOCK:
            job = _JOBS.get(ekey)
            fn = _ENGINES.get(ekey)
            if fn is not None:
                kernel.variants.setdefault(key, (fn, lowered))
                return None
            if job is not None:
                if not job.failed:
                    job.waiters.append((kernel, key, lowered))
                return job
        t0 = time.perf_counter()
        fn = disk_cache.cached_function(lowered.text, "kernel", loops=kernel.loops, opt_level=kernel.opt_level)
        if fn is not None:
            _ENGINES[ekey] = fn
            kernel.variants.setdefault(key, (fn, lowered))
            COMPILE_LOG.append((kernel.name, time.perf_counter() - t0, "disk"))
            return None
        job = Job(ekey, disk_cache.key(lowered.text, "kernel", kernel.loops, kernel.opt_level))
        job.waiters.append((kernel, key, lowered))
        with _JOBS_LOCK:
            _JOBS[ekey] = job
        _service().jobs.put(job)
        return job


def wait(timeout=None):
    """Wait until every kernel submitted so far is compiled (or failed); whether they all are
    (False: timeout seconds passed first)."""
    end = None if timeout is None else time.monotonic() + timeout
    with _JOBS_LOCK:
        jobs = list(_JOBS.values())
    for job in jobs:
        left = None if end is None else max(0.0, end - time.monotonic())
        if not job.finished.wait(left):
            return False
    return True


class paused:
    """For tests: no background compile starts inside the block (so a region's first calls run
    as torch calls whatever the machine's speed); they start at its end."""

    def __enter__(self):
        _GO.clear()

    def __exit__(self, *exc):
        _GO.set()


@contextlib.contextmanager
def quiet():
    """No kernel compiles in the background inside the block (none starts; one compiling is
    waited for): what runs inside has the cores to itself (the GEMM probes of ops/onednn.py,
    installed as its `quiet` below)."""
    was = _GO.is_set()
    _GO.clear()
    with _RUNNING:  # (the job compiling now, if any, finishes first)
        pass
    try:
        yield
    finally:
        if was:
            _GO.set()


onednn.quiet = quiet


def pending():
    """How many kernels are compiling in the background now."""
    with _JOBS_LOCK:
        return sum(not j.finished.is_set() for j in _JOBS.values())


class _Service:
    """The worker process and the thread that feeds it (started on the first job)."""

    def __init__(self):
        self.pid = os.getpid()
        self.jobs = queue.Queue()
        self.proc = None
        self.private = None  # the kernels' folder when the disk cache is off
        self.stopping = False
        self.starting = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="thunder-kernel-compiler", daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            job = self.jobs.get()
            if job is None:
                return
            while True:  # (holding _RUNNING while it compiles, started only while _GO is set: quiet())
                _GO.wait()
                _RUNNING.acquire()
                if _GO.is_set():
                    break
                _RUNNING.release()
            try:
                if self.stopping:  # (exiting: what is left is not compiled)
                    job.error = "the process exited"
                    job.finished.set()
                    continue
                try:
                    self._compile(job)
                except Exception as e:  # noqa: BLE001 - the job fails, its regions run as torch calls
                    job.error = f"{type(e).__name__}: {e}"
                self._finish(job)
            finally:
                _RUNNING.release()

    def _worker(self):
        """The running worker process (started when there is none)."""
        with self.starting:
            if self.proc is not None and self.proc.poll() is None:
                return self.proc
            if self.stopping:
                raise RuntimeError("the process exited")
            return self._start()

    def _start(self):
        pipeline_file = sys.modules[lower_to_llvm.__module__].__file__
        self.proc = subprocess.Popen([sys.executable, compile_worker.__file__, mlir.__file__, pipeline_file],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, close_fds=True)
        if not self.proc.stdout.readline():  # (its greeting once it imported the bindings)
            raise RuntimeError(f"the compile worker did not start (exit code {self.proc.wait()})")
        return self.proc

    def _folder(self):
        directory = disk_cache.cache_dir()
        if directory is None:
            if self.private is None:
                self.private = tempfile.mkdtemp(prefix="thunder-kernels-")
            directory = self.private
        return directory

    def _compile(self, job):
        t0 = time.perf_counter()
        proc = self._worker()
        directory = self._folder()
        with disk_cache.scratch(directory, job.digest) as scratch:
            obj = os.path.join(scratch, "k.o")
            text, loops, opt_level = job.ekey
            try:
                proc.stdin.write(json.dumps({"id": job.digest, "text": text, "loops": loops,
                                             "opt_level": opt_level, "obj": obj}) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except OSError:  # (a worker that died: a broken pipe)
                line = ""
            if not line:
                code = proc.wait()
                self.proc = None
                raise RuntimeError(f"the compile worker exited (code {code})")
            reply = json.loads(line)
            if not reply["ok"]:
                raise RuntimeError(reply["error"])
            if not disk_cache.store_object(directory, job.digest, obj):
                raise RuntimeError("its object code could not be linked into a shared library")
        fn = disk_cache.load_entry(directory, job.digest, "kernel")
        if fn is None:
            raise RuntimeError("the linked kernel could not be loaded")
        if directory == self.private:  # (loaded: the mapping stays)
            os.unlink(os.path.join(directory, job.digest + ".so"))
        job.seconds = time.perf_counter() - t0
        disk_cache.stats["compiled"] += 1
        with _JOBS_LOCK:
            fn = _ENGINES.setdefault(job.ekey, fn)
            for kernel, key, lowered in job.waiters:
                kernel.variants.setdefault(key, (fn, lowered))
            COMPILE_LOG.append((job.waiters[0][0].name, job.seconds, "background"))
            del _JOBS[job.ekey]

    def _finish(self, job):
        if job.error is not None and not self.stopping:
            log.info("a kernel failed to compile in the background: %s; its regions run as torch calls",
                     job.error)
        elif job.error is None and log.isEnabledFor(logging.INFO):
            log.info("a kernel compiled in the background in %.2f s (%d waiting)", job.seconds, len(job.waiters))
        job.finished.set()

    def stop(self):
        self.stopping = True
        self.jobs.put(None)
        _GO.set()
        proc = self.proc
        if proc is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.thread.join(timeout=5)
        if self.private is not None:
            shutil.rmtree(self.private, ignore_errors=True)


def _service():
    global _SERVICE
    if _SERVICE is None:
        _SERVICE = _Service()
    return _SERVICE


@atexit.register
def _shutdown():
    if _SERVICE is not None and _SERVICE.pid == os.getpid():
        _SERVICE.stop()


def _forked():
    """In a forked child: the parent's worker and thread are not ours; jobs the parent had under
    way never finish here (their regions run as torch calls)."""
    global _SERVICE, _JOBS_LOCK
    _SERVICE = None
    _JOBS_LOCK = threading.Lock()  # (another thread may have held it at the fork)
    for job in list(_JOBS.values()):
        if not job.finished.is_set():
            job.error = "the process forked while the kernel compiled"
            job.finished.set()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
