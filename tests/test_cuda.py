"""The CUDA executor without a GPU: kernels (lowering/gpu) interpreted on the CPU against eager,
PTX of the GPT block's fused regions through ptxas, the launch code up to the driver call (a
recording stand-in for cuda.bindings.driver), the executor registry and the nvFuser translation."""
import ctypes
import importlib.util
import math
import os
import sys
import threading

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.dialects.definitions import context
from thunder.dialects.mlir import ir
from thunder.lowering import fuse
from thunder.lowering.gpu import Batch, KernelError, UnsupportedOp, region_kernels
from thunder.lowering.gpu import launch as launch_module
from thunder.lowering.gpu import ptx as ptx_module
from thunder.lowering.gpu.emulate import emulate_region
from thunder.lowering.gpu.launch import CudaDriverError, CudaKernel, Launcher
from thunder.lowering.linalg import compile_region

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from gpt_block import gpt_block, make_inputs  # noqa: E402

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llvmlite") is None,
                                reason="llvmlite (the cuda extra) is not installed")
needs_ptxas = pytest.mark.skipif(ptx_module.ptxas_path() is None, reason="ptxas (CUDA toolkit) not found")


def _regions(fn, *args, fusion="always"):
    """{name: region text} of the thunder-fuse trace (inference) of fn."""
    jf = thunder.jit(fn, fusion=fusion)
    jf(*args)
    trace = next(t for t in thunder.last_traces(jf) if t.producer == "thunder-fuse")
    module = trace.module()
    return {n: fuse.region_text(c) for n, c in fuse.fusion_callees(module.operation).items()}


def _only_region(fn, *args):
    """The one region of fn, which must be all of it (the program is one fusion call)."""
    jf = thunder.jit(fn, fusion="always")
    jf(*args)
    program = str(thunder.last_traces(jf)[-1])
    assert len([line for line in program.splitlines() if " = " in line]) == 1, program
    (name, text), = _regions(fn, *args).items()
    return name, text


