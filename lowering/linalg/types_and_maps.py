"""The types and affine maps every linalg lowering uses: TensorT (a tensor or runtime-number type), SCALAR_TYPES and the indexing maps."""
from __future__ import annotations

from thunder.dialects.mlir import ir
from thunder.lowering.linalg.scalar import UnsupportedOp


def _dim(s):
    return "?" if s is None or isinstance(s, str) else str(s)


def size_text(s):
    """A size as an op's operand list writes it: the tile's `%n` (None), a dynamic size's SSA
    name (a str), or the number."""
    return "%n" if s is None else s if isinstance(s, str) else str(s)


class TensorT:
    """A ranked tensor type: shape (None: the dynamic size of a tile along the tiled axis; a str:
    a size the kernel reads from its arguments, the SSA name of its index value, see
    to_linalg.lower_region's `dynamic`) and element type name; scalar: a runtime number (a func
    argument of type f64/i64, which the kernel takes as a 0-d memref)."""

    def __init__(self, shape, elt, scalar=False):
        self.shape = tuple(s if s is None or isinstance(s, str) else int(s) for s in shape)
        self.elt, self.scalar = elt, scalar

    @property
    def rank(self):
        return len(self.shape)

    def tile(self, axis):
        """This type as a tile: dynamic along axis (None: unchanged)."""
        if axis is None:
            return self
        return TensorT(self.shape[:axis] + (None,) + self.shape[axis + 1:], self.elt)

    def __str__(self):
        return "tensor<" + "".join(f"{_dim(s)}x" for s in self.shape) + self.elt + ">"

    def memref(self, layout=None):
        s = "memref<" + "".join(f"{_dim(s)}x" for s in self.shape) + self.elt
        return s + (f", {layout}>" if layout else ">")


# the types of the runtime numbers a kernel takes (as 0-d memrefs it reads once)
SCALAR_TYPES = ("f64", "i64")


def tensor_t(t: ir.Type, syms=None) -> TensorT:
    """t as a TensorT; syms: {size: SSA name} of the sizes read at run time."""
    if not isinstance(t, ir.ShapedType) and str(t) in SCALAR_TYPES:
        return TensorT((), str(t), scalar=True)
    rt = ir.RankedTensorType(t)
    if rt.encoding is not None:
        raise UnsupportedOp(f"tensor with encoding (non-CPU device): {t}")
    return TensorT([syms.get(s, s) for s in rt.shape] if syms else rt.shape, str(rt.element_type))


# ---- affine maps
def _dims(n):
    return ", ".join(f"d{i}" for i in range(n))


def amap(n, exprs):
    return f"affine_map<({_dims(n)}) -> ({', '.join(exprs)})>"


def identity_map(n):
    return amap(n, [f"d{i}" for i in range(n)])


def broadcast_exprs(in_shape, out_shape):
    """numpy-style: trailing alignment, size-1 dims read index 0."""
    off = len(out_shape) - len(in_shape)
    if off < 0:
        raise UnsupportedOp(f"cannot broadcast {in_shape} to {out_shape}")
    exprs = []
    for i, s in enumerate(in_shape):
        o = out_shape[off + i]
        if s == o:
            exprs.append(f"d{off + i}")
        elif s == 1:
            exprs.append("0")
        else:
            raise UnsupportedOp(f"cannot broadcast {in_shape} to {out_shape}")
    return exprs
