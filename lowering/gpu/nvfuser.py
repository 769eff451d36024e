"""The nvFuser executor: regions of thunder prims on CUDA tensors as nvFuser FusionDefinitions.

nvFuser is imported lazily, when a region is compiled (and checked at
`thunder.jit(..., executors=["nvfuser", ...])`). Its wheels are built against one torch version
each (`nvfuser-cu<CUDA>-torch<major><minor>`, e.g. nvfuser-cu130-torch210 for torch 2.10, the
newest seen); where none matches the installed torch, `require()` raises an ImportError that
says so. `translate` writes a region into a FusionDefinition `fd` op by op: inputs become
`fd.define_tensor` (shape, contiguity and stride order from nvFuser's own descriptor of the
call's strides), numbers `fd.define_scalar`, each prim one `fd.ops.<op>`, results `fd.add_output`.
"""
from __future__ import annotations

import torch

from thunder.dialects.mlir import ir
from thunder.lowering.linalg.scalar import UnsupportedOp
from thunder.lowering.linalg.to_linalg import find_func, parse_region
from thunder.lowering.gpu import host_types

WHEELS = "nvfuser-cu<CUDA>-torch<major><minor> (newest seen: nvfuser-cu130-torch210, for torch 2.10)"

# MLIR element type -> nvfuser.DataType member
DTYPES = {"f32": "Float", "f64": "Double", "f16": "Half", "bf16": "BFloat16", "i64": "Int", "i32": "Int32",
          "i1": "Bool"}

# thunder prim -> fd.ops function taking the operands in order
ELEMENTWISE = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "pow": "pow", "atan2": "atan2",
    "maximum": "maximum", "minimum": "minimum", "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or",
    "bitwise_xor": "bitwise_xor", "bitwise_not": "bitwise_not", "neg": "neg", "abs": "abs", "exp": "exp",
    "expm1": "expm1", "log": "log", "log1p": "log1p", "log2": "log2", "log10": "log10", "sqrt": "sqrt", "rsqrt": "rsqrt",
    "reciprocal": "reciprocal", "tanh": "tanh", "sin": "sin", "cos": "cos", "erf": "erf", "floor": "floor",
    "ceil": "ceil", "round": "round", "trunc": "trunc", "sign": "sign", "eq": "eq", "ne": "ne", "lt": "lt",
    "le": "le", "gt": "gt", "ge": "ge", "isnan": "isnan", "where": "where",
}
REDUCTIONS = {"sum": "sum", "amax": "max", "amin": "min", "prod": "prod"}
SHAPE_OPS = {"broadcast_in_dim", "reshape", "transpose", "slice", "full", "convert_element_type"}


def require():
    """Raise ImportError, naming what is missing, when nvFuser cannot be imported."""
    try:
        import nvfuser  # noqa: F401
    except Exception as e:  # an ImportError, or a wheel built for another torch failing to load
        raise ImportError(
            f"thunder: the nvfuser executor needs nvFuser, and `import nvfuser` failed ({e}). nvFuser "
            f"wheels are built for one torch version each: {WHEELS}; none is installed for torch "
            f"{torch.__version__}. Use executors=['cuda', 'torch'] (thunder's CUDA kernels) or ['torch'].") from e


def _elt(t):
    try:
        return str(ir.RankedTensorType(t).element_type)
    except ValueError:
        return None


def supports(operation) -> bool:
    """Whether a thunder prim has a FusionDefinition translation (types included)."""
    name = operation.name.removeprefix("thunder.")
    if name not in ELEMENTWISE and name not in REDUCTIONS and name not in SHAPE_OPS:
        return False
    types = [r.type for r in operation.results] + [v.type for v in operation.operands]
    return all(_elt(t) in DTYPES for t in types if isinstance(t, ir.RankedTensorType))


def accepts(text, name) -> bool:
    ctx, module = parse_region(text)
    with ctx:
        f = find_func(module, name)
        return all(o.operation.name in ("arith.constant", "func.return") or supports(o.operation)
                   for o in f.regions[0].blocks[0].operations)


def _ints(attr):
    return list(ir.DenseI64ArrayAttr(attr))


