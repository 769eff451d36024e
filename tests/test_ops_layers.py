"""Layer ops (thunder/ops/layers.py): forward against eager (traced and decomposed), torch's
exception types for bad input, gradients through thunder.jit, batch_norm's running stats."""
import copy

import pytest
import torch
import torch.nn.functional as F

import thunder
from op_harness import check, trace_module
from thunder.dialects.definitions import context
from thunder.dialects.mlir import ir
from thunder.lowering.decompose import decompose_module

f64 = torch.float64
TOL = dict(rtol=1e-4, atol=1e-4)


def r(*shape, dtype=torch.float32):
    return torch.randn(shape).to(dtype)


def pos(*shape, dtype=torch.float32):
    return (torch.rand(shape) + 0.5).to(dtype)


def params(cases):
    """{id: (fn, *args) or (fn, *args, {check kwargs})} -> pytest params (fn, args, kwargs)."""
    out = []
    for k, v in cases.items():
        kw = v[-1] if isinstance(v[-1], dict) else {}
        args = v[1:-1] if kw else v[1:]
        out.append(pytest.param(v[0], args, kw, id=k))
    return out


torch.manual_seed(0)
x4 = r(2, 4, 9, 9)
bn = lambda training, **kw: (lambda x, *a: F.batch_norm(x, *a, training=training, **kw))

