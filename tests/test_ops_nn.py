"""NN ops (thunder/ops/nn.py) against eager, traced and decomposed."""
import pytest
import torch
import torch.nn.functional as F

import thunder

from op_harness import check, trace_module

f16, bf16, f64 = torch.float16, torch.bfloat16, torch.float64
HALF_TOL = dict(rtol=2e-2, atol=2e-2)


def r(*shape, dtype=torch.float32):
    return torch.randn(shape).to(dtype)


def params(cases):
    """{id: (fn, *args) or (fn, *args, {check kwargs})} -> pytest params (fn, args, kwargs)."""
    out = []
    for k, v in cases.items():
        kw = v[-1] if isinstance(v[-1], dict) else {}
        args = v[1:-1] if kw else v[1:]
        out.append(pytest.param(v[0], args, kw, id=k))
    return out


matmul = lambda a, b: torch.matmul(a, b)
sdpa = F.scaled_dot_product_attention
q4, k4, v4 = r(2, 3, 5, 8), r(2, 3, 6, 8), r(2, 3, 6, 4)

CASES = {
    # matmul in all its ranks
    "matmul_1d_1d": (matmul, r(4), r(4)),
    "matmul_2d_1d": (matmul, r(3, 4), r(4)),
    "matmul_1d_2d": (matmul, r(4), r(4, 3)),
    "matmul_2d_2d": (matmul, r(3, 4), r(4, 2)),
    "matmul_1d_3d": (matmul, r(4), r(2, 4, 3)),
    "matmul_3d_1d": (matmul, r(2, 3, 4), r(4)),
    "matmul_3d_2d": (matmul, r(2, 3, 4), r(4, 5)),
    "matmul_2d_3d": (matmul, r(3, 4), r(2, 4, 5)),
    "matmul_broadcast": (matmul, r(2, 1, 3, 4), r(5, 4, 2)),
    "matmul_f64": (matmul, r(2, 3, 4, dtype=f64), r(2, 4, 5, dtype=f64)),
    "matmul_f16": (matmul, r(3, 4, dtype=f16), r(4, 2, dtype=f16), HALF_TOL),
    "matmul_bf16": (matmul, r(2, 3, 4, dtype=bf16), r(4, 2, dtype=bf16), HALF_TOL),
    "matmul_int": (matmul, torch.arange(6).reshape(2, 3), torch.arange(6).reshape(3, 2)),
    "matmul_noncontig": (lambda a, b: a.matmul(b), r(4, 3).t(), r(2, 4).t()),
    "matmul_operator": (lambda a, b: a @ b, r(2, 3, 4), r(4)),
    "matmul_empty": (matmul, r(3, 0), r(0, 2)),
    "mm": (lambda a, b: torch.mm(a, b), r(3, 4), r(4, 2)),
    "mm_method": (lambda a, b: a.mm(b), r(4, 3).t(), r(4, 2)),
    "bmm": (lambda a, b: torch.bmm(a, b), r(2, 3, 4), r(2, 4, 5)),
    "bmm_method_f64": (lambda a, b: a.bmm(b), r(2, 3, 4, dtype=f64), r(2, 4, 5, dtype=f64)),
    "linear": (lambda a, w, b: F.linear(a, w, b), r(2, 3, 4), r(5, 4), r(5)),
    "linear_no_bias": (lambda a, w: F.linear(a, w), r(3, 4), r(5, 4)),
    "linear_1d_input": (lambda a, w, b: F.linear(a, w, b), r(4), r(5, 4), r(5)),
    "linear_1d_weight": (lambda a, w: F.linear(a, w), r(2, 4), r(4)),
    "linear_kw_bias": (lambda a, w, b: F.linear(a, w, bias=b), r(2, 4), r(3, 4), r(3)),
    "linear_f16": (lambda a, w, b: F.linear(a, w, b), r(2, 4, dtype=f16), r(3, 4, dtype=f16), r(3, dtype=f16),
                   HALF_TOL),
    # addmm, baddbmm (GPT-2's Conv1D), outer, einsum
    "addmm": (lambda c, a, b: torch.addmm(c, a, b), r(5), r(3, 4), r(4, 5)),
    "addmm_scaled": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=-2), r(3, 1), r(3, 4), r(4, 5)),
    "addmm_beta0_nan": (lambda c, a, b: c.addmm(a, b, beta=0), torch.full((3, 5), float("nan")), r(3, 4), r(4, 5)),
    "addmm_method_noncontig": (lambda c, a, b: c.addmm(a, b), r(3, 5), r(4, 3).t(), r(5, 4).t()),
    "addmm_int": (lambda c, a, b: torch.addmm(c, a, b, alpha=2), torch.arange(2), torch.arange(6).reshape(3, 2),
                  torch.arange(4).reshape(2, 2)),
    "addmm_f64": (lambda c, a, b: torch.addmm(c, a, b), r(dtype=f64), r(3, 4, dtype=f64), r(4, 2, dtype=f64)),
    "addmm_f16": (lambda c, a, b: torch.addmm(c, a, b), r(5, dtype=f16), r(3, 4, dtype=f16), r(4, 5, dtype=f16),
                  HALF_TOL),
    "addmm_bf16": (lambda c, a, b: torch.addmm(c, a, b), r(5, dtype=bf16), r(3, 4, dtype=bf16), r(4, 5, dtype=bf16),
                   HALF_TOL),
    "addmm_empty": (lambda c, a, b: torch.addmm(c, a, b), r(5), r(3, 0), r(0, 5)),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b), r(2, 3, 5), r(2, 3, 4), r(2, 4, 5)),
    "baddbmm_scaled_bcast": (lambda c, a, b: c.baddbmm(a, b, beta=2.0, alpha=0.5), r(1, 5), r(2, 3, 4), r(2, 4, 5)),
    "outer": (lambda a, b: torch.outer(a, b), r(3), r(4)),
    "outer_promote_method": (lambda a, b: (a.outer(b), torch.ger(b, b)), torch.arange(3), r(4, dtype=f64)),
    "outer_empty": (lambda a, b: torch.outer(a, b), r(0), r(4)),
    "einsum_mm": (lambda a, b: torch.einsum("ij,jk->ik", a, b), r(3, 4), r(4, 5)),
    "einsum_implicit": (lambda a, b: (torch.einsum("ij,jk", a, b), torch.einsum("ba", a)), r(3, 4), r(4, 5)),
    "einsum_attention": (lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k), r(2, 3, 5, 8), r(2, 3, 6, 8)),
    "einsum_ellipsis": (lambda a, b: torch.einsum("...ij,...jk->...ik", a, b), r(2, 3, 4), r(4, 5)),
    "einsum_diag_trace_sum": (lambda a: (torch.einsum("ii->i", a), torch.einsum("ii", a), torch.einsum("ij->", a)),
                              r(4, 4)),
    "einsum_three_list": (lambda a, b, c: torch.einsum("i,ij,j->", [a, b, c]), r(3), r(3, 4), r(4)),
    "einsum_outer_batch": (lambda a, b: torch.einsum("bi,bj->bij", a, b), r(2, 3), r(2, 4)),
    "einsum_bcast_one": (lambda a, b: torch.einsum("ij,kj->ik", a, b), r(2, 1), r(4, 3)),
    "einsum_noncontig_f64": (lambda a, b: torch.einsum("ji,jk->ik", a, b), r(4, 3, dtype=f64).t().t(),
                             r(5, 4, dtype=f64).t()),
    "einsum_f16": (lambda a, b: torch.einsum("ij,jk->ik", a, b), r(3, 4, dtype=f16), r(4, 5, dtype=f16), HALF_TOL),
    "einsum_int": (lambda a, b: torch.einsum("i,j->ij", a, b), torch.arange(3), torch.arange(4)),
    # normalize
    "normalize": (lambda a: (F.normalize(a), F.normalize(a, dim=-1), F.normalize(a, p=1, dim=0)), r(3, 4)),
    "normalize_p": (lambda a: (F.normalize(a, p=float("inf")), F.normalize(a, p=3.0), F.normalize(a, p=0),
                               F.normalize(a, p=float("-inf"), eps=0.5)), r(3, 4)),
    "normalize_zero_rows": (lambda a, s: F.normalize(a * s), r(3, 4), torch.tensor([[0.0], [1.0], [1e-20]])),
    "normalize_1d_noncontig": (lambda a, b: (F.normalize(a, dim=0), F.normalize(b, dim=1)), r(5), r(4, 3).t()),
    "normalize_f64": (lambda a: F.normalize(a, dim=2), r(2, 3, 4, dtype=f64)),
    "normalize_f16": (lambda a: F.normalize(a), r(3, 8, dtype=f16), HALF_TOL),
    "normalize_bf16": (lambda a: F.normalize(a, dim=-1), r(3, 8, dtype=bf16), HALF_TOL),
    # softmax
    "softmax_F": (lambda a: F.softmax(a, dim=-1), r(3, 4, 5)),
    "softmax_torch": (lambda a: torch.softmax(a, 1), r(3, 4, 5)),
    "softmax_method": (lambda a: a.softmax(0), r(3, 4, 5)),
    "softmax_dtype": (lambda a: F.softmax(a, -1, dtype=f64), r(3, 4)),
    "softmax_1d": (lambda a: F.softmax(a, 0), r(7)),
    "softmax_0d": (lambda a: F.softmax(a, 0), r()),
    "softmax_large": (lambda a: F.softmax(a * 100, -1), r(2, 6)),
    "softmax_f64": (lambda a: a.softmax(-2), r(3, 4, dtype=f64)),
    "softmax_f16": (lambda a: a.softmax(-1), r(3, 8, dtype=f16), dict(rtol=1e-3, atol=1e-3)),
    "softmax_bf16": (lambda a: torch.softmax(a, 0), r(3, 8, dtype=bf16), dict(rtol=1e-2, atol=1e-2)),
    "softmax_f16_to_f32": (lambda a: F.softmax(a, -1, dtype=torch.float32), r(3, 8, dtype=f16)),
    "softmax_noncontig": (lambda a: a.softmax(-1), r(5, 4).t()),
    "log_softmax_F": (lambda a: F.log_softmax(a, dim=1), r(3, 4, 5)),
    "log_softmax_torch": (lambda a: torch.log_softmax(a, -1), r(3, 4)),
    "log_softmax_method_dtype": (lambda a: a.log_softmax(0, dtype=f64), r(3, 4)),
    "log_softmax_0d": (lambda a: a.log_softmax(-1), r()),
    "log_softmax_bf16": (lambda a: a.log_softmax(-1), r(3, 8, dtype=bf16), dict(rtol=1e-2, atol=1e-2)),
    # layer_norm
    "layer_norm": (lambda a: F.layer_norm(a, (5,)), r(3, 4, 5)),
    "layer_norm_affine": (lambda a, w, b: F.layer_norm(a, (4, 5), w, b), r(3, 4, 5), r(4, 5), r(4, 5)),
    "layer_norm_weight_only": (lambda a, w: F.layer_norm(a, [5], weight=w, eps=1e-2), r(3, 5), r(5)),
    "layer_norm_bias_only": (lambda a, b: F.layer_norm(a, (5,), bias=b), r(3, 5), r(5)),
    "layer_norm_shape_of_input": (lambda a: F.layer_norm(a, a.shape[-2:]), r(2, 3, 4)),
    "layer_norm_1d": (lambda a: F.layer_norm(a, (6,)), r(6)),
    "layer_norm_noncontig": (lambda a: F.layer_norm(a, (4,)), r(4, 3).t()),
    "layer_norm_f64": (lambda a, w: F.layer_norm(a, (5,), w), r(3, 5, dtype=f64), r(5, dtype=f64)),
    "layer_norm_f16": (lambda a, w, b: F.layer_norm(a, (8,), w, b), r(3, 8, dtype=f16), r(8, dtype=f16),
                       r(8, dtype=f16), HALF_TOL),
    "layer_norm_bf16": (lambda a: F.layer_norm(a, (8,)), r(3, 8, dtype=bf16), HALF_TOL),
    # dropout (exact when it does nothing)
    "dropout_eval": (lambda a: F.dropout(a, 0.3, training=False), r(3, 4)),
    "dropout_p0": (lambda a: F.dropout(a, 0.0), r(3, 4)),
    "dropout_eval_positional": (lambda a: F.dropout(a, 0.5, False), r(3, 4, dtype=f16)),
    # embedding
    "embedding": (lambda i, w: F.embedding(i, w), torch.tensor([[1, 2], [0, 3]]), r(4, 3)),
    "embedding_int32": (lambda i, w: F.embedding(i, w), torch.tensor([3, 0, 3], dtype=torch.int32), r(4, 3)),
    "embedding_0d": (lambda i, w: F.embedding(i, w), torch.tensor(2), r(4, 3)),
    "embedding_padding": (lambda i, w: F.embedding(i, w, padding_idx=0, scale_grad_by_freq=True), torch.tensor([0, 1]),
                          r(4, 3)),
    "embedding_neg_padding_f64": (lambda i, w: F.embedding(i, w, padding_idx=-1), torch.tensor([[0], [1]]),
                                  r(4, 3, dtype=f64)),
    "embedding_empty": (lambda i, w: F.embedding(i, w), torch.zeros(0, 2, dtype=torch.int64), r(4, 3)),
    # attention
    "sdpa": (lambda q, k, v: sdpa(q, k, v), q4, k4, v4),
    "sdpa_causal": (lambda q, k, v: sdpa(q, k, v, is_causal=True), q4, k4, v4),
    "sdpa_causal_square_scale": (lambda q, k, v: sdpa(q, k, v, is_causal=True, scale=0.2), q4, r(2, 3, 5, 8),
                                 r(2, 3, 5, 4)),
    "sdpa_float_mask": (lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), q4, k4, v4, r(5, 6)),
    "sdpa_bool_mask": (lambda q, k, v, m: sdpa(q, k, v, m), q4, k4, v4,
                       torch.cat([torch.ones(5, 1, dtype=torch.bool), r(5, 5) > 0], 1)),
    "sdpa_batched_mask": (lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), q4, k4, v4, r(2, 1, 5, 6)),
    # rows masked out entirely (padding) attend to nothing: 0 as torch's _safe_softmax, not nan
    "sdpa_bool_mask_empty_rows": (lambda q, k, v, m: sdpa(q, k, v, m), q4, k4, v4,
                                  torch.tensor([[True] * 6, [False] * 6, [True, False] * 3, [False] * 6, [True] * 6])),
    "sdpa_float_mask_empty_rows": (lambda q, k, v, m: sdpa(q, k, v, m), q4, k4, v4,
                                   torch.zeros(2, 1, 5, 6).masked_fill(torch.arange(5)[:, None] % 2 == 1, float("-inf"))),
    "sdpa_3d": (lambda q, k, v: sdpa(q, k, v), r(3, 5, 8), r(3, 6, 8), r(3, 6, 4)),
    "sdpa_2d": (lambda q, k, v: sdpa(q, k, v, is_causal=True), r(5, 8), r(5, 8), r(5, 4)),
    "sdpa_broadcast_batch": (lambda q, k, v: sdpa(q, k, v), q4, r(1, 3, 6, 8), r(2, 1, 6, 4)),
    "sdpa_gqa": (lambda q, k, v: sdpa(q, k, v, enable_gqa=True), r(2, 4, 5, 8), r(2, 2, 6, 8), r(2, 2, 6, 4)),
    "sdpa_dropout_eval": (lambda q, k, v: sdpa(q, k, v, dropout_p=0.0, is_causal=True), q4, r(2, 3, 5, 8),
                          r(2, 3, 5, 4)),
    "sdpa_noncontig": (lambda q, k, v: sdpa(q, k, v), r(2, 5, 3, 8).transpose(1, 2), r(2, 6, 3, 8).transpose(1, 2),
                       r(2, 6, 3, 4).transpose(1, 2)),
    "sdpa_f64": (lambda q, k, v: sdpa(q, k, v), r(2, 5, 8, dtype=f64), r(2, 6, 8, dtype=f64), r(2, 6, 4, dtype=f64)),
    "sdpa_f16": (lambda q, k, v: sdpa(q, k, v, is_causal=True), r(2, 6, 8, dtype=f16), r(2, 6, 8, dtype=f16),
                 r(2, 6, 4, dtype=f16), HALF_TOL),
    "sdpa_bf16": (lambda q, k, v: sdpa(q, k, v), r(2, 5, 8, dtype=bf16), r(2, 6, 8, dtype=bf16),
                  r(2, 6, 4, dtype=bf16), HALF_TOL),
}


