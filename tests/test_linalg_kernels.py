"""Regions of thunder prims compiled through linalg to native CPU code (thunder.lowering.linalg)
and run on torch tensors, compared with eager PyTorch."""
import re
import threading

import pytest
import torch

import thunder
from thunder.lowering.linalg import UnsupportedOp, compile_region, supported, to_linalg


def region(fn, *args):
    """The decomposed (thunder prims) func of fn's trace, as MLIR text."""
    jf = thunder.jit(fn, transforms=["thunder-decompose"], executors=["torch"])
    jf(*args)
    return str(thunder.last_traces(jf)[-2].to_mlir())


def run(fn, *args, atol=1e-5, rtol=1.3e-6, call_args=None):
    text = region(fn, *args)
    kernel = compile_region(text, "computation")
    call_args = args if call_args is None else call_args
    outs = kernel(*call_args)
    ref = fn(*call_args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    assert len(outs) == len(ref)
    for o, r in zip(outs, ref):
        assert o.dtype == r.dtype and o.shape == r.shape
        torch.testing.assert_close(o, r, atol=atol, rtol=rtol)
    return kernel, outs


def bias_gelu(x, b):
    return torch.nn.functional.gelu(x + b, approximate="tanh")


def test_tanh_of_mul_add():
    run(lambda a, b: torch.tanh(a * b + 1), torch.randn(4, 8), torch.randn(4, 8))


def test_bias_gelu_chain():
    run(bias_gelu, torch.randn(64, 128), torch.randn(128))


def test_sub_amax_keepdim():
    # amax -> reshape (keepdim) -> broadcast_in_dim -> sub
    run(lambda x: x - x.amax(-1, keepdim=True), torch.randn(5, 7))


def test_sum_over_dim():
    run(lambda x: x.sum(1), torch.randn(6, 33))
    run(lambda x: x.sum(0), torch.randn(6, 33))


def test_sum_all_is_0d():
    run(lambda x: x.sum(), torch.randn(6, 9), atol=1e-4)


def test_softmax():
    run(lambda x: torch.softmax(x, -1), torch.randn(8, 100))


def test_layernorm_like():
    def f(x):
        m = x.mean(-1, keepdim=True)
        v = ((x - m) ** 2).mean(-1, keepdim=True)
        return (x - m) * torch.rsqrt(v + 1e-5)
    run(f, torch.randn(4, 64), atol=1e-4)


def test_unary_math():
    x = torch.rand(3, 17) + 0.1
    run(lambda x: torch.exp(x) + torch.log(x) + torch.sqrt(x) + torch.sin(x) * torch.cos(x)
        + torch.erf(x) - torch.abs(-x) + torch.neg(x), x, atol=1e-4)


def test_maximum_minimum_where_pow_div():
    a, b = torch.randn(6, 5), torch.randn(6, 5)
    run(lambda a, b: torch.where(a > b, torch.maximum(a, b), torch.minimum(a, b) ** 2) / (b.abs() + 1), a, b)


def test_comparisons_to_bool():
    a, b = torch.randn(10), torch.randn(10)
    b[:3] = a[:3]
    for f in (torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge):
        run(f, a, b)


def test_non_contiguous_inputs():
    x = torch.randn(16, 8).t()  # 8x16, strides (1, 8)
    b = torch.randn(16)
    kernel, _ = run(bias_gelu, x, b)
    # the same region called with a contiguous tensor of that shape: another stride variant
    y = torch.randn(8, 16)
    out, = kernel(y, b)
    torch.testing.assert_close(out, bias_gelu(y, b), atol=1e-5, rtol=1.3e-6)
    assert len(kernel.variants) == 2


def test_sliced_input_with_offset():
    base = torch.randn(10, 12)
    x = base[2:6, 3:11]  # storage offset and a row stride of 12
    run(lambda x: torch.tanh(x) * 2, x)


def test_expanded_input_stride_0():
    x = torch.randn(1, 8).expand(4, 8)
    run(lambda x, y: x * y, x, torch.randn(4, 8))


def test_dynamic_strides_variant():
    text = region(lambda a, b: a * b - a, torch.randn(4, 6), torch.randn(4, 6))
    kernel = compile_region(text, "computation", specialize_strides=False)
    for a in (torch.randn(4, 6), torch.randn(6, 4).t(), torch.randn(8, 12)[::2, ::2]):
        b = torch.randn(4, 6)
        out, = kernel(a, b)
        torch.testing.assert_close(out, a * b - a)
    assert list(kernel.variants) == [None]


def test_broadcasting():
    a, b = torch.randn(3, 1, 5), torch.randn(4, 1)
    run(lambda a, b: a * b + 2.5, a, b)


def test_zero_dim_inputs():
    run(lambda a, s: a * s + s, torch.randn(3, 4), torch.tensor(2.0))
    run(lambda s, t: torch.exp(s) - t, torch.tensor(0.5), torch.tensor(1.5))


def test_float64():
    a, b = torch.randn(5, 6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    run(lambda a, b: torch.tanh(a + b).exp() / (b * b + 1), a, b, atol=1e-12, rtol=1e-12)
    run(lambda a: torch.softmax(a, 0), a, atol=1e-12, rtol=1e-12)


def test_int64_ops():
    a, b = torch.randint(-50, 50, (7, 3)), torch.randint(1, 9, (7, 3))
    run(lambda a, b: (a + b) * 3 - torch.maximum(a, b) + torch.abs(a), a, b)
    run(lambda a, b: (a + b) * 2 > 3, a, b)
    run(lambda a: a.sum(0), a)
    run(lambda a: a.amax(1), a)


def test_bool_ops():
    a, b = torch.rand(9) > 0.5, torch.rand(9) > 0.5
    run(lambda a, b: a & b, a, b)
    run(lambda a, b: (a | b) == a, a, b)
    run(lambda a, b: torch.where(a, b, ~b), a, b)
    run(lambda a, x: torch.where(a, x, 0.5), a, torch.randn(9))


def test_convert_element_type():
    a = torch.randn(4, 5) * 10
    run(lambda a: a.to(torch.float64) * 2, a)
    run(lambda a: a.to(torch.int64) + 1, a)
    run(lambda a: (a > 0).to(torch.float32) * a, a)
    run(lambda i: i.float() / 3, torch.arange(12).reshape(3, 4))


def test_transpose_and_reshape():
    run(lambda x: x.t() * 2, torch.randn(3, 5))
    run(lambda x: x.reshape(15) + 1, torch.randn(3, 5))
    run(lambda x: x.permute(2, 0, 1).reshape(4, 6) - 1, torch.randn(2, 3, 4))


def test_multiple_outputs_and_passthrough():
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    # a region that also returns an argument as it is (thunder's own programs return such an input
    # itself, outside the trace, so the func is extended here)
    text = region(lambda a, b: (a + b, a * b), a, b)
    t = "tensor<3x3xf32>"
    text = text.replace(f"-> ({t}, {t})", f"-> ({t}, {t}, {t})").replace(
        f"return %0, %1 : {t}, {t}", f"return %0, %1, %arg0 : {t}, {t}, {t}")
    outs = compile_region(text, "computation")(a, b)
    assert len(outs) == 3
    for o, r in zip(outs, (a + b, a * b, a)):
        torch.testing.assert_close(o, r)


def test_kernel_cache_by_text():
    text = region(lambda a: a + 1, torch.randn(2, 2))
    assert compile_region(text, "computation") is compile_region(text, "computation")


def test_outputs_are_new_tensors():
    text = region(lambda a: a * 1.0 + 0.0, torch.randn(2, 3))
    k = compile_region(text, "computation")
    x = torch.randn(2, 3)
    (o1,), (o2,) = k(x), k(x)
    assert o1.data_ptr() != o2.data_ptr() and o1.data_ptr() != x.data_ptr()


def test_wrong_input_is_rejected():
    text = region(lambda a: a + 1, torch.randn(2, 2))
    k = compile_region(text, "computation")
    with pytest.raises(TypeError):
        k(torch.randn(3, 2))
    with pytest.raises(TypeError):
        k(torch.randn(2, 2, dtype=torch.float64))


def test_unsupported_prim():
    text = region(lambda a, b: a @ b, torch.randn(2, 3), torch.randn(3, 4))
    assert not supported("thunder.matmul") and supported("thunder.add")
    with pytest.raises(UnsupportedOp):
        to_linalg(text, "computation")


def test_broadcast_fuses_into_consumer():
    """After the tensor-level passes the bias+gelu chain is one linalg.generic reading the bias
    through (d0, d1) -> (d1) and writing the output argument."""
    from thunder.dialects.mlir import ir
    from thunder.lowering.linalg.pipeline import TENSOR_PIPELINE
    from thunder.dialects.mlir import passmanager

    text = region(bias_gelu, torch.randn(4, 8), torch.randn(8))
    with ir.Context(), ir.Location.unknown():
        m = ir.Module.parse(to_linalg(text, "computation", [(8, 1), (1,)]))
        passmanager.PassManager.parse("builtin.module(" + ",".join(TENSOR_PIPELINE) + ")").run(m.operation)
        asm = str(m)
    assert asm.count("linalg.generic") == 1
    assert "affine_map<(d0, d1) -> (d1)>" in asm
    assert "memref.alloc" not in asm and "memref.copy" not in asm


@pytest.mark.parametrize("op", ["exp", "tanh"])
def test_f32_polynomial_approximations(op):
    """exp/tanh for f32 are arith polynomials (approx.py): within a few ulp of torch, with
    inf/nan/overflow/underflow handled."""
    n = 200010
    text = f'''module {{ func.func @f(%a: tensor<{n}xf32>) -> tensor<{n}xf32> {{
      %0 = "thunder.{op}"(%a) : (tensor<{n}xf32>) -> tensor<{n}xf32>
      return %0 : tensor<{n}xf32> }} }}'''
    x = torch.cat([torch.linspace(-110, 110, n - 10),
                   torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1e-30,
                                 88.7, 88.8, -87.5, -104.0])])
    y, = compile_region(text, "f")(x)
    torch.testing.assert_close(y, getattr(torch, op)(x), atol=1e-37, rtol=4e-7, equal_nan=True)


