"""thunder-opt: run MLIR pass pipelines on traces in the ltorch and thunder dialects.

    thunder-opt trace.mlir --pass-pipeline='builtin.module(thunder-decompose,cse,canonicalize)'
    cat trace.mlir | thunder-opt - --pass-pipeline='builtin.module(cse)'
    thunder-opt --list-passes
    thunder-opt trace.mlir --pass-pipeline='builtin.module(thunder-decompose,thunder-fuse{policy=always})' --to-ptx=sm_90
"""
import argparse
import io
import sys

from thunder.dialects.definitions import context
from thunder.dialects.mlir import ir
from thunder.lowering.fuse import fusion_callees, region_text
from thunder.lowering.linalg.scalar import UnsupportedOp
from thunder.lowering.linalg.tiling import row_major_strides
from thunder.lowering.linalg.to_linalg import lower_region, signature
from thunder.lowering.passes import build_pass_manager, list_passes
from thunder.runtime.codegen import python_source, Unprintable
from thunder.lowering.gpu import module_ptx, region_kernels


def _parser():
    p = argparse.ArgumentParser(prog="thunder-opt", description=__doc__.splitlines()[0])
    p.add_argument("input", nargs="?", default="-", help="MLIR file, or - for stdin (default)")
    p.add_argument("--pass-pipeline", default="", help="e.g. 'builtin.module(thunder-decompose,cse)'")
    p.add_argument("--list-passes", action="store_true", help="list thunder's passes and exit")
    p.add_argument("--split-input-file", action="store_true",
                   help="treat '// -----' lines as separators of independent inputs")
    p.add_argument("--mlir-print-debuginfo", action="store_true", help="print locations")
    p.add_argument("--to-python", action="store_true",
                   help="print each func as the Python program thunder would run")
    p.add_argument("--to-linalg", action="store_true",
                   help="print each fusion region (thunder-fuse's @fusion_N) as the linalg func its CPU "
                        "kernel is compiled from (contiguous inputs)")
    p.add_argument("--to-gpu", action="store_true",
                   help="print each fusion region's CUDA kernels: the gpu.module (one gpu.func per launch, "
                        "its schedule in thunder.launch) before the NVVM lowering (contiguous inputs)")
    p.add_argument("--to-ptx", nargs="?", const="sm_90", default=None, metavar="ARCH",
                   help="print the PTX of each fusion region's CUDA kernels for ARCH (default sm_90); "
                        "needs llvmlite (the cuda extra)")
    p.add_argument("--mlir-print-ir-after-all", action="store_true",
                   help="print the IR after every pass to stderr (the pass pipeline, and with --to-ptx the "
                        "gpu.module's lowering to NVVM)")
    p.add_argument("-o", dest="output", default="-", help="output file (default stdout)")
    return p


def run_one(text, args, out):
    filename = args.input if args.input != '-' else '<stdin>'
    with context():
        try:
            module = ir.Module.parse(text)
            if args.pass_pipeline:
                pm = build_pass_manager(args.pass_pipeline)
                if args.mlir_print_ir_after_all:
                    pm.enable_ir_printing()
                pm.run(module.operation)
        except ir.MLIRError as e:
            print(_format_error(e, filename), file=sys.stderr)
            return False
        except ValueError as e:  # an unknown pass or a malformed pipeline
            print(f"thunder-opt: {e}", file=sys.stderr)
            return False
        if args.to_gpu or args.to_ptx:
            return _gpu(module, args, out)
        if args.to_linalg:
            for name, callee in fusion_callees(module.operation).items():
                text = region_text(callee)
                try:
                    _, ins, _ = signature(text, name)
                    strides = [row_major_strides(t.shape) for t in ins]
                    out.write(f"// {name}\n" + lower_region(text, name, strides).text)
                except UnsupportedOp as e:
                    print(f"{_where(callee.location, filename)}: error: @{name} has no linalg form: {e}",
                          file=sys.stderr)
                    return False
        elif args.to_python:
            for op in module.body.operations:
                if op.operation.name == "func.func":
                    name = ir.StringAttr(op.attributes["sym_name"]).value
                    try:
                        out.write(python_source(module, fn_name=name))
                    except Unprintable as e:
                        print(f"{_where(e.location, filename)}: error: cannot print @{name} as Python: {e}",
                              file=sys.stderr)
                        return False
        else:
            out.write(module.operation.get_asm(enable_debug_info=args.mlir_print_debuginfo))
            out.write("\n")
    return True


