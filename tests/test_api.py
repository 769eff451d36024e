"""The public API of thunder: jit, traces, cache options and statistics, functional.jit."""
import collections

import pytest
import torch

import thunder


def foo(a, b):
    return a + b


def test_jit_matches_eager_and_traces_read_as_python_and_mlir():
    jfoo = thunder.jit(foo)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    torch.testing.assert_close(jfoo(a, b), foo(a, b), rtol=0, atol=0)
    traces = thunder.last_traces(jfoo)
    final = str(traces[-1])
    assert "def computation(a, b):" in final
    assert "t0 = torch.add(a, b)" in final
    assert "return t0" in final
    mlir = traces[0].to_mlir()
    assert "func.func @computation(%arg0: tensor<2x2xf32>, %arg1: tensor<2x2xf32>) -> tensor<2x2xf32>" in mlir
    assert '"ltorch.add"(%arg0, %arg1, %c1_i64)' in mlir
    assert [t.producer for t in traces] == [
        "interpreter (acquisition)", "thunder-functionalize", "cse", "canonicalize",
        "torch executor (execution trace)"]
    assert "foo" in traces[0].to_mlir(debug_info=True) or "test_api.py" in traces[0].to_mlir(debug_info=True)


def test_execution_trace_is_the_program_that_runs():
    jfoo = thunder.jit(lambda a, b: (a * b).sum(dim=0) if a.ndim > 1 else a)
    a, b = torch.randn(3, 2), torch.randn(3, 2)
    out = jfoo(a, b)
    namespace = {"torch": torch}
    from thunder.ops.execute import NAMESPACE

    namespace.update(NAMESPACE)
    exec(str(thunder.last_traces(jfoo)[-1]), namespace)
    torch.testing.assert_close(namespace["computation"](a, b), out)


def test_program_deletes_each_intermediate_after_its_last_use():
    def f(x):
        q, r = torch.split(x.sin(), 1)  # r: never used
        return q.cos() * x, q

    jf = thunder.jit(f, executors=["torch"])  # (no fused kernels: every op in the program)
    x = torch.randn(2, 3)
    torch.testing.assert_close(jf(x), f(x))
    body = [line.split("  #")[0].strip() for line in str(thunder.last_traces(jf)[-1]).splitlines()[3:]]
    assert body == ["t0 = torch.sin(x)", "t1, t2 = torch.split(t0, 1, 0)", "del t2, t0",
                    "t3 = torch.cos(t1)", "t4 = torch.mul(t3, x)", "del t3", "return (t4, t1)"]


def test_cache_hits_misses_and_reasons():
    jfoo = thunder.jit(foo)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    jfoo(a, b)
    jfoo(a, b)
    assert (thunder.cache_hits(jfoo), thunder.cache_misses(jfoo)) == (1, 1)
    jfoo(a, torch.randn(2, 1))
    stats = thunder.compile_stats(jfoo)
    assert stats.cache_misses == 2 and "shape" in stats.last_miss_reason
    jfoo(a, b.double())
    assert "dtype" in thunder.compile_stats(jfoo).last_miss_reason
    jfoo(a, b.requires_grad_())
    assert "requires_grad" in thunder.compile_stats(jfoo).last_miss_reason
    jfoo(a, torch.randn(2, 2))  # back to the first entry: a hit
    assert thunder.cache_misses(jfoo) == 4
    assert stats.calls == 6 and stats.cache_hits == 2
    assert set(stats.last_stage_times) == {"interpretation", "mlir emission", "passes", "autograd", "codegen"}
    assert stats.last_compile_time > 0


def test_python_scalars_are_part_of_the_key_under_constant_values():
    jf = thunder.jit(lambda x, n: x * n)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x, 2), x * 2)
    torch.testing.assert_close(jf(x, 3), x * 3)
    torch.testing.assert_close(jf(x, 2.5), x * 2.5)
    assert thunder.cache_misses(jf) == 3
    assert thunder.cache_option(jf) == "constant values"
    assert "3" in str(thunder.last_traces(jf)[0]) or "2.5" in str(thunder.last_traces(jf)[0])