@pytest.mark.parametrize("fn,args,kw", params(CASES))
def test_matches_eager(fn, args, kw):
    check(fn, *args, **kw)


def test_rmatmul():
    # `other @ x` with a non-proxy `other` ends in x.__rmatmul__(other)
    m = check(lambda x, y: x.__rmatmul__(y), r(3, 4), r(2, 3))
    assert '"ltorch.rmatmul"' in str(m)
    check(lambda x, y: x.__rmatmul__(y), r(4), r(2, 5, 4))


RANDOM = {
    "dropout": (lambda a: F.dropout(a, 0.3), r(3, 4)),
    "dropout_p1": (lambda a: F.dropout(a, 1.0), r(3, 4)),
    "dropout_f16": (lambda a: F.dropout(a, p=0.5, training=True), r(4, 4, dtype=f16)),
    "sdpa_dropout": (lambda q, k, v: sdpa(q, k, v, dropout_p=0.5), q4, k4, v4),
}


@pytest.mark.parametrize("fn,args,kw", params(RANDOM))
def test_random_ops_shapes(fn, args, kw):
    check(fn, *args, random=True, **kw)


def test_einsum_product_without_sum_decomposes_to_mul():
    """An einsum that sums over no label is a broadcast mul, as in eager (which runs it on CUDA
    for integers too; CUDA has no integer matmul), not a matmul with k = 1."""
    from thunder.dialects.definitions import context
    from thunder.dialects.mlir import ir
    from thunder.lowering.decompose import decompose_module

    for eq, a, b in [("i,j->ij", torch.arange(3), torch.arange(4)), ("bi,bj->bij", r(2, 3), r(2, 4)),
                     ("ij,jk->ik", r(3, 4), r(4, 5))]:
        module = trace_module(lambda a, b: torch.einsum(eq, a, b), a, b)
        with context():
            d = ir.Module.parse(str(module))
            decompose_module(d.operation)
        assert ("thunder.matmul" in str(d)) == (eq == "ij,jk->ik") and ("thunder.mul" in str(d)) != (eq == "ij,jk->ik"), (eq, str(d))


