"""Fusion executors, by name: which regions each one claims and how it runs them.

thunder-fuse (fuse.py) asks an executor which prims it can run (`supports`) on tensors of its
device, and whether a region is worth a kernel (`cost`, `runs_well`); it tags the outlined func
with `thunder.executor = "<name>"`, and codegen (runtime/codegen.py) binds each `fusion_N` to
`executor.compile(region_text, name)`. Executors import their compilers lazily: nothing CUDA is
imported for the CPU path.

| name      | device | regions become                                                     |
| linalg    | cpu    | native CPU kernels (lowering/linalg)                               |
| cuda      | cuda   | CUDA kernels: gpu.module -> PTX, launched with cuda.bindings (lowering/gpu) |
| nvfuser   | cuda   | nvFuser FusionDefinitions (lowering/gpu/nvfuser.py)                |
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from thunder.dialects.emit import WIDENED
from thunder.dialects.mlir import ir
from thunder.lowering.gpu import launch as gpu_launch
from thunder.lowering.linalg.scalar import POW_SPECIAL, supported, widened_math
from thunder.lowering.gpu import nvfuser, region_kernels
from thunder.lowering import cost_calibration
from thunder.lowering.linalg import compile_region
from thunder.lowering.linalg.dynamic_region import DynamicRegion, has_dynamic_sizes
from thunder.lowering.linalg.to_linalg import lower_region, to_linalg


@dataclass(frozen=True)
class CostModel:
    """Seconds of a torch op's fixed cost (dispatch, launch), of a kernel call's, and the bytes
    per second both move (policy "auto" in fuse.worth_fusing)."""
    op_seconds: float
    call_seconds: float
    bytes_per_second: float
    # ((prim, torch's seconds per element, a kernel's), ...): the math whose compute, not memory
    # traffic, sets the time (exp, erf, ...), for ops that compute it (ltorch ops: in their
    # decomposition)
    element_seconds: tuple = ()
    # ((ltorch op, ((attribute, value), ...) it has, torch's seconds per result element), ...):
    # the math of torch's own kernel of an ltorch op beyond its memory traffic (F.gelu's tanh form)
    op_element_seconds: tuple = ()


@dataclass(frozen=True)
class Executor:
    name: str
    device: str  # "cpu" or "cuda": the device of the tensors of the regions it claims
    fixed_cost: CostModel  # the built-in constants (see `cost`)
    compile: Callable  # (region text, func name) -> callable(*tensors) -> tuple of outputs
    supports: Callable  # (thunder prim operation) -> whether it can run inside a region
    accepts: Callable  # (region text, name) -> whether it compiles the region (checked before keeping it)
    runs_well: Callable = None  # (region text, name) -> whether policy auto keeps it as it is
    require: Callable = None  # () -> None, or raise ImportError naming what is missing
    takes_numbers: bool = False  # whether its regions take runtime numbers (scalar f64/i64 inputs)
    dynamic_sizes: bool = False  # whether it compiles regions with `?` dims (its compile's own kernel for all sizes)
    calibrate: Callable = None  # (fixed_cost) -> the cost model measured on this machine, or None: fixed_cost
    # whether runs_well is only about tiling by rows, so that a kernel moving fewer bytes than a
    # torch op's fixed cost takes (`tiny`) runs as well untiled (linalg; not cuda, whose
    # runs_well rejects nested reduction loops at any size)
    tiny_untiled: bool = False

    def tiny(self, nbytes) -> bool:
        """Whether a kernel moving nbytes runs as well untiled as tiled: where tiny_untiled, its
        memory traffic takes less time than one torch op's fixed cost, so any op given to torch
        to make it tile (a head view, a broadcast sibling kept apart) costs more than tiling
        could save (a decode step's rotary embedding of one token)."""
        if not self.tiny_untiled:
            return False
        cost = self.cost
        return nbytes / cost.bytes_per_second < cost.op_seconds

    @property
    def cost(self) -> CostModel:
        """The cost model policy "auto" uses: measured on this CPU where the executor calibrates
        (linalg: cost_calibration.py; one per process), else the fixed constants."""
        return self.fixed_cost if self.calibrate is None else self.calibrate(self.fixed_cost)


LIBM_CALLS = {"thunder.sin", "thunder.cos", "thunder.atan2", "thunder.pow"}
# f64 math without polynomials (approx.py), but where the op is marked widened (dialects/emit.py
# WIDENED: a float32 op's decomposition computing in f64 to round once, whose math needs f32's
# accuracy only) and the prim has an f64 polynomial for that
NO_F64 = {"thunder.exp", "thunder.tanh", "thunder.erf", "thunder.log", "thunder.log1p", "thunder.expm1",
          "thunder.log2", "thunder.log10"}


def widened(operation):
    return WIDENED in operation.attributes and widened_math(operation.name)


def is_number(v):
    owner = v.owner
    return isinstance(owner, ir.OpView) and owner.operation.name == "arith.constant" and \
        not isinstance(v.type, ir.ShapedType)


def number_value(v):
    attr = v.owner.attributes["value"]
    return ir.FloatAttr(attr).value if isinstance(attr, ir.FloatAttr) else ir.IntegerAttr(attr).value


def nonzero_number(v):
    if not is_number(v):
        return False
    try:
        return ir.IntegerAttr(v.owner.attributes["value"]).value != 0
    except ValueError:
        return False


def kernel_prim(operation) -> bool:
    """Whether a prim has a kernel lowering (lowering/linalg, shared by the linalg and cuda
    executors) without libm calls or integer division by a tensor."""
    name = operation.name
    if not supported(name):
        return False
    elt = str(ir.RankedTensorType(operation.results[0].type).element_type)
    is_int = elt.startswith("i")
    if name == "thunder.pow" and (is_int or (is_number(operation.operands[1]) and
                                             number_value(operation.operands[1]) in POW_SPECIAL)):
        pass  # integer pow, x ** 2, x ** 0.5, ...: multiplications or a sqrt, no libm call
    elif name in LIBM_CALLS or (name in NO_F64 and elt == "f64" and not widened(operation)):
        return False
    if name == "thunder.div" and is_int and not nonzero_number(operation.operands[1]):
        return False  # torch raises ZeroDivisionError for x / 0, which a kernel cannot
    return True


_VERIFY_CONTEXT = None


def _verifies(text):
    global _VERIFY_CONTEXT

    if _VERIFY_CONTEXT is None:
        _VERIFY_CONTEXT = ir.Context()
    with _VERIFY_CONTEXT:
        ir.Module.parse(text)


def _linalg_accepts(text, name):
    """Whether the region lowers to linalg that MLIR accepts (parsed and verified)."""
    try:
        _verifies(to_linalg(text, name))
        return True
    except Exception:  # e.g. a prim on a type the lowering does not take (sin of an int tensor)
        return False


@functools.lru_cache(maxsize=64)
def _cuda_kernels(text, name):
    return region_kernels(text, name)


def _cuda_accepts(text, name):
    """Whether the region's kernels are written and their gpu.module verifies."""
    try:
        _verifies(_cuda_kernels(text, name).module)
        return True
    except Exception:
        return False


LOOP_THREADS_MIN = 1024  # a kernel looping over reduced elements needs this many threads to fill a GPU
# and loops of at most this many elements: each iteration waits for its load (about 0.4 us on an
# H200: a bias gradient's column sum over 8192 rows took 3.4 ms in 4096 threads, torch's 20 us)
LOOP_LENGTH_MAX = 64


def _cuda_runs_well(text, name):
    """Whether no kernel of the region has a thread loop over a reduction inside another's loop
    (recomputed per iteration: a layer norm's row statistics inside its backward's column sums), a
    loop over reduced elements in fewer than LOOP_THREADS_MIN threads (cross-entropy's mean in
    one thread) or over more than LOOP_LENGTH_MAX elements (a bias gradient's sum over the rows).
    On an H200 such kernels took 200 ms, 9.5 s and 3.4 ms where torch took under 1 ms, 1 ms and
    20 us; policy auto then gives the region's tail to torch, or the whole region."""
    k = _cuda_kernels(text, name)
    return all(launch.nested == 0 and (launch.schedule != "loops" or (launch.count(k.out_shapes) >= LOOP_THREADS_MIN
                                                                      and launch.longest_loop <= LOOP_LENGTH_MAX))
               for launch in k.launches)


_DYNAMIC_REGIONS = {}  # (text, name) -> DynamicRegion


def _compile_linalg(text, name, sizes=()):
    if has_dynamic_sizes(text):  # (thunder-fuse on a trace with dynamic sizes)
        key = (text, name)
        if key not in _DYNAMIC_REGIONS:
            _DYNAMIC_REGIONS[key] = DynamicRegion(text, name)
        return _DYNAMIC_REGIONS[key]
    return compile_region(text, name, sizes=sizes)


def _linalg_tiles(text, name):
    return lower_region(text, name).rows is not None


def _compile_cuda(text, name):
    return gpu_launch.compile_region(text, name)


def _require_cuda():
    try:
        import llvmlite  # noqa: F401
    except ImportError as e:
        raise ImportError("thunder: the cuda executor needs llvmlite to generate PTX: "
                          "pip install 'thunder-mlir[cuda]'") from e


def _nvfuser(attr):
    def f(*args):
        return getattr(nvfuser, attr)(*args)
    return f


EXECUTORS: dict[str, Executor] = {}


def register(executor: Executor):
    EXECUTORS[executor.name] = executor
    return executor


# measured by benchmarks/cost_model.py on this project's 2-core CPU machines (docs/fusion.md; the
# constants used unless THUNDER_COST_MODEL=fixed are measured on the CPU at hand instead, see
# cost_calibration.py): a
# torch op 1.1 us, a kernel call 5 us, 50 GB/s (torch's memory-bound ops on 16 MiB, one thread),
# the math prims' compute per element (torch's SLEEF functions, our f32 polynomials), and that of
# torch's own kernels of a few ltorch ops
_LINALG_MATH = (("thunder.exp", 5.8e-10, 1.3e-10), ("thunder.tanh", 2.2e-09, 5.6e-11),
                ("thunder.log", 7.6e-10, 1.7e-10), ("thunder.log1p", 4.5e-10, 2.6e-10),
                ("thunder.expm1", 6.8e-10, 1.4e-10), ("thunder.erf", 1e-09, 2.7e-10),
                ("thunder.log2", 7.6e-10, 1.7e-10), ("thunder.log10", 7.6e-10, 1.7e-10))  # (log2, log10: as log)
# (torch's erf GELU, its backward and silu measure 0.13-0.32 ns: left out, as counting them fuses
# bias + erf GELU on 1024x256, whose kernel (erf polynomial) is 1.4x slower than torch's). softmax:
# 0.32-0.37 ns (its exps); without it a softmax's math counted on the kernel's side only, and a
# CPU measuring more than ~120 GB/s (2 threads, a 4 MiB tensor in L3) left x * 0.125 + mask then
# softmax on 64x128x128 to torch at eager's speed (0.8x torch.compile's) where the kernel is 1.1x
_LINALG_OP_MATH = (("ltorch.gelu", (("approximate", "tanh"),), 1.2e-9),
                   ("ltorch.gelu_backward", (("approximate", "tanh"),), 1.2e-9),
                   ("ltorch.softmax", (), 3.5e-10))
register(Executor("linalg", "cpu", CostModel(1.1e-6, 5e-6, 5e10, _LINALG_MATH, _LINALG_OP_MATH), _compile_linalg,
                  kernel_prim,
                  _linalg_accepts,
                  _linalg_tiles, takes_numbers=True, dynamic_sizes=True, calibrate=cost_calibration.cost_model, tiny_untiled=True))
# a CUDA torch op costs its launch (~5 us of CPU time; GPU time hides behind it for small
# tensors), one of our kernels a Python-level launch (~8 us); an H100 moves ~2.5 TB/s
register(Executor("cuda", "cuda", CostModel(5e-6, 8e-6, 2.5e12), _compile_cuda, kernel_prim, _cuda_accepts,
                  _cuda_runs_well, require=_require_cuda))
register(Executor("nvfuser", "cuda", CostModel(5e-6, 10e-6, 2.5e12), _nvfuser("compile_region"),
                  _nvfuser("supports"), _nvfuser("accepts"), require=_nvfuser("require")))


def get(name) -> Executor:
    try:
        return EXECUTORS[name]
    except KeyError:
        raise ValueError(f"thunder: unknown executor {name!r}; expected one of "
                         f"{', '.join(map(repr, EXECUTORS))}") from None


def of_region(func_op) -> Executor:
    """The executor a fusion callee is tagged with."""
    return get(ir.StringAttr(func_op.attributes["thunder.executor"]).value)