def test_affine_loops_variant():
    text = region(lambda x: torch.softmax(x, -1), torch.randn(8, 100))
    k = compile_region(text, "computation", loops="affine-vector")
    x = torch.randn(8, 100)
    torch.testing.assert_close(k(x)[0], torch.softmax(x, -1))


def test_module_object_and_default_name():
    f = lambda a, b: torch.tanh(a * b + 1)  # noqa: E731
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    jf = thunder.jit(f, transforms=["thunder-decompose"], executors=["torch"])
    jf(a, b)
    module = thunder.last_traces(jf)[-2].module()  # an ir.Module in the thunder context
    k = compile_region(module)
    assert k.name == "computation"
    torch.testing.assert_close(k(a, b)[0], f(a, b))


def test_tiling_of_rows():
    from thunder.lowering.linalg import lower_region

    x, r, w = torch.randn(64, 32), torch.randn(64, 32), torch.randn(32)
    ln = region(lambda x, r, w: torch.nn.functional.layer_norm(x + r, (32,), w), x, r, w)
    low = lower_region(ln, "computation", [(32, 1), (32, 1), (1,)])
    # rows of x and r are sliced, the weight is read whole; the row count is not in the kernel
    assert (low.rows, low.axes) == (64, [0, 0, None])
    assert "memref<?x32xf32, strided<[32, 1]>>" in low.text and "64" not in low.text.split("{")[0]
    # a sum over dim 0 is tiled along the columns it keeps
    low = lower_region(region(lambda x: (x * 2).sum(0), x), "computation", [(32, 1)])
    assert (low.rows, low.axes) == (32, [1])
    # a full reduction has no rows to tile
    assert lower_region(region(lambda x: x.sum(), x), "computation", [(32, 1)]).rows is None