CASES = {
    # conv1d / conv2d
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b), x4, r(6, 4, 3, 3), r(6)),
    "conv2d_no_bias": (lambda x, w: F.conv2d(x, w), x4, r(6, 4, 3, 3)),
    "conv2d_stride_pad": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), x4, r(6, 4, 3, 3), r(6)),
    "conv2d_tuples": (lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=(0, 2), dilation=(1, 2)), x4, r(3, 4, 3, 2)),
    "conv2d_list_args": (lambda x, w: F.conv2d(x, w, stride=[1, 2], padding=[1, 1]), x4, r(3, 4, 3, 3)),
    "conv2d_dilation": (lambda x, w: F.conv2d(x, w, dilation=2), x4, r(3, 4, 3, 3)),
    "conv2d_groups": (lambda x, w, b: F.conv2d(x, w, b, groups=2), x4, r(6, 2, 3, 3), r(6)),
    "conv2d_depthwise": (lambda x, w: F.conv2d(x, w, groups=4, padding=1), x4, r(8, 1, 3, 3)),
    "conv2d_same": (lambda x, w: F.conv2d(x, w, padding="same"), x4, r(5, 4, 3, 3)),
    "conv2d_same_even": (lambda x, w: F.conv2d(x, w, padding="same", dilation=(1, 3)), x4, r(5, 4, 4, 2)),
    "conv2d_valid": (lambda x, w: F.conv2d(x, w, padding="valid"), x4, r(5, 4, 3, 3)),
    "conv2d_unbatched": (lambda x, w, b: F.conv2d(x, w, b, padding=1), r(4, 7, 7), r(3, 4, 3, 3), r(3)),
    "conv2d_kw": (lambda x, w, b: F.conv2d(x, weight=w, bias=b, stride=2), x4, r(3, 4, 3, 3), r(3)),
    "conv2d_torch": (lambda x, w: torch.conv2d(x, w, None, 1, 1), x4, r(3, 4, 3, 3)),
    "conv2d_f64": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), r(2, 4, 9, 9, dtype=f64),
                   r(6, 4, 3, 3, dtype=f64), r(6, dtype=f64)),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b), r(2, 4, 11), r(6, 4, 3), r(6)),
    "conv1d_stride_dilation": (lambda x, w: F.conv1d(x, w, stride=2, padding=2, dilation=2), r(2, 4, 11), r(6, 4, 3)),
    "conv1d_groups": (lambda x, w: F.conv1d(x, w, groups=2), r(2, 4, 11), r(6, 2, 3)),
    "conv1d_same_even": (lambda x, w: F.conv1d(x, w, padding="same"), r(2, 4, 11), r(6, 4, 4)),
    "conv1d_unbatched_f64": (lambda x, w: F.conv1d(x, w, padding=1), r(4, 11, dtype=f64), r(6, 4, 3, dtype=f64)),
    # conv_transpose2d
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b), x4, r(4, 3, 3, 3), r(3)),
    "conv_transpose2d_stride": (lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1), x4,
                                r(4, 3, 3, 3)),
    "conv_transpose2d_groups_dilation": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(2, 1), groups=2,
                                                                            dilation=(1, 2)),
                                         x4, r(4, 3, 3, 2), r(6)),
    "conv_transpose2d_unbatched_f64": (lambda x, w: F.conv_transpose2d(x, w, stride=3, output_padding=(2, 0)),
                                       r(4, 5, 5, dtype=f64), r(4, 2, 3, 3, dtype=f64)),
    # max_pool2d
    "max_pool2d": (lambda x: F.max_pool2d(x, 3), x4),
    "max_pool2d_stride_pad": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1), x4),
    "max_pool2d_ceil": (lambda x: F.max_pool2d(x, 2, stride=2, ceil_mode=True), x4),
    "max_pool2d_ceil_pad": (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), r(1, 2, 10, 10)),
    "max_pool2d_dilation": (lambda x: F.max_pool2d(x, (2, 3), stride=(1, 2), dilation=(2, 1)), x4),
    "max_pool2d_unbatched": (lambda x: F.max_pool2d(x, 2), r(3, 8, 7)),
    "max_pool2d_torch": (lambda x: torch.max_pool2d(x, [2, 2]), x4),
    "max_pool2d_f64": (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), r(2, 3, 8, 8, dtype=f64)),
    # avg_pool2d
    "avg_pool2d_tiles": (lambda x: F.avg_pool2d(x, 3), x4),
    "avg_pool2d_tiles_rect": (lambda x: F.avg_pool2d(x, (2, 4)), r(2, 3, 6, 8)),
    "avg_pool2d_stride_pad": (lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), x4),
    "avg_pool2d_no_count_pad": (lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), x4),
    "avg_pool2d_ceil": (lambda x: F.avg_pool2d(x, 2, ceil_mode=True), x4),
    "avg_pool2d_ceil_pad": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), x4),
    "avg_pool2d_divisor": (lambda x: F.avg_pool2d(x, 3, divisor_override=2), x4),
    "avg_pool2d_divisor_overlap": (lambda x: F.avg_pool2d(x, 3, 1, 1, divisor_override=5), x4),
    "avg_pool2d_unbatched": (lambda x: F.avg_pool2d(x, 2), r(3, 8, 6)),
    "avg_pool2d_f64": (lambda x: F.avg_pool2d(x, 3, 2, 1), r(2, 3, 8, 8, dtype=f64)),
    # adaptive_avg_pool2d
    "adaptive_avg_pool2d_divisible": (lambda x: F.adaptive_avg_pool2d(x, 3), x4),
    "adaptive_avg_pool2d_uneven": (lambda x: F.adaptive_avg_pool2d(x, (4, 5)), x4),
    "adaptive_avg_pool2d_none": (lambda x: F.adaptive_avg_pool2d(x, (None, 2)), r(2, 3, 5, 7)),
    "adaptive_avg_pool2d_global": (lambda x: F.adaptive_avg_pool2d(x, 1), x4),
    "adaptive_avg_pool2d_unbatched": (lambda x: F.adaptive_avg_pool2d(x, (2, 3)), r(3, 7, 7)),
    "adaptive_avg_pool2d_f64": (lambda x: F.adaptive_avg_pool2d(x, (3, 4)), r(2, 3, 7, 9, dtype=f64)),
    # batch_norm: eval, training without running stats (training with them: test_batch_norm_* below)
    "batch_norm_eval": (bn(False), x4, r(4), pos(4), r(4), r(4)),
    "batch_norm_eval_no_affine": (bn(False), x4, r(4), pos(4)),
    "batch_norm_eval_2d_eps": (bn(False, eps=1e-2), r(5, 4), r(4), pos(4), r(4)),
    "batch_norm_train_no_stats": (bn(True), x4, None, None, r(4), r(4)),
    "batch_norm_train_no_stats_no_affine": (bn(True), r(3, 4, 5), None, None),
    "batch_norm_eval_f64": (bn(False), r(2, 4, 3, 3, dtype=f64), r(4, dtype=f64), pos(4, dtype=f64),
                            r(4, dtype=f64), r(4, dtype=f64)),
    "batch_norm_train_no_stats_f64": (bn(True), r(3, 4, 5, dtype=f64), None, None, r(4, dtype=f64)),
    # group_norm
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), x4, r(4), r(4)),
    "group_norm_no_affine": (lambda x: F.group_norm(x, 4), x4),
    "group_norm_one_group_eps": (lambda x, w: F.group_norm(x, 1, w, eps=1e-3), r(2, 6, 5), r(6)),
    "group_norm_2d": (lambda x: F.group_norm(x, 3), r(4, 6)),
    "group_norm_f64": (lambda x, w, b: F.group_norm(x, 2, w, b), r(2, 4, 3, 3, dtype=f64), r(4, dtype=f64),
                       r(4, dtype=f64)),
    # rms_norm
    "rms_norm": (lambda x: F.rms_norm(x, (9,)), x4),
    "rms_norm_weight": (lambda x, w: F.rms_norm(x, [9, 9], w), x4, r(9, 9)),
    "rms_norm_eps": (lambda x, w: F.rms_norm(x, (9,), w, eps=1e-2), x4, r(9)),
    "rms_norm_torch": (lambda x, w: torch.rms_norm(x, (5,), w), r(3, 5), r(5)),
    "rms_norm_f64": (lambda x, w: F.rms_norm(x, (9,), w), r(2, 3, 9, dtype=f64), r(9, dtype=f64)),
    "rms_norm_f16": (lambda x, w: F.rms_norm(x, (8,), w), r(3, 8, dtype=torch.float16), r(8, dtype=torch.float16),
                     dict(rtol=1e-2, atol=1e-2)),
    # (the result in the input's dtype, the weight applied before its one rounding)
    "rms_norm_bf16_f32_weight": (lambda x, w: F.rms_norm(x, (8,), w), r(3, 8, dtype=torch.bfloat16), r(8),
                                 dict(rtol=1e-2, atol=1e-2)),
    "rms_norm_f32_bf16_weight": (lambda x, w: F.rms_norm(x, (8,), w), r(3, 8), r(8, dtype=torch.bfloat16)),
    # bilinear
    "bilinear": (lambda a, b, w, c: F.bilinear(a, b, w, c), r(5, 3), r(5, 4), r(6, 3, 4), r(6)),
    "bilinear_no_bias": (lambda a, b, w: F.bilinear(a, b, w), r(5, 3), r(5, 4), r(6, 3, 4)),
    "bilinear_batch_dims": (lambda a, b, w, c: torch.bilinear(a, b, w, c), r(2, 5, 3), r(2, 5, 4), r(6, 3, 4), r(6)),
    "bilinear_f64": (lambda a, b, w: F.bilinear(a, b, w), r(5, 3, dtype=f64), r(5, 4, dtype=f64),
                     r(2, 3, 4, dtype=f64)),
    # interpolate (the op is named bilinear's neighbour but is F.interpolate)
    "interp_nearest_scale": (lambda x: F.interpolate(x, scale_factor=1.5), r(2, 3, 5, 7)),
    "interp_nearest_size": (lambda x: (F.interpolate(x, size=(9, 4)), F.interpolate(x, scale_factor=2)), r(2, 3, 5, 7)),
    "interp_nearest_1d_3d": (lambda a, b: (F.interpolate(a, size=4), F.interpolate(b, scale_factor=(2, 0.5, 1.3))),
                             r(2, 3, 6), r(1, 2, 3, 4, 5)),
    "interp_nearest_exact": (lambda x: F.interpolate(x, size=(3, 11), mode="nearest-exact"), r(2, 3, 5, 7)),
    "interp_bilinear": (lambda x: (F.interpolate(x, size=(9, 4), mode="bilinear"),
                                   F.interpolate(x, scale_factor=(1.7, 0.6), mode="bilinear")), r(2, 3, 5, 7)),
    "interp_bilinear_align": (lambda x: F.interpolate(x, size=(9, 13), mode="bilinear", align_corners=True),
                              r(2, 3, 5, 7)),
    "interp_bilinear_recompute": (lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear",
                                                          recompute_scale_factor=True), r(1, 2, 5, 7)),
    "interp_linear_trilinear": (lambda a, b: (F.interpolate(a, size=11, mode="linear"),
                                              F.interpolate(b, size=(4, 3, 8), mode="trilinear", align_corners=True)),
                                r(2, 3, 6), r(1, 2, 3, 4, 5)),
    "interp_bicubic": (lambda x: (F.interpolate(x, size=(9, 4), mode="bicubic"),
                                  F.interpolate(x, scale_factor=2.5, mode="bicubic", align_corners=True)),
                       r(2, 3, 5, 7)),
    "interp_area": (lambda a, b: (F.interpolate(a, size=(2, 3), mode="area"), F.interpolate(b, size=4, mode="area")),
                    r(2, 3, 5, 7), r(2, 3, 6)),
    "interp_noncontig_f64": (lambda x: F.interpolate(x, size=(6, 6), mode="bilinear"),
                             r(2, 3, 7, 5, dtype=f64).transpose(2, 3)),
    "interp_f16": (lambda x: (F.interpolate(x, size=(9, 4), mode="bilinear"), F.interpolate(x, scale_factor=2)),
                   r(1, 2, 5, 7, dtype=torch.float16), dict(rtol=1e-2, atol=1e-2)),
    "interp_bf16": (lambda x: F.interpolate(x, size=(9, 4), mode="bicubic"), r(1, 2, 5, 7, dtype=torch.bfloat16),
                    dict(rtol=3e-2, atol=3e-2)),
}


