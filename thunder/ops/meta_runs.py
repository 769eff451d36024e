"""What torch's meta kernels answered for an op's eager strides (ops/record.py _eager_strides),
remembered per call signature: the same block applied N times runs each of its ops on meta tensors
of the same layouts N times, and some of those kernels are Python references costing
milliseconds a call (torch.mean, torch.cat). A signature holds everything the run depends on: the
op and the callable run, each tensor's shape, strides, storage offset, storage size, dtype and
which operands share a storage, the other arguments (their types and values), the results
expected (shapes, dtypes) and the default dtype; a call with a symbolic size, an argument it
cannot describe exactly or an active autocast region is not remembered (it runs).

What is kept of a run is its results' layouts, each as the meta tensor of an operand itself, a
view of an operand's storage or a new tensor, so a replay gives results that alias the operands
exactly as the run's did (record_op tells views from copies by storage); a run that gave no
answer (no meta kernel) is kept as NONE."""
import torch

from thunder.core.numbers import example
from thunder.core.proxies import meta_of, TensorProxy

NONE = object()  # the run gave no answer (record_op then counts the results as contiguous)
_RUNS = {}
_LIMIT = 8192  # signatures kept (forgotten all at once beyond: a long session's many shapes)
_PLAIN = (bool, int, float, complex, str, type(None), type(Ellipsis), torch.dtype, torch.device,
          torch.memory_format, torch.layout)


def signature(op, fn, values, outs):
    """(key, operand meta tensors) of a run of fn (op's callable) on values' meta tensors with
    results outs (proxies); key None where the run is not to be remembered."""
    if torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"):
        return None, None
    tensors, storages = [], []
    try:
        args = tuple(_describe(v, tensors, storages) for v in values.values())
        expected = tuple((_shape(o.shape), o.dtype) for o in outs)
        key = (op.qualname, fn, tuple(values), args, expected, torch.get_default_dtype())
        hash(key)
    except _Unknown:
        return None, None
    except TypeError:  # (an unhashable callable)
        return None, None
    return key, tensors


def recall(key, tensors):
    """The results of the remembered run (meta tensors laid out as its results were, aliasing
    the operands as they did), NONE, or None where the signature is new."""
    kept = _RUNS.get(key)
    if kept is None or kept is NONE:
        return kept
    out = []
    for kind, k, layout in kept:
        if kind == "same":
            out.append(tensors[k])
        elif kind == "view":
            out.append(tensors[k].as_strided(*layout))
        else:
            out.append(torch.empty_strided(layout[0], layout[1], dtype=layout[2], device="meta"))
    return out


def remember(key, tensors, results):
    """Keeps the run's results (a list of meta tensors, or None: no answer) under key, where they
    can be described exactly (else nothing is kept: the next call runs again)."""
    if results is None:
        kept = NONE
    else:
        kept, fresh = [], set()
        for r in results:
            storage = r.untyped_storage()._cdata
            same = next((k for k, t in enumerate(tensors) if t is r), None)
            owner = next((k for k, t in enumerate(tensors) if t.untyped_storage()._cdata == storage), None)
            if same is not None:
                kept.append(("same", same, None))
            elif owner is not None:
                if r.dtype != tensors[owner].dtype:
                    return  # (a view as another dtype: not an as_strided)
                kept.append(("view", owner, (tuple(r.shape), r.stride(), r.storage_offset())))
            else:
                if r.storage_offset() != 0 or storage in fresh:
                    return
                fresh.add(storage)
                kept.append(("new", None, (tuple(r.shape), r.stride(), r.dtype)))
    if len(_RUNS) >= _LIMIT:
        _RUNS.clear()
    _RUNS[key] = kept


class _Unknown(Exception):
    """A value the signature cannot describe exactly."""


def _shape(shape):
    if not all(type(d) is int for d in shape):
        raise _Unknown  # (a symbolic size: comparing it would record a guard)
    return tuple(shape)


def _describe(v, tensors, storages):
    """v as the run sees it (ops/record.py's meta(): tensors as meta tensors, tuples item by item,
    runtime numbers as their type's example), by value; tensors, storages get each tensor's meta
    tensor and storage."""
    if isinstance(v, TensorProxy):
        _shape(v.shape)
        m = meta_of(v)
        storage = m.untyped_storage()
        cdata = storage._cdata
        group = next((i for i, s in enumerate(storages) if s == cdata), len(storages))
        tensors.append(m)
        storages.append(cdata)
        return ("tensor", _shape(m.shape), m.stride(), m.storage_offset(), storage.nbytes(), m.dtype, group)
    if isinstance(v, tuple):
        return (type(v), tuple(_describe(x, tensors, storages) for x in v))
    v = example(v)
    if type(v) in _PLAIN:
        # (by type and text: True, 1 and 1.0 are equal keys, and so are 0.0 and -0.0)
        return (type(v), repr(v)) if type(v) in (float, complex) else (type(v), v)
    if type(v) is slice and all(type(x) in (int, type(None)) for x in (v.start, v.stop, v.step)):
        return (slice, v.start, v.stop, v.step)
    if type(v) is list and all(type(x) in _PLAIN for x in v):
        return (list, tuple((type(x), repr(x)) for x in v))
    raise _Unknown
