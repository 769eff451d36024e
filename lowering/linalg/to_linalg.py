"""thunder prims -> linalg on tensors, as MLIR text (scalar semantics of each prim: scalar.py).

The input is a `func.func` whose body holds `thunder.*` prims (generic form, as printed by
`Trace.to_mlir()` after `thunder-decompose`) and the `arith.constant` numbers they take. It is
parsed in its own context with unregistered dialects allowed, so this module does not depend on
the IRDL definitions; each prim is rewritten into text:

- elementwise prims: one `linalg.generic` with identity maps (numbers become constants inside
  the body, operands are converted to the op's compute type in the body);
- `thunder.broadcast_in_dim`: a `linalg.generic` that only reads its input through a projected
  map (`(d0, d1) -> (d1)`, `(d0, d1) -> (d0, 0)` for size-1 dims); elementwise fusion folds it
  into the consumer's indexing map;
- `thunder.sum/amax/amin/prod`: `linalg.fill` of the identity, then a `linalg.generic` with
  reduction iterators (f16/bf16 accumulate in f32);
- `thunder.reshape`: `tensor.collapse_shape` / `tensor.expand_shape` (through rank 1), or in a
  tile (or with dynamic sizes, each kept a dim of its own) a gather through floordiv/mod maps;
  one merging or splitting dynamic sizes collapses and expands the dims between those kept;
- `thunder.transpose`: a permuted input map; `thunder.slice`: `tensor.extract_slice`;
  `thunder.cat`: `tensor.insert_slice` of each input into a `tensor.empty`.

The generated func is destination-passing: outputs are extra `memref` arguments that the results
are materialized into, and the func returns nothing. `llvm.emit_c_interface` gives it a
`_mlir_ciface_<name>` entry.

Tiling (`tiling`): when all results share their first dim and every op can be computed on a
slice of rows of it (no op reduces over it or reshapes across it; operands without it, such as a
broadcast weight, are read whole), the func takes memrefs whose tiled dim is dynamic plus a row
range (lo, hi), and loops over tiles of `tile_rows` rows (inputs + outputs of a tile are about
TILE_BYTES, so a tile's intermediates stay in the L1 cache): each tile is a `memref.subview` of the
inputs, read as tensors, computed, and written into a subview of the outputs. Values read whole
are computed once before the loop. A runtime can give each thread its own row range. Otherwise
the func takes tensors (with a `bufferization.buffer_layout` describing the torch strides they
will be called with) and computes the whole region at once.

The walk over a region and the func around it are here; the per-prim lowerings and the _Emitter
are in op_lowering.py, the tiling analysis in tiling.py, TensorT and the affine maps in
types_and_maps.py.
"""
from __future__ import annotations

import itertools
import math as _pymath
from fractions import Fraction

from thunder.dialects.mlir import ir
from thunder.lowering.linalg import lowered_cache
from thunder.lowering.linalg.bf16_intermediates import keep_bf16_in_f32
from thunder.lowering.linalg.op_lowering import (_constant, _Emitter, _lower_op, _Parts, _reduction_init,
                                                 _reduction_with_operand, _scalar_param, NUMBERS, wide_sum)
from thunder.lowering.linalg.scalar import ELEMENTWISE, elt_bytes, UnsupportedOp
from thunder.lowering.linalg.tiling import (_operand_axes, _static_shape, _subview, MIN_PIECE_BYTES,
                                            PIECES_TILE_BYTES, row_major_strides, TILE_BYTES, tiling,
                                            WHOLE)
from thunder.lowering.linalg.types_and_maps import _dim, tensor_t


def strided_layout(shape, strides):
    """The memref layout for a tensor with these torch strides (offset 0: we pass the pointer
    to the first element as the aligned pointer)."""
    if strides is None:
        return "strided<[" + ", ".join("?" for _ in shape) + "], offset: ?>"
    return "strided<[" + ", ".join(_dim(s) for s in strides) + "]>"  # (None: a dynamic stride)


