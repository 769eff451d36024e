"""bfloat16 linears from packed weights (thunder/ops/packed_linear.py, THUNDER_PACKED_WEIGHTS):
nn.Linear and GPT-2's Conv1D (addmm on an [in, out] weight), in a bfloat16 model and under
torch.autocast("cpu", torch.bfloat16) of a float32 one, against eager (values and dtypes; the
same sums, so equal to eager's bits on this CPU's oneDNN, asserted within bf16 tolerance); a
weight changed in place is packed again; the probe's answer decides and nothing is packed
without oneDNN; training (programs that record autograd history) is eager's within autocast
tolerance, grads included. float32 products (MKL's packed sgemm) are eager's bits: the packed
result is used only where the first call found it equal to F.linear's. Large float32 products go
to the kernel the probe (or the settings) pick among F.linear, MKL packed, oneDNN and oneDNN
packed (packed_linear.f32_kernel): each equal to eager within float32 rounding."""
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from thunder.ops import gemm_by_size, onednn, packed_linear

BF16_TOL = dict(rtol=1.6e-2, atol=1e-2)


class Conv1D(nn.Module):
    """GPT-2's Conv1D: x @ weight + bias with weight [in, out] (transformers.pytorch_utils)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
        self.bias = nn.Parameter(torch.randn(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(*x.shape[:-1], -1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 96)  # with a bias
        self.conv = Conv1D(48, 96)
        self.head = nn.Linear(48, 40, bias=False)

    def forward(self, x):
        return self.head(F.silu(self.conv(F.gelu(self.fc(x)))))


@pytest.fixture(autouse=True)
def _no_packings_kept():
    # (and no kernel choices of programs for all sizes: made with other tests' probes)
    packed_linear._CACHE.clear()
    gemm_by_size._KERNELS.clear()
    yield
    packed_linear._CACHE.clear()
    gemm_by_size._KERNELS.clear()


def _switch_on(monkeypatch, dtype):
    """THUNDER_PACKED_WEIGHTS=on; the test skipped where products in dtype cannot be packed."""
    if not packed_linear.available(dtype):
        pytest.skip(f"torch packs no {dtype} products on this CPU (no oneDNN bf16, no MKL)")
    monkeypatch.setenv(packed_linear.ENV, "on")
    return monkeypatch


def _count_packings(monkeypatch):
    """The row counts of the packings made from now on."""
    calls = []
    pack = packed_linear._pack
    monkeypatch.setattr(packed_linear, "_pack", lambda w, rows, library: calls.append(rows) or pack(w, rows, library))
    return calls


@pytest.fixture
def packing(monkeypatch):
    return _switch_on(monkeypatch, torch.bfloat16)


@pytest.fixture
def packing_f32(monkeypatch):
    return _switch_on(monkeypatch, torch.float32)


def _calls(jf, dtype=torch.bfloat16):
    """(linear calls, addmm calls) from packed weights: bfloat16, float32 by MKL, or by "onednn"."""
    src = str(thunder.last_traces(jf)[-1])
    prefix = {torch.bfloat16: "impl.packed_", torch.float32: "impl.packed_f32_", "onednn": "impl.packed_onednn_"}[dtype]
    return src.count(prefix + "linear("), src.count(prefix + "addmm(")


def test_autocast_inference_equals_eager_and_repacks_a_changed_weight(packing):
    torch.manual_seed(0)
    net = Net()
    jnet = thunder.jit(net)
    for rows in ((3, 5), (1, 1)):  # (a prefill's rows and a decode step's one)
        x = torch.randn(*rows, 64)
        with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
            out, expected = jnet(x), net(x)
        assert out.dtype == expected.dtype == torch.bfloat16
        torch.testing.assert_close(out.float(), expected.float(), **BF16_TOL)
    assert _calls(jnet) == (2, 1)
    # an in-place update (an optimizer step) bumps the version counter: packed again
    with torch.no_grad():
        net.conv.weight.mul_(-2.0)
        net.fc.weight.add_(0.5)
        with torch.autocast("cpu", torch.bfloat16):
            out, expected = jnet(x), net(x)
    torch.testing.assert_close(out.float(), expected.float(), **BF16_TOL)


def test_bfloat16_model_equals_eager(packing):
    torch.manual_seed(0)
    net = Net().to(torch.bfloat16)
    jnet = thunder.jit(net)
    x = torch.randn(2, 7, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        out, expected = jnet(x), net(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expected.float(), **BF16_TOL)
    assert _calls(jnet) == (2, 1)
    # a weight given as a plain tensor (no parameter: nothing to keep a packing for) is F.linear's
    w = torch.randn(40, 64, dtype=torch.bfloat16)
    jf = thunder.jit(lambda x, w: F.linear(x, w))
    with torch.no_grad():
        torch.testing.assert_close(jf(x, w), F.linear(x, w), rtol=0, atol=0)
    assert _calls(jf) == (1, 0)


def test_training_under_autocast_equals_eager(packing):
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(2, 5, 64, requires_grad=True)
    jnet = thunder.jit(net)
    results = []
    for fn in (net, jnet):
        with torch.autocast("cpu", torch.bfloat16):
            out = fn(x)
        out.float().square().mean().backward()
        results.append((out, x.grad, {n: p.grad for n, p in net.named_parameters()}))
        net.zero_grad(set_to_none=True)
        x.grad = None
    (e_out, e_gx, e_grads), (t_out, t_gx, t_grads) = results
    assert t_out.dtype == e_out.dtype
    torch.testing.assert_close(t_out.float(), e_out.float(), **BF16_TOL)
    torch.testing.assert_close(t_gx, e_gx, **BF16_TOL)
    for n in e_grads:
        assert t_grads[n].dtype == e_grads[n].dtype, n
        torch.testing.assert_close(t_grads[n], e_grads[n], **BF16_TOL)


@pytest.mark.parametrize("probe", [True, False])
def test_auto_follows_the_probe(packing, probe):
    packing.setenv(packed_linear.ENV, "auto")
    packing.setattr(packed_linear, "faster", lambda *a: probe)
    lin = nn.Linear(64, 32).to(torch.bfloat16)
    jf = thunder.jit(lin)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(jf(x).float(), lin(x).float(), **BF16_TOL)
    assert _calls(jf) == ((1, 0) if probe else (0, 0))


def test_without_onednn_nothing_is_packed(packing):
    packing.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert not packed_linear.available() and not packed_linear.used()
    lin = nn.Linear(64, 32).to(torch.bfloat16)
    jf = thunder.jit(lin)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(jf(x), lin(x), rtol=0, atol=0)
    assert _calls(jf) == (0, 0)
    assert "torch.nn.functional.linear(" in str(thunder.last_traces(jf)[-1])


def test_auto_by_default_and_a_wrong_setting_is_named(monkeypatch):
    monkeypatch.delenv(packed_linear.ENV, raising=False)
    assert packed_linear.mode() == "auto"
    assert packed_linear.used() == (packed_linear.available() and packed_linear.faster())
    for rows in (1, 256):  # (float32: the probe at a decode step's row count and at a prefill's)
        assert packed_linear.used(torch.float32, rows) == (packed_linear.available(torch.float32)
                                                           and packed_linear._no_slower(torch.float32, rows))
    monkeypatch.setenv(packed_linear.ENV, "yes")
    with pytest.raises(ValueError, match="THUNDER_PACKED_WEIGHTS='yes'"):
        packed_linear.used()


def _sgd_step(net):
    for p in net.parameters():
        p.grad = torch.full_like(p, 0.5)
    torch.optim.SGD(net.parameters(), lr=1.0).step()


def _fused_adamw_step(net):  # (leaves p._version as it was)
    for p in net.parameters():
        p.grad = torch.full_like(p, 0.5)
    torch.optim.AdamW(net.parameters(), lr=1.0, fused=True).step()


def _load_state_dict(net):
    net.load_state_dict({k: -2 * v for k, v in net.state_dict().items()})


def _vector_to_parameters(net):
    vec = torch.nn.utils.parameters_to_vector(net.parameters())
    torch.nn.utils.vector_to_parameters(vec.flip(0), net.parameters())


def _each(write):
    return lambda net: [write(p) for p in net.parameters()]


# every way of writing a weight that eager sees; those marked (.data) leave p._version as it was
WRITES = {
    "optimizer SGD step": _sgd_step,
    "fused AdamW step": _fused_adamw_step,
    "p.data = t": _each(lambda p: setattr(p, "data", torch.randn_like(p))),
    "p.data.copy_ (.data)": _each(lambda p: p.data.copy_(torch.randn_like(p))),
    "p.data.mul_ (.data)": _each(lambda p: p.data.mul_(-3)),
    "p.data[0] = (.data)": _each(lambda p: p.data.__setitem__(0, 7.0)),
    "p.copy_ under no_grad": _each(lambda p: p.copy_(torch.randn_like(p))),
    "load_state_dict": _load_state_dict,
    "vector_to_parameters (.data)": _vector_to_parameters,
}


def _each_write_repacks(net, compare, calls, compares=1):
    """After each of WRITES to net's weights, compare() (`compares` times) still equals eager
    (a stale packed copy would not) and the three weights were packed again (calls: the packings)."""
    for name, write in WRITES.items():
        with torch.no_grad():
            write(net)
        del calls[:]
        try:
            for _ in range(compares):
                compare()
        except AssertionError as e:
            raise AssertionError(f"stale packed weight after {name}") from e
        assert len(calls) == 3, name


@pytest.mark.parametrize("dtype, autocast", [(torch.bfloat16, False), (torch.float32, True), (torch.float32, False)],
                         ids=["bf16-model", "f32-autocast", "f32-model"])
def test_every_weight_write_is_seen_by_the_next_call(monkeypatch, dtype, autocast):
    """A packed copy is remade after each write (values equal eager's after it, so a stale copy
    fails: each write changes every weight by far more than bf16 rounding; float32: bitwise) and
    is reused where nothing was written (no packing on a second call)."""
    product = torch.bfloat16 if autocast else dtype
    calls = _count_packings(_switch_on(monkeypatch, product))
    torch.manual_seed(0)
    net = Net().to(dtype)
    jnet = thunder.jit(net)
    x = torch.randn(3, 5, 64, dtype=dtype)
    tol = BF16_TOL if product == torch.bfloat16 else dict(rtol=0, atol=0)

    def compare():
        with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            out, expected = jnet(x), net(x)
        torch.testing.assert_close(out.float(), expected.float(), **tol)

    compare()
    assert _calls(jnet, product) == (2, 1) and len(calls) == 3
    compare()
    assert len(calls) == 3  # (nothing written: nothing packed)
    # (float32: the first call after a packing returned F.linear's result; a second the packed one's)
    _each_write_repacks(net, compare, calls, compares=2 if product == torch.float32 else 1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_weights_sharing_a_storage_with_biases_stay_packed(monkeypatch, dtype):
    """Parameters that are views of one storage (after vector_to_parameters), biases included:
    a packed call leaves the storage where it was (oneDNN would move a copy-on-write bias's by
    asking for a writable pointer), so the next call packs nothing."""
    calls = _count_packings(_switch_on(monkeypatch, dtype))
    torch.manual_seed(0)
    net = Net().to(dtype)
    _vector_to_parameters(net)
    jnet = thunder.jit(net)
    x = torch.randn(3, 5, 64, dtype=dtype)
    with torch.no_grad():
        expected = net(x)
        for _ in range(3):
            torch.testing.assert_close(jnet(x), expected, rtol=0, atol=0)
    assert _calls(jnet, dtype) == (2, 1) and len(calls) == 3


def test_packings_kept_per_weight_are_bounded(packing):
    """Calls with ever new row counts keep at most KEPT packings of a weight (the least recently
    used goes), each equal to F.linear's result."""
    w = nn.Parameter(torch.randn(32, 64, dtype=torch.bfloat16), requires_grad=False)
    with torch.no_grad():
        for rows in (1, 4, 1, 9):
            x = torch.randn(rows, 64, dtype=torch.bfloat16)
            torch.testing.assert_close(packed_linear.linear(x, w), F.linear(x, w), **BF16_TOL)
    kept = packed_linear._CACHE[id(w)][3]
    assert packed_linear.KEPT == 2 and [rows for _, _, rows, _ in kept] == [1, 9]


