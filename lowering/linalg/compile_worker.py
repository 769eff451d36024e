"""The process that compiles kernels in the background (lowering/linalg/background.py).

Run as a script (`python compile_worker.py <dialects/mlir.py> <linalg/pipeline.py>`), never
imported: it loads those two modules by path, so it starts without torch or the thunder package
(~0.5 s instead of ~4 s). Each line on stdin is a JSON job {"id", "text" (a kernel's linalg),
"loops", "opt_level", "obj" (where to write the object file)}; for each it runs the same pipeline
and LLVM code generation as an in-process compile (pipeline.lower_to_llvm, ExecutionEngine) and
writes the object code, then answers one JSON line {"id", "ok", "error", "seconds"}. It exits at
the end of stdin (the parent closed it, or died).

It runs at the lowest scheduling priority: on a machine with few cores it would otherwise take a
core from the caller's torch threads (which spin-wait for each other) while the caller runs the
regions as torch calls; measured on 2 cores, a 24-layer Llama's first training step 3.1 -> 2.5 s.
"""
import importlib.util
import json
import os
import sys
import time


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (what pipeline.py imports, by the name it imports)
    spec.loader.exec_module(module)
    return module


def compile_job(mlir, pipeline, job):
    ctx = mlir.ir.Context()
    with ctx, mlir.ir.Location.unknown():
        module = mlir.ir.Module.parse(job["text"])
        pipeline.lower_to_llvm(module, job["loops"])
    engine = mlir.ExecutionEngine(module, opt_level=job["opt_level"])
    if not engine.raw_lookup("_mlir_ciface_kernel"):  # (also makes LLVM generate the code)
        raise RuntimeError("no _mlir_ciface_kernel in the compiled module")
    engine.dump_to_object_file(job["obj"])


def main(mlir_path, pipeline_path):
    if hasattr(os, "nice"):
        os.nice(19)
    mlir = _load("thunder.dialects.mlir", mlir_path)
    pipeline = _load("thunder.lowering.linalg.pipeline", pipeline_path)
    print(json.dumps({"id": None, "ok": True, "error": None, "seconds": 0.0}), flush=True)  # ready
    for line in sys.stdin:
        job = json.loads(line)
        t0 = time.perf_counter()
        try:
            compile_job(mlir, pipeline, job)
            reply = {"ok": True, "error": None}
        except Exception as e:  # noqa: BLE001 - reported to the parent, which runs the region as torch calls
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        reply.update(id=job["id"], seconds=time.perf_counter() - t0)
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
