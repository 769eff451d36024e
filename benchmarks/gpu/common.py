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


def close(actual, expected, dtype, reference=None):
    """thunder's result `actual` against eager's `expected`.

    With `reference`, the same computation in float64 from the same inputs: each one's error
    against it, thunder's at most eager's own (x2 in root mean square, x4 at the worst element:
    a wrong element is off by far more) plus ULPS units of the dtype's rounding at the size of
    the numbers (an element's, or the tensor's rms where that is larger: the terms of a
    cancelling sum). Eager's error is the allowance because it is the accuracy eager gets in
    that dtype: a bf16 column sum of 4096 rows whose inputs eager rounds differs from thunder's
    by many bf16 units at its small elements, both as far from float64 (the first device run's
    layer norm weight grad); an SDPA backward as f32 matmuls differs from eager's fused kernel
    the same way. Positions where eager or float64 are not finite must match eager's exactly.
    Without a reference: torch.testing.assert_close with the dtype's fixed tolerance."""
    if reference is None or not expected.is_floating_point():
        tol = {torch.bfloat16: dict(rtol=3e-2, atol=3e-2), torch.float16: dict(rtol=3e-3, atol=3e-3)}.get(
            dtype, dict(rtol=1e-4, atol=1e-4))
        torch.testing.assert_close(actual, expected, equal_nan=True, **tol)
        return
    assert actual.shape == expected.shape == reference.shape, (actual.shape, expected.shape, reference.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    a, e, r = (t.detach().to(torch.float64) for t in (actual, expected, reference))
    finite = torch.isfinite(e) & torch.isfinite(r)
    torch.testing.assert_close(a[~finite], e[~finite], equal_nan=True, rtol=0, atol=0)
    a, e, r = a[finite], e[finite], r[finite]
    if not r.numel():
        return
    err_t, err_e = (a - r).abs(), (e - r).abs()
    rms = lambda t: t.square().mean().sqrt()  # noqa: E731
    unit = ULPS * torch.finfo(expected.dtype).eps
    bound = 4 * err_e.max() + unit * torch.maximum(r.abs(), rms(r))
    bad = ~(err_t <= bound)  # (NaN in thunder's result included)
    if bad.any():
        i = int(bad.nonzero()[0])
        raise AssertionError(
            f"{int(bad.sum())} of {r.numel()} elements further from float64 than 4x eager's worst error "
            f"({err_e.max().item():.3g}) + {ULPS} units of {expected.dtype}: first at flat index {i}: thunder "
            f"{a[i].item():.6g}, eager {e[i].item():.6g}, float64 {r[i].item():.6g}")
    if not rms(err_t) <= 2 * rms(err_e) + unit * rms(r):
        raise AssertionError(f"root mean square error against float64 {rms(err_t).item():.3g}, more than twice eager's "
                             f"({rms(err_e).item():.3g}) + {ULPS} units of {expected.dtype}")


ULPS = 4  # (the dtype's units of rounding allowed on top of eager's error: close())
