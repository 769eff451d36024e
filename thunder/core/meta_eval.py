"""The output metadata of any torch call, computed by torch itself: the call runs on meta tensors
that stand for the proxies (under FakeTensorMode on the real device where a meta kernel is
missing, for calls without tensor arguments, for non-tensor results, and under torch.autocast).
A TorchDispatchMode watches the aten ops it dispatches: one that reads values
(Tag.data_dependent_output: item, equal) makes the call data-dependent, as does a result shape
that depends on values (nonzero, boolean masks: torch's meta and fake kernels refuse those),
and one with Tag.nondeterministic_seeded makes the call random. The floating inputs require
grad, so the results' requires_grad says which carry gradient; identity and _version say what
the call returns of its inputs and which it writes.

`output_metadata(fn, args, kwargs)` is the reusable entry point: the call's result with a
fresh TensorProxy for each tensor. `evaluate(name, source, operands)` is the form the generic
op `ltorch.torch_call` uses (its callable's name, its argument source and its operands' types)
and is cached."""
import contextlib
import dataclasses
import functools
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from thunder.core.callables import display_name, resolve
from thunder.core.proxies import DataDependentError, TensorProxy, where
from thunder.core.pysource import call_source, parse_call

_CONSTANT_TYPES = (bool, int, float, complex, str, torch.dtype, torch.device, torch.layout, torch.memory_format,
                   torch.Size)


@dataclass(frozen=True)
class Result:
    """A tensor of the call's result: results[i] of the evaluation."""
    index: int


@dataclass(frozen=True)
class Operand:
    """The call returned one of its tensor arguments itself (an in-place op returns self)."""
    index: int


@dataclass(frozen=True)
class Evaluation:
    results: tuple  # (shape, dtype, device) of each tensor the op produces: the call's new result
    # tensors in the order the result lists them, then the new values of the operands it writes
    template: object  # the call's result: Result/Operand leaves for tensors, constants as they are
    mutated: tuple  # operand indices the call writes in place (their new values end `results`)
    views: tuple  # (result index, operand index): the result is a view of (shares memory with) the operand
    random: bool  # an aten op that draws random numbers ran
    aten: tuple  # the aten ops the call dispatched (after torch's CompositeImplicit decompositions)
    differentiable: tuple  # per result: whether torch's result carries gradient (None: not known)
    # per operand in mutated: whether autograd records the write (False: torch writes it under
    # no_grad itself, as F.embedding's max_norm renormalizes its weight; None: not known)
    recorded_writes: tuple = ()

    @property
    def num_outputs(self):
        return len(self.results) - len(self.mutated)


class UntraceableError(NotImplementedError):
    """A call thunder cannot record (its result is not tensors/numbers/collections of them, an
    argument has no literal form, ...)."""


def untraceable(name, why, workaround="run it outside the jitted function and pass its result in as an input"):
    return UntraceableError(f"thunder: {name}{where()} cannot be traced: {why}. Workaround: {workaround}.")


class _NeedsValues(Exception):
    pass


