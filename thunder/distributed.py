"""thunder.jit of modules sharded by torch.distributed's FSDP2 (`fully_shard`).

FSDP2 turns a module into an FSDPModule whose forward pre-hook all-gathers its parameters (and
swaps them in as plain unsharded tensors), whose post-hook reshards them (sharded DTensors
again), and whose autograd hooks reduce-scatter the gradients. Those hooks talk to the process
group on every call, so they must run natively, never be traced: thunder.jit(fsdp_module)
compiles the module's forward only (an instance attribute `forward`, a thunder.jit of the
original bound forward) and returns the module itself. nn.Module's __call__ runs FSDP2's hooks,
then the compiled forward, which reads the unsharded parameters at call time (tensors read from
the module are inputs of the program, as for any jitted module); gradients reach them through
thunder's forward/backward, and FSDP2 reduce-scatters them as in eager.

Shard each transformer block and jit it after `fully_shard(block)`, then `fully_shard(model)`;
or shard only the whole model and jit it. A module that holds other FSDPModules cannot be
jitted: its forward would run their hooks inside the trace (docs/api.md, "FSDP2")."""
import sys

import torch

from thunder.runtime.jit import ThunderFunction


def is_fully_sharded(module):
    """Whether module is an FSDPModule (without importing torch.distributed.fsdp: a module
    was sharded only where it was imported)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(module, torch.nn.Module) and isinstance(module, fsdp.FSDPModule)


def jit_fully_sharded(module, compile_data):
    """module's forward compiled (compile_data(fn) -> CompileData), its FSDP2 hooks native."""
    nested = [name for name, m in module.named_modules() if m is not module and is_fully_sharded(m)]
    if nested:
        raise NotImplementedError(
            f"thunder.jit of an FSDP2 module that holds other FSDP2 modules ({', '.join(nested[:3])}) is not "
            "supported: their hooks (all-gather, reshard) would run inside the traced forward. Workaround: "
            "jit each sharded block instead (fully_shard(block); thunder.jit(block)), or shard only the whole "
            "model and jit it")
    forward = module.__dict__.get("forward")
    if isinstance(forward, ThunderFunction):
        return module  # jitted already
    module.forward = ThunderFunction(compile_data(module.forward))
    return module


def jitted_forward(module):
    """The compiled forward of a module jit_fully_sharded returned, else None."""
    forward = module.__dict__.get("forward") if isinstance(module, torch.nn.Module) else None
    return forward if isinstance(forward, ThunderFunction) else None
