"""Checks an op against eager PyTorch along every path thunder runs it.

check(fn, *args, **kwargs): fn is written with torch calls (torch.add, x.view, F.gelu, ...).
It is traced with proxies, emitted as MLIR (verified and round-tripped through text), turned
into Python and run; the result must equal fn(*args, **kwargs) in values, dtypes and shapes.
The same is repeated after the thunder-decompose pass (ltorch ops -> thunder prims), and after
thunder-fuse on the decomposed module: every region the pass claims (single prims included, see
`POLICY`) runs as a compiled CPU kernel (lowering/linalg).

THUNDER_TEST_FUSED=0: skip the fused variant. THUNDER_FUSE_STATS=<file>: append "checks
fused_checks regions" of this process to <file> at exit."""
import atexit
import os

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
STATS = {"checks": 0, "fused": 0, "regions": 0}


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


def check(fn, *args, rtol=None, atol=None, decompose=True, random=False, **kwargs):
    expected = fn(*args, **kwargs)
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
        for label, m in variants:
            kernels = {}
            try:
                src = python_source(m, constants=kernels)
                out = compile_source(src, constants=kernels)(*tensors)
                out = list(out) if isinstance(out, tuple) else [out]
                if not random:
                    _assert_same(out, expected, rtol, atol)
            except Exception as e:
                e.add_note(f"op_harness: in the {label} variant")
                if label == "fused":
                    e.add_note(str(m))
                raise
    return module
