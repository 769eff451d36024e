"""F.interpolate as an ltorch op: nearest, nearest-exact, (bi/tri)linear, bicubic, area.

size/scale_factor are normalized while binding (see layers.py); the decomposition gathers source
rows/columns and blends them with taps computed from the output positions."""

import math

import torch
import torch.nn.functional as F

from thunder.core.proxies import TensorProxy
from thunder.ops import prims
from thunder.ops.decomp_utils import opmath_dtype, to_dtype
from thunder.ops.layers import _is_seq, _normalizing, adaptive_avg_pool2d
from thunder.ops.meta_utils import is_tensor
from thunder.ops.registry import Bool, Floats, Ints, ltorch, Str, Tensor


# --------------------------------------------------------------------------------------------
# Interpolation (F.interpolate): nearest, nearest-exact, (bi/tri)linear, bicubic, area


_INTERPOLATE_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_INTERPOLATE_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area", "lanczos")


def _normalize_interpolate(values):
    """As F.interpolate: `size` becomes the output size (always given), `scale_factor` the scales
    the source indices use (None when the size was given or is recomputed), align_corners False
    for the interpolating modes."""
    input, size, scale, mode = values["input"], values["size"], values["scale_factor"], values["mode"]
    if not is_tensor(input):
        return
    dim = input.ndim - 2
    spatial = list(input.shape[2:])
    if size is not None and scale is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is None and scale is None:
        raise ValueError("either size or scale_factor should be defined")
    if size is not None:
        size = tuple(size) if _is_seq(size) else (size,) * dim
        if len(size) != dim:
            raise ValueError(f"Input and output must have the same number of spatial dimensions, but got input with "
                             f"spatial dimensions of {spatial} and output size of {size}. Please provide input tensor "
                             "in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) format.")
    else:
        scale = tuple(float(x) for x in scale) if _is_seq(scale) else (float(scale),) * dim
        if len(scale) != dim:
            raise ValueError(f"Input and scale_factor must have the same number of spatial dimensions, but got input "
                             f"with spatial dimensions of {spatial} and scale_factor of shape {list(scale)}. Please "
                             "provide input tensor in (N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, "
                             "...,sK) format.")
        if values["recompute_scale_factor"] and size is not None:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        size = tuple(math.floor(float(n) * f) for n, f in zip(spatial, scale))
        if values["recompute_scale_factor"] or mode == "area":
            scale = None
    if mode in ("nearest", "area", "nearest-exact"):
        if values["align_corners"] is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                             "bicubic | trilinear")
    elif values["align_corners"] is None:
        values["align_corners"] = False
    values.update(size=size, scale_factor=scale, recompute_scale_factor=None)


@_normalizing(_normalize_interpolate)
@ltorch("impl.interpolate", aliases=(F.interpolate,))
def interpolate(input: Tensor, size: Ints | None = None, scale_factor: Floats | None = None, mode: Str = "nearest",
                align_corners: Bool | None = None, recompute_scale_factor: Bool | None = None, antialias: Bool = False):
    """F.interpolate. After binding, size is the output size and scale_factor the scales of the
    source indices (None: input size / output size)."""
    dim = input.ndim - 2
    if mode not in _INTERPOLATE_MODES or input.ndim not in (3, 4, 5):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for "
                                  f"the modes: nearest | linear | bilinear | bicubic | trilinear | lanczos | area | "
                                  f"nearest-exact (got {mode})")
    need = _INTERPOLATE_DIMS.get(mode)
    if need is not None and need != dim:
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs {need + 2}D input")
    if antialias and not (mode in ("bilinear", "bicubic") and input.ndim == 4):
        raise ValueError("Anti-alias option is restricted to bilinear and bicubic modes and requires a 4-D tensor as "
                         "input")
    if any(s <= 0 for s in size) or any(s <= 0 for s in input.shape[2:]):
        names = ("D", "H", "W")[3 - dim:]
        raise RuntimeError("Input and output sizes should be greater than 0, but got input ("
                           + ", ".join(f"{n}: {s}" for n, s in zip(names, input.shape[2:])) + ") output ("
                           + ", ".join(f"{n}: {s}" for n, s in zip(names, size)) + ")")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f'"upsample_{mode}{dim}d" not implemented for \'{_dtype_word(input.dtype)}\'')
    if antialias or mode == "lanczos" or mode == "area" and input.ndim == 5:
        # (a thunder limitation: the fallback records torch's own call, whose gradient is torch's)
        raise NotImplementedError(f"thunder: F.interpolate(mode={mode!r}, antialias={antialias}) has no "
                                  "decomposition: recorded as torch's call")
    return TensorProxy((*input.shape[:2], *size), input.dtype, input.device)


def _dtype_word(dtype):
    return {torch.int64: "Long", torch.int32: "Int", torch.bool: "Bool", torch.uint8: "Byte"}.get(dtype, str(dtype))