def test_dropout_decomposition_statistics():
    """The decomposed dropout zeroes about p of the elements and scales the rest by 1 / (1 - p)."""
    from thunder.dialects.definitions import context
    from thunder.dialects.mlir import ir
    from thunder.lowering.decompose import decompose_module
    from thunder.runtime.codegen import compile_source, python_source

    x = torch.ones(200, 100)
    module = trace_module(lambda a: F.dropout(a, 0.25), x)
    with context():
        d = ir.Module.parse(str(module))
        decompose_module(d.operation)
        src = python_source(d)
    assert "ltorch" not in str(d) and "impl.bernoulli_mask" in src
    torch.manual_seed(3)
    out = compile_source(src)(x)
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.02
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / 0.75))
    torch.manual_seed(3)  # torch's own draw: eager's bits under the same seed
    assert torch.equal(out, F.dropout(x, 0.25))


ERRORS = {
    "matmul_0d": (matmul, r(), r(3)),
    "matmul_1d_mismatch": (matmul, r(3), r(4)),
    "matmul_2d_mismatch": (matmul, r(2, 3), r(4, 5)),
    "matmul_mv_mismatch": (matmul, r(2, 3), r(4)),
    "matmul_batch_mismatch": (matmul, r(2, 3, 4), r(3, 4, 5)),
    "matmul_dtype": (matmul, r(2, 3), r(3, 2, dtype=f64)),
    "mm_1d": (lambda a, b: torch.mm(a, b), r(3), r(3, 2)),
    "mm_shapes": (lambda a, b: torch.mm(a, b), r(2, 3), r(2, 3)),
    "bmm_2d": (lambda a, b: torch.bmm(a, b), r(3, 4), r(2, 4, 5)),
    "bmm_batch": (lambda a, b: torch.bmm(a, b), r(2, 3, 4), r(3, 4, 5)),
    "linear_shape": (lambda a, w: F.linear(a, w), r(2, 3), r(4, 4)),
    "softmax_dim": (lambda a: F.softmax(a, 2), r(3, 4)),
    "softmax_int": (lambda a: torch.softmax(a, 0), torch.arange(3)),
    "log_softmax_dim": (lambda a: a.log_softmax(-3), r(3, 4)),
    "layer_norm_shape": (lambda a: F.layer_norm(a, (3,)), r(3, 4)),
    "layer_norm_weight": (lambda a, w: F.layer_norm(a, (4,), w), r(3, 4), r(3)),
    "dropout_p": (lambda a: F.dropout(a, 1.5), r(3)),
    "embedding_float_index": (lambda i, w: F.embedding(i, w), r(2), r(4, 3)),
    "embedding_1d_weight": (lambda i, w: F.embedding(i, w), torch.tensor([1]), r(4)),
    "embedding_padding": (lambda i, w: F.embedding(i, w, padding_idx=4), torch.tensor([1]), r(4, 3)),
    "sdpa_dtype": (lambda q, k, v: sdpa(q, k, v), q4, k4.double(), v4),
    "sdpa_1d": (lambda q, k, v: sdpa(q, k, v), r(8), r(6, 8), r(6, 4)),
    "sdpa_mask_dtype": (lambda q, k, v, m: sdpa(q, k, v, m), q4, k4, v4, torch.ones(5, 6, dtype=torch.int64)),
    "sdpa_mask_and_causal": (lambda q, k, v, m: sdpa(q, k, v, m, is_causal=True), q4, k4, v4, r(5, 6)),
    "sdpa_gqa_heads": (lambda q, k, v: sdpa(q, k, v, enable_gqa=True), q4, r(2, 2, 6, 8), r(2, 2, 6, 4)),
    "addmm_dtype": (lambda c, a, b: torch.addmm(c, a, b), r(5, dtype=f64), r(3, 4), r(4, 5)),
    "addmm_mat_dtype": (lambda c, a, b: torch.addmm(c, a, b), r(5), r(3, 4, dtype=f64), r(4, 5)),
    "addmm_input_shape": (lambda c, a, b: torch.addmm(c, a, b), r(4), r(3, 4), r(4, 5)),
    "addmm_3d": (lambda c, a, b: torch.addmm(c, a, b), r(5), r(2, 3, 4), r(4, 5)),
    "baddbmm_2d": (lambda c, a, b: torch.baddbmm(c, a, b), r(5), r(3, 4), r(4, 5)),
    "outer_2d": (lambda a, b: torch.outer(a, b), r(2, 3), r(3)),
    "einsum_operands": (lambda a, b: torch.einsum("ij,jk,kl", a, b), r(2, 3), r(3, 4)),
    "einsum_dims": (lambda a: torch.einsum("ijk", a), r(2, 3)),
    "einsum_sizes": (lambda a, b: torch.einsum("ij,jk", a, b), r(2, 3), r(4, 5)),
    "einsum_dtype": (lambda a, b: torch.einsum("ij,jk", a, b), r(2, 3), r(3, 4, dtype=f64)),
    "normalize_int": (lambda a: F.normalize(a.long()), r(3, 4)),
    "normalize_dim": (lambda a: F.normalize(a, dim=2), r(3, 4)),
}


