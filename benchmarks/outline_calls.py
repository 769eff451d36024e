"""Outlined blocks (runtime/outline.py) against inline programs, A/B interleaved in one process
(A, B, B, A, ...) so load on the machine falls on both alike; medians:

- code generation: python_source of the forward and backward programs of a transformers
  LlamaForCausalLM's training step and Python's compile of the source (what a first call pays
  for the programs' text, outlined or not);
- a cached training step (forward and backward) with the programs compiled once with the
  blocks and once inline (the switch outline.ENABLED is read when a program is generated).

    .venv/bin/python benchmarks/outline_calls.py [--layers 4] [--rounds 30] [--only codegen|step]
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("THUNDER_PROGRAM_CACHE", "off")  # (both variants compiled here, not loaded)

from depth_llama import llama  # noqa: E402

import thunder  # noqa: E402
from thunder.lowering.fuse import fusion_callees, kernel_text  # noqa: E402
from thunder.runtime import outline  # noqa: E402
from thunder.runtime.codegen import python_source  # noqa: E402


def codegen_times(traces, rounds):
    """{on: [seconds of python_source + compile of every trace]} (traces: (Trace, func name))."""
    modules = []
    for trace, name in traces:
        module = trace.module()
        with module.context:
            texts = {c: kernel_text(f, c) for c, f in fusion_callees(module.operation).items()}
        modules.append((module, name, texts))
    times = {True: [], False: []}
    for r in range(rounds):
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            outline.ENABLED = on
            t0 = time.perf_counter()
            for module, name, texts in modules:
                compile(python_source(module, name, region_texts=texts), "<thunder>", "exec")
            times[on].append(time.perf_counter() - t0)
    outline.ENABLED = True
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--only", choices=("codegen", "step"))
    args = parser.parse_args()
    model, ids = llama(args.layers)

    def step(fn):
        loss = fn(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        return loss

    jitted = {}
    for on in (True, False):
        outline.ENABLED = on
        fn = jitted[on] = thunder.jit(model)
        for _ in range(2):  # (the forward and the backward compiled with the switch set so)
            model.zero_grad(set_to_none=True)
            step(fn)
        lines = [len(str(t).splitlines()) for t in (thunder.last_traces(fn)[-1], thunder.last_backward_traces(fn)[-1])]
        blocks = str(thunder.last_backward_traces(fn)[-1]).count("def _block_")
        print(f"outlining {'on ' if on else 'off'}: execution trace {lines[0]} lines, backward {lines[1]} lines, "
              f"{blocks} block(s) in the backward")
    fn = jitted[True]
    traces = [(next(t for t in thunder.last_traces(fn) if t.producer == "thunder-fuse (forward)"), "forward"),
              (thunder.last_backward_traces(fn)[-1], "backward")]
    if args.only != "step":
        times = codegen_times(traces, args.rounds)
        on, off = (statistics.median(times[k]) * 1e3 for k in (True, False))
        print(f"{args.layers} layers, python_source + compile of the forward and backward, median of {args.rounds}: "
              f"outlined {on:.1f} ms, inline {off:.1f} ms")
    if args.only == "codegen":
        return
    times = {True: [], False: []}
    for r in range(args.rounds):
        for on in ((True, False) if r % 2 == 0 else (False, True)):  # (A B B A: no side always first)
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            step(jitted[on])
            times[on].append(time.perf_counter() - t0)
    on, off = (statistics.median(times[k]) * 1e3 for k in (True, False))
    print(f"{args.layers} layers, training step (cached), median of {args.rounds} interleaved: "
          f"outlined {on:.2f} ms, inline {off:.2f} ms (ratio {on / off:.3f}); load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
