"""`python -m thunder --version` / `--check`: thunder's version and what it runs on (torch, the
MLIR bindings, llvmlite for CUDA kernels, cuda-bindings, a CUDA device)."""
import argparse
import importlib.metadata
import sys

import torch


def version():
    try:
        return importlib.metadata.version("thunder-mlir")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was not installed
        return "unknown (not installed)"


def _distribution(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _importable(module):
    """None when `import module` works, else why not."""
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - reported, never raised: this is a diagnostic
        return f"{type(e).__name__}: {e}"
    return None


def check_lines():
    """The lines `python -m thunder --check` prints: (name, status) pairs; status starts with
    "ok" or "missing"/"unavailable"."""
    lines = [("thunder-mlir", version()), ("torch", torch.__version__)]
    mlir = _distribution("torch-mlir")
    failed = _importable("thunder.dialects.mlir")
    lines.append(("MLIR bindings (torch-mlir)",
                  f"ok {mlir}" if failed is None else f"unavailable ({failed})"))
    # the CUDA executor's optional dependencies (pip install 'thunder-mlir[cuda]')
    llvmlite = _distribution("llvmlite")
    lines.append(("llvmlite (CUDA kernels' PTX)", f"ok {llvmlite}" if llvmlite else
                  "missing (pip install 'thunder-mlir[cuda]')"))
    bindings = _distribution("cuda-bindings")
    lines.append(("cuda-bindings (CUDA kernel launches)", f"ok {bindings}" if bindings else
                  "missing (pip install 'thunder-mlir[cuda]')"))
    if torch.cuda.is_available():
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        lines.append(("CUDA", f"ok {torch.version.cuda}: {names}"))
    else:
        built = f"torch built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU build of torch"
        lines.append(("CUDA", f"unavailable ({built}, no device visible)"))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m thunder", description="Thunder on MLIR")
    parser.add_argument("--version", action="store_true", help="print thunder's version")
    parser.add_argument("--check", action="store_true",
                        help="print the versions of torch, the MLIR bindings, llvmlite and whether CUDA is available")
    args = parser.parse_args(argv)
    if args.check:
        lines = check_lines()
        width = max(len(name) for name, _ in lines)
        for name, status in lines:
            print(f"{name.ljust(width)}  {status}")
        # the CPU path needs torch and the MLIR bindings; the rest is optional
        return 0 if lines[2][1].startswith("ok") else 1
    if args.version:
        print(f"thunder-mlir {version()}")
        return 0
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
