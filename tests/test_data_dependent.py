"""Data-dependent Python inside thunder.jit: values read from tensors split the program (the
value becomes a constant the program checks; another value is a cache miss), runtime numbers
stay runtime values while Python does not need them (runtime/reads.py, core/numbers.py)."""
import warnings

import pytest
import torch

import thunder


def check_calls(fn, inputs, *, compiles=None, **jit_kwargs):
    """thunder.jit(fn) equals fn on every input tuple in turn (also the inputs' in-place updates);
    compiles: the expected number of compilations."""
    jf = thunder.jit(fn, **jit_kwargs)
    for args in inputs:
        a1 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        a2 = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        torch.testing.assert_close(jf(*a2), fn(*a1))
        for x, y in zip(a2, a1):
            if isinstance(x, torch.Tensor):
                torch.testing.assert_close(x, y)
    if compiles is not None:
        assert thunder.compile_stats(jf).cache_misses == compiles
    return jf


def signs(*s, n=4):
    return [(torch.arange(1.0, n + 1) * v,) for v in s]


# ---- each kind of read
def test_branch_on_a_comparison_compiles_once_per_outcome():
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 1

    jf = check_calls(f, signs(1, -1, 2, -3, 1, -1), compiles=2)
    cs = thunder.compile_stats(jf)
    assert cs.calls == 6 and cs.cache_hits == 4


@pytest.mark.parametrize("read", [
    lambda t: bool(t > 0),
    lambda t: t.item() > 0,
    lambda t: float(t) > 0,
    lambda t: int(t) > 0,
    lambda t: (t > 0).any(),
    lambda t: t.tolist() > 0,
], ids=["bool", "item", "float", "int", "any", "tolist"])
def test_each_read_kind_branches_as_eager(read):
    def f(x):
        s = x.sum()
        return x + 1 if read(s) else x * 3

    check_calls(f, signs(1, -1, 1, -2), compiles=2)


def test_value_used_as_index_and_size():
    def f(x, n):
        k = int(n)
        return x[:k] * 2, torch.zeros(k) + x[k]

    jf = check_calls(f, [(torch.arange(6.0), torch.tensor(2)), (torch.arange(6.0), torch.tensor(4)),
                         (torch.arange(6.0) + 1, torch.tensor(2))], compiles=2)
    assert thunder.compile_stats(jf).last_miss_reason.endswith("of n at {}:{} changed (2 -> 4)".format(__file__, f.__code__.co_firstlineno + 2))


def test_tolist_and_numpy():
    def f(x):
        a, b = x.tolist()
        return x * (a + b), x * float(x.numpy().sum())

    # (numpy() needs the values: a split; tolist() gives runtime numbers)
    jf = check_calls(f, [(torch.tensor([1.0, 2.0]),), (torch.tensor([3.0, -1.0]),), (torch.tensor([1.0, 2.0]),)],
                     compiles=2)
    assert [s.what for s in thunder.compile_stats(jf).last_splits] == ["numpy() of x.tolist()[0]",
                                                                      "numpy() of x.tolist()[1]"]


def test_carried_number_does_not_specialize():
    def f(y):
        return y * 2, y.sum().item()

    jf = check_calls(f, [(torch.randn(3),) for _ in range(4)], compiles=1)
    assert thunder.compile_stats(jf).last_splits == []


def test_number_as_operand_and_arithmetic_stays_a_runtime_value():
    def f(x, s):
        m = s.max().item()
        scale = 2 * m + 1
        return x * scale, scale / 3, -m, m ** 2

    check_calls(f, [(torch.randn(3), torch.randn(4)) for _ in range(4)], compiles=1)


def test_miss_reason_names_the_read_line_and_values():
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    jf = thunder.jit(f)
    jf(torch.ones(2))
    jf(-torch.ones(2))
    reason = thunder.compile_stats(jf).last_miss_reason
    assert "bool()" in reason and "test_data_dependent.py:" in reason and "True -> False" in reason


# ---- reporting and sharp edges
def test_compile_stats_and_trace_report_the_split():
    def f(x):
        y = x * 2
        if y.sum() > 0:
            return y + 1
        return y

    jf = thunder.jit(f)
    jf(torch.ones(3))
    line = f.__code__.co_firstlineno + 2
    [split] = thunder.compile_stats(jf).last_splits
    assert (split.location, split.what, split.value) == (f"{__file__}:{line}", "bool() of t2", True)
    trace = str(thunder.last_traces(jf)[-1])
    assert f"  n0 = torch.Tensor.item(t2)  # bool ({__file__}:{line})\n  del t2\n  if n0 is not True: impl.value_changed(n0, True, 'bool() of t2 at {__file__}:{line}', _rng)" in trace


