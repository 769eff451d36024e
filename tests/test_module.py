"""thunder.jit(nn.Module): ThunderModule's API, parameters as call-time inputs, recompiles."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Dropout(0.0), nn.Linear(16, 4))


def test_thunder_module_matches_eager_and_shares_parameters():
    m = mlp()
    tm = thunder.jit(m)
    assert isinstance(tm, thunder.ThunderModule) and isinstance(tm, nn.Module)
    assert tm._model is m
    x = torch.randn(3, 8)
    torch.testing.assert_close(tm(x), m(x))
    assert [n for n, _ in tm.named_parameters()] == [n for n, _ in m.named_parameters()]
    assert all(a is b for a, b in zip(tm.parameters(), m.parameters()))
    assert list(tm.state_dict()) == list(m.state_dict())
    assert tm.get_parameter("0.weight") is m[0].weight
    assert tm.get_submodule("2") is m[2]


def test_api_errors_like_torch():
    tm = thunder.jit(mlp())
    with pytest.raises(AttributeError, match="has no attribute `nope`"):
        tm.get_submodule("nope")
    with pytest.raises(AttributeError, match="bias2"):
        tm.get_parameter("0.bias2")
    m = nn.BatchNorm1d(3)
    with pytest.raises(AttributeError):
        thunder.jit(m).get_buffer("running_max")
    assert thunder.jit(m).get_buffer("running_mean") is m.running_mean


def test_parameter_values_are_read_at_call_time():
    m = mlp()
    tm = thunder.jit(m)
    x = torch.randn(3, 8)
    tm(x)
    with torch.no_grad():
        m[0].weight.mul_(2)
    torch.testing.assert_close(tm(x), m(x))
    assert thunder.cache_misses(tm) == 1


def test_metadata_changes_and_train_eval_recompile():
    m = mlp()
    tm = thunder.jit(m)
    x = torch.randn(3, 8)
    tm(x)
    m[0].weight.requires_grad_(False)
    torch.testing.assert_close(tm(x), m(x))
    assert thunder.cache_misses(tm) == 2 and "requires_grad" in thunder.compile_stats(tm).last_miss_reason
    tm.eval()
    assert not m.training
    torch.testing.assert_close(tm(x), m(x))
    assert thunder.cache_misses(tm) == 3
    m[4].weight = nn.Parameter(torch.randn(4, 16, dtype=torch.float64))
    m[4].bias = None
    with pytest.raises(RuntimeError):
        m(x)  # eager: float32 input against a float64 weight
    with pytest.raises(RuntimeError):
        tm(x)


def test_parameter_changed_in_place_through_data_recompiles():
    # the parameters' metadata is checked by one TensorGuards call (runtime/prologue.py): a
    # parameter whose shape, dtype or strides change in place (the same Parameter object) misses
    m = nn.Linear(8, 8, bias=False)
    tm = thunder.jit(m)
    x = torch.randn(3, 8)
    tm(x)
    for change in (lambda w: w[:4], lambda w: w.double(), lambda w: w.t().contiguous().t()):
        m.weight.data = change(m.weight.data.float())
        torch.testing.assert_close(tm(x.to(m.weight.dtype)), m(x.to(m.weight.dtype)))
        assert thunder.cache_misses(tm) <= 4
    assert thunder.cache_misses(tm) >= 3  # (shape and dtype: new entries)


def test_tied_weights_read_twice_run_the_cached_program():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids):
            return self.head(self.emb(ids))

    m = Tied()
    tm = thunder.jit(m)
    ids = torch.tensor([1, 2, 3])
    for _ in range(3):
        torch.testing.assert_close(tm(ids), m(ids))
    assert thunder.cache_misses(tm) == 1


def test_dropout_train_and_eval():
    m = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))
    tm = thunder.jit(m)
    x = torch.randn(64, 8)
    out = tm(x)
    assert (out == 0).any()  # train: random zeros
    tm.eval()
    torch.testing.assert_close(tm(x), m(x))


def test_hooks_run_and_later_hooks_recompile():
    m = mlp()
    tm = thunder.jit(m)
    x = torch.randn(3, 8)
    tm(x)
    m[2].register_forward_hook(lambda mod, inp, out: out * 2)
    m[0].register_forward_pre_hook(lambda mod, inp: (inp[0] + 1,))
    torch.testing.assert_close(tm(x), m(x))
    assert thunder.cache_misses(tm) == 2


def test_module_containers():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
            self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})
            self.register_buffer("scale", torch.tensor(0.5))

        def forward(self, x, head="a"):
            for layer in self.layers:
                x = F.relu(layer(x)) * self.scale
            return self.heads[head](x)

    net = Net()
    tn = thunder.jit(net)
    x = torch.randn(2, 4)
    torch.testing.assert_close(tn(x), net(x))
    torch.testing.assert_close(tn(x, head="b"), net(x, head="b"))
    net.scale.fill_(2.0)
    torch.testing.assert_close(tn(x), net(x))


def test_state_dict_round_trip_and_to():
    m = mlp()
    tm = thunder.jit(m)
    x = torch.randn(3, 8)
    tm(x)
    other = mlp()
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1)
    tm.load_state_dict(other.state_dict())
    torch.testing.assert_close(tm(x), other(x))
    tm.to(torch.float64)
    assert m[0].weight.dtype is torch.float64
    torch.testing.assert_close(tm(x.double()), m(x.double()))


def test_zero_grad_and_no_sync_without_process_group():
    m = mlp()
    tm = thunder.jit(m)
    tm(torch.randn(3, 8)).sum().backward()
    assert m[0].weight.grad is not None
    tm.zero_grad()
    assert m[0].weight.grad is None
    with tm.no_sync():
        tm(torch.randn(3, 8)).sum().backward()
    assert m[0].weight.grad is not None


def test_mlp_gradients_match_eager():
    m = mlp().double()
    tm = thunder.jit(m)
    ref = copy.deepcopy(m)
    x = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    tm(x).square().mean().backward()
    ref(xr).square().mean().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    for (n, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=n)


def test_training_loop_with_adamw_matches_eager():
    m = mlp()
    ref = copy.deepcopy(m)
    tm = thunder.jit(m)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    torch.manual_seed(1)
    data = [(torch.randn(16, 8), torch.randn(16, 4)) for _ in range(20)]
    for x, y in data:
        loss = F.mse_loss(tm(x), y) if False else ((tm(x) - y) ** 2).mean()
        loss_ref = ((ref(x) - y) ** 2).mean()
        torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-6)
        opt.zero_grad()
        opt_ref.zero_grad()
        loss.backward()
        loss_ref.backward()
        opt.step()
        opt_ref.step()
    assert thunder.cache_misses(tm) == 1


def _layers():
    torch.manual_seed(0)
    return {
        "mha": (nn.MultiheadAttention(16, 4, batch_first=True), (torch.randn(2, 5, 16),) * 3),
        "encoder_layer": (nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True),
                          (torch.randn(2, 5, 16),)),
        "cnn": (nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)),
                (torch.randn(4, 3, 16, 16),)),
        "conv1d_groupnorm": (nn.Sequential(nn.Conv1d(3, 4, 3, stride=2, dilation=1), nn.GroupNorm(2, 4), nn.SiLU(),
                                           nn.Tanh(), nn.BatchNorm1d(4)), (torch.randn(2, 3, 11),)),
        "conv_transpose_avgpool": (nn.Sequential(nn.ConvTranspose2d(3, 4, 3, stride=2), nn.AvgPool2d(2),
                                                 nn.GELU()), (torch.randn(2, 3, 8, 8),)),
        "embedding_rmsnorm_softmax": (nn.Sequential(nn.Embedding(10, 8), nn.RMSNorm(8), nn.LayerNorm(8),
                                                    nn.Softmax(-1), nn.Dropout(0.0)),
                                      (torch.randint(0, 10, (2, 5)),)),
        "bilinear": (nn.Bilinear(4, 5, 3), (torch.randn(3, 4), torch.randn(3, 5))),
    }


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", list(_layers()))
def test_layers_outputs_gradients_and_buffers_match_eager(name, train):
    m, xs = _layers()[name]
    m.train(train)
    ref = copy.deepcopy(m)
    tm = thunder.jit(m)
    out, expected = tm(*xs), ref(*xs)
    out = out[0] if isinstance(out, tuple) else out
    expected = expected[0] if isinstance(expected, tuple) else expected
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    out.square().sum().backward()
    expected.square().sum().backward()
    for (n, p), q in zip(m.named_parameters(), ref.parameters()):
        if q.grad is None:
            assert p.grad is None, n
        else:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4, msg=n)
    for (n, b), c in zip(m.named_buffers(), ref.buffers()):
        torch.testing.assert_close(b, c, msg=n)


class GPTBlock(nn.Module):
    def __init__(self, width=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(a)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def test_gpt_block_module_trains_like_eager():
    torch.manual_seed(0)
    m = GPTBlock().double()
    ref = copy.deepcopy(m)
    tm = thunder.jit(m)
    opt, opt_ref = torch.optim.AdamW(m.parameters(), lr=1e-3), torch.optim.AdamW(ref.parameters(), lr=1e-3)
    for _ in range(3):
        x = torch.randn(2, 8, 32, dtype=torch.float64)
        loss, loss_ref = tm(x).square().mean(), ref(x).square().mean()
        torch.testing.assert_close(loss, loss_ref)
        for o, l in ((opt, loss), (opt_ref, loss_ref)):
            o.zero_grad()
            l.backward()
            o.step()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)


def test_module_list_of_tensors_attribute_is_read_at_call_time():
    """A plain list of tensors held by a module (nn.LSTM's _flat_weights): each element is an
    input read at call time, with its gradient."""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))
            self.pair = [self.w, torch.ones(3)]

        def forward(self, x):
            return x * self.pair[0] + self.pair[1]

    m = Scaled()
    tm = thunder.jit(m)
    x = torch.randn(3)
    out = tm(x)
    torch.testing.assert_close(out, m(x))
    out.sum().backward()
    torch.testing.assert_close(m.w.grad, x)
    m.pair[1] = torch.full((3,), 5.0)  # a new value shows in the next call
    torch.testing.assert_close(tm(x), m(x))


def test_modules_created_in_forward():
    """A module made inside the traced code (BERT's CrossEntropyLoss()) is not state: its
    attributes are set as the code runs and nothing of it is replayed or guarded."""
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 5)

        def forward(self, x, t):
            return nn.CrossEntropyLoss(label_smoothing=0.1)(self.proj(x), t)

    m, x, t = Head(), torch.randn(3, 4), torch.tensor([1, 0, 4])
    tm = thunder.jit(m)
    for _ in range(2):
        torch.testing.assert_close(tm(x, t), m(x, t))


class _Slot:
    """Holds a value for the length of a call (as transformers' CompileableContextVar)."""

    def __init__(self):
        self.value = None


_SLOT = _Slot()


def test_state_written_and_undone_within_the_call():
    # transformers' output capturing sets a global holder to a dict for one forward and resets it:
    # nothing of it outlives the call, so nothing is replayed
    def f(x, keep):
        _SLOT.value = {"seen": []}
        _SLOT.value["seen"].append(x * 2)
        out = _SLOT.value["seen"][0] + 1
        if not keep:
            _SLOT.value = None
        return out

    x = torch.randn(3)
    jf = thunder.jit(f)
    for _ in range(2):
        torch.testing.assert_close(jf(x, False), x * 2 + 1)
        assert _SLOT.value is None
    # a dict left behind is replayed: a new dict of new tensors on every call, as eager's
    kept = []
    for _ in range(2):
        torch.testing.assert_close(jf(x, True), x * 2 + 1)
        kept.append(_SLOT.value)
        torch.testing.assert_close(_SLOT.value["seen"][0], x * 2)
    assert kept[0] is not kept[1] and kept[0]["seen"] is not kept[1]["seen"]
    _SLOT.value = None


@pytest.mark.parametrize("kind", ["spectral_norm", "weight_norm"])
def test_parametrized_weights_train_as_eager(kind):
    """torch.nn.utils.parametrizations: the weight is a property of the module, its getter the
    parametrization (a spectral norm's power iteration updates the _u/_v buffers in place under
    no_grad). The getter is interpreted, so each call runs it once, in the program: it ran
    natively while tracing and again in the prologue, so the first call iterated twice and
    _u/_v left eager's by ~1e-5 (300 ulps)."""
    torch.manual_seed(0)
    wrap = getattr(nn.utils.parametrizations, kind)
    model = nn.Sequential(wrap(nn.Linear(6, 5)), nn.ReLU(), nn.Linear(5, 1))
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model)
    ours, theirs = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(reference.parameters(), lr=0.1)
    for i in range(3):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(i))
        got, expected = jitted(x), reference(x)
        torch.testing.assert_close(got, expected)
        got.sum().backward()
        expected.sum().backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
        for (name, b), c in zip(model.named_buffers(), reference.buffers(), strict=True):
            torch.testing.assert_close(b, c, atol=1e-7, rtol=1e-6, msg=name)
        ours.step(), theirs.step()
        ours.zero_grad(), theirs.zero_grad()
    assert thunder.compile_stats(jitted).cache_misses == 1


def test_a_property_that_raises_attribute_error_falls_back_to_getattr():
    """A module's property getter raising AttributeError: Python then calls the class's
    __getattr__ (nn.Module's finds a buffer of that name), as the interpreter does."""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.use_fixed = False
            self.register_buffer("scale", torch.tensor(3.0))

        @property
        def scale(self):
            if not self.use_fixed:
                raise AttributeError("no fixed scale")
            return 2.0

        def forward(self, x):
            return x * self.scale

    m = Scaled()
    x = torch.randn(3)
    torch.testing.assert_close(thunder.jit(m)(x), x * 3.0)
    m.use_fixed = True
    torch.testing.assert_close(thunder.jit(m)(x), x * 2.0)


def test_tensors_from_parameters_and_buffers_iterators_are_traced():
    """Module.parameters() / named_buffers() run natively (torch's generators); the tensors they
    yield are the proxies of those parameters and buffers, for the jitted module, a module
    passed as an argument and one read from a global: an L2 penalty over self.parameters()
    trains as eager (it was refused: the ops ran on the tensors themselves while tracing)."""
    class Penalized(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))

        def forward(self, x):
            l2 = sum(p.square().sum() for p in self.parameters())
            stats = sum(b.float().sum() for _, b in self.named_buffers())
            return self.net(x).mean() + 0.01 * l2 + 0 * stats

    torch.manual_seed(0)
    model = Penalized()
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model)
    for i in range(2):
        x = torch.randn(6, 4, generator=torch.Generator().manual_seed(i))
        got, expected = jitted(x), reference(x)
        torch.testing.assert_close(got, expected)
        got.backward()
        expected.backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, msg=name)

    def total(m, x):
        return x * sum(p.sum() for p in m.parameters())
    x = torch.randn(3)
    torch.testing.assert_close(thunder.jit(total)(model, x), total(model, x))


