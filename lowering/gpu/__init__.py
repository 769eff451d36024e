"""CUDA kernels for regions of thunder prims: region -> linalg on tensors -> GPU schedule ->
gpu.module (NVVM) -> LLVM IR -> PTX, and their launch on torch's CUDA streams.

    kernels = region_kernels(region_text, "fusion_0")     # Kernels: gpu.module text + launches
    text = ptx_for(region_text, "fusion_0", chip="sm_90")  # PTX of every kernel of the region
    k = compile_region(region_text, "fusion_0"); outs = k(*cuda_tensors)   # launch.py

- lowering/linalg/to_linalg.py (untiled) writes the region as linalg on tensors, with the same
  scalar code as the CPU kernels (f16/bf16 in f32, polynomial exp/tanh/erf/log);
- graph.py reads that linalg back as a graph of values;
- schedule.py picks each kernel's schedule (elementwise with vector loads, a block per row with
  cooperative reductions, or a loop per reduced element) and builder.py writes its gpu.func;
- ptx.py lowers the gpu.module with upstream passes (convert-gpu-to-nvvm) and emits PTX through
  llvmlite (needs the `cuda` extra: `pip install thunder-mlir[cuda]`);
- launch.py loads PTX with cuda.bindings.driver and launches on torch.cuda.current_stream().

A region's device is in its tensor types (`tensor<4x8xf32, "cuda:0">`); kernels do not depend
on it, so a CPU-typed region compiles to the same PTX.
"""
from __future__ import annotations

from dataclasses import dataclass

from thunder.dialects.mlir import ir
from thunder.lowering.gpu.graph import read_graph
from thunder.lowering.gpu.schedule import Launch, plan  # noqa: F401
from thunder.lowering.linalg.scalar import UnsupportedOp  # noqa: F401
from thunder.lowering.linalg.tiling import row_major_strides
from thunder.lowering.linalg.to_linalg import lower_region, parse_region
from thunder.lowering.gpu import ptx, ptx as ptx_module
from thunder.lowering.gpu.ptx import lower_to_nvvm
from thunder.lowering.linalg.runtime import torch_dtype


@dataclass
class Kernels:
    """The kernels of one region: `module` (MLIR text: a gpu.module @kernels holding one gpu.func
    per launch) and `launches` (in order)."""
    module: str
    launches: list
    out_shapes: list
    out_dtypes: list


def host_types(text: str, name: str | None = None) -> str:
    """The region with its tensor types' device encodings dropped: kernels are the same for
    every device, and lowering/linalg reads CPU-typed regions."""
    ctx, module = parse_region(text)
    with ctx, ir.Location.unknown():
        def plain(t):
            if isinstance(t, ir.RankedTensorType):
                rt = ir.RankedTensorType(t)
                if rt.encoding is not None:
                    return ir.RankedTensorType.get(rt.shape, rt.element_type)
            return t

        def visit(op):
            for r in op.results:
                r.set_type(plain(r.type))
            for region in op.regions:
                for block in region.blocks:
                    for a in block.arguments:
                        a.set_type(plain(a.type))
            if op.name == "func.func":
                ft = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
                op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
                    [plain(t) for t in ft.inputs], [plain(t) for t in ft.results]))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        return module.operation.get_asm(enable_debug_info=False, assume_verified=True)


def region_kernels(text: str, name: str | None = None, input_strides=None, aligned=None,
                   prefix="k") -> Kernels:
    """The kernels computing the region's outputs. input_strides: per input, the element strides
    it will be called with (default contiguous); aligned: the inputs whose data pointer is
    16-byte aligned (default all), which may be read with vector loads."""
    linalg_text = lower_region(host_types(text), name, tile=False, out_name="kernel", merge_reductions=False).text
    ctx, module = parse_region(linalg_text)
    with ctx:
        graph = read_graph(module)
        if input_strides is None:
            input_strides = [row_major_strides(x.shape) for x in graph.inputs]
        if aligned is None:
            aligned = range(len(graph.inputs))
        kernels = plan(graph, [list(s) for s in input_strides], aligned, prefix)
        funcs = [b.func(launch.name, len(launch.outputs), attrs=f", thunder.launch = \"{launch.describe()}\"")
                 for b, launch in kernels]
    text = ("module attributes {gpu.container_module} {\n  gpu.module @kernels {\n" + "\n".join(funcs)
            + "\n  }\n}\n")
    return Kernels(text, [launch for _, launch in kernels], [x.shape for x in graph.outputs],
                   [torch_dtype(x.elt) for x in graph.outputs])