def test_a_weight_whose_writes_cannot_be_seen_is_not_packed(packing):
    """A weight in shared memory cannot be made copy-on-write (how writes are seen): it runs
    unpacked, and a write through .data is seen by the next call."""
    calls = _count_packings(packing)
    lin = nn.Linear(64, 32).to(torch.bfloat16)
    lin.weight.share_memory_()
    jf = thunder.jit(lin)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(jf(x), lin(x), rtol=0, atol=0)
        lin.weight.data.mul_(-3)
        torch.testing.assert_close(jf(x), lin(x), rtol=0, atol=0)
    assert _calls(jf) == (1, 0) and calls == []


@pytest.mark.parametrize("choice", ["auto", "on"])
def test_auto_packs_no_training_forward(packing, choice):
    """A training step's forward (its weights change at each optimizer step) packs under `on`
    only; its loss and grads are eager's within autocast tolerance either way."""
    packing.setenv(packed_linear.ENV, choice)
    packing.setattr(packed_linear, "faster", lambda *a: True)
    torch.manual_seed(0)
    net = Net()
    jnet = thunder.jit(net)
    x = torch.randn(2, 5, 64)
    grads = []
    for fn in (net, jnet):
        with torch.autocast("cpu", torch.bfloat16):
            fn(x).float().square().mean().backward()
        grads.append([p.grad for p in net.parameters()])
        net.zero_grad(set_to_none=True)
    for e, t in zip(*grads):
        torch.testing.assert_close(t, e, **BF16_TOL)
    assert _calls(jnet) == ((0, 0) if choice == "auto" else (2, 1))


