"""Part `cpu` of benchmarks/gpu/run.sh (not in the default parts: GPU_RUN_PARTS=cpu): the device
machine's own CPU, another x86 CPU than the one CI and sessions run on (issue 27: "on any x86
CPU"). Runs benchmarks/realistic.py with 2 torch threads (the CI machine's count), float32 and
then under bf16 autocast, and records each row of its table (eager / torch.compile / thunder
medians) as an item; the CPU's name, family/model and ISA flags as the part's device.
Dry run: realistic.py --quick (tiny models, timings meaningless)."""
import os
import re
import subprocess
import sys
import time

from common import ROOT, Results, parse

ROW = re.compile(r"^\| (\S+) \| ([^|]+?) \| ([\d.]+) \| ([\d.]+|nan) \| ([\d.]+) \|")


def rows(text):
    """(model, workload, eager ms, torch.compile ms or None, thunder ms) of realistic.py's table
    (torch.compile's column is nan under --no-compile)."""
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            model, workload, eager, compiled, ours = m.groups()
            yield model, workload, float(eager), None if compiled == "nan" else float(compiled), float(ours)


def failed(p):
    raise RuntimeError(f"exit {p.returncode}: {p.stderr[-1500:]}")


def main():
    a = parse(__doc__, lambda ap: ap.add_argument("--budget", type=float, default=None,
                                                  help="seconds after which no further run starts"))
    res = Results("cpu", a)
    res.doc.pop("gpu", None)  # (the summary names the CPU)
    t0 = time.time()
    # GPU_RUN_CPU_RUNS: which runs ("f32 bf16"); GPU_RUN_CPU_FLAGS: more realistic.py flags
    runs = os.environ.get("GPU_RUN_CPU_RUNS", "f32 bf16").split()
    more = os.environ.get("GPU_RUN_CPU_FLAGS", "").split()
    for label, flags in (("f32", []), ("bf16 autocast", ["--bf16-autocast"])):
        if label.split()[0] not in runs:
            continue
        if a.budget is not None and time.time() - t0 > a.budget:
            res.set(left_out=f"the {label} run (budget)")
            break
        cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "realistic.py"), "--threads", "2",
               *(["--quick"] if a.dry_run else ["--rounds", "3"]), *flags, *more]
        print("$", " ".join(cmd), flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True)
        print(p.stdout + p.stderr[-4000:], flush=True)
        cpu = re.search(r"^CPU: (.*)$", p.stdout, re.M)
        if cpu:  # the name for the summary's lines, the whole description (ISA flags) in the JSON
            res.set(device=cpu.group(1).split(";")[0], cpu=cpu.group(1))
        if p.returncode:
            res.run(f"realistic.py {label}", lambda: failed(p))
            continue
        for model, workload, eager, compiled, ours in rows(p.stdout):
            times = {"eager": eager, "thunder": ours} | ({} if compiled is None else {"torch_compile": compiled})
            figures = dict(times_ms=times, thunder_vs_eager=eager / ours)
            if compiled is not None:
                figures["thunder_vs_compile"] = compiled / ours
            res.run(f"{model} {workload} ({label})", lambda f=figures: f)


if __name__ == "__main__":
    main()