def test_an_ema_of_the_parameters_after_the_optimizer_step_as_eager():
    """A training step with AdamW, gradient clipping and an EMA copy updated from
    zip(ema.parameters(), model.parameters()): the EMA reads the parameters after the step, as
    eager's. (It read them as they were before the step and updated while tracing only: a
    silently wrong EMA.) Also a hand-written SGD step over model.parameters()."""
    def make(manual):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        ema = copy.deepcopy(model)
        opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)

        def step(x, y):
            loss = F.mse_loss(model(x), y)
            loss.backward()
            if manual:
                with torch.no_grad():
                    for p in model.parameters():
                        p.sub_(p.grad * 0.1)
                        p.grad = None
            else:
                nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                opt.step()
                opt.zero_grad()
            with torch.no_grad():
                for pe, p in zip(ema.parameters(), model.parameters()):
                    pe.lerp_(p, 0.5)
            return loss.detach()
        return step, model, ema

    for manual in (False, True):
        (step, model, ema), (reference, model_ref, ema_ref) = make(manual), make(manual)
        jitted = thunder.jit(step)
        for i in range(3):
            gen = torch.Generator().manual_seed(i)
            x, y = torch.randn(5, 4, generator=gen), torch.randn(5, 2, generator=gen)
            torch.testing.assert_close(jitted(x, y), reference(x, y))
            for p, q in zip([*model.parameters(), *ema.parameters()], [*model_ref.parameters(), *ema_ref.parameters()]):
                torch.testing.assert_close(p, q)
        # (torch's optimizer sets a global flag at its first step, which the trace read: one recompile)
        assert thunder.compile_stats(jitted).cache_misses <= 2