@pytest.mark.parametrize("fn,args,kw", params(ERRORS))
def test_errors_match_eager(fn, args, kw):
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(eager.type):
        trace_module(fn, *args)


def test_arguments_the_ops_refuse_run_as_torch():
    # dropout(inplace=True) and embedding(max_norm=...) (which renormalizes the weight in place):
    # the registered ops refuse them, the fallback records torch's calls with eager's effects
    import thunder

    def drop(a):
        b = a * 1
        F.dropout(b, 0.5, inplace=True)
        return b

    a = r(64)
    torch.manual_seed(0)
    expected = drop(a)
    jdrop = thunder.jit(drop)
    torch.manual_seed(0)
    torch.testing.assert_close(jdrop(a), expected)

    def emb(i, w):
        return F.embedding(i, w, max_norm=1.0)

    i, w = torch.tensor([1, 3]), r(4, 3) * 3
    w_eager, w_jit = w.clone(), w.clone()
    torch.testing.assert_close(thunder.jit(emb)(i, w_jit), emb(i, w_eager))
    torch.testing.assert_close(w_jit, w_eager)  # rows 1 and 3 renormalized in place, as in eager


def test_dropout_inplace():
    import thunder

    def f(a):
        b = a * 1
        out = F.dropout(b, 0.5, inplace=True)
        return out, b

    a = r(1000).abs() + 1
    out, b = thunder.jit(f)(a)
    torch.testing.assert_close(out, b)
    assert set(torch.unique(out / a).tolist()) == {0.0, 2.0}