def test_cache_option_same_input_and_no_caching():
    same = thunder.jit(foo, cache="same input")
    a = torch.randn(2)
    same(a, a)
    same(a, a)
    assert thunder.cache_misses(same) == 1 and thunder.cache_hits(same) == 1
    nocache = thunder.jit(foo, cache="no caching")
    nocache(a, a)
    nocache(a, a)
    assert thunder.cache_misses(nocache) == 2 and thunder.cache_hits(nocache) == 0
    with pytest.raises(ValueError, match="cache option"):
        thunder.jit(foo, cache="sometimes")


def test_input_kinds_and_nested_outputs():
    def f(x, n, s, none, dt, dev, sl, size, nested):
        y = x.to(dt) * n
        if s == "double":
            y = y * 2
        if none is None:
            y = y + nested["b"][0]
        return {"y": y[sl], "shape": size, "list": [nested["a"], n]}

    jf = thunder.jit(f)
    x = torch.randn(4, 3)
    args = (x, 3, "double", None, torch.float64, torch.device("cpu"), slice(0, 2), torch.Size([4, 3]),
            {"a": torch.ones(2), "b": (torch.randn(4, 3, dtype=torch.float64), 1)})
    out, expected = jf(*args), f(*args)
    torch.testing.assert_close(out["y"], expected["y"])
    assert out["shape"] == expected["shape"]
    torch.testing.assert_close(out["list"][0], expected["list"][0])
    assert out["list"][1] == 3
    jf(*args)
    assert thunder.cache_hits(jf) == 1


def test_kwargs_and_defaults():
    def f(a, b=None, *, scale=2.0):
        return a * scale if b is None else (a + b) * scale

    jf = thunder.jit(f)
    a, b = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(jf(a), f(a))
    torch.testing.assert_close(jf(a, b, scale=3.0), f(a, b, scale=3.0))
    torch.testing.assert_close(jf(a, b=b), f(a, b=b))


def test_python_control_flow_on_values_and_shapes():
    def f(xs, w):
        total = None
        for i, x in enumerate(xs):
            if x.shape[0] > 2 and isinstance(i, int):
                x = x[: min(len(x), 3)]
            y = x * w[: x.shape[0]] + i
            total = y if total is None else total + y.sum()
        n = 0
        while n < max(2, len(xs)):
            n += 1
        return total * n, [a * b for a, b in zip(xs, range(len(xs)))][0]

    jf = thunder.jit(f)
    xs, w = [torch.randn(3), torch.randn(5)], torch.randn(8)
    for o, e in zip(jf(xs, w), f(xs, w)):
        torch.testing.assert_close(o, e)


class _Sub(torch.Tensor):
    pass


def test_untraceable_call_raises_not_implemented_naming_it():
    # a torch call thunder cannot record (a tensor subclass as argument): the call and the line
    jf = thunder.jit(lambda x: x.as_subclass(_Sub))
    with pytest.raises(NotImplementedError, match=r"torch.Tensor.as_subclass at .*test_api.py:\d+ cannot be traced"):
        jf(torch.randn(3))


def test_errors_like_eager():
    jf = thunder.jit(foo)
    with pytest.raises(RuntimeError, match="must match the size"):
        jf(torch.randn(2, 3), torch.randn(4))
    with pytest.raises(TypeError):
        thunder.jit(lambda a: a)()


def test_api_functions_reject_non_jitted_and_uncalled():
    for api in (thunder.last_traces, thunder.compile_stats, thunder.cache_hits, thunder.compile_data,
                thunder.last_prologue_traces, thunder.list_transforms, thunder.last_compile_options):
        with pytest.raises(TypeError, match="thunder.jit"):
            api(foo)
    jfoo = thunder.jit(foo)
    for api in (thunder.last_traces, thunder.last_prologue_traces, thunder.last_interpreted_instructions):
        with pytest.raises(TypeError, match="not been called"):
            api(jfoo)


def test_prologue_trace_is_generated_python():
    jfoo = thunder.jit(foo)
    jfoo(torch.randn(2), torch.randn(2))
    src = str(thunder.last_prologue_traces(jfoo)[0])
    assert src.startswith("def entry(args, kwargs):")
    assert "return computation(a0, a1)" in src


