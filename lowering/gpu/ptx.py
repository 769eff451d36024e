"""gpu.module (NVVM target) -> LLVM IR -> PTX, and ptxas to check PTX without a GPU.

The MLIR passes are upstream ones (the torch-mlir wheel's). Its LLVM has no NVPTX backend, so
`gpu-module-to-binary` cannot run: the kernels' LLVM dialect is translated to LLVM IR
(`translate_module_to_llvmir`) and llvmlite's LLVM (NVPTX included) emits the PTX.

convert-gpu-to-nvvm lowers math ops to libdevice calls (`__nv_sqrtf`, ...), and libdevice is
not linked here. The ones that are single PTX instructions become LLVM intrinsics (`sqrt.rn`,
`fma.rn`, `cvt.rmi` ...); exp/tanh/erf/log never reach this point (lowering/linalg/approx.py
writes them as polynomials), and any other libdevice call is an error naming the kernel.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import struct
import subprocess
import tempfile

from thunder.dialects.mlir import ir, passmanager
from thunder.lowering.linalg.pipeline import keep_roundings
from thunder.lowering.linalg.scalar import UnsupportedOp

DEFAULT_CHIP = "sm_90"


def ptx_features(chip):
    """The PTX ISA version to write for a chip: 8.0 (CUDA 12.0 drivers) up to sm_90, 8.6 for
    sm_100 (CUDA 12.8), 8.7 beyond."""
    major = int(re.sub(r"\D", "", chip) or 0) // 10
    return "+ptx80" if major <= 9 else ("+ptx86" if major == 10 else "+ptx87")

# f16/bf16 computed in f32 with one rounding per op, as torch does (see lowering/linalg/pipeline.py)
LOW_FLOATS = [
    "gpu.module(gpu.func(math-extend-to-supported-types{target-type=f32}))",
    "gpu.module(gpu.func(arith-emulate-unsupported-floats{source-types=bf16,f16 target-type=f32}))",
]
NVVM_PIPELINE = [
    "gpu.module(canonicalize,cse,loop-invariant-code-motion)",
    # math ops convert-gpu-to-nvvm leaves (math.absi) have plain LLVM lowerings
    "gpu.module(convert-scf-to-cf,convert-gpu-to-nvvm,convert-math-to-llvm,canonicalize,reconcile-unrealized-casts)",
]

# libdevice functions that are one PTX instruction, as the LLVM intrinsics NVPTX lowers to it
LIBDEVICE_INTRINSICS = {
    "fma": "llvm.intr.fma", "sqrt": "llvm.intr.sqrt", "floor": "llvm.intr.floor",
    "ceil": "llvm.intr.ceil", "trunc": "llvm.intr.trunc", "rint": "llvm.intr.roundeven",
    "fabs": "llvm.intr.fabs", "copysign": "llvm.intr.copysign", "abs": "llvm.intr.abs",
    "llabs": "llvm.intr.abs",
}


def pipeline(chip=DEFAULT_CHIP):
    passes = [f"nvvm-attach-target{{chip={chip} features={ptx_features(chip)}}}"] + LOW_FLOATS + NVVM_PIPELINE
    return "builtin.module(" + ",".join(passes) + ")"


def lower_to_nvvm(module, chip=DEFAULT_CHIP, print_ir=False):
    """Run the pipeline on a module holding one gpu.module, in place. print_ir: print the IR
    after every pass (like mlir-opt's --mlir-print-ir-after-all) to stderr."""
    with module.context:
        stages = [[f"nvvm-attach-target{{chip={chip} features={ptx_features(chip)}}}"] + LOW_FLOATS, NVVM_PIPELINE]
        for i, passes in enumerate(stages):
            pm = passmanager.PassManager.parse("builtin.module(" + ",".join(passes) + ")")
            if print_ir:
                pm.enable_ir_printing()
            pm.run(module.operation)
            if i == 0:
                keep_roundings(module)
        _libdevice_to_intrinsics(module)
    return module


def _libdevice_to_intrinsics(module):
    calls, decls = [], []

    def visit(op):
        if op.name == "llvm.call" and "callee" in op.attributes:
            calls.append(op)
        elif op.name == "llvm.func" and ir.StringAttr(op.attributes["sym_name"]).value.startswith("__nv_"):
            decls.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in calls:
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        m = re.fullmatch(r"__nv_(\w+?)(f?)", callee)
        base = m and (m.group(1) + m.group(2) if m.group(1) + m.group(2) in LIBDEVICE_INTRINSICS else m.group(1))
        intr = LIBDEVICE_INTRINSICS.get(base) if m else None
        if intr is None:
            kernel = _enclosing_func(op)
            raise UnsupportedOp(f"kernel {kernel}: {callee} needs libdevice, which is not linked")
        with ir.InsertionPoint(op), op.location:
            attrs = {}
            if intr == "llvm.intr.abs":  # integer abs: is_int_min_poison = false
                attrs["is_int_min_poison"] = ir.BoolAttr.get(False)
            new = ir.Operation.create(intr, results=[r.type for r in op.results],
                                      operands=list(op.operands), attributes=attrs)
        op.results[0].replace_all_uses_with(new.results[0])
        op.erase()
    for d in decls:
        d.erase()


def _enclosing_func(op):
    p = op.parent
    while p is not None and p.name != "llvm.func":
        p = p.parent
    return ir.StringAttr(p.attributes["sym_name"]).value if p is not None else "?"


def llvm_ir(module) -> str:
    """LLVM IR of the (lowered) gpu.module's functions."""
    from torch_mlir.dialects import llvm as llvm_dialect  # heavy: the LLVM dialect's bindings, CUDA path only

    # the functions, printed once (printing ops one by one renumbers the whole module each time)
    lines = module.operation.get_asm(assume_verified=True).split("\n")
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("gpu.module @"))
    end = max(i for i, line in enumerate(lines) if line.rstrip() == "  }")
    with module.context:
        inner = ir.Module.parse("module {\n" + "\n".join(lines[start + 1:end]) + "\n}")
        left = []

        def visit(op):  # translating an op of another dialect would crash, not fail
            if op.name.split(".")[0] not in ("llvm", "nvvm", "builtin"):
                left.append(f"{op.name} in kernel {_enclosing_func(op)}")
            return ir.WalkResult.ADVANCE

        inner.operation.walk(visit)
        if left:
            raise UnsupportedOp(f"not lowered to LLVM: {', '.join(left[:5])}")
        return llvm_dialect.translate_module_to_llvmir(inner.operation)


