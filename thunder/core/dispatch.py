"""What the core's proxies call that a higher layer provides (docs/architecture.md, "Layers").

The core does not import the ops: thunder.ops fills these tables when it is imported (the op
registry's dicts are these objects, ops/registry.py; the fallback for torch calls without an entry
installs its entry points, ops/fallback.py; runtime numbers' arithmetic, ops/values.py). A proxy
method used before thunder.ops is imported raises a RuntimeError saying so.
"""

OPS: dict = {}  # "ltorch.add" -> OpDef (ops/registry.py's OPS)
METHODS: dict = {}  # TensorProxy method name -> OpDef, or a function calling one
DUNDERS: dict = {}  # "__add__" -> OpDef, called as op(proxy, other)


def _not_installed(*args, **kwargs):
    raise RuntimeError("thunder: the ops are not registered: import thunder (or thunder.ops) first")


# ops/fallback.py: call(fn, *args, **kwargs) runs a torch callable on proxies (an op where one is
# registered, else ltorch.torch_call); registered(op, fn, *args, **kwargs) calls a registered op,
# falling back where it refuses the arguments; dispatch(fn, *args, **kwargs) is __torch_function__'s
fallback_call = _not_installed
fallback_registered = _not_installed
fallback_dispatch = _not_installed
# ops/values.py: number_op(a, b, fn=...) records arithmetic on runtime numbers (NumberProxy)
number_op = _not_installed
