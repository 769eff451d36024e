"""What the interpreter asks while thunder.jit traces: a replacement for each callable (torch ops,
refused and redirected calls, sharp edges), what it loads and stores (state tracking)."""
import functools
import math
import types

import torch
import sys

from thunder.core import ndarray, symbols, trace as tracing
from thunder.core.callables import is_torch_op
from thunder.core.numbers import NumberProxy
from thunder.core.proxies import TensorProxy
from thunder.ops import attention, checkpoint, custom_function, fallback, foreach, python_draws, registry
from thunder.runtime import calls, causal_masks, guards, inner_autograd, module_calls, sharp_edges, torch_func
from thunder.runtime.state import holds_proxy, learning_only


def _no_print(*args, **kwargs):
    return None


def _make_lookup(cd):
    warned = cd.warned_sharp_edges
    answers = {}  # fn -> _lookup(fn) in this trace (the same functions are called in every layer)
    modules = {}  # id(module) -> (module, _lookup(module)) in this trace

    def lookup(fn):
        if fn is module_calls.MODULE_CALL:  # nn.Module.__call__: forward directly when no hook runs
            return module_calls.CALL
        draw = _python_draw(fn, cd)
        if draw is not None:
            return draw
        if _side_effect(fn):  # (the user's line is found only where a warning or error names it)
            sharp_edges.check(fn, cd.sharp_edges, tracing.current_location(), warned, cd.draws_warn)
            if fn is print and learning_only():  # (a trace made again at other sizes prints nothing)
                return _no_print
        tp = type(fn)
        if tp is functools.partial and not fn.__dict__:
            # no table of _lookup's holds a partial and none is a torch binding: its answer is
            # None, and the interpreter calls its func, which lookup then sees (the proxies'
            # methods, x.view, are such partials; tests/test_lookup_memo.py)
            impl = None
        elif tp in _BY_IDENTITY or tp is types.MethodType and type(fn.__func__) is types.FunctionType:
            impl = answers.get(fn, answers)
            if impl is answers:
                impl = answers[fn] = _lookup(fn)
        elif isinstance(fn, torch.nn.Module):
            # a module called (self.q_proj(x)): answered by its class and attributes that no
            # forward sets (torch.compile's marks), once per module and trace; by identity (the
            # module kept, so its id stays its own)
            kept = modules.get(id(fn))
            if kept is None:
                kept = modules[id(fn)] = (fn, _lookup(fn))
            impl = kept[1]
        else:
            impl = _lookup(fn)
        return calls.observe(fn, impl)  # (thunder.examine's record of torch calls)

    return lookup


def _python_draw(fn, cd):
    """For Python's and numpy's scalar random draws: a callable recording the draw as a runtime
    number the program draws on every call (ops/python_draws.py); other calls of those functions
    (a size, keyword arguments, arrays) run while tracing as sharp edges. None for other fns."""
    try:
        if fn not in python_draws.DRAWS:
            return None
    except TypeError:  # unhashable
        return None

    def draw(*args, **kwargs):
        spec = python_draws.scalar_draw(fn, args, kwargs)
        # (inside torch.func.vmap's body, whose ops are batched or unrolled per example, a draw eager
        # makes once a call runs while tracing, as the other draws)
        if spec is not None and tracing.current().on_record is None:
            return python_draws.record(*spec, args)
        sharp_edges.check(fn, cd.sharp_edges, tracing.current_location(), cd.warned_sharp_edges, cd.draws_warn)
        return fn(*args, **kwargs)

    return draw


def _side_effect(fn):
    """Whether sharp_edges.check has something to say about fn (a call it warns about or refuses)."""
    try:
        return fn in sharp_edges.SIDE_EFFECTS
    except TypeError:  # unhashable
        return False


# callables that hash and compare by identity (a user's __eq__ is never called by the memo),
# whose answer depends on nothing that changes while tracing; so do bound methods of Python
# functions (equal where their __self__ is the same object and their function the same)
_BY_IDENTITY = frozenset({types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
                          types.WrapperDescriptorType, types.ClassMethodDescriptorType, type})


def _no_torch_function(*args, **kwargs):
    return False


