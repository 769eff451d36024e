"""Training under torch.autocast("cpu", torch.bfloat16): a tiny Llama-style block (RMSNorm,
q/k/v/o projections, causal SDPA, SwiGLU MLP, residuals, head, cross-entropy of the upcast logits),
thunder.jit against eager's autocast: the loss, the logits and every grad in eager's dtype and
within bf16 tolerance, and the weights' bf16 casts made once (in the forward, saved for the
backward as eager's autocast does), not again in the backward (lowering/remat.py). The causal-LM loss as transformers computes it
(`logits.float().view(-1, vocab)`, lowering/layout/conversions.py) is one fused cross-entropy
kernel reading the bf16 logits, forward and backward, with no float32 copy of the logits; a chain
of bf16 elementwise ops (GPT-2's gelu_new) keeps its intermediates in f32 inside the kernel,
rounding once (lowering/linalg/bf16_intermediates.py)."""
import math
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from thunder.dialects.mlir import ir, passmanager
from thunder.lowering.linalg import to_linalg

D, H, F_MLP, V, T, B = 32, 4, 64, 48, 8, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.Parameter(torch.ones(D) + 0.1 * torch.randn(D))
        self.norm2 = nn.Parameter(torch.ones(D) + 0.1 * torch.randn(D))
        self.q, self.k, self.v, self.o = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(D, F_MLP, bias=False), nn.Linear(D, F_MLP, bias=False)
        self.down = nn.Linear(F_MLP, D, bias=False)
        self.embed = nn.Embedding(V, D)
        self.head = nn.Linear(D, V, bias=False)

    @staticmethod
    def rms(x, w):
        x32 = x.float()
        return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

    def forward(self, ids, labels):
        x = self.embed(ids)
        h = self.rms(x, self.norm1)
        q, k, v = (p(h).view(B, T, H, D // H).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, D))
        h = self.rms(x, self.norm2)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        logits = self.head(x)
        return F.cross_entropy(logits.float().view(-1, V), labels.view(-1)), logits


def _train(module, *args):
    """(eager's and thunder's (loss, logits, grads) of one training step under bf16 autocast, the
    jitted module)."""
    jm = thunder.jit(module)
    results = []
    for fn in (module, jm):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, logits = fn(*args)
        loss.backward()
        results.append((loss, logits, {n: p.grad for n, p in module.named_parameters()}))
        module.zero_grad(set_to_none=True)
    return results, jm


@pytest.fixture(scope="module")
def trained():
    """_train of the block, one compile for the module."""
    torch.manual_seed(0)
    block = Block()
    return _train(block, torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T)))


