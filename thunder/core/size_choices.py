"""Choices the passes make by the sizes of a program's values, made alike in the compiles that one
program for all sizes is fitted from.

runtime/generalize.py fits a program for all sizes from three compiles of a call: at the call's
own sizes and at two samples of other sizes. A pass that chooses by size (fusion's cost model:
whether a region is worth a kernel, whether an untiled kernel's data fits in cache, which small
ops of a region go to torch, whether a region split from its tail runs well; whether a product is
large enough for oneDNN) can choose otherwise at a sample's sizes; the three programs
then differ and no program for all sizes fits (a training step compiled again at every length).
So the call's compile records its choices in order (`recording()`), and each sample's compile
takes the call's choices in the same order (`recording(replay=...)`): the program for all sizes
makes the choices of the sizes it was first compiled at, as one compiled at those sizes would.
A replay that meets a choice of another kind (the compiles went apart) chooses by size from then on.
A choice that can be made per call at no real cost (which library runs a product: ops/gemm_by_size.py)
is left to the call in such compiles (`fitting()`), so the program makes it anew at every size.
"""
import contextlib
import contextvars

_LOG = contextvars.ContextVar("thunder_size_choices", default=None)


class Choices:
    """The choices one compile made: [(kind, value)] in order."""

    def __init__(self, replay=None):
        self.made, self._replay, self._at = [], replay, 0


def choose(kind, value):
    """value, the choice a pass made by the sizes at hand (kind: what it chooses, for the replay's
    check); inside a replaying compile, the recorded compile's choice of that place instead."""
    log = _LOG.get()
    if log is None:
        return value
    if log._replay is not None:
        if log._at < len(log._replay) and log._replay[log._at][0] == kind:
            value = log._replay[log._at][1]
            log._at += 1
        else:
            log._replay = None
    log.made.append((kind, value))
    return value


@contextlib.contextmanager
def recording(replay=None):
    """Inside: choose() records each choice (a Choices, yielded); with replay (a Choices), it
    returns that compile's choices in order."""
    log = Choices(None if replay is None else replay.made)
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


def fitting():
    """Whether the compile at hand is one that a program for all sizes is fitted from (inside
    recording())."""
    return _LOG.get() is not None