class Cached(nn.Module):
    """A decode step's shape: a buffer (a KV cache) updated in place, then a linear."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 32)
        self.register_buffer("cache", torch.zeros(4, 64))

    def forward(self, x, pos):
        self.cache.index_copy_(0, pos, x)
        return self.fc(self.cache.sum(0, keepdim=True))


def test_a_program_updating_an_input_in_place_keeps_the_packing(packing):
    """The prologue of a program that updates an input in place compares storages by address
    without asking for writable pointers (runtime/structure.py storage_address): asking would
    move each copy-on-write weight and pack it again at every call (a decode step)."""
    calls = _count_packings(packing)
    torch.manual_seed(0)
    net, ref = Cached().to(torch.bfloat16), Cached().to(torch.bfloat16)
    ref.load_state_dict(net.state_dict())
    jnet = thunder.jit(net)
    with torch.no_grad():
        for i in range(3):
            x, pos = torch.randn(1, 64, dtype=torch.bfloat16), torch.tensor([i])
            torch.testing.assert_close(jnet(x, pos), ref(x, pos), rtol=0, atol=0)
    assert _calls(jnet) == (1, 0) and calls == [1]


# a prefill's rows, a decode step's one, 2-D, 2-D not contiguous (the same rows: no packing)
F32_INPUTS = (lambda: torch.randn(3, 5, 64), lambda: torch.randn(1, 1, 64), lambda: torch.randn(7, 64),
              lambda: torch.randn(64, 7).t())


def test_float32_model_is_eagers_bits(packing_f32):
    """float32 linears and Conv1D products of a grad-free program run from packed weights (MKL)
    where that is F.linear's bits, at a prefill's and a decode step's row counts and 2-D inputs:
    every call equal to eager bitwise, the first of each kind compared, later ones reusing the
    packing (one per weight and row count)."""
    calls = _count_packings(packing_f32)
    torch.manual_seed(0)
    net = Net()
    jnet = thunder.jit(net)
    for make in F32_INPUTS:
        x = make()
        for _ in range(3):
            with torch.no_grad():
                out, expected = jnet(x), net(x)
            assert out.dtype == torch.float32 and out.stride() == expected.stride()
            torch.testing.assert_close(out, expected, rtol=0, atol=0)
        assert _calls(jnet, torch.float32) == (2, 1)
    assert sorted(calls) == sorted([15] * 3 + [1] * 3 + [7] * 3)
    kinds = [exact for entry in packed_linear._CACHE.values() for _, exact in entry[3].values()]
    # (1 and 7 rows kept; fc, which reads the input, saw two kinds at 7: contiguous and not)
    assert sorted(len(exact) for exact in kinds) == [1, 1, 1, 1, 1, 2]


def test_float32_packed_result_unlike_eagers_is_not_used(packing_f32):
    """Where the packed product's bits differ from F.linear's (here: made to differ), every call
    returns F.linear's result: the first compares, later ones run unpacked."""
    product = packed_linear._product
    packing_f32.setattr(packed_linear, "_product", lambda *a: product(*a) + 1)
    lin = nn.Linear(64, 32)
    jf = thunder.jit(lin)
    x = torch.randn(4, 64)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(jf(x), lin(x), rtol=0, atol=0)
    assert _calls(jf, torch.float32) == (1, 0)
    (_, exact), = packed_linear._CACHE[id(lin.weight)][3].values()
    assert list(exact.values()) == [False]