def test_regions_of_one_text_lower_once():
    """lower_region answers a region that differs from one lowered before only in its func's
    name (a model's N identical layers) from its memo when the lowered func is named apart
    from the region (Kernel's "kernel"); named after the region, each lowers to its own name."""
    from thunder.lowering.linalg.to_linalg import STATS, lower_region

    x, w = torch.randn(64, 32), torch.randn(32)
    text = region(lambda x, w: torch.tanh(x * w + 1.5), x, w).replace("@computation(", "@fusion_7(")
    strides = ((32, 1), (1,))
    hits = STATS["hits"]
    first = lower_region(text, "fusion_7", strides, out_name="kernel")
    second = lower_region(text.replace("@fusion_7(", "@fusion_31("), "fusion_31", strides, out_name="kernel")
    assert STATS["hits"] == hits + 1 and second is first
    assert lower_region(text, "fusion_7", None, out_name="kernel") is not first  # (other strides)
    own = lower_region(text.replace("@fusion_7(", "@fusion_31("), "fusion_31", strides)
    assert "@fusion_31(" in own.text and own.text == first.text.replace("@kernel(", "@fusion_31(")


def test_new_row_counts_do_not_recompile():
    from thunder.lowering.linalg import COMPILE_LOG

    fn = lambda x, b: torch.softmax(x + b, -1)  # noqa: E731
    b = torch.randn(48)
    run(fn, torch.randn(16, 48), b)
    n = len(COMPILE_LOG)
    for rows in (17, 64, 1000):
        run(fn, torch.randn(rows, 48), b)
    assert len(COMPILE_LOG) == n