def test_sharp_edges_error_names_the_line():
    def f(x):
        if x.sum().item() > 0:
            return x
        return -x

    with pytest.raises(thunder.JITSharpEdgeError, match=r"bool\(\) of .* at .*test_data_dependent.py:\d+"):
        thunder.jit(f, sharp_edges="error")(torch.randn(3))
    # carried numbers are no split
    torch.testing.assert_close(thunder.jit(lambda x: x * x.sum().item(), sharp_edges="error")(torch.ones(2)),
                               torch.full((2,), 2.0))


def test_sharp_edges_warn_once_per_line():
    def f(x):
        return x + 1 if x.any() else x

    jf = thunder.jit(f, sharp_edges="warn")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        jf(torch.ones(2))
        jf(torch.zeros(2))
        jf(torch.zeros(3))
    assert len([x for x in w if "needs a tensor's value" in str(x.message)]) == 1


# ---- training, randomness, in-place updates, fusion
def test_training_through_a_branch():
    def f(x, w):
        y = x @ w
        if y.mean() > 0:
            return (y.relu() * 2).sum()
        return (y * y).sum()

    jf = thunder.jit(f)
    for s in (1, -1, 1):
        x = torch.randn(3, 4).abs() * s
        w1 = torch.rand(4, 2, requires_grad=True)
        w2 = w1.detach().clone().requires_grad_()
        out = jf(x, w1)
        expected = f(x, w2)
        torch.testing.assert_close(out, expected)
        out.backward()
        expected.backward()
        torch.testing.assert_close(w1.grad, w2.grad)
    assert thunder.compile_stats(jf).cache_misses == 2


def test_dropout_before_a_read_matches_eager_under_manual_seed():
    def f(x):
        y = torch.nn.functional.dropout(x, 0.5)
        if y.sum() > 4:
            return y * 2
        return y - 1

    jf = thunder.jit(f)
    for seed in (0, 1, 2, 3, 4, 5):
        x = torch.ones(8)
        torch.manual_seed(seed)
        expected = f(x)
        after_eager = torch.rand(1)
        torch.manual_seed(seed)
        got = jf(x)
        after_jit = torch.rand(1)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(after_jit, after_eager)  # (a miss does not change the stream)


def test_inplace_updates_before_and_after_a_read_happen_once():
    def f(x, buf):
        buf.add_(1)
        if buf.sum() > 0:
            buf.mul_(2)
        else:
            buf.sub_(1)
        return x + buf

    check_calls(f, [(torch.ones(3), torch.zeros(3)), (torch.ones(3), -torch.full((3,), 5.0)),
                    (torch.ones(3), torch.ones(3)), (torch.ones(3), -torch.full((3,), 5.0))], compiles=2)


def test_fused_kernels_with_reads():
    def f(x):
        y = (x * 2).exp() - 1
        if y.sum() > 10:
            return (y.tanh() + 1) * y.sum().item()
        return y.sin() * 3

    check_calls(f, [(torch.ones(4),), (torch.zeros(4),), (torch.ones(4) * 2,)], compiles=2, fusion="always")


# ---- ops whose result shape depends on values
def test_nonzero_masked_select_unique_repeat_interleave():
    def f(x, r):
        return (torch.nonzero(x > 0), torch.masked_select(x, x > 0.5) * 2, torch.unique(x.round(), return_counts=True),
                torch.repeat_interleave(x[0], r), x.nonzero(as_tuple=True))

    r = torch.tensor([1, 0, 2, 3])
    x = torch.tensor([[1.0, -1.0, 0.7, 2.0], [0.2, 3.0, -2.0, 0.0]])
    jf = check_calls(f, [(x, r), (x + 0, r), (-x, r), (x, r)], compiles=2)
    assert [s.what for s in thunder.compile_stats(jf).last_splits][:3] == [
        "the result shape of torch.nonzero()", "the result shape of torch.masked_select()",
        "the result shape of torch._unique2()"]
    line = f.__code__.co_firstlineno
    assert [s.location for s in thunder.compile_stats(jf).last_splits] == [f"{__file__}:{line + 1}"] * 3 + [
        f"{__file__}:{line + 2}"] * 2