def test_float32_decode_rows_follow_their_own_probe(packing_f32):
    """Under auto, float32 products of one row (a decode step) are packed where the probe at one
    row finds packing no slower, those of more rows by the probe at 256."""
    packing_f32.setenv(packed_linear.ENV, "auto")
    packing_f32.setattr(packed_linear, "_no_slower", lambda dtype, rows: rows == 256)
    products = []  # (rows, library) of each product from a packed weight
    product = packed_linear._product
    packing_f32.setattr(packed_linear, "_product", lambda x, p, w, b, rows, library:
                        products.append((rows, library)) or product(x, p, w, b, rows, library))
    lin = nn.Linear(64, 32)
    jf = thunder.jit(lin)  # (the second call's program is for all row counts: gemm_by_size.py)
    with torch.no_grad():
        for rows, expected in ((1, []), (9, [(9, "mkl")]), (1, []), (5, [(5, "mkl")])):
            x = torch.randn(rows, 64)
            products.clear()
            torch.testing.assert_close(jf(x), lin(x), rtol=0, atol=0)
            assert products == expected, rows


@pytest.mark.parametrize("choice", ["off", "on"])
def test_float32_switch_and_without_mkl(packing_f32, choice):
    """`off` packs nothing; without torch's MKL nothing float32 is packed whatever the setting;
    both give F.linear's results."""
    packing_f32.setenv(packed_linear.ENV, choice)
    if choice == "on":
        packing_f32.setattr(torch.backends.mkl, "is_available", lambda: False)
        assert not packed_linear.available(torch.float32) and not packed_linear.used(torch.float32)
    lin = nn.Linear(64, 32)
    jf = thunder.jit(lin)
    x = torch.randn(2, 3, 64)
    with torch.no_grad():
        torch.testing.assert_close(jf(x), lin(x), rtol=0, atol=0)
    assert _calls(jf, torch.float32) == (0, 0)


