"""Passes that run Python rules on traces with dynamic sizes (dialects/symbolic_lift.py):
thunder-decompose on the trace cache="symbolic values" records. What they emit computes its
sizes from the symbols, and holds where the decisions its rules took hold (thunder.size_guards,
checked by the program): run at sizes never traced, it gives eager's values or refuses."""
import inspect
import math
import os
import re

import pytest
import torch
from hypothesis import HealthCheck, given, note, settings

import test_fuzz_sizes as fuzz_sizes

import thunder
from thunder.dialects.definitions import context
from thunder.dialects.mlir import ir
from thunder.lowering.decompose import decompose_module
from thunder.lowering.fuse import fuse_module, fusion_callees
from thunder.lowering.passes import build_pass_manager
from thunder.runtime.codegen import compile_source, python_source


@pytest.fixture(autouse=True)
def _seeded():
    # (the inputs are random: a decomposed softmax or layer norm sums in another order than
    # eager's, an ulp apart on some draws; one draw per test keeps CI's runs the same)
    torch.manual_seed(0)


def _symbolic_module(f, make, sizes):
    jf = thunder.jit(f, cache="symbolic values")
    for n in sizes:
        jf(*make(n))
    trace = thunder.last_traces(jf)[0]
    assert trace.producer == "interpreter (acquisition, symbolic sizes)"
    return trace.module()


def _decomposed_program(module):
    with module.context:
        decompose_module(module.operation)
        module.operation.verify()
        build_pass_manager("builtin.module(cse,canonicalize)").run(module.operation)
    return str(module), compile_source(python_source(module))


