import sys, os; sys.path.insert(0, os.path.dirname(__file__))

# the disk cache of compiled kernels (thunder.lowering.linalg.disk_cache) is off for the test
# session (storing links a shared library per kernel; tests/test_linalg_disk_cache.py points it at
# its own directories), so tests never read or fill the user's cache. THUNDER_TEST_KERNEL_CACHE
# names a directory to keep between sessions instead (entries are keyed by content: safe to reuse).
os.environ["THUNDER_KERNEL_CACHE"] = os.environ.get("THUNDER_TEST_KERNEL_CACHE") or "off"
# the program cache (thunder/runtime/persist.py, inside the kernel cache's folder by default) is off
# too: a test's compile stats and traces are those of a compile; tests/test_program_cache.py
# points it at its own directories
os.environ["THUNDER_PROGRAM_CACHE"] = "off"
# kernels compile in the call that first runs them (not in the background while the region runs
# as torch calls, runtime/tiered.py): a test checking a fused program checks its kernels;
# tests/test_tiered.py switches the background compiles on
os.environ["THUNDER_KERNEL_COMPILE"] = "sync"
# fusion decisions from the fixed cost model (lowering/executors.py), not one measured on the
# machine under its current load (lowering/cost_calibration.py; tests/test_cost_calibration.py
# tests the measuring)
os.environ["THUNDER_COST_MODEL"] = "fixed"


import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _op_harness_ptx():
    """After each test module: the PTX of the CUDA kernels of the regions its op_harness checks
    collected, assembled by ptxas (op_harness.flush_ptx)."""
    yield
    import op_harness

    op_harness.flush_ptx()


@pytest.fixture
def emulated_cuda_executor():
    """An executor claiming CPU tensors whose regions run as the cuda executor's kernels,
    interpreted on the CPU (lowering/gpu/emulate.py): thunder.jit end to end (traces, autograd,
    codegen) with them."""
    import dataclasses

    from thunder.lowering import executors
    from thunder.lowering.gpu.emulate import emulate_region

    cuda = executors.get("cuda")

    def compile(text, name):
        return lambda *tensors: emulate_region(text, name, *tensors)

    executors.register(dataclasses.replace(cuda, name="cuda-emulated", device="cpu", compile=compile, require=None))
    yield "cuda-emulated"
    del executors.EXECUTORS["cuda-emulated"]