class _Watch(TorchDispatchMode):
    """Sees every aten op the call dispatches (before its meta/fake kernel runs). With a shape
    environment (the dynamic evaluation), ops that read values give unbacked symbols (a runtime
    number) instead of raising."""

    def __init__(self, shape_env=None):
        super().__init__()
        self.ops = []
        self.random = False
        self.shape_env = shape_env
        self.written = set()  # ids of the tensors an op's schema says it writes

    def _writes(self, func, args, kwargs):
        # (under a dispatch mode an op writing a tensor list, torch._foreach_mul_, leaves the
        # tensors' _version as it was: the schema says what it writes)
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is None or not a.alias_info.is_write:
                continue
            v = args[i] if i < len(args) else kwargs.get(a.name)
            for t in v if isinstance(v, (list, tuple)) else (v,):
                if isinstance(t, torch.Tensor):
                    self.written.add(id(t))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.data_dependent_output in func.tags:  # (item, equal, allclose: they read values)
            if self.shape_env is None:
                raise _NeedsValues(func)
            returns = [str(r.type) for r in func._schema.returns]
            if returns in (["bool"], ["int"], ["float"]):  # (equal: fake tensors have no kernel for it)
                self.ops.append(func)
                make = {"bool": self.shape_env.create_unbacked_symbool, "int": self.shape_env.create_unbacked_symint,
                        "float": self.shape_env.create_unbacked_symfloat}[returns[0]]
                return make()
        self.random = self.random or torch.Tag.nondeterministic_seeded in func.tags
        self.ops.append(func)
        self._writes(func, args, kwargs or {})
        if self.shape_env is not None and func in _FAKE_KERNELS:
            return _FAKE_KERNELS[func](self.shape_env, *args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def _ctc_loss(shape_env, log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    """aten._ctc_loss's results: the losses [batch] and log_alpha [batch, time, 2 * the longest
    target + 1], which values decide where the lengths are a tensor (torch.ctc_loss, whose own
    result does not depend on them, reduces the losses)."""
    batch = log_probs.shape[1] if log_probs.dim() == 3 else 1
    longest = max(target_lengths, default=0) if isinstance(target_lengths, (list, tuple)) else \
        shape_env.create_unbacked_symint()
    return (log_probs.new_empty((batch,)), log_probs.new_empty((batch, log_probs.shape[0], 2 * longest + 1)))


def _pack_padded_sequence(shape_env, input, lengths, batch_first):
    """aten._pack_padded_sequence's results: the packed rows [the lengths' sum, *features] and the
    batch sizes [the longest length] (int64, on the CPU). (torch's fake kernel gives the rows
    the shape [batch or time, *features].)"""
    rows, steps = shape_env.create_unbacked_symint(), shape_env.create_unbacked_symint()
    return input.new_empty((rows, *input.shape[2:])), lengths.new_empty((steps,), dtype=torch.int64)


# aten ops whose result shapes depend on values and whose results' metadata fake tensors cannot
# give (no kernel) or give wrong: that metadata, with unbacked symbols where values decide (the
# dynamic evaluation)
_FAKE_KERNELS = {torch.ops.aten._ctc_loss.Tensor: _ctc_loss, torch.ops.aten._ctc_loss.default: _ctc_loss,
                 torch.ops.aten._pack_padded_sequence.default: _pack_padded_sequence}


def _packed_rnn(fn):
    """torch.lstm/gru/rnn_tanh/rnn_relu for the metadata of their results: of a PackedSequence
    ((data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional)),
    torch's kernel reads the batch sizes' values, on which the results' metadata does not
    depend: the output's rows are data's, the hidden states hx's. Computed here by the padded
    form over one step of hx's batch, so that gradients reach the same arguments."""
    def run(*args, **kwargs):
        if len(args) != 9 or kwargs or not (isinstance(args[1], torch.Tensor) and args[1].dtype == torch.int64):
            return fn(*args, **kwargs)  # (the padded form)
        data, _, hx, *rest = args
        batch = (hx[0] if isinstance(hx, (tuple, list)) else hx).shape[1]
        out, *hidden = fn(data[:batch].unsqueeze(0), hx, *rest, False)
        return (out[0, :1].expand(data.shape[0], out.shape[-1]).contiguous(), *hidden)
    return run


def _pad_packed_sequence(data, batch_sizes, batch_first, padding_value, total_length):
    """torch._pad_packed_sequence's results: the padded sequences [longest, batch, *features]
    ([batch, longest, ...] batch first) and the lengths [batch] (int64, on the CPU). The batch
    is the first batch size, which values decide: an unbacked symbol in the dynamic evaluation
    (torch's kernel reads the batch sizes through their data pointer)."""
    env = getattr(getattr(data, "fake_mode", None), "shape_env", None)
    if env is None:
        raise _NeedsValues("torch._pad_packed_sequence")
    batch, steps = env.create_unbacked_symint(), max(total_length, batch_sizes.shape[0])
    shape = (batch, steps) if batch_first else (steps, batch)
    padded = data.new_empty((*shape, *data.shape[1:])) + data.sum() * 0  # (its gradient reaches data)
    return padded, batch_sizes.new_empty((batch,))


# callables whose results' metadata a stand-in computes (torch's kernel reads values through a
# data pointer, which meta and fake tensors do not have)
_METADATA_STAND_INS = {torch.lstm: _packed_rnn(torch.lstm), torch.gru: _packed_rnn(torch.gru),
                       torch.rnn_tanh: _packed_rnn(torch.rnn_tanh), torch.rnn_relu: _packed_rnn(torch.rnn_relu),
                       torch._pad_packed_sequence: _pad_packed_sequence}


def _metadata_run(fn):
    try:
        return _METADATA_STAND_INS.get(fn, fn)
    except TypeError:  # (an unhashable callable)
        return fn


def operand_order(tensors):
    """The order of a call's tensors as operands: grouped by type (stable), so that a long list
    of few types is few runs (see dialects/definitions.py)."""
    first = {}
    keys = [(tuple(t.shape), t.dtype, t.device) for t in tensors]
    for k in keys:
        first.setdefault(k, len(first))
    return sorted(range(len(tensors)), key=lambda i: first[keys[i]])


def encode_call(name, args, kwargs):
    """(operand proxies, argument source) of a call: the distinct proxies among the arguments,
    and the rest written as source with `_i` for operand i."""
    found, seen = [], set()

    def collect(v):
        if isinstance(v, TensorProxy):
            if id(v) not in seen:
                seen.add(id(v))
                found.append(v)
        elif isinstance(v, torch.Tensor):
            raise untraceable(name, f"it got a tensor of shape {tuple(v.shape)} that is not an input of the jitted "
                              "function (created outside thunder's view, e.g. by code run natively)",
                              "pass the tensor as an argument of the jitted function")
        elif isinstance(v, (tuple, list)):
            for x in v:
                collect(x)
        elif isinstance(v, dict):
            for x in v.values():
                collect(x)

    collect(args)
    collect(kwargs)
    if any(isinstance(v, torch.Generator) for v in (*args, *kwargs.values())):
        raise untraceable(name, "it draws from a torch.Generator argument (generator=...); only torch's global "
                          "generator is traced", "seed the global generator with torch.manual_seed and leave out "
                          "generator=")
    operands = [found[i] for i in operand_order(found)]
    index = {id(p): i for i, p in enumerate(operands)}
    try:
        source = call_source(args, kwargs, lambda v: index.get(id(v)) if isinstance(v, TensorProxy) else None)
    except TypeError as e:
        raise untraceable(name, f"an argument has no literal form in a trace: {e}",
                          "pass tensors, numbers, strings, dtypes, devices or tuples/lists of them, "
                          "or run the call outside the jitted function") from None
    return operands, source


def output_metadata(fn, args, kwargs):
    """fn(*args, **kwargs)'s result as torch computes it on proxies' metadata: tensors become
    fresh TensorProxies (operands returned as such stay themselves), numbers and other metadata
    are as torch computed them. Raises DataDependentError when the call needs tensor values,
    UntraceableError when it cannot be traced."""
    name = display_name(fn)
    operands, source = encode_call(name, args, kwargs)
    ev = evaluate_callable(fn, name, source, tuple(_meta(p) for p in operands))
    outs = [TensorProxy(*r) for r in ev.results]
    return build(ev.template, outs, operands)


def build(template, results, operands):
    """The call's result from its template: Result(i) -> results[i], Operand(j) -> operands[j]."""
    if isinstance(template, Result):
        return results[template.index]
    if isinstance(template, Operand):
        return operands[template.index]
    if isinstance(template, list):
        return [build(t, results, operands) for t in template]
    if isinstance(template, tuple):
        items = tuple(build(t, results, operands) for t in template)
        return type(template)(items) if _is_structseq(template) else items
    if type(template) is dict:
        return {k: build(t, results, operands) for k, t in template.items()}
    return template


def _constant_key(k):
    return isinstance(k, _CONSTANT_TYPES) or type(k) is tuple and all(_constant_key(x) for x in k)


def _meta(p):
    return (tuple(p.shape), p.dtype, p.device)


def _is_structseq(v):
    return isinstance(v, tuple) and type(v).__module__ == "torch.return_types"


def autocast_state(operands):
    """(device type, dtype) of the torch.autocast region the call is in, or None."""
    devices = {t[2].type for t in operands} or {"cpu"}
    for d in sorted(devices):
        if d in ("cpu", "cuda") and torch.is_autocast_enabled(d):
            return (d, torch.get_autocast_dtype(d))
    return None


DYNAMIC = "dynamic"


def evaluate(name, source, operands, autocast=None, shapes=None):
    """The Evaluation of the call `name(source)` with operand types `operands` ((shape, dtype,
    device) each, or (shape, dtype, device, strides)); autocast: (device type, dtype) of the
    torch.autocast region it runs in.

    For a call that reads values or whose result shapes depend on them (a DataDependentError
    without shapes), `shapes=DYNAMIC` evaluates it with symbols for what values decide (torch's
    unbacked symbols): results of shape None in the dims that depend on values, and numbers read
    from tensors as results of shape () and device None (runtime numbers). `shapes`, the result
    shapes observed in a run on real values, one per result, fills those dims in."""
    dynamic = shapes is not None
    try:
        ev = _evaluate(name, source, tuple(operands), autocast, torch.get_default_dtype(), dynamic)
    except DataDependentError:
        if dynamic:
            raise
        ev = _evaluate(name, source, tuple(operands), autocast, torch.get_default_dtype(), True)
        if is_dynamic(ev) or ev.mutated or any(r[2] is None for r in ev.results):
            raise
        # (an op inside decides its shapes by values, the call's results do not: torch.ctc_loss
        # reduces aten._ctc_loss's losses, beside which it sizes a table by the longest target)
    return ev if shapes is None or shapes == DYNAMIC else with_shapes(ev, shapes)


def with_shapes(ev, shapes):
    """A dynamic Evaluation with the dims values decide taken from shapes (the others checked)."""
    shapes = tuple(tuple(s) for s in shapes)
    if len(shapes) != len(ev.results) or any(
            len(s) != len(r[0]) or any(d is not None and d != x for d, x in zip(r[0], s))
            for s, r in zip(shapes, ev.results)):
        raise ValueError(f"result shapes {shapes} do not fit the call's results {[r[0] for r in ev.results]}")
    return dataclasses.replace(ev, results=tuple((s, *r[1:]) for s, r in zip(shapes, ev.results)))


def is_dynamic(ev):
    """Whether a dynamic Evaluation has result dims that values decide."""
    return any(d is None for r in ev.results for d in r[0])


def evaluate_callable(fn, name, source, operands, autocast=None):
    """evaluate() for a callable that may have no name (a Python function called natively)."""
    if autocast is None:
        autocast = autocast_state(operands)
    try:
        hash(fn)
    except TypeError:
        return _run(fn, name, source, operands, autocast)
    return _evaluate_fn(fn, name, source, tuple(operands), autocast, torch.get_default_dtype())


# (the default dtype is part of the key: factories and int -> float promotions depend on it)
@functools.lru_cache(maxsize=4096)
def _evaluate(name, source, operands, autocast, default_dtype, dynamic=False):
    return _run(resolve(name), name, source, operands, autocast, dynamic)


def evaluate_on_cpu(name, source, operands):
    """evaluate() by running the call on real CPU tensors (zeros) of the operands' shapes, dtypes
    and strides (operands: (shape, dtype, device, strides) each, all on the CPU): for a call whose
    meta kernel refuses what eager's CPU kernel runs (torch._scaled_mm's meta checks CUDA's
    layout rules). Eager's own checks decide, its error is the call's; the generators' state is
    left as it was. Costs one run of the call, while tracing."""
    return _evaluate_on_cpu(name, source, tuple(operands), torch.get_default_dtype())


@functools.lru_cache(maxsize=256)
def _evaluate_on_cpu(name, source, operands, default_dtype):
    with torch.random.fork_rng(devices=[]):
        return _run(resolve(name), name, source, operands, None, real=True)


@functools.lru_cache(maxsize=4096)
def _evaluate_fn(fn, name, source, operands, autocast, default_dtype):
    return _run(fn, name, source, operands, autocast)


def _run(fn, name, source, operands, autocast, dynamic=False, real=False):
    # with the floating inputs requiring grad first, which tells which results carry gradient;
    # a call torch refuses on such inputs (resize_) runs again without, and that run's answer
    # (or error) is the call's
    for grad in (True, False):
        try:
            if real:
                return _run_on(fn, name, source, operands, None, False, grad, real=True)[0]
            return _attempt(fn, name, source, operands, autocast, grad, dynamic)
        except (DataDependentError, UntraceableError):
            raise
        except Exception:
            if not grad:
                raise


def _attempt(fn, name, source, operands, autocast, grad, dynamic=False):
    fake = autocast is not None or not operands or dynamic
    try:
        ev, constants = _run_on(fn, name, source, operands, autocast, fake, grad, dynamic)
        if constants and not fake:  # device-dependent answers (get_device, type()) need the real device
            ev, _ = _run_on(fn, name, source, operands, autocast, True, grad)
        return ev
    except NotImplementedError as e:
        if fake or "meta" not in str(e).lower() or isinstance(e, (DataDependentError, UntraceableError)):
            raise
    except RuntimeError as e:  # "cannot repeat_interleave a meta tensor without output_size": fake tensors can
        if fake or "meta" not in str(e):
            raise
    return _run_on(fn, name, source, operands, autocast, True, grad)[0]


def _zeros(o):
    t = torch.empty_strided(o[0], o[3], dtype=o[1], device=o[2])
    try:
        t.zero_()
    except (RuntimeError, NotImplementedError):  # (float4_e2m1fn_x2 has no fill: its bytes are zeroed)
        t.view(torch.uint8).zero_()
    return t


def _run_on(fn, name, source, operands, autocast, fake, grad, dynamic=False, real=False):
    """(Evaluation, whether the result has non-tensor values) of one run on meta or fake tensors
    (dynamic: fake tensors with a shape environment, see evaluate; real: zeros on the CPU, see
    evaluate_on_cpu)."""
    from torch._subclasses import fake_tensor  # heavy: imports sympy (about 0.3 s), for the few calls that need it
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, ShapeEnv  # heavy (sympy)

    shape_env = ShapeEnv() if dynamic else None
    mode = fake_tensor.FakeTensorMode(shape_env=shape_env) if fake else None
    watch = _Watch(shape_env)
    try:
        with (mode or contextlib.nullcontext()), _autocast(autocast), torch.set_grad_enabled(grad):
            # (an operand with a 4th entry, its strides: a call that checks them, fallback.call)
            tensors = [_zeros(o) if real else
                       torch.empty_strided(o[0], o[3], dtype=o[1], device=o[2] if fake else "meta") if len(o) > 3
                       else torch.empty(o[0], dtype=o[1], device=o[2] if fake else "meta") for o in operands]
            if grad:  # (clones: in-place updates of leaves that require grad are refused)
                tensors = [t.requires_grad_().clone() if t.dtype.is_floating_point or t.dtype.is_complex else t
                           for t in tensors]
            before = [(t._version, t.shape, t.dtype) for t in tensors]
            grad_fns = [t.grad_fn for t in tensors]
            args, kwargs = parse_call(source, tensors)
            with watch:
                out = _metadata_run(fn)(*args, **kwargs)
    except _NeedsValues as e:
        raise DataDependentError(
            f"thunder: {name}{where()} needs the values of its tensor arguments ({e.args[0]} reads them), which "
            "are not known while tracing. Workaround: compute it outside the jitted function, or keep it in tensor "
            "operations (torch.where instead of a Python branch on a tensor).") from None
    except (fake_tensor.DynamicOutputShapeException, fake_tensor.DataDependentOutputException) as e:
        raise DataDependentError(
            f"thunder: {name}{where()} needs the values of its tensor arguments (the shape of its result depends "
            f"on them: {e}), which are not known while tracing. Workaround: compute it outside the jitted "
            "function, or use an operation whose result shape does not depend on values (torch.where, "
            "masked_fill instead of boolean indexing).") from None
    except GuardOnDataDependentSymNode as e:  # (dynamic: torch branches on a value inside the call)
        raise DataDependentError(
            f"thunder: {name}{where()} branches on the values of its tensor arguments inside torch ({e.args[0]!s:.200}), "
            "which thunder cannot trace. Workaround: compute it outside the jitted function.") from None
    except fake_tensor.UnsupportedOperatorException as e:
        raise untraceable(name, f"torch cannot compute the metadata of its result without running it ({e})") from None
    except RuntimeError as e:
        if real or "data is not allocated" not in str(e):
            raise
        # (torch's kernel reads the values behind a data pointer: nn.GRU of a PackedSequence reads
        # its batch sizes so; meta and fake tensors have no data)
        raise DataDependentError(
            f"thunder: {name}{where()} needs the values of its tensor arguments (torch's kernel reads them), which "
            "are not known while tracing. Workaround: compute it outside the jitted function.") from None
    device = next((o[2] for o in operands if o[2].type != "cpu"), operands[0][2] if operands else torch.device("cpu"))
    results, grads, views, constants = [], [], [], [False]
    position = {id(t): i for i, t in enumerate(tensors)}

    def convert(v):
        if isinstance(v, torch.Tensor):
            if id(v) in position:
                return Operand(position[id(v)])
            if type(v) not in (torch.Tensor, fake_tensor.FakeTensor, torch.nn.Parameter):
                raise untraceable(name, f"it returns a tensor subclass ({type(v).__name__})")
            shape = tuple(d if isinstance(d, int) else None for d in v.shape)  # (None: values decide it)
            results.append((shape, v.dtype, device if v.device.type == "meta" else v.device))
            grads.append(v.requires_grad if grad else None)
            for j, t in enumerate(tensors):
                if torch._C._is_alias_of(v, t):
                    views.append((len(results) - 1, j))
                    break
            return Result(len(results) - 1)
        if v is None:
            return None
        if isinstance(v, (torch.SymBool, torch.SymInt, torch.SymFloat)):  # a number read from a tensor
            python_type = {torch.SymBool: bool, torch.SymInt: int, torch.SymFloat: float}[type(v)]
            results.append(((), {bool: torch.bool, int: torch.int64, float: torch.float64}[python_type], None))
            grads.append(None)
            return Result(len(results) - 1)
        if isinstance(v, _CONSTANT_TYPES):
            constants[0] = True
            return v
        if isinstance(v, list):
            return [convert(x) for x in v]
        if isinstance(v, tuple) and (type(v) is tuple or _is_structseq(v)):
            items = tuple(convert(x) for x in v)
            return type(v)(items) if _is_structseq(v) else items
        if type(v) is dict and all(_constant_key(k) for k in v):  # (tensors grouped by device and dtype)
            constants[0] = True  # (its keys may name the device)
            return {k: convert(x) for k, x in v.items()}
        raise untraceable(name, f"its result is a {type(v).__name__}, not tensors, numbers or tuples/lists of them")

    template = convert(out)
    mutated = tuple(j for j, t in enumerate(tensors)
                    if (t._version, t.shape, t.dtype) != before[j] or id(t) in watch.written)
    for j in mutated:
        t = tensors[j]
        results.append((tuple(t.shape), t.dtype, operands[j][2]))
        grads.append(t.requires_grad if grad else None)
    recorded = tuple(tensors[j].grad_fn is not grad_fns[j] if grad and grad_fns[j] is not None else None
                     for j in mutated)
    ev = Evaluation(tuple(results), template, mutated, tuple(views), watch.random, tuple(watch.ops), tuple(grads),
                    recorded)
    return ev, constants[0]


class _autocast:
    """The autocast state an evaluation runs in: the given region, or none at all (the tracer
    may be inside a region the call does not belong to: see autocast_state)."""

    def __init__(self, state):
        self.state = state

    def __enter__(self):
        self.saved = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")]
        for d in ("cpu", "cuda"):
            torch.set_autocast_enabled(d, False)
        if self.state is not None:
            d, dtype = self.state
            torch.set_autocast_enabled(d, True)
            torch.set_autocast_dtype(d, dtype)

    def __exit__(self, *exc):
        for d, enabled, dtype in self.saved:
            torch.set_autocast_enabled(d, enabled)
            torch.set_autocast_dtype(d, dtype)
        return False