NAMES = {
    "matmul": (lambda a, b: a @ b, r(2, 3), r(3)),
    "mm": (lambda a, b: a.mm(b), r(2, 3), r(3, 2)),
    "bmm": (lambda a, b: a.bmm(b), r(2, 2, 3), r(2, 3, 2)),
    "linear": (lambda a, w: F.linear(a, w), r(2, 3), r(4, 3)),
    "softmax": (lambda a: a.softmax(-1), r(2, 3)),
    "log_softmax": (lambda a: F.log_softmax(a, -1), r(2, 3)),
    "layer_norm": (lambda a: F.layer_norm(a, (3,)), r(2, 3)),
    "embedding": (lambda i, w: F.embedding(i, w), torch.tensor([0, 1]), r(2, 3)),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b), r(2), r(2, 3), r(3, 2)),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b), r(2), r(1, 2, 3), r(1, 3, 2)),
    "outer": (lambda a, b: torch.outer(a, b), r(2), r(3)),
    "einsum": (lambda a, b: torch.einsum("ij,jk", a, b), r(2, 3), r(3, 2)),
    "normalize": (lambda a: F.normalize(a), r(2, 3)),
    "scaled_dot_product_attention": (lambda q, k, v: sdpa(q, k, v), r(2, 3), r(2, 3), r(2, 3)),
}