@pytest.mark.parametrize("fn,args,kw", params(CASES))
def test_forward(fn, args, kw):
    check(fn, *args, **{**TOL, **kw})


# --------------------------------------------------------------------------------------------
# bad input: the exception type eager raises


ERRORS = {
    "conv2d_channels": (lambda x, w: F.conv2d(x, w), x4, r(6, 3, 3, 3)),
    "conv2d_groups_channels": (lambda x, w: F.conv2d(x, w, groups=3), x4, r(6, 2, 3, 3)),
    "conv2d_bias_size": (lambda x, w, b: F.conv2d(x, w, b), x4, r(6, 4, 3, 3), r(5)),
    "conv2d_kernel_too_big": (lambda x, w: F.conv2d(x, w), r(1, 4, 2, 2), r(6, 4, 3, 3)),
    "conv2d_input_rank": (lambda x, w: F.conv2d(x, w), r(4, 9), r(6, 4, 3, 3)),
    "conv2d_bad_padding_string": (lambda x, w: F.conv2d(x, w, padding="full"), x4, r(6, 4, 3, 3)),
    "conv2d_same_strided": (lambda x, w: F.conv2d(x, w, padding="same", stride=2), x4, r(6, 4, 3, 3)),
    "conv2d_negative_padding": (lambda x, w: F.conv2d(x, w, padding=-1), x4, r(6, 4, 3, 3)),
    "conv2d_zero_stride": (lambda x, w: F.conv2d(x, w, stride=0), x4, r(6, 4, 3, 3)),
    "conv2d_stride_length": (lambda x, w: F.conv2d(x, w, stride=(1, 1, 1)), x4, r(6, 4, 3, 3)),
    "conv2d_dtype": (lambda x, w: F.conv2d(x, w), x4, r(6, 4, 3, 3, dtype=f64)),
    "conv1d_channels": (lambda x, w: F.conv1d(x, w), r(2, 4, 8), r(6, 3, 3)),
    "conv_transpose2d_output_padding": (lambda x, w: F.conv_transpose2d(x, w, output_padding=1), x4, r(4, 2, 3, 3)),
    "conv_transpose2d_channels": (lambda x, w: F.conv_transpose2d(x, w), x4, r(3, 2, 3, 3)),
    "max_pool2d_padding": (lambda x: F.max_pool2d(x, 3, padding=2), x4),
    "max_pool2d_too_small": (lambda x: F.max_pool2d(x, 3), r(1, 1, 2, 2)),
    "max_pool2d_rank": (lambda x: F.max_pool2d(x, 1), r(2, 2)),
    "max_pool2d_kernel_length": (lambda x: F.max_pool2d(x, (1, 2, 3)), x4),
    "avg_pool2d_padding": (lambda x: F.avg_pool2d(x, 2, padding=2), x4),
    "avg_pool2d_too_small": (lambda x: F.avg_pool2d(x, 3), r(1, 1, 2, 2)),
    "avg_pool2d_divisor_zero": (lambda x: F.avg_pool2d(x, 2, divisor_override=0), x4),
    "adaptive_avg_pool2d_negative": (lambda x: F.adaptive_avg_pool2d(x, -1), x4),
    "adaptive_avg_pool2d_length": (lambda x: F.adaptive_avg_pool2d(x, (1, 2, 3)), x4),
    "adaptive_avg_pool2d_rank": (lambda x: F.adaptive_avg_pool2d(x, 2), r(3, 4)),
    "batch_norm_running_mean_size": (bn(False), x4, r(3), pos(4)),
    "batch_norm_weight_size": (bn(False), x4, r(4), pos(4), r(3)),
    "batch_norm_one_value_per_channel": (bn(True), r(1, 4), None, None),
    "batch_norm_eval_without_stats": (bn(False), x4, None, None),
    "group_norm_groups": (lambda x: F.group_norm(x, 3), x4),
    "group_norm_weight": (lambda x, w: F.group_norm(x, 2, w), x4, r(3)),
    "group_norm_rank": (lambda x: F.group_norm(x, 1), r(4)),
    "rms_norm_shape": (lambda x: F.rms_norm(x, (7,)), x4),
    "rms_norm_weight": (lambda x, w: F.rms_norm(x, (9,), w), x4, r(8)),
    "rms_norm_int_shape": (lambda x: F.rms_norm(x, 9), x4),
    "bilinear_input2_size": (lambda a, b, w: F.bilinear(a, b, w), r(2, 3), r(2, 4), r(5, 3, 5)),
    "bilinear_batch": (lambda a, b, w: F.bilinear(a, b, w), r(2, 3), r(3, 4), r(5, 3, 4)),
    "bilinear_bias": (lambda a, b, w, c: F.bilinear(a, b, w, c), r(2, 3), r(2, 4), r(5, 3, 4), r(4)),
    "bilinear_weight_rank": (lambda a, b, w: F.bilinear(a, b, w), r(2, 3), r(2, 4), r(5, 3)),
    "interp_mode_rank": (lambda x: F.interpolate(x, size=5, mode="linear"), x4),
    "interp_bilinear_3d": (lambda x: F.interpolate(x[0], size=5, mode="bilinear"), x4),
    "interp_size_and_scale": (lambda x: F.interpolate(x, size=(5, 7), scale_factor=2.0), x4),
    "interp_no_size": (lambda x: F.interpolate(x), x4),
    "interp_size_length": (lambda x: F.interpolate(x, size=(5,)), x4),
    "interp_scale_length": (lambda x: F.interpolate(x, scale_factor=[2, 3, 2]), x4),
    "interp_align_nearest": (lambda x: F.interpolate(x, size=5, align_corners=True), x4),
    "interp_bad_mode": (lambda x: F.interpolate(x, size=3, mode="bogus"), x4),
    "interp_zero_size": (lambda x: F.interpolate(x, scale_factor=0.1), x4),
    "interp_int": (lambda x: F.interpolate(x.long(), size=3), x4),
    "interp_antialias_nearest": (lambda x: F.interpolate(x, size=3, antialias=True), x4),
}