# torch's Python functions ask these whether to hand the call to __torch_function__; inside the
# interpreter the answer is no, so their Python bodies run (interpreted) with proxies
_TORCH_FUNCTION_CHECKS = {torch.overrides.has_torch_function, torch.overrides.has_torch_function_unary,
                          torch.overrides.has_torch_function_variadic}


def _is_compiling():
    return True


def _is_compiling_checks():
    """torch's "am I being compiled?" functions: thunder is a compiler, and libraries take their
    trace-friendly path when these answer True (transformers' is_torchdynamo_compiling() calls
    torch.compiler.is_compiling()). torch._dynamo is not imported here (it is slow to import);
    its function is found once user code has imported it."""
    checks = {torch.compiler.is_compiling}
    for module in ("torch._dynamo.external_utils", "torch._utils"):
        fn = getattr(sys.modules.get(module), "is_compiling", None)
        if fn is not None:
            checks.add(fn)
    return checks


def _is_tensor_class(classinfo, tensor_class=torch.Tensor):
    if isinstance(classinfo, tuple):
        return any(_is_tensor_class(c, tensor_class) for c in classinfo)
    return isinstance(classinfo, type) and issubclass(tensor_class, classinfo)


def _isinstance(obj, classinfo):
    """isinstance in the jitted code: a proxy is a torch.Tensor (libraries branch on it), not a
    subclass such as Parameter, except the proxy of an nn.Parameter, which is one."""
    if isinstance(obj, TensorProxy) and (_is_tensor_class(classinfo) or obj.is_parameter and
                                         _is_tensor_class(classinfo, torch.nn.Parameter)):
        return True
    if isinstance(obj, NumberProxy):  # a runtime number is an instance of its Python type
        classes = classinfo if isinstance(classinfo, tuple) else (classinfo,)
        if any(isinstance(obj.python_type(), c) for c in classes if isinstance(c, type)):
            return True
    return isinstance(obj, classinfo)


def _eager_type(obj):
    """type(obj) as eager code sees it: a tensor proxy is a torch.Tensor (the proxy of an
    nn.Parameter a Parameter), a runtime number or a symbolic size one of its Python type."""
    if isinstance(obj, TensorProxy):
        return torch.nn.Parameter if obj.is_parameter else torch.Tensor
    if isinstance(obj, NumberProxy):
        return obj.python_type
    if symbols.is_symbolic(obj):
        return obj.value_type
    return type(obj)


def _type(*args, **kwargs):
    """type() in the jitted code: type(x) of a proxy is eager's (`type(x) is torch.Tensor`)."""
    return _eager_type(args[0]) if len(args) == 1 and not kwargs else type(*args, **kwargs)


def _on_load(state):
    """on_load of the interpreter: x.__class__ of a proxy is eager's, as type(x) is; other
    values go to the state tracker (runtime/state.py)."""
    def load(value, provenance):
        if provenance.kind == "attr" and provenance.name == "__class__":  # (an item's name is its key: a tensor)
            eager = _eager_type(provenance.owner)
            if eager is not value:  # (a proxy's)
                return eager
        return state.load(value, provenance)

    return load


def _runtime_number(cls):
    """int(x) / float(x) inside the interpreter: for a tensor or a runtime number, a runtime
    number (core/numbers.py; Python's own int()/float() must return a real one, which would
    read the value)."""
    def convert(*args, **kwargs):
        if len(args) == 1 and not kwargs:
            x = args[0]
            if isinstance(x, TensorProxy):
                return x._scalar(cls)
            if isinstance(x, NumberProxy):
                return x._unary(cls.__name__)
            if symbols.is_symbolic(x):  # a size computed from symbols stays symbolic
                return symbols.convert(x, cls)
        return cls(*args, **kwargs)

    return convert


_NUMBER_CONVERSIONS = {int: _runtime_number(int), float: _runtime_number(float)}


def _object_id(obj):
    ctx = tracing.current()
    return id(obj) if ctx is None or ctx.object_id is None else ctx.object_id(obj)


