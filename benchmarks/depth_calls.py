"""What each layer adds to the first training step, counted in calls rather than seconds: the
Python function calls (and, apart, the native calls: C functions and methods, several times
cheaper each) made in each compile stage of the first step of a transformers Llama model
(width 256, batch 2 x 64, as benchmarks/first_step_stages.py), at two depths, one process per
depth, and their difference per layer. The counts do not move with the load on the machine (the
seconds on a shared 2-core machine move by 3x within minutes), so a change's per-layer cost can
be compared on a loaded machine.

    .venv/bin/python benchmarks/depth_calls.py [--layers 2 24] [--functions]

Stages (a call counts towards the innermost stage running): interpretation (`_acquire`), the
forward's autograd program (`_autograd_program`) with its parts (thunder-autograd's
backpropagation and @backward emission, thunder-remat, cse/canonicalize, @forward's thunder-fuse
and code generation), the backward's compile on the first backward call (`specialize_backward`:
thunder-fuse, code generation), and thunder-fuse's own parts; "other" is the rest of the step
(running the programs, the prologue). --functions: interpretation's calls per layer by the
interpreted function running (a call of a module without hooks counts towards its caller:
runtime/module_calls.py; Module._call_impl shows for modules with hooks).
Needs no kernel cache (THUNDER_PROGRAM_CACHE=off is set: the program is compiled).
"""
import argparse
import json
import os
import subprocess
import sys


def _stages():
    """(module, attribute, stage name) of the functions wrapped to count their calls."""
    from thunder.lowering import autograd, fuse
    from thunder.runtime import autograd as runtime_autograd, backward_variants, compile as compiling

    stages = [(compiling, "_acquire", "interpretation"),
              (compiling, "_autograd_program", "forward: autograd program (rest)"),
              (compiling, "autograd_module", "forward: thunder-autograd (rest)"),
              (autograd, "split_forward_backward", "forward: thunder-autograd backpropagation"),
              (autograd, "emit_into", "forward: thunder-autograd @backward emission"),
              (autograd, "lift", "forward: thunder-autograd lifting"),
              (compiling, "remat_module", "forward: thunder-remat"),
              (compiling, "_cleanup", "forward: cse/canonicalize/verify"),
              (compiling, "fuse_module", "forward: thunder-fuse"),
              (compiling, "AutogradProgram", "forward: AutogradProgram"),
              (runtime_autograd, "python_source", "forward: code generation"),
              (runtime_autograd, "specialize_backward", "backward: compile (rest)"),
              (backward_variants, "fuse_module", "backward: thunder-fuse"),
              (backward_variants, "python_source", "backward: code generation")]
    for name in ("move_reshapes_across_conversions", "sink_reshapes", "sink_transposes", "_outline"):
        stages.append((fuse, name, f"thunder-fuse: {name}"))
    for name in ("__init__", "claim_key", "partition", "schedule"):
        stages.append((fuse._Graph, name, f"thunder-fuse: _Graph.{name}"))
    return stages


def count(layers, functions):
    """In the child process: {stage: calls} of the first step at this depth."""
    import torch
    from depth_llama import llama  # (the child's imports: torch is not imported by the parent)

    import thunder
    from thunder.interpreter import runtime as interpreter

    counts, native, running = {}, {}, ["other"]

    def wrapped(f, stage):
        def run(*args, **kwargs):
            running.append(stage)
            try:
                return f(*args, **kwargs)
            finally:
                running.pop()
        return run

    for owner, name, stage in _stages():
        setattr(owner, name, wrapped(getattr(owner, name), stage))
    if functions:
        interpret_function = interpreter.Runtime.interpret_function

        def interpreting(self, fn, args, kwargs):
            if running[-1].startswith("interpretation"):
                running.append(f"interpretation: {fn.__qualname__}")
                try:
                    return interpret_function(self, fn, args, kwargs)
                finally:
                    running.pop()
            return interpret_function(self, fn, args, kwargs)

        interpreter.Runtime.interpret_function = interpreting

    def profile(frame, event, arg):
        if event == "call":
            counts[running[-1]] = counts.get(running[-1], 0) + 1
        elif event == "c_call":
            native[running[-1]] = native.get(running[-1], 0) + 1

    model, ids = llama(layers)
    fn = thunder.jit(model)
    sys.setprofile(profile)
    try:
        loss = fn(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
    finally:
        sys.setprofile(None)
    expected = model(input_ids=ids, labels=ids, use_cache=False).loss
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-4)
    if hasattr(thunder, "wait_for_kernels"):
        thunder.wait_for_kernels()
    return counts, native


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, nargs=2, default=[2, 24])
    parser.add_argument("--functions", action="store_true", help="interpretation's calls by interpreted function")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(count(args.child, args.functions)))
        return
    env = dict(os.environ, THUNDER_PROGRAM_CACHE="off")
    found = []
    for layers in args.layers:
        command = [sys.executable, __file__, "--child", str(layers)] + (["--functions"] if args.functions else [])
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        found.append(json.loads(out.strip().splitlines()[-1]))
    (low, (a, a_native)), (high, (b, b_native)) = zip(args.layers, found)
    per_layer = {k: (b.get(k, 0) - a.get(k, 0)) / (high - low) for k in set(a) | set(b)}
    native = {k: (b_native.get(k, 0) - a_native.get(k, 0)) / (high - low) for k in set(a) | set(b)}
    print(f"calls per layer ({low} -> {high} layers), by stage: Python functions {sum(per_layer.values()):,.0f}, "
          f"native {sum(native.values()):,.0f} a layer")
    print(f"{'Python':>8} {'native':>8}  per layer; Python calls at {low} and {high} layers; stage")
    for k in sorted(per_layer, key=lambda k: -per_layer[k]):
        if abs(per_layer[k]) >= 1:
            print(f"{per_layer[k]:8,.0f} {native[k]:8,.0f}  {a.get(k, 0):9,} {b.get(k, 0):9,}  {k}")


if __name__ == "__main__":
    main()