@pytest.mark.parametrize("fn,args,kw", params(ERRORS))
def test_errors_match_eager(fn, args, kw):
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(eager.type):
        trace_module(fn, *args)


def test_max_pool2d_return_indices_runs_as_torch():
    # the registered op refuses return_indices=True; the fallback records the torch function
    # F.max_pool2d dispatches to
    module = check(lambda x: F.max_pool2d(x, 2, return_indices=True), x4)
    assert 'callable = "torch.nn.functional.max_pool2d_with_indices"' in str(module)


# --------------------------------------------------------------------------------------------
# gradients through thunder.jit, float64


def g64(*shape):
    return torch.randn(shape, dtype=f64, requires_grad=True)


def pos64(*shape):
    return (torch.rand(shape, dtype=f64) + 0.5).requires_grad_()


GRADS = {
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), g64(2, 3, 6, 6), g64(4, 3, 3, 3), g64(4)),
    "conv2d_stride_dilation_groups": (lambda x, w, b: F.conv2d(x, w, b, stride=2, dilation=(1, 2), groups=3),
                                      g64(2, 3, 9, 9), g64(6, 1, 3, 2), g64(6)),
    "conv2d_same_even": (lambda x, w: F.conv2d(x, w, padding="same", dilation=(1, 3)), g64(2, 3, 6, 7),
                         g64(4, 3, 4, 2)),
    "conv2d_unbatched": (lambda x, w: F.conv2d(x, w, padding=(1, 0)), g64(3, 6, 6), g64(4, 3, 3, 3)),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), g64(2, 3, 9), g64(4, 3, 3), g64(4)),
    "conv1d_same_even": (lambda x, w: F.conv1d(x, w, padding="same"), g64(2, 3, 9), g64(4, 3, 2)),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
                         g64(2, 4, 5, 5), g64(4, 3, 3, 3), g64(3)),
    "conv_transpose2d_groups": (lambda x, w: F.conv_transpose2d(x, w, groups=2, dilation=2), g64(2, 4, 5, 5),
                                g64(4, 3, 3, 3)),
    "max_pool2d": (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), g64(2, 3, 8, 8)),
    "max_pool2d_dilation_unbatched": (lambda x: F.max_pool2d(x, 2, dilation=2), g64(3, 7, 7)),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), g64(2, 3, 8, 8)),
    "avg_pool2d_tiles_divisor": (lambda x: F.avg_pool2d(x, 2, divisor_override=3), g64(2, 3, 8, 8)),
    "adaptive_avg_pool2d_uneven": (lambda x: F.adaptive_avg_pool2d(x, (3, 5)), g64(2, 3, 8, 7)),
    "adaptive_avg_pool2d_divisible": (lambda x: F.adaptive_avg_pool2d(x, 2), g64(3, 8, 8)),
    "batch_norm_train": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), g64(4, 3, 5, 5),
                         g64(3), g64(3)),
    "batch_norm_train_no_affine": (lambda x: F.batch_norm(x, None, None, training=True), g64(6, 3)),
    "batch_norm_eval": (lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b), g64(4, 3, 5), torch.randn(3, dtype=f64),
                        torch.rand(3, dtype=f64) + 0.5, g64(3), g64(3)),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), g64(2, 6, 4, 4), g64(6), g64(6)),
    "group_norm_no_affine": (lambda x: F.group_norm(x, 3, eps=1e-3), g64(2, 6, 5)),
    "rms_norm": (lambda x, w: F.rms_norm(x, (4, 8), w), g64(2, 3, 4, 8), g64(4, 8)),
    "rms_norm_no_weight": (lambda x: F.rms_norm(x, (8,), eps=1e-3), g64(3, 8)),
    "bilinear": (lambda a, b, w, c: F.bilinear(a, b, w, c), g64(2, 5, 3), g64(2, 5, 4), g64(6, 3, 4), g64(6)),
    "bilinear_1d_no_bias": (lambda a, b, w: F.bilinear(a, b, w), g64(3), g64(4), g64(2, 3, 4)),
    "interp_nearest": (lambda x: F.interpolate(x, scale_factor=(1.5, 0.7)), g64(2, 3, 5, 7)),
    "interp_bilinear": (lambda x: F.interpolate(x, size=(9, 4), mode="bilinear"), g64(2, 3, 5, 7)),
    "interp_bilinear_align": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
                              g64(1, 2, 4, 3)),
    "interp_bicubic": (lambda x: F.interpolate(x, size=(9, 4), mode="bicubic"), g64(1, 2, 5, 7)),
    "interp_linear_area": (lambda x: F.interpolate(x, size=9, mode="linear") + F.interpolate(x, size=9, mode="area"),
                           g64(2, 3, 5)),
}