@pytest.mark.parametrize("threads_of", ["openmp", "python"])
def test_rows_split_over_threads(threads_of, monkeypatch):
    # the ranges run on torch's OpenMP threads (GOMP_parallel), or on a Python pool where torch
    # has no OpenMP runtime
    from thunder.lowering.linalg import PARALLEL_MIN_BYTES, runtime

    if threads_of == "openmp" and runtime.openmp() is None:
        pytest.skip("this torch build runs its threads without OpenMP")
    if threads_of == "python":
        monkeypatch.setattr(runtime, "openmp", lambda: None)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x, b = torch.randn(512, 1024), torch.randn(1024)
        assert x.numel() * 4 >= PARALLEL_MIN_BYTES
        kernel, _ = run(bias_gelu, x, b)
        kernel.frames.clear()  # (a frame an earlier test made chose its threads then)
        kernel.last_call = None  # (and the cheap path that would reuse it)
        kernel(x, b)
        frame = kernel.frames[threading.get_ident()][(kernel.strides((x, b)), 2)]
        assert (frame.parallel is not None) == (threads_of == "openmp")
        for _ in range(20):  # every range computed once, call after call
            torch.testing.assert_close(kernel(x, b)[0], bias_gelu(x, b), rtol=1e-5, atol=1e-5)
        fn, lowered = next(iter(kernel.variants.values()))
        ranges, n_threads = kernel.row_ranges(lowered)
        # 4 ranges per thread, taken by whichever thread is free: consecutive whole tiles
        assert n_threads == 2 and len(ranges) == 8 and ranges[0][0] == 0 and ranges[-1][1] == 512
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert all(lo % lowered.tile_rows == 0 for lo, _ in ranges)
        # non-contiguous rows (a slice with a step), threads too
        run(bias_gelu, torch.randn(1024, 1024)[::2], b)
    finally:
        torch.set_num_threads(threads)


