"""An elementwise linalg op writes over an input it reads last (lowering/linalg/pipeline.py
write_over_last_reads): a softmax kernel's exps go straight into the output tile, which the
normalization then scales in place. Values and grads as eager's (values read and written in the
same buffer, the exps also returned, strided and 3-d inputs, masks), and the kernels' text: no
tile-sized temporary left."""
import importlib
import re

import pytest
import torch

import thunder
from thunder.dialects.mlir import ir
from thunder.lowering.fuse import region_text
from thunder.lowering.linalg import lower_region, lower_to_llvm
from test_fusion import _funcs

PIPELINE = importlib.import_module("thunder.lowering.linalg.pipeline")  # (the package's `pipeline` is a function)


def _regions(jf):
    out = []
    for trace in thunder.last_traces(jf):
        if trace.producer.startswith("thunder-fuse"):
            module = trace.module()  # (alive while its functions are printed)
            out += [(name, region_text(f)) for name, f in _funcs(module).items() if name.startswith("fusion_")]
    return out


def _loops_text(text, name):
    stages = {}
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(lower_region(text, name).text)
        lower_to_llvm(module, dump=stages.__setitem__)
    return stages["loops"]


def _tile_buffers(loops):
    """memref.alloc's of 2-d or larger buffers (a tile's values; row sums are 1-d)."""
    return [a for a in re.findall(r"memref\.alloc\([^)]*\)(?: \{[^}]*\})? : memref<([^>]*)>", loops) if a.count("x") >= 2]


def test_softmax_exps_in_the_output_tile(monkeypatch):
    x = torch.randn(64, 300)
    jf = thunder.jit(lambda x: torch.softmax(x, -1))
    torch.testing.assert_close(jf(x), torch.softmax(x, -1))
    (name, text), = _regions(jf)
    assert _tile_buffers(_loops_text(text, name)) == []
    # without the rewrite the exps have a buffer of their own (the test can fail)
    monkeypatch.setattr(PIPELINE, "write_over_last_reads", lambda module: None)
    assert len(_tile_buffers(_loops_text(text, name))) == 1


def _softmax(x):
    return torch.softmax(x, -1)


def _masked(x, mask):
    return torch.softmax((x * 0.125).masked_fill(mask, float("-inf")), -1)


def _exps_too(x):  # the exps read by the normalization and returned: not written over
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True), e


def _log_softmax_and_softmax(x):
    return torch.log_softmax(x, -1), torch.softmax(x, -1)


@pytest.mark.parametrize("f, shapes", [
    (_softmax, [(256, 1000)]),
    (_softmax, [(8, 64, 128)]),
    (_softmax, [(4, 64, 257)]),
    (_masked, [(4, 128, 128), None]),
    (_exps_too, [(128, 515)]),
    (_log_softmax_and_softmax, [(96, 257)]),
])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_values_and_grads_as_eager(f, shapes, layout):
    g = torch.Generator().manual_seed(0)
    args = []
    for s in shapes:
        if s is None:  # a causal mask
            n = shapes[0][-1]
            args.append(torch.ones(n, n, dtype=torch.bool).triu(1))
            continue
        x = torch.randn(*s, generator=g) * 4
        if layout == "transposed":
            x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
        args.append(x.requires_grad_())
    jf = thunder.jit(f)
    got, want = jf(*args), f(*args)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    torch.testing.assert_close(got, want)
    assert _regions(jf), "no kernel ran"
    cot = [torch.randn(w.shape, generator=g) for w in want]
    diffable = [a for a in args if a.requires_grad]
    torch.testing.assert_close(torch.autograd.grad(got, diffable, cot), torch.autograd.grad(want, diffable, cot))
