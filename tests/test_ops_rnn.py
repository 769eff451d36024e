"""torch.lstm (thunder/ops/rnn.py) and nn.MultiheadAttention's fast path
(torch._native_multi_head_attention, thunder/ops/nn.py) against eager: forward traced, decomposed
and fused (check), nn modules' forward and training steps through thunder.jit."""
import copy

import pytest
import torch
from torch import nn

import thunder
from op_harness import check

torch.manual_seed(0)
f64 = torch.float64


def r(*shape, dtype=torch.float32):
    return torch.randn(shape, dtype=dtype)


def lstm_args(layers=1, bidirectional=False, bias=True, proj=0, batch_first=False, dtype=torch.float32):
    """(input, h0, c0, flat weights) for torch.lstm with input size 3, hidden size 4."""
    m = nn.LSTM(3, 4, layers, bias=bias, bidirectional=bidirectional, proj_size=proj, batch_first=batch_first).to(dtype)
    dirs = 2 if bidirectional else 1
    x = r(2, 5, 3, dtype=dtype) if batch_first else r(5, 2, 3, dtype=dtype)
    h0 = r(layers * dirs, 2, proj or 4, dtype=dtype)
    c0 = r(layers * dirs, 2, 4, dtype=dtype)
    return x, h0, c0, [p.detach() for p in m._flat_weights]


LSTM = {
    "one_layer": dict(),
    "two_layers_bidirectional": dict(layers=2, bidirectional=True),
    "no_bias_batch_first": dict(bias=False, batch_first=True),
    "projection": dict(layers=2, proj=2),
    "f64": dict(dtype=f64, bidirectional=True),
}


@pytest.mark.parametrize("name", LSTM)
def test_lstm_op(name):
    kw = LSTM[name]
    x, h0, c0, w = lstm_args(**kw)
    layers, bidir = kw.get("layers", 1), kw.get("bidirectional", False)

    def f(x, h0, c0, *w):
        return torch.lstm(x, (h0, c0), w, kw.get("bias", True), layers, 0.0, False, bidir, kw.get("batch_first", False))

    module = check(f, x, h0, c0, *w, rtol=1e-5, atol=1e-5)
    assert '"ltorch.lstm"' in str(module)


@pytest.mark.parametrize("kw", [dict(), dict(num_layers=2, bidirectional=True, batch_first=True),
                                dict(proj_size=2, bias=False)], ids=str)
def test_nn_lstm_forward_and_training_step(kw):
    torch.manual_seed(0)
    m = nn.LSTM(3, 4, **kw).double()
    ref = nn.LSTM(3, 4, **kw).double()
    ref.load_state_dict(m.state_dict())
    x = r(2, 5, 3, dtype=f64)
    out, (h, c) = thunder.jit(m)(x)
    eout, (eh, ec) = ref(x)
    for a, b in ((out, eout), (h, eh), (c, ec)):
        torch.testing.assert_close(a, b)
    (out.square().sum() + h.sum() + c.sum()).backward()
    (eout.square().sum() + eh.sum() + ec.sum()).backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    with torch.no_grad():  # inference runs torch's fused kernel
        jm = thunder.jit(m)
        torch.testing.assert_close(jm(x[0], (h[:, 0].contiguous(), c[:, 0].contiguous()))[0],
                                   ref(x[0], (eh[:, 0].contiguous(), ec[:, 0].contiguous()))[0])
        assert "torch.lstm(" in str(thunder.last_traces(jm)[-1])


class PackedTagger(nn.Module):
    """An RNN over padded sequences packed by their lengths, padded again after (a seq2seq
    encoder): torch's kernels read the batch sizes, so the RNN and the padding run as torch's
    calls (core/meta_eval.py's stand-ins give their results' metadata)."""

    def __init__(self, kind, batch_first, **rnn):
        super().__init__()
        self.batch_first = batch_first
        self.rnn = getattr(nn, kind)(3, 4, batch_first=batch_first, **rnn)
        self.out = nn.Linear((rnn.get("proj_size") or 4) * (2 if rnn.get("bidirectional") else 1), 2)

    def forward(self, x, lengths, enforce_sorted):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=self.batch_first,
                                                   enforce_sorted=enforce_sorted)
        out, hidden = self.rnn(packed)
        padded, out_lengths = nn.utils.rnn.pad_packed_sequence(out, batch_first=self.batch_first)
        h = hidden[0] if isinstance(hidden, tuple) else hidden
        return self.out(padded).sum() + h.square().sum(), padded, out_lengths