@pytest.mark.parametrize("fn,args,kw", params(GRADS))
def test_grad(fn, args, kw):
    jf = thunder.jit(fn)
    out, expected = jf(*args), fn(*args)
    torch.testing.assert_close(out, expected)
    inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    cot = torch.randn_like(expected)
    actual = torch.autograd.grad(out, inputs, cot)
    want = torch.autograd.grad(expected, inputs, cot)
    for a, e in zip(actual, want):
        torch.testing.assert_close(a, e)


def test_conv2d_grad_sum():
    x, w, b = g64(2, 3, 6, 6), g64(4, 3, 3, 3), g64(4)
    fn = lambda x, w, b: F.conv2d(x, w, b, padding=1)
    jf = thunder.jit(fn)
    got = torch.autograd.grad(jf(x, w, b).sum(), (x, w, b))
    want = torch.autograd.grad(fn(x, w, b).sum(), (x, w, b))
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)


def test_small_cnn_trains_like_eager():
    torch.manual_seed(1)
    x = torch.randn(4, 3, 8, 8, dtype=f64)
    ps = [g64(6, 3, 3, 3), g64(6), g64(6), g64(6), g64(12, 6, 3, 3)]

    def net(x, w1, b1, gw, gb, w2):
        h = F.relu(F.group_norm(F.conv2d(x, w1, b1, padding=1), 2, gw, gb))
        h = F.max_pool2d(h, 2)
        h = F.conv2d(h, w2, stride=2)
        return F.adaptive_avg_pool2d(h, 1).sum()

    got = torch.autograd.grad(thunder.jit(net)(x, *ps), ps)
    want = torch.autograd.grad(net(x, *ps), ps)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)


