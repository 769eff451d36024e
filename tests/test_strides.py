"""Elementwise results get eager's strides without a meta run (thunder/core/strides.py: the
TensorIterator rule), checked against eager itself."""
import random
import subprocess
import sys
import textwrap

import pytest
import torch

import thunder
from thunder.core import strides
from thunder.ops import registry


def _layout(rng, shape):
    """A tensor of `shape`: contiguous, permuted, expanded, sliced or channels-last."""
    n, kind = len(shape), rng.randrange(5)
    if kind == 0 or n == 0:
        return torch.randn(shape)
    if kind == 1:
        order = list(range(n))
        rng.shuffle(order)
        return torch.randn([shape[i] for i in order]).permute([order.index(i) for i in range(n)])
    if kind == 2:
        return torch.randn([1 if rng.random() < 0.5 else d for d in shape]).expand(shape)
    if kind == 3:
        d = rng.randrange(n)
        big = list(shape)
        big[d] *= 2
        return torch.randn(big)[(slice(None),) * d + (slice(None, None, 2),)]
    return torch.randn(shape).contiguous(memory_format=torch.channels_last) if n == 4 else torch.randn(shape)


def _operand_shapes(rng, n_operands):
    ndim = rng.randrange(5)
    shape = [rng.choice([1, 1, 2, 3, 4]) for _ in range(ndim)]
    out = []
    for _ in range(n_operands):
        s = shape[ndim - rng.randrange(ndim + 1):] if rng.random() < 0.4 else shape
        out.append([1 if rng.random() < 0.2 else d for d in s])
    return out


def _signature(tensors, numbers=0):
    return [(tuple(t.shape), t.stride()) for t in tensors] + [((), ())] * numbers


def test_rule_matches_eager_on_random_layouts():
    rng = random.Random(0)
    checked = 0
    for trial in range(4000):
        n = 1 + trial % 3
        ts = [_layout(rng, s) for s in _operand_shapes(rng, n)]
        try:
            if n == 1:  # a unary kernel, and one with a number wrapped as a 0-d operand
                r, numbers = (torch.tanh(ts[0]), 0) if trial % 2 else (ts[0] * 0.5, 1)
            elif n == 2:
                r, numbers = ts[0] + ts[1], 0
            else:
                ts[0] = ts[0] > 0
                r, numbers = torch.where(ts[0], ts[1], ts[2]), 0
        except RuntimeError:
            continue  # shapes that do not broadcast
        if r.numel() == 0:
            continue
        assert strides.elementwise(r.shape, _signature(ts, numbers)) == r.stride(), _signature(ts, numbers)
        checked += 1
    assert checked > 3000


def _elementwise_ops():
    return sorted((op for op in registry.OPS.values() if op.elementwise), key=lambda op: op.name)


def _args(op, rng, use_number, dtype):
    """Arguments for op's required parameters and its tensor ones (clamp's min and max): tensors
    of random layouts (of dtype; bool for a condition), a number for one TensorOrNumber when
    use_number; None when op has a parameter the test cannot fill."""
    required = [p for p in op.params if not p.has_default or not p.kw_only and p.kind.name.rstrip("?") in
                ("Tensor", "TensorOrNumber")]  # (keyword-only ones with defaults, addcmul's value: left out)
    tensors = [p for p in required if p.kind.name.rstrip("?") in ("Tensor", "TensorOrNumber")]
    shapes = _operand_shapes(rng, len(tensors))
    args = []
    numbers_left = 1 if use_number else 0
    number = {torch.float32: 0.75, torch.int64: 3, torch.bool: True}[dtype]
    for p in required:
        if p.kind.name.rstrip("?") in ("Tensor", "TensorOrNumber"):
            shape = shapes.pop()
            if p.kind.name.rstrip("?") == "TensorOrNumber" and numbers_left and len(args):
                args.append(number)
                numbers_left -= 1
                continue
            t = _layout(rng, shape)
            args.append(t > 0 if p.name == "condition" or dtype is torch.bool else (t.abs() + 0.5).to(dtype))
        elif p.kind.name in ("Number", "float"):
            args.append(0.25)
        elif p.kind.name == "bool":  # (leaky_relu_backward's self_is_result)
            args.append(False)
        else:
            return None
    return args