def _refuse(exc_type, message):
    def refused(*args, **kwargs):
        loc = tracing.current_location()
        where = f" at {loc[0]}:{loc[1]}" if loc else ""
        raise exc_type(message.format(where=where))

    return refused


# calls that thunder refuses inside a jitted function (the exception type and the message)
_REFUSED = {
    torch.compile: (NotImplementedError, "thunder: torch.compile{where} inside a jitted function is not supported "
                    "(thunder compiles the function already). Workaround: call the function itself, or apply "
                    "torch.compile outside thunder.jit"),
    torch.set_default_dtype: (RuntimeError, "Default dtype is changed during the execution of jitted function{where}. "
                              "This is currently unsupported. Workaround: set it before calling the jitted function"),
}


def _compiled_by_dynamo(fn):
    """A function or module that torch.compile returned."""
    try:
        if getattr(fn, "_torchdynamo_disable", False):
            return False  # torch._dynamo.disable's wrapper (torch.manual_seed calls one): runs as itself
        return (getattr(fn, "_torchdynamo_orig_callable", None) is not None
                or type(fn).__module__ == "torch._dynamo.eval_frame")
    except Exception:  # noqa: BLE001 - an object whose attributes cannot be read: not dynamo's
        return False


def _lookup(fn):
    if fn is isinstance:
        return _isinstance
    if fn is type:
        return _type
    if fn is range:  # a loop count taken from a symbolic size is a guard
        return symbols.symbolic_range
    if fn is int or fn is float:
        return _NUMBER_CONVERSIONS[fn]
    if fn is math.sqrt:
        return symbols.sqrt
    if fn is id:
        return _object_id
    try:
        refused = _REFUSED.get(fn)
    except TypeError:  # unhashable
        refused = None
    try:
        transform = torch_func.REPLACEMENTS.get(fn) or inner_autograd.REPLACEMENTS.get(fn)
    except TypeError:  # unhashable
        transform = None
    if transform is not None:
        return transform
    if fn is torch.ops.higher_order.autograd_function_apply:
        return custom_function.higher_order_apply
    if fn is checkpoint.CHECKPOINT:  # (wrapped by torch._dynamo.disable)
        return checkpoint.checkpoint
    if type(fn).__name__ == "DisableContext" and type(fn).__module__ == "torch._dynamo.eval_frame":
        return fn  # (torch._dynamo.disable(f) making its wrapper, as `@torch._disable_dynamo` does: native)
    if refused is None and _compiled_by_dynamo(fn):
        refused = (NotImplementedError, "thunder: calling a function compiled by torch.compile{where} inside a jitted "
                   "function is not supported. Workaround: call the original function (torch.compile's result has "
                   "it as _torchdynamo_orig_callable), or apply torch.compile outside thunder.jit")
    if refused is not None:
        return _refuse(*refused)
    if custom_function.is_apply(fn):  # MyFn.apply: its forward interpreted, its backward for gradients
        if hasattr(fn, "__self__"):
            return functools.partial(custom_function.apply, fn.__self__)
        return custom_function.apply  # (Function.apply itself: called with the class first)
    try:
        conversion = _ARRAY_CONVERSIONS.get(fn)
    except TypeError:  # unhashable
        conversion = None
    if conversion is not None:  # torch.from_numpy(a) of an array argument (core/ndarray.py)
        return functools.partial(_array_conversion, fn, conversion)
    return _lookup_op(fn)


_ARRAY_CONVERSIONS = {torch.from_numpy: ndarray.from_numpy, torch.as_tensor: ndarray.as_tensor,
                      torch.asarray: ndarray.as_tensor, torch.tensor: ndarray.tensor}


def _array_conversion(fn, conversion, *args, **kwargs):
    if args and ndarray.is_array(args[0]):
        ctx = tracing.current()
        proxy = ctx.array_input(args[0]) if ctx.array_input is not None else None
        if proxy is not None:  # an array read from state: an input, as an array argument
            args = (proxy, *args[1:])
        elif fn is not torch.tensor and ctx.made_array is not None and ctx.made_array(args[0]):
            # an array made while tracing (numpy's own operations run natively): its values are a
            # constant of the trace, as torch.tensor(array) makes them; torch would share the
            # array's memory, which nothing outside the call holds
            return _lookup_op(torch.tensor)(args[0], **{k: v for k, v in kwargs.items() if k in ("dtype", "device")})
    if args and isinstance(args[0], ndarray.ArrayProxy):
        return conversion(*args, **kwargs)
    return _lookup_op(fn)(*args, **kwargs)


