"""torch.compile(..., backend="thunder"): models against eager (forward and a training step),
Dynamo's graph breaks, a graph thunder refuses running as torch, options, the entry point."""
import functools
import logging
import os
import subprocess
import sys

import pytest
import torch

import thunder
from thunder import dynamo_backend
from test_models import NanoGPT, ResNet, _ids, check_model

compile_thunder = functools.partial(torch.compile, backend="thunder")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    dynamo_backend.reset()
    yield
    torch._dynamo.reset()


def _graphs_by_thunder():
    return [g.status for g in dynamo_backend.graphs()]


def test_nanogpt_forward_and_training_step():
    torch.manual_seed(0)
    idx = torch.randint(0, 64, (2, 16))
    targets = torch.roll(idx, -1, 1)
    targets[:, -1] = -1
    check_model(NanoGPT(), dict(idx=idx, targets=targets), compile=compile_thunder)
    graphs = dynamo_backend.graphs()
    assert graphs and all(g.status == "thunder" for g in graphs)
    # the training graph ran thunder's forward/backward
    assert any(thunder.last_backward_traces(g.jitted) for g in graphs if g.jitted._cs.calls)


def test_cnn_forward_and_training_step():
    torch.manual_seed(0)
    check_model(ResNet(), dict(x=torch.randn(4, 3, 16, 16), target=torch.tensor([0, 3, 9, 3])), compile=compile_thunder)
    assert _graphs_by_thunder() and set(_graphs_by_thunder()) == {"thunder"}


def test_gpt2_forward_and_training_step():
    pytest.importorskip("transformers", reason="transformers is not installed")
    import transformers

    torch.manual_seed(0)  # (one layer: Dynamo's own tracing is most of this test's time)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=96, n_positions=32, n_embd=32, n_layer=1, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0))
    ids = _ids()
    check_model(model, dict(input_ids=ids, labels=ids), compile=compile_thunder)
    assert _graphs_by_thunder() and set(_graphs_by_thunder()) == {"thunder"}


def test_graph_break_gives_two_graphs_both_by_thunder(caplog):
    caplog.set_level(logging.INFO, logger="thunder.graph_breaks")
    w = torch.randn(8, 8, requires_grad=True)

    def f(x):
        y = torch.tanh(x @ w)
        n = int(y.sum().item() > 0)  # Dynamo breaks the graph on .item() here
        return (y * (n + 1)).sum()

    x = torch.randn(4, 8)
    loss = compile_thunder(f)(x)
    grad, = torch.autograd.grad(loss, w)
    expected = f(x)
    expected_grad, = torch.autograd.grad(expected, w)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad, expected_grad)
    assert _graphs_by_thunder() == ["thunder", "thunder"]
    messages = [r.getMessage() for r in caplog.records if r.name == "thunder.graph_breaks"]
    assert messages[0].startswith("graph break (Dynamo): ")
    assert [m for m in messages if not m.startswith("graph break")] == [
        f"graph {g.compile_id}: {g.nodes} calls to thunder" for g in dynamo_backend.graphs()]


def test_a_graph_thunder_refuses_runs_as_torch(caplog):
    caplog.set_level(logging.INFO, logger="thunder.graph_breaks")

    def f(x):  # an in-place update of an input that is not a leaf and requires grad: thunder refuses it
        x.mul_(2)
        return x + 1

    a = torch.randn(3, requires_grad=True)
    cf = compile_thunder(f)
    got, expected = cf(a * 1), f(a * 1)
    torch.testing.assert_close(got, expected)
    (got_grad,), (expected_grad,) = torch.autograd.grad(got.sum(), a), torch.autograd.grad(expected.sum(), a)
    torch.testing.assert_close(got_grad, expected_grad)
    g, = dynamo_backend.graphs()
    assert g.status == "torch"
    assert g.reason.startswith("NotImplementedError: thunder: an in-place update at <eval_with_key>") and \
        g.reason.endswith("of an input that requires grad and is not a leaf (the result of other ops) is not "
                          "supported. Workaround: update a clone, or make the update outside the jitted function.")
    assert [r.getMessage() for r in caplog.records if r.name == "thunder.graph_breaks"][-1] == (
        f"graph {g.compile_id} runs as torch: thunder refused it: " + g.reason)


def test_errors_are_those_of_backend_eager():
    def f(x, y):
        return torch.index_select(x, 0, y) * 2

    x, bad = torch.randn(3, 4), torch.tensor([0, 7])  # an index out of range: found when it runs
    errors = []
    for backend in ("eager", "thunder"):
        torch._dynamo.reset()
        with pytest.raises(Exception) as info:
            torch.compile(f, backend=backend)(x, bad)
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]


def test_options_are_thunder_jit_options():
    def f(x):
        return torch.tanh(x * 2 + 1)

    x = torch.randn(4, 8)
    torch.testing.assert_close(torch.compile(f, backend="thunder", options={"executors": ["torch"]})(x), f(x))
    g, = dynamo_backend.graphs()
    assert thunder.compile_data(g.jitted).executors == ("torch",)
    assert not any(t.producer == "thunder-fuse" for t in thunder.last_traces(g.jitted))
    with pytest.raises(Exception, match="unknown executor 'nope'"):
        torch.compile(f, backend="thunder", options={"executors": ["nope"]})(x)


def test_backend_is_found_without_importing_thunder():
    code = ("import sys, torch\n"
            "f = lambda x: torch.sin(x) * 2\n"
            "x = torch.randn(5)\n"
            "assert torch.equal(torch.compile(f, backend='thunder')(x), f(x)) or torch.allclose("
            "torch.compile(f, backend='thunder')(x), f(x))\n"
            "from thunder import dynamo_backend\n"
            "print([g.status for g in dynamo_backend.graphs()], 'thunder' in torch._dynamo.list_backends())\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "THUNDER_KERNEL_CACHE": "off"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == "['thunder'] True\n"
