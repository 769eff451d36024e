"""Calls of nn.Modules without hooks. Eager's Module.__call__ (`_wrapped_call_impl`, then
`_call_impl`, torch/nn/modules/module.py) calls `self.forward(*args, **kwargs)` and nothing else
when the module is not compiled (`_compiled_call_impl` None), no torch.jit trace is running and no
hook is registered, on the module or globally. Interpreting that code line by line was about a
third of the interpretation of a transformer layer (benchmarks/depth_calls.py); here the
interpreter checks the same conditions natively and interprets forward directly.

What torch's code reads to decide is reported to the interpreter's on_load as that code reads it
(the same owners, names and order), and on_call is told of both functions, so a cache entry gets
the same guards as when they were interpreted (`_compiled_call_impl` None, `_call_impl` and
`forward` not shadowed by instance attributes and the classes' entries the same, the module's four
hook dicts and the four global ones empty) and a hook registered later recompiles. Otherwise (a
hook, a compiled module, a class with its own `_call_impl` or a `forward` property, a torch.jit
trace) torch's code is interpreted as it is."""
import types
from collections import OrderedDict

import torch

from thunder.interpreter import Provenance, WithRuntime, strip_interpreter

_WRAPPED = torch.nn.Module._wrapped_call_impl  # nn.Module.__call__
_CALL_IMPL = torch.nn.Module._call_impl
_GLOBALS = _CALL_IMPL.__globals__  # torch.nn.modules.module's: the global hook dicts live there
_HOOKS = ("_backward_hooks", "_backward_pre_hooks", "_forward_hooks", "_forward_pre_hooks")
_GLOBAL_HOOKS = ("_global_backward_pre_hooks", "_global_backward_hooks", "_global_forward_hooks",
                 "_global_forward_pre_hooks")
_DICTS = (OrderedDict, dict)
# the names torch's two functions read up to the call of forward, in order (another torch's code,
# which may decide on more, is interpreted as it is)
_READS = (("_compiled_call_impl", "_call_impl"),
          ("torch", "_C", "_get_tracing_state", "_slow_forward", "forward", *_HOOKS, *_GLOBAL_HOOKS))


def _where(fn):
    return fn.__code__.co_name, fn.__code__.co_filename, fn.__code__.co_firstlineno


_AT_WRAPPED, _AT_CALL_IMPL = _where(_WRAPPED), _where(_CALL_IMPL)


def _plain(module):
    """Whether eager's Module.__call__ of module calls module.forward and nothing else now."""
    try:
        if module._compiled_call_impl is not None or torch._C._get_tracing_state():
            return False
        impl = module._call_impl
        if type(impl) is not types.MethodType or impl.__func__ is not _CALL_IMPL or impl.__self__ is not module:
            return False
        if type(getattr(type(module), "forward", None)) is not types.FunctionType:
            return False  # (a property's getter is interpreted where torch's code reads self.forward)
        for name in _HOOKS:
            hooks = getattr(module, name)
            if type(hooks) not in _DICTS or hooks:
                return False
        for name in _GLOBAL_HOOKS:
            hooks = _GLOBALS[name]
            if type(hooks) not in _DICTS or hooks:
                return False
        return True
    except Exception:  # noqa: BLE001 - whatever fails, fails again where torch's code is interpreted
        return False


def _call(rt, caller, module, *args, **kwargs):
    if not _plain(module):
        return rt.call_unlooked(_WRAPPED, (module, *args), kwargs, caller)
    load, on_call = rt.on_load, rt.on_call
    done_wrapped = on_call(_WRAPPED) if on_call is not None else None
    if load is not None:
        load(module._compiled_call_impl, Provenance("attr", "_compiled_call_impl", module, *_AT_WRAPPED))
        load(module._call_impl, Provenance("attr", "_call_impl", module, *_AT_WRAPPED))
    done_impl = on_call(_CALL_IMPL) if on_call is not None else None
    if load is None:
        forward = module.forward
    else:
        c = load(_GLOBALS["torch"], Provenance("global", "torch", _GLOBALS, *_AT_CALL_IMPL))
        c = load(c._C, Provenance("attr", "_C", c, *_AT_CALL_IMPL))
        load(c._get_tracing_state, Provenance("attr", "_get_tracing_state", c, *_AT_CALL_IMPL))
        forward = load(module.forward, Provenance("attr", "forward", module, *_AT_CALL_IMPL))
        for name in _HOOKS:
            load(getattr(module, name), Provenance("attr", name, module, *_AT_CALL_IMPL))
        for name in _GLOBAL_HOOKS:
            load(_GLOBALS[name], Provenance("global", name, _GLOBALS, *_AT_CALL_IMPL))
    try:
        result = rt.call(forward, args, kwargs, caller)
    except BaseException as e:
        # the traceback goes from the caller's line to forward's, without this function's entry
        # and the interpreter's (eager's has torch's two functions there)
        e.__traceback__ = strip_interpreter(e.__traceback__.tb_next)
        raise
    if done_impl is not None:
        done_impl(result)
    if done_wrapped is not None:
        done_wrapped(result)
    return result


def _matches_torch():
    return (_WRAPPED.__code__.co_names == _READS[0] and _CALL_IMPL.__code__.co_names[:len(_READS[1])] == _READS[1]
            and torch.nn.Module.__call__ is _WRAPPED)


# lookup's answer for nn.Module.__call__ (runtime/lookup.py); None: torch's code is interpreted
CALL = WithRuntime(_call) if _matches_torch() else None
MODULE_CALL = _WRAPPED