def test_threads_follow_torch_set_num_threads_between_calls():
    # the first call's thread count is not kept: after torch.set_num_threads(1) a kernel runs on
    # one thread (no thread of ours beside torch's), and on two again after set_num_threads(2)
    threads = torch.get_num_threads()
    x, b = torch.randn(512, 1024), torch.randn(1024)
    try:
        torch.set_num_threads(2)
        kernel, _ = run(bias_gelu, x, b)
        torch.set_num_threads(1)
        torch.testing.assert_close(kernel(x, b)[0], bias_gelu(x, b), rtol=1e-5, atol=1e-5)
        torch.set_num_threads(2)
        kernel(x, b)
        frames = kernel.frames[threading.get_ident()]
        strides = kernel.strides((x, b))
        assert {n: f.threads for (st, n), f in frames.items() if st == strides} == {1: 1, 2: 2}
    finally:
        torch.set_num_threads(threads)


def test_iota_masks():
    # tril (iota rows and columns compared), a causal mask, a one-hot pick: iota lowered from the loop index
    run(lambda x: torch.tril(x, -1) * 2, torch.randn(6, 7))
    run(lambda x: torch.triu(x.double(), 2) + 1, torch.randn(2, 5, 5))
    run(lambda x: x * torch.arange(7) + torch.arange(2.5, 9.5), torch.randn(3, 7))
    run(lambda x: torch.arange(10, 0, -3) * x, torch.randn(4))


def test_iota_in_tiled_kernels():
    # iota along the tiled rows: each tile's values start at its first row
    fn = lambda x: x * torch.arange(x.shape[0])[:, None] + torch.tril(x)  # noqa: E731
    x = torch.randn(3000, 64)
    kernel, _ = run(fn, x)
    lowered = kernel.lowered()
    assert lowered.rows == 3000 and lowered.tile_rows < 3000 and "linalg.index" in lowered.text


def test_tiles_along_an_inner_axis_read_pieces_of_2_kib():
    # a rotary embedding tiled along its 512 positions (the 4x16 slabs before them are too large
    # to tile): a tile is a piece of each of the 64 slabs; one position (256 bytes a piece) would
    # fit TILE_BYTES, but short pieces defeat the prefetcher, so a tile takes 8 positions
    from thunder.lowering.linalg.tiling import MIN_PIECE_BYTES

    def rotary(x, cos, sin):
        return x * cos + torch.cat((-x[..., 32:], x[..., :32]), dim=-1) * sin

    kernel, _ = run(rotary, torch.randn(4, 16, 512, 64), torch.randn(512, 64), torch.randn(512, 64))
    lowered = kernel.lowered(kernel._key(((524288, 32768, 64, 1), (64, 1), (64, 1))))
    assert lowered.rows == 512 and lowered.axes == [2, 0, 0]
    assert lowered.tile_rows * 64 * 4 == MIN_PIECE_BYTES


def test_value_read_whole_and_by_rows():
    # a mask over the rows summed (read whole: computed before the tile loop) and used row by row
    # (a loss's count of kept targets): computed both ways, the kernel still tiles by rows
    fn = lambda x, t: x * (t != 3)[:, None] / (t != 3).sum()  # noqa: E731
    x, t = torch.randn(3001, 40), torch.randint(0, 5, (3001,))
    kernel, _ = run(fn, x, t)
    lowered = kernel.lowered()
    assert lowered.rows == 3001 and lowered.tile_rows < 3001 and lowered.axes == [0, 0]
    assert "tensor.cast" in lowered.text  # the whole targets
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:  # each thread computes the whole sum itself
        run(fn, torch.randn(6000, 64), torch.randint(0, 5, (6000,)))
        run(fn, torch.randn(64, 6000).t(), torch.randint(0, 5, (12000,))[::2])
    finally:
        torch.set_num_threads(threads)
    # a value too large to compute twice: not tiled (one pass, untiled)
    big = lambda x: x - x.sum(0)  # noqa: E731
    kernel, _ = run(big, torch.randn(2000, 64), atol=1e-3)  # (sums of 2000 in another order)
    assert kernel.lowered().rows is None