def _attention(x, w, mask, n):
    B, T, C = x.shape
    h = torch.nn.functional.layer_norm(x, (C,))
    a = (h @ w).view(B, T, 4, C // 4).transpose(1, 2)
    s = (a @ a.transpose(-1, -2)) / math.sqrt(C // 4) + mask[:T, :T]
    o = (s.softmax(-1) @ a).transpose(1, 2).reshape(B, T, C)
    return torch.nn.functional.gelu(o).mean(1) * n + x[:, -1]


def test_decompose_computes_sizes_from_the_symbols():
    w, mask = torch.randn(16, 16), torch.randn(32, 32)
    module = _symbolic_module(_attention, lambda T: (torch.randn(2, T, 16), w, mask, T + 1), (3, 4, 5))
    text, program = _decomposed_program(module)
    for name in ("ltorch.layer_norm", "ltorch.softmax", "ltorch.gelu", "ltorch.mean", "ltorch.mul"):
        assert f'"{name}"' not in text  # (decomposed into prims)
    assert '"thunder.exp"' in text and "tensor<?x?x?xf32>" in text
    # sizes and the int argument n stay computed from the symbols: any batch, length and n
    for B, T, n in ((2, 3, 4), (3, 9, 12), (5, 2, 7), (2, 20, 3)):
        x = torch.randn(B, T, 16)
        torch.testing.assert_close(program(x, w, mask, n), _attention(x, w, mask, n))


def test_a_decision_the_rules_took_is_checked_by_the_program():
    def f(x):
        return torch.nn.functional.silu(x[:, :10]).sum(1)

    module = _symbolic_module(f, lambda T: (torch.randn(3, T),), (12, 14, 16))
    text, program = _decomposed_program(module)
    assert '"ltorch.silu"' not in text and "thunder.size_guards" in text
    for T in (11, 13, 40):
        x = torch.randn(3, T)
        torch.testing.assert_close(program(x), f(x))
    with pytest.raises(ValueError, match="this program holds only where"):
        program(torch.randn(3, 7))  # (eager's result has 7 columns: the trace's 10 do not hold)


def test_dims_not_known_equal_leave_the_ops_that_need_them():
    def f(x, y):
        return torch.nn.functional.gelu(x) + y * 2

    module = _symbolic_module(f, lambda T: (torch.randn(T, 8), torch.randn(T, 8)), (3, 4, 5))
    text = str(module)
    assert text.count('thunder.dims = ["_sym0", "_sym1"]') == 2  # the same symbols for both (duck sizing)
    # without the argument attributes (MLIR written by hand), each `?` is a symbol of its own:
    # the add needs them equal and stays; what needs no such fact decomposes
    bare = re.sub(r" \{thunder.dims = \[[^]]*\]\}|thunder.size_guards = \[[^]]*\], ", "", text)
    with context():
        module = ir.Module.parse(bare)
        decomposed, program = _decomposed_program(module)
    assert '"ltorch.gelu"' not in decomposed and '"ltorch.add"' in decomposed
    for T in (2, 6, 11):
        x, y = torch.randn(T, 8), torch.randn(T, 8)
        torch.testing.assert_close(program(x, y), f(x, y))


def _with_requires_grad(module, flags):
    """The module's @computation with thunder.requires_grad on the arguments flagged."""
    with module.context:
        func = module.body.operations[0]
        entries = list(ir.ArrayAttr(func.attributes["arg_attrs"]))
        for i, flag in enumerate(flags):
            d = {n.name: n.attr for n in ir.DictAttr(entries[i])}
            if flag:
                d["thunder.requires_grad"] = ir.UnitAttr.get()
            entries[i] = ir.DictAttr.get(d)
        func.attributes["arg_attrs"] = ir.ArrayAttr.get(entries)
    return module


def _mlp(x, w1, w2, n):
    B, T, C = x.shape
    h = torch.nn.functional.layer_norm(x, (C,))
    s = (h @ w1).view(B, T, 2, -1).softmax(-1).reshape(B, T, -1)
    return (torch.nn.functional.gelu(s) @ w2).mean(1) * n + x[:, -1]


def test_autograd_differentiates_with_the_symbols():
    from thunder.lowering.autograd import autograd_module

    w1, w2 = torch.randn(16, 32), torch.randn(32, 16)
    module = _symbolic_module(_mlp, lambda T: (torch.randn(2, T, 16), w1, w2, T + 1), (3, 4, 5))
    module = _with_requires_grad(module, (True, True, False))
    with module.context:
        autograd_module(module.operation)
        module.operation.verify()
    text = str(module)
    assert "func.func @forward" in text and "func.func @backward" in text and "tensor<?x?x" in text
    forward, backward, unread = _training_program(module)
    n_symbol = list(inspect.signature(forward).parameters)[-1]  # (the int argument's symbol)
    assert unread == [n_symbol]  # (the sizes the backward needs are its inputs' dims; n is not one)
    _check_mlp_training(forward, backward, unread, w1, w2)


def _training_program(module, fused=False):
    """(forward, backward, the symbols backward takes as parameters) of the module's programs;
    fused: after thunder-fuse (policy always: every region it can outline)."""
    if fused:
        with module.context:
            fuse_module(module.operation, "always")
            module.operation.verify()
    constants = {}
    forward = compile_source(python_source(module, "forward", constants=constants), "forward", constants=constants)
    backward = compile_source(python_source(module, "backward", constants=constants), "backward", constants=constants)
    return forward, backward, [p for p in inspect.signature(backward).parameters if p.startswith("_sym")]


def _check_mlp_training(forward, backward, unread, w1, w2):
    """_mlp's programs at sizes other than the traced ones give eager's values and gradients."""
    n_symbol = list(inspect.signature(forward).parameters)[-1]
    for B, T, n in ((2, 3, 4), (3, 9, 12), (4, 20, 3)):
        x = torch.randn(B, T, 16, requires_grad=True)
        w = w1.clone().requires_grad_()
        expected = _mlp(x, w, w2, n)
        g = torch.randn_like(expected)
        gx, gw = torch.autograd.grad(expected, (x, w), g)
        out = forward(x.detach(), w.detach(), w2, n)
        symbols = {"_sym0": B, "_sym1": T, "_sym2": 16, "_sym3": 32, n_symbol: n}
        grads = backward(*out[1:], g, *[symbols[p] for p in unread])
        torch.testing.assert_close(out[0], expected.detach())
        torch.testing.assert_close(grads[0], gx)
        torch.testing.assert_close(grads[1], gw)


def test_remat_chooses_what_to_save_with_the_symbols():
    from thunder.lowering.autograd import autograd_module
    from thunder.lowering.remat import remat_module

    w1, w2 = torch.randn(16, 32), torch.randn(32, 16)
    module = _symbolic_module(_mlp, lambda T: (torch.randn(2, T, 16), w1, w2, T + 1), (3, 4, 5))
    module = _with_requires_grad(module, (True, True, False))
    with module.context:
        autograd_module(module.operation)
        build_pass_manager("builtin.module(cse,canonicalize)").run(module.operation)
        before = len(module.body.operations[0].regions[0].blocks[0].arguments)
        saved = remat_module(module.operation)
        build_pass_manager("builtin.module(cse,canonicalize)").run(module.operation)
        module.operation.verify()
    assert saved["saved_after"] < saved["saved_before"]  # (at the call's sizes: the cut saves less)
    assert before == 4
    _check_mlp_training(*_training_program(module), w1, w2)
    # fused: the regions of the forward and the backward (softmax, gelu and their gradients)
    # are kernels for every size
    _check_mlp_training(*_training_program(module, fused=True), w1, w2)
    assert len(_dynamic_regions(module)) >= 2


def _dynamic_regions(module):
    """The fusion callees of the module with `?` dims."""
    return [name for name, f in fusion_callees(module.operation).items()
            if "?" in str(f.attributes["function_type"])]


def test_fused_regions_with_dynamic_sizes_run_one_kernel_for_every_size():
    w, mask = torch.randn(16, 16), torch.randn(32, 32)
    module = _symbolic_module(_attention, lambda T: (torch.randn(2, T, 16), w, mask, T + 1), (3, 4, 5))
    with module.context:
        fuse_module(module.operation, "always")
        module.operation.verify()
    regions = _dynamic_regions(module)
    assert len(regions) == 3  # (layer norm; the scores' scale, mask and softmax; gelu, mean and the rest)
    constants = {}
    program = compile_source(python_source(module, constants=constants), constants=constants)
    for B, T, n in ((2, 3, 4), (3, 9, 12), (5, 2, 7), (2, 20, 3)):
        x = torch.randn(B, T, 16)
        torch.testing.assert_close(program(x, w, mask, n), _attention(x, w, mask, n))
    for name in regions:  # one compiled code each, no kernel per size
        kernel = constants[name]
        assert kernel.any_size and not kernel.per_size and len(kernel.any_size[0].variants) == 1



def test_a_rule_that_makes_a_size_a_plain_number_is_refused(monkeypatch):
    # range() reads a SymInt's value without a trace of it: the split recorded again at other
    # values of the symbols differs (a reshape to the first call's rows), and autograd refuses
    from thunder.dialects.symbolic_lift import LostExpression
    from thunder.lowering.autograd import autograd_module
    from thunder.ops import prims, registry

    op = registry.OPS["ltorch.tanh"]
    rule = op.vjp_rule

    def losing(g, out, **kwargs):
        rows = len(range(g.shape[0]))
        return {k: prims.reshape(v, (rows, *v.shape[1:])) for k, v in rule(g, out, **kwargs).items()}

    module = _symbolic_module(torch.tanh, lambda T: (torch.randn(T, 4),), (3, 4, 5))
    module = _with_requires_grad(module, (True,))
    monkeypatch.setattr(op, "vjp_rule", losing)
    with module.context, pytest.raises(LostExpression, match="the backward recorded at other sizes differs"):
        autograd_module(module.operation)

def test_the_recorded_trace_checks_the_decisions_it_holds_under():
    # the acquisition's own decisions (a branch on the length) are the trace's size guards:
    # its Python form at a length on the other side refuses instead of taking the branch taken
    def f(x):
        return x * 2 if x.shape[0] > 4 else x * 3

    module = _symbolic_module(f, lambda T: (torch.randn(T, 3),), (6, 7, 8))
    with module.context:
        program = compile_source(python_source(module))
    assert "thunder.size_guards = [" in str(module) and "(_sym0 > 4)" in str(module)
    for T in (5, 9, 30):
        x = torch.randn(T, 3)
        torch.testing.assert_close(program(x), f(x))
    with pytest.raises(ValueError, match="this program holds only where _sym0 > 4"):
        program(torch.randn(3, 3))



def test_a_symbol_an_argument_and_a_dim_share_is_checked_equal():
    # k == B at the first call: duck sizing made them one symbol, which the program reads from
    # k; at a call where they differ it refuses (before, it computed B's sizes with k)
    def f(x, k):
        return (x * k).sum(0)

    module = _symbolic_module(f, lambda _: (torch.randn(3, 5), 3), [0])
    with module.context:
        program = compile_source(python_source(module))
    x = torch.randn(4, 5)
    torch.testing.assert_close(program(x, 4), f(x, 4))
    with pytest.raises(ValueError, match=r"holds only where x.shape\[0\] == _sym0"):
        program(x, 3)

# ---- a differential fuzzer for the passes on symbolic sizes: tests/test_fuzz_sizes.py's random
# programs, their trace with dynamic sizes differentiated by thunder-autograd and thunder-remat
# and fused by thunder-fuse directly (no fit), the generated forward and backward (their kernels
# for every size) called at the fuzzer's other sizes
FUZZ_EXAMPLES = int(os.environ.get("THUNDER_FUZZ_SIZES_EXAMPLES", "25"))
# sizes near the first call's (B and k 2, as traced: duck sizing made them one symbol), where
# decisions taken at the first call (T < 8) more often hold than at the fuzzer's own sizes
NEAR = [((2, 6, 6), 2), ((2, 7, 9), 2), ((2, 4, 3), 2), ((2, 5, 11), 2)]


def _symbolic_training_program(module, n_tensors):
    from thunder.dialects.emit import find_func
    from thunder.dialects.sizes import argument_dims
    from thunder.lowering.autograd import autograd_module
    from thunder.lowering.remat import remat_module

    _with_requires_grad(module, [True] * n_tensors)
    with module.context:
        autograd_module(module.operation)
        build_pass_manager("builtin.module(cse,canonicalize)").run(module.operation)
        remat_module(module.operation)
        build_pass_manager("builtin.module(cse,canonicalize)").run(module.operation)
        module.operation.verify()
        fwd, bwd = find_func(module.operation, "forward"), find_func(module.operation, "backward")
        dims = argument_dims(fwd, len(fwd.regions[0].blocks[0].arguments))
        num_outputs = ir.IntegerAttr(fwd.attributes["thunder.num_outputs"]).value
        cotangent_for = list(ir.DenseI64ArrayAttr(bwd.attributes["thunder.cotangent_for"]))
        grad_of = list(ir.DenseI64ArrayAttr(bwd.attributes["thunder.grad_of"]))
    forward, backward, _ = _training_program(module, fused=True)
    return forward, backward, num_outputs, cotangent_for, grad_of, dims


@pytest.mark.filterwarnings("ignore::UserWarning")
@settings(max_examples=FUZZ_EXAMPLES, derandomize=os.environ.get("THUNDER_FUZZ_SEED") != "random", deadline=None,
          database=None, suppress_health_check=[HealthCheck.too_slow])
@given(fuzz_sizes.programs())
def test_random_programs_differentiated_on_symbolic_sizes_match_eager(program):
    src, second, seed, _ = program
    note(src)
    ns = {}
    exec(src, {"torch": torch, "F": torch.nn.functional}, ns)
    fn = ns["f"]
    first = fuzz_sizes._inputs(second, fuzz_sizes.SIZES[0], seed)
    # (its trace with dynamic sizes is shown where the fit generalized: without fusion more often)
    jf = thunder.jit(fn, cache="symbolic values", executors=["torch"])
    jf(*first, fuzz_sizes.KS[0])
    trace = thunder.last_traces(jf)[0]
    if trace.producer != "interpreter (acquisition, symbolic sizes)":
        return  # (a trace MLIR cannot hold with its symbols: docs/api.md)
    module = trace.module()
    try:
        forward, backward, num_outputs, cotangent_for, grad_of, dims = _symbolic_training_program(module, len(first))
    except NotImplementedError as e:  # a refusal (a size a rule made a plain number), never a wrong program
        note(f"refused: {e}")
        return
    params = list(inspect.signature(backward).parameters)
    ran = 0
    for sizes_, k in [*zip(fuzz_sizes.SIZES, fuzz_sizes.KS), *NEAR]:
        args = fuzz_sizes._inputs(second, sizes_, seed)
        env = {d: a.shape[i] for a, ds in zip(args, dims) for i, d in enumerate(ds or ()) if d.isidentifier()}
        env[list(inspect.signature(forward).parameters)[-1]] = k
        expected = fn(*args, k)
        expected = expected if isinstance(expected, tuple) else (expected,)
        try:
            out = forward(*[a.detach() for a in args], k)
        except ValueError as e:  # (sizes outside the trace's guards: k = 1, k not B as when traced, ...)
            assert "this program holds only where" in str(e)
            continue
        out = out if isinstance(out, tuple) else (out,)
        ran += 1
        cotangents = [torch.linspace(-1, 1, expected[i].numel()).reshape(expected[i].shape) for i in cotangent_for]
        grads = backward(*out[num_outputs:], *cotangents, *[env[p] for p in params if p.startswith("_sym")])
        grads = grads if isinstance(grads, tuple) else (grads,)
        wanted = torch.autograd.grad([expected[i] for i in cotangent_for], [args[i] for i in grad_of], cotangents)
        for got, want in [*zip(out[:num_outputs], expected), *zip(grads, wanted)]:
            scale = max(1.0, want.abs().max().item()) if want.numel() else 1.0
            torch.testing.assert_close(got, want.detach(), rtol=1e-3, atol=1e-3 * scale)
    assert ran >= 2  # (the traced sizes and at least one other)


def test_fusing_dynamic_sizes_outlines_each_region_signature_once(monkeypatch):
    # a Llama's layers make regions of one signature on `?` dims too: the later ones are copies
    # of the first's outlining and decomposition (lowering/region_reuse.py), and the forward and
    # backward fuse to the same module as with every region outlined and decomposed anew
    transformers = pytest.importorskip("transformers")
    from thunder.dialects.emit import find_func
    from thunder.lowering import region_reuse
    from thunder.lowering.autograd import autograd_module
    from thunder.lowering.remat import remat_module

    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config)
    jm = thunder.jit(model, cache="symbolic values", executors=["torch"])
    ids = torch.randint(0, 128, (2, 24))
    jm(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    module = thunder.last_traces(jm)[0].module()
    with module.context:
        types = [str(a.type) for a in find_func(module.operation, "computation").regions[0].blocks[0].arguments]
    _with_requires_grad(module, ["f32" in t and "tensor" in t for t in types])
    with module.context:
        autograd_module(module.operation)
        build_pass_manager("builtin.module(cse,canonicalize)").run(module.operation)
        remat_module(module.operation)
        build_pass_manager("builtin.module(cse,canonicalize)").run(module.operation)
    text = module.operation.get_asm(enable_debug_info=True)
    fused = []
    for reuse in (True, False):
        monkeypatch.setattr(region_reuse, "OUTCOMES", reuse)
        hits = region_reuse.OUTCOME_STATS["hits"]
        with context():
            m = ir.Module.parse(text)
            fuse_module(m.operation, "auto")
            m.operation.verify()
            fused.append(m.operation.get_asm())
        assert (region_reuse.OUTCOME_STATS["hits"] > hits) == reuse
    assert fused[0] == fused[1] and "tensor<?x" in fused[0] and "call @fusion_" in fused[0]


def test_a_bias_gradient_takes_no_decision_between_rows_and_features():
    # sum_to_shape compared (rows, features) with (features,) size by size, a decision
    # rows != features the backward then held under: its program refused rows == features
    from thunder.dialects.emit import find_func
    from thunder.dialects.sizes import guards
    from thunder.lowering.autograd import autograd_module

    def f(x, w, b):
        return torch.nn.functional.linear(x, w, b).tanh()

    w, b = torch.randn(8, 8), torch.randn(8)
    module = _symbolic_module(f, lambda n: (torch.randn(n, 8), w, b), (3, 4, 5))
    module = _with_requires_grad(module, (True, True, True))
    with module.context:
        autograd_module(module.operation)
        conditions = guards(find_func(module.operation, "forward")) + guards(find_func(module.operation, "backward"))
    assert not [c for c in conditions if "_sym0" in c and "_sym1" in c], conditions
    forward, backward, unread = _training_program(module)
    for rows in (8, 5):  # (rows == features too)
        x, wr, br = (t.clone().requires_grad_() for t in (torch.randn(rows, 8), w, b))
        expected = f(x, wr, br)
        g = torch.randn_like(expected)
        out = forward(x.detach(), w, b)
        grads = backward(*out[1:], g, *[{"_sym0": rows, "_sym1": 8}[p] for p in unread])
        torch.testing.assert_close(out[0], expected.detach())
        for got, want in zip(grads, torch.autograd.grad(expected, (x, wr, br), g)):
            torch.testing.assert_close(got, want)
