"""Cache guards: a cached program is reused only while everything its trace read from outside
its arguments (globals, closure cells, attributes, container items, defaults, ambient torch
state) is unchanged. Each test changes one thing between calls and compares every call with
eager PyTorch."""
import functools
import math
import operator

import pytest
import torch
import torch.nn as nn

import thunder


def assert_same(actual, expected):
    """Equal to eager: type, dtype, shape, values (nan where nan, the sign of zeros)."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected
        return
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (actual, expected)
    assert actual.requires_grad == expected.requires_grad
    a, e = actual.detach(), expected.detach()
    torch.testing.assert_close(a, e, equal_nan=True, rtol=1e-6, atol=1e-6)
    if a.is_floating_point():
        assert torch.equal(torch.signbit(a), torch.signbit(e)), (a, e)


def run_steps(fn, args, *changes, jitted=None):
    """Calls thunder.jit(fn) and fn on args, then again after each change (a callable that
    changes one thing); every call must equal eager. Returns the jitted function."""
    jf = jitted if jitted is not None else thunder.jit(fn)
    assert_same(jf(*args), fn(*args))
    assert_same(jf(*args), fn(*args))  # a cache hit
    for change in changes:
        change()
        assert_same(jf(*args), fn(*args))
        assert_same(jf(*args), fn(*args))
    return jf


X = torch.arange(1.0, 4.0)

# ---------------------------------------------------------------------------------------------
# values read from globals
K = 2.0
FLAG = True
SCALES = [2.0, 3.0]
TABLE = {"a": 2.0, "mode": "mul"}
DT = torch.float32
CONST = 1
NESTED = {"inner": [1.0, (2.0, "x")]}


def test_global_number():
    def f(x):
        return x * K

    def change():
        global K
        K = 5.0

    try:
        jf = run_steps(f, (X,), change)
        assert thunder.cache_misses(jf) == 2
        assert "K" in thunder.compile_stats(jf).last_miss_reason
    finally:
        globals()["K"] = 2.0


def test_global_number_unchanged_is_a_cache_hit():
    jf = thunder.jit(lambda x: x * K + CONST)
    for _ in range(3):
        jf(X)
    assert thunder.cache_misses(jf) == 1 and thunder.cache_hits(jf) == 2


def test_global_bool_in_a_branch():
    def f(x):
        if FLAG:
            return x + 1
        return x - 1

    def change():
        global FLAG
        FLAG = False

    try:
        run_steps(f, (X,), change)
    finally:
        globals()["FLAG"] = True


def test_global_list_and_dict_items():
    def f(x):
        y = x * SCALES[0] + SCALES[-1]
        return y * TABLE["a"] if TABLE["mode"] == "mul" else y + TABLE["a"]

    def c1():
        SCALES[0] = 7.0

    def c2():
        TABLE["a"] = -1.5

    def c3():
        TABLE["mode"] = "add"

    def c4():
        SCALES.append(11.0)

    try:
        run_steps(f, (X,), c1, c2, c3, c4)
    finally:
        SCALES[:] = [2.0, 3.0]
        TABLE.update(a=2.0, mode="mul")


def test_nested_containers():
    def f(x):
        inner = NESTED["inner"]
        return x * inner[0] + inner[1][0] * len(inner[1][1])

    def c1():
        NESTED["inner"][1] = (4.0, "xyz")

    def c2():
        NESTED["inner"][0] = 0.5

    try:
        run_steps(f, (X,), c1, c2)
    finally:
        NESTED["inner"] = [1.0, (2.0, "x")]


def test_container_read_by_native_code():
    def f(x):
        return x * sum(SCALES) + max(TABLE.values(), key=lambda v: isinstance(v, float))

    def c1():
        SCALES[1] = 10.0

    def c2():
        TABLE["a"] = 4.0

    try:
        run_steps(f, (X,), c1, c2)
    finally:
        SCALES[:] = [2.0, 3.0]
        TABLE.update(a=2.0, mode="mul")


def act(x):
    return torch.relu(x)


def helper(x):
    return x * 2


def test_global_function_and_dtype_rebound():
    def f(x):
        return helper(act(x - 2)).to(DT)

    g = globals()

    def c1():
        g["act"] = torch.sigmoid

    def c2():
        g["helper"] = lambda x: x * 3

    def c3():
        g["DT"] = torch.float64

    saved = dict(act=act, helper=helper, DT=DT)
    try:
        run_steps(f, (X,), c1, c2, c3)
    finally:
        g.update(saved)


def test_number_kinds_are_distinguished():
    # -0.0 vs 0.0, int vs bool vs float, nan stays a cache hit
    g = globals()

    def f(x):
        return x * K, torch.full((2,), CONST)

    saved = (K, CONST)
    try:
        jf = run_steps(f, (X,), lambda: g.update(K=0.0), lambda: g.update(K=-0.0), lambda: g.update(CONST=True),
                       lambda: g.update(CONST=1.0), lambda: g.update(CONST=2 ** 40), lambda: g.update(K=math.nan))
        misses = thunder.cache_misses(jf)
        g["K"] = float("nan")  # another nan object: the same value
        assert_same(jf(X), f(X))
        assert thunder.cache_misses(jf) == misses
        g["K"] = math.inf
        assert_same(jf(X), f(X))
    finally:
        g["K"], g["CONST"] = saved


def test_string_global():
    g = globals()

    def f(x):
        return x * 2 if TABLE["mode"] == "mul" else x.neg()

    try:
        run_steps(f, (X,), lambda: TABLE.update(mode="neg"))
    finally:
        TABLE["mode"] = "mul"
    assert g["TABLE"]["mode"] == "mul"


# ---------------------------------------------------------------------------------------------
# closures
def test_closure_number_and_string():
    c, s = 2.0, "a"

    def f(x):
        return x * c if s == "a" else x - c

    def c1():
        nonlocal c
        c = 5.0

    def c2():
        nonlocal s
        s = "b"

    run_steps(f, (X,), c1, c2)


def test_closure_containers_and_their_tensors():
    params = {"w": torch.tensor([1.0, 2.0, 3.0]), "k": 2.0}
    extra = [torch.tensor(0.5)]

    def f(x):
        return x * params["w"] * params["k"] + extra[0]

    def c1():
        params["w"].mul_(2)  # a new value of the same tensor: read at call time

    def c2():
        params["w"] = torch.tensor([3.0, 2.0, 1.0])

    def c3():
        params["k"] = 4.0

    def c4():
        extra[0] = torch.tensor(-1.0, dtype=torch.float64)  # new dtype: recompiles

    jf = run_steps(f, (X,), c1, c2, c3, c4)
    src = str(thunder.last_prologue_traces(jf)[0])
    assert "['w']" in src  # read at call time by the prologue


def test_tensors_in_a_closure_list_iterated():
    ws = [torch.tensor(2.0), torch.tensor(3.0)]

    def f(x):
        for w in ws:
            x = x * w
        a, b = ws
        return x + a - b

    def c1():
        ws[1] = torch.tensor(-1.0)

    run_steps(f, (X,), c1)


# ---------------------------------------------------------------------------------------------
# the function itself
def test_defaults_kwdefaults_and_code():
    def f(x, k=2.0, *, shift=1.0):
        return x * k + shift

    def g(x, k=2.0, *, shift=1.0):
        return x - k - shift

    def c1():
        f.__defaults__ = (5.0,)

    def c2():
        f.__kwdefaults__["shift"] = -3.0

    def c3():
        f.__code__ = g.__code__

    run_steps(f, (X,), c1, c2, c3)


def test_tensor_default_is_read_at_call_time():
    w = torch.tensor([1.0, 2.0, 3.0])

    def f(x, w=w):
        return x * w

    jf = run_steps(f, (X,), lambda: w.add_(1), lambda: setattr(f, "__defaults__", (torch.ones(3),)))
    assert thunder.cache_misses(jf) == 1


def test_objects_attributes():
    class Cfg:
        def __init__(self):
            self.scale = 2.0
            self.act = torch.relu

    cfg = Cfg()

    def f(x):
        return cfg.act(x - 2) * cfg.scale

    def c1():
        cfg.scale = 3.5

    def c2():
        cfg.act = torch.tanh

    def c3():
        Cfg.scale = 10.0  # a class attribute, shadowed by the instance's
        del cfg.scale

    run_steps(f, (X,), c1, c2, c3)


def test_input_object_attributes():
    class Opts:
        scale = 2.0

    def f(x, opts):
        return x * opts.scale

    opts = Opts()
    run_steps(f, (X, opts), lambda: setattr(opts, "scale", 4.0))


def test_methods_replaced():
    class Op:
        def apply(self, x):
            return x * 2

    op = Op()

    def f(x):
        return op.apply(x)

    def c1():
        op.apply = lambda x: x * 3  # an instance attribute shadows the method

    def c2():
        del op.apply
        Op.apply = lambda self, x: x * 4  # the class's method

    run_steps(f, (X,), c1, c2)


def test_getattr_hasattr_builtins():
    class Box:
        pass

    box = Box()
    box.scale = 2.0

    def f(x):
        y = x * getattr(box, "scale")
        if hasattr(box, "shift"):
            y = y + box.shift
        return y * getattr(box, "factor", 1.0)

    run_steps(f, (X,), lambda: setattr(box, "shift", 1.0), lambda: setattr(box, "factor", -2.0),
              lambda: setattr(box, "scale", 0.25))


# ---------------------------------------------------------------------------------------------
# ambient torch state
def test_branch_on_grad_mode_under_no_grad_and_inference_mode():
    def f(x):
        if torch.is_grad_enabled():
            return x + 1
        return x - 1

    jf = thunder.jit(f)
    assert_same(jf(X), f(X))
    with torch.no_grad():
        assert_same(jf(X), f(X))
    with torch.inference_mode():
        assert_same(jf(X), f(X))
    assert_same(jf(X), f(X))
    assert thunder.cache_misses(jf) == 2  # no_grad and inference_mode share the second entry


def test_branch_on_inference_mode():
    def f(x):
        return x * 2 if torch.is_inference_mode_enabled() else x * 3

    jf = thunder.jit(f)
    assert_same(jf(X), f(X))
    with torch.inference_mode():
        assert_same(jf(X), f(X))


def test_grad_mode_set_inside_does_not_recompile():
    def f(x):
        with torch.no_grad():
            return x * 2 if torch.is_grad_enabled() else x * 3

    jf = thunder.jit(f)
    for _ in range(3):
        assert_same(jf(X), f(X))
    assert thunder.cache_misses(jf) == 1


@pytest.mark.parametrize("fusion", ["auto", "always"])
def test_default_dtype(fusion):
    def f(x, n):
        return x + torch.ones(n) * 0.5, torch.arange(n) * 1.5, torch.full((2,), 0.25) * 2

    jf = thunder.jit(f, fusion=fusion)
    x = torch.ones(3)
    try:
        for dtype in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(dtype)
            assert_same(jf(x, 3), f(x, 3))
    finally:
        torch.set_default_dtype(torch.float32)


def test_autocast_around_the_call():
    jf = thunder.jit(lambda a, b: a @ b)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    assert jf(a, b).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert jf(a, b).dtype == torch.bfloat16
    assert jf(a, b).dtype == torch.float32


def test_grad_mode_with_inputs_that_require_grad():
    w = torch.randn(3, requires_grad=True)
    jf = thunder.jit(lambda x: (x * 2).sum())
    assert jf(w).requires_grad
    with torch.no_grad():
        assert not jf(w).requires_grad


# ---------------------------------------------------------------------------------------------
# input metadata
def test_input_metadata_changes():
    jf = thunder.jit(lambda x: x * 2 + 1)
    for x in (torch.ones(3), torch.ones(4), torch.ones(4, dtype=torch.float64), torch.ones(4, 2).t(),
              torch.ones(4, requires_grad=True)):
        assert_same(jf(x), x * 2 + 1)


def test_strides_matter_for_views():
    def f(x):
        return x.view(-1) * 2

    jf = thunder.jit(f)
    a = torch.arange(9.0).reshape(3, 3)
    assert_same(jf(a), f(a))
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        f(a.t())
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        jf(a.t())  # the same shape, other strides
    assert_same(jf(a), f(a))


def test_strides_decide_whether_reshape_aliases():
    def f(x):
        y = x.reshape(-1)
        y.add_(1)  # reaches x only when reshape returned a view
        return y * 1

    jf = thunder.jit(f)
    for make in (lambda: torch.zeros(3, 3), lambda: torch.zeros(3, 3).t(), lambda: torch.zeros(3, 3)):
        a, b = make(), make()
        assert_same(jf(a), f(b))
        assert_same(a, b)


def test_is_contiguous_and_stride_answered_as_eager():
    def f(x):
        y = x * 2
        if y.is_contiguous():
            return y + 1, y.stride()
        return y - 1, y.stride()

    jf = thunder.jit(f)
    for x in (torch.ones(3, 3), torch.ones(3, 3).t(), torch.ones(3, 3)[:, :2], torch.ones(3, 3)):
        assert_same(list(jf(x)), list(f(x)))


@pytest.mark.parametrize("op", [
    lambda x, w: torch.nn.functional.linear(x, w),
    lambda x, w: torch.nn.functional.linear(x, w.t().contiguous().t(), w[0]),
    lambda x, w: torch.matmul(x, w.t()),
    lambda x, w: torch.addmm(w[0], x.reshape(-1, 4), w.t()),
    lambda x, w: torch.bmm(x.reshape(2, -1, 4), w.t().expand(2, 4, 4)),
    lambda x, w: torch.nn.functional.layer_norm(x, (4,), w[0], w[1]),
    lambda x, w: torch.ops.aten.native_layer_norm(x, (4,), w[0], w[1], 1e-5)[0],
])
def test_results_eager_makes_contiguous_are_contiguous(op):
    # (ops marked contiguous: no meta run for their strides)
    def f(x, w):
        y = op(x, w)
        return y.view(-1) if y.is_contiguous() else y.transpose(0, 1), y.stride()

    w = torch.randn(4, 4)
    for x in (torch.randn(3, 2, 4), torch.randn(4, 2, 3).transpose(0, 2), torch.randn(3, 4, 2).transpose(1, 2)):
        assert_same(list(thunder.jit(f)(x, w)), list(f(x, w)))


# ---------------------------------------------------------------------------------------------
# modules
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0
        self.mode = "plain"
        self.lin = nn.Linear(3, 3)
        self.act = nn.ReLU()

    def forward(self, x):
        y = self.act(self.lin(x)) * self.scale
        return y if self.mode == "plain" else y.neg()


def net():
    torch.manual_seed(0)
    return Net()


def test_module_float_and_string_attributes():
    m = net()
    run_steps(m, (torch.randn(2, 3),), lambda: setattr(m, "scale", 5.0), lambda: setattr(m, "mode", "flip"),
              jitted=thunder.jit(m))


def test_swapped_submodule():
    m = net()
    run_steps(m, (torch.randn(2, 3),), lambda: setattr(m, "act", nn.Tanh()), jitted=thunder.jit(m))


def test_sequential_append_and_replaced_item():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU())

    def c1():
        m.append(nn.Tanh())

    def c2():
        m[1] = nn.Sigmoid()

    run_steps(m, (torch.randn(2, 3),), c1, c2, jitted=thunder.jit(m))


def test_module_list_indexing_and_len():
    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(3, 3), nn.ReLU()])

        def forward(self, x):
            for i in range(len(self.layers)):
                x = self.layers[i](x)
            return x

    torch.manual_seed(0)
    m = Stack()
    run_steps(m, (torch.randn(2, 3),), lambda: m.layers.append(nn.Tanh()),
              lambda: m.layers.__setitem__(0, nn.Identity()), jitted=thunder.jit(m))


def test_replaced_forward():
    m = net()
    run_steps(m, (torch.randn(2, 3),), lambda: setattr(m, "forward", lambda x: x * 7), jitted=thunder.jit(m))


def test_global_module_hooks_and_hook_state():
    m = net()
    state = {"k": 2.0}
    handles = []

    def c1():
        handles.append(torch.nn.modules.module.register_module_forward_hook(lambda mod, i, o: o + 1))

    def c2():
        handles.append(m.lin.register_forward_hook(lambda mod, i, o: o * state["k"]))

    def c3():
        state["k"] = -4.0

    try:
        run_steps(m, (torch.randn(2, 3),), c1, c2, c3, jitted=thunder.jit(m))
    finally:
        for h in handles:
            h.remove()


def test_train_eval_and_requires_grad():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    x = torch.randn(4, 3)
    tm = thunder.jit(m)
    ref = __import__("copy").deepcopy(m)
    for step in (lambda: None, lambda: (m.eval(), ref.eval()), lambda: (m.train(), ref.train()),
                 lambda: (m.requires_grad_(False), ref.requires_grad_(False))):
        step()
        assert_same(tm(x), ref(x))
    torch.testing.assert_close(m[1].running_mean, ref[1].running_mean)


def test_module_with_many_parameters_has_one_guard_per_module_not_per_parameter():
    m = nn.Sequential(*[nn.Linear(4, 4) for _ in range(20)])
    tm = thunder.jit(m)
    tm(torch.randn(2, 4))
    src = str(thunder.last_prologue_traces(tm)[0])
    # parameters are read (as inputs), not guarded one by one
    assert src.count("_parameters['weight']") == 20
    assert src.count(" is not ") < 200


# ---------------------------------------------------------------------------------------------
# functional.jit guards too
def test_functional_jit_guards_globals():
    def f(x):
        return x * K

    jf = thunder.functional.jit(f)
    try:
        assert_same(jf(X), f(X))
        globals()["K"] = 3.0
        assert_same(jf(X), f(X))
    finally:
        globals()["K"] = 2.0


def test_miss_reasons_name_what_changed():
    c = 2.0

    def f(x):
        return x * c

    jf = thunder.jit(f)
    jf(X)
    c = 3.0
    jf(X)
    reason = thunder.compile_stats(jf).last_miss_reason
    assert "'c'" in reason and "2.0" in reason and "3.0" in reason, reason


def test_grad_mode_of_tensors_read_from_state_is_part_of_the_key():
    # a first call under no_grad must not serve a later call with grad enabled: the parameters
    # (read from the module, not passed) require grad, so the program differs with grad mode
    lin = torch.nn.Linear(3, 2)
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(4, 3)
    for jf, params in ((thunder.jit(lin), list(lin.parameters())), (thunder.jit(lambda x: x * w), [w])):
        with torch.no_grad():
            assert not jf(x).requires_grad
        out = jf(x)
        assert out.requires_grad
        grads = torch.autograd.grad(out.sum(), params)
        expected = torch.autograd.grad((lin(x) if jf.__class__.__name__ == "ThunderModule" else x * w).sum(), params)
        for g, e in zip(grads, expected):
            torch.testing.assert_close(g, e)



class _Setting:
    def __init__(self, k):
        self.k = k


SETTINGS = {"a": _Setting(2.0)}
HOLDER = _Setting(_Setting(2.0))  # (its inner object reached only by native code below)
EXTRAS = {}


def _reads_containers_twice(x):
    n = len(SETTINGS)  # first read of SETTINGS: its snapshot guard
    y = x * n + x * SETTINGS["a"].k  # read again unchanged (the snapshot taken stands), then an item's attribute
    first = len(EXTRAS)  # {} at the first read
    EXTRAS["e"] = operator.attrgetter("k")(HOLDER)  # an object from native code, put in it
    return y + x * EXTRAS["e"].k * (first + 1)  # read again changed: what it holds now is guarded


@pytest.mark.parametrize("change", ["a", "e"])
def test_containers_read_again_keep_their_items_guarded(change):
    x = torch.randn(3)
    fn = thunder.jit(_reads_containers_twice)
    setting = SETTINGS["a"] if change == "a" else HOLDER.k
    try:
        for k in (2.0, 2.0, 3.0):
            setting.k = k
            EXTRAS.clear()
            expected = _reads_containers_twice(x)
            EXTRAS.clear()
            assert_same(fn(x), expected)
        assert thunder.cache_misses(fn) == 2  # (the attribute's new value)
    finally:
        setting.k = 2.0
        EXTRAS.clear()


NOTE_FLAG = False


class _Counter:
    n = 0


_COUNTER = _Counter()


@functools.singledispatch  # (its dispatching wrapper is library code: functools)
def _note(x):
    if NOTE_FLAG:
        _COUNTER.n = _COUNTER.n + 1


def test_a_library_call_running_the_users_code_keeps_its_guards(monkeypatch):
    """A library call returning None with no effects is bookkeeping, its reads not guarded
    (runtime/state.py); one that ran the user's code keeps them: the flag decides whether the
    user's function writes an attribute."""
    def f(x):
        _note(x)
        return x * 2

    jf, x = thunder.jit(f), torch.randn(3)
    torch.testing.assert_close(jf(x), x * 2)
    assert _COUNTER.n == 0
    monkeypatch.setattr(_COUNTER, "n", 0)
    monkeypatch.setitem(globals(), "NOTE_FLAG", True)
    torch.testing.assert_close(jf(x), x * 2)
    assert _COUNTER.n == 1 and thunder.compile_stats(jf).cache_misses == 2