def test_compile_options_transforms_and_executors():
    jf = thunder.jit(foo, transforms=["thunder-decompose"], executors=["torch"], sharp_edges="allow")
    a, b = torch.randn(2, 3), torch.randn(3, dtype=torch.float64)
    torch.testing.assert_close(jf(a, b), foo(a, b))
    assert thunder.list_transforms(jf) == ["thunder-decompose"]
    assert thunder.last_traces(jf)[-2].producer == "thunder-decompose"
    assert "thunder.add" in thunder.last_traces(jf)[-2].to_mlir()
    assert thunder.last_compile_options(jf)["transforms"] == ["thunder-decompose"]
    assert thunder.compile_data(jf).executors == ("torch",)
    with pytest.raises(ValueError, match="executor"):
        thunder.jit(foo, executors=["nvfuser-on-cpu"])
    with pytest.warns(UserWarning, match="unknown compile options 'fusion_level'"):
        jf = thunder.jit(foo, fusion_level=3)
    assert thunder.last_compile_options(jf)["fusion_level"] == 3
    torch.testing.assert_close(jf(a, b), foo(a, b))


def test_interpreter_recording():
    jf = thunder.jit(foo, debug_options=thunder.DebugOptions(record_interpreter_history=True))
    jf(torch.randn(2), torch.randn(2))
    names = [i.opname for i in thunder.last_interpreted_instructions(jf)]
    assert "BINARY_OP" in names and "RETURN_VALUE" in names
    assert any("foo" in e for e in thunder.last_interpreter_log(jf))
    plain = thunder.jit(foo)
    plain(torch.randn(2), torch.randn(2))
    with pytest.raises(TypeError, match="record_interpreter_history"):
        thunder.last_interpreted_instructions(plain)


def test_functional_jit_is_strict():
    Point = collections.namedtuple("Point", "x y")
    jf = thunder.functional.jit(lambda p: p.x + p.y)
    p = Point(torch.randn(2), torch.randn(2))
    torch.testing.assert_close(jf(p), p.x + p.y)

    class Box:
        pass

    with pytest.raises(ValueError, match="Cannot unpack object of type Box"):
        thunder.functional.jit(lambda b: b)(Box())


GLOBAL_W = torch.randn(3)


def test_reading_a_tensor_that_is_not_an_input_names_it():
    def f(x):
        return x * GLOBAL_W

    with pytest.raises(NotImplementedError, match="GLOBAL_W"):
        thunder.functional.jit(f)(torch.randn(3))


def test_gradients_flow_through_the_torch_program():
    def f(x, w):
        return torch.tanh(x @ w).sum()

    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 2, requires_grad=True)
    thunder.jit(f)(x, w).backward()
    gx, gw = x.grad, w.grad
    x.grad = w.grad = None
    f(x, w).backward()
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gw, w.grad)


def test_disable_torch_autograd():
    x = torch.randn(3, requires_grad=True)
    out = thunder.jit(lambda x: x * 2, disable_torch_autograd=True)(x)
    assert not out.requires_grad


def test_proxies_are_tensors_to_isinstance():
    # library code branches on isinstance(x, torch.Tensor) / torch.is_tensor(x): inside the jitted
    # function the proxies standing for tensors must answer True, as eager's tensors do
    def f(x, n):
        y = x * 2 if isinstance(x, torch.Tensor) and torch.is_tensor(x) else x
        return y + (1 if isinstance(n, (torch.Tensor, float)) else 0)

    x = torch.ones(2)
    torch.testing.assert_close(thunder.jit(f)(x, 3), f(x, 3))


def test_isinstance_sees_tensors():
    """Inside the jitted function an input is a torch.Tensor (torch's Python code branches on it)."""
    f = lambda x: (isinstance(x, torch.Tensor), isinstance(x, (int, torch.Tensor)),  # noqa: E731
                   isinstance(x, torch.nn.Parameter), torch.is_tensor(x), torch.is_floating_point(x),
                   x * 2 if isinstance(x, torch.Tensor) else x)
    out = thunder.jit(f)(torch.ones(2))
    assert out[:5] == (True, True, False, True, True)
    torch.testing.assert_close(out[5], torch.full((2,), 2.0))


def test_model_output_keeps_its_type():
    """transformers' ModelOutput is a dataclass and a dict: returned as itself (out.logits)."""
    modeling_outputs = pytest.importorskip("transformers.modeling_outputs", reason="transformers is not installed")
    CausalLMOutput = modeling_outputs.CausalLMOutput

    out = thunder.jit(lambda x: CausalLMOutput(loss=x.sum(), logits=x * 2))(torch.ones(2))
    assert type(out) is CausalLMOutput and out.hidden_states is None
    torch.testing.assert_close(out.logits, torch.full((2,), 2.0))
    torch.testing.assert_close(out["loss"], torch.tensor(2.0))