@pytest.mark.parametrize("name", NAMES)
def test_op_in_module(name):
    fn, *args = NAMES[name]
    assert f'"ltorch.{name}"' in str(check(fn, *args))


@pytest.mark.parametrize("fn", [lambda a: F.dropout(a, 0.5, False), lambda a: F.dropout(a, 0.0),
                                lambda a: F.dropout(a, 0.3, training=False, inplace=True)],
                         ids=["eval", "p0", "eval_inplace"])
def test_dropout_that_does_nothing_records_nothing(fn):
    """Eager returns the input itself (an eval model's dropouts): the program returns its input,
    no op recorded, no torch call; a training dropout is an op."""
    a = r(2, 3)
    assert fn(a) is a
    module = str(check(fn, a))
    assert '"ltorch.dropout"' not in module and "return %arg0 :" in module, module
    jf = thunder.jit(fn)
    assert jf(a) is a
    train = thunder.jit(lambda a: F.dropout(a, 0.5))
    train(a)
    assert "torch.nn.functional.dropout(a, 0.5, True, False)" in str(thunder.last_traces(train)[0])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gelu_backward_op_and_its_decomposition(approximate, dtype):
    g, x = torch.randn(4, 5, dtype=dtype), torch.randn(4, 5, dtype=dtype)
    m = check(lambda g, x: torch.ops.aten.gelu_backward(g, x, approximate=approximate), g, x,
              rtol=1e-5, atol=1e-5)
    assert '"ltorch.gelu_backward"' in str(m)


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward_op_and_its_decomposition(affine):
    from thunder.ops.nn import layer_norm_backward
    from thunder.ops import impl

    g, x = torch.randn(3, 4, 6, dtype=torch.float64), torch.randn(3, 4, 6, dtype=torch.float64)
    w, b = (torch.randn(6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)) if affine else (None, None)
    xr = x.clone().requires_grad_()
    wr = w.clone().requires_grad_() if affine else None
    br = b.clone().requires_grad_() if affine else None
    torch.nn.functional.layer_norm(xr, (6,), wr, br, 1e-5).backward(g)
    gx, gw, gb = impl.layer_norm_backward(g, x, (6,), w, b, 1e-5)
    torch.testing.assert_close(gx, xr.grad)
    if affine:
        torch.testing.assert_close(gw, wr.grad)
        torch.testing.assert_close(gb, br.grad)
    args = (g, x, w, b) if affine else (g, x)
    fn = (lambda g, x, w, b: layer_norm_backward(g, x, (6,), w, b, 1e-5)) if affine else \
        (lambda g, x: layer_norm_backward(g, x, (6,), None, None, 1e-5))
    m = check(fn, *args)
    assert '"ltorch.layer_norm_backward"' in str(m)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_flash_ops_and_their_decompositions(causal):
    """impl.sdpa_flash(_backward) against torch's flash attention kernels (with a strided last dim,
    which those kernels would read wrong), and their decompositions against them."""
    from thunder.ops import impl
    from thunder.ops.attention import sdpa_flash, sdpa_flash_backward

    aten = torch.ops.aten
    q, k, v = r(2, 3, 6, 4, dtype=f64), r(2, 3, 4, 5, dtype=f64).transpose(-1, -2), r(2, 3, 5, 4, dtype=f64)
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k.contiguous(), v, 0.0, causal, scale=0.4)
    got_out, got_lse = impl.sdpa_flash(q, k, v, causal, scale=0.4)
    torch.testing.assert_close(got_out, out)
    torch.testing.assert_close(got_lse, lse)
    g = r(2, 3, 4, 6, dtype=f64).transpose(-1, -2)
    expected = aten._scaled_dot_product_flash_attention_for_cpu_backward(
        g.contiguous(), q, k.contiguous(), v, out, lse, 0.0, causal, scale=0.4)
    for a, b in zip(impl.sdpa_flash_backward(g, q, k, v, out, lse, causal, scale=0.4), expected):
        torch.testing.assert_close(a, b)
    m = check(lambda q, k, v: sdpa_flash(q, k, v, causal, scale=0.4), q, k, v)
    assert m is None or '"ltorch.sdpa_flash"' in str(m)  # None: on a GPU eager refuses these CPU kernels, thunder alike
    m = check(lambda g, q, k, v, o, lse: sdpa_flash_backward(g, q, k, v, o, lse, causal, scale=0.4),
              g, q, k, v, out, lse)
    assert m is None or '"ltorch.sdpa_flash_backward"' in str(m)