def _lookup_op(fn):
    op = registry.lookup_callable(fn)
    if op is attention.scaled_dot_product_attention:  # (a constant causal mask -> is_causal=True)
        return functools.partial(causal_masks.sdpa, functools.partial(fallback.registered, op, fn), op)
    if op is not None:
        return functools.partial(fallback.registered, op, fn)
    try:
        if fn in _TORCH_FUNCTION_CHECKS:
            return _no_torch_function
        if getattr(fn, "__name__", None) == "is_compiling" and fn in _is_compiling_checks():
            return _is_compiling
        query = guards.QUERIES.get(fn)
    except TypeError:  # unhashable
        query = None
    if query is not None:
        return _consulting(fn, query)
    per_tensor = foreach.per_tensor(fn)
    if per_tensor is not None:  # torch._foreach_*: the per-tensor ops (ops/foreach.py)
        return functools.partial(_per_tensor, per_tensor, fn)
    if is_torch_op(fn):  # no registry entry: thunder's fallback records it (ops/fallback.py)
        return functools.partial(fallback.call, fn)
    if type(fn) is types.BuiltinFunctionType and (getattr(fn, "__module__", None) or "").startswith("torch._C"):
        return functools.partial(_native_unless_refused, fn)
    module = getattr(fn, "__module__", None) or ""
    if module.startswith("thunder.") and not module.startswith("thunder.tests"):
        return fn  # our own machinery (proxy methods, ops) runs natively
    if module == "linecache" or module == "traceback" and getattr(fn, "__name__", None) in _STACK_FUNCTIONS:
        return fn
    return None


def _per_tensor(per_tensor, fn, *args, **kwargs):
    result = per_tensor(*args, **kwargs)
    return fallback.call(fn, *args, **kwargs) if result is foreach.NOT_HANDLED else result


def _native_unless_refused(fn, *args, **kwargs):
    """A function of torch._C that is no op (torch._C._group_tensors_by_device_and_dtype, which
    clip_grad_norm_ calls): run natively, as it takes any object or none of the trace's; where
    its argument check refuses a tensor proxy (TypeError before it runs), recorded as a torch
    call (ops/fallback.py: computed on stand-in tensors, run on the real ones by the program)."""
    try:
        return fn(*args, **kwargs)
    except TypeError:
        if not holds_proxy((args, kwargs)):
            raise
    return fallback.call(fn, *args, **kwargs)


# run natively: linecache (source lines for tracebacks) and traceback's functions of the current
# stack (torch.cuda's lazy calls keep traceback.format_stack(), which Reformer's seeding reaches).
# Interpreted, each read of linecache's cache of every file's lines was a guard with a deep
# snapshot (Reformer's first training step took 8 minutes), and the program would check that
# cache on every call. (The exception functions, format_exc, stay interpreted: they read the
# exception being handled, which the interpreter keeps.)
_STACK_FUNCTIONS = frozenset({"format_stack", "extract_stack", "print_stack", "walk_stack"})


def _consulting(fn, state_name):
    """fn answers with ambient torch state: the trace depends on it."""
    def query(*args, **kwargs):
        tracing.consult(state_name)
        return fn(*args, **kwargs)

    return query


def _on_store(cd, state):
    def on_store(value, provenance):
        if provenance.kind == "global":
            state.stores += 1  # (not bookkeeping: runtime/state.py)
            state.plain_change(provenance)
            sharp_edges.check_global_write(provenance, cd.sharp_edges, cd.warned_sharp_edges)
        elif provenance.kind in ("item", "mutator"):
            if state.container_write(value, provenance):
                state.plain_change(provenance)
                sharp_edges.check_global_write(provenance, cd.sharp_edges, cd.warned_sharp_edges)
        else:
            return state.store(value, provenance)
        return False

    return on_store