# ---- kernels, interpreted on the CPU (the GPU's index arithmetic, schedules and bounds)
CASES = {
    "softmax_rows_in_registers": (lambda x: torch.softmax(x, -1), lambda: (torch.randn(7, 300),)),
    "softmax_long_rows_loop": (lambda x: torch.softmax(x, -1), lambda: (torch.randn(3, 9000),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
                   lambda: (torch.randn(2, 5, 96), torch.randn(96), torch.randn(96))),
    "rms_norm_bf16": (lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w,
                      lambda: (torch.randn(6, 200).to(torch.bfloat16), torch.randn(200).to(torch.bfloat16))),
    "log_softmax_f16": (lambda x: torch.log_softmax(x, -1), lambda: (torch.randn(5, 130).to(torch.float16),)),
    "gelu_tanh_vector": (lambda x, b: F.gelu(x + b, approximate="tanh"), lambda: (torch.randn(33, 64), torch.randn(64))),
    "erf_gelu_odd_width": (lambda x: F.gelu(x), lambda: (torch.randn(5, 7),)),
    "transposed_input": (lambda x: x.t().exp() * 2, lambda: (torch.randn(40, 24),)),
    "full_reduction": (lambda x: (x * x).sum(), lambda: (torch.randn(37, 50),)),
    "column_sum": (lambda x: (x * 2).sum(0), lambda: (torch.randn(300, 20),)),
    "middle_reduction": (lambda x: x.amax(1), lambda: (torch.randn(4, 30, 6),)),
    "int_ops": (lambda a, b: torch.div(a * 3 + b, 2, rounding_mode="trunc") - (a > b).long(),
                lambda: (torch.randint(-50, 50, (9, 8)), torch.randint(-5, 5, (9, 8)))),
    "rotary_cat": (lambda x, c, s: x * c + torch.cat((-x[..., 8:], x[..., :8]), -1) * s,
                   lambda: (torch.randn(2, 3, 5, 16), torch.randn(5, 16), torch.randn(5, 16))),
    "rotary_cat_bf16": (lambda x, c, s: x * c + torch.cat((-x[..., 32:], x[..., :32]), -1) * s,
                        lambda: tuple(t.to(torch.bfloat16) for t in (torch.randn(2, 4, 64), torch.randn(4, 64),
                                                                      torch.randn(4, 64)))),
    "pad_then_softmax": (lambda x: torch.softmax(F.pad(x * 2, (3, 1), value=-1.0), -1), lambda: (torch.randn(6, 30),)),
    "pad_rows_f16": (lambda x: F.pad(x.exp(), (0, 0, 2, 1)), lambda: (torch.randn(5, 24).half(),)),
    "cat_dim0_column_sum": (lambda a, b: torch.cat((a.exp(), b), 0).sum(0), lambda: (torch.randn(7, 12), torch.randn(3, 12))),
    "strided_slice": (lambda x: x[1::2, ::3] * 2, lambda: (torch.randn(9, 40),)),
    "bool_mask": (lambda x, m: x.masked_fill(m, 0.0).sum(-1), lambda: (torch.randn(6, 40), torch.rand(6, 40) > 0.5)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_emulated_kernels_equal_eager(case):
    fn, inputs = CASES[case]
    args = inputs()
    name, text = _only_region(fn, *args)
    out = emulate_region(text, name, *args)
    expected = fn(*args)
    if expected.dtype == torch.bfloat16:  # (kernels keep bf16 intermediates in f32 and round once
        # where stored, lowering/linalg/bf16_intermediates.py: the reference is the float64 value
        # rounded once, where eager rounds after each op; a sum that cancels can differ from eager's)
        expected = fn(*(a.double() if a.is_floating_point() else a for a in args)).to(torch.bfloat16)
    # f16/bf16: torch's fused ops round once where the decomposition rounds per op
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}.get(expected.dtype, 1e-4)
    torch.testing.assert_close(out[0], expected, atol=1e-5, rtol=tol, equal_nan=True)


def test_schedules():
    """Which schedule each pattern gets, and that the kernel text does not depend on the row count."""
    def launches(fn, *args):
        name, text = _only_region(fn, *args)
        return [(launch.schedule, launch.threads, launch.vector) for launch in region_kernels(text, name).launches]

    # rows read and written in 16-byte chunks where they split into whole chunks
    assert launches(lambda x: torch.softmax(x, -1), torch.randn(4, 1024)) == [("rows", 256, 4)]
    assert launches(lambda x: torch.softmax(x, -1), torch.randn(4, 1024).bfloat16()) == [("rows", 128, 8)]
    assert launches(lambda x: torch.softmax(x, -1), torch.randn(4, 50)) == [("rows", 32, 1)]
    assert launches(lambda x: x.exp() + 1, torch.randn(4, 64)) == [("elementwise", 256, 4)]
    assert launches(lambda x: x.half().exp(), torch.randn(4, 64)) == [("elementwise", 256, 4)]
    assert launches(lambda x: x.half() * 2, torch.randn(4, 64).half()) == [("elementwise", 256, 8)]
    assert launches(lambda x: x.exp() + 1, torch.randn(4, 7)) == [("elementwise", 256, 1)]
    assert launches(lambda x: x.sum(), torch.randn(4, 7)) == [("rows", 32, 1)]
    assert launches(lambda x: x.sum(0), torch.randn(4, 7)) == [("loops", 256, 1)]
    # the layer norm of a residual sum and the sum itself: one row kernel writes both (an
    # elementwise kernel over both looped over each row's mean and variance in every thread)
    assert launches(lambda x, y: (x + y, F.layer_norm(x + y, (1024,))), torch.randn(4, 1024),
                    torch.randn(4, 1024)) == [("rows", 256, 4)]

    def module(rows):
        name, text = _only_region(lambda x, w: F.layer_norm(x, (64,), w), torch.randn(rows, 64), torch.randn(64))
        return region_kernels(text.replace(f"@{name}(", "@f("), "f").module

    assert module(3) == module(1000)


def test_policy_auto_keeps_no_kernel_that_loops_over_reductions_in_few_threads(emulated_cuda_executor):
    """A reduction a thread computes in a loop inside another's loop (a layer norm's row statistics
    in its backward's column sums), or a loop over a whole row in one thread (cross-entropy's mean),
    took 200 ms and 9.5 s on an H200: policy auto gives such regions (or their tails) to torch."""
    from thunder.lowering import executors

    def kernels(fn, *args):
        name, text = _only_region(fn, *args)
        k = region_kernels(text, name)
        return [(launch.schedule, launch.nested, launch.count(k.out_shapes)) for launch in k.launches], \
            executors.get("cuda").runs_well(text, name)

    x, g, t = torch.randn(64, 100), torch.randn(64, 100), torch.randint(0, 100, (64,))
    assert kernels(lambda x, t: F.cross_entropy(x, t), x, t) == ([("loops", 3, 1)], False)
    assert kernels(lambda x, g: (g * (x - x.mean(-1, keepdim=True))).sum(0), x, g) == ([("loops", 1, 100)], False)
    assert kernels(lambda x: (x * 2).sum(0), torch.randn(8, 2048)) == ([("loops", 0, 2048)], True)
    # a bias gradient's sum over many rows: 3.4 ms in 4096 threads looping over 8192 rows on an H200
    assert kernels(lambda x: (x * 2).sum(0), torch.randn(4096, 2048)) == ([("loops", 0, 2048)], False)
    assert kernels(lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, x, x[0]) == \
        ([("rows", 0, 64)], True)
    # end to end: the loss is torch's, the rows' softmax of another function a kernel
    jf = thunder.jit(lambda x, t: F.cross_entropy(x, t), executors=[emulated_cuda_executor, "torch"])
    x, t = torch.randn(512, 2048), torch.randint(0, 2048, (512,))
    torch.testing.assert_close(jf(x, t), F.cross_entropy(x, t))
    assert "cuda-emulated" not in str(thunder.last_traces(jf)[-1])


def test_misaligned_input_reads_scalars():
    x = torch.randn(4 * 64 + 1)[1:].view(4, 64)  # 4 bytes past an aligned address
    assert x.data_ptr() % 16 != 0
    name, text = _only_region(lambda x: x.exp() + 1, torch.randn(4, 64))
    aligned = region_kernels(text, name).module
    misaligned = region_kernels(text, name, aligned=[]).module
    assert "vector<4xf32>" in aligned and "-> vector<4xf32>" not in misaligned
    torch.testing.assert_close(emulate_region(text, name, x)[0], x.exp() + 1)


# ---- PTX through ptxas
def _retagged(text, device="cuda:0"):
    """The region with CUDA-typed tensors (as a trace of CUDA tensors has them)."""
    with context() as ctx, ir.Location.unknown(ctx):
        module = ir.Module.parse(text)

        def cuda(t):
            if isinstance(t, ir.RankedTensorType):
                return ir.RankedTensorType.get(t.shape, t.element_type, encoding=ir.StringAttr.get(device))
            return t

        def visit(op):
            for r in op.results:
                r.set_type(cuda(r.type))
            for region in op.regions:
                for block in region.blocks:
                    for a in block.arguments:
                        a.set_type(cuda(a.type))
            if op.name == "func.func":
                ft = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
                op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
                    [cuda(t) for t in ft.inputs], [cuda(t) for t in ft.results]))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        return module.operation.get_asm(enable_debug_info=False)