def test_data_dependent_shapes_with_gradients():
    def f(x):
        return (torch.masked_select(x, x > 0) ** 2).sum() + x[x < -0.5].exp().sum()

    jf = thunder.jit(f)
    for seed in range(3):
        torch.manual_seed(seed)
        x1 = torch.randn(5, 3, requires_grad=True)
        x2 = x1.detach().clone().requires_grad_()
        out = jf(x1)
        expected = f(x2)
        torch.testing.assert_close(out, expected)
        out.backward()
        expected.backward()
        torch.testing.assert_close(x1.grad, x2.grad)


def test_equal_and_allclose_are_runtime_bools():
    def f(x, y):
        return torch.equal(x, y), x.allclose(y), x * 2 if torch.equal(x, y) else x

    x = torch.randn(3)
    check_calls(f, [(x, x.clone()), (x, x + 1), (x, x.clone())], compiles=2)


def test_module_buffer_update_and_stored_number_in_training():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.zeros(()))
            self.lin = torch.nn.Linear(3, 3)
            self.last = None

        def forward(self, x):
            self.steps.add_(1)
            y = self.lin(x)
            self.last = y.sum().item()  # (a runtime number written to an attribute)
            if self.steps > 2:
                return y * self.last
            return y

    m1 = M()
    m2 = M()
    m2.load_state_dict(m1.state_dict())
    jm = thunder.jit(m1)
    for _ in range(5):
        x = torch.randn(2, 3)
        out, expected = jm(x), m2(x)
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        assert m1.steps.item() == m2.steps.item() and m1.last == pytest.approx(m2.last)
        assert type(m1.last) is float
        torch.testing.assert_close(m1.lin.weight.grad, m2.lin.weight.grad)
    assert thunder.compile_stats(jm).cache_misses == 2


# ---- boolean masks: the number of True elements is read, the rest are registered ops
def masks():
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    return [(x,), (x.flip(0),), (-x,), (x,), (torch.zeros(4, 5),)]


@pytest.mark.parametrize("fn", [
    lambda x: x[x > 0],
    lambda x: x[x[:, 0] > 0, 1:] * 2,
    lambda x: x[:, x[0] > 0].exp(),
    lambda x: (x[..., x[1] > 0], x[x[:, 2] > 0, torch.tensor([1])]),
    lambda x: torch.where(x > 0),
    lambda x: x[torch.where(x > 0)],
], ids=["mask", "mask_slice", "slice_mask", "mixed", "where", "where_index"])
def test_bool_mask_getitem_as_eager_with_gradients(fn):
    jf = check_calls(fn, masks())
    for (x,) in masks()[:3]:
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, expected = jf(x1), fn(x2)
        if out[0].dtype is torch.int64:
            continue  # (indices: no gradient)
        if isinstance(out, tuple):
            out, expected = torch.cat([o.reshape(-1) for o in out]), torch.cat([e.reshape(-1) for e in expected])
        torch.testing.assert_close(out, expected)
        (out * torch.arange(float(out.numel())).view(out.shape)).sum().backward()
        (expected * torch.arange(float(expected.numel())).view(expected.shape)).sum().backward()
        torch.testing.assert_close(x1.grad, x2.grad)


def test_bool_mask_count_changes_compile_and_hit():
    def f(x):
        return x[x > 0] * 2

    counts = [int((x > 0).sum()) for (x,) in masks()]
    jf = check_calls(f, masks(), compiles=len(set(counts)))
    assert len(set(counts)) > 1
    line = f.__code__.co_firstlineno + 1
    assert [(s.what, s.location, s.value) for s in thunder.compile_stats(jf).last_splits] == [
        ("the number of True elements of the mask t0", f"{__file__}:{line}", 0)]
    assert "nonzero_static" in str(thunder.last_traces(jf)[-1])  # (the registered index op, no generic call)
    assert "__getitem__" not in str(thunder.last_traces(jf)[-1])


def test_bool_mask_setitem():
    def aug(x, m):
        x = x.clone()
        x[m] += 1
        x[m] *= torch.arange(1.0, 1.0 + int(m.sum()))
        return x

    def fill(x, m):
        x[m] = 0.0  # (a where: no read)
        return x

    inputs = [(x, x > 0) for (x,) in masks()]
    check_calls(aug, inputs)
    jf = check_calls(fill, inputs, compiles=1)
    assert thunder.compile_stats(jf).last_splits == []


def test_tensor_values_as_sizes_and_repeats():
    def f(x, r):
        return torch.zeros(r[0]) + x.sum(), x.repeat_interleave(r, dim=0), torch.repeat_interleave(r), x.reshape(r[1], -1)

    x = torch.randn(3, 4)
    check_calls(f, [(x, torch.tensor([2, 3, 1])), (x, torch.tensor([2, 3, 1])), (x, torch.tensor([1, 6, 0])),
                    (x, torch.tensor([2, 3, 1]))], compiles=2)


