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

chain() gives the ops to emit instead of one, or None where the op fits as it is."""
import functools

import torch

from thunder.core.trace import Ref
from thunder.dialects.definitions import MAX_LIST, MAX_RESULTS, run_key
from thunder.ops.meta_utils import canonical_dim
from thunder.ops.registry import OPS

_CAT_LIKE = ("ltorch.cat", "thunder.cat", "ltorch.stack")


def _parts(values, limit):
    """values cut into consecutive parts with at most limit runs of equal (shape, dtype) each."""
    parts, runs, last = [[]], 0, object()
    for v in values:
        k = run_key(v)
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
