"""The sizes of a func with dynamic sizes (`?` dims) as thunder-fuse's cost model and edge rules
read them: each value's dims at the symbols' values (the call traced: sizes.VALUES), and as
expressions of the symbols (what a region func's arguments get as sizes.DIMS). Inside `over(f)`
the values are f's (or those of a func made from it: a scratch copy of one op); a func of static
shapes needs none of this."""
import contextvars
import math

from thunder.core import symbols
from thunder.core.scoped import scoped
from thunder.dialects import sizes
from thunder.dialects.mlir import ir
from thunder.dialects.symbolic_lift import SymbolicFunc, UnknownSizes

_CURRENT = contextvars.ContextVar("thunder_symbolic_sizes", default=None)


def is_dynamic(func_op):
    """Whether a func has dynamic sizes: a `?` dim or a size computation."""
    block = func_op.regions[0].blocks[0]
    return any(sizes.is_dynamic_type(a.type) for a in block.arguments) or any(
        o.operation.name in sizes.PYTHON for o in block.operations)


def over(func_op):
    """Inside: the values are func_op's (its SymbolicFunc; nothing for a static func)."""
    return scoped(_CURRENT, SymbolicFunc(func_op) if is_dynamic(func_op) else None)


def current():
    """The SymbolicFunc of the func whose values are read now, or None (static shapes)."""
    return _CURRENT.get()


def shape(v):
    """A tensor value's dims: ints, SymInts for `?` dims (their values: the symbols' values)."""
    t = ir.RankedTensorType(v.type)
    if t.has_static_shape:
        return tuple(t.shape)
    found = _CURRENT.get()
    if found is None:
        raise UnknownSizes(f"the sizes of a value of type {t} outside a func with dynamic sizes")
    return found.meta(v)[0]


def hint_shape(v):
    """A tensor value's dims at the symbols' values."""
    return [int(symbols.hint(d)) for d in shape(v)]


def numel(v):
    """Elements of a tensor value at the symbols' values (1 for a number)."""
    if not isinstance(v.type, ir.ShapedType):
        return 1
    return math.prod(hint_shape(v))


def known(v):
    """Whether the sizes of a tensor value are known (static, or computed from the symbols)."""
    try:
        shape(v)
    except (UnknownSizes, KeyError):
        return False
    return True


def dims_attr(v):
    """sizes.DIMS of a tensor value with `?` dims: each dim's expression of the symbols."""
    return [symbols.expr_of(d) for d in shape(v)]