def find_func(module: ir.Module, name: str | None):
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if name is not None:
        for f in funcs:
            if ir.StringAttr(f.attributes["sym_name"]).value == name:
                return f
    if len(funcs) == 1:
        return funcs[0]
    raise ValueError(f"no func.func @{name} in the region")


_PARSE_CONTEXT = None


def parse_region(text: str) -> tuple[ir.Context, ir.Module]:
    """The region parsed in a context shared by all regions (creating one costs ~5 ms)."""
    global _PARSE_CONTEXT
    if _PARSE_CONTEXT is None:
        _PARSE_CONTEXT = ir.Context()
        _PARSE_CONTEXT.allow_unregistered_dialects = True
    with _PARSE_CONTEXT:
        return _PARSE_CONTEXT, ir.Module.parse(text)


def signature(text, name=None):
    """(func name, [input TensorT], [output TensorT]) of the region's func (name None: the
    module's only func)."""
    ctx, module = parse_region(text)
    with ctx:
        f = find_func(module, name)
        ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
        return (ir.StringAttr(f.attributes["sym_name"]).value,
                [tensor_t(t) for t in ftype.inputs], [tensor_t(t) for t in ftype.results])


class Lowered:
    """A region as linalg text. Tiled (rows is not None): the func takes two more arguments,
    the first and last row (lo, hi: index) of the outputs' first dim to compute, looping over
    tiles of `tile_rows` rows; input i is sliced along axes[i] (None: read whole). With dynamic
    sizes (lower_region's `dynamic`): sizes_at, {name: (argument, dim)} where the kernel reads
    each (arguments: inputs, then outputs); out_shapes, the outputs' shapes (ints and names);
    rows_size, the tiled rows (an int or a name); size_values, {name: the size it was here}."""

    def __init__(self, text, rows=None, tile_rows=None, axes=None, sizes_at=None, out_shapes=None, rows_size=None,
                 size_values=None):
        self.text, self.rows, self.tile_rows, self.axes = text, rows, tile_rows, axes
        self.sizes_at, self.out_shapes, self.rows_size = sizes_at, out_shapes, rows_size
        self.size_values = size_values


def lower_region(text: str, name: str, input_strides=None, approx_math=True, tile=True,
                 out_name=None, prefer=(), merge_reductions=True, dynamic=()) -> Lowered:
    """Rewrite the region's func into a destination-passing linalg func @out_name (default
    name).

    input_strides: per input, the element strides it will be called with (a static layout),
    or None for a fully dynamic strided layout. approx_math: f32 exp/tanh/... as polynomials
    (approx.py) instead of libm calls. tile: loop over tiles of rows when the region allows it
    (`tiling`); the tiled axis has a dynamic size in the func's types, so the kernel does not
    depend on the number of rows. prefer: sizes to tile along first (see tiling).
    merge_reductions: an elementwise result used again after its first user, a reduction, is
    computed in that reduction's pass (_generic_and_reduction), one-hot picks read by one
    load a row (pick.py) and a sum of everything reduces rows first (two_step_sum): the CPU
    kernel's forms (the CUDA kernel writer reads neither multi-result generics nor
    tensor.extract in a body, and reduces a whole sum in a block's tree).
    dynamic: sizes (ints above 1) that the kernel reads from its arguments' sizes at run time
    wherever a dim has one of them, rather than writing them into its code (a kernel family's
    changing sizes: runtime/symbolic.py), so that its code serves every size; each is read from
    the first argument with such a dim, or where none has it computed from those read
    (_derived_size: a reshape's B * T); UnsupportedOp where an op needs it as a number."""
    key = _memo_key(text, name, out_name, input_strides, approx_math, tile, prefer, merge_reductions, dynamic)
    if key is None:
        return _lower_region(text, name, input_strides, approx_math, tile, out_name, prefer, merge_reductions,
                             dynamic)
    found = _LOWERED.get(key)
    if found is not None:
        STATS["hits"] += 1
        return found
    # (a region lowered by an earlier process: read from the kernel cache directory)
    lowered = Lowered(**lowered_cache.load_or_lower(
        key, lambda: _lower_region(text, name, input_strides, approx_math, tile, out_name, prefer, merge_reductions,
                                   dynamic)))
    if len(_LOWERED) >= _LOWERED_MAX:
        _LOWERED.clear()
    _LOWERED[key] = lowered
    return lowered


