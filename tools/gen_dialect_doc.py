"""Writes docs/dialect.md from the op registry: `python -m thunder.tools.gen_dialect_doc`.
tests/test_docs.py fails when the file is out of date."""
import inspect
import os
import sys

from thunder.core import dtypes
from thunder.dialects.definitions import attribute_params, operand_params
import thunder.ops  # noqa: F401  (registers every op)
from thunder.ops import registry

HEADER = """# The ltorch and thunder dialects

Generated from the op registry (`thunder/ops/`) by `python -m thunder.tools.gen_dialect_doc`;
do not edit by hand.

Each op is an IRDL operation. Tensor and number parameters are operands (numbers are
`arith.constant` values of type i64, f64 or i1, complex numbers `complex.constant` values of type
complex<f64>), the other parameters are attributes (ints as i64, int tuples as `array<i64: ...>`,
dtypes as types, memory formats as strings (`"channels_last"`), None as `unit`). A tensor list
(`Tensors`) and the results of ops returning several tensors are variadic groups, each holding a
run of tensors of one type (`operandSegmentSizes`, `resultSegmentSizes`): IRDL binds one type per
variadic definition. A list with more runs than an op has groups is emitted as a chain of the same
op on parts of it for `cat`, `stack` and `split` (dialects/lists.py), so their lists have any
length. Any other op takes and returns lists of any length packed: where a list has more runs than
its groups, the op takes its first runs and one `!thunder.list` value, made by a `thunder.pack` op
of the next runs and the list of the rest; its results likewise end in a `!thunder.list` that
`thunder.unpack` ops unpack (dialects/lists.py). An op with attributes that may hold sizes (kinds
int, Ints, Dims, Index) has a last operand group `dynamic_sizes` of `index` values: an attribute
entry -9223372036854775808 (MLIR's dynamic size) takes the next of them, as in traces with
symbolic sizes (dialects/sizes.py, `?` dims). Ops are Pure (CSE and DCE apply) unless marked
random. The verifier runs the meta function on the operand types and attributes and checks the
result types; an op whose operands are all static tensors or constants verifies once per process
per signature (name, attributes, operand and result types, constant values): the same op
repeated (N layers of one block) and every later verification of it reuse the answer.

- `ltorch`: one op per PyTorch function; the torch executor runs it as shown. `ltorch.torch_call`
  is any other torch call (thunder's fallback, see docs/architecture.md): it runs as the callable
  its `callable` attribute names.
- `thunder`: primitives that `thunder-decompose` lowers ltorch ops into.
"""

DTYPES_NOTE = """
## Element types

Tensor types are `tensor<...x{type}>` with these element types. The float8 and float4 types
(FP8/FP4 recipes) are carried by every op that moves, views or selects data (views, `cat`,
`clone`, `where`, `*_like`, comparisons and `abs` as torch has them) and cast by `impl.to` /
`thunder.convert_element_type` (torch's rounding and out-of-range results, run as torch calls:
lowering/fuse.py never fuses them); `ltorch.view_dtype` reads the bits as another dtype. Arithmetic
and reductions on them raise torch's own errors where torch has no kernel, and they do not
promote with other dtypes (torch's RuntimeError). `float4_e2m1fn_x2` holds two e2m1 values per
element.
"""


def _signature(op):
    parts = []
    for p in op.params:
        s = f"{p.name}: {p.kind.name}"
        if p.has_default:
            s += f" = {p.default!r}"
        parts.append(s)
    kw = next((i for i, p in enumerate(op.params) if p.kw_only), None)
    if kw is not None:
        parts.insert(kw, "*")
    return ", ".join(parts)


def _dtype_table():
    lines = [DTYPES_NOTE, "| torch dtype | MLIR element type |", "| --- | --- |"]
    lines += [f"| `{d}` | `{name}` |" for d, name in dtypes.mlir_names().items()]
    return lines


def render():
    lines = [HEADER, *_dtype_table()]
    for dialect in ("ltorch", "thunder"):
        ops = sorted((o for o in registry.OPS.values() if o.dialect == dialect), key=lambda o: o.name)
        lines.append(f"\n## {dialect} ({len(ops)} ops)\n")
        lines.append("| op | signature | operands | attributes | runs as | decomposes | notes |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- |")
        for op in ops:
            notes = []
            if op.random:
                notes.append("random")
            if op.is_view:
                notes.append("view")
            if not op.differentiable:
                notes.append("no gradient")
            if op.methods:
                notes.append("methods: " + ", ".join(op.methods))
            if op.dunders or op.rdunders:
                notes.append("operators: " + ", ".join(op.dunders + op.rdunders))
            lines.append(
                f"| `{op.qualname}` | `{_signature(op)}` | {', '.join(p.name for p in operand_params(op)) or '-'} "
                f"| {', '.join(p.name for p in attribute_params(op)) or '-'} | `{op.torch_name}` "
                f"| {'yes' if op.decomposition else 'no'} | {'; '.join(notes)} |")
    return "\n".join(lines) + "\n"


def doc_path():
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(inspect.getfile(registry)))),
                        "..", "docs", "dialect.md")


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.normpath(doc_path())
    with open(path, "w") as f:
        f.write(render())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
