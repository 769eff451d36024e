"""Tiling analysis: which values a region computes tile by tile over rows of its outputs' first dim, which whole, and the tile sizes (see to_linalg.py)."""
from __future__ import annotations

import itertools
import math as _pymath

from thunder.dialects.mlir import ir
from thunder.lowering.linalg.scalar import ELEMENTWISE, elt_bytes, REDUCTIONS
from thunder.lowering.linalg.types_and_maps import _dim, size_text, TensorT


# ---- tiling: the region runs as a loop over tiles of rows of its outputs' first dim
WHOLE = "whole"  # a value every tile reads in full (computed once, before the loop)
# inputs + outputs of one tile: L1-sized, so the passes a row reduction makes over a tile (a layer
# norm's mean, variance and output; a softmax's max, exps and sum) read it from the L1 data cache
# (32-48 KiB on current x86). 64 KiB tiles, in L2, made the norms 1.2-1.5x slower on a Zen 4
# (docs/benchmarks.md, "Tile size"); elementwise kernels, one pass, do not care
TILE_BYTES = 8 * 1024
# the most bytes of a tile made of pieces along an inner axis (to_linalg._tiled: pieces of at least
# MIN_PIECE_BYTES, each a stream the hardware prefetches)
PIECES_TILE_BYTES = 512 * 1024
# the largest row (of results, along the tiled dim) preferred: tiles of whole rows of an outer
# dim read contiguous memory; tiles along an inner dim are strided (a 64x128x128 softmax tiled
# along its second dim reads 64 pieces 64 KiB apart, which share cache sets)
ROW_BYTES = 128 * 1024
MIN_PIECE_BYTES = 2 * 1024  # see _tiled
DUAL_BYTES = 64 * 1024  # the largest value computed both whole and tile by tile (see _propagate)


def _static_shape(v):
    return tuple(ir.RankedTensorType(v.type).shape)


def _is_number(v):
    return not isinstance(v.type, ir.ShapedType)


def _operand_axes(op, a):
    """[(operand, its tiled axis or WHOLE)] for the tensor operands of op when its result is
    tiled along axis a (or read WHOLE); None if op cannot be computed tile by tile."""
    name = op.name.removeprefix("thunder.")
    tensors = [v for v in op.operands if not _is_number(v)]
    if a == WHOLE:
        return [(v, WHOLE) for v in tensors]
    out = _static_shape(op.results[0])
    if name in ELEMENTWISE:  # numpy-style broadcasting: an operand without the axis is read whole
        axes = []
        for v in tensors:
            s = _static_shape(v)
            e = a - (len(out) - len(s))
            axes.append((v, e if e >= 0 and s[e] == out[a] else WHOLE))
        return axes
    x = tensors[0] if tensors else None
    if name == "broadcast_in_dim":
        bdims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dims"]))
        if a in bdims and _static_shape(x)[bdims.index(a)] == out[a]:
            return [(x, bdims.index(a))]
        return [(x, WHOLE)]
    if name == "transpose":
        return [(x, list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))[a])]
    if name in ("slice", "unslice"):  # tiles of rows of the result are tiles of the input's if the axis is not sliced
        starts, steps = (list(ir.DenseI64ArrayAttr(op.attributes[k])) for k in ("start_indices", "strides"))
        return [(x, a)] if starts[a] == 0 and steps[a] == 1 and _static_shape(x)[a] == out[a] else None
    if name == "cat":  # tiles of rows of every input, unless the rows are what is concatenated
        if a == ir.IntegerAttr(op.attributes["dim"]).value % len(out):
            return None
        return [(v, a) for v in tensors]
    if name == "reshape":  # the axis must be a dim of both, with as many elements before it
        s = _static_shape(x)
        before = _pymath.prod(out[:a])
        for e, size in enumerate(s):
            if _pymath.prod(s[:e]) == before and size == out[a]:
                return [(x, e)]
        return None
    if name in REDUCTIONS:
        rank = len(_static_shape(x))
        dims = {d % max(rank, 1) for d in ir.DenseI64ArrayAttr(op.attributes["dims"])}
        return [(x, [i for i in range(rank) if i not in dims][a])]
    if name in ("full", "iota"):  # no operands (a tile of iota starts at the tile's first row)
        return []
    return None


