"""Calibrates the linalg executor's cost model (lowering/executors.py, CostModel; used by
thunder-fuse's worth_fusing) on this machine: prints the measured constants.

    .venv/bin/python benchmarks/cost_model.py [--threads 1]

- op_seconds: a torch op's fixed cost, as the generated program calls it: the best time of
  torch.add / torch.mul / torch.exp / torch.sum(dim) on 64-element tensors (the median of those);
- call_seconds: a fused kernel call's fixed cost (argument checks, output allocation, the ctypes
  call): a compiled region of the same ops on 64-element tensors, called as the program calls it;
- bytes_per_second: the bytes read and written per second by torch's memory-bound ops on tensors
  larger than the caches (x + y, x * 2, x.sum(-1) on 16 MiB float32 tensors: the median), with
  glibc keeping freed memory (no page faults in the measurement);
- element_seconds: per element, the compute of the math prims beyond a memory-bound op's time
  (torch.exp(x) against x * 2 on 256 Ki elements, in cache; a kernel of the prim against a
  kernel of x * 2), for torch and for our kernels (whose f32 polynomials differ from torch's);
- op_element_seconds: the same for torch's own kernel of an ltorch op (F.gelu, F.silu, softmax).

It then prints the cost model thunder uses in a process on this machine: the short probe of
lowering/cost_calibration.py (smaller tensors, fewer timings), or the file it stored, or the
fixed constants under THUNDER_COST_MODEL=fixed.
"""
import argparse
import ctypes
import statistics
import sys

_libc = ctypes.CDLL("libc.so.6")
_libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
_libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import thunder  # noqa: E402
from thunder.lowering import cost_calibration, executors  # noqa: E402
from thunder.lowering.linalg import compile_region  # noqa: E402
from timing import best_seconds  # noqa: E402


def region(fn, *args):
    jf = thunder.jit(fn, transforms=["thunder-decompose"], executors=["torch"])
    jf(*args)
    return str(thunder.last_traces(jf)[-2].to_mlir())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    small = [lambda: torch.add(x, y), lambda: torch.mul(x, y), lambda: torch.exp(x), lambda: torch.sum(x, -1)]
    op = statistics.median(best_seconds(f, number=2000, repeat=7) for f in small)
    kernel = compile_region(region(lambda x, y: (x * y + x).exp().sum(-1), x, y), "computation")
    call = best_seconds(lambda: kernel(x, y), number=2000, repeat=7)
    big_x, big_y = torch.randn(2048, 2048), torch.randn(2048, 2048)
    nbytes = big_x.numel() * 4
    big = [(lambda: big_x + big_y, 3 * nbytes), (lambda: big_x * 2, 2 * nbytes), (lambda: big_x.sum(-1), nbytes)]
    rate = statistics.median(moved / best_seconds(f, number=5, repeat=7) for f, moved in big)
    xs = torch.rand(512, 512) + 0.5  # (log's domain)
    ref_torch = best_seconds(lambda: xs * 2, number=50, repeat=7)
    ref_kernel_fn = compile_region(region(lambda x: x * 2, xs), "computation")
    ref_kernel = best_seconds(lambda: ref_kernel_fn(xs), number=50, repeat=7)
    elements = []
    for prim in ("exp", "tanh", "log", "log1p", "expm1", "erf"):
        fn = getattr(torch, prim)
        k = compile_region(region(fn, xs), "computation")
        on_torch = max(0.0, best_seconds(lambda: fn(xs), number=50, repeat=7) - ref_torch) / xs.numel()
        in_kernel = max(0.0, best_seconds(lambda: k(xs), number=50, repeat=7) - ref_kernel) / xs.numel()
        elements.append((f"thunder.{prim}", float(f"{on_torch:.2g}"), float(f"{in_kernel:.2g}")))
    # ltorch ops that torch runs as one kernel of its own: its math beyond x * 2's time
    op_elements = []
    for name, attrs, fn in (("ltorch.gelu", (("approximate", "tanh"),), lambda x: F.gelu(x, approximate="tanh")),
                            ("ltorch.gelu", (("approximate", "none"),), F.gelu), ("ltorch.silu", (), F.silu),
                            ("ltorch.softmax", (), lambda x: torch.softmax(x, -1))):
        on_torch = max(0.0, best_seconds(lambda: fn(xs), number=50, repeat=7) - ref_torch) / xs.numel()
        op_elements.append((name, attrs, float(f"{on_torch:.2g}")))
    gs = torch.randn(512, 512)  # a backward's two inputs: against x + y
    ref_binary = best_seconds(lambda: gs + xs, number=50, repeat=7)
    for approximate in ("tanh", "none"):
        fn = lambda: torch.ops.aten.gelu_backward(gs, xs, approximate=approximate)  # noqa: E731
        on_torch = max(0.0, best_seconds(fn, number=50, repeat=7) - ref_binary) / xs.numel()
        op_elements.append(("ltorch.gelu_backward", (("approximate", approximate),), float(f"{on_torch:.2g}")))
    print(f"torch threads {a.threads}")
    print(f"op_seconds      {op * 1e6:.2f} us")
    print(f"call_seconds    {call * 1e6:.2f} us")
    print(f"bytes_per_second {rate / 1e9:.1f} GB/s")
    for prim, on_torch, in_kernel in elements:
        print(f"{prim:16s} torch {on_torch * 1e9:.2f} ns/element, kernel {in_kernel * 1e9:.2f} ns/element")
    for name, attrs, on_torch in op_elements:
        print(f"{name} {dict(attrs)} torch {on_torch * 1e9:.2f} ns/element")
    print(f"CostModel({op:.2g}, {call:.2g}, {rate:.2g}, {tuple(elements)}, {tuple(op_elements)})")
    print(f"thunder uses (THUNDER_COST_MODEL={cost_calibration.mode()}): {executors.get('linalg').cost}")


if __name__ == "__main__":
    sys.exit(main())