# --------------------------------------------------------------------------------------------
# float32 products of MIN_MACS or more: the fastest of torch's, MKL's packed, oneDNN's and oneDNN's
# packed (packed_linear.f32_kernel), forced by THUNDER_CPU_MATMUL and THUNDER_PACKED_WEIGHTS

# (THUNDER_CPU_MATMUL, THUNDER_PACKED_WEIGHTS) -> the kernel they leave, the generated call
FORCED = {("onednn", "on"): ("onednn_packed", "impl.packed_onednn_"), ("onednn", "off"): ("onednn", "impl.onednn_"),
          ("torch", "on"): ("mkl_packed", "impl.packed_f32_"), ("torch", "off"): ("torch", None)}
F32_TOL = dict(rtol=1e-5, atol=1e-5)


def _force(monkeypatch, matmul, packing):
    kernel, prefix = FORCED[(matmul, packing)]
    if kernel.startswith("onednn") and not onednn.available():
        pytest.skip("torch is built without oneDNN (mkldnn)")
    if kernel.endswith("packed") and not packed_linear.available(torch.float32, kernel.split("_")[0]):
        pytest.skip(f"torch packs no float32 products by {kernel.split('_')[0]} here")
    monkeypatch.setenv("THUNDER_CPU_MATMUL", matmul)
    monkeypatch.setenv(packed_linear.ENV, packing)
    return kernel, prefix