# The bindings' LLVM prints float constants as the type's own bits (`f0x3727C5AC`), as inf/nan,
# or as the shortest decimal; llvmlite's LLVM reads 0x + the 64 bits of a double for float and
# double (a decimal float must be exact), 0xH/0xR + the bits for half/bfloat. The type is the
# last one named before the literal on its line.
_NEW_FLOAT = re.compile(r"(?<![\w%@.$])(?:f0x([0-9A-Fa-f]+)|([-+]?)(inf|qnan|snan|nan)(?:\(0x[0-9A-Fa-f]+\))?(?![\w.])"
                        r"|([-+]?\d+\.\d*e[-+]?\d+))")
_FLOAT_TYPE = re.compile(r"\b(half|bfloat|float|double)\b")


def _old_float(line):
    def repl(m):
        types = _FLOAT_TYPE.findall(line, 0, m.start())
        if m.group(1) is not None:
            t = types[-1] if types else {8: "float", 16: "double"}.get(len(m.group(1)))
            bits = int(m.group(1), 16)
            value = {"float": lambda: struct.unpack("<f", struct.pack("<I", bits))[0],
                     "double": lambda: struct.unpack("<d", struct.pack("<Q", bits))[0]}.get(t)
            if t in ("half", "bfloat"):
                return ("0xH" if t == "half" else "0xR") + "%04X" % bits
            value = value() if value else None
        elif m.group(4) is not None:
            t = types[-1] if types else None
            if t == "double":
                return m.group(4)
            value = struct.unpack("<f", struct.pack("<f", float(m.group(4))))[0]
        else:
            t = types[-1] if types else None
            value = float(("-" if m.group(2) == "-" else "") + ("inf" if m.group(3) == "inf" else "nan"))
        if t in ("float", "double"):
            return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]
        if t == "half":
            return "0xH%04X" % struct.unpack("<H", struct.pack("<e", value))[0]
        if t == "bfloat":
            return "0xR%04X" % (struct.unpack("<I", struct.pack("<f", value))[0] >> 16)
        raise UnsupportedOp(f"LLVM IR float literal {m.group(0)} of unknown type in: {line.strip()}")
    return _NEW_FLOAT.sub(repl, line)


