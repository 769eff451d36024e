"""Rewrite the torch-mlir wheel without what thunder never loads, so that it travels to a GPU
machine under the 64 MiB carry limit (benchmarks/gpu/prepare_wheels.sh), and check from the
file list alone (this machine's Python cannot load a cp312 wheel) that what thunder needs is kept.

    python slim_wheel.py IN.whl OUT_DIR        # writes OUT_DIR/<same name>.whl, prints its size

Dropped: the torch-mlir-opt binary, torch_mlir's PyTorch importers (fx, onnx, the torch and
stablehlo dialects and their extensions), tools/, and symbol tables of the shared libraries
(`strip --strip-unneeded`: dynamic symbols stay). Checked: every torch_mlir module thunder
imports (dialects/mlir.py, lowering/gpu/ptx.py: the MODULES below), followed through the imports
of the kept Python files, resolves to a kept file; every shared library a kept extension needs
(readelf -d NEEDED) is kept or a system library.
"""
import ast
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

# what thunder imports from torch_mlir (grep -rn torch_mlir dialects/ lowering/ thunder/ tools/)
MODULES = ["torch_mlir.ir", "torch_mlir.passmanager", "torch_mlir.execution_engine",
           *(f"torch_mlir.dialects.{d}" for d in ("arith", "ext", "func", "complex", "bufferization", "linalg",
                                                    "math", "memref", "tensor", "llvm", "gpu", "scf", "nvvm"))]
DROP = [r"torch_mlir/_mlir_libs/torch-mlir-opt$", r"torch_mlir/extras/(fx|onnx)_.*", r"torch_mlir/fx\.py$",
        r"torch_mlir/tools/", r"torch_mlir/compiler_utils\.py$", r"torch_mlir/_mlir_libs/_stablehlo\.",
        r"torch_mlir/_mlir_libs/_torchMlir\.", r"torch_mlir/dialects/(_)?(torch|stablehlo|chlo)",
        r"torch_mlir/dialects/_(rocdl|spirv|acc|omp|amdgpu|tosa|smt|shard|emitc)_"]
# what the manylinux_2_28 policy lets a wheel need from the system (the GPU image has them)
SYSTEM_LIBS = {"libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libstdc++.so.6",
               "libgcc_s.so.1", "ld-linux-x86-64.so.2", "libz.so.1"}


def kept(name):
    return not any(re.search(p, name) for p in DROP)


def _imports(path, module, is_pkg):
    """The absolute names of the torch_mlir modules a Python file imports."""
    tree = ast.parse(open(path, "rb").read())
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = ".".join(base[:len(base) - node.level + 1])
                target = parent + ("." + node.module if node.module else "")
            else:
                target = node.module
            out.append(target)
            out += [f"{target}.{a.name}" for a in node.names]  # (a submodule, or a name in it)
    return [m for m in out if m and m.startswith("torch_mlir")]


def check(root):
    """Errors (strings) for what thunder needs and the slimmed tree lacks."""
    errors, seen, todo = [], set(), list(MODULES)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        rel = os.path.join(root, *m.split("."))
        exts = [f for f in (os.listdir(os.path.dirname(rel)) if os.path.isdir(os.path.dirname(rel)) else [])
                if f.startswith(os.path.basename(rel) + ".") and f.endswith(".so")]
        if os.path.isfile(rel + ".py"):
            todo += _imports(rel + ".py", m, False)
        elif os.path.isfile(os.path.join(rel, "__init__.py")):
            todo += _imports(os.path.join(rel, "__init__.py"), m, True)
        elif exts or os.path.isdir(rel):
            pass  # an extension module, or a namespace package
        elif m in MODULES:
            errors.append(f"{m}: imported by thunder, not in the slimmed wheel")
        # else: `from pkg import name` of a name that is no module
    libs = os.path.join(root, "torch_mlir", "_mlir_libs")
    for f in sorted(os.listdir(libs)):
        if ".so" not in f:
            continue
        out = subprocess.run(["readelf", "-d", os.path.join(libs, f)], capture_output=True, text=True).stdout
        for need in re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out):
            if need not in SYSTEM_LIBS and not os.path.exists(os.path.join(libs, need)):
                errors.append(f"{f} needs {need}, which is not kept")
    return errors


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def slim(src, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    dst = os.path.join(out_dir, os.path.basename(src))
    tmp = tempfile.mkdtemp(prefix="slim-wheel-")
    try:
        records = []
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst + ".part", "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
            for info in zin.infolist():
                name = info.filename
                if name == record_name or not kept(name) or name.endswith("/"):
                    continue
                data = zin.read(name)
                if ".so" in os.path.basename(name):
                    path = os.path.join(tmp, name)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "wb") as f:
                        f.write(data)
                    subprocess.run(["strip", "--strip-unneeded", path], check=True)
                    data = open(path, "rb").read()
                else:  # the tree check() reads
                    path = os.path.join(tmp, name)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "wb") as f:
                        f.write(data)
                zi = zipfile.ZipInfo(name, info.date_time)
                zi.external_attr, zi.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
                zout.writestr(zi, data, compresslevel=9)
                records.append(_record_line(name, data))
            records.append(f"{record_name},,")
            zout.writestr(record_name, "\n".join(records) + "\n")
        errors = check(tmp)
        if errors:
            os.remove(dst + ".part")
            sys.exit("slimmed wheel lacks what thunder needs:\n  " + "\n  ".join(errors))
        os.replace(dst + ".part", dst)
    finally:
        shutil.rmtree(tmp, True)
    print(f"{dst}: {os.path.getsize(dst) / 2**20:.1f} MiB (from {os.path.getsize(src) / 2**20:.1f} MiB)")
    return dst


if __name__ == "__main__":
    slim(sys.argv[1], sys.argv[2])