def _dtype_eager_takes(op, fn):
    for dtype in (torch.float32, torch.int64, torch.bool):
        try:
            fn(*_args(op, random.Random(1), False, dtype))
            return dtype
        except (RuntimeError, TypeError):
            pass
    raise AssertionError(f"{op.name}: eager takes none of the test's dtypes")


@pytest.mark.parametrize("op", _elementwise_ops(), ids=lambda op: op.name)
def test_elementwise_ops_trace_eager_strides(op):
    """Every op marked elementwise: the stride its result has in the trace (y.stride() is answered
    from it) is eager's, for random layouts, with and without Python numbers."""
    fn = op.aliases[0] if op.aliases else None
    if fn is None:  # reflected operators: `number <op> tensor`
        dunder = op.rdunders[0]
        fn = lambda x, y: getattr(torch.Tensor, dunder)(x, y)  # noqa: E731
    rng = random.Random(op.name)
    dtype = _dtype_eager_takes(op, fn)

    def f(*args):
        return fn(*args).stride()

    compared = 0
    for trial in range(12):
        args = _args(op, rng, trial % 3 == 2, dtype)
        assert args is not None, f"{op.name}: a parameter the test does not fill"
        try:
            expected = f(*args)
        except (RuntimeError, TypeError):
            continue  # shapes that do not broadcast
        if 0 in fn(*args).shape:
            continue
        layouts = [(a.shape, a.stride()) if isinstance(a, torch.Tensor) else a for a in args]
        assert thunder.jit(f)(*args) == expected, (op.name, layouts)
        compared += 1
    assert compared >= 4


def test_tracing_the_gpt_block_imports_no_dynamo():
    """Tracing elementwise ops runs no torch Python reference (whose first call imports
    torch._dynamo and sympy, ~1 s of the first call)."""
    code = textwrap.dedent("""
        import sys, torch, torch.nn.functional as F, thunder
        def block(x, w, b):
            h = F.layer_norm(x, (8,))
            y = F.gelu(F.linear(h, w, b), approximate="tanh") * 0.5 + x
            return torch.where(y > 0, y, -y).relu() / 3
        x, w, b = torch.randn(2, 3, 8, requires_grad=True), torch.randn(8, 8), torch.randn(8)
        thunder.jit(block)(x, w, b).sum().backward()
        print(sorted(m for m in ("torch._dynamo", "sympy") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _grads_like_eager(fn, *shapes):
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(s, dtype=torch.float64, generator=gen, requires_grad=True) for s in shapes]
    expected, out = fn(*args), thunder.jit(fn)(*args)
    torch.testing.assert_close(out, expected)
    cot = torch.randn(expected.shape, dtype=torch.float64, generator=gen)
    for g, e in zip(torch.autograd.grad(out, args, cot), torch.autograd.grad(expected, args, cot)):
        torch.testing.assert_close(g, e)


WEIGHT = torch.randn(8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def _sliding_chunks(h):
    # Longformer's chunking: a product of a transposed input, views, then overlapping windows by
    # as_strided with strides read from the view (the program's product came back in another
    # layout than eager's, and as_strided of it read other elements: wrong values)
    q = torch.nn.functional.linear(h.transpose(0, 1), WEIGHT)
    q = q.view(q.shape[0], q.shape[1], 2, 4).transpose(0, 1).transpose(1, 2).reshape(-1, q.shape[0], 4)
    x = q.view(q.size(0), 2, 4, 4)
    size, stride = list(x.size()), list(x.stride())
    size[1], stride[1] = 3, stride[1] // 2
    return x.as_strided(size, stride).exp()


@pytest.mark.parametrize("fn, shapes", [
    (_sliding_chunks, [(2, 8, 8)]),
    (lambda x: torch.as_strided(x.t(), (3, 2), (1, 2), 1) * 2, [(4, 3)]),  # overlapping, of an input's view
    (lambda x: (x * 2)[1:].as_strided((2, 2), (1, 1)), [(3, 4)]),  # at the view's storage offset
], ids=["sliding_chunks", "input_view", "offset"])
def test_as_strided_views_eagers_storage(fn, shapes):
    _grads_like_eager(fn, *shapes)


def test_in_place_update_through_as_strided_reaches_the_tensor():
    def fn(x):
        y = (x * 1).t()
        y.as_strided((2, 2), (2, 1), 1).mul_(10)
        return y

    _grads_like_eager(fn, (2, 3))