@pytest.mark.parametrize("affine", [True, False])
def test_native_layer_norm_ops_and_their_decompositions(affine):
    """layer_norm's training form (output, mean, rstd) and its backward from the saved mean and
    rstd, against torch's kernels; the decompositions against them."""
    from thunder.ops.nn import native_layer_norm, native_layer_norm_backward

    g, x = r(3, 4, 6, dtype=f64), r(3, 4, 6, dtype=f64)
    w, b = (r(4, 6, dtype=f64), r(4, 6, dtype=f64)) if affine else (None, None)
    out, mean, rstd = torch.ops.aten.native_layer_norm(x, (4, 6), w, b, 1e-3)
    assert mean.shape == (3, 1, 1)
    m = check(lambda x, *wb: native_layer_norm(x, (4, 6), *(wb or (None, None)), 1e-3), x, *([w, b] if affine else []))
    assert '"ltorch.native_layer_norm"' in str(m)
    xr = x.clone().requires_grad_()
    wr, br = (w.clone().requires_grad_(), b.clone().requires_grad_()) if affine else (None, None)
    torch.nn.functional.layer_norm(xr, (4, 6), wr, br, 1e-3).backward(g)
    expected = [xr.grad] + ([wr.grad, br.grad] if affine else [torch.zeros(4, 6, dtype=f64)] * 2)
    fn = lambda g, x, mean, rstd, *wb: native_layer_norm_backward(g, x, (4, 6), mean, rstd, *(wb or (None, None)))  # noqa: E731
    args = (g, x, mean, rstd) + ((w, b) if affine else ())
    for got, e in zip(fn(*args), expected):
        torch.testing.assert_close(got, e)
    m = check(fn, *args)
    assert '"ltorch.native_layer_norm_backward"' in str(m)