def test_autocast_training_matches_eager(trained):
    (e_loss, e_logits, e_grads), (t_loss, t_logits, t_grads) = trained[0]
    assert (t_loss.dtype, t_logits.dtype) == (e_loss.dtype, e_logits.dtype) == (torch.float32, torch.bfloat16)
    torch.testing.assert_close(t_loss, e_loss, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(t_logits, e_logits, rtol=5e-2, atol=5e-2)
    assert e_grads.keys() == t_grads.keys()
    for name, g in e_grads.items():
        assert t_grads[name] is not None, name
        assert t_grads[name].dtype == g.dtype == torch.float32, name
        scale = g.abs().max().item() or 1.0
        torch.testing.assert_close(t_grads[name] / scale, g / scale, rtol=5e-2, atol=5e-2, msg=name)


def test_autocast_weight_casts_saved_not_recomputed(trained):
    jb = trained[1]
    fwd = str(thunder.last_traces(jb)[-1])
    bwd = str(thunder.last_backward_traces(jb)[-1])
    weights = ("q", "k", "v", "o", "gate", "up", "down", "head")
    for w in weights:  # cast once, in the forward ...
        assert len(re.findall(rf"impl\.to\(\w*{w}_weight, torch\.bfloat16", fwd)) == 1, w
    # ... and not again in the backward, which gets the casts (bf16) among the saved values
    assert not re.search(r"impl\.to\(\w*_weight, torch\.bfloat16", bwd), bwd
    saved_bf16_2d = re.findall(r"^  # \w+: cpu bfloat16\[\d+, \d+\]$", bwd, re.M)
    assert len(saved_bf16_2d) >= len(weights)


def _casts(fn, calls, *args):
    """aten::_to_copy calls of `calls` calls of fn inside one no_grad bf16 autocast region."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.profiler.profile() as prof:
            outs = [fn(*args) for _ in range(calls)]
    return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy"), outs


def test_autocast_weight_casts_once_per_region_like_eager(monkeypatch):
    """A decoding loop: eager's autocast casts each weight once per region (its cache), so does
    the program, which leaves those casts to autocast (runtime/autocast_casts.py). (Packed
    weights off: with them, a weight is cast once per packing, tests/test_packed_linear.py.)"""
    monkeypatch.setenv("THUNDER_PACKED_WEIGHTS", "off")
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(D, F_MLP), nn.SiLU(), nn.Linear(F_MLP, D))
    x = torch.randn(2, D)
    jm = thunder.jit(mlp)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        jm(x)  # (compiled)
    src = str(thunder.last_traces(jm)[-1])
    assert not re.search(r"impl\.to\(\w*weight", src), src
    assert re.search(r"torch\.nn\.functional\.linear\(\w+, \w*0_weight, ", src), src
    eager_casts, expected = _casts(mlp, 3, x)
    casts, got = _casts(jm, 3, x)
    assert casts == eager_casts == 4 + 3  # two weights and two biases once, the input on each call
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype == torch.bfloat16
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    # outside a region the program is another (the ambient autocast is part of the cache key)
    torch.testing.assert_close(jm(x), mlp(x))


def test_autocast_training_call_then_eager_use_in_one_region():
    """A weight whose cast a training call does not save (its input needs no grad), used again
    by eager code in the same region: eager's later use still gets a cast with history, and the
    weight's grad both uses' parts (runtime/autocast_casts.py leaves no cast of a training
    program to autocast's cache)."""
    torch.manual_seed(0)
    lin = nn.Linear(D, D)
    x = torch.randn(2, D)
    grads = []
    for first in (lin, thunder.jit(lin)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = first(x)
            b = lin(x)
        (a.float().sum() + 2 * b.float().sum()).backward()
        grads.append((lin.weight.grad, lin.bias.grad))
        lin.zero_grad(set_to_none=True)
    for g, e in zip(grads[1], grads[0]):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e, rtol=2e-2, atol=2e-2)


# logits [16, 8192]: 256 KiB in bf16, over fuse.UNTILED_MAX_BYTES in float32 (unfused before)
V_BIG = 8192


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V_BIG, D)
        self.proj = nn.Linear(D, D)
        self.head = nn.Linear(D, V_BIG, bias=False)

    def forward(self, ids, labels):
        logits = self.head(torch.tanh(self.proj(self.embed(ids))))
        # transformers' ForCausalLMLoss
        labels = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
        loss = F.cross_entropy(logits.float().view(-1, V_BIG), labels.view(-1), ignore_index=-100)
        return loss, logits


@pytest.fixture(scope="module")
def trained_head():
    torch.manual_seed(0)
    ids = torch.randint(0, V_BIG, (B, T))
    return _train(Head(), ids, ids)


def test_causal_lm_loss_under_autocast_matches_eager(trained_head):
    (e_loss, e_logits, e_grads), (t_loss, t_logits, t_grads) = trained_head[0]
    assert (t_loss.dtype, t_logits.dtype) == (e_loss.dtype, e_logits.dtype) == (torch.float32, torch.bfloat16)
    torch.testing.assert_close(t_loss, e_loss, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(t_logits, e_logits, rtol=2e-2, atol=2e-2)
    for name, g in e_grads.items():
        assert t_grads[name].dtype == g.dtype == torch.float32, name
        scale = g.abs().max().item()
        torch.testing.assert_close(t_grads[name] / scale, g / scale, rtol=3e-2, atol=3e-2, msg=name)


def test_causal_lm_loss_reads_bf16_logits_in_one_kernel(trained_head):
    jm = trained_head[1]
    fwd = str(thunder.last_traces(jm)[-1])
    bwd = str(thunder.last_backward_traces(jm)[-1])
    for text in (fwd, bwd):
        lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
        logits_sized = [ln for ln in lines if re.search(rf"(\[{B * T}, {V_BIG}\]|\[{B}, {T}, {V_BIG}\])", ln.split("#", 1)[-1])]
        # no float32 tensor of the logits' size is made: no copy, no unfused pass over them
        assert not [ln for ln in logits_sized if "float32" in ln], "\n".join(logits_sized)
    # forward: the head's matmul, a view, then the loss kernel reads the bf16 logits; backward:
    # one kernel writes the bf16 gradient of the logits ([rows, V]) that the head's matmuls read
    fwd_logits = [ln for ln in fwd.splitlines() if re.search(rf"bfloat16\[{B * T}, {V_BIG}\]", ln)]
    assert len(fwd_logits) == 1 and "torch.reshape(" in fwd_logits[0], fwd_logits
    logits_view = fwd_logits[0].split("=")[0].strip()
    assert re.search(rf"= fusion_\d+\(.*\b{logits_view}\b", fwd)
    assert len(re.findall(rf"= fusion_\d+\(.*# cpu bfloat16\[{B * T}, {V_BIG}\]", bwd)) == 1, bwd


def gelu_new(x):  # transformers' NewGELUActivation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def test_bf16_elementwise_chain_rounds_once():
    x = torch.randn(64, 256).bfloat16()
    jf = thunder.jit(gelu_new, fusion="always")
    got = jf(x)
    exact = gelu_new(x.double())
    assert got.dtype == torch.bfloat16
    # rounded once: within half a bf16 ulp (plus f32 math) of the exact result, no worse than eager
    assert (got.double() - exact).abs().max() <= (gelu_new(x).double() - exact).abs().max()
    torch.testing.assert_close(got, gelu_new(x), rtol=1.6e-2, atol=1e-2)
    module = thunder.last_traces(jf)[-1].to_mlir()
    name = re.search(r"(fusion_\d+)\(", str(thunder.last_traces(jf)[-1])).group(1)
    linalg = to_linalg(str(module), name)
    assert len(re.findall(r"arith\.truncf .* to bf16", linalg)) == 1, linalg


def test_a_value_rounded_for_one_reader_is_rounded_for_all():
    """v0 is read by a division kept in f32 and by add with alpha, which computes in f64 from the
    rounded bf16 value: the division read v0 unrounded, so v1 = v0 / x and 2 * v0 were of two
    precisions and where their sum cancels the error was up to 16x eager's (x = -0.8047: eager
    0.84375, thunder 0.8516, exact 0.84420; the lowp fuzz). Now every reader reads the rounded
    v0: thunder's error from the exact result is no more than twice eager's, element by element."""
    x = torch.linspace(-3, 3, 601).bfloat16()
    x = x[x != 0]

    def f(x):
        v0 = torch.rsqrt(x.abs())
        return torch.add(torch.minimum(v0 / x, v0), v0, alpha=2)

    got, eager, exact = thunder.jit(f, fusion="always")(x).double(), f(x).double(), f(x.double())
    ours, theirs = (got - exact).abs(), (eager - exact).abs()
    assert (ours <= 2 * theirs + 2 ** -9 * exact.abs()).all(), (ours / theirs.clamp_min(1e-30)).max()


def test_causal_lm_loss_backward_exp_in_f32(trained_head):
    """The loss kernel of the backward rounds `exp(logits - lse) * g` to the bf16 gradient of the
    logits: its exp computes in f32 (approx.SUMMED's form, lowering/linalg/coarse_uses.py), not
    in the correctly rounded f64 form, which LLVM vectorizes half as wide (the grads' values
    against eager's: test_causal_lm_loss_under_autocast_matches_eager)."""
    jm = trained_head[1]
    trace = thunder.last_backward_traces(jm)[-1]
    name = re.search(rf"(fusion_\d+)\(.*# cpu bfloat16\[{B * T}, {V_BIG}\]", str(trace)).group(1)
    linalg = to_linalg(str(trace.to_mlir()), name)
    assert "math.fma" in linalg and "f64" not in linalg, linalg


# exp's edges: overflow to inf, results below f32's normals, 0 below -104, a mask's -inf, nan
_EXP_EDGES = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 88.72, 88.7229, -87.33, -100.0, -103.9, -104.5]


def _exp_input():
    return torch.cat([torch.linspace(-110, 90, 4001), torch.tensor(_EXP_EDGES)]).bfloat16()


def _kernel_text(fn, *args):
    jf = thunder.jit(fn, fusion="always")
    got = jf(*args)
    trace = thunder.last_traces(jf)[-1]
    name = re.search(r"(fusion_\d+)\(", str(trace)).group(1)
    return got, to_linalg(str(trace.to_mlir()), name)


def test_exp_rounded_to_bf16_computes_in_f32():
    """An exp whose values reach the result only rounded to bf16 computes in f32: each result
    within one bf16 rounding of the exact value (as eager's, whose f32 exp is SLEEF's 1-ulp
    one), specials as eager's."""
    x, g = _exp_input(), torch.tensor(0.75)
    fn = lambda x, g: (torch.exp(x.float() - 1.5) * g).bfloat16()  # noqa: E731
    got, linalg = _kernel_text(fn, x, g)
    assert "f64" not in linalg and "math.fma" in linalg, linalg
    eager = fn(x, g)
    exact = (torch.exp(x.double() - 1.5) * 0.75)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, eager, rtol=2 ** -7, atol=0, equal_nan=True)  # (an ulp at most)
    normal = exact.isfinite() & (exact > torch.finfo(torch.bfloat16).smallest_normal)
    err = ((got.double() - exact) / exact)[normal].abs().max().item()
    assert err <= 2 ** -8 * (1 + 2 ** -12), err  # half a bf16 ulp, plus the f32 exp's error
    torch.testing.assert_close(got[~normal], eager[~normal], rtol=0, atol=0, equal_nan=True)  # (0, inf, nan)


