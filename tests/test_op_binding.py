"""OpDef.bind binds plain calls without inspect (registry._bind_plain): for every op and every way
of passing its arguments, the same {name: value} as inspect's bind and apply_defaults, in the
same order; every call inspect refuses is left to inspect (None), so its errors stay torch's."""
import inspect

import thunder  # noqa: F401  (registers every op)
from thunder.ops import registry


def _inspect(op, args, kwargs):
    try:
        bound = op.signature.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return list(bound.arguments.items())


def _calls(op):
    """(args, kwargs) of calls of op: bound ones (positional, keyword, mixed, defaults left out)
    and refused ones (a missing, unknown or repeated argument, too many positional ones)."""
    params = list(op.signature.parameters.values())
    values = {p.name: object() for p in params}
    positional = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    required = [p for p in params if p.default is inspect.Parameter.empty]
    for k in range(len(positional) + 1):
        head = [values[p.name] for p in positional[:k]]
        rest = {p.name: values[p.name] for p in params[k:]}
        yield head, rest  # every argument given
        yield head, {p.name: values[p.name] for p in required if p.name in rest}  # defaults left out
        yield head, {**rest, "not_a_parameter": 1}
        if k:
            yield head, {**rest, positional[0].name: 2}  # repeated
    yield [values[p.name] for p in params] + [3], {}  # too many positional
    for p in required:
        yield [], {q.name: values[q.name] for q in params if q is not p}  # one missing


def test_plain_binding_is_inspects():
    checked = 0
    for op in registry.OPS.values():
        b = registry.binding(op)
        assert b.plain, op.qualname
        for args, kwargs in _calls(op):
            plain = registry._bind_plain(b, args, kwargs)
            expected = _inspect(op, args, kwargs)
            if plain is None:
                assert expected is None, (op.qualname, args, kwargs)
            else:
                assert list(plain.items()) == expected, (op.qualname, args, kwargs)
                assert all(plain[k] is v for k, v in expected), op.qualname
                checked += 1
    assert checked > 1000


def test_numpy_argument_names_as_torch_takes_them():
    """torch's argument parser takes numpy's names for its own (axis for dim, keepdims for keepdim):
    transformers' Funnel calls torch.cat(tensors, axis=...); thunder refused the keyword."""
    import torch

    def fn(x, y):
        return (torch.cat([x, y], axis=1), x.sum(axis=0, keepdims=True), torch.mean(x, axis=1),
                torch.max(x, axis=1).values, torch.argmax(x, axis=0), x.cumsum(axis=0))

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    for got, expected in zip(thunder.jit(fn)(x, y), fn(x, y), strict=True):
        torch.testing.assert_close(got, expected)