# lowered regions by region text (its func named @region) and options: a model's N identical
# layers make N regions (fusion_3, fusion_27, ...) that lower to one text when the lowered func
# is named out_name, not after the region
_LOWERED = {}
_LOWERED_MAX = 4096
STATS = {"hits": 0}  # lower_region calls answered from _LOWERED (tests)


def _memo_key(text, name, out_name, input_strides, approx_math, tile, prefer, merge_reductions, dynamic):
    """lower_region's key in _LOWERED, None where it has none (strides in lists)."""
    if f"@{name}(" in text and "@region(" not in text:  # (else the text as it is)
        text = text.replace(f"@{name}(", "@region(", 1)
    key = (text, out_name or name, input_strides, approx_math, tile, tuple(prefer), merge_reductions)
    if dynamic:  # (the key as before where none: kernels lowered by earlier processes)
        key += (tuple(sorted(dynamic)),)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _lower_region(text, name, input_strides, approx_math, tile, out_name, prefer, merge_reductions, dynamic=()):
    ctx, module = parse_region(text)
    with ctx:
        f = find_func(module, name)
        block = f.regions[0].blocks[0]
        keep_bf16_in_f32(block)
        syms = _dynamic_sizes(block, dynamic)
        tiled = tiling(block, prefer, by_size=not syms) if tile else None
        if tiled is None:
            return _untiled(block, out_name or name, input_strides, approx_math, merge_reductions, syms)
        return _tiled(block, out_name or name, input_strides, approx_math, merge_reductions, *tiled, syms=syms)


def _dynamic_sizes(block, dynamic):
    """{size: SSA name} of the sizes in `dynamic` that the block's values have, named in the
    order they first appear (so regions that differ only in these sizes name them alike)."""
    dynamic = {s for s in dynamic if s > 1}
    syms = {}
    if not dynamic:
        return syms
    values = list(block.arguments) + [r for op in block.operations for r in op.operation.results]
    for v in values:
        if isinstance(v.type, ir.RankedTensorType):
            for s in ir.RankedTensorType(v.type).shape:
                if s in dynamic and s not in syms:
                    syms[s] = f"%size{len(syms)}"
    return syms


def _read_sizes(syms, sources):
    """(the lines reading each dynamic size (syms' names) from the first argument with a dim of
    it, {name: (argument index, dim)}): sources, [(argument index, SSA name, its type's text,
    "tensor" or "memref", its shape with the names)]."""
    lines, found = [], {}
    for index, ssa, type_text, kind, shape in sources:
        for d, size in enumerate(shape):
            if isinstance(size, str) and size not in found:
                found[size] = (index, d)
                lines.append(f"    {size}_at = arith.constant {d} : index")
                lines.append(f"    {size} = {kind}.dim {ssa}, {size}_at : {type_text}")
                lines += _as_numbers(size)
    value_of = {n: v for v, n in syms.items()}
    for name in [n for n in syms.values() if n not in found]:  # (a reshape's merged or split size)
        lines += _derived_size(name, value_of[name], {value_of[n]: n for n in found})
    return lines, found