class Wide(nn.Module):
    """Products of MIN_MACS or more at 32 rows: a linear with a bias, a Conv1D, a bias-free head."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(512, 384)
        self.conv = Conv1D(384, 384)
        self.head = nn.Linear(384, 2048, bias=False)

    def forward(self, x):
        return self.head(F.silu(self.conv(F.gelu(self.fc(x)))))


@pytest.mark.parametrize("matmul, packing", list(FORCED), ids=[f"{m}-{p}" for m, p in FORCED])
def test_float32_large_products_by_each_kernel_equal_eager(monkeypatch, matmul, packing):
    """Each kernel the settings force runs every product (the generated calls) and gives eager's
    result: bit for bit by torch and MKL's packed path (used where its bits are F.linear's),
    within float32 rounding by oneDNN (its sums in another order), at a prefill's rows and a
    decode step's one (the lm head's product is as large: 2048 x 384 > MIN_MACS at 32 rows; one
    row is below it, so torch's or MKL's)."""
    kernel, prefix = _force(monkeypatch, matmul, packing)
    calls = _count_packings(monkeypatch)
    torch.manual_seed(0)
    net = Wide()
    assert 32 * 384 * 384 >= onednn.MIN_MACS
    jnet = thunder.jit(net)
    x = torch.randn(2, 16, 512)
    for _ in range(3):  # (MKL's packed path: the first call compares, later ones run packed)
        with torch.no_grad():
            out, expected = jnet(x), net(x)
        tol = F32_TOL if kernel.startswith("onednn") else dict(rtol=0, atol=0)
        torch.testing.assert_close(out, expected, **tol)
    src = str(thunder.last_traces(jnet)[-1])
    if prefix is None:
        assert "impl." not in src and src.count("torch.nn.functional.linear(") == 2 and "torch.addmm(" in src
    else:
        assert (src.count(prefix + "linear("), src.count(prefix + "addmm(")) == (2, 1)
    assert len(calls) == (3 if kernel.endswith("packed") else 0)  # (each weight packed once)


def test_onednn_packed_float32_sees_every_write(monkeypatch):
    """oneDNN's packed float32 weights are remade after each write as MKL's and bf16's are
    (values equal eager's within float32 rounding after it: each write changes every weight by
    far more) and reused where nothing was written."""
    _force(monkeypatch, "onednn", "on")
    monkeypatch.setattr(onednn, "MIN_MACS", 0)  # (Net's small products through oneDNN too)
    calls = _count_packings(monkeypatch)
    torch.manual_seed(0)
    net = Net()
    jnet = thunder.jit(net)
    x = torch.randn(3, 5, 64)

    def compare():
        with torch.no_grad():
            torch.testing.assert_close(jnet(x), net(x), **F32_TOL)

    compare()
    assert _calls(jnet, "onednn") == (2, 1) and len(calls) == 3
    compare()
    assert len(calls) == 3
    _each_write_repacks(net, compare, calls)


def _probe_says(monkeypatch, times, exact, packing="auto"):
    """f32_kernel's answers at a prefill's and a decode step's rows, `_times` (ms) made up."""
    if not (onednn.available() and packed_linear.available(torch.float32, "onednn")):
        pytest.skip("torch is built without oneDNN (mkldnn)")
    monkeypatch.setenv("THUNDER_CPU_MATMUL", "auto")
    monkeypatch.setenv(packed_linear.ENV, packing)
    monkeypatch.setattr(packed_linear, "_times", lambda dtype, rows, n, k=512: (times, exact))
    monkeypatch.setattr(packed_linear, "available", lambda dtype=torch.bfloat16, library=None: True)
    n = onednn.MIN_MACS // 512
    return packed_linear.f32_kernel(512, 512, n), packed_linear.f32_kernel(1, 512, n), packed_linear.f32_kernel(1, 512, n - 1)