def lower_module(module_text: str, chip="sm_90", print_ir=False):
    """(context, module) of a gpu.module text lowered to the LLVM dialect with NVVM."""
    ctx = ir.Context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(module_text)
        lower_to_nvvm(module, chip, print_ir=print_ir)
    return ctx, module


def module_ptx(module_text: str, chip="sm_90", print_ir=False) -> str:
    """PTX of every kernel of a gpu.module text."""
    ctx, module = lower_module(module_text, chip, print_ir)
    with ctx:
        return ptx.ptx(ptx.llvm_ir(module), chip)


def ptx_for(text: str, name: str | None = None, chip="sm_90", print_ir=False) -> str:
    return module_ptx(region_kernels(text, name).module, chip, print_ir)


class KernelError(RuntimeError):
    """Kernels of a batch failed to compile; kernels: their names, labels: name -> label."""

    def __init__(self, kernels, labels, cause):
        self.kernels, self.labels = kernels, labels
        named = ", ".join(f"{k} ({labels.get(k, '?')})" for k in kernels) or "?"
        super().__init__(f"kernel(s) {named} failed: {cause}")


class Batch:
    """The kernels of many regions in one gpu.module, compiled to one PTX file and assembled by
    one ptxas call per architecture (thunder-opt --to-ptx, the tests). A failure names the
    kernels it comes from, with the label each region was added with."""

    def __init__(self):
        self.funcs, self.labels = {}, {}
        self.regions = 0

    def add(self, text, name=None, label=None, prefix=None):
        """Add the kernels of a region, named <prefix>k0, ... (default prefix r<N>_)."""
        prefix = (prefix or f"r{self.regions}_") + "k"
        self.regions += 1
        kernels = region_kernels(text, name, prefix=prefix)
        funcs = _split_funcs(kernels.module)
        for launch, f in zip(kernels.launches, funcs):
            self.funcs[launch.name] = f
            self.labels[launch.name] = label or name
        return kernels

    def __len__(self):
        return len(self.funcs)

    def module(self, names=None):
        funcs = [self.funcs[n] for n in (names or self.funcs)]
        return ("module attributes {gpu.container_module} {\n  gpu.module @kernels {\n" + "\n".join(funcs)
                + "\n  }\n}\n")

    def ptx(self, chip="sm_90"):
        try:
            return module_ptx(self.module(), chip)
        except Exception as e:  # find the kernels that fail on their own
            bad = []
            for n in self.funcs:
                try:
                    module_ptx(self.module([n]), chip)
                except Exception:
                    bad.append(n)
            raise KernelError(bad, self.labels, e) from e

    def check(self, archs=("sm_80", "sm_90")):
        """PTX for each architecture, assembled by ptxas; {arch: PTX}."""
        out, running, errors = {}, [], []
        try:
            for arch in archs:  # (ptxas assembles one architecture's while the next one's is generated)
                out[arch] = self.ptx(arch)
                running.append(ptx_module.start_ptxas(out[arch], arch))
        finally:
            for finish in running:  # each waited for (and its files removed), also after an error
                try:
                    finish()
                except ptx_module.PtxasError as e:
                    errors.append(e)
        if errors:
            raise KernelError(errors[0].kernels, self.labels, errors[0]) from errors[0]
        return out


def _split_funcs(module_text):
    """The gpu.func texts of a module written by region_kernels."""
    lines = module_text.split("\n")
    funcs, current = [], None
    for line in lines:
        if line.startswith("    gpu.func "):
            current = [line]
        elif current is not None:
            current.append(line)
            if line == "    }":
                funcs.append("\n".join(current))
                current = None
    return funcs