def _derived_size(name, value, read):
    """Lines computing a dynamic size that no argument has (a reshape's B * T or T / 2 inside
    the region) from those read, {value: name}: the product of one to three of them times c / d
    (small ints) that equals it here, the simplest first. The kernel family checks that the code
    is the same at three sets of sizes, so a product that only holds at these is never used."""
    found = []
    for k in (1, 2, 3):
        for factors in itertools.combinations_with_replacement(sorted(read), k):
            ratio = Fraction(value, _pymath.prod(factors))
            if ratio.numerator <= 4096 and ratio.denominator <= 64:
                found.append((ratio.numerator * ratio.denominator, -k, factors, ratio))
    if not found:
        raise UnsupportedOp("a dynamic size that no argument has")
    _, _, factors, ratio = min(found)
    steps = [("muli", read[f]) for f in factors[1:]]  # (acc = acc op operand, from the first factor)
    lines = []
    for n, op in ((ratio.numerator, "muli"), (ratio.denominator, "divui")):
        if n != 1:
            lines.append(f"    {name}_{op} = arith.constant {n} : index")
            steps.append((op, f"{name}_{op}"))
    acc = read[factors[0]]
    for i, (op, operand) in enumerate(steps):
        out = name if i == len(steps) - 1 else f"{name}_{i}"
        lines.append(f"    {out} = arith.{op} {acc}, {operand} : index")
        acc = out
    return lines + _as_numbers(name)


def _as_numbers(size):
    """Lines giving a dynamic size as the numbers an op's body may take it as (_constant)."""
    return [f"    {size}_i64 = arith.index_cast {size} : index to i64",
            f"    {size}_f64 = arith.sitofp {size}_i64 : i64 to f64"]


def _lower_ops(em, block, out_type, lines_for, axes=None, dual=(), merge_reductions=True):
    """Lower the block's ops into em: each op's result of type out_type(value), into the lines
    lines_for(value); the values in dual a second time, whole, into lines_for(None) (axes: the
    tiled kernel's, to know which operands an op reads whole). Returns the returned values."""
    results = None
    em.cpu_forms = merge_reductions
    for op in block.operations:
        op = op.operation
        if op.name == "arith.constant":
            em.vals[op.results[0]] = _constant(op, em.syms)
        elif op.name == "func.return":
            results = list(op.operands)
        elif op.name.startswith("thunder."):
            if len(op.results) != 1:
                raise UnsupportedOp(f"{op.name} with {len(op.results)} results")
            r = op.results[0]
            if r in dual:
                em.lines, em.read_whole = lines_for(None), set(op.operands)
                em.whole[r] = (_lower_op(em, op, em.t(r.type)), em.t(r.type))
            if axes is not None:
                em.read_whole = {v for v, a in _operand_axes(op, axes[r]) or () if a == WHOLE}
            out_t = out_type(r)
            em.lines = lines_for(r)
            red = _reduction_with_operand(op, lines_for, dual) \
                if merge_reductions and op.name.removeprefix("thunder.") in ELEMENTWISE else None
            if red is not None:
                first, name, dims = red
                acc_t, filled = _reduction_init(em, name, out_type(first.results[0]), wide_sum(name, out_t.rank, dims))
                em.reduce_too = (name, acc_t, dims, filled)
            value = _lower_op(em, op, out_t)
            em.reduce_too = None
            if isinstance(value, tuple):
                value, em.reduced[red[0].results[0]] = value[0], (value[1], acc_t)
            em.vals[r] = (value, out_t)
        else:
            raise UnsupportedOp(f"no linalg lowering for {op.name}")
    return results


def _store(em, r, dest, dest_t, strides):
    """The lines writing result r into dest, a tile of an output (a memref of type dest_t with
    these element strides). A result held as parts (a cat, a rotary embedding's halves) has each
    part written into its own subview of dest, never into a tensor of the tile first (which
    one-shot bufferization cannot place in a memref destination: a buffer malloc'd and copied
    a tile)."""
    lines, em.lines = em.lines, []
    value, t = em.vals[r]
    if not isinstance(value, _Parts):
        ssa, t = em.operand(r)
        em.emit(f"bufferization.materialize_in_destination {ssa} in restrict writable {dest} : ({t}, {dest_t}) -> ()")
    for start, _, (ssa, part_t) in value.parts if isinstance(value, _Parts) else ():
        offsets = ", ".join(str(start) if d == value.dim else "0" for d in range(t.rank))
        sizes = ", ".join("%n" if s is None else str(s) for s in part_t.shape)
        view_t = part_t.memref(f"strided<[{', '.join(_dim(s) for s in strides)}], offset: ?>")
        view = em.fresh("pv")
        em.emit(f"{view} = memref.subview {dest}[{offsets}] [{sizes}] [{', '.join('1' for _ in part_t.shape)}] "
                f": {dest_t} to {view_t}")
        em.emit(f"bufferization.materialize_in_destination {ssa} in restrict writable {view} "
                f": ({part_t}, {view_t}) -> ()")
    written, em.lines = em.lines, lines
    return written