def test_tanh_rounded_to_bf16_computes_in_f32():
    """A tanh whose values reach the result only rounded to bf16 computes in f32 (approx.SUMMED's
    tanh, ~1.3 f32 ulp): each result within one bf16 rounding of the exact value, within an ulp
    of eager's, specials (+-0, +-inf, nan, denormals) as eager's."""
    edges = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-39, -1e-39, 0.62, 0.63, 9.5, 11.0]
    x = torch.cat([torch.linspace(-12, 12, 4001), torch.logspace(-30, 0, 301), torch.tensor(edges)]).bfloat16()
    fn = lambda x: (torch.tanh(x.float() * 0.75) * 1.5).bfloat16()  # noqa: E731
    got, linalg = _kernel_text(fn, x)
    assert "f64" not in linalg and "math.fma" in linalg, linalg
    eager = fn(x)
    exact = torch.tanh(x.double() * 0.75) * 1.5
    torch.testing.assert_close(got, eager, rtol=2 ** -7, atol=0, equal_nan=True)  # (an ulp at most)
    normal = exact.isfinite() & (exact.abs() > torch.finfo(torch.bfloat16).smallest_normal)
    err = ((got.double() - exact) / exact)[normal].abs().max().item()
    assert err <= 2 ** -8 * (1 + 2 ** -12), err  # half a bf16 ulp, plus the f32 tanh's error
    torch.testing.assert_close(got[~normal], eager[~normal], rtol=0, atol=0, equal_nan=True)
    zero = exact == 0
    assert torch.equal(got[zero].signbit(), eager[zero].signbit())  # -0 kept