def test_dicts_and_sets_keyed_by_tensors_are_read_by_identity():
    # eager hashes a tensor by identity: a parameter or argument used as a key finds its item
    # (the proxy standing for it missed: the default, silently); which tensor it is is guarded
    w, v = nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(3))
    scales, frozen = {w: 2.0, v: 3.0}, {v}

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = w

        def forward(self, x):
            out = x * self.w * scales.get(self.w, -1.0) * scales[self.w]
            return out if self.w in frozen else out + 1

    def f(x, t):
        return x * scales.get(t, -1.0) + (t in frozen)

    m = M()
    jm, jf = thunder.jit(m), thunder.jit(f)
    x = torch.randn(3)
    for t in (w, v, torch.randn(3), w):
        assert_same(jf(x, t), f(x, t))
    assert_same(jm(x), m(x))
    m.w = v  # (another parameter: the other item)
    assert_same(jm(x), m(x))
    assert thunder.cache_misses(jm) == 2


def test_is_between_input_tensors_is_eagers():
    # an argument that is a parameter, or one tensor passed twice: two proxies, one tensor
    # (`is` answered False, silently taking the other branch); which it is, is guarded
    lin = nn.Linear(3, 3)

    def f(t):
        return t * 2 if t is lin.weight else t * 3

    def g(t, u):
        return t * 2 if t is not u else t * 3

    jf, jg = thunder.jit(f), thunder.jit(g)
    w = torch.randn(3, 3)
    for t in (lin.weight, w, lin.weight):
        assert_same(jf(t), f(t))
    for t, u in ((w, w), (w, w.clone()), (w, w), (w, w.view(3, 3))):
        assert_same(jg(t, u), g(t, u))
    assert thunder.cache_misses(jg) == 2  # (w, w.view(3, 3): two tensors, as w and its clone)