def test_op_errors_note_the_users_line():
    """An op's error keeps eager's type and message and gains a note naming the call and line."""
    def f(x):
        return x.view(7, -1)

    with pytest.raises(RuntimeError, match="invalid for input of size 16") as info:
        thunder.jit(f)(torch.randn(4, 4))
    line = f.__code__.co_firstlineno + 1
    assert f"thunder: in torch.reshape at {__file__}:{line}" in info.value.__notes__


class _Holder:
    def __init__(self, t):
        self.t, self.n, self.items = t, 3, [t * 2]


def test_objects_holding_computed_tensors_are_returned_rebuilt():
    # transformers' DynamicCache (past_key_values) is such an object: a fresh one per call, as eager
    def f(x):
        return _Holder(x + 1), x.sum()

    jf, x = thunder.jit(f), torch.randn(3)
    first, _ = jf(x)
    second, total = jf(x * 2)
    assert type(second) is _Holder and second is not first and second.n == 3
    torch.testing.assert_close(second.t, x * 2 + 1)
    torch.testing.assert_close(second.items[0], (x * 2 + 1) * 2)
    torch.testing.assert_close(first.t, x + 1)
    torch.testing.assert_close(total, (x * 2).sum())


def test_input_object_updated_and_returned_is_the_same_object():
    # (as a KV cache passed in, extended, and returned): eager returns the same object, updated
    def f(holder, x):
        holder.t = torch.cat([holder.t, x])
        return holder, holder.t.sum()

    jf = thunder.jit(f)
    holder = _Holder(torch.ones(2))
    for step in range(2):
        out, total = jf(holder, torch.full((1,), 2.0))
        assert out is holder
        torch.testing.assert_close(holder.t, torch.tensor([1.0, 1.0] + [2.0] * (step + 1)))
        torch.testing.assert_close(total, holder.t.sum())


def test_recompiles_beyond_the_limit_warn_once_naming_the_input():
    import warnings

    jf = thunder.jit(lambda x: x * 2, automatic_dynamic=False)  # (else the size becomes a symbol)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 9 + 1):  # 8 recompiles after the first compile: within the limit
            jf(torch.ones(n))
        assert not [w for w in caught if "recompiled" in str(w.message)]
        for n in range(10, 14):
            torch.testing.assert_close(jf(torch.ones(n)), torch.full((n,), 2.0))
    messages = [str(w.message) for w in caught if "recompiled" in str(w.message)]
    assert len(messages) == 1
    assert "recompiled 9 times (recompile_limit=8)" in messages[0]
    assert "tensor argument 0: shape changed" in messages[0] and "symbolic values" in messages[0]

    quiet = thunder.jit(lambda x: x * 2, recompile_limit=None, automatic_dynamic=False)
    strict = thunder.jit(lambda x: x * 2, recompile_limit=1, automatic_dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 5):
            quiet(torch.ones(n)), strict(torch.ones(n))
    assert [str(w.message) for w in caught if "recompiled" in str(w.message)] == [
        m for m in [str(w.message) for w in caught] if "recompile_limit=1" in m]
    assert len([w for w in caught if "recompiled" in str(w.message)]) == 1
    with pytest.raises(ValueError, match="recompile_limit"):
        thunder.jit(lambda x: x, recompile_limit=-1)


def test_a_trace_kept_under_an_active_insertion_point_stays_out_of_its_block():
    # (the bindings' Operation.clone() without ip= inserts at the active insertion point)
    from thunder.dialects.definitions import context
    from thunder.dialects.mlir import LOCK, ir
    from thunder.runtime.traces import Trace

    with LOCK, context():
        kept = ir.Module.parse("func.func @f(%a: i32) -> i32 { return %a : i32 }")
        other = ir.Module.parse("func.func @g() { return }")
        before = str(other)
        with ir.InsertionPoint(other.body):
            trace = Trace("a pass", kept)
        assert str(other) == before
        assert "return %arg0 : i32" in trace._debug_text()
