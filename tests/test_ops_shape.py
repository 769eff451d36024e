"""Shape ops (thunder/ops/shape.py) against eager, traced and decomposed."""
import pytest
import torch
import torch.nn.functional as F

from op_harness import check, trace_module

# Known problems outside thunder/ops/shape.py (see the report): IRDL variadic operands/results
# declared with `Any` must all have one type, and prims.cat's meta calls the shadowed `sum`.


def r(*shape, dtype=torch.float32):
    return torch.randn(shape).to(dtype)


x3 = r(3, 4, 5)
xt = r(5, 4).t()  # non-contiguous
x0 = r()
x1 = r(6)

CASES = {
    # reshape / view
    "view_varargs": (lambda a: a.view(4, 15), x3),
    "view_tuple_infer": (lambda a: a.view((-1, 5)), x3),
    "view_infer_middle": (lambda a: a.view(2, -1, 5), r(4, 5, 2)),
    "view_0d": (lambda a: a.view(1, 1), x0),
    "view_to_0d": (lambda a: a.view(()), r(1)),
    "view_noncontig_after_contiguous": (lambda a: a.contiguous().view(-1), xt),
    "view_shape_of_other": (lambda a: a.view(a.shape[0], -1), x3),
    "reshape_fn": (lambda a: torch.reshape(a, (5, -1)), x3),
    "reshape_method_noncontig": (lambda a: a.reshape(-1), xt),
    "reshape_empty": (lambda a: a.reshape(0, 3), r(3, 0)),
    "reshape_f64": (lambda a: a.reshape(2, 2, 3), r(12, dtype=torch.float64)),
    "reshape_int": (lambda a: a.reshape(3, 2), torch.arange(6)),
    "view_as": (lambda a, b: a.view_as(b), r(6), r(2, 3)),
    "reshape_as": (lambda a, b: a.reshape_as(b), xt, r(20)),
    # flatten / unflatten
    "flatten": (lambda a: a.flatten(), x3),
    "flatten_range": (lambda a: torch.flatten(a, 1, 2), r(2, 3, 4, 5)),
    "flatten_neg": (lambda a: a.flatten(-3, -2), r(2, 3, 4, 5)),
    "flatten_0d": (lambda a: a.flatten(), x0),
    "unflatten": (lambda a: a.unflatten(1, (2, -1)), x3),
    # squeeze / unsqueeze
    "squeeze_all": (lambda a: a.squeeze(), r(1, 3, 1, 2)),
    "squeeze_dim": (lambda a: torch.squeeze(a, 2), r(1, 3, 1, 2)),
    "squeeze_dim_not_1": (lambda a: a.squeeze(1), r(1, 3, 1, 2)),
    "squeeze_tuple": (lambda a: a.squeeze((0, -2)), r(1, 3, 1, 2)),
    "squeeze_0d": (lambda a: a.squeeze(0), x0),
    "unsqueeze": (lambda a: a.unsqueeze(1), x3),
    "unsqueeze_neg": (lambda a: torch.unsqueeze(a, -1), x3),
    "unsqueeze_0d": (lambda a: a.unsqueeze(0), x0),
    "contiguous": (lambda a: a.contiguous(), xt),
    # permutations
    "transpose": (lambda a: a.transpose(0, 2), x3),
    "transpose_kw_neg": (lambda a: torch.transpose(a, dim0=-1, dim1=0), x3),
    "transpose_same": (lambda a: a.transpose(1, 1), x3),
    "transpose_0d": (lambda a: a.transpose(0, -1), x0),
    "swapdims": (lambda a: torch.swapdims(a, 0, 1), x3),
    "permute_varargs": (lambda a: a.permute(2, 0, 1), x3),
    "permute_fn_neg": (lambda a: torch.permute(a, (-1, -3, -2)), x3),
    "permute_noncontig": (lambda a: a.permute(1, 0), xt),
    "t_2d": (lambda a: a.t(), xt),
    "t_1d": (lambda a: torch.t(a), x1),
    "T_mT": (lambda a, b: (a.mT, b.T), x3, xt),
    "mT_0d": (lambda a: a.mT + 1, x0),  # eager: the identity (deprecated) on 0-d tensors
    "movedim": (lambda a: a.movedim(0, -1), x3),
    "movedim_tuple": (lambda a: torch.movedim(a, (0, 1), (2, 0)), x3),
    # broadcasting
    "expand": (lambda a: a.expand(2, 3, 4), r(3, 1)),
    "expand_minus1": (lambda a: a.expand(2, -1, 4), r(3, 1)),
    "expand_tuple": (lambda a: a.expand((5, 6)), x1),
    "expand_0d": (lambda a: a.expand(3, 2), x0),
    "expand_as": (lambda a, b: a.expand_as(b), r(4, 1), r(2, 4, 3)),
    "broadcast_to": (lambda a: torch.broadcast_to(a, (2, 6)), x1),
    # joining
    "cat_same": pytest.param(lambda a, b: torch.cat([a, b]), x3, x3),
    "cat_single": (lambda a: torch.cat((a,), 1), x3),
    "stack": pytest.param(lambda a, b: torch.stack([a, b]), x3, x3),
    "stack_neg": pytest.param(lambda a, b: torch.stack((a, b), -1), xt, xt),
    "stack_0d": pytest.param(lambda a, b: torch.stack([a, b]), x0, x0),
    # splitting
    "split_even": (lambda a: a.split(2, 1), x3),
    "split_uneven": pytest.param(lambda a: torch.split(a, 2), r(5, 2)),
    "split_sizes": pytest.param(lambda a: torch.split(a, [1, 3], 1), x3),
    "split_sizes_equal": (lambda a: torch.split(a, [2, 2], -2), x3),
    "split_empty": (lambda a: a.split(3), r(0, 2)),
    "chunk_even": (lambda a: a.chunk(2, 1), x3),
    "chunk_fewer": (lambda a: torch.chunk(a, 4), r(6)),
    "chunk_uneven": pytest.param(lambda a: a.chunk(3, -1), x3),
    "unbind": (lambda a: a.unbind(1), x3),
    "unbind_fn_neg": (lambda a: torch.unbind(a, -1), xt),
    "narrow": (lambda a: a.narrow(1, 1, 2), x3),
    "narrow_neg_start": (lambda a: torch.narrow(a, -1, -3, 2), x3),
    "narrow_empty": (lambda a: a.narrow(0, 3, 0), x3),
    "select": (lambda a: a.select(1, -1), x3),
    "select_fn": (lambda a: torch.select(a, 0, 2), x1),
    # indexing
    "getitem_int": (lambda a: a[1], x3),
    "getitem_neg_int": (lambda a: a[-1, -2], x3),
    "getitem_slices": (lambda a: a[1:, ::2, -3:-1], x3),
    "getitem_step_past_end": (lambda a: a[::3, 10:, :100], x3),
    "getitem_mixed": (lambda a: a[1, ::2, None, ..., -1], x3),
    "getitem_ellipsis": (lambda a: a[..., 0], x3),
    "getitem_ellipsis_only": (lambda a: a[...], x3),
    "getitem_two_ellipses": (lambda a: (a[..., ...], a[..., 0, ...], a[..., None, ...]), x3),
    "getitem_none": (lambda a: a[None, :, None], x3),
    "getitem_bool": (lambda a: (a[True], a[False], a[None, True]), x3),
    "getitem_0d": (lambda a: (a[None], a[...], a[True]), x0),
    "getitem_noncontig": (lambda a: a[1:3, 0], xt),
    "getitem_empty_slice": (lambda a: a[3:1], x3),
    "getitem_f16": (lambda a: a[:, 1:3], r(3, 4, dtype=torch.float16)),
    "getitem_bf16": (lambda a: a[0, ::2], r(3, 4, dtype=torch.bfloat16)),
    "getitem_int_tensor": (lambda a: a[1:, 0], torch.arange(12).reshape(3, 4)),
    "iterate": (lambda a: list(a), r(3, 2)),
    "chain": (lambda a: a.reshape(2, 2, 15).transpose(0, 1).flatten(1)[..., 1:].unsqueeze(0), x3),
    # shape ops inside fused regions (op_harness's fused variant) with arithmetic around them
    "fused_reshape_noncontig": (lambda a: (a.reshape(-1) * 2, a.reshape(-1)), xt),
    "fused_slice_then_arith": (lambda a: a[1:, ::2, 1:4] * 2 + 1, x3),
    "fused_transpose_arith": (lambda a: (a.transpose(0, 2) + 1).reshape(5, -1) * a.sum(), x3),
    "fused_expand_arith": (lambda a, b: a.expand(3, 4) * b + b.t().t(), r(3, 1), r(3, 4)),
    "fused_0d_unsqueeze": (lambda a, b: (a.unsqueeze(0) * b, a.reshape(1, 1) + 1), x0, x1),
    "fused_int_views": (lambda a: ((a.t() * 3 + 1).reshape(-1), a[:, 1:].t() // 2),
                        torch.arange(12).reshape(3, 4)),
    "fused_bool_views": (lambda a: ((a.t() & a.t()).flatten(), a.unsqueeze(0) | a), torch.rand(3, 4) > 0.5),
    "fused_f16_views": (lambda a: ((a.t() * 2).reshape(-1) + 1, a[::2].permute(1, 0) * a[1, ::2]), r(3, 4, dtype=torch.float16)),
    "fused_empty_views": (lambda a: (a.t() * 2).reshape(-1) + 1, r(0, 3)),
    # repeat, repeat_interleave, flip, roll, diff, tril/triu
    "split_size_keyword": (lambda a: (a.split(split_size=2, dim=1), torch.split(a, split_size_or_sections=[1, 2])), x3),
    "repeat": (lambda a: a.repeat(2, 1, 3), x3),
    "repeat_lead": (lambda a: a.repeat((2, 1, 2)) * 2, xt),
    "repeat_0d": (lambda a: (a.repeat(3), a.repeat(())), x0),
    "repeat_zero": (lambda a: a.repeat(0, 2), r(2, 3)),
    "repeat_int_f16": (lambda a, b: (a.repeat(2, 2), b.repeat(1, 2)), torch.arange(6).reshape(2, 3),
                       r(2, 2, dtype=torch.float16)),
    "repeat_interleave": (lambda a: a.repeat_interleave(2), x3),
    "repeat_interleave_dim": (lambda a: (torch.repeat_interleave(a, 3, dim=1), a.repeat_interleave(2, -1)), xt),
    "repeat_interleave_0d": (lambda a: a.repeat_interleave(2), x0),
    "repeat_interleave_gqa": (lambda a: a.repeat_interleave(2, dim=1) + 1, r(2, 3, 4, 5, dtype=torch.bfloat16)),
    "repeat_interleave_tensor": (lambda a, n: a.repeat_interleave(n, dim=0, output_size=6), r(3, 2),
                                 torch.tensor([1, 0, 5])),
    "repeat_interleave_counts": (lambda n: torch.repeat_interleave(n, output_size=4), torch.tensor([2, 0, 2])),
    "flip": (lambda a: a.flip(0), x3),
    "flip_dims": (lambda a: (torch.flip(a, (0, -1)), a.flip(1, 2) * 2), x3),
    "flip_noncontig_int": (lambda a, b: (a.flip(0), b.flip(1)), xt, torch.arange(6).reshape(2, 3)),
    "flip_0d_empty": (lambda a, b: (a.flip(0), b.flip(0)), x0, r(0, 2)),
    "roll": (lambda a: torch.roll(a, 2), x3),
    "roll_dims": (lambda a: (a.roll((1, -2), (0, 2)), a.roll(7, 1), a.roll(-1, -1)), x3),
    "roll_noncontig_bool": (lambda a, b: (a.roll(1, 0), b.roll(1, 1)), xt, torch.rand(3, 4) > 0.5),
    "diff": (lambda a: torch.diff(a), x3),
    "diff_n_dim": (lambda a: (a.diff(2, 0), a.diff(n=0), a.diff(n=7)), x3),
    "diff_prepend_append": (lambda a, p, q: torch.diff(a, dim=1, prepend=p, append=q), r(2, 3), r(2, 1, dtype=torch.float64),
                            torch.ones(2, 2, dtype=torch.int64)),
    "diff_bool_int_f16": (lambda a, b, c: (a.diff(), b.diff(), c.diff(dim=0)), torch.rand(5) > 0.5,
                          torch.arange(6).reshape(2, 3) ** 2, r(3, 2, dtype=torch.float16)),
    "tril_triu": (lambda a: (torch.tril(a), a.triu(), a.tril(1), torch.triu(a, -2)), r(4, 5)),
    "tril_batch_noncontig": (lambda a: (a.tril(-1), a.transpose(1, 2).triu(2)), x3),
    "tril_types": (lambda a, b, c: (a.tril(), b.triu(1), c.tril()), torch.rand(3, 3) > 0.5,
                   torch.arange(9).reshape(3, 3), r(3, 2, dtype=torch.bfloat16)),
    "tril_empty": (lambda a: a.tril(), r(0, 3)),
    # F.pad
    "pad": (lambda a: (F.pad(a, (1, 2)), F.pad(a, [0, 1, 2, 0], value=-1.5), F.pad(a, (1, 1, 1, 1, 1, 1))), x3),
    "pad_negative": (lambda a: (F.pad(a, (-1, 2, 1, -2)), F.pad(a, (-1, -1), value=3.0)), x3),
    "pad_types": (lambda a, b, c: (F.pad(a, (1, 1), value=2.7), F.pad(b, (2, 0), value=True), F.pad(c, (1, 2))),
                  torch.arange(6).reshape(2, 3), torch.rand(2, 3) > 0.5, r(2, 3, dtype=torch.bfloat16)),
    "pad_reflect": (lambda a, b: (F.pad(a, (2, 2), mode="reflect"), F.pad(b, (1, 3, 2, 0), mode="reflect")),
                    r(2, 3, 4), r(1, 2, 4, 5)),
    "pad_replicate": (lambda a, b: (F.pad(a, (2, 4), mode="replicate"), F.pad(b, (1, 0, 0, 2, 3, 1), mode="replicate"),
                                    F.pad(a, (-1, -1), mode="replicate")), r(2, 3, 4), r(1, 2, 3, 4, 5)),
    "pad_circular": (lambda a, b: (F.pad(a, (1, 3), mode="circular"), F.pad(b, (2, 2, 1, 0), mode="circular"),
                                   F.pad(a, (-1, 1), mode="circular")), r(2, 3, 4), r(1, 2, 3, 4)),
    "pad_noncontig_f16": (lambda a, b: (F.pad(a, (1, 1, 0, 2)), F.pad(b, (2, 1), mode="reflect")), xt,
                          r(2, 3, 5, dtype=torch.float16)),
    "pad_empty_0d": (lambda a, b: (F.pad(a, (1, 1)), F.pad(b, ())), r(2, 0), x0),
}


def params(cases):
    """{id: (fn, *args) or pytest.param(fn, *args, marks=...)} -> pytest params (fn, args)."""
    out = []
    for k, v in cases.items():
        marks = getattr(v, "marks", ())
        v = getattr(v, "values", v)
        out.append(pytest.param(v[0], v[1:], id=k, marks=marks))
    return out


@pytest.mark.parametrize("fn,args", params(CASES))
def test_matches_eager(fn, args):
    check(fn, *args)


def _param(fn, *args, marks=()):
    return pytest.param(fn, args, marks=marks)


@pytest.mark.parametrize("fn,args", [
    _param(lambda a, b: torch.cat([a, b], 1), x3, r(3, 2, 5)),
    _param(lambda a, b: torch.cat([a, b], -1), r(2, 3), r(2, 3, dtype=torch.float64)),
    _param(lambda a, b: torch.concat((a, b)), r(2, 3), r(0)),
    _param(lambda a, b: torch.stack([a, b], 1), r(2, 3), r(2, 3, dtype=torch.float64)),
    _param(lambda a, b: torch.cat([a, b]), x3, x3),
    _param(lambda a, b: torch.stack([a, b], 2), x3, x3),
])
def test_join_known_core_issues(fn, args):
    check(fn, *args)


@pytest.mark.parametrize("fn,args", [
    _param(lambda a, b: torch.cat([a, b]), x3, x3),
    _param(lambda a, b: torch.stack([a, b], -2), x3, x3),
    _param(lambda a, b: torch.cat([a, b, a], 1), xt, xt),
])
def test_join_not_decomposed(fn, args):
    check(fn, *args, decompose=False)


ERRORS = {
    "view_numel": (lambda a: a.view(7, -1), x3),
    "view_two_infer": (lambda a: a.view(-1, -1), x3),
    "view_negative": (lambda a: a.reshape(-2, 30), x3),
    "view_ambiguous": (lambda a: a.reshape(-1, 0), r(0, 3)),
    "flatten_order": (lambda a: a.flatten(2, 0), x3),
    "flatten_dim": (lambda a: a.flatten(0, 3), x3),
    "squeeze_dim": (lambda a: a.squeeze(3), x3),
    "unsqueeze_dim": (lambda a: a.unsqueeze(5), x3),
    "transpose_dim": (lambda a: a.transpose(0, 3), x3),
    "permute_len": (lambda a: a.permute(0, 1), x3),
    "permute_dup": (lambda a: a.permute(0, 0, 1), x3),
    "permute_range": (lambda a: a.permute(0, 1, 5), x3),
    "t_3d": (lambda a: a.t(), x3),
    "expand_mismatch": (lambda a: a.expand(4, 4), r(3, 1)),
    "expand_too_few": (lambda a: a.expand(4), r(3, 1)),
    "expand_leading_minus1": (lambda a: a.expand(-1, 3, 1), r(3, 1)),
    "cat_empty": (lambda a: torch.cat([]), x3),
    "cat_0d": (lambda a: torch.cat([a, a]), x0),
    "cat_sizes": (lambda a, b: torch.cat([a, b], 0), x3, r(3, 2, 5)),
    "cat_dim": (lambda a: torch.cat([a, a], 3), x3),
    "stack_sizes": (lambda a, b: torch.stack([a, b]), x3, r(3, 4)),
    "stack_dim": (lambda a: torch.stack([a, a], 4), x3),
    "split_sum": (lambda a: torch.split(a, [1, 1]), x3),
    "split_negative": (lambda a: a.split(-1), x3),
    "split_zero": (lambda a: a.split(0), x3),
    "chunk_zero": (lambda a: a.chunk(0), x3),
    "unbind_0d": (lambda a: a.unbind(), x0),
    "narrow_start": (lambda a: a.narrow(0, 4, 0), x3),
    "narrow_length": (lambda a: a.narrow(0, 2, 2), x3),
    "narrow_0d": (lambda a: a.narrow(0, 0, 1), x0),
    "mT_1d": (lambda a: a[0, 0].mT, x3),
    "select_index": (lambda a: a.select(0, 3), x3),
    "getitem_out_of_range": (lambda a: a[3], x3),
    "getitem_neg_out_of_range": (lambda a: a[:, -5], x3),
    "getitem_too_many": (lambda a: a[0, 0, 0, 0], x3),
    "getitem_0d": (lambda a: a[0], x0),
    "getitem_negative_step": (lambda a: a[::-1], x3),
    "getitem_zero_step": (lambda a: a[::0], x3),
    "repeat_too_few": (lambda a: a.repeat(2, 2), x3),
    "repeat_negative": (lambda a: a.repeat(2, -1, 1), x3),
    "repeat_interleave_negative": (lambda a: a.repeat_interleave(-1), x3),
    "flip_dup": (lambda a: a.flip(0, -3), x3),
    "flip_dim": (lambda a: a.flip(3), x3),
    "roll_no_dims": (lambda a: a.roll((1, 2)), x3),
    "roll_mismatch": (lambda a: a.roll((1, 2), 0), x3),
    "diff_0d": (lambda a: a.diff(), x0),
    "diff_negative": (lambda a: a.diff(-1), x3),
    "diff_prepend_ndim": (lambda a: a.diff(prepend=a[0]), x3),
    "diff_prepend_shape": (lambda a: a.diff(dim=0, prepend=a[:, :1]), x3),
    "tril_1d": (lambda a: a.tril(), x1),
    "pad_odd": (lambda a: F.pad(a, (1,)), x3),
    "pad_too_long": (lambda a: F.pad(a, (1,) * 8), x3),
    "pad_crop_too_much": (lambda a: F.pad(a, (-6, 0)), x3),
    "pad_mode": (lambda a: F.pad(a, (1, 1), mode="bogus"), x3),
    "pad_reflect_value": (lambda a: F.pad(a, (1, 1), mode="reflect", value=1.0), x3),
    "pad_reflect_too_big": (lambda a: F.pad(a, (5, 0), mode="reflect"), x3),
    "pad_circular_too_big": (lambda a: F.pad(a, (6, 0), mode="circular"), x3),
    "pad_reflect_1d": (lambda a: F.pad(a, (1, 1), mode="reflect"), x1),
}


@pytest.mark.parametrize("fn,args", params(ERRORS))
def test_errors_match_eager(fn, args):
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(eager.type):
        trace_module(fn, *args)


NAMES = {
    "reshape": (lambda a: a.reshape(-1), x3),
    "view": (lambda a: a.view(-1), x3),
    "view_as": (lambda a: a.view_as(a), x3),
    "reshape_as": (lambda a: a.reshape_as(a), x3),
    "flatten": (lambda a: a.flatten(), x3),
    "unflatten": (lambda a: a.unflatten(0, (3, 1)), x3),
    "transpose": (lambda a: a.transpose(0, 1), x3),
    "permute": (lambda a: a.permute(1, 2, 0), x3),
    "t": (lambda a: a.t(), xt),
    "movedim": (lambda a: a.movedim(1, 0), x3),
    "expand": (lambda a: a.expand(2, 6), x1),
    "expand_as": (lambda a, b: a.expand_as(b), x1, r(2, 6)),
    "broadcast_to": (lambda a: a.broadcast_to(2, 6), x1),
    "squeeze": (lambda a: a.squeeze(), x3),
    "unsqueeze": (lambda a: a.unsqueeze(0), x3),
    "contiguous": (lambda a: a.mT.contiguous(), x3),  # (of a contiguous tensor: eager returns it itself)
    "cat": (lambda a: torch.cat([a, a]), x3),
    "stack": (lambda a: torch.stack([a, a]), x3),
    "split": (lambda a: a.split(1), x3),
    "chunk": (lambda a: a.chunk(3), x3),
    "unbind": (lambda a: a.unbind(), x3),
    "narrow": (lambda a: a.narrow(0, 0, 1), x3),
    "select": (lambda a: a.select(0, 0), x3),
    "getitem": (lambda a: a[0, 1:], x3),
    "repeat": (lambda a: a.repeat(2, 1, 1), x3),
    "repeat_interleave": (lambda a: a.repeat_interleave(2, 0), x3),
    "flip": (lambda a: a.flip(0), x3),
    "roll": (lambda a: a.roll(1), x3),
    "diff": (lambda a: a.diff(), x3),
    "tril": (lambda a: a.tril(), x3),
    "triu": (lambda a: a.triu(), x3),
    "pad": (lambda a: F.pad(a, (1, 1)), x3),
}


@pytest.mark.parametrize("name", NAMES)
def test_op_in_module(name):
    fn, *args = NAMES[name]
    assert f'"ltorch.{name}"' in str(check(fn, *args, decompose=True))


def test_repeat_interleave_tensor_repeats_without_output_size():
    # (the total of the repeats is read while tracing: a split, tests/test_data_dependent.py)
    import thunder

    for fn, args in ((lambda a, n: a.repeat_interleave(n, dim=0), (r(3, 2), torch.tensor([1, 0, 5]))),
                     (lambda n: torch.repeat_interleave(n), (torch.tensor([1, 0, 5]),)),
                     (lambda a, n: a.repeat_interleave(n[:1]), (r(3, 2), torch.tensor([2, 0, 5])))):
        torch.testing.assert_close(thunder.jit(fn)(*args), fn(*args))


def test_views_are_marked():
    from thunder.ops import registry

    for name in set(NAMES) - {"cat", "stack", "repeat", "repeat_interleave", "flip", "roll", "diff", "tril", "triu",
                              "pad"}:
        assert registry.OPS[f"ltorch.{name}"].is_view, name
