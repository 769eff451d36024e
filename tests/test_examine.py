"""thunder.examine: the torch calls with their status, splits, fusion regions and guards, as
exact text, without running the compiled program."""
import torch

import thunder
from thunder.examine import Region, TorchCall


def test_ops_fallback_and_decomposition(capsys):
    def f(x, y):
        a = torch.nn.functional.linear(x, y)  # a first-class op
        b = torch.cumprod(a, 0)  # no entry: torch runs it
        return torch.frac(b)  # no entry: torch's decomposition into ops that have one

    r = thunder.examine(f, torch.randn(4, 8), torch.randn(8, 8))
    line = f.__code__.co_firstlineno
    where = lambda n: f"test_examine.py:{line + n}"  # noqa: E731
    assert r.calls == [
        TorchCall("torch.nn.functional.linear", where(1), "op", ["ltorch.linear"]),
        TorchCall("torch.cumprod", where(2), "fallback", ["ltorch.torch_call"]),
        TorchCall("torch.frac", where(3), "decomposed", ["ltorch.trunc", "ltorch.sub"]),
    ]
    assert r.splits == [] and r.error is None
    assert r.guards[:3] == ["tensor argument 0: shape (4, 8), float32, cpu, requires_grad=False, strides (8, 1)",
                            "tensor argument 1: shape (8, 8), float32, cpu, requires_grad=False, strides (8, 1)",
                            f"the code of {f.__qualname__}: is the code of {f.__qualname__} (test_examine.py:{line})"]
    assert "global 'torch': is the module torch" in r.guards
    out = capsys.readouterr().out
    assert out.startswith("torch calls (3)\n  where               call                        status      "
                          "ops / reason\n"
                          f"  {where(1)}  torch.nn.functional.linear  op          ltorch.linear\n")
    assert out == r.table() + "\n"


def test_split_and_fused_region():
    def g(x):
        if x.sum() > 0:  # a value read from a tensor: the program is specialized on it
            return torch.tanh(x * 2 + 1)
        return x

    x = torch.ones(4, 8)
    r = thunder.examine(g, x, fusion="always")
    line = g.__code__.co_firstlineno
    assert [(c.call, c.status) for c in r.calls] == [
        ("torch.sum", "op"), ("torch.gt", "op"), ("torch.Tensor.item", "op"), ("torch.mul", "op"),
        ("torch.add", "op"), ("torch.tanh", "op")]
    assert r.splits == [f"{__file__}:{line + 1}: bool() of t1 = True"]
    assert r.regions == [Region("fusion_0", "linalg", ["thunder.sum", "thunder.gt"]),
                         Region("fusion_1", "linalg", ["thunder.mul", "thunder.add", "thunder.tanh"])]
    assert r.guards[0] == "tensor argument 0: shape (4, 8), float32, cpu, requires_grad=False, strides (8, 1)"


def test_unsupported_call_names_the_reason():
    def h(x):
        y = x * 2
        torch.set_default_dtype(torch.float64)
        return y

    r = thunder.examine(h, torch.ones(3))
    line = h.__code__.co_firstlineno
    reason = (f"RuntimeError: Default dtype is changed during the execution of jitted function at {__file__}:"
              f"{line + 2}. This is currently unsupported. Workaround: set it before calling the jitted function")
    assert r.calls == [TorchCall("torch.mul", f"test_examine.py:{line + 1}", "op", ["ltorch.mul"]),
                       TorchCall("torch.set_default_dtype", f"test_examine.py:{line + 2}", "unsupported", [], reason)]
    assert r.error == reason and r.regions == [] and r.guards == []
    assert torch.get_default_dtype() == torch.float32


def test_examine_does_not_run_the_program():
    def k(x):
        x.add_(1)  # the program would update its input
        return torch.cumprod(x, 0)

    x = torch.ones(3)
    r = thunder.examine(k, x)
    assert [c.status for c in r.calls] == ["op", "fallback"]
    assert torch.equal(x, torch.ones(3))  # compiled, never run
    jk = thunder.jit(k)
    torch.testing.assert_close(jk(x), torch.cumprod(torch.full((3,), 2.0), 0))
    assert torch.equal(x, torch.full((3,), 2.0))