def test_gelu_new_training_under_autocast_has_no_f64():
    """GPT-2's gelu_new under bf16 autocast, forward and backward: its tanh reaches the kernels'
    results only rounded to bf16, so no loop with its math computes in f64 (LLVM sizes vectors by
    the widest type); values and grads as eager's within bf16 tolerance."""
    torch.manual_seed(0)
    lin = nn.Linear(32, 64)
    x = torch.randn(4, 32, requires_grad=True)

    def fn(x):
        with torch.autocast("cpu", torch.bfloat16):
            return gelu_new(lin(x)).float().square().sum()

    jf = thunder.jit(fn)
    got = jf(x)
    got_grads = torch.autograd.grad(got, (x, lin.weight, lin.bias))
    want = fn(x)
    want_grads = torch.autograd.grad(want, (x, lin.weight, lin.bias))
    torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-2)
    # each gradient sums products of the gradient at lin's output (g) with x or the weight, each
    # rounded to bf16: an entry whose terms cancel is off by about a bf16 ulp of the terms' size
    with torch.autocast("cpu", torch.bfloat16):
        h = lin(x)
    g, = torch.autograd.grad(gelu_new(h).float().square().sum(), h)
    g, xa, wa = g.float().abs(), x.detach().abs(), lin.weight.detach().abs()
    for got_g, want_g, terms in zip(got_grads, want_grads, (g @ wa, g.t() @ xa, g.sum(0))):
        assert ((got_g - want_g).abs() <= 1.6e-2 * want_g.abs() + 1e-2 + 2 ** -7 * terms).all()
    kernels = 0
    for trace in (thunder.last_traces(jf)[-1], thunder.last_backward_traces(jf)[-1]):
        for name in re.findall(r"(fusion_\d+)\(", str(trace)):
            linalg = to_linalg(str(trace.to_mlir()), name)
            if "math.fma" in linalg:  # the regions with gelu_new's tanh
                kernels += 1
                # each loop as the kernel runs it (the sum of everything adds its rows' sums in
                # f64, in a loop of its own: reductions are not fused into their consumers)
                with ir.Context(), ir.Location.unknown():
                    m = ir.Module.parse(linalg)
                    passmanager.PassManager.parse("builtin.module(linalg-fuse-elementwise-ops)").run(m.operation)
                    fused = str(m)
                for body in (g.split("} ->")[0] for g in fused.split("linalg.generic")[1:]):
                    assert "f64" not in body or not re.search(r"math\.|arith\.mulf", body), fused
    assert kernels == 2


