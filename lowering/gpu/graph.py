"""The linalg func that `to_linalg` writes (untiled), read back as a graph of values.

GPU kernels are generated from this graph (builder.py), so the scalar semantics of every prim
(the bodies of the `linalg.generic` ops, from lowering/linalg/scalar.py and approx.py) are the
CPU kernels' own. A node is one tensor value of the func:

- `Input(i)`: the func's i-th tensor argument;
- `Generic`: a `linalg.generic` (its inputs, indexing maps as lists of dims or 0, iterator
  types, body ops, and for a reduction the constant it starts from);
- `Fill`: a tensor of one number (`linalg.fill`, `thunder.full`);
- `Slice`: `tensor.extract_slice` (offsets and steps per dim);
- `Insert`: `tensor.insert_slice` of `src` into `dest` (a cat's parts, written into one tensor:
  offsets and steps per dim);
- `Reshape`: `tensor.collapse_shape` / `expand_shape` (row-major order kept);
- `Empty`: `tensor.empty`, an empty result or the unread init of a parallel generic.
"""
from __future__ import annotations

from thunder.dialects.mlir import ir
from thunder.lowering.linalg.scalar import UnsupportedOp


class Node:
    def __init__(self, kind, shape, elt, **fields):
        self.kind, self.shape, self.elt = kind, tuple(shape), elt
        self.__dict__.update(fields)

    def __repr__(self):
        return f"{self.kind}{list(self.shape)}x{self.elt}"


class Graph:
    """inputs: [Node]; outputs: [Node] (one per `%outN` memref, in order)."""

    def __init__(self, inputs, outputs):
        self.inputs, self.outputs = inputs, outputs


def _tensor(t):
    rt = ir.ShapedType(t)
    return tuple(rt.shape), str(rt.element_type)


def _map_exprs(attr):
    """An affine map of projected dims and zeros as a list of dim numbers or 0 (constant)."""
    m = ir.AffineMapAttr(attr).value
    out = []
    for e in m.results:
        if isinstance(e, ir.AffineDimExpr):
            out.append(("d", ir.AffineDimExpr(e).position))
        elif isinstance(e, ir.AffineConstantExpr):
            out.append(("c", ir.AffineConstantExpr(e).value))
        else:
            raise UnsupportedOp(f"indexing map {m}")
    return m.n_dims, out


def _number(op):
    attr = op.attributes["value"]
    t = str(op.results[0].type)
    if isinstance(attr, ir.FloatAttr):
        return ir.FloatAttr(attr).value, t
    v = ir.IntegerAttr(attr).value
    return (bool(v) if t == "i1" else v), t


def read_graph(module: ir.Module) -> Graph:
    """The graph of the module's only func (as `lower_region(..., tile=False)` writes it)."""
    f = next(op for op in module.body.operations if op.operation.name == "func.func")
    block = f.regions[0].blocks[0]
    vals, inputs, outs = {}, [], {}
    numbers = {}
    for a in block.arguments:
        if isinstance(a.type, ir.RankedTensorType):
            shape, elt = _tensor(a.type)
            vals[a] = Node("input", shape, elt, index=len(inputs))
            inputs.append(vals[a])
        else:  # %outN: memref
            outs[a] = len(outs)
    outputs = [None] * len(outs)
    for op in block.operations:
        op = op.operation
        name = op.name
        if name == "arith.constant":
            numbers[op.results[0]] = _number(op)
            continue
        if name in ("func.return",):
            continue
        if name == "bufferization.materialize_in_destination":
            outputs[outs[op.operands[1]]] = vals[op.operands[0]]
            continue
        shape, elt = _tensor(op.results[0].type)
        if name == "tensor.empty":
            node = Node("empty", shape, elt)
        elif name == "linalg.fill":
            value, _ = numbers[op.operands[0]]
            node = Node("fill", shape, elt, value=value)
        elif name == "linalg.generic":
            n_ins = len(op.operands) - 1
            maps = [_map_exprs(a) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
            iterators = [str(a).split("<")[-1].rstrip(">") for a in ir.ArrayAttr(op.attributes["iterator_types"])]
            init = vals[op.operands[n_ins]]
            node = Node("generic", shape, elt, ins=[vals[v] for v in op.operands[:n_ins]],
                        maps=[m for _, m in maps[:n_ins]], out_map=maps[-1][1], loops=maps[-1][0],
                        iterators=iterators, body=op.regions[0].blocks[0], init=init)
            if "reduction" in iterators and init.kind != "fill":
                raise UnsupportedOp("a reduction without a constant init")
        elif name == "tensor.extract_slice":
            offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
            steps = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
            node = Node("slice", shape, elt, src=vals[op.operands[0]], offsets=offsets, steps=steps)
        elif name == "tensor.insert_slice":
            offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
            steps = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
            node = Node("insert", shape, elt, src=vals[op.operands[0]], dest=vals[op.operands[1]],
                        offsets=offsets, steps=steps)
        elif name in ("tensor.collapse_shape", "tensor.expand_shape"):
            node = Node("reshape", shape, elt, src=vals[op.operands[0]])
        else:
            raise UnsupportedOp(f"no GPU lowering for {name}")
        vals[op.results[0]] = node
    return Graph(inputs, outputs)
