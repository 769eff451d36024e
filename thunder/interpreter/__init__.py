"""A CPython bytecode interpreter written in Python (3.11; 3.12 opcodes are added in compat.py).

``interpret(fn, args, kwargs)`` runs ``fn``'s bytecode itself, frame by frame, recursing into every
pure-Python callee, so that callers can observe and redirect what the program does:

* ``lookup(callee) -> replacement | None`` is consulted at every call site (CALL, CALL_FUNCTION_EX,
  with-statement ``__enter__``/``__exit__``, interpreted property getters) and again for the callable
  found by unwrapping a bound method / functools.partial / class ``__new__``/``__init__`` / ``__call__``
  of a callable object. A non-None replacement is called natively with the same arguments (a
  ``WithRuntime`` replacement with the Runtime and the calling frame first: it runs as part of the
  interpretation, reporting what it reads and interpreting what it calls).
  Otherwise Python functions are interpreted and everything else is called natively.
* ``on_load(value, provenance) -> value`` sees every value read from a module global (LOAD_GLOBAL, not
  builtins), a closure cell (LOAD_DEREF), an attribute (LOAD_ATTR / LOAD_METHOD / super attribute /
  ``getattr``; not the result of an interpreted property getter), an item of a list, tuple or dict
  (subscripts, for-loops and unpacking of lists and tuples: kind "item"), a parameter's default (kind
  "default", owner the function), and whether an attribute exists (``hasattr``, ``getattr`` with a
  default: kind "hasattr", the value a bool), and the result of every native call made by interpreted
  code (kind "native", owner the callable).
* ``on_call(fn)`` is told of every Python function about to be interpreted (``fn`` itself included);
  it may return ``done(result)``, called with what the call returned when it returns (not when it
  raises, not for generator functions).

Special methods written in Python (``__getitem__``, ``__setitem__``, ``__iter__``, ``__len__``,
``__contains__``, ``__bool__``) are interpreted like calls. An exception leaving an interpreted frame
gets a traceback entry for it (file, line, function name; the interpreter's own entries are dropped),
as CPython gives one to each frame it unwinds.

Generator functions and generator expressions: the call returns a real generator object whose
frame is interpreted each time it is resumed (``next``/``send``/``throw``/``close``, by interpreted
or native code: ``sum(isinstance(x, T) for x in xs)`` sees what interpreted code sees), ``yield
from`` included; the generator functions of torch's own modules (``Module.parameters()``) run
natively, each item they yield passing ``on_load`` (kind "native", name "<generator>"), their
generator expressions are interpreted (torch's ``associative_scan`` checks its
inputs with ``any(not isinstance(x, torch.Tensor) for x in leaves)``).

Python functions passed to natives that call them (``map``, ``filter``, ``sorted``/``min``/``max``/
``list.sort`` keys, ``functools.reduce``, itertools' callback takers) are interpreted when called.

Not interpreted (run natively): class bodies (``__build_class__``), callbacks invoked by other native
code (hooks, ``torch`` functions taking functions),
property getters with a custom ``__getattribute__`` and other descriptors (a getter with a Python
``__getattr__`` beside it, ``nn.Module``'s, is interpreted, ``__getattr__`` called where it raises
AttributeError, as CPython does).
Unsupported (raises InterpreterError): coroutines / async generators / await, ``except*``.
Known difference: native code calling ``sys.exc_info()`` does not see exceptions being handled by
interpreted ``except`` blocks (interpreted code itself does: bare ``raise``, chaining,
``sys.exc_info()``/``sys.exception()`` and so ``traceback.format_exc()``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from thunder.interpreter.errors import InterpreterError
from thunder.interpreter.frame import Provenance
from thunder.core import trace as tracing
from thunder.interpreter.runtime import (Runtime, WithRuntime, active_frames, call_with_room, current_frame,
                                        strip_interpreter)

__all__ = ["interpret", "interpret_inner", "InterpreterError", "Provenance", "InterpretResult", "current_source_location",
           "WithRuntime", "strip_interpreter"]


@dataclass
class InterpretResult:
    value: Any
    instructions: list = field(default_factory=list)  # dis.Instructions executed (record=True)
    log: list[str] = field(default_factory=list)  # "call f (file.py:12)", "return f", ... (record=True)


def interpret(fn: Callable, args: tuple | list = (), kwargs: dict | None = None, *,
              lookup: Callable[[Any], Callable | None] | None = None,
              on_load: Callable[[Any, Provenance], Any] | None = None,
              record: bool = False,
              on_store: Callable[[Any, Provenance], bool | None] | None = None,
              on_call: Callable[[Any], None] | None = None,
              on_create: Callable[[Any], None] | None = None,
              on_key: Callable[[Any, Any, bool], Any] | None = None,
              on_is: Callable[[Any, Any], bool] | None = None) -> InterpretResult:
    """Runs ``fn(*args, **kwargs)`` in the interpreter and returns an InterpretResult.

    Exceptions raised by the program propagate unchanged. ``lookup`` is not consulted for ``fn`` itself
    (it is what the caller asked to interpret), only for the calls it makes (including the unwrapped
    function of a bound method / partial passed as ``fn``). ``on_store(value, provenance)`` is told
    of every STORE_ATTR / STORE_GLOBAL, and of STORE_DEREF into cells made outside the interpreted
    code (kind "closure", owner the cell), before the store happens; an attribute store is not
    made where it returns true (it took the write over). ``on_create(obj)`` is told of
    each instance of a class (not a builtin type) that the program makes. ``on_key(container, key, write)``
    gives the key a read of a dict or set looks up (``d[k]``, ``k in d``, ``d.get(k)``) or a write
    stores (``d[k] = v``, a defaultdict filling a missing key), for a caller whose stand-ins hash
    unlike the objects they stand for; ``on_is(a, b)`` answers ``a is b``
    for two such stand-ins."""
    rt = Runtime(lookup, on_load, record, on_store, on_call, on_create, on_key, on_is)
    try:
        value = call_with_room(rt.call_unlooked, fn, tuple(args), dict(kwargs or {}), None)
    except InterpreterError:
        raise
    except BaseException as e:
        e.__traceback__ = strip_interpreter(e.__traceback__)
        raise
    finally:
        rt.handled_exc = None
    return InterpretResult(value, rt.instructions, rt.log)


def current_source_location() -> tuple[str, int | None, str] | None:
    """(filename, lineno, function name) of the innermost interpreted frame executing on this thread,
    or None when nothing is being interpreted."""
    f = current_frame()
    if f is None:
        return None
    return f.code.co_filename, f.lineno, f.code.co_name


def interpret_inner(fn: Callable, args: tuple | list = (), kwargs: dict | None = None) -> Any:
    """Runs ``fn(*args, **kwargs)`` in the interpreter running the caller (a replacement that
    ``lookup`` returned, running natively, hands part of its work back to the program: thunder's
    torch.autograd.Function support interprets the user's forward this way), so the hooks see what
    fn does; natively when nothing is being interpreted."""
    frames = active_frames()
    if not frames:
        return fn(*args, **(kwargs or {}))
    return frames[-1][0].call_unlooked(fn, tuple(args), dict(kwargs or {}), None)


# the trace context names the user's source line through this (core/trace.py current_location)
tracing.source_location = current_source_location