@pytest.mark.parametrize("case", ["f32 result", "bf16 read by floor"])
def test_exp_seen_exactly_stays_correctly_rounded(case):
    """An exp whose f32 values are a result, or whose bf16 rounding a discontinuous op reads,
    keeps the correctly rounded f64 form (an ulp there is a visible difference)."""
    x = _exp_input()
    if case == "f32 result":
        fn = lambda x: torch.exp(x.float()) * 0.75  # noqa: E731
    else:
        fn = lambda x: torch.floor(torch.exp(x.float() * 0.25).bfloat16() * 3)  # noqa: E731
    got, linalg = _kernel_text(fn, x)
    assert "f64" in linalg, linalg
    torch.testing.assert_close(got, fn(x), rtol=2 ** -22 if case == "f32 result" else 0, atol=0, equal_nan=True)


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_cpu_autocast_losses_in_float32_as_eager(loss):
    """CPU autocast runs nll_loss (and so cross_entropy, log_softmax then nll_loss) in float32:
    the loss and its gradient have eager's dtypes and values."""
    torch.manual_seed(0)
    x = torch.randn(6, 20)
    w = torch.randn(20, 30, requires_grad=True)
    y = torch.randint(0, 30, (6,))

    def f(x, w, y):
        logits = x @ w  # bfloat16 under autocast
        return F.cross_entropy(logits, y) if loss == "cross_entropy" else F.nll_loss(F.log_softmax(logits, -1), y)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = f(x, w, y)
        got = thunder.jit(f)(x, w, y)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    (want_grad,) = torch.autograd.grad(want, w)
    (got_grad,) = torch.autograd.grad(got, w)
    assert got_grad.dtype == want_grad.dtype
    torch.testing.assert_close(got_grad, want_grad, rtol=2e-2, atol=2e-2)


def _rotary_then_project(inv_freq, pos, x, w):
    """transformers' rotary embedding: the frequencies in float32 with autocast disabled inside
    the caller's region, then a projection that autocast runs in bfloat16."""
    with torch.autocast("cpu", enabled=False):
        freqs = (inv_freq[None, :, None].float() @ pos[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
    return cos.to(x.dtype), (x * cos + x * sin) @ w


@pytest.mark.parametrize("mode", ["no_grad", "train"])
def test_autocast_disabled_inside_region_runs_in_float32(mode):
    """A product the user computes with autocast disabled inside the region stays float32 (the
    program runs with autocast off, its casts in the trace: runtime/autocast_casts.py); it ran
    in bfloat16, giving a bf16 cos (off by up to 2) or a kernel refusing its bf16 input. The
    backward runs inside the region too (loss.backward() in the `with` block)."""
    torch.manual_seed(0)
    inv = 1.0 / (10000 ** (torch.arange(0, 16, 2).float() / 16))
    pos = torch.arange(64)[None].float()
    x = torch.randn(1, 64, 16, requires_grad=mode == "train")
    w = torch.randn(16, 16, requires_grad=mode == "train")
    results = []
    for f in (_rotary_then_project, thunder.jit(_rotary_then_project)):
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.set_grad_enabled(mode == "train"):
            for _ in range(2):  # (compiling call, cached call)
                cos, y = f(inv, pos, x, w)
            grads = torch.autograd.grad(y.float().sum() + cos.sum(), (x, w)) if mode == "train" else ()
        results.append((cos, y, *grads))
    (cos, *rest), (want_cos, *want_rest) = results[1], results[0]
    assert cos.dtype == torch.float32
    torch.testing.assert_close(cos, want_cos, rtol=0, atol=0)
    for got, want in zip(rest, want_rest):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