def _masked(x, p=0.3):
    g = torch.Generator().manual_seed(1)
    return x.masked_fill(torch.rand(x.shape, generator=g) < p, float("-inf"))


@pytest.mark.parametrize("case", ["odd_rows", "row_of_one", "strided", "masked", "all_masked_row", "f16", "bf16",
                                  "dim0", "empty", "log_softmax", "layer_norm"])
def test_reduction_computed_with_its_operand(case):
    """An elementwise result reduced and read again (softmax's exps: their sum, then each times
    its reciprocal) is written in its reduction's pass (one multi-result linalg.generic)."""
    softmax = lambda x: torch.softmax(x * 0.5, -1)  # noqa: E731
    fn, x, tol = softmax, torch.randn(37, 1001), {}
    if case == "row_of_one":
        x = torch.randn(50, 1)
    if case == "strided":
        x = torch.randn(1001, 37).t()
    if case == "masked":
        x = _masked(torch.randn(64, 129))
    if case == "all_masked_row":  # exp(-inf - -inf): nan, as eager
        x = torch.randn(8, 33)
        x[3] = float("-inf")
        tol = dict(equal_nan=True)
    if case in ("f16", "bf16"):
        x = _masked(torch.randn(40, 77)).to(getattr(torch, {"f16": "float16", "bf16": "bfloat16"}[case]))
        tol = dict(rtol=1e-2, atol=1e-3)
    if case == "dim0":
        fn = lambda x: torch.softmax(x, 0)  # noqa: E731
    if case == "empty":
        x = torch.randn(0, 17)
    if case == "log_softmax":
        fn, x = lambda x: torch.log_softmax(x + 1, -1), _masked(torch.randn(31, 257))
    if case == "layer_norm":
        # (x * 2 + 1: summed for the mean, then read again)
        fn = lambda x: torch.nn.functional.layer_norm(x * 2 + 1, (1001,))  # noqa: E731
    kernel, _ = run(fn, x, **{"atol": 1e-5, "rtol": 1.3e-6, **tol}) if "equal_nan" not in tol else \
        (compile_region(region(fn, x), "computation"), None)
    if "equal_nan" in tol:
        torch.testing.assert_close(kernel(x)[0], fn(x), equal_nan=True)
    if case not in ("empty", "row_of_one", "log_softmax"):
        assert re.search(r"%\w+:2 = linalg.generic", kernel.linalg_text()), kernel.linalg_text()


# values over exp's whole f32 range and its edges: overflow to inf, denormal results, 0 below
# -104, a causal mask's -inf, nan
_EXP_EDGES = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 88.72, 88.7229, -87.33, -100.0, -103.9, -103.97,
              -104.5]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_exp_only_summed_in_f32(dtype):
    """An exp whose values are only summed (a log-sum-exp's) computes in f32 (approx.SUMMED):
    each value within eager's error (summing over a size-1 dim shows them one by one), and
    logsumexp, log_softmax's normalizer, as eager's."""
    x = torch.cat([torch.linspace(-110, 90, 20001), torch.tensor(_EXP_EDGES)]).to(dtype)
    one_by_one = lambda x: torch.exp(x[:, None]).sum(-1)  # noqa: E731
    kernel = compile_region(region(one_by_one, x), "computation")
    # (within an ulp of eager's, which is within one of the exact value; f16, bf16: the f32
    # value rounded once, as eager's)
    ulp = {torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}[dtype]
    denormal = torch.finfo(dtype).smallest_normal * ulp  # (denormal results: an ulp of them)
    torch.testing.assert_close(kernel(x)[0], one_by_one(x), atol=denormal, rtol=2 * ulp, equal_nan=True)
    text = kernel.linalg_text()
    if dtype == torch.float32:  # no f64 polynomial
        assert "f64" not in text and "math.fma" in text, text
    rows = _masked(torch.randn(67, 1003) * 20).to(dtype)
    tol = dict(atol=1e-5, rtol=1.3e-6) if dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)
    run(lambda x: torch.logsumexp(x, -1), rows, **tol)


