"""Checks an op against eager PyTorch along every path thunder runs it.

check(fn, *args, **kwargs): fn is written with torch calls (torch.add, x.view, F.gelu, ...).
It is traced with proxies, emitted as MLIR (verified and round-tripped through text), turned
into Python and run; the result must equal fn(*args, **kwargs) in values, dtypes and shapes.
The same is repeated after the thunder-decompose pass (ltorch ops -> thunder prims), and after
thunder-fuse on the decomposed module: every region the pass claims (single prims included, see
`POLICY`) runs as a compiled CPU kernel (lowering/linalg). The same regions are also run as the
CUDA executor's kernels, interpreted on the CPU (lowering/gpu/emulate.py: the kernels' own index
arithmetic, schedules and bounds, compared with eager), and collected into a batch whose PTX
`flush_ptx` generates and checks with ptxas for sm_80 and sm_90 (tests/conftest.py calls it
after each test module; distinct regions only).

THUNDER_TEST_FUSED=0: skip the fused variants. THUNDER_TEST_CUDA=0: skip the CUDA ones.
THUNDER_TEST_DEVICE=cuda (benchmarks/gpu/run.sh on a GPU machine): the tensor arguments are
moved to the GPU, so eager runs there and the fused variant's regions run as the cuda executor's
real kernels (the emulated variant is left out).
THUNDER_FUSE_STATS=<file>: append "checks fused_checks regions" of this process to <file> at
exit."""
import atexit
import contextlib
import importlib.util
import os
import warnings

import torch

from thunder.core import trace as tracing
from thunder.core.proxies import TensorProxy, proxy_for
from thunder.dialects.definitions import context
from thunder.dialects.emit import emit
from thunder.dialects.mlir import ir
from thunder.lowering import fuse
from thunder.lowering.decompose import decompose_module
from thunder.runtime.codegen import compile_source, python_source


def _flatten(x, out):
    if isinstance(x, (torch.Tensor, TensorProxy)):
        out.append(x)
    elif isinstance(x, (tuple, list)):
        for y in x:
            _flatten(y, out)
    return out


def trace_module(fn, *args, **kwargs):
    ctx = tracing.TraceCtx()
    with tracing.tracing(ctx):
        pargs = [proxy_for(a, f"a{i}") if isinstance(a, torch.Tensor) else a for i, a in enumerate(args)]
        pkw = {k: proxy_for(v, k) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        ctx.inputs = [tracing.ref(p) for p in [*pargs, *pkw.values()] if isinstance(p, TensorProxy)]
        out = fn(*pargs, **pkw)
    outs = _flatten(out, [])
    return emit(ctx, [tracing.ref(o) for o in outs])


def _assert_same(actual, expected, rtol, atol):
    exp = _flatten(expected, [])
    assert len(actual) == len(exp), f"{len(actual)} outputs, expected {len(exp)}"
    for a, e in zip(actual, exp):
        assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
        assert a.dtype == e.dtype, f"dtype {a.dtype} != {e.dtype}"
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)


# thunder-fuse's policy here: "always" outlines every region the pass claims, single prims
# included and without the cost model ("auto" leaves most of the tests' small tensors to torch),
# so that every fusible op runs through a kernel
POLICY = "always"
FUSED = os.environ.get("THUNDER_TEST_FUSED", "1") != "0"
CUDA = FUSED and os.environ.get("THUNDER_TEST_CUDA", "1") != "0" and importlib.util.find_spec("llvmlite") is not None
DEVICE = os.environ.get("THUNDER_TEST_DEVICE", "cpu")
STATS = {"checks": 0, "fused": 0, "regions": 0}
ARCHS = ("sm_80", "sm_90")
_PTX_BATCH = None
_SEEN = set()  # region texts already emulated and added to a batch


def _test_name():
    return os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]


def _emulated_kernels(m, kernels):
    """Bind each fusion_N of the module to its CUDA kernels run by the emulator; add new regions
    to the PTX batch."""
    global _PTX_BATCH
    from thunder.lowering.gpu import Batch
    from thunder.lowering.gpu.emulate import emulate_region

    if _PTX_BATCH is None:
        _PTX_BATCH = Batch()
    for name, callee in fuse.fusion_callees(m.operation).items():
        text = fuse.region_text(callee).replace(f"@{name}(", "@fusion(", 1)
        if text not in _SEEN:
            _SEEN.add(text)
            _PTX_BATCH.add(text, "fusion", label=_test_name())
        kernels[name] = lambda *ts, text=text: emulate_region(text, "fusion", *ts)