def older_llvm_ir(text):
    """LLVM IR with the float literals llvmlite's parser reads."""
    return "\n".join(_old_float(line) if ("f0x" in line or "inf" in line or "nan" in line or "e+" in line
                                          or "e-" in line) and
                     not line.startswith((";", "declare", "attributes", "!", "source_filename")) else line
                     for line in text.split("\n"))


@functools.lru_cache(maxsize=None)
def _target_machine(chip):
    import llvmlite.binding as llvm  # optional (the cuda extra)

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple("nvptx64-nvidia-cuda")
    return target.create_target_machine(cpu=chip, features=ptx_features(chip), opt=3)


def ptx(llvm_ir_text, chip=DEFAULT_CHIP) -> str:
    """PTX for LLVM IR (llvmlite, LLVM -O3)."""
    import llvmlite.binding as llvm  # optional (the cuda extra)

    tm = _target_machine(chip)
    mod = llvm.parse_assembly(older_llvm_ir(llvm_ir_text))
    mod.triple = "nvptx64-nvidia-cuda"
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_assembly(mod)


class PtxasError(RuntimeError):
    """ptxas rejected PTX; kernels: the names of the kernels its errors point into."""

    def __init__(self, arch, kernels, log):
        self.arch, self.kernels, self.log = arch, kernels, log
        super().__init__(f"ptxas -arch={arch} rejected kernel(s) {', '.join(kernels) or '?'}:\n{log}")


def ptxas_path():
    return shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.path.exists("/usr/local/cuda/bin/ptxas") else None)


def ptxas(ptx_text, arch=DEFAULT_CHIP):
    """Assemble PTX with ptxas (validation without a GPU); raise PtxasError naming the kernels
    whose lines it rejects. Returns the cubin's size in bytes."""
    return start_ptxas(ptx_text, arch)()


def start_ptxas(ptx_text, arch=DEFAULT_CHIP):
    """ptxas started in the background (the caller goes on generating the next PTX); returns a
    function that waits for it and returns, or raises, what ptxas() does."""
    exe = ptxas_path()
    if exe is None:
        raise FileNotFoundError("ptxas not found (CUDA toolkit)")
    d = tempfile.TemporaryDirectory()
    src, out = os.path.join(d.name, "k.ptx"), os.path.join(d.name, "k.cubin")
    with open(src, "w") as f:
        f.write(ptx_text)
    proc = subprocess.Popen([exe, f"-arch={arch}", src, "-o", out], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

    def finish():
        try:
            _, err = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise PtxasError(arch, kernels_at(ptx_text, _error_lines(err)), err)
            return os.path.getsize(out)
        finally:
            d.cleanup()
    return finish


def _error_lines(log):
    return sorted({int(m) for m in re.findall(r"k\.ptx, line (\d+)", log)})


def kernels_at(ptx_text, line_numbers):
    """The `.entry` kernels containing these (1-based) lines of PTX."""
    entries = [(i + 1, m.group(1)) for i, line in enumerate(ptx_text.splitlines())
               if (m := re.match(r"\s*\.(?:visible\s+)?\.entry\s+(\w+)", line))]
    names = []
    for n in line_numbers:
        owner = None
        for start, name in entries:
            if start <= n:
                owner = name
        if owner and owner not in names:
            names.append(owner)
    return names