def test_written_exp_without_selects_and_exact_zeros():
    """exp_f32 (written values, softmax's) has no compare or select in its body: the clamp's
    lower end makes 2^k +0, so a causal mask's -inf, -1e30 or -709 give an exact +0 and values
    below -104 round to +0; nan and the infinities as eager's; every value within eager's
    accuracy (0.5 ulp plus the polynomial's 0.002) of the exact exp."""
    x = torch.cat([torch.linspace(-800, 100, 200001), torch.linspace(-105, -86, 100001),
                   torch.tensor(_EXP_EDGES + [-1e30, -709.0, -708.8, -708.5, -708.0, -200.0, 1e30, -float("nan")])])
    kernel = compile_region(region(torch.exp, x), "computation")
    body = kernel.linalg_text()
    assert "math.fma" in body and "arith.select" not in body and "arith.cmpf" not in body, body
    y = kernel(x)[0]
    torch.testing.assert_close(y, torch.exp(x), atol=2.0 ** -149, rtol=2.0 ** -23, equal_nan=True)
    below = x < -104
    assert torch.equal(y[below], torch.zeros(int(below.sum()))) and not torch.signbit(y[below]).any()
    exact = torch.exp(x.double())
    fine = exact.float().isfinite() & (exact > 0)
    ulp = torch.ldexp(torch.ones_like(exact), torch.frexp(exact.clamp_min(2.0 ** -126))[1] - 24)
    assert ((y.double() - exact).abs() / ulp)[fine].max() < 0.51


def test_cat_result_written_part_by_part_into_the_output():
    # a tiled kernel whose result is a cat (a rotary embedding's halves, and a plain cat of two
    # computed parts) writes each part into its subview of the output: no tensor of the whole
    # tile first, which bufferization made a malloc'd buffer copied into the output every tile
    def rotary(x, cos, sin):
        return x * cos + torch.cat((-x[..., 32:], x[..., :32]), dim=-1) * sin

    def two_parts(x, y):
        return torch.cat((x.exp(), y * 2), dim=-1)

    for fn, args in ((rotary, (torch.randn(4, 16, 512, 64), torch.randn(512, 64), torch.randn(512, 64))),
                     (two_parts, (torch.randn(3000, 24), torch.randn(3000, 40)))):
        kernel, _ = run(fn, *args)
        lowered = kernel.lowered(kernel._key([a.stride() for a in args]))
        assert lowered.rows is not None and "tensor.insert_slice" not in lowered.text
        assert lowered.text.count("bufferization.materialize_in_destination") == 2


# one kernel for every size (lowering/linalg/any_size.py): the region at three sizes, lowered with
# its changing sizes read at run time, called at others
_ANY_SIZE = {
    "softmax over the changing dim": (lambda x, b: torch.softmax(x * 2 + b, 1),
                                      lambda B, T: (torch.randn(B, T, 16), torch.randn(16))),
    "mean over the changing dim (a division by it)": (lambda x: (x + 1).mean(1),
                                                       lambda B, T: (torch.randn(B, T, 16),)),
    "keepdim sum (a reshape adding a dim)": (lambda x, w: (x - x.sum(-1, keepdim=True)) * w,
                                             lambda B, T: (torch.randn(B, T, 16), torch.randn(16))),
    "bias gradient (summed over both)": (lambda g, y: ((g * y).sum((0, 1)), torch.tanh(g)),
                                         lambda B, T: (torch.randn(B, T, 16), torch.randn(B, T, 16))),
    "a table broadcast over the batch": (lambda x, c: x * c + x.exp(),
                                         lambda B, T: (torch.randn(B, T, 6), torch.randn(T, 6))),
    "heads split from the width ([B, T, 48] -> [B, T, 6, 8])": (
        lambda x, w: (x * w).reshape(x.shape[0], x.shape[1], 6, 8).transpose(1, 2) * 2,
        lambda B, T: (torch.randn(B, T, 48), torch.randn(48))),
    "grouped heads summed ([B, 18, T, 10] -> [B, 9, 2, T, 10])": (
        lambda x: x.reshape(x.shape[0], 9, 2, x.shape[2], 10).sum(2) + 1,
        lambda B, T: (torch.randn(B, 18, T, 10),)),
}