def flush_ptx():
    """PTX of the collected regions' kernels for ARCHS, assembled by ptxas (generated only, with
    a warning, where ptxas is absent); a failure names the kernels and the tests they came from."""
    global _PTX_BATCH
    batch, _PTX_BATCH = _PTX_BATCH, None
    if not batch:
        return
    from thunder.lowering.gpu import ptx

    if ptx.ptxas_path() is None:
        for arch in ARCHS:
            batch.ptx(arch)
        warnings.warn("ptxas (CUDA toolkit) not found: the kernels' PTX was generated, not assembled")
        return
    batch.check(ARCHS)


def fused_variant(module):
    """A copy of the (decomposed) module after thunder-fuse, and the number of regions."""
    m = ir.Module.parse(module.operation.get_asm(enable_debug_info=True))
    fuse.fuse_module(m.operation, policy=POLICY)
    m.operation.verify()
    return m, len(fuse.fusion_callees(m.operation))


def _write_stats():
    path = os.environ.get("THUNDER_FUSE_STATS")
    if path and STATS["checks"]:
        with open(path, "a") as f:
            f.write(f"{STATS['checks']} {STATS['fused']} {STATS['regions']}\n")


atexit.register(_write_stats)


def _on_device(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to(DEVICE).requires_grad_(x.requires_grad) if x.is_leaf else x.to(DEVICE)
    if isinstance(x, (tuple, list)):
        return type(x)(_on_device(y) for y in x)
    return x


def check(fn, *args, rtol=None, atol=None, decompose=True, random=False, **kwargs):
    if DEVICE == "cpu":
        return _check(fn, args, kwargs, fn(*args, **kwargs), rtol, atol, decompose, random)
    # on the GPU: factories without a device make their tensors there too, in eager and in thunder
    # (torch.get_default_device()); eager's float32 is exact (no TF32 in cuDNN's LSTM/conv)
    args, kwargs = _on_device(args), {k: _on_device(v) for k, v in kwargs.items()}
    with torch.device(DEVICE), _no_tf32():
        try:
            expected = fn(*args, **kwargs)
        except Exception as e:  # eager refuses this on the device (int matmul on CUDA, ...): thunder alike
            try:
                _run_traced(fn, args, kwargs)
            except type(e):
                return None
            raise AssertionError(f"eager raises {type(e).__name__} on {DEVICE} ({e}), thunder does not") from None
        return _check(fn, args, kwargs, expected, rtol, atol, decompose, random)


def _run_traced(fn, args, kwargs):
    module = trace_module(fn, *args, **kwargs)
    tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
    with context():
        kernels = {}
        return compile_source(python_source(module, constants=kernels), constants=kernels)(*tensors)


@contextlib.contextmanager
def _no_tf32():
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _check(fn, args, kwargs, expected, rtol, atol, decompose, random):
    tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
    module = trace_module(fn, *args, **kwargs)
    with context():
        text = str(module)
        ir.Module.parse(text)  # verifies every op and the round trip through text
        variants = [("traced", module)]
        if decompose:
            d = ir.Module.parse(module.operation.get_asm(enable_debug_info=True))
            decompose_module(d.operation)
            d.operation.verify()
            variants.append(("decomposed", d))
        if decompose and FUSED:
            try:
                f, n = fused_variant(d)
            except Exception as e:
                e.add_note("op_harness: in thunder-fuse (the fused variant)")
                raise
            STATS["checks"] += 1
            STATS["fused"] += n > 0
            STATS["regions"] += n
            if n:
                variants.append(("fused", f))
                if CUDA and not random and DEVICE == "cpu":
                    variants.append(("cuda (emulated)", f))
        for label, m in variants:
            kernels = {}
            try:
                src = python_source(m, constants=kernels)
                if label == "cuda (emulated)":
                    _emulated_kernels(m, kernels)
                out = compile_source(src, constants=kernels)(*tensors)
                out = list(out) if isinstance(out, tuple) else [out]
                if not random:
                    _assert_same(out, expected, rtol, atol)
            except Exception as e:
                e.add_note(f"op_harness: in the {label} variant")
                if label in ("fused", "cuda (emulated)"):
                    e.add_note(str(m))
                raise
    return module