def test_id_of_a_parameter_is_its_tensors():
    # a dict built outside by id(p) (optimizer and logging code): read with the parameter's id,
    # not its proxy's (which missed, silently); the tensor is pinned
    lin = nn.Linear(3, 3)
    names = {id(p): n for n, p in lin.named_parameters()}

    def f(x):
        return x * len(names.get(id(lin.weight), "")) + x * len(names.get(id(lin.bias), "unnamed"))

    jf = thunder.jit(f)
    x = torch.randn(3)
    assert_same(jf(x), f(x))
    lin.bias = nn.Parameter(torch.randn(3))  # (not in names: the default, as in eager)
    assert_same(jf(x), f(x))
    assert thunder.cache_misses(jf) == 2


def test_a_dict_subclass_reading_through_its_parent_method():
    # transformers' ACT2FN: __getitem__ instantiates what dict.__getitem__ (called on super())
    # holds; the parent's read is the item, not the subclass's answer
    class Instantiating(dict):
        def __getitem__(self, key):
            cls, kwargs = super().__getitem__(key)
            return cls(**kwargs)

    acts = Instantiating(gelu=(nn.GELU, {"approximate": "tanh"}))

    def f(x):
        return acts["gelu"](x) + acts.get("gelu")[1]["approximate"].count("t")

    x = torch.randn(4)
    assert_same(thunder.jit(f)(x), f(x))
