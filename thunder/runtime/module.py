"""ThunderModule: what thunder.jit(module) returns. An nn.Module that shares parameters and
buffers with the original and runs the compiled forward; the nn.Module API answers for the
original (same names, no wrapper prefix)."""
import contextlib
import types

import torch

from thunder.runtime.jit import ThunderFunction


class ThunderModule(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, cd):
        super().__init__()
        self._model = model
        self._jfn = ThunderFunction(cd)

    def __call__(self, *args, **kwargs):
        # the compiled program runs the original's hooks itself (they are interpreted)
        return self._jfn(*args, **kwargs)

    forward = __call__

    # -- the original module's view of parameters, buffers and submodules
    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._model.named_parameters(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate)

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._model.named_buffers(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate)

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        return self._model.named_modules(memo=memo, prefix=prefix, remove_duplicate=remove_duplicate)

    def train(self, mode=True):
        self._model.train(mode)
        self.training = mode
        return self

    def get_parameter(self, target):
        return self._model.get_parameter(target)

    def get_buffer(self, target):
        return self._model.get_buffer(target)

    def get_submodule(self, target):
        return self._model.get_submodule(target)

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        return self._model.state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        return self._model.load_state_dict(state_dict, strict=strict, assign=assign)

    @contextlib.contextmanager
    def no_sync(self):
        """A no-op without a process group. With DDP, wrap the ThunderModule
        (`DistributedDataParallel(thunder.jit(model))`) and use DDP's own no_sync(), which skips
        the gradient all-reduce for the calls inside it (tests/test_ddp.py)."""
        inner = getattr(self._model, "no_sync", None)
        with (inner() if callable(inner) else contextlib.nullcontext()):
            yield

    def load_original_state_dict(self, state_dict, strict=True, assign=False):
        """Loads a state dict of the original module (its names) into it; the ThunderModule, which
        shares its parameters and buffers, sees the new values."""
        return self._model.load_state_dict(state_dict, strict=strict, assign=assign)

    def __getattr__(self, name):
        # ThunderModule's own attributes (_model, _jfn) first, then the original module's (tm.weight)
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self.__dict__.get("_modules", {}).get("_model")
            if model is None:
                raise
            value = getattr(model, name)
            if isinstance(value, types.MethodType) and value.__self__ is model and _own_method(type(model), name):
                # a method of the model's class (transformers' generate): its self(...) calls run
                # the compiled forward
                return types.MethodType(value.__func__, self._routed())
            return value

    def _routed(self):
        """The original module as its methods see it, but for calls of it and of its forward,
        which run the compiled forward: an instance of a subclass of its class sharing its
        __dict__ (its parameters, submodules, config: the same objects, so isinstance checks and
        attribute writes are the original's)."""
        routed = self.__dict__.get("_routed_view")
        if routed is None:
            model, jfn = self._model, self._jfn
            cls = type(model)
            def compiled(_, *args, **kwargs):
                return jfn(*args, **kwargs)

            sub = type(cls.__name__, (cls,), {"__call__": compiled, "forward": compiled,
                                               "__module__": cls.__module__, "__qualname__": cls.__qualname__})
            routed = object.__new__(sub)
            routed.__dict__ = model.__dict__
            self.__dict__["_routed_view"] = routed
        return routed

    def __repr__(self):
        return f"ThunderModule({self._model!r})"


def _own_method(cls, name):
    """Whether name is a method that the module's class (or a base other than nn.Module's own)
    defines."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass is not torch.nn.Module
    return False
