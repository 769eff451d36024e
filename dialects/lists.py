"""Lists longer than an op's variadic groups hold (definitions.MAX_LIST, MAX_RESULTS).

IRDL binds one type per operand or result definition, so a variadic group holds values of one
type and a list is emitted as runs of equal types, one group per run (definitions.py). A list
with more runs than the op has groups is emitted as a chain of the same op on parts of the list,
each within the limit, where the op composes exactly:

- cat (ltorch.cat, thunder.cat) and stack: the cat of the cats (stacks) of consecutive parts,
  along the same dim. Mixed dtypes are promoted once, as eager does: each part's dtype is the
  list's, or the part has one dtype (promoting it later converts each element as eager would).
- split: a split into the parts' total sizes, then each part split into its pieces (views of a
  view of the input, as eager's pieces are views of it).

chain() gives the ops to emit instead of one, or None where the op fits as it is.

Any other op (the fallback's torch_call, einsum, an RNN's parameters, autograd.Function) takes
and returns a list of any length packed (pack, split_results): its first runs, then one value of
type !thunder.list made by `thunder.pack` of the next runs and the list of the rest
(definitions.expand reads it back); its results likewise, unpacked by `thunder.unpack`:

  %l = "thunder.pack"(%a31, ..., %a39) ... : (tensor<32xf32>, ..., tensor<40xf32>) -> !thunder.list
  %r:16 = "ltorch.torch_call"(%a0, ..., %a30, %l) ... -> (tensor<1xf32>, ..., tensor<15xf32>, !thunder.list)
  %s:16 = "thunder.unpack"(%r#15) ... -> (tensor<16xf32>, ..., tensor<30xf32>, !thunder.list)
  %u:10 = "thunder.unpack"(%s#15) ... -> (tensor<31xf32>, ..., tensor<40xf32>)

(40 tensors of 40 shapes: an op takes 31 runs and the list, a pack 31 runs and the rest's list;
an op returns 15 runs and the list, an unpack likewise.)"""
import functools

import torch

from thunder.core.trace import Ref
from thunder.dialects.definitions import LIST_OP, MAX_LIST, MAX_RESULTS, UNLIST_OP, run_key, runs_of, segments
from thunder.dialects.mlir import ir
from thunder.ops.meta_utils import canonical_dim
from thunder.ops.registry import OPS

_CAT_LIKE = ("ltorch.cat", "thunder.cat", "ltorch.stack")


def _parts(values, limit, key=run_key):
    """values cut into consecutive parts with at most limit runs of equal key (shape, dtype) each."""
    parts, runs, last = [[]], 0, object()
    for v in values:
        k = key(v)
        if k != last:
            if runs == limit:
                parts.append([])
                runs = 0
            runs += 1
            last = k
        parts[-1].append(v)
    return parts


def _promoted(refs):
    return functools.reduce(torch.promote_types, [r.dtype for r in refs])


def _cat_part(op, part, dim, name):
    """The Ref of the op (cat or stack) on a part of its list."""
    dtype = _promoted(part)
    if op.qualname == "ltorch.stack":
        d = canonical_dim(dim, len(part[0].shape) + 1)
        shape = list(part[0].shape)
        shape.insert(d, len(part))
        return Ref(name, tuple(shape), dtype, part[0].device)
    # (ltorch.cat skips 1-d empty tensors, eager's legacy rule)
    kept = [r for r in part if tuple(r.shape) != (0,)] or [part[0]]
    d = canonical_dim(dim, len(kept[0].shape))
    shape = list(kept[0].shape)
    if shape:
        shape[d] = sum(r.shape[d] for r in kept)
    return Ref(name, tuple(shape), dtype, part[0].device)


