"""Transposes sunk below the elementwise ops, slices and cats that read them, before thunder-fuse
partitions a func, so a region computes in its input's memory order and writes its results in
the layout eager gives them (TensorIterator keeps the input's order):

    y = transpose(x, P); z = mul(y, w)     ->     z2 = mul(x, transpose(w, P^-1)); z = transpose(z2, P)

A Llama attention's q = q_proj(h).view(B, S, H, D).transpose(1, 2) and its rotary embedding
q * cos + rotate_half(q) * sin: the fused kernel wrote q in [B, H, S, D] row-major, torch's flash
attention then gave its output that layout too, and `out.transpose(1, 2).contiguous()` before
o_proj copied it (in the forward and again where the backward recomputes it). Sunk, the kernel
writes [B, S, H, D] row-major, q is a transposed view of it (eager's strides), the attention's
output has eager's layout and `contiguous()` is free.

A transpose is sunk only when everything the sunk ops compute is read outside any region
(torch calls such as the attention, or the func's results that are no user-visible output,
whose strides must stay eager's): the transposes at the end then leave the region as torch
views (thunder-fuse keeps one in the region where the reshape after it could not be a view,
lowering/layout/copies.py). The ltorch ops sunk through (elementwise ops, slicing `getitem`s,
`narrow`, `cat`) are decomposed into prims first; a transpose of a sunk value becomes one
transpose of its source (none where they cancel)."""
import functools

from thunder.core.proxies import DataDependentError
from thunder.core.trace import NotDecomposable
from thunder.dialects.mlir import address, ir
from thunder.lowering.decompose import decompose_op
from thunder.lowering.executors import is_number
from thunder.lowering.layout.rule import leaves_regions, visible
from thunder.lowering.layout.values import TRANSPOSES, ltorch_elementwise, permutation, ranked, retyped, shape, transpose
from thunder.lowering.linalg.scalar import ELEMENTWISE
from thunder.ops.vjp_utils import inverse_permutation

_LTORCH_SLICES = {"ltorch.getitem", "ltorch.narrow", "ltorch.cat"}


def _cast(cls, attr):
    try:
        return cls(attr)
    except ValueError:
        return None


def _slicing_key(operation):
    """Whether a getitem's key holds only slices and Ellipsis (no ints, None or tensors)."""
    if len(operation.operands) != 1 or "key" not in operation.attributes:
        return False
    key = _cast(ir.ArrayAttr, operation.attributes["key"])
    return key is not None and all(_cast(ir.DictAttr, k) is not None or
                                   getattr(_cast(ir.StringAttr, k), "value", None) == "..." for k in key)


def _ltorch_kind(operation):
    """Whether an op (before decomposition) may be sunk through: elementwise ltorch ops, slicing
    getitems, narrow, cat, and the prims _prim_kind takes."""
    name = operation.name
    if name.startswith("thunder."):
        return _prim_kind(operation) is not None or name in TRANSPOSES
    if name in TRANSPOSES:
        return True
    if name == "ltorch.getitem":
        return _slicing_key(operation)
    if name in _LTORCH_SLICES:
        return True
    return ltorch_elementwise(operation)


def _prim_kind(operation):
    """"elementwise", "slice", "cat" or "transpose" for the prims sunk through; else None."""
    name = operation.name.removeprefix("thunder.")
    if not operation.name.startswith("thunder.") or len(operation.results) != 1 or not ranked(operation.results[0]):
        return None
    if name in ELEMENTWISE:
        dims = shape(operation.results[0])
        if all(is_number(v) or (ranked(v) and shape(v) == dims) for v in operation.operands):
            return "elementwise"
        return None
    if name in ("slice", "cat", "transpose"):
        return name
    return None


def _owner(use):
    return use.owner.operation


def _closure(y, kind):
    """The ops reached from y through users that kind accepts, and the values they compute in
    y's layout (a transpose's result is not: the walk ends there)."""
    ops, values, stack = [], {y}, [y]
    while stack:
        v = stack.pop()
        for use in v.uses:
            u = _owner(use)
            if u in ops or not kind(u):
                continue
            ops.append(u)
            if u.name not in TRANSPOSES:
                for r in u.results:
                    values.add(r)
                    stack.append(r)
    return ops, values


