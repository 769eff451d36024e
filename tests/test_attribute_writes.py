"""Attribute writes of any Python value to objects that outlive the call (runtime/state.py
finish_writes): replayed on every call as eager makes them, and later reads of them guarded."""
import torch

import thunder


class _Holder:
    pass


class _Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


def _writes(h, a):
    h.dtype = a.dtype
    h.device = a.device
    h.name = "size" + str(a.shape[0])
    h.shape = (a.shape[0], a.dtype, None)
    h.nothing = None
    h.items = [1, "two"]
    h.point = _Point(1, [2])
    h.pair = (a * 2, 3)
    h.computed = {"k": [a + 1]}
    h.function = torch.sin
    return a + 1


def _state(h):
    return {k: v for k, v in vars(h).items()}


def test_writes_of_any_python_value_are_replayed_as_eager():
    a = torch.randn(3)
    jf = thunder.jit(_writes)
    seen, h = [], _Holder()
    for _ in range(3):
        e = _Holder()
        vars(h).clear()
        torch.testing.assert_close(jf(h, a), _writes(e, a))
        got, expected = _state(h), _state(e)
        assert got.keys() == expected.keys()
        for k in ("dtype", "device", "name", "shape", "nothing", "items", "function"):
            assert got[k] == expected[k] and type(got[k]) is type(expected[k]), k
        assert (h.point.x, h.point.y) == (1, [2]) and type(h.point) is _Point
        torch.testing.assert_close(h.pair[0], a * 2)
        assert h.pair[1] == 3
        torch.testing.assert_close(h.computed["k"][0], a + 1)
        seen.append(dict(vars(h)))
    # objects the call made are new on every call, as eager's
    assert seen[1]["items"] is not seen[2]["items"] and seen[1]["point"] is not seen[2]["point"]
    assert seen[1]["point"].y is not seen[2]["point"].y
    assert thunder.compile_stats(jf).cache_misses == 1


def test_a_later_read_of_a_written_value_is_guarded():
    # each call reads what the previous one wrote: the trace must not assume the first value
    def step(h, a):
        out = a * 2 if h.mode == "double" else a + 1
        h.mode = "add" if h.mode == "double" else "double"
        h.dtype = torch.float64 if h.mode == "double" else torch.float32
        return out.to(h.dtype)

    a = torch.randn(3)
    h, e = _Holder(), _Holder()
    h.mode = e.mode = "double"
    jf = thunder.jit(step)
    for _ in range(4):
        got, expected = jf(h, a), step(e, a)
        torch.testing.assert_close(got, expected)
        assert got.dtype == expected.dtype and h.mode == e.mode and h.dtype == e.dtype
    assert thunder.compile_stats(jf).cache_misses == 2


_EXISTING = _Point(0, [0])



def test_an_object_that_existed_before_the_call_is_written_as_itself():
    # reached through native code (no path the prologue knows): still the same object, as eager's
    def f(h, a):
        h.point = min([_EXISTING], key=id)  # (a builtin hands it back)
        h.made = _Point(1, [2])
        h.items = [_EXISTING, h.made]
        return a + 1

    h, a = _Holder(), torch.randn(3)
    jf = thunder.jit(f)
    made = []
    for _ in range(2):
        jf(h, a)
        assert h.point is _EXISTING
        assert h.items[0] is _EXISTING and h.items[1] is h.made  # (one copy: the sharing kept)
        made.append(h.made)
    assert made[0] is not made[1] and made[0].y == [2]


class _Encoding(torch.nn.Module):
    """(transformers' CTRL: forward reassigns its positional-encoding buffer, moved to the input's
    dtype and device)"""

    def __init__(self):
        super().__init__()
        self.register_buffer("pe", torch.arange(4.0), persistent=False)
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        self.pe = self.pe.to(device=x.device, dtype=x.dtype)
        return self.linear(x) + self.pe


def test_a_buffer_reassigned_in_forward_stays_a_buffer():
    # tracing undid its write by deleting the attribute (the buffer was not in __dict__, so
    # its value before the write was taken as missing): the module lost the buffer, and the
    # call returned the prologue's MISS sentinel instead of the result
    model, reference = _Encoding(), _Encoding()
    reference.load_state_dict(model.state_dict())
    jitted = thunder.jit(model)
    x = torch.randn(2, 4)
    for grad in (False, True, True):
        with torch.set_grad_enabled(grad):
            out, expected = jitted(x), reference(x)
        assert type(out) is torch.Tensor
        torch.testing.assert_close(out, expected)
        assert [n for n, _ in model.named_buffers()] == ["pe"] and "pe" not in model.state_dict()
        if grad:
            out.sum().backward(), expected.sum().backward()
            torch.testing.assert_close(model.linear.weight.grad, reference.linear.weight.grad)
