"""Activation checkpointing inside jitted code: `torch.utils.checkpoint.checkpoint(fn, *args, ...)`.

The checkpointed function is interpreted in place (its ops recorded, fused and differentiated like
any other), with the trace's `checkpoint` set to a new region number: every op recorded meanwhile
carries the region in its location (`loc("t3"(fused<"checkpoint 1">["model.py":12:0]))`, which
lift/emit and every pass keep with the op). thunder-remat (lowering/remat.py) then saves no value
made inside a region for the backward: the backward recomputes it from the region's inputs, as
eager's checkpoint does, matmuls included. Random ops inside a region (dropout) keep their results
saved, so the backward uses the very mask the forward drew (eager redraws it from the preserved
generator state: the same numbers), which `preserve_rng_state` therefore does not change.

Eager's argument checks and its `use_reentrant=True` rule are kept: with no tensor argument that
requires grad, the reentrant variant's result has no gradient (the function runs under no_grad)."""
import itertools

import torch
import torch.utils.checkpoint as torch_checkpoint

from thunder.core import trace as tracing
from thunder.core.proxies import TensorProxy
from thunder.interpreter import interpret_inner

_regions = itertools.count(1)
CHECKPOINT = torch_checkpoint.checkpoint


def checkpoint(function, *args, use_reentrant=None, context_fn=torch_checkpoint.noop_context_fn,
               determinism_check="default", debug=False, early_stop=True, **kwargs):
    if use_reentrant is None:
        use_reentrant = True  # (eager's default, with a warning there)
    kwargs.pop("preserve_rng_state", True)
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        if context_fn is not torch_checkpoint.noop_context_fn or debug is not False:
            raise ValueError("Passing `context_fn` or `debug` is only supported when use_reentrant=False.")
    elif context_fn is not torch_checkpoint.noop_context_fn:
        raise NotImplementedError("thunder: torch.utils.checkpoint.checkpoint with a context_fn is not supported. "
                                  "Workaround: checkpoint without context_fn (thunder recomputes the region's "
                                  "activations itself)")
    ctx = tracing.current()
    if use_reentrant and torch.is_grad_enabled() and not any(
            isinstance(a, TensorProxy) and a.requires_grad for a in args):
        with torch.no_grad():  # eager: CheckpointFunction's result needs no grad then
            return interpret_inner(function, args)
    if ctx is None or ctx.checkpoint is not None:  # (a nested region belongs to the outer one)
        return interpret_inner(function, args, kwargs)
    ctx.checkpoint = next(_regions)
    try:
        return interpret_inner(function, args, kwargs)
    finally:
        ctx.checkpoint = None