@pytest.mark.parametrize("kind, rnn", [("LSTM", {}), ("GRU", dict(num_layers=2, bidirectional=True)),
                                       ("RNN", dict(nonlinearity="relu")), ("LSTM", dict(proj_size=3))],
                         ids=["lstm", "gru_2_layers_bidirectional", "rnn_relu", "lstm_proj"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_packed_sequences_train_as_eager(kind, rnn, batch_first):
    torch.manual_seed(0)
    model = PackedTagger(kind, batch_first, **rnn)
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model)
    for lengths, enforce_sorted in ((torch.tensor([5, 2, 4]), False), (torch.tensor([5, 4, 2]), True),
                                    (torch.tensor([3, 1, 3]), False)):
        x = r(3, 5, 3) if batch_first else r(5, 3, 3)
        expected, got = reference(x, lengths, enforce_sorted), jitted(x, lengths, enforce_sorted)
        for e, g in zip(expected, got):
            torch.testing.assert_close(g, e)
        expected[0].backward()
        got[0].backward()
        for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
        model.zero_grad(), reference.zero_grad()


def test_packed_sequence_argument_with_hidden_state():
    m = nn.LSTM(3, 4)
    packed = nn.utils.rnn.pack_padded_sequence(r(5, 2, 3), torch.tensor([5, 3]))
    hx = (r(1, 2, 4), r(1, 2, 4))
    jitted = thunder.jit(lambda p, hx: m(p, hx))
    (out, (h, c)), (e_out, (eh, ec)) = jitted(packed, hx), m(packed, hx)
    torch.testing.assert_close(out.data, e_out.data)
    torch.testing.assert_close(out.batch_sizes, e_out.batch_sizes)
    torch.testing.assert_close((h, c), (eh, ec))
    assert "torch.lstm(" in str(thunder.last_traces(jitted)[-1])


def mha_args(mask=None, kind=None):
    torch.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, batch_first=True)
    x = r(2, 5, 8)
    return (x, *(t.detach() for t in (m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.out_proj.bias)))


def native_mha(need_weights=True, average=True, mask_type=None):
    def f(x, w, b, pw, pb, *mask):
        return torch._native_multi_head_attention(x, x, x, 8, 2, w, b, pw, pb, mask[0] if mask else None,
                                                  need_weights, average, mask_type)

    return f


MHA = {
    "weights": (native_mha(), ()),
    "per_head": (native_mha(average=False), ()),
    "no_weights": (native_mha(need_weights=False), ()),
    "key_padding": (native_mha(mask_type=1), (torch.tensor([[False] * 4 + [True], [False] * 5]),)),
    "attn_mask": (native_mha(mask_type=0), (torch.triu(torch.ones(5, 5, dtype=torch.bool), 1),)),
    "merged_float": (native_mha(mask_type=2), (torch.zeros(2, 2, 5, 5).masked_fill(torch.rand(2, 2, 5, 5) > 0.7,
                                                                                   float("-inf")).tril(),)),
}


@pytest.mark.parametrize("name", MHA)
def test_native_multi_head_attention(name):
    fn, mask = MHA[name]
    args = (*mha_args(), *mask)
    with torch.no_grad():
        expected = fn(*args)
    if expected[1] is None:  # the harness compares tensors: check the None apart
        got = thunder.jit(fn)(*args)
        assert got[1] is None
        torch.testing.assert_close(got[0], expected[0])
        fn = (lambda f: lambda *a: f(*a)[0])(fn)
    module = check(fn, *args, rtol=1e-5, atol=1e-5)
    assert '"ltorch.native_multi_head_attention"' in str(module)


@pytest.mark.parametrize("masks", ["none", "key_padding", "attn", "both"])
def test_nn_multihead_attention_fast_path(masks):
    torch.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = r(2, 5, 8)
    kw = {}
    if masks in ("key_padding", "both"):
        kw["key_padding_mask"] = torch.tensor([[False] * 4 + [True], [False] * 5])
    if masks in ("attn", "both"):
        kw["attn_mask"] = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    with torch.no_grad():
        jf = thunder.jit(lambda x, kw: m(x, x, x, **kw))
        out, weights = jf(x, kw)
        eout, eweights = m(x, x, x, **kw)
    torch.testing.assert_close(out, eout)
    torch.testing.assert_close(weights, eweights)
    assert "native_multi_head_attention" in str(thunder.last_traces(jf)[0])