def _func(name, params, lines):
    head = f"  func.func @{name}({', '.join(params)}) attributes {{llvm.emit_c_interface}} {{"
    return "module {\n" + head + "\n" + "\n".join(lines) + "\n  }\n}\n"


def _untiled(block, name, input_strides, approx_math, merge_reductions, syms=None):
    em = _Emitter(approx_math)
    em.syms = syms or {}
    params = []
    lines = []
    sources, out_shapes = [], []  # (for the dynamic sizes: _read_sizes)
    for i, a in enumerate(block.arguments):
        t = em.t(a.type)
        if t.scalar:
            params.append(_scalar_param(em, i, a, lines))
            continue
        ssa = f"%arg{i}"
        em.vals[a] = (ssa, t)
        strides = None if input_strides is None else input_strides[i]
        attr = (f" {{bufferization.buffer_layout = {strided_layout(t.shape, strides)}}}"
                if t.rank else "")
        params.append(f"{ssa}: {t}{attr}")
        sources.append((i, ssa, str(t), "tensor", t.shape))
    results = _lower_ops(em, block, lambda v: em.t(v.type), lambda v: lines, merge_reductions=merge_reductions)
    em.lines, em.read_whole = lines, set()
    for j, r in enumerate(results):
        if em.vals[r][0] in NUMBERS:
            raise UnsupportedOp("a number as a region result")
        ssa, t = em.operand(r)  # (a result held as parts: written into one tensor, which the gpu lowering reads)
        params.append(f"%out{j}: {t.memref()}")
        sources.append((len(block.arguments) + j, f"%out{j}", t.memref(), "memref", t.shape))
        out_shapes.append(t.shape)
        em.emit(f"bufferization.materialize_in_destination {ssa} in restrict writable %out{j} "
                f": ({t}, {t.memref()}) -> ()")
    em.emit("return")
    reads, sizes_at = _read_sizes(em.syms, sources)
    lines[:0] = reads
    if not em.syms:
        return Lowered(_func(name, params, lines))
    return Lowered(_func(name, params, lines), sizes_at=sizes_at, out_shapes=out_shapes,
                   size_values={n: v for v, n in em.syms.items()})