# --------------------------------------------------------------------------------------------
# batch_norm in training with running stats: torch updates them in place


def _stats(dtype=f64):
    return torch.randn(3, dtype=dtype), torch.rand(3, dtype=dtype) + 0.5


@pytest.mark.parametrize("requires_grad", [False, True])
def test_batch_norm_running_stats_update_like_eager(requires_grad):
    x = torch.randn(4, 3, 5, 5, dtype=f64, requires_grad=requires_grad)
    w, b = torch.randn(3, dtype=f64, requires_grad=requires_grad), torch.randn(3, dtype=f64)
    rm, rv = _stats()
    rm_e, rv_e = rm.clone(), rv.clone()
    fn = lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=True, momentum=0.3)
    out = thunder.jit(fn)(x, rm, rv, w, b)
    expected = fn(x, rm_e, rv_e, w, b)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(rm, rm_e)
    torch.testing.assert_close(rv, rv_e)
    if requires_grad:
        cot = torch.randn_like(out)
        for a, e in zip(torch.autograd.grad(out, (x, w), cot), torch.autograd.grad(expected, (x, w), cot)):
            torch.testing.assert_close(a, e)


def test_batch_norm_twice_updates_twice():
    """Not Pure: CSE must not merge two identical calls, DCE must not drop an unused one."""
    x = torch.randn(4, 3, 5, dtype=f64)
    rm, rv = _stats()
    rm_e, rv_e = rm.clone(), rv.clone()

    def fn(x, m, v):
        F.batch_norm(x, m, v, training=True)  # result unused
        a = F.batch_norm(x, m, v, training=True)
        return a + F.batch_norm(x, m, v, training=True)

    torch.testing.assert_close(thunder.jit(fn)(x, rm, rv), fn(x, rm_e, rv_e))
    torch.testing.assert_close(rm, rm_e)
    torch.testing.assert_close(rv, rv_e)