def test_the_probe_picks_by_time_not_by_cpu(monkeypatch):
    """Where MKL is fast (an Intel CPU: packed MKL faster than F.linear and bit-equal, oneDNN no
    faster) MKL's packed path stays; where oneDNN takes under onednn.MARGIN of it (this AMD Zen 5:
    ~0.45), oneDNN's, packed where no slower than plain; MKL's packed time counts only where the
    probe found its bits F.linear's; products under MIN_MACS keep the MKL side."""
    intel = {"torch": 3.5, "mkl_packed": 3.2, "onednn": 3.4, "onednn_packed": 3.3}
    assert _probe_says(monkeypatch, intel, True) == ("mkl_packed",) * 3
    zen5 = {"torch": 3.9, "mkl_packed": 3.8, "onednn": 1.75, "onednn_packed": 1.6}
    assert _probe_says(monkeypatch, zen5, True) == ("onednn_packed", "onednn_packed", "mkl_packed")
    assert _probe_says(monkeypatch, dict(zen5, onednn_packed=1.8), True)[0] == "onednn"
    # oneDNN under MARGIN of F.linear but not of MKL's packed time: MKL's where its bits are F.linear's
    close = {"torch": 3.0, "mkl_packed": 2.0, "onednn": 2.1, "onednn_packed": 2.2}
    assert _probe_says(monkeypatch, close, True)[0] == "mkl_packed"
    assert _probe_says(monkeypatch, close, False)[0] == "onednn"
    # the settings still decide: packing off leaves the choice to onednn.faster() (as for matmuls)
    monkeypatch.setattr(onednn, "measured_faster", lambda: False)
    assert _probe_says(monkeypatch, zen5, True, packing="off") == ("torch",) * 3
    monkeypatch.setattr(onednn, "measured_faster", lambda: True)
    assert _probe_says(monkeypatch, zen5, True, packing="off") == ("onednn", "onednn", "torch")


def test_the_matmul_probe_runs_at_the_thread_count_in_use(monkeypatch):
    """The libraries scale differently with threads (a Zen 4: oneDNN ~0.9 of MKL's time at one
    thread, ~0.75 at two): onednn.faster() measures at the thread count the programs run with,
    once per count; the times here made up."""
    if not onednn.available():
        pytest.skip("torch is built without oneDNN (mkldnn)")
    measured = []

    def best_times(runs, threads, rounds=9):
        measured.append(threads)
        return {"torch": 1.0, "onednn": 0.95 if threads == 1 else 0.75}
    monkeypatch.setenv("THUNDER_CPU_MATMUL", "auto")
    monkeypatch.setattr(onednn, "best_times", best_times)
    onednn.measured_ratio.cache_clear()
    before = torch.get_num_threads()
    try:
        answers = []
        for threads in (1, 2, 1, 2):
            torch.set_num_threads(threads)
            answers.append(onednn.faster())
        assert answers == [False, True, False, True] and measured == [1, 2]
    finally:
        torch.set_num_threads(before)
        onednn.measured_ratio.cache_clear()