def _scale(n, m, scale, dtype):
    """torch's compute_scales_value in dtype: 1 / scale if given, else n / m."""
    if scale is not None and scale > 0:
        return torch.tensor(1.0 / scale, dtype=torch.float64, device="cpu").to(dtype).item()
    return (torch.tensor(n, dtype=dtype, device="cpu") / m).item()


def _positions(m, dtype, device):
    return prims.convert_element_type(prims.iota(m, start=0, step=1, dtype=torch.int64, device=device), dtype)


def _nearest_index(n, m, scale, exact, device):
    """The source index of each of m outputs (as torch: float32 math, clamped to n - 1)."""
    if not exact and m == n:
        return prims.iota(m, start=0, step=1, dtype=torch.int64, device=device)
    if not exact and m == 2 * n:
        return prims.div(prims.iota(m, start=0, step=1, dtype=torch.int64, device=device), 2)
    pos = _positions(m, torch.float32, device)
    src = prims.floor(prims.mul(prims.add(pos, 0.5) if exact else pos, _scale(n, m, scale, torch.float32)))
    idx = prims.convert_element_type(src, torch.int64)
    return prims.minimum(idx, prims.full((m,), n - 1, dtype=torch.int64, device=device))


def _source(n, m, scale, align_corners, cubic, dtype, device):
    """torch's area_pixel_compute_source_index of each output position, in dtype."""
    if align_corners:
        s = (torch.tensor(n - 1, dtype=dtype, device="cpu") / (m - 1)).item() if m > 1 else 0.0
        return prims.mul(_positions(m, dtype, device), s)
    src = prims.sub(prims.mul(prims.add(_positions(m, dtype, device), 0.5), _scale(n, m, scale, dtype)), 0.5)
    return src if cubic else prims.maximum(src, prims.full((m,), 0.0, dtype=dtype, device=device))


def _linear_taps(n, m, scale, align_corners, dtype, device):
    """[(index, weight)] of the two neighbours of each output (as torch's upsample kernels)."""
    src = _source(n, m, scale, align_corners, False, dtype, device)
    i0 = prims.convert_element_type(src, torch.int64)  # src >= 0: truncation is floor
    i1 = prims.where(prims.lt(i0, n - 1), prims.add(i0, 1), i0)
    l1 = prims.sub(src, prims.convert_element_type(i0, dtype))
    return [(i0, prims.add(prims.neg(l1), 1.0)), (i1, l1)]  # 1 - l1


def _cubic_taps(n, m, scale, align_corners, dtype, device):
    """[(index, weight)] of the four neighbours of each output (cubic convolution, A = -0.75)."""
    a = -0.75
    src = _source(n, m, scale, align_corners, True, dtype, device)
    f = prims.floor(src)
    t = prims.sub(src, f)
    i = prims.convert_element_type(f, torch.int64)

    def near(x):  # ((A + 2) x - (A + 3)) x x + 1
        return prims.add(prims.mul(prims.mul(prims.sub(prims.mul(x, a + 2), a + 3), x), x), 1.0)

    def far(x):  # ((A x - 5 A) x + 8 A) x - 4 A
        return prims.sub(prims.mul(prims.add(prims.mul(prims.sub(prims.mul(x, a), 5 * a), x), 8 * a), x), 4 * a)

    one_minus = prims.add(prims.neg(t), 1.0)  # 1 - t
    weights = [far(prims.add(t, 1.0)), near(t), near(one_minus), far(prims.add(one_minus, 1.0))]
    lo, hi = prims.full((m,), 0, dtype=torch.int64, device=device), prims.full((m,), n - 1, dtype=torch.int64,
                                                                                  device=device)
    return [(prims.minimum(prims.maximum(prims.add(i, k - 1), lo), hi), w) for k, w in enumerate(weights)]


@interpolate.decompose
def _(input, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
      antialias=False):
    interpolate.meta(input, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)
    if mode == "area":
        x = input if input.ndim == 4 else prims.reshape(input, (*input.shape[:2], 1, input.shape[2]))
        out = adaptive_avg_pool2d(x, tuple(size) if input.ndim == 4 else (1, size[0]))
        return out if input.ndim == 4 else prims.reshape(out, (*input.shape[:2], size[0]))
    dims = range(input.ndim - 1, 1, -1)  # the last spatial dim first, as torch's kernels nest
    scales = scale_factor or (None,) * len(size)
    if mode in ("nearest", "nearest-exact"):
        x = input
        for d in dims:
            x = prims.take(x, d, _nearest_index(x.shape[d], size[d - 2], scales[d - 2], mode == "nearest-exact",
                                                x.device))
        return x
    cdt = opmath_dtype(input.dtype)
    x = to_dtype(input, cdt)
    taps = _cubic_taps if mode == "bicubic" else _linear_taps
    for d in dims:
        out = None
        for idx, w in taps(x.shape[d], size[d - 2], scales[d - 2], align_corners, cdt, x.device):
            picked = prims.take(x, d, idx)
            term = prims.mul(prims.broadcast_in_dim(w, tuple(picked.shape), (d,)), picked)
            out = term if out is None else prims.add(out, term)
        x = out
    return to_dtype(x, input.dtype)