def _chain_cat(op, args, outputs, limit):
    tensors, dim = list(args["tensors"]), args["dim"]
    parts = _parts(tensors, limit)
    final = outputs[0].dtype
    if any(_promoted(p) != final and len({r.dtype for r in p}) > 1 for p in parts):
        return None  # (the caller's error: promoting twice could round differently from eager)
    steps, refs = [], []
    for i, part in enumerate(parts):
        ref = _cat_part(op, part, dim, f"{outputs[0].name}_part{i}")
        steps.append((op, {**args, "tensors": tuple(part)}, [ref]))
        refs.append(ref)
    # stack's parts have the new dim: they are concatenated along it
    d = canonical_dim(dim, len(outputs[0].shape)) if op.qualname == "ltorch.stack" else dim
    cat = OPS["thunder.cat"] if op.qualname == "thunder.cat" else OPS["ltorch.cat"]
    steps.append((cat, {"tensors": tuple(refs), "dim": d}, outputs))
    return steps


def _chain_split(op, args, outputs, limit):
    x = args["tensor"]
    d = canonical_dim(args["dim"], len(x.shape))
    parts = _parts(outputs, limit)
    sizes = [tuple(r.shape[d] for r in p) for p in parts]
    refs = []
    for i, s in enumerate(sizes):
        shape = list(x.shape)
        shape[d] = sum(s)
        refs.append(Ref(f"{outputs[0].name}_part{i}", tuple(shape), x.dtype, x.device))
    steps = [(op, {"tensor": x, "split_size_or_sections": tuple(sum(s) for s in sizes), "dim": d}, refs)]
    for ref, part, s in zip(refs, parts, sizes):
        steps.append((op, {"tensor": ref, "split_size_or_sections": s, "dim": d}, part))
    return steps


def chain(op, args, outputs):
    """[(op, args, outputs)] to emit in place of op(args) -> outputs, whose list has more runs
    of equal types than the op's groups hold; None where it fits or no chain is exact."""
    if op.qualname in _CAT_LIKE and len(_parts(args["tensors"], MAX_LIST)) > 1:
        return _chain_cat(op, args, outputs, MAX_LIST)
    if op.qualname == "ltorch.split" and len(_parts(outputs, MAX_RESULTS)) > 1:
        return _chain_split(op, args, outputs, MAX_RESULTS)
    return None


def _list_type():
    return ir.Type.parse("!thunder.list")


def pack(values, loc):
    """The operands of a list of ir.Values for an op's MAX_LIST groups: the values where they fit;
    else the first runs and a !thunder.list of the rest (thunder.pack ops inserted here)."""
    if len(runs_of([str(v.type) for v in values])) <= MAX_LIST:
        return values
    parts = _parts(values, MAX_LIST - 1, key=lambda v: str(v.type))
    rest = None
    for part in reversed(parts[1:]):
        operands = part + ([rest] if rest is not None else [])
        seg = segments([v.type for v in part], MAX_LIST - 1) + [int(rest is not None)]
        rest = ir.Operation.create(LIST_OP, results=[_list_type()], operands=operands, loc=loc,
                                   attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get(seg)}).result
    return parts[0] + [rest]


def split_results(types):
    """(the result types of an op returning these types, unpack): the types where they fit in
    MAX_RESULTS groups (unpack None); else the first runs and a !thunder.list, and unpack(list
    value, loc) inserts the thunder.unpack ops and returns the values of the rest."""
    if len(runs_of([str(t) for t in types])) <= MAX_RESULTS:
        return types, None
    parts = _parts(types, MAX_RESULTS - 1, key=str)

    def unpack(value, loc):
        out = []
        for k, part in enumerate(parts[1:], 1):
            more = k + 1 < len(parts)
            seg = segments(part, MAX_RESULTS - 1) + [int(more)]
            op = ir.Operation.create(UNLIST_OP, results=part + ([_list_type()] if more else []), operands=[value],
                                     loc=loc, attributes={"resultSegmentSizes": ir.DenseI32ArrayAttr.get(seg)})
            results = list(op.results)
            out += results[:len(part)]
            value = results[-1] if more else None
        return out

    return parts[0] + [_list_type()], unpack