def test_batch_norm_train_with_stats_traced_not_decomposed():
    x = r(4, 3, 5)
    rm, rv = _stats(torch.float32)
    fn = lambda x, m, v: F.batch_norm(x, m, v, training=True)
    check(fn, x, rm.clone(), rv.clone(), decompose=False, **TOL)
    module = trace_module(fn, x, rm, rv)
    with context():
        m = ir.Module.parse(str(module))
        with pytest.raises(NotImplementedError):
            decompose_module(m.operation)


# --------------------------------------------------------------------------------------------
# the traced module holds the ltorch op; decompositions reach prims

NAMES = {
    "conv1d": (lambda x, w: F.conv1d(x, w), r(1, 2, 5), r(3, 2, 3)),
    "conv2d": (lambda x, w: F.conv2d(x, w), x4, r(3, 4, 3, 3)),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w), x4, r(4, 2, 3, 3)),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), x4),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), x4),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 2), x4),
    "batch_norm": (bn(True), x4, None, None),
    "group_norm": (lambda x: F.group_norm(x, 2), x4),
    "rms_norm": (lambda x: F.rms_norm(x, (9,)), x4),
    "bilinear": (lambda a, b, w: F.bilinear(a, b, w), r(2, 3), r(2, 4), r(5, 3, 4)),
    "interpolate": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), x4),
}


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_interpolate_antialias_runs_as_torch_with_its_gradient(mode):
    """antialias=True has no decomposition: torch's own call runs it (the fallback), and its
    gradient is torch's (it was refused in training)."""
    f = lambda x: F.interpolate(x * 2, size=(3, 5), mode=mode, antialias=True).square()  # noqa: E731
    x = r(1, 2, 8, 8)
    torch.testing.assert_close(thunder.jit(f)(x), f(x))
    xe, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = r(1, 2, 3, 5)
    f(xe).backward(g)
    thunder.jit(f)(xt).backward(g)
    torch.testing.assert_close(xt.grad, xe.grad)