def _in_order(ops):
    # (MLIR keeps each block's op order cached: numbering the whole block per transpose made
    # this pass quadratic in the func's length)
    return sorted(ops, key=functools.cmp_to_key(lambda a, b: -1 if a.is_before_in_block(b) else 1))


def _sink(f, t, fusable, erased):
    """Sink transpose t where it pays; erased gets the addresses of the ops it erases (decomposed
    or sunk)."""
    perm = permutation(t)
    if perm is None or perm == sorted(perm):
        return
    y = t.results[0]
    ops, values = _closure(y, lambda u: _ltorch_kind(u) and fusable(u))
    if all(u.name in TRANSPOSES for u in ops) or not leaves_regions(ops, values, y, fusable, visible(f)):
        return
    for u in _in_order([u for u in ops if not u.name.startswith("thunder.")]):
        key = address(u)  # (before erasing: the handle it is erased through is invalidated)
        try:
            decompose_op(u)
        except (DataDependentError, NotDecomposable):  # (as thunder-decompose: the op stays)
            return
        erased.add(key)
    ops, values = _closure(y, lambda u: _prim_kind(u) is not None)
    if not leaves_regions(ops, values, y, fusable, visible(f)):  # (the results are the decompositions')
        return  # (a decomposition made an op that is not sunk through; rare: its prims stay)
    inv = inverse_permutation(perm)
    source = {y: t.operands[0]}  # a value in y's layout -> the same value in x's dim order
    ordered = _in_order(ops)
    for u in ordered:
        _rewrite(u, perm, inv, source, ops)
    for u in reversed(ordered):
        erased.add(address(u))
        u.erase()
    if not list(y.uses):
        erased.add(address(t))
        t.erase()


def _rewrite(u, perm, inv, source, ops):
    """u (a prim reading values in y's layout) computed in x's dim order (source gets its
    result); the ops that are not sunk read a transpose of it."""
    kind, loc = _prim_kind(u), u.location
    attrs = {k: u.attributes[k] for k in u.attributes}
    with ir.InsertionPoint(u):
        if kind == "transpose":  # transpose(y, Q) = transpose(x, P o Q)
            composed = [perm[d] for d in ir.DenseI64ArrayAttr(u.attributes["permutation"])]
            a = source[u.operands[0]]
            u.results[0].replace_all_uses_with(a if composed == sorted(composed) else transpose(a, composed, loc))
            return
        operands = []
        for v in u.operands:
            if v in source:
                operands.append(source[v])
            elif is_number(v) or not ranked(v):
                operands.append(v)
            else:  # (a value from outside, in y's dims)
                operands.append(transpose(v, inv, loc))
        if kind == "slice":
            for k in ("start_indices", "end_indices", "strides"):
                old = list(ir.DenseI64ArrayAttr(u.attributes[k]))
                attrs[k] = ir.DenseI64ArrayAttr.get([old[i] for i in inv])
        elif kind == "cat":
            d = ir.IntegerAttr(u.attributes["dim"]).value % len(perm)
            attrs["dim"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), perm[d])
        dims = shape(u.results[0])
        new = retyped(u, operands, [dims[i] for i in inv], attrs)
    source[u.results[0]] = new
    outside = [use for use in u.results[0].uses if _owner(use) not in ops]
    if outside:
        with ir.InsertionPoint(u):
            back = transpose(new, perm, loc)
        for use in outside:
            _owner(use).operands[use.operand_number] = back


def sink_transposes(f, fusable):
    """Sink the transposes of func f where everything sunk leaves the regions (see the module
    docstring); fusable(op) says whether an op could be in a region."""
    ops = [o.operation for o in f.regions[0].blocks[0].operations]
    # (the ops erased so far, by address (dialects/mlir.py address): a handle listed here may
    # dangle, erased through another; the listed ops were all alive at once, so none shares an
    # address with another or with an op erased before)
    erased = set()
    for t in [o for o in ops if o.name in TRANSPOSES]:
        if address(t) not in erased and ranked(t.results[0]) and list(t.results[0].uses):
            _sink(f, t, fusable, erased)
