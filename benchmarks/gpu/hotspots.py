"""Part (e) of benchmarks/gpu/run.sh: where a jitted step spends its time on the device. For the
GPT block's bf16 training step and a large cross-entropy: the median seconds of warm steps, the
execution traces thunder runs (forward and backward), torch.profiler's top ops by CPU and by
device time over several steps (after one profiled step: the profiler's own first-call setup
otherwise tops the CPU table), and cProfile's top Python functions by own time over 20 steps:
where the host's time goes when the step is not bound by the device (the sixth H200 run's GPT
block step took 3.9 ms for 1.8 ms of device work). Dry run: the CPU, tiny sizes."""
import cProfile
import io
import pstats
import time

from common import Results, executors, parse, sync

import torch

import thunder


def profile(a, fn, args, training):
    jf = thunder.jit(fn, executors=executors(a))
    leaves = [t for t in args if isinstance(t, torch.Tensor) and t.requires_grad]

    def step():
        out = jf(*args)
        if training:
            out.float().sum().backward()
            for t in leaves:
                t.grad = None
        sync(a.device)

    step()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    warm = sorted(times)[len(times) // 2]
    traces = "\n\n".join(str(t) for t in thunder.last_traces(jf)[-1:])
    if training:
        traces += "\n\n" + "\n\n".join(str(t) for t in thunder.last_backward_traces(jf)[-1:])
    activities = [torch.profiler.ProfilerActivity.CPU]
    if a.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities):
        step()
    with torch.profiler.profile(activities=activities) as p:
        for _ in range(5):
            step()
    ka = p.key_averages()
    cpu_top = ka.table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=70)
    dev_top = ka.table(sort_by="self_cuda_time_total" if a.device == "cuda" else "cpu_time_total", row_limit=20,
                       max_name_column_width=70)
    cp = cProfile.Profile()
    cp.enable()
    for _ in range(20):
        step()
    cp.disable()
    text = io.StringIO()
    pstats.Stats(cp, stream=text).sort_stats("tottime").print_stats(25)
    python_top = text.getvalue()[-6000:]
    print(traces[-15000:], cpu_top, dev_top, python_top, sep="\n", flush=True)
    return dict(warm_step_s=warm, profiled_steps=5, traces=traces[-30000:], cpu_top=cpu_top, device_top=dev_top,
                python_top_20_steps=python_top)


def main():
    a = parse(__doc__)
    res = Results("hotspots", a)
    from gpt_block import gpt_block, make_inputs
    import fusion

    size = (8, 1024, 1024, 16) if not a.dry_run else (2, 16, 32, 4)
    gpt = [t.detach().to(a.device, torch.bfloat16).requires_grad_() for t in make_inputs(*size[:3])] + [size[3]]
    res.run("gpt block training step bfloat16", lambda: profile(a, gpt_block, gpt, True))
    n, v = (2048, 32000) if not a.dry_run else (16, 64)
    ce = [torch.randn(n, v, device=a.device), torch.randint(0, v, (n,), device=a.device)]
    res.run(f"cross-entropy {n}x{v} f32", lambda: profile(a, fusion.cross_entropy, ce, False))


if __name__ == "__main__":
    main()
