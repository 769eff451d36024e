"""A context variable set for the duration of a `with` block (the passes' and the runtime's
per-compile switches)."""
import contextlib


@contextlib.contextmanager
def scoped(var, value):
    """Inside: var holds value (the earlier value back after, also on an exception); yields value."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)
