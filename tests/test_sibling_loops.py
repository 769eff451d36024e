"""Elementwise loops of one kernel that read a common input are one loop (lowering/linalg/pipeline.py
merge_siblings): linalg's elementwise fusion pulls a shared producer into each consumer's loop, so
a GELU's backward region, which returns the recomputed GELU output (for the next linear's weight
gradient) and GELU's gradient, computed its tanh twice in two loops; merged, it is computed once.
Values and grads as eager's; the kernel's text; what must not merge (a loop reading the other's
result, other shapes)."""
import importlib

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.dialects.mlir import ir
from thunder.lowering.fuse import region_text
from thunder.lowering.linalg import lower_region, lower_to_llvm
from test_fusion import _funcs

PIPELINE = importlib.import_module("thunder.lowering.linalg.pipeline")  # (the package's `pipeline` is a function)


def _mlp(x, w1, w2):
    return F.linear(F.gelu(F.linear(x, w1), approximate="tanh"), w2)


def _mlp_bias(x, w1, b1, w2):  # (the bias gradient's row sum: a reducing loop reading the same input)
    return F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2)


def _backward_regions(jf):
    trace = thunder.last_backward_traces(jf)[-1]
    module = trace.module()
    return [(name, region_text(f)) for name, f in _funcs(module).items() if name.startswith("fusion_")]


def _stage(text, name, stage):
    stages = {}
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(lower_region(text, name).text)
        lower_to_llvm(module, dump=stages.__setitem__)
    return stages[stage]


def _gelu_region(f):
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(4, 32, 64, generator=g), torch.randn(128, 64, generator=g) * 0.1,
            torch.randn(128, generator=g), torch.randn(64, 128, generator=g) * 0.1]
    if f is _mlp:
        del args[2]
    args = [a.requires_grad_() for a in args]
    jf = thunder.jit(f, fusion="always")
    got, want = jf(*args), f(*args)
    torch.testing.assert_close(got, want)
    cot = torch.randn(want.shape, generator=g)
    torch.testing.assert_close(torch.autograd.grad(got, args, cot), torch.autograd.grad(want, args, cot),
                               rtol=1e-4, atol=1e-4)
    # the region computing both the GELU output and its gradient (two results, each from tanh)
    return next((name, text) for name, text in _backward_regions(jf) if text.count("thunder.tanh") == 2)


@pytest.mark.parametrize("f", [_mlp, _mlp_bias])
def test_gelu_output_and_gradient_share_one_tanh(monkeypatch, f):
    name, text = _gelu_region(f)
    fused = _stage(text, name, "tensor")
    # tanh's expansion (lowering/linalg/approx.py) divides once: one tanh, in one loop (and,
    # with the bias, the f64 row sums rounded to f32 in a loop of their own)
    loops = 1 if f is _mlp else 2
    assert fused.count("arith.divf") == 1 and fused.count("linalg.generic") == loops, fused
    # without the merge each result's loop computes it (the test can fail)
    monkeypatch.setattr(PIPELINE, "merge_siblings", lambda module: None)
    fused = _stage(text, name, "tensor")
    assert fused.count("arith.divf") == 2 and fused.count("linalg.generic") == loops + 1


_TWO = """
#map = affine_map<(d0, d1) -> (d0, d1)>
module {{
  func.func @f(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {{
    %e0 = tensor.empty() : tensor<4x8xf32>
    %a = linalg.generic {{indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}}
        ins(%x : tensor<4x8xf32>) outs(%e0 : tensor<4x8xf32>) {{
    ^bb0(%in: f32, %out: f32):
      %s = math.exp %in : f32
      linalg.yield %s : f32
    }} -> tensor<4x8xf32>
    %e1 = tensor.empty() : tensor<4x8xf32>
    %b = linalg.generic {{indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]}}
        ins({first}, {other} : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e1 : tensor<4x8xf32>) {{
    ^bb0(%in: f32, %in2: f32, %out: f32):
      %s = math.exp %in : f32
      %t = arith.mulf %s, %in2 : f32
      linalg.yield %t : f32
    }} -> tensor<4x8xf32>
    return %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
  }}
}}
"""


def _merged(text):
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        PIPELINE.merge_siblings(module)
        module.operation.verify()
        return str(module)


def test_two_loops_reading_one_input_become_one():
    out = _merged(_TWO.format(first="%x", other="%y"))
    assert out.count("linalg.generic") == 1
    # one block argument for the shared input, both results yielded, the second's init made first
    assert "ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<4x8xf32>)" in out, out
    assert out.count("math.exp") == 2 and "linalg.yield" in out and "-> (tensor<4x8xf32>, tensor<4x8xf32>)" in out


def test_a_loop_reading_the_others_result_stays_apart():
    # (it reads the shared input too)
    assert _merged(_TWO.format(first="%a", other="%x")).count("linalg.generic") == 2
