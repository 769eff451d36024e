"""What the parts of benchmarks/gpu/run.sh share: arguments (--out JSON, --dry-run), the device
(cuda; the CPU in a dry run), results written to JSON after every item (a part killed by its
timeout keeps what it did), timing with CUDA events."""
import argparse
import faulthandler
import json
import os
import platform
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "benchmarks"), os.path.join(ROOT, "tests")]

import torch  # noqa: E402

# regions of CUDA tensors -> the cuda executor, CPU ones -> linalg (docs/cuda.md)
EXECUTORS = ["cuda", "linalg", "torch"]


def parse(description, extra=None):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", required=True, help="the JSON file to write")
    ap.add_argument("--dry-run", action="store_true", help="on the CPU, tiny sizes (CI: the script cannot rot)")
    if extra:
        extra(ap)
    a = ap.parse_args()
    a.device = "cpu" if a.dry_run else "cuda"
    if not a.dry_run and not torch.cuda.is_available():
        sys.exit("no CUDA device (use --dry-run on a machine without one)")
    if not a.dry_run:  # eager's matmuls and convolutions in full f32, as thunder's kernels compute
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return a


def executors(a):
    return None if a.dry_run else EXECUTORS


class Results:
    """Items of one part: {name, ok, seconds, error?, ...details}; the JSON is rewritten after each."""

    def __init__(self, part, a):
        self.path, self.a = a.out, a
        self.doc = dict(part=part, dry_run=a.dry_run, device=a.device, torch=torch.__version__,
                        python=platform.python_version(), items=[], started=time.time())
        if a.device == "cuda":
            p = torch.cuda.get_device_properties(0)
            self.doc["gpu"] = dict(name=p.name, sms=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1))
        self.write()

    def run(self, name, fn):
        print(f"--- {name}", flush=True)
        t0 = time.perf_counter()
        item = dict(name=name)
        faulthandler.dump_traceback_later(60)  # where an item hangs: its stack in run.log after a minute
        try:
            item.update(fn() or {})
            item["ok"] = True
        except Exception as e:  # recorded; the part goes on with its next item
            traceback.print_exc()
            item.update(ok=False, error=f"{type(e).__name__}: {e}"[:3000])
        faulthandler.cancel_dump_traceback_later()
        item["seconds"] = round(time.perf_counter() - t0, 3)
        print(f"    {'ok' if item['ok'] else 'FAILED'} ({item['seconds']:.1f} s)"
              + ("" if item["ok"] else f": {item['error'][:300]}"), flush=True)
        self.doc["items"].append(item)
        self.write()
        return item

    def set(self, **fields):
        self.doc.update(fields)
        self.write()

    def write(self):
        self.doc["elapsed"] = round(time.time() - self.doc["started"], 1)
        with open(self.path + ".part", "w") as f:
            json.dump(self.doc, f, indent=1, default=str)
        os.replace(self.path + ".part", self.path)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def seconds(fn, device, reps=20, warmup=3):
    """Median seconds per call (CUDA events on the GPU)."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def close(actual, expected, dtype):
    """torch.testing.assert_close with the tolerance of a dtype's kernels against eager's."""
    tol = {torch.bfloat16: dict(rtol=3e-2, atol=3e-2), torch.float16: dict(rtol=3e-3, atol=3e-3)}.get(
        dtype, dict(rtol=1e-4, atol=1e-4))
    torch.testing.assert_close(actual, expected, equal_nan=True, **tol)
