"""The VJP rules of the ops of thunder/ops/layers.py and normalization.py (registered on them with OpDef.vjp)."""
from thunder.ops import prims
from thunder.ops.decomp_utils import expand_to, opmath_dtype, to_dtype
from thunder.ops.layers import (_as_4d, _conv_vjp, _flat, _like, adaptive_avg_pool2d, avg_pool2d, bilinear,
                                conv_transpose2d, max_pool2d)
from thunder.ops.normalization import (_batch_norm_check, _batch_norm_stats, _bcast, _group_norm_check,
                                       _group_norm_parts, _keep, _mean, _rms_parts, batch_norm, group_norm,
                                       native_batch_norm, native_batch_norm_backward, rms_norm)


@conv_transpose2d.vjp
def _(g, out, input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_vjp(2, g, input, weight, bias, stride, padding, dilation, groups, True, output_padding)


@max_pool2d.vjp
def _(g, out, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    # (a 3-d input's: 4-d inputs train as max_pool2d_with_indices, whose backward reads the
    # forward's indices) the indices recomputed from the saved input
    x = _as_4d(input)
    _, indices = prims.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)
    gx = prims.max_pool2d_backward(_as_4d(g), x, kernel_size, stride, padding, dilation, ceil_mode, indices)
    return {"input": _like(gx, input)}


@avg_pool2d.vjp
def _(g, out, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
      divisor_override=None):
    gx = prims.avg_pool2d_backward(_as_4d(g), _as_4d(input), kernel_size, stride, padding, ceil_mode,
                                   count_include_pad, divisor_override)
    return {"input": _like(gx, input)}


@adaptive_avg_pool2d.vjp
def _(g, out, input, output_size):
    return {"input": _like(prims.adaptive_avg_pool2d_backward(_as_4d(g), _as_4d(input)), input)}


@batch_norm.vjp
def _(g, out, input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    dims = _batch_norm_check(input, running_mean, running_var, weight, bias, training)
    cdt = opmath_dtype(input.dtype)
    x, g = to_dtype(input, cdt), to_dtype(g, cdt)
    mean, var = _batch_norm_stats(x, running_mean, running_var, training, dims)
    rstd = prims.rsqrt(prims.add(var, float(eps)))
    xhat = prims.mul(prims.sub(x, _bcast(mean, x.shape, 1)), _bcast(rstd, x.shape, 1))
    gxhat = prims.mul(g, _bcast(to_dtype(weight, cdt), x.shape, 1)) if weight is not None else g
    if training:
        m1 = _bcast(_mean(gxhat, dims), x.shape, 1)
        m2 = _bcast(_mean(prims.mul(gxhat, xhat), dims), x.shape, 1)
        gx = prims.mul(prims.sub(prims.sub(gxhat, m1), prims.mul(xhat, m2)), _bcast(rstd, x.shape, 1))
    else:
        gx = prims.mul(gxhat, _bcast(rstd, x.shape, 1))
    return {"input": to_dtype(gx, input.dtype),
            "weight": to_dtype(prims.sum(prims.mul(g, xhat), dims), weight.dtype) if weight is not None else None,
            "bias": to_dtype(prims.sum(g, dims), bias.dtype) if bias is not None else None}


@native_batch_norm.vjp
def _(g, out, input, weight, bias, running_mean, running_var, training, momentum, eps):
    if any(x is not None for x in g[1:]):
        raise NotImplementedError("thunder: the batch statistics of native_batch_norm are not differentiable")
    gx, gw, gb = native_batch_norm_backward(g[0], input, weight, out[1], out[2], eps)
    return {"input": gx, "weight": gw, "bias": gb}


@group_norm.vjp
def _(g, out, input, num_groups, weight=None, bias=None, eps=1e-5):
    _group_norm_check(input, num_groups, weight, bias)
    x, xhat, rstd = _group_norm_parts(input, num_groups, eps)
    g = to_dtype(g, x.dtype)
    gxhat = prims.mul(g, _bcast(to_dtype(weight, x.dtype), x.shape, 1)) if weight is not None else g
    gxhat = prims.reshape(gxhat, tuple(xhat.shape))
    m1 = _keep(_mean(gxhat, (2,)), xhat.shape, (2,))
    m2 = _keep(_mean(prims.mul(gxhat, xhat), (2,)), xhat.shape, (2,))
    gx = prims.mul(prims.sub(prims.sub(gxhat, m1), prims.mul(xhat, m2)), _keep(rstd, xhat.shape, (2,)))
    dims = (0, *range(2, x.ndim))
    gw = None
    if weight is not None:
        gw = to_dtype(prims.sum(prims.mul(g, prims.reshape(xhat, tuple(x.shape))), dims), weight.dtype)
    return {"input": to_dtype(prims.reshape(gx, tuple(x.shape)), input.dtype), "weight": gw,
            "bias": to_dtype(prims.sum(g, dims), bias.dtype) if bias is not None else None}


@rms_norm.vjp
def _(g, out, input, normalized_shape, weight=None, eps=None):
    x, rstd, dims = _rms_parts(input, normalized_shape, eps)
    g = to_dtype(g, x.dtype)
    gy = prims.mul(g, expand_to(to_dtype(weight, x.dtype), x.shape)) if weight is not None else g
    # d/dx (x * r) with r = rsqrt(mean(x^2) + eps):  r * (gy - x * r^2 * mean(gy * x))
    m = _keep(_mean(prims.mul(gy, x), dims), x.shape, dims)
    gx = prims.mul(rstd, prims.sub(gy, prims.mul(x, prims.mul(prims.mul(rstd, rstd), m))))
    gw = None
    if weight is not None:
        lead = tuple(range(input.ndim - len(normalized_shape)))
        gwx = prims.mul(g, prims.mul(x, rstd))
        gw = to_dtype(prims.sum(gwx, lead) if lead else gwx, weight.dtype)
    return {"input": to_dtype(gx, input.dtype), "weight": gw}


@bilinear.vjp
def _(g, out, input1, input2, weight, bias=None):
    o, i, j = weight.shape
    x1, x2 = _flat(input1), _flat(input2)
    b = x1.shape[0]
    gf = prims.reshape(g, (b, o))
    u = prims.reshape(prims.matmul(gf, prims.reshape(weight, (o, i * j))), (b, i, j))  # sum_o g[b, o] W[o, i, j]
    g1 = prims.reshape(prims.matmul(u, prims.reshape(x2, (b, j, 1))), tuple(input1.shape))
    g2 = prims.reshape(prims.matmul(prims.reshape(x1, (b, 1, i)), u), tuple(input2.shape))
    outer = prims.reshape(prims.mul(prims.broadcast_in_dim(x1, (b, i, j), (0, 1)),
                                    prims.broadcast_in_dim(x2, (b, i, j), (0, 2))), (b, i * j))
    gw = prims.reshape(prims.matmul(prims.transpose(gf, (1, 0)), outer), (o, i, j))
    gb = None
    if bias is not None:
        gb = prims._sum_to(g, tuple(bias.shape))
    return {"input1": g1, "input2": g2, "weight": gw, "bias": gb}