def test_many_reads_run_each_recorded_op_once(monkeypatch):
    """Reading 40 values does not rerun the prefix 40 times: each recorded op runs once while
    tracing (then codegen writes it once for the program)."""
    from thunder.runtime import codegen

    written = []
    original = codegen.op_statements
    monkeypatch.setattr(codegen, "op_statements", lambda op, values, outs, *rest: written.append(op.name) or
                        original(op, values, outs, *rest))

    def f(x):
        for _ in range(40):
            x = x * 0.5 if x.sum() > 1 else x + 1
        return x

    jf = check_calls(f, [(torch.ones(3),)], compiles=1)
    n = len(written)
    assert len(thunder.compile_stats(jf).last_splits) == 40
    ops = sum(1 for ln in str(thunder.last_traces(jf)[0]).splitlines() if " = " in ln or "value_changed" in ln)
    assert ops >= 5 * 40 and n <= 2 * ops + 10, (ops, n)


def test_manual_seed_inside_the_function_before_a_read():
    def f(x):
        torch.manual_seed(7)  # (recorded: every call seeds, as eager)
        y = x + torch.rand(4)
        return y * 2 if y.sum() > 2.5 else y

    jf = check_calls(f, [(torch.zeros(4),), (torch.ones(4),), (torch.zeros(4),)])
    after_jit = torch.rand(2)
    f(torch.zeros(4))
    torch.testing.assert_close(after_jit, torch.rand(2))  # (the generator is where eager leaves it)
    assert "torch.manual_seed(7)" in str(thunder.last_traces(jf)[-1])


def test_value_a_fused_kernel_rounds_differently_recompiles_without_fusion():
    expr = lambda x: ((x * 1.3).exp().tanh() * 3).sum()  # noqa: E731
    fused_expr = thunder.jit(expr, fusion="always")
    # the premise: an input where the kernel's result rounds otherwise than torch's (its exp and
    # sum round differently; at some inputs the sums still agree, so the first of a few seeds)
    for seed in range(8):
        torch.manual_seed(seed)
        x = torch.randn(1000)
        eager = float(expr(x))
        if float(fused_expr(x)) != eager:
            break
    else:
        raise AssertionError("the fused kernel's result equalled torch's bits at every seed tried")

    def f(x):
        return x + 1 if expr(x).item() == eager else x - 1

    jf = thunder.jit(f, fusion="always")
    torch.testing.assert_close(jf(x), x + 1)  # as eager: the read value was torch's
    assert "thunder-fuse" not in [t.producer for t in thunder.last_traces(jf)]
    torch.testing.assert_close(jf(x), x + 1)
    assert thunder.compile_stats(jf).cache_hits == 1


@pytest.mark.parametrize("fn, compiles", [
    (lambda x, n: torch.cumprod(x, int(n[0]) - 1), 2),  # (an argument of a torch call without a registry entry)
    (lambda x, n: torch.topk(x, int(n[1]) + 1).values, 2),
    (lambda x, n: sum(x * i for i in range(int(n[1]))), 2),
    (lambda x, n: {1: x, 2: -x}.get(int(n[0]) + 1, x), 2),
    (lambda x, n: x * round(n.float().mean().item(), 1), 2),
    (lambda x, n: x * (2 if isinstance(n.sum().item(), int) else 3), 1),
    (lambda x, n: (x, n.sum().item(), n.tolist(), float(n[0]), int(n[2])), 1),
], ids=["torch_call_arg", "topk_k", "range", "dict_key", "round", "isinstance", "returned"])
def test_python_uses_of_values(fn, compiles):
    inputs = [(torch.arange(1.0, 5.0), torch.tensor(n)) for n in ([0, 2, 1], [0, 2, 1], [1, 1, 3], [0, 2, 1])]
    jf = check_calls(fn, inputs, compiles=compiles)
    out = jf(*inputs[0])
    expected = fn(*inputs[0])
    if isinstance(expected, tuple):  # (Python numbers come back as Python numbers of eager's types)
        assert [type(v) for v in out] == [type(v) for v in expected]


