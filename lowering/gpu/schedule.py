"""Schedules: how the outputs of a region are split into kernels and mapped onto threads.

- elementwise (no reduction behind the outputs): a 1-D grid over the elements of outputs of
  one shape, 256 threads per block, each thread computing `vector` consecutive elements (16
  bytes: 4 f32, 8 f16/bf16) with vector loads of the inputs that are contiguous along the last
  dim and 16-byte aligned (one compiled variant per alignment), and vector stores;
- rows: one block per row of the outputs' leading `row_dims` dims; the threads of the block
  split the row (coalesced: thread t reads columns t, t + W, ...), reductions over the row are
  cooperative (gpu.all_reduce), and up to UNROLL values per thread stay in registers between
  the reductions and the outputs (layer norm, softmax, RMSNorm read their row once);
- otherwise (a reduction over rows, e.g. a bias gradient): elementwise over the outputs with a
  loop per reduced element in each thread.

Outputs that do not fit one kernel (different shapes or row structure) get kernels of their
own, launched one after the other. The row count (or element count) is the kernel argument
`%n`: the kernel text does not depend on the first dim, so regions that differ in batch size
share the compiled kernel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from thunder.lowering.gpu.builder import UNROLL, KernelBuilder, Lin, elt_size

ELEMENTWISE_THREADS = 256
MAX_THREADS = 1024


@dataclass
class Launch:
    """One kernel of a region: its name, the region outputs it writes, and how its grid follows
    from them: `n` = the product of the first `count_dims` dims of its first output (rows, or
    all of them: elements), grid = ceil(n / per_block) blocks of `threads`."""
    name: str
    outputs: list
    count_dims: int
    threads: int
    per_block: int
    schedule: str  # "elementwise", "rows" or "loops"
    vector: int = 1
    sequential: int = 0  # reductions a thread computes alone, in a loop
    nested: int = 0  # of those, computed again in each iteration of another one's loop
    longest_loop: int = 0  # the most reduced elements one of those loops over

    def count(self, out_shapes):
        return math.prod(out_shapes[self.outputs[0]][:self.count_dims])

    def grid(self, n):
        return -(-n // self.per_block)

    def describe(self):
        return (f"{self.schedule}: n = {self.count_dims} leading dim(s) of output {self.outputs[0]}, "
                f"{self.per_block} per block of {self.threads} threads"
                + (f", vector {self.vector}" if self.vector > 1 else ""))


def _cone(node, seen=None):
    seen = set() if seen is None else seen
    if id(node) in seen:
        return []
    seen.add(id(node))
    out = [node]
    for x in getattr(node, "ins", []) + [getattr(node, "src", None), getattr(node, "dest", None)]:
        if x is not None:
            out += _cone(x, seen)
    return out


def _reductions(node):
    return [x for x in _cone(node) if x.kind == "generic" and "reduction" in x.iterators]


def _reduced_size(node):
    sizes = {}
    for x, m in zip(node.ins, node.maps):
        for (kind, d), s in zip(m, x.shape):
            if kind == "d":
                sizes[d] = s
    return math.prod(sizes.get(d, 1) for d, it in enumerate(node.iterators) if it == "reduction")


def _threads(cols, per_thread=4):
    w = 32
    while w < MAX_THREADS and w * per_thread < cols:
        w *= 2
    return w


def _vector(graph, outs, shape):
    elts = [graph.outputs[j].elt for j in outs] + [x.elt for x in graph.inputs]
    v = min(8, 16 // max(elt_size(e) for e in elts))
    return v if v > 1 and shape and shape[-1] % v == 0 else 1


def elementwise(graph, outs, strides, aligned, name):
    shape = graph.outputs[outs[0]].shape
    # lanes of a vector would each loop over a reduction: one element per thread then
    v = 1 if any(_reductions(graph.outputs[j]) for j in outs) else _vector(graph, outs, shape)
    w = ELEMENTWISE_THREADS
    b = KernelBuilder(graph, strides, w, vector=v, aligned=aligned)
    b.define("%n")
    b.thread_ids()
    first = (b.block * w + b.lane) * v
    last = b.op(f"arith.subi %n, {b.cst(v, 'i64')} : i64")
    f = b.ssa(first)
    flat = Lin(((b.op(f"arith.minsi {f}, {last} : i64"), 1),))
    valid = b.op(f"arith.cmpi slt, {f}, %n : i64")
    idx = b.delinearize(flat, shape)
    b.vec_inner = idx[-1] if idx else None
    values = {j: [] for j in outs}
    for lane in range(v):
        b.lane_offset = lane
        lane_idx = idx[:-1] + [idx[-1] + lane] if idx else []
        for j in outs:
            values[j].append(b.value(graph.outputs[j], lane_idx))
    b.lane_offset = 0
    for k, j in enumerate(outs):
        b.store(k, flat, values[j] if v > 1 else values[j][0], graph.outputs[j].elt, valid)
    launch = Launch(name, outs, len(shape), w, w * v, "loops" if b.sequential else "elementwise", v, b.sequential,
                    b.nested, b.longest_loop)
    return b, launch


def _row_vector(graph, outs, sizes):
    """Elements per chunk of a row kernel: 16 bytes of the widest element type read or written
    (4 f32, 8 bf16), when every row and reduction splits into whole chunks; else 1."""
    elts = [graph.outputs[j].elt for j in outs] + [x.elt for x in graph.inputs]
    v = min(8, 16 // max(elt_size(e) for e in elts))
    return v if v > 1 and all(n % v == 0 for n in sizes) else 1


def rows(graph, outs, row_dims, strides, name, aligned=()):
    nodes = [graph.outputs[j] for j in outs]
    cols = [math.prod(x.shape[row_dims:]) for x in nodes]
    reduced = [_reduced_size(r) for x in nodes for r in _reductions(x)]
    v = _row_vector(graph, outs, cols + reduced)
    w = _threads(max(cols + reduced), max(4, v))
    b = KernelBuilder(graph, strides, w, cooperative=True, vector=v, aligned=aligned)
    b.define("%n")
    b.thread_ids()
    row_idx = b.delinearize(b.block, nodes[0].shape[:row_dims])
    for k, (x, c) in enumerate(zip(nodes, cols)):
        col_shape = x.shape[row_dims:]
        per_thread = -(-c // (w * v))  # chunks of v consecutive columns: lane + j * W

        def one(chunk):
            chunk, valid = b.clamp(chunk, c // v)
            values = [b.value(x, row_idx + b.delinearize(chunk * v + u, col_shape)) for u in range(v)]
            b.store(k, b.block * c + chunk * v, values if v > 1 else values[0], x.elt, valid)

        if per_thread * v <= UNROLL:
            for j in range(per_thread):
                one(b.lane + j * w)
        else:
            jv = b.fresh("j")
            child, saved = b.open(0)
            b.define(jv, 1, False, per_thread)
            child.header = (f"scf.for {jv} = {b.cst(0, 'i64')} to {b.cst(per_thread, 'i64')} "
                            f"step {b.cst(1, 'i64')} : i64 {{")
            one(b.lane + Lin(((jv, w),)))
            b.close(child, saved)
    return b, Launch(name, outs, row_dims, w, 1, "rows", v)


def plan(graph, strides, aligned, prefix="k"):
    """[(KernelBuilder, Launch)] computing every output of the graph (outputs without elements
    need no kernel)."""
    remaining = [j for j, x in enumerate(graph.outputs) if math.prod(x.shape) > 0]
    kernels = []
    while remaining:
        # an output behind a reduction first: the row kernel also writes the elementwise outputs
        # of its rows (a residual add beside the layer norm of its sum), where an elementwise
        # kernel over all of them would loop over each row's reductions in every thread
        j0 = next((j for j in remaining if _reductions(graph.outputs[j])), remaining[0])
        x0 = graph.outputs[j0]
        name = f"{prefix}{len(kernels)}"
        chosen = None
        if _reductions(x0):
            for nr in range(max(len(x0.shape) - 1, 0), -1, -1):
                group = [j for j in remaining if graph.outputs[j].shape[:nr] == x0.shape[:nr]
                         and len(graph.outputs[j].shape) >= nr]
                b, launch = rows(graph, group, nr, strides, name, aligned)
                if b.sequential == 0:
                    chosen = (b, launch)
                    break
        if chosen is None:
            group = [j for j in remaining if graph.outputs[j].shape == x0.shape]
            chosen = elementwise(graph, group, strides, aligned, name)
        kernels.append(chosen)
        remaining = [j for j in remaining if j not in chosen[1].outputs]
    return kernels
