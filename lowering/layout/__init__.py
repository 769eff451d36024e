"""Layout ops (transposes, reshapes, permutes) around fusion regions, and the one rule that
decides where they go: a layout op belongs outside a region exactly where torch runs it as a
view there (free: a stride change of a kernel's input or result), and stays in the region
where torch would copy.

- sink_reshapes.py / sink_transposes.py move reshapes and transposes below the elementwise
  ops (slices, cats) that read them, before thunder-fuse partitions a func, where the layout
  ops that brings to the region's edges are views torch makes (rule.py);
- copies.py: a transpose at a region's tail stays in the kernel where the reshape after it
  could not be a view of torch's transposed view (lowering/edge_ops.py);
- values.py: the shared helpers (shapes, permutations, building layout ops)."""
from thunder.lowering.layout.copies import reshape_copies
from thunder.lowering.layout.sink_reshapes import sink_reshapes
from thunder.lowering.layout.sink_transposes import sink_transposes

__all__ = ["reshape_copies", "sink_reshapes", "sink_transposes"]
