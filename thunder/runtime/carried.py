"""State a call reads that the call before did not: the tensors of a KV cache object that the
call before filled (runtime/generalize.py makes their sizes symbols at once).

A decode loop calls the function first without a cache (or with an empty one: the prefill) and
then with the cache object the prefill filled, whose tensors grow by one position per call.
Where those tensors are read from state (attributes of a `DynamicCache` argument, not
arguments), the call before never held them, so no size of theirs could change since it; the
cache's length would become a symbol only at the second decode call (a third compile). Instead,
at the first call of a structure that reads such tensors (not the module's parameters or
buffers, not read by the function's call before), their sizes are taken as sizes that changed
since the call before (from nothing, as an empty cache's length 0): the call is compiled with
them as symbols, and the sizes the function does not let change alone (a head count, a head
size) are made constants as at a first call under cache="symbolic values"."""
import itertools
import re

import torch

from thunder.runtime.compile import _acquire
from thunder.runtime.state import changes_undone

_ROOT = re.compile(r"^(_s\d+)(.*)$", re.S)


def _places(consts, exprs):
    """A form of each read expression that is the same in another call's trace: its root constant
    by identity (the names of constants differ between traces)."""
    out = []
    for e in exprs:
        m = _ROOT.match(e)
        out.append((id(consts[m.group(1)]), m.group(2)) if m and m.group(1) in consts else (None, e))
    return out


def holds_object(key):
    """Whether a call structure (generalize._call_key) has an argument held by identity (an
    object that state may be read through)."""
    if isinstance(key, tuple):
        return (len(key) == 2 and key[0] == "id") or any(holds_object(x) for x in key)
    return False


def read_state(cd, args, kwargs, previous):
    """(the tensors the call reads from state, in the order it reads them; per tensor whether it
    is fresh: not read by the call before (previous: its (consts, expressions)), not a parameter
    or buffer), or None where tracing fails (the compile that follows says why)."""
    try:
        with changes_undone():  # (the compile that follows traces the call)
            acq = _acquire(cd, args, kwargs)
    except Exception:  # noqa: BLE001 - the compile that follows raises it where it matters
        return None
    reads = acq.state.reads
    tensors = [acq.inputs.tensors[i] for _, i in reads]
    before = set(_places(*previous))
    now = _places(acq.state.consts, [e for e, _ in reads])
    own = set()
    if cd.module is not None:
        own = {id(t) for t in itertools.chain(cd.module.parameters(), cd.module.buffers())}
    fresh = [p not in before and id(t) not in own and not isinstance(t, torch.nn.Parameter)
             for p, t in zip(now, tensors)]
    return tensors, fresh