@pytest.mark.parametrize("name", list(NAMES))
def test_traced_op_name(name):
    fn, *args = NAMES[name]
    assert f"ltorch.{name}" in str(trace_module(fn, *args))


@pytest.mark.parametrize("fn,args,prim", [
    (lambda x, w: F.conv2d(x, w, padding="same"), (x4, r(3, 4, 2, 2)), "thunder.convolution"),
    (lambda x, w: F.conv_transpose2d(x, w), (x4, r(4, 2, 3, 3)), "thunder.convolution"),
    (lambda x: F.max_pool2d(x, 2), (x4,), "thunder.max_pool2d_with_indices"),
    (lambda x: F.avg_pool2d(x, 3), (x4,), "thunder.sum"),
    (lambda x: F.avg_pool2d(x, 2), (x4,), "thunder.avg_pool2d"),
    (lambda x: F.adaptive_avg_pool2d(x, 4), (x4,), "thunder.adaptive_avg_pool2d"),
    (lambda x: F.adaptive_avg_pool2d(x, 3), (x4,), "thunder.sum"),
])
def test_decomposes_into_prims(fn, args, prim):
    module = trace_module(fn, *args)
    with context():
        m = ir.Module.parse(str(module))
        decompose_module(m.operation)
        text = str(m)
    assert prim in text and "ltorch." not in text


def test_normalized_attributes():
    """Int-or-tuple parameters reach the IR as tuples; stride=None as kernel_size."""
    text = str(trace_module(lambda x: F.max_pool2d(x, 3), x4))
    assert "kernel_size = array<i64: 3, 3>" in text and "stride = array<i64: 3, 3>" in text


# --------------------------------------------------------------------------------------------
# a CNN's training step: eager's kernels where they are the fast ones


def test_a_cnn_training_step_keeps_pool_indices_batch_stats_and_one_conv_backward_per_layer():
    """The forward keeps max_pool2d's indices (the backward recomputed them from the input: a
    second pooling pass), an affine batch norm with running stats trains as torch's kernels (its
    backward reads the batch statistics; the decomposed backward's fused kernel reduced each
    channel in one thread, 5x torch's time on an NCHW gradient), and a convolution whose input
    and weight both need gradients has one convolution_backward call: eager's values, gradients
    and running statistics."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1), torch.nn.Conv2d(8, 4, 3, bias=False))
    reference = copy.deepcopy(model)
    jf = thunder.jit(model)
    for _ in range(2):
        x = torch.randn(2, 3, 12, 10)
        out, expected = jf(x), reference(x)
        torch.testing.assert_close(out, expected)
        cot = torch.randn_like(out)
        out.backward(cot)
        expected.backward(cot)
    for p, e in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, e.grad)
    torch.testing.assert_close(model[1].running_mean, reference[1].running_mean)
    torch.testing.assert_close(model[1].running_var, reference[1].running_var)
    forward, backward = str(thunder.last_traces(jf)[-1]), str(thunder.last_backward_traces(jf)[-1])
    assert forward.count("max_pool2d_with_indices(") == 1 and "max_pool2d_with_indices(" not in backward
    assert "torch.ops.aten.native_batch_norm(" in forward and backward.count("impl.native_batch_norm_backward(") == 1
    # (the second conv's input needs a gradient; the first's, the model's input, does not)
    assert backward.count("impl.convolution_backward(") == 1
    assert backward.count("impl.convolution_backward_weight(") == 1 and "convolution_backward_input" not in backward
