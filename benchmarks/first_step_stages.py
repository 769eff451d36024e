"""Where the first training step's compile time goes, against depth, with the kernels already in
the kernel cache (unlike benchmarks/compile_depth.py, which starts from an empty one): a
transformers LlamaForCausalLM of width 256 (labels given, so only the loss is backpropagated and
the logits get no gradient), one process per run. Prints the first forward call and the whole
first step in wall and CPU seconds (this process's CPU time: less disturbed by other load on the
machine than the wall clock), compile_stats' stages of the forward's compile and the backward's
compile (on the first backward call, runtime/autograd.py), the CPU model and the load average.

    THUNDER_PROGRAM_CACHE=off .venv/bin/python benchmarks/first_step_stages.py 24 [--profile out.prof] [--no-outline]

(--no-outline: the programs written without blocks for repeated statements, runtime/outline.py,
for an A/B; the lines of the forward and backward programs are printed either way.)

Run it twice per depth: the first run fills the kernel cache (it waits, untimed, for the kernels
still compiling in the background at its end).
"""
import argparse
import cProfile
import os
import time

import torch
from depth_llama import llama

import thunder
from thunder.runtime import outline


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("layers", type=int)
    parser.add_argument("--profile", help="write a cProfile of the first step to this file")
    parser.add_argument("--no-outline", action="store_true", help="programs without blocks (runtime/outline.py)")
    args = parser.parse_args()
    outline.ENABLED = not args.no_outline
    model, ids = llama(args.layers)
    fn = thunder.jit(model)
    profile = cProfile.Profile() if args.profile else None
    load = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), time.process_time()
    if profile:
        profile.enable()
    loss = fn(input_ids=ids, labels=ids, use_cache=False).loss
    fwd_wall, fwd_cpu = time.perf_counter() - wall, time.process_time() - cpu
    loss.backward()
    if profile:
        profile.disable()
        profile.dump_stats(args.profile)
    step_wall, step_cpu = time.perf_counter() - wall, time.process_time() - cpu
    stats = thunder.compile_stats(fn)
    expected = model(input_ids=ids, labels=ids, use_cache=False).loss
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-4)
    print(f"{args.layers} layers: first forward {fwd_wall:.2f} s (cpu {fwd_cpu:.2f}), "
          f"first step {step_wall:.2f} s (cpu {step_cpu:.2f}); load average {load:.1f} -> {os.getloadavg()[0]:.1f}")
    forward = next(t for t in thunder.last_traces(fn) if t.fn_name == "forward")
    backward = thunder.last_backward_traces(fn)[-1]
    print(f"  program lines (outlining {'on' if outline.ENABLED else 'off'}): "
          f"forward {len(str(forward).splitlines())}, backward {len(str(backward).splitlines())}")
    print("  forward's compile:", {k: round(v, 2) for k, v in stats.last_stage_times.items()})
    if hasattr(stats, "backward_compiles"):  # (versions that compile the backward with the forward lack it)
        print(f"  backward compiles: {stats.backward_compiles}, the last {stats.last_backward_compile_time:.2f} s")
    # (untimed: the kernels still compiling in the background are stored, so the next run has them all;
    # at exit they would be dropped)
    if hasattr(thunder, "wait_for_kernels"):
        thunder.wait_for_kernels()


if __name__ == "__main__":
    main()