def test_gpt2_padding_mask_through_transformers_eager_mask_checks(monkeypatch):
    """transformers' non-compiling path checks the attention mask's values in Python (masking_utils:
    `if padding_mask.all()`-style early exits): with is_compiling() answering False those become
    splits, and the model still equals eager for every mask."""
    from thunder.runtime import lookup as lookup_module

    transformers = pytest.importorskip("transformers", reason="transformers is not installed")

    monkeypatch.setattr(lookup_module, "_is_compiling", lambda: False)
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config).eval()
    jm = thunder.jit(model)
    ids = torch.randint(0, 100, (2, 8))
    masks = [torch.ones(2, 8, dtype=torch.long) for _ in range(3)]
    masks[1][0, :3] = 0
    masks[2][1, 5:] = 0
    with torch.no_grad():
        for mask in masks + masks[:1]:
            torch.testing.assert_close(jm(input_ids=ids, attention_mask=mask).logits,
                                       model(input_ids=ids, attention_mask=mask).logits)
    cs = thunder.compile_stats(jm)
    assert cs.cache_misses == 2 and cs.cache_hits == 2  # (two masks with padding take the same branches)
    assert {s.location.split("/")[-1].split(":")[0] for s in cs.last_splits} == {"masking_utils.py"}


def test_tensor_of_runtime_numbers_stays_runtime():
    def f(x):
        s, m = x.sum().item(), int(x.argmax())
        return (torch.tensor(s) + x, torch.tensor([[s, 1.0], [m, s]]), torch.tensor(m), x.new_tensor([s, m]),
                torch.tensor(s, dtype=torch.float64, requires_grad=True))

    jf = check_calls(f, [(torch.randn(3),) for _ in range(4)], compiles=1)
    assert thunder.compile_stats(jf).last_splits == []
    out = jf(torch.randn(3))
    assert out[2].dtype is torch.int64 and out[4].requires_grad and out[4].is_leaf


def test_pack_padded_sequence_rows_and_packed_rnns_as_eager():
    # pack_padded_sequence's rows (the lengths' sum) are a split; torch's own fake kernel gives
    # them the shape [batch, *features], which the real rows did not fit
    from torch.nn.utils.rnn import pack_padded_sequence

    def rows(x, lengths, w):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        return (packed.data @ w).tanh(), packed.batch_sizes

    x, w = torch.randn(3, 5, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True)
    jitted = thunder.jit(rows)
    for lengths in (torch.tensor([5, 2, 3]), torch.tensor([1, 4, 2])):
        (out, sizes), (expected, expected_sizes) = jitted(x, lengths, w), rows(x, lengths, w)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(sizes, expected_sizes)
        (gx, gw), (ex, ew) = torch.autograd.grad(out.sum(), (x, w)), torch.autograd.grad(expected.sum(), (x, w))
        torch.testing.assert_close(gx, ex)
        torch.testing.assert_close(gw, ew)

    # torch's GRU kernel reads a packed sequence's batch sizes through their data pointer: its
    # call, with its results' metadata from a stand-in (core/meta_eval.py; tests/test_ops_rnn.py)
    gru = torch.nn.GRU(4, 6, batch_first=True)

    def packed_gru(x, lengths):
        return gru(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))[1]

    lengths = torch.tensor([5, 2, 3])
    torch.testing.assert_close(thunder.jit(packed_gru)(x, lengths), packed_gru(x, lengths))


def test_zero_dim_tensors_given_for_numbers_and_sizes_are_read_as_torch_reads_them():
    # torch.div of Python ints is a 0-d tensor (Longformer's chunk count): torch's parser reads
    # it where a number or an int list is expected
    def fn(x):
        chunks = torch.div(x.shape[1], 2, rounding_mode="trunc")
        return x * torch.arange(chunks * 2) + x[:, :2].as_strided((chunks, 2), (1, 1)).sum()

    check_calls(fn, [(torch.randn(3, 4),), (torch.randn(2, 4),)])


def test_slices_with_tensor_bounds_in_two_places():
    # (DeBERTa slices its relative embeddings by 0-d tensors in every layer: the first slice was
    # recorded with the tensors in its key, and the second one's read ran that as Python: a
    # SyntaxError from inside thunder)
    def fn(x, w):
        span = torch.tensor(2) + 0
        a = w[4 - span:4 + span, :]
        b = w[4 - span:4 + span, :]
        return x @ a.t() + x @ b.t()

    x, w = torch.randn(3, 5, requires_grad=True), torch.randn(8, 5, requires_grad=True)
    jf = thunder.jit(fn)
    torch.testing.assert_close(jf(x, w), fn(x, w))
    (gx, gw), (ex, ew) = (torch.autograd.grad(f(x, w).sum(), (x, w)) for f in (jf, fn))
    torch.testing.assert_close(gx, ex)
    torch.testing.assert_close(gw, ew)