def test_the_probes_are_kept_on_disk_for_the_next_process(monkeypatch, tmp_path):
    """oneDNN's GEMM ratio and the packed products' times are measured by the first
    PROBES_KEPT processes on a CPU and thread count (the best time of each kernel kept): the
    next processes (here: the per-process memo cleared) read them from the cache folder instead
    of timing again (~0.3 s of every warm-started first step); another thread count is another
    file."""
    if not onednn.available():
        pytest.skip("torch is built without oneDNN (mkldnn)")
    measured = []

    def best_times(runs, threads, rounds=9):  # (made-up times: the second process's are the best)
        measured.append(threads)
        scale = 0.5 if len(measured) in (3, 4) else 1.0
        return {name: scale * (1.0 + i / 10) for i, name in enumerate(runs)}
    monkeypatch.setenv("THUNDER_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(onednn, "best_times", best_times)
    before = torch.get_num_threads()
    try:
        ratios, torch_times = [], []
        for process in range(onednn.PROBES_KEPT + 2):
            onednn.measured_ratio.cache_clear()
            packed_linear._measured.cache_clear()
            ratios.append(onednn.measured_ratio(1))
            times, exact = packed_linear._measured(torch.float32, 1, 64, 32, 1)
            torch_times.append(times["torch"])
            assert type(exact) is bool
        assert len(measured) == 2 * onednn.PROBES_KEPT  # (the later "processes" read both)
        assert ratios == [pytest.approx(1.1)] * len(ratios)
        assert torch_times == [1.0] + [0.5] * (len(torch_times) - 1)  # (the best of the probes)
        onednn.measured_ratio.cache_clear()
        onednn.measured_ratio(2)
        assert measured[-1] == 2
        assert len([f for f in os.listdir(tmp_path) if f.endswith(".json")]) == 3
    finally:
        torch.set_num_threads(before)
        onednn.measured_ratio.cache_clear()
        packed_linear._measured.cache_clear()


def test_the_settings_are_read_at_each_compilation(monkeypatch):
    """THUNDER_CPU_MATMUL overrides the measured answer whenever it is set (the measurement
    itself is made once); a wrong value is named."""
    if not onednn.available():
        pytest.skip("torch is built without oneDNN (mkldnn)")
    for choice in ("onednn", "torch", "onednn"):
        monkeypatch.setenv("THUNDER_CPU_MATMUL", choice)
        assert onednn.faster() == (choice == "onednn")
    monkeypatch.setenv("THUNDER_CPU_MATMUL", "mkl")
    with pytest.raises(ValueError, match="THUNDER_CPU_MATMUL='mkl'"):
        onednn.faster()


@pytest.mark.parametrize("name", ["llama", "gpt2"])
@pytest.mark.parametrize("matmul, packing", [("onednn", "on"), ("onednn", "off"), ("torch", "auto")],
                         ids=["onednn-packed", "onednn", "torch-mkl"])
def test_float32_prefill_equals_eager(monkeypatch, name, matmul, packing):
    """A transformers model's float32 no_grad forward (a prefill) through each kernel (oneDNN
    taking every product: MIN_MACS 0) equals eager's within float32 rounding, and so does a
    second call (packed weights reused)."""
    transformers = pytest.importorskip("transformers")
    kernel, prefix = _force(monkeypatch, matmul, "on" if packing == "on" else "off")
    monkeypatch.setenv(packed_linear.ENV, packing)
    monkeypatch.setattr(onednn, "MIN_MACS", 0)
    torch.manual_seed(0)
    if name == "gpt2":
        config = transformers.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config).eval()
    else:
        config = transformers.LlamaConfig(vocab_size=96, max_position_embeddings=32, hidden_size=32,
                                          intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2)
        model = transformers.LlamaForCausalLM(config).eval()
    jm = thunder.jit(model)
    ids = torch.randint(0, 96, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(input_ids=ids, use_cache=False).logits
        for _ in range(2):
            torch.testing.assert_close(jm(input_ids=ids, use_cache=False).logits, expected, **F32_TOL)
    if prefix is not None:
        src = str(thunder.last_traces(jm)[-1])
        assert src.count(prefix) >= (5 if name == "gpt2" else 15)  # (every linear/Conv1D: 4 or 7 a layer, the head)
