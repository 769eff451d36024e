"""The text of MLIR types and attributes, remembered: str() of a type costs 10-40 us, and passes
read the same few types for every op (a verification key, an element type, a list check).
Only those of the process's shared context (definitions.context(), never freed) are kept:
MLIR uniques them there, so the object (hashed by its pointer) stands for its text; one of
another context is printed each time (its pointer may be reused once that context is gone)."""
_SHARED = []  # the shared context, once made
_TEXTS = {}
_LONGEST = 512  # (a long constant's text is printed each time, not kept)


def share(context):
    """Called once with the shared context."""
    _SHARED[:] = [context]


def shared():
    """The shared context (None before it is made): what belongs to it may be remembered by
    identity (its types and attributes are uniqued and never freed)."""
    return _SHARED[0] if _SHARED else None


def text(x):
    """str(x) of an ir.Type or ir.Attribute."""
    s = _TEXTS.get(x)
    if s is None:
        s = str(x)
        if _SHARED and x.context is _SHARED[0] and len(s) <= _LONGEST:
            _TEXTS[x] = s
    return s