def translate(fd, text, name, input_strides, DataType, describe):
    """Define the region's computation in FusionDefinition `fd`. input_strides: per input, the
    strides it is called with; DataType: nvfuser.DataType; describe(shape, strides) ->
    (shape, contiguity, stride_order), nvFuser's compute_tensor_descriptor."""
    ctx, module = parse_region(text)
    with ctx:
        f = find_func(module, name)
        block = f.regions[0].blocks[0]
        vals = {}

        def dtype(t):
            elt = _elt(t) if isinstance(t, ir.RankedTensorType) else str(t)
            if elt not in DTYPES:
                raise UnsupportedOp(f"nvfuser: element type {elt}")
            return getattr(DataType, DTYPES[elt])

        for a, strides in zip(block.arguments, input_strides):
            shape = list(ir.RankedTensorType(a.type).shape)
            shape, contiguity, stride_order = describe(shape, list(strides))
            vals[a] = fd.define_tensor(shape=shape, contiguity=contiguity, dtype=dtype(a.type),
                                       stride_order=stride_order)
        for op in block.operations:
            op = op.operation
            n = op.name
            if n == "arith.constant":
                attr = op.attributes["value"]
                t = str(op.results[0].type)
                if isinstance(attr, ir.FloatAttr):
                    vals[op.results[0]] = fd.define_scalar(ir.FloatAttr(attr).value, dtype=DataType.Double)
                else:
                    v = ir.IntegerAttr(attr).value
                    vals[op.results[0]] = (fd.define_scalar(bool(v), dtype=DataType.Bool) if t == "i1" else
                                           fd.define_scalar(v, dtype=DataType.Int))
                continue
            if n == "func.return":
                for v in op.operands:
                    fd.add_output(vals[v])
                continue
            prim = n.removeprefix("thunder.")
            args = [vals[v] for v in op.operands]
            out_t = op.results[0].type
            attrs = op.attributes
            if prim in ELEMENTWISE:
                r = getattr(fd.ops, ELEMENTWISE[prim])(*args)
            elif prim in REDUCTIONS:
                r = getattr(fd.ops, REDUCTIONS[prim])(args[0], dims=_ints(attrs["dims"]), keepdim=False,
                                                      dtype=dtype(out_t))
            elif prim == "convert_element_type":
                r = fd.ops.cast(args[0], dtype=dtype(out_t))
            elif prim == "broadcast_in_dim":
                r = fd.ops.broadcast_in_dim(args[0], shape=_ints(attrs["shape"]),
                                            broadcast_dims=_ints(attrs["broadcast_dims"]))
            elif prim == "reshape":
                r = fd.ops.reshape(args[0], new_shape=list(ir.RankedTensorType(out_t).shape))
            elif prim == "transpose":
                r = fd.ops.permute(args[0], dims=_ints(attrs["permutation"]))
            elif prim == "slice":
                r = fd.ops.slice(args[0], start_indices=_ints(attrs["start_indices"]),
                                 end_indices=_ints(attrs["end_indices"]), strides=_ints(attrs["strides"]))
            elif prim == "full":
                r = fd.ops.full(shape=list(ir.RankedTensorType(out_t).shape), fill_value=args[0],
                                dtype=dtype(out_t))
            else:
                raise UnsupportedOp(f"nvfuser: no translation of {n}")
            vals[op.results[0]] = r


class NvFuserRegion:
    """A region run by nvFuser: one FusionDefinition per pattern of input strides."""

    def __init__(self, text, name):
        require()
        self.text, self.name = text, name
        self.fusions = {}

    def __call__(self, *args):
        import nvfuser  # optional: the nvfuser executor only

        key = tuple(a.stride() for a in args)
        fd = self.fusions.get(key)
        if fd is None:
            fd = nvfuser.FusionDefinition()
            with fd:
                translate(fd, self.text, self.name, key, nvfuser.DataType, nvfuser.compute_tensor_descriptor)
            self.fusions[key] = fd
        return tuple(fd.execute(list(args)))


def compile_region(text, name):
    return NvFuserRegion(host_types(text, name), name)
