"""The fusion regions of a compiled program as (name, executor, op names): what the fusion log
(core/logs.py) and thunder.examine report."""
from thunder.dialects.mlir import ir


def summary(callees):
    """callees: name -> func op of the fusion callees (lowering/fuse.py fusion_callees); the ops
without the constants."""
    out = []
    for name, f in callees.items():
        executor = ir.StringAttr(f.attributes["thunder.executor"]).value
        ops = [op.operation.name for op in f.regions[0].blocks[0].operations 
               if op.operation.name not in ("func.return", "arith.constant")]
        out.append((name, executor, ops))
    return out
