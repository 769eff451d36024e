"""The strides eager gives the result of an elementwise op: TensorIterator's rule, in Python.

Tracing records eager's result strides (a program's outputs must have them). For most ops it runs
the op on meta tensors; for elementwise ops torch's meta kernels are Python references whose first
call imports torch._dynamo and sympy (~1 s), so their strides are computed here instead, from the
operands' shapes and strides, the way ATen's TensorIterator lays out an output it allocates:

1. All operands of one shape (no broadcast, no 0-d operand): the result is contiguous when every
   operand is, else channels-last when every operand is (4-d), else it copies the operands'
   strides when they are all equal and non-overlapping and dense.
2. Otherwise the dims are sorted, fastest first, by the first operand whose strides order them
   (a broadcast dim, stride 0, orders nothing; equal strides put the smaller size first), an
   insertion sort that leaves incomparable dims in place; the result is dense in that order.

tests/test_strides.py checks this against eager's own results.
"""


def contiguous(shape):
    """Row-major strides (a dim of size 0 counts as 1, as torch computes them)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _channels_last(shape, strides):
    """Whether a 4-d tensor is contiguous in channels-last order (N, H, W, C), as torch decides it."""
    if len(shape) != 4:
        return False
    expected = 1
    for d in (1, 3, 2, 0):
        if shape[d] != 1:
            if strides[d] != expected:
                return False
            expected *= shape[d]
    return True


def _is_contiguous(shape, strides):
    if 0 in shape:
        return True
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if s != expected:
                return False
            expected *= n
    return True


def is_dense_layout(shape, strides):
    """Whether strides lay out a tensor of shape densely without overlap (a layout
    torch.empty_strided makes)."""
    return _non_overlapping_and_dense(shape, strides)


def _non_overlapping_and_dense(shape, strides):
    expected = 1  # (dims of size 0 or 1 take any stride)
    for n, s in sorted(((n, s) for n, s in zip(shape, strides) if n >= 2), key=lambda p: p[1]):
        if s != expected:
            return False
        expected *= n
    return True


def dense_order(shape, strides):
    """The dims of a layout dense in memory, outermost first (a permutation of a contiguous one:
    x.transpose(1, 2) of a contiguous x), or None where it is not dense."""
    order = tuple(sorted(range(len(shape)), key=lambda d: (strides[d], shape[d]), reverse=True))
    return order if dense_in_order(shape, strides, order) else None


def dense_in_order(shape, strides, order):
    """Whether strides lay a tensor of shape out densely with its dims in this order (outermost
    first; dims of size 1 take any stride)."""
    step = 1
    for d in reversed(order):
        if shape[d] != 1 and strides[d] != step:
            return False
        step *= shape[d]
    return True


def elementwise(shape, operands):
    """The result's strides for broadcast shape `shape`; operands: (shape, strides) of each tensor
    operand in argument order (numbers are not operands)."""
    shape = tuple(shape)
    if not shape:
        return ()
    if operands and all(tuple(s) == shape for s, _ in operands):
        if all(_is_contiguous(s, st) for s, st in operands):
            return contiguous(shape)
        if all(_channels_last(s, st) for s, st in operands):
            n, c, h, w = shape
            return (h * w * c, 1, w * c, c)
        first = tuple(operands[0][1])
        if all(_non_overlapping_and_dense(s, st) and tuple(st) == first for s, st in operands):
            return first
    ndim = len(shape)
    broadcast = []  # each operand's strides over the result's dims, 0 where broadcast
    for s, st in operands:
        offset = ndim - len(s)
        b = [0] * ndim
        for i, (n, x) in enumerate(zip(s, st)):
            b[offset + i] = 0 if n == 1 and shape[offset + i] != 1 else x
        broadcast.append(b)

    def after(d0, d1):
        """1: d0 goes after d1 (is slower); -1: before; 0: no operand orders them."""
        for b in broadcast:
            s0, s1 = b[d0], b[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(reversed(range(ndim)))  # fastest first
    for i in range(1, ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = after(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    if perm == list(reversed(range(ndim))):
        return contiguous(shape)
    strides, step = [0] * ndim, 1
    for d in perm:
        strides[d] = step
        step *= shape[d]
    return tuple(strides)