@pytest.mark.parametrize("case", list(_ANY_SIZE))
def test_one_kernel_serves_every_size(case):
    from thunder.lowering.linalg import COMPILE_LOG
    from thunder.lowering.linalg.any_size import AnySizeKernel

    # (at the three sizes, no changing size equal to another, to a fixed one or to a number of
    # the program: the lowering tells sizes apart by value, as the family's made-up sizes do)
    fn, make = _ANY_SIZE[case]
    kernel = AnySizeKernel([region(fn, *make(B, T)) for B, T in ((3, 5), (4, 7), (5, 11))], "computation")
    compiled = None
    for B, T in ((2, 5), (4, 37), (7, 3), (3, 130), (2, 2)):
        args = make(B, T)
        outs = kernel.call(args)
        if compiled is None:
            compiled = len(COMPILE_LOG)
        ref = fn(*args)
        ref = ref if isinstance(ref, tuple) else (ref,)
        assert outs is not None and len(outs) == len(ref)
        for o, r in zip(outs, ref):
            assert o.dtype == r.dtype and o.shape == r.shape
            torch.testing.assert_close(o, r, atol=1e-5, rtol=1e-5)
    assert len(COMPILE_LOG) == compiled  # (compiled at the first call only)


def test_a_region_needing_a_changing_size_as_a_number_has_no_kernel_for_every_size():
    """A cumulative sum along the changing dim is a reshape across it here: no code serves every
    size (the family compiles per size then)."""
    from thunder.lowering.linalg.any_size import AnySizeKernel

    fn = lambda x: (x + 1).reshape(-1) * 2  # noqa: E731
    kernel = AnySizeKernel([region(fn, torch.randn(3, T, 16)) for T in (5, 7, 11)], "computation")
    assert kernel.call((torch.randn(3, 9, 16),)) is None


def test_one_kernel_serves_every_size_of_sizes_only_its_outputs_have():
    """A rotary table from positions (an iota of T times the inverse frequencies: T in no input)
    at each T: its outputs' sizes from the program's symbols (size_of), its call frames per
    output shape (a frame kept for the first T wrote 16 rows of 20 at the next: garbage)."""
    from thunder.lowering.linalg.any_size import AnySizeKernel

    def table(T):
        return lambda inv: torch.cat([torch.arange(T).float()[:, None] * inv] * 2, -1).cos()

    inv = torch.rand(8)
    kernel = AnySizeKernel([region(table(T), inv) for T in (5, 7, 11)], "computation",
                           size_of=lambda value, symbols: symbols[0])  # (5 in the first text: T)
    for T in (16, 20, 33, 7, 64):
        outs = kernel.call((inv,), (T,))
        assert outs is not None
        torch.testing.assert_close(outs[0], table(T)(inv))


def test_one_kernel_serves_every_size_of_a_size_used_as_a_number():
    """x * T + T: the kernel takes T as the size it reads, not as the number it was."""
    from thunder.lowering.linalg.any_size import AnySizeKernel

    fn = lambda x: x * x.shape[1] + x.shape[1]  # noqa: E731
    kernel = AnySizeKernel([region(fn, torch.randn(3, T, 6)) for T in (5, 7, 11)], "computation")
    for T in (16, 2, 40):
        x = torch.randn(3, T, 6)
        outs = kernel.call((x,))
        assert outs is not None
        torch.testing.assert_close(outs[0], fn(x))