def tiling(block, prefer=(), by_size=True):
    """(rows, {value: axis or WHOLE}, {values also read whole}: see _propagate) when every region result can be computed tile by tile
    along one of its dims of a common size `rows` (the first result's first such dim that works,
    dims whose rows hold at most ROW_BYTES of results first,
    each other result's too; no op reduces over or reshapes across it; not the last dim of a
    result of rank 2 or more), else None."""
    ops = [o.operation for o in block.operations if o.operation.name != "arith.constant"]
    results = list(ops[-1].operands)
    if any(0 in _static_shape(v) for op in ops for v in [*op.operands, *op.results] if not _is_number(v)):
        return None  # empty tensors: nothing to tile (and no valid subview of a 0-sized dim)
    shapes = [_static_shape(r) for r in results]
    if not shapes or not all(shapes):
        return None
    # the outermost dim whose rows are small enough that a tile of a few of them stays in cache,
    # before the others (tiles of one 16x512x64 row of a 4x16x512x64 tensor would not)
    out_bytes = sum(_pymath.prod(s) * elt_bytes(str(ir.RankedTensorType(r.type).element_type))
                    for r, s in zip(results, shapes))
    # (prefer: sizes to tile along first, cache="symbolic values"'s sizes: a kernel tiled along
    # them does not depend on them)
    # (not by_size: by prefer alone, the outermost first, so that regions differing only in the
    # sizes in prefer tile alike: a kernel for all of them, to_linalg's `dynamic`)
    order = sorted(range(len(shapes[0])), key=lambda d: (shapes[0][d] not in prefer,
                                                         by_size and out_bytes // max(shapes[0][d], 1) > ROW_BYTES))
    for d0 in order:
        rows = shapes[0][d0]
        if rows < 2:
            continue
        if d0 == len(shapes[0]) - 1 > 0:
            continue  # tiles of columns of a matrix: short, strided inner loops; not worth it
        choices = [[d for d, s in enumerate(shape) if s == rows and not d == len(shape) - 1 > 0]
                   for shape in shapes[1:]]
        for combo in itertools.islice(itertools.product(*choices), 16):
            axes = _propagate(ops[:-1], results, (d0, *combo))
            if axes is not None:
                return rows, *axes
    return None


def _propagate(ops, results, result_axes):
    """({value: axis or WHOLE}, {values also read whole}) from the results' axes back to the
    inputs, or None on a conflict. A value of at most DUAL_BYTES that some ops read whole and
    others tile by tile is computed both ways (the whole one before the loop): a mask over the
    rows that is summed (a loss's count of kept targets) and used row by row."""
    axes, dual = {}, set()

    def need(v, a):
        if _is_number(v):
            return True
        b = axes.setdefault(v, a)
        if b == a or v in dual:
            return b == a or a == WHOLE
        if WHOLE not in (a, b) or _value_bytes(v) > DUAL_BYTES:
            return False
        axes[v] = b if a == WHOLE else a
        dual.add(v)
        return True

    if not all(need(r, a) for r, a in zip(results, result_axes)):
        return None
    for op in reversed(ops):
        r = op.results[0]
        if r not in axes:
            return None
        for a in [axes[r]] + ([WHOLE] if r in dual else []):
            operand_axes = _operand_axes(op, a)
            if operand_axes is None or not all(need(v, b) for v, b in operand_axes):
                return None
    return axes, dual


def _value_bytes(v):
    t = ir.RankedTensorType(v.type)
    return _pymath.prod(t.shape) * elt_bytes(str(t.element_type))


def row_major_strides(shape):
    """A contiguous tensor's strides; None where they depend on a dynamic size (not an int)."""
    strides, n = [], 1
    for s in reversed(shape):
        strides.append(n)
        n = n * s if n is not None and isinstance(s, int) else None
    return list(reversed(strides))


def _subview(src, src_type, t: TensorT, axis, strides):
    """memref.subview of one tile (rows %i .. %i + %n along axis) of src (of type src_type,
    with these element strides, None entries dynamic); returns (op text, the tile's type)."""
    offsets = ", ".join("%i" if d == axis else "0" for d in range(t.rank))
    sizes = ", ".join("%n" if d == axis else size_text(s) for d, s in enumerate(t.shape))
    ones = ", ".join("1" for _ in range(t.rank))
    offset = "0" if strides[axis] == 0 else "?"  # an input expanded along the axis: every tile starts at 0
    tile_type = t.tile(axis).memref("strided<[" + ", ".join(_dim(s) for s in strides) + f"], offset: {offset}>")
    return f"memref.subview {src}[{offsets}] [{sizes}] [{ones}] : {src_type} to {tile_type}", tile_type