def _gpu(module, args, out):
    """--to-gpu / --to-ptx: each fusion region's kernels, with their launch configurations."""
    ok = True
    for name, callee in fusion_callees(module.operation).items():
        try:
            kernels = region_kernels(region_text(callee), name, prefix=f"{name}_k")
            if args.to_gpu:
                out.write(f"// {name}\n{kernels.module}")
            if args.to_ptx:
                out.write(f"// {name}: PTX for {args.to_ptx}\n")
                for launch in kernels.launches:
                    out.write(f"// launch {launch.name}: {launch.describe()}\n")
                out.write(module_ptx(kernels.module, args.to_ptx, print_ir=args.mlir_print_ir_after_all))
        except (UnsupportedOp, ImportError) as e:
            print(f"thunder-opt: {name}: {e}", file=sys.stderr)
            ok = False
    return ok


def _format_error(e, filename):
    """MLIR's diagnostic format: file:line:col: error: message."""
    lines = []
    for d in getattr(e, "error_diagnostics", []) or []:
        lines.append(f"{_where(d.location, filename)}: error: {d.message}")
        for n in d.notes:
            lines.append(f"{_where(n.location, filename)}: note: {n.message}")
    return "\n".join(lines) if lines else str(e)


def _where(loc, filename):
    try:
        f = ir.FileLineColLoc(loc)
        name = filename if f.filename in ("-", "") else f.filename
        return f"{name}:{f.start_line}:{f.start_col}"
    except (ValueError, TypeError):
        return str(loc)


def split_input(text):
    """Chunks separated by lines that are just `// -----`, as mlir-opt does; each chunk is
    padded with the newlines before it so diagnostics keep the file's line numbers."""
    chunks, current, start = [], [], 0
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.strip() == "// -----":
            chunks.append("\n" * start + "\n".join(current))
            current, start = [], i + 1
        else:
            current.append(line)
    chunks.append("\n" * start + "\n".join(current))
    return chunks


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.list_passes:
        print("thunder passes (usable in --pass-pipeline with any upstream MLIR pass):")
        for name, description in list_passes().items():
            print(f"  {name:24s} {description}")
        return 0
    try:
        data = sys.stdin.buffer.read() if args.input == "-" else open(args.input, "rb").read()
    except OSError as e:
        print(f"thunder-opt: cannot read {args.input}: {e.strerror}", file=sys.stderr)
        return 1
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - data.rfind(b"\n", 0, e.start)
        print(f"{args.input if args.input != '-' else '<stdin>'}:{line}:{col}: error: not UTF-8 text "
              f"(byte 0x{data[e.start]:02x})", file=sys.stderr)
        return 1
    chunks = split_input(text) if args.split_input_file else [text]
    # collected first, so that -o names a file only once there is something to write to it
    out = io.StringIO()
    ok = True
    try:
        for i, chunk in enumerate(chunks):
            if i:
                out.write("// -----\n")
            ok = run_one(chunk, args, out) and ok
    except Exception as e:  # a bug in a pass or printer: one line, not a traceback
        print(f"thunder-opt: internal error (please report it with this input): {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.write(out.getvalue())
        sys.stdout.flush()
    else:
        try:
            with open(args.output, "w") as f:
                f.write(out.getvalue())
        except OSError as e:
            print(f"thunder-opt: cannot write {args.output}: {e.strerror}", file=sys.stderr)
            return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