def _gpt_training_regions():
    """(forward regions, backward regions) of the GPT block's training step, fused."""
    args = make_inputs(2, 8, 32) + [2]
    jf = thunder.jit(gpt_block, fusion="always")
    jf(*args).sum().backward()
    # (the backward is fused on its first call, in a module of its own)
    fused = {"forward": next(t for t in thunder.last_traces(jf) if t.producer == "thunder-fuse (forward)"),
             "backward": next(t for t in thunder.last_backward_traces(jf) if t.producer == "thunder-fuse (backward)")}
    regions = {}
    for fn_name, trace in fused.items():
        module = trace.module()
        with module.context:
            f = next(op for op in module.body.operations if ir.StringAttr(op.attributes["sym_name"]).value == fn_name)
            called = set()
            f.operation.walk(lambda op: (called.add(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
                                         if op.name == "func.call" else None) or ir.WalkResult.ADVANCE)
        callees = fuse.fusion_callees(module.operation)
        regions[fn_name] = {n: fuse.region_text(callees[n]) for n in sorted(called) if n in callees}
    return regions


@needs_ptxas
def test_gpt_block_training_regions_ptx():
    """Every fused region of the GPT block's forward and backward, on CUDA tensors: PTX for sm_80
    and sm_90, accepted by ptxas; the regions' kernels, interpreted, equal the CPU kernels."""
    regions = _gpt_training_regions()
    assert regions["forward"] and regions["backward"]
    batch = Batch()
    g = torch.Generator().manual_seed(0)
    for fn_name, texts in regions.items():
        for name, text in texts.items():
            cuda_text = _retagged(text)
            assert '"cuda:0"' in cuda_text
            batch.add(cuda_text, name, label=f"{fn_name} {name}", prefix=f"{fn_name}_{name}_")
            kernel = compile_region(text, name)
            args = [torch.randn(shape, generator=g).to(dtype) for shape, dtype in kernel.inputs]
            for got, expected in zip(emulate_region(text, name, *args), kernel(*args)):
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    ptx = batch.check(("sm_80", "sm_90"))
    for arch, text in ptx.items():
        assert f".target {arch}" in text
        assert text.count(".entry") == len(batch)
        assert "call" not in text.replace("// .globl", "")  # no unresolved (libdevice) calls


@needs_ptxas
def test_failing_kernel_in_a_batch_is_named():
    batch = Batch()
    _, good = _only_region(lambda x: x.exp(), torch.randn(4, 8))
    _, bad = _only_region(lambda x: x.exp() * 3, torch.randn(4, 8))
    batch.add(good, "fusion_0", label="good one")
    batch.add(bad, "fusion_0", label="bad one")
    ptx = batch.ptx("sm_90")
    entries = [line.split()[-1].rstrip("(") for line in ptx.splitlines() if ".entry" in line]
    assert entries == ["r0_k0", "r1_k0"]
    broken = ptx.replace(".entry r1_k0(", ".entry r1_k0(", 1)
    at = broken.index(".entry r1_k0(")
    ret = broken.index("ret;", at)
    broken = broken[:ret] + "bogus.instruction %r1;\n\t" + broken[ret:]
    with pytest.raises(ptx_module.PtxasError) as e:
        ptx_module.ptxas(broken, "sm_90")
    assert e.value.kernels == ["r1_k0"]

    # a kernel that cannot be lowered (pow with a general exponent needs libdevice's powf)
    _, pow_region = _only_region(lambda x: x.exp(), torch.randn(4, 8))
    pow_region = pow_region.replace('"thunder.exp"(%arg0) : (tensor<4x8xf32>)',
                                    '"thunder.pow"(%arg0, %arg0) : (tensor<4x8xf32>, tensor<4x8xf32>)')
    batch.add(pow_region, "fusion_0", label="pow case")
    with pytest.raises(KernelError) as e:
        batch.ptx("sm_90")
    assert e.value.kernels == ["r2_k0"] and "pow case" in str(e.value) and "__nv_powf" in str(e.value)


# ---- launch, up to the driver call
class RecordingDriver:
    """Stands in for cuda.bindings.driver: records calls, reads the kernel parameters back. Like the
    driver, it keeps a stack of current contexts per thread (a handle is an int, 0 none; device
    i's primary context is 100 + i) and refuses module and launch calls where the current context
    is not the primary context of device 0 (FakeDevice's) with CUDA_ERROR_INVALID_CONTEXT (201);
    the context calls are recorded in `context_calls` as (thread name, call, handle)."""

    INVALID_CONTEXT = 201

    def __init__(self, fail=None, arity=0):
        self.calls, self.fail, self.arity = [], fail, arity
        self.context_calls, self.threads = [], threading.local()

    def CUstream(self, handle):
        return ("stream", handle)

    def _result(self, name, *values):
        return ((1 if self.fail == name else 0), *values)

    def _in_context(self, name, *values):
        if self.current() != 100:
            return (self.INVALID_CONTEXT, None)
        return self._result(name, *values)

    def stack(self):
        if not hasattr(self.threads, "stack"):
            self.threads.stack = []
        return self.threads.stack

    def current(self):
        return self.stack()[-1] if self.stack() else 0

    def _context_call(self, name, ctx=None):
        self.context_calls.append((threading.current_thread().name, name, ctx))

    def cuInit(self, flags):
        self.calls.append(("cuInit", flags))
        return self._result("cuInit")

    def cuDeviceGet(self, ordinal):
        return self._result("cuDeviceGet", ordinal)

    def cuDevicePrimaryCtxRetain(self, device):
        self._context_call("cuDevicePrimaryCtxRetain", 100 + device)
        return self._result("cuDevicePrimaryCtxRetain", 100 + device)

    def cuCtxGetCurrent(self):
        self._context_call("cuCtxGetCurrent", self.current())
        return self._result("cuCtxGetCurrent", self.current())

    def cuCtxSetCurrent(self, ctx):
        self._context_call("cuCtxSetCurrent", ctx)
        if self.stack():
            self.stack().pop()
        self.stack().append(ctx)
        return self._result("cuCtxSetCurrent")

    def cuCtxPushCurrent(self, ctx):
        self._context_call("cuCtxPushCurrent", ctx)
        self.stack().append(ctx)
        return self._result("cuCtxPushCurrent")

    def cuCtxPopCurrent(self):
        self._context_call("cuCtxPopCurrent", self.current())
        return self._result("cuCtxPopCurrent", self.stack().pop())

    def cuModuleLoadData(self, image):
        self.calls.append(("cuModuleLoadData", image))
        return self._in_context("cuModuleLoadData", f"module{len(self.calls)}")

    def cuModuleGetFunction(self, module, name):
        self.calls.append(("cuModuleGetFunction", module, name))
        return self._in_context("cuModuleGetFunction", (module, name))

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        # the driver copies the parameters during the call: read them now
        values = _params(params, self.arity) if self.arity else params
        self.calls.append(("cuLaunchKernel", f, (gx, gy, gz), (bx, by, bz), shared, stream, values, extra))
        return self._in_context("cuLaunchKernel")

    def launches(self):
        return [c for c in self.calls if c[0] == "cuLaunchKernel"]


class FakeDevice:
    chip = staticmethod(lambda device: "sm_90")
    stream = staticmethod(lambda device: 0xBEEF)
    index = staticmethod(lambda device: 0)


def _params(address, n):
    """The n 64-bit kernel parameters behind a kernelParams array (void **)."""
    pointers = (ctypes.c_void_p * n).from_address(address)
    return [ctypes.c_uint64.from_address(p).value for p in pointers]


def test_launch_packs_pointers_counts_grid_and_stream():
    driver = RecordingDriver(arity=4)
    launcher = Launcher(driver, FakeDevice)
    fn = lambda x, w: F.layer_norm(x, (300,), w)  # noqa: E731
    x, w = torch.randn(10, 300), torch.randn(300)
    name, text = _only_region(fn, x, w)
    k = CudaKernel(text, name, launcher=launcher, device_type="cpu")
    (out,) = k(x, w)
    assert [c[0] for c in driver.calls] == ["cuInit", "cuModuleLoadData", "cuModuleGetFunction", "cuLaunchKernel"]
    image = driver.calls[1][1]
    assert image.endswith(b"\0") and b".visible .entry k0(" in image and b".target sm_90" in image
    assert driver.calls[2][2] == b"k0"
    _, f, grid, block, shared, stream, params, extra = driver.launches()[0]
    assert grid == (10, 1, 1) and block == (128, 1, 1) and shared == 0 and extra == 0  # a block per row
    assert stream == ("stream", 0xBEEF)
    assert params == [x.data_ptr(), w.data_ptr(), out.data_ptr(), 10]
    assert out.shape == (10, 300) and out.dtype == torch.float32

    # a second call: no new module; a region with other rows shares the PTX (and the module)
    k(x, w)
    x2 = torch.randn(3, 300)
    name2, text2 = _only_region(fn, x2, w)
    (out2,) = CudaKernel(text2, name2, launcher=launcher, device_type="cpu")(x2, w)
    assert sum(c[0] == "cuModuleLoadData" for c in driver.calls) == 1
    _, _, grid, _, _, _, params, _ = driver.launches()[-1]
    assert grid == (3, 1, 1) and params == [x2.data_ptr(), w.data_ptr(), out2.data_ptr(), 3]


def test_repeated_calls_neither_hash_the_ptx_nor_load_again(monkeypatch):
    """A region's call finds its CUfunction by the PTX digest its variant keeps: hashing the PTX
    text on every launch cost ~20 us a call on the H200's host (the sixth device run)."""
    driver = RecordingDriver()
    name, text = _only_region(lambda x: x.exp() * 2, torch.randn(4, 8))
    k = CudaKernel(text, name, launcher=Launcher(driver, FakeDevice), device_type="cpu")
    x = torch.randn(4, 8)
    k(x)
    hashed = []
    real = launch_module.hashlib.sha256
    monkeypatch.setattr(launch_module.hashlib, "sha256", lambda data=b"": hashed.append(len(data)) or real(data))
    for _ in range(5):
        (out,) = k(x)
    assert hashed == [] and len(driver.launches()) == 6
    assert sum(c[0] == "cuModuleLoadData" for c in driver.calls) == 1 and out.shape == (4, 8)


def test_launch_elementwise_grid_and_alignment_variants():
    driver = RecordingDriver()
    k = CudaKernel(_only_region(lambda x: x * 2, torch.randn(50, 64))[1], None,
                   launcher=Launcher(driver, FakeDevice), device_type="cpu")
    (out,) = k(torch.randn(50, 64))
    _, _, grid, block, *_ = driver.launches()[0]
    assert block == (256, 1, 1) and grid == (math.ceil(50 * 64 / (256 * 4)), 1, 1)  # 4 floats per thread
    misaligned = torch.randn(50 * 64 + 1)[1:].view(50, 64)
    k(misaligned)
    loads = [c[1] for c in driver.calls if c[0] == "cuModuleLoadData"]
    assert len(loads) == 2 and b"ld.global.nc.v4" in loads[0] and b"ld.global.nc.v4" not in loads[1]
    transposed = torch.randn(64, 50).t()
    k(transposed)
    assert len(k.variants) == 3


def test_launch_errors():
    fn = lambda x: x.exp()  # noqa: E731
    name, text = _only_region(fn, torch.randn(4, 4))
    k = CudaKernel(text, name, launcher=Launcher(RecordingDriver(fail="cuLaunchKernel"), FakeDevice), device_type="cpu")
    with pytest.raises(CudaDriverError, match="cuLaunchKernel failed"):
        k(torch.randn(4, 4))
    with pytest.raises(TypeError, match="input 0 is .* the region was compiled for"):
        k(torch.randn(4, 5))
    with pytest.raises(TypeError, match="must be a cuda tensor"):
        CudaKernel(text, name)(torch.randn(4, 4))


def test_empty_output_launches_nothing():
    driver = RecordingDriver()
    name, text = _only_region(lambda x: x.exp(), torch.randn(0, 4))
    (out,) = CudaKernel(text, name, launcher=Launcher(driver, FakeDevice), device_type="cpu")(torch.randn(0, 4))
    assert out.shape == (0, 4) and driver.launches() == []


def test_launch_from_any_thread_makes_the_primary_context_current():
    """torch's autograd engine runs a CUDA backward on a thread of its own, where no context may be
    current yet: a region called there makes the device's primary context current before its
    module load and launch; over another context it pushes the primary one and pops it after."""
    driver = RecordingDriver()
    name, text = _only_region(lambda x: x.exp() * 2, torch.randn(4, 8))
    k = CudaKernel(text, name, launcher=Launcher(driver, FakeDevice), device_type="cpu")
    x = torch.randn(4, 8)

    def in_thread(label, before=None):
        def body():
            if before is not None:  # another context current on this thread (another device's)
                driver.cuCtxSetCurrent(before)
            results[label] = k(x)[0], driver.current()
        t = threading.Thread(target=body, name=label)
        t.start()
        t.join()

    results = {}
    in_thread("backward")
    current = results["backward"][1]
    calls = [(c, h) for t, c, h in driver.context_calls if t == "backward"]
    assert calls == [("cuDevicePrimaryCtxRetain", 100), ("cuCtxGetCurrent", 0), ("cuCtxSetCurrent", 100)]
    assert current == 100 and [c[0] for c in driver.calls] == ["cuInit", "cuModuleLoadData", "cuModuleGetFunction",
                                                               "cuLaunchKernel"]
    in_thread("again")  # a second new thread: the module is the primary context's, not loaded again
    assert [(c, h) for t, c, h in driver.context_calls if t == "again"] == [("cuCtxGetCurrent", 0), ("cuCtxSetCurrent", 100)]
    assert [c[0] for c in driver.calls].count("cuModuleLoadData") == 1 and len(driver.launches()) == 2
    in_thread("other device", before=101)
    calls = [(c, h) for t, c, h in driver.context_calls if t == "other device"]
    assert calls == [("cuCtxSetCurrent", 101), ("cuCtxGetCurrent", 101), ("cuCtxPushCurrent", 100),
                     ("cuCtxPopCurrent", 100)]
    assert results["other device"][1] == 101 and len(driver.launches()) == 3  # the thread's context restored
    # the fast path: the primary context current already, one cuCtxGetCurrent
    n = len(driver.context_calls)
    driver.cuCtxSetCurrent(100)
    k(x)
    assert [c for _, c, _ in driver.context_calls[n + 1:]] == ["cuCtxGetCurrent"] and len(driver.launches()) == 4
    # what the device run hit: the same launches without a current context are refused
    driver.cuCtxSetCurrent(0)
    with pytest.raises(CudaDriverError, match="cuLaunchKernel failed: 201"):
        Launcher(driver, FakeDevice).launch(driver.launches()[0][1], 1, 32, [0], None)


def test_ptx_disk_cache(tmp_path, monkeypatch):
    from thunder.lowering.gpu import launch
    from thunder.lowering.linalg import disk_cache

    monkeypatch.setenv("THUNDER_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(launch, "_PTX", {})
    name, text = _only_region(lambda x: x.tanh() * 3, torch.randn(4, 8))
    module = region_kernels(text, name).module
    before = dict(disk_cache.stats)
    first = launch.compile_ptx(module, "sm_80")
    assert len(list(tmp_path.glob("*.ptx"))) == 1
    monkeypatch.setattr(launch, "_PTX", {})
    assert launch.compile_ptx(module, "sm_80") == first
    assert disk_cache.stats["disk"] == before["disk"] + 1 and disk_cache.stats["stored"] == before["stored"] + 1
    monkeypatch.setattr(launch, "_PTX", {})
    assert ".target sm_90" in launch.compile_ptx(module, "sm_90")  # keyed by chip


# ---- executors
def test_executor_options():
    if importlib.util.find_spec("nvfuser") is None:
        with pytest.raises(ImportError, match=r"nvfuser executor needs nvFuser.*nvfuser-cu130-torch210.*"
                                              + f"for torch {torch.__version__}".replace(".", r"\.").replace("+", r"\+")):
            thunder.jit(lambda x: x, executors=["nvfuser"])
    with pytest.raises(ValueError, match="unknown executor 'tensorrt'; expected one of 'torch', 'linalg', 'cuda'"):
        thunder.jit(lambda x: x, executors=["tensorrt"])
    # CPU tensors: the cuda executor claims nothing, linalg still does
    jf = thunder.jit(lambda x: x.exp() * 2, executors=["cuda", "linalg", "torch"], fusion="always")
    x = torch.randn(3, 4)
    torch.testing.assert_close(jf(x), x.exp() * 2)
    assert "(linalg: 2 ops)" in str(thunder.last_traces(jf)[-1])


def test_codegen_binds_cuda_regions_to_cuda_kernels():
    from thunder.runtime.codegen import python_source

    text = """
    func.func @f(%x: tensor<4x8xf32, "cuda:0">, %y: tensor<4x8xf32>) -> (tensor<4x8xf32, "cuda:0">, tensor<4x8xf32>) {
      %0 = "thunder.exp"(%x) : (tensor<4x8xf32, "cuda:0">) -> tensor<4x8xf32, "cuda:0">
      %1 = "thunder.mul"(%0, %0) : (tensor<4x8xf32, "cuda:0">, tensor<4x8xf32, "cuda:0">) -> tensor<4x8xf32, "cuda:0">
      %2 = "thunder.exp"(%y) : (tensor<4x8xf32>) -> tensor<4x8xf32>
      %3 = "thunder.mul"(%2, %2) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
      return %1, %3 : tensor<4x8xf32, "cuda:0">, tensor<4x8xf32>
    }"""
    with context():
        module = ir.Module.parse(text)
        fuse.fuse_module(module.operation, "always")
        kernels = {}
        src = python_source(module, "f", constants=kernels)
    assert "# cuda float32[4, 8] (cuda: 2 ops)" in src and "# cpu float32[4, 8] (linalg: 2 ops)" in src
    assert sorted(type(k).__name__ for k in kernels.values()) == ["CudaKernel", "Kernel"]
    with context():
        module = ir.Module.parse(text)
        fuse.fuse_module(module.operation, "always", executors="linalg")  # no cuda executor: torch calls
        assert len(fuse.fusion_callees(module.operation)) == 1


# ---- nvFuser: the translation, with a recording FusionDefinition
class RecordingFusion:
    def __init__(self):
        self.calls = []
        outer = self

        class Ops:
            def __getattr__(self, name):
                def op(*args, **kwargs):
                    outer.calls.append((name, args, kwargs))
                    return f"T{len(outer.calls)}"
                return op

        self.ops = Ops()

    def define_tensor(self, **kwargs):
        self.calls.append(("define_tensor", (), kwargs))
        return f"T{len(self.calls)}"

    def define_scalar(self, value, dtype):
        self.calls.append(("define_scalar", (value,), {"dtype": dtype}))
        return f"S{len(self.calls)}"

    def add_output(self, t):
        self.calls.append(("add_output", (t,), {}))


class DataType:
    Float, Double, Half, BFloat16, Int, Int32, Bool = "Float", "Double", "Half", "BFloat16", "Int", "Int32", "Bool"


def test_nvfuser_translation():
    from thunder.lowering.gpu import nvfuser

    fn = lambda x, b: (x.half() + b).float().sum(-1)  # noqa: E731
    name, text = _only_region(fn, torch.randn(4, 8), torch.randn(8).half())
    assert nvfuser.accepts(text, name)
    fd = RecordingFusion()
    described = []

    def describe(shape, strides):
        described.append((shape, strides))
        return shape, [True] * len(shape), list(range(len(shape)))[::-1]

    nvfuser.translate(fd, text, name, [(1, 4), (1,)], DataType, describe)
    calls = [(c[0], c[2].get("dtype"), c[2].get("broadcast_dims"), c[2].get("dims")) for c in fd.calls]
    assert described == [([4, 8], [1, 4]), ([8], [1])]  # the call's strides, as given
    assert calls == [
        ("define_tensor", "Float", None, None), ("define_tensor", "Half", None, None),
        ("cast", "Half", None, None),  # x.half()
        ("broadcast_in_dim", None, [1], None),  # b over the rows
        ("add", None, None, None),
        ("cast", "Float", None, None),
        ("sum", "Float", None, [1]),
        ("add_output", None, None, None),
    ]
    add = fd.calls[4]
    assert add[1] == ("T3", "T4")  # the cast x and the broadcast b
    assert fd.calls[3][2]["shape"] == [4, 8]
    # ops without a translation (matmul) are not claimed; integer types nvFuser lacks neither
    with context():
        m = ir.Module.parse('func.func @f(%a: tensor<4xi8>) -> tensor<4xi8> {\n'
                            '  %0 = "thunder.neg"(%a) : (tensor<4xi8>) -> tensor<4xi8>\n  return %0 : tensor<4xi8>\n}')
        neg = next(iter(m.body.operations[0].regions[0].blocks[0].operations)).operation
        assert not nvfuser.supports(neg)


def test_nvfuser_translation_rejects_unknown_prims():
    from thunder.lowering.gpu import nvfuser

    _, text = _only_region(lambda x: x.exp(), torch.randn(4, 8))
    text = text.replace("thunder.exp", "thunder.lgamma")
    with pytest.raises(UnsupportedOp, match="no translation of thunder.lgamma"):
        nvfuser.translate(RecordingFusion(), text, None, [(8, 1)], DataType, lambda s, st: (s, [True], [0]))


def test_region_without_inputs_runs_on_the_device_of_its_types():
    text = """func.func private @fusion_0() -> tensor<4xf32, "cuda:1"> attributes {thunder.executor = "cuda"} {
      %c = arith.constant 2.000000e+00 : f64
      %0 = "thunder.full"(%c) {device = "cuda:1", dtype = f32, shape = array<i64: 4>} : (f64) -> tensor<4xf32, "cuda:1">
      return %0 : tensor<4xf32, "cuda:1">
    }"""
    k = CudaKernel(text, "fusion_0", launcher=Launcher(RecordingDriver(), FakeDevice))
    assert k.device == torch.device("cuda:1") and k.inputs == [] and k.outputs == [((4,), torch.float32)]
    torch.testing.assert_close(emulate_region(text, "fusion_0")[0], torch.full((4,), 2.0))


def test_gpt_block_training_with_cuda_kernels_emulated(emulated_cuda_executor):
    """The GPT block's training step through thunder.jit with every fusible region run as CUDA
    kernels (interpreted): output and gradients equal eager's."""
    args = make_inputs(2, 8, 32) + [2]
    jf = thunder.jit(gpt_block, executors=[emulated_cuda_executor, "torch"], fusion="always")
    out = jf(*args)
    out.square().sum().backward()
    got = [out.detach()] + [a.grad for a in args[:-1]]
    for a in args[:-1]:
        a.grad = None
    eager_out = gpt_block(*args)
    eager_out.square().sum().backward()
    expected = [eager_out.detach()] + [a.grad for a in args[:-1]]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
    fused = [t for t in thunder.last_traces(jf) if t.producer == "thunder-fuse (forward)"]
    assert fused and "(cuda-emulated: " in str(fused[0])
    assert "(cuda-emulated: " in str(thunder.last_backward_traces(jf)[-1])
