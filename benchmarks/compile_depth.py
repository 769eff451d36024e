"""First training step (forward + backward, compiles included) against depth: a transformers
Llama model (random weights, built from a config) of width 256 at 2, 8 and 24 layers, under
thunder.jit and torch.compile, each depth and compiler in a fresh process with a fresh, empty
kernel cache (THUNDER_KERNEL_CACHE; inductor's cache in a new TORCHINDUCTOR_CACHE_DIR). Prints
the CPU model and the load average (the times are wall clock), thunder's per-stage split
(compile_stats(fn).last_stage_times) and the kernels it compiled, and checks the loss against
eager. Kernels compile in the background while their regions run as torch calls (docs/fusion.md;
--sync: in the first call, THUNDER_KERNEL_COMPILE=sync): thunder's row also gives the regions run
as torch calls in the first step, a second step right after it, when the kernels were all ready
(seconds after the first step) and a warm step (with the kernels).

    .venv/bin/python benchmarks/compile_depth.py [--layers 2 8 24] [--width 256] [--no-compile] [--sync]
                                                 [--no-sharing]

--new-length: after the first step (64 tokens), a step at 40 tokens, where the default option
makes the length a symbol (the one recompile: a program for all lengths, compiled once with
its symbols, runtime/symbolic_program.py), and one at 52 (none), with the compile count, thunder
and torch.compile.

--second-process: thunder only; each depth runs in two processes one after the other sharing one
fresh cache folder, so the second's first call uses the program the first stored on disk
(thunder/runtime/persist.py; the kernels from the kernel cache). Prints both first calls (the
forward that compiles) and first steps (forward + backward), their ratio, a warm step of the
second process (the computing part of a step) and the second's stages.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def one_step(compiler, layers, width, threads, second_step=False):
    """In the child process: the first training step's seconds (wall and CPU) and details."""
    import torch
    from depth_llama import llama  # (the child's imports: torch is not imported by the parent)

    torch.set_num_threads(threads)
    model, ids = llama(layers, width)
    expected = model(input_ids=ids, labels=ids, use_cache=False).loss.item()
    model.zero_grad()
    if compiler == "thunder":
        import thunder

        if os.environ.get("COMPILE_DEPTH_NO_SHARING"):  # (--no-sharing)
            from thunder.lowering import decompose_reuse, vjp_reuse

            vjp_reuse.ENABLED = decompose_reuse.ENABLED = False
        fn = thunder.jit(model)
    else:
        fn = torch.compile(model)
    t0 = wall = time.perf_counter()
    cpu = time.process_time()
    loss = fn(input_ids=ids, labels=ids, use_cache=False).loss
    first_call = time.perf_counter() - wall
    loss.backward()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert abs(loss.item() - expected) <= 1e-4 * max(1.0, abs(expected)), (loss.item(), expected)
    row = dict(wall=wall, cpu=cpu, first_call=first_call)
    if compiler == "thunder":
        from thunder.lowering import linalg
        from thunder.runtime import persist

        row["stages"] = thunder.compile_stats(fn).last_stage_times
        row["torch_regions"] = len(thunder.compile_stats(fn).torch_while_compiling)
        row["programs"] = dict(persist.stats)
        if not second_step:  # the next steps: at once (kernels still compiling in the background
            # run as torch calls), then after the kernels are ready (runtime/tiered.py)
            model.zero_grad()
            t, c = time.perf_counter(), time.process_time()
            fn(input_ids=ids, labels=ids, use_cache=False).loss.backward()
            row["second_step"] = time.perf_counter() - t
            row["second_step_cpu"] = time.process_time() - c
            thunder.wait_for_kernels()
            row["kernels_ready"] = time.perf_counter() - t0 - wall
            model.zero_grad()
            fn(input_ids=ids, labels=ids, use_cache=False).loss.backward()  # (the kernels' first calls)
            second_step = True
        row["kernels"] = len(linalg.COMPILE_LOG)
        row["kernel_seconds"] = sum(s for _, s, how in linalg.COMPILE_LOG if how == "compiled")
        row["background_seconds"] = sum(s for _, s, how in linalg.COMPILE_LOG if how == "background")
        row["kernels_from_disk"] = sum(how == "disk" for _, _, how in linalg.COMPILE_LOG)
    if os.environ.get("COMPILE_DEPTH_NEW_LENGTH"):  # (--new-length) steps at two other lengths
        thunder_misses = (lambda: thunder.compile_stats(fn).cache_misses) if compiler == "thunder" else (lambda: None)
        for key, T in (("new_length", 40), ("third_length", 52)):
            short = ids[:, :T].contiguous()
            expected = model(input_ids=short, labels=short, use_cache=False).loss.item()
            model.zero_grad()
            t = time.perf_counter()
            loss = fn(input_ids=short, labels=short, use_cache=False).loss
            loss.backward()
            row[key] = time.perf_counter() - t
            assert abs(loss.item() - expected) <= 1e-4 * max(1.0, abs(expected)), (loss.item(), expected)
        row["misses"] = thunder_misses()
    if second_step:  # a step with everything compiled: the part of a first step that is computing
        model.zero_grad()
        t, c = time.perf_counter(), time.process_time()
        fn(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        row["warm_step"] = time.perf_counter() - t
        row["warm_step_cpu"] = time.process_time() - c
    return row


def run_child(compiler, layers, width, threads, cache=None, second_step=False):
    """The child's row; cache: the folder of its caches (default: a fresh one)."""
    if cache is None:
        with tempfile.TemporaryDirectory() as fresh:
            return run_child(compiler, layers, width, threads, fresh, second_step)
    env = dict(os.environ, THUNDER_KERNEL_CACHE=os.path.join(cache, "thunder"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"))
    env.pop("THUNDER_PROGRAM_CACHE", None)  # (the kernel cache's "programs" folder)
    cmd = [sys.executable, __file__, "--child", compiler, str(layers), "--width", str(width),
           "--threads", str(threads)] + (["--second-step"] if second_step else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def second_process(args):
    """Each depth: the same script in two processes one after the other, sharing one fresh cache
    folder (kernels and programs: thunder/runtime/persist.py); the second's first call uses the
    programs the first stored."""
    print("| layers | process 1: first call s | first step s | process 2: first call s | first step s | "
          "2 / 1 first call | 2 / 1 first step | warm step s | process 2 stages s | programs loaded |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for layers in args.layers:
        with tempfile.TemporaryDirectory() as cache:
            one = run_child("thunder", layers, args.width, args.threads, cache)
            two = run_child("thunder", layers, args.width, args.threads, cache, second_step=True)
        if "error" in one or "error" in two:
            print(f"| {layers} | error: {one.get('error') or two.get('error')} |")
            continue
        stages = ", ".join(f"{k} {v:.2f}" for k, v in two["stages"].items())
        print(f"| {layers} | {one['first_call']:.2f} | {one['wall']:.2f} | {two['first_call']:.2f} | "
              f"{two['wall']:.2f} | {two['first_call'] / one['first_call']:.0%} | {two['wall'] / one['wall']:.0%} | "
              f"{two['warm_step']:.2f} | {stages} | {two['programs']['loaded']} |", flush=True)


def both_rows(args, layers):
    """(thunder's row, torch.compile's or {} under --no-compile) of one depth, each in a fresh
    process; None, printed as an error row, where thunder's failed."""
    t = run_child("thunder", layers, args.width, args.threads)
    c = {} if args.no_compile else run_child("inductor", layers, args.width, args.threads)
    if "error" in t:
        print(f"| {layers} | error: {t['error']} |")
        return None
    return t, c


def new_length(args):
    """Each depth in a fresh process: the first step at 64 tokens, then a step at 40 (the default
    option makes the length a symbol: the one recompile, a program for all lengths fitted from
    three compiles, runtime/generalize.py; torch.compile's automatic dynamic alike), then at 52
    (no compile)."""
    os.environ["COMPILE_DEPTH_NEW_LENGTH"] = "1"
    print("| layers | thunder: first step s | 40 tokens s | 52 tokens s | compiles | torch.compile: first step s | "
          "40 tokens s | 52 tokens s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for layers in args.layers:
        rows = both_rows(args, layers)
        if rows is None:
            continue
        t, c = rows
        inductor = "- | - | -" if not c else (f"error: {c['error']} | |" if "error" in c else
                                             f"{c['wall']:.2f} | {c['new_length']:.2f} | {c['third_length']:.2f}")
        print(f"| {layers} | {t['wall']:.2f} | {t['new_length']:.2f} | {t['third_length']:.2f} | {t['misses']} | "
              f"{inductor} |", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8, 24])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--sync", action="store_true",
                        help="kernels compile in the first call (THUNDER_KERNEL_COMPILE=sync), not in the background")
    parser.add_argument("--second-process", action="store_true",
                        help="thunder only: first call in a second process, with the first's program cache")
    parser.add_argument("--no-sharing", action="store_true",
                        help="thunder: every VJP rule and decomposition run per op, none replayed from an identical "
                             "one (lowering/vjp_reuse.py, lowering/decompose_reuse.py): the time they save")
    parser.add_argument("--new-length", action="store_true",
                        help="after the first step, steps at two other lengths: the recompile for all lengths")
    parser.add_argument("--child", nargs=2, metavar=("COMPILER", "LAYERS"), help=argparse.SUPPRESS)
    parser.add_argument("--second-step", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sync:  # (the children inherit it)
        os.environ["THUNDER_KERNEL_COMPILE"] = "sync"
    if args.no_sharing:
        os.environ["COMPILE_DEPTH_NO_SHARING"] = "1"
    if args.child:
        print(json.dumps(one_step(args.child[0], int(args.child[1]), args.width, args.threads, args.second_step)))
        return
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.1f}")
    if args.second_process or args.new_length:
        print(f"Llama width {args.width}, batch 2 x 64 tokens, {args.threads} threads; wall s")
        (second_process if args.second_process else new_length)(args)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        return
    print(f"Llama width {args.width}, batch 2 x 64 tokens, {args.threads} threads, kernels compiled "
          f"{'in the first call' if args.sync else 'in the background'}; first training step, wall s (CPU s of "
          "the process); then a step at once, the wait for the kernels (s after the first step), a warm step")
    print("| layers | thunder s | x 2 layers | kernels compiled | kernel compile s (in the call / background) |"
          " regions via torch | 2nd step s | kernels ready s | warm step s | thunder stages s | torch.compile s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    base = None
    for layers in args.layers:
        rows = both_rows(args, layers)
        if rows is None:
            continue
        t, c = rows
        base = base or t["wall"]
        stages = ", ".join(f"{k} {v:.2f}" for k, v in t["stages"].items())
        inductor = "-" if not c else (f"error: {c['error']}" if "error" in c else f"{c['wall']:.2f} ({c['cpu']:.2f})")
        print(f"| {layers} | {t['wall']:.2f} ({t['cpu']:.2f}) | {t['wall'] / base:.2f} | {t['kernels']} | "
              f"{t['kernel_seconds']:.2f} / {t['background_seconds']:.2f} | {t['torch_regions']} | "
              f"{t['second_step']:.2f} ({t['second_step_cpu']:.2f}) | {t['kernels_ready']:.2f} | "
              f"{t['warm_step']:.2f} ({t['warm_step_cpu']:.2f}) | {stages} | {inductor} |",
              flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