def _tiled(block, name, input_strides, approx_math, merge_reductions, rows, axes, dual, syms=None):
    # inputs with dynamic strides (cache="symbolic values"' kernels): outputs get them too
    dynamic_outer = input_strides is not None and any(s is None for st in input_strides for s in st)
    em = _Emitter(approx_math)
    em.tiled = True
    em.syms = syms or {}
    pre, loop, slices = [], [], []
    params = []
    row_bytes = 0
    row_terms = []  # (bytes per element, the sizes of a row: names for dynamic ones) per tiled tensor
    sources, out_shapes = [], []  # (for the dynamic sizes: _read_sizes)
    input_axes = []
    for i, a in enumerate(block.arguments):
        t = em.t(a.type)
        if t.scalar:
            params.append(_scalar_param(em, i, a, pre))
            input_axes.append(None)
            continue
        axis = axes.get(a, WHOLE)
        axis = None if axis == WHOLE else axis
        input_axes.append(axis)
        strides = None if input_strides is None else list(input_strides[i])
        arg_t = t.tile(axis)
        layout = strided_layout(t.shape, strides) if t.rank else None
        params.append(f"%arg{i}: {arg_t.memref(layout)}")
        sources.append((i, f"%arg{i}", arg_t.memref(layout), "memref", t.shape))
        ssa = f"%a{i}"
        if axis is None:
            pre.append(f"    {ssa} = bufferization.to_tensor %arg{i} restrict : {arg_t.memref(layout)} to {t}")
            em.vals[a] = (ssa, t)
        else:
            view, view_t = _subview(f"%arg{i}", arg_t.memref(layout), t, axis, strides or [None] * t.rank)
            slices.append(f"      %sv{i} = {view}")
            slices.append(f"      {ssa} = bufferization.to_tensor %sv{i} restrict : {view_t} to {arg_t}")
            em.vals[a] = (ssa, arg_t)
            row_bytes += elt_bytes(t.elt) * _pymath.prod(_static_shape(a)) // rows
            row_terms.append((elt_bytes(t.elt), t.shape[:axis] + t.shape[axis + 1:]))
            if a in dual:  # also read whole
                pre.append(f"    %w{i} = bufferization.to_tensor %arg{i} restrict : {arg_t.memref(layout)} to {arg_t}")
                pre.append(f"    %aw{i} = tensor.cast %w{i} : {arg_t} to {t}")
                em.whole[a] = (f"%aw{i}", t)

    def out_type(v):
        axis = axes[v]
        return em.t(v.type).tile(None if axis == WHOLE else axis)

    results = _lower_ops(em, block, out_type, lambda v: pre if v is None or axes[v] == WHOLE else loop, axes, dual,
                         merge_reductions)
    stores = []
    for j, r in enumerate(results):
        if em.vals[r][0] in NUMBERS:
            raise UnsupportedOp("a number as a region result")
        em.lines, em.read_whole = loop, set()
        if isinstance(r.owner, ir.Block):  # an input returned as is: copy it with a loop nest
            ssa, tile_t = em.operand(r)      # (a memref.copy of strided tiles is a runtime call)
            init, copied = em.empty(tile_t), em.fresh()
            em.emit(f"{copied} = linalg.copy ins({ssa} : {tile_t}) outs({init} : {tile_t}) -> {tile_t}")
            em.vals[r] = (copied, tile_t)
        full_t = em.t(r.type)
        # torch allocates outputs contiguous: row-major strides, which do not depend on the row
        # count when the tiled axis is the first dim (then it stays dynamic)
        axis = axes[r]
        out_strides = row_major_strides(full_t.shape)
        if axis == 0:
            out_type = full_t.tile(0).memref()
        elif dynamic_outer and axis != WHOLE:  # the strides before the axis depend on its size
            out_strides = [None] * axis + out_strides[axis:]
            out_type = full_t.tile(axis).memref(strided_layout(full_t.shape, out_strides))
        else:
            out_type = full_t.memref()
        params.append(f"%out{j}: {out_type}")
        sources.append((len(block.arguments) + j, f"%out{j}", out_type, "memref", full_t.shape))
        out_shapes.append(full_t.shape)
        view, view_t = _subview(f"%out{j}", out_type, full_t, axis, out_strides)
        stores.append(f"      %ov{j} = {view}")
        stores += ["  " + line for line in _store(em, r, f"%ov{j}", view_t, out_strides)]
        row_bytes += elt_bytes(full_t.elt) * _pymath.prod(_static_shape(r)) // rows
        row_terms.append((elt_bytes(full_t.elt), full_t.shape[:axis] + full_t.shape[axis + 1:]))
    params += ["%lo: index", "%hi: index"]
    tile_rows = max(1, TILE_BYTES // max(row_bytes, 1))
    # along an inner axis a tile is one piece per index of the dims before it: pieces of at least
    # MIN_PIECE_BYTES, so that each is a stream the hardware prefetches (a 4x16x512x64 rotary
    # embedding tiled along its positions: 1 position a tile, 64 pieces of 256 bytes, 0.76 ms;
    # 8 positions, 0.54 ms), in tiles of at most PIECES_TILE_BYTES
    first, first_shape = em.t(results[0].type), _static_shape(results[0])
    axis = axes[results[0]]
    pieces = axis not in (0, WHOLE) and _pymath.prod(first_shape[:axis]) > 1
    if pieces:
        piece_row = elt_bytes(first.elt) * _pymath.prod(first_shape[axis + 1:])
        longer = min(rows, -(-MIN_PIECE_BYTES // max(piece_row, 1)), PIECES_TILE_BYTES // max(row_bytes, 1))
        tile_rows = max(tile_rows, longer)
    piece_term = (elt_bytes(first.elt), first.shape[axis + 1:]) if pieces else None
    if any(isinstance(s, str) for _, sizes in row_terms + [piece_term or (0, ())] for s in sizes):
        tile_lines = _tile_rows_at_run_time(row_terms, piece_term)  # (the sizes are the call's)
    else:
        tile_lines = [f"    %T = arith.constant {tile_rows} : index"]
    reads, sizes_at = _read_sizes(em.syms, sources)
    lines = reads + tile_lines + pre
    lines.append("    scf.for %i = %lo to %hi step %T {")
    lines.append("      %rem = arith.subi %hi, %i : index")
    lines.append("      %n = arith.minsi %rem, %T : index")
    lines += slices
    lines += ["  " + line for line in loop]
    lines += stores
    lines += ["    }", "    return"]
    if not em.syms:
        return Lowered(_func(name, params, lines), rows, tile_rows, input_axes)
    return Lowered(_func(name, params, lines), rows, tile_rows, input_axes, sizes_at, out_shapes, first.shape[axis],
                   {n: v for v, n in em.syms.items()})


def _tile_rows_at_run_time(row_terms, piece_term):
    """Lines computing %T, the rows of a tile, as _tiled does from the sizes (TILE_BYTES of
    tiled tensors a tile; pieces of MIN_PIECE_BYTES along an inner axis), where they are
    dynamic."""
    lines = ["    %tr_1 = arith.constant 1 : index"]
    count = [0]

    def value(text):
        count[0] += 1
        lines.append(f"    %tr{count[0]} = {text}")
        return f"%tr{count[0]}"

    def product(factor, sizes):
        factor *= _pymath.prod(s for s in sizes if isinstance(s, int))
        v = value(f"arith.constant {factor} : index")
        for s in sizes:
            if isinstance(s, str):
                v = value(f"arith.muli {v}, {s} : index")
        return v

    row = value("arith.constant 0 : index")
    for elt, sizes in row_terms:
        row = value(f"arith.addi {row}, {product(elt, sizes)} : index")
    row = value(f"arith.maxui {row}, %tr_1 : index")
    tiles = value(f"arith.divui {value(f'arith.constant {TILE_BYTES} : index')}, {row} : index")
    tile = value(f"arith.maxui {tiles}, %tr_1 : index")
    if piece_term is not None:  # max(tile, min(ceil(MIN_PIECE_BYTES / piece row), PIECES_TILE_BYTES / row))
        piece = value(f"arith.maxui {product(*piece_term)}, %tr_1 : index")
        need = value(f"arith.ceildivui {value(f'arith.constant {MIN_PIECE_BYTES} : index')}, {piece} : index")
        most = value(f"arith.divui {value(f'arith.constant {PIECES_TILE_BYTES} : index')}, {row} : index")
        tile = value(f"arith.maxui {tile}, {value(f'arith.minui {need}, {most} : index')} : index")
    lines.append(f"    %T = arith.maxui {tile}, %tr_1 : index")
    return lines


def to_linalg(text: str, name: str, input_strides=None, approx_math=True, tile=True) -> str:
    """lower_region's text."""
    return lower_region(text, name, input_strides, approx_math, tile).text
