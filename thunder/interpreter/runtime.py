"""The Runtime: one ``interpret`` call's state (hooks, recording, the handled-exception slot) plus the
call dispatch (interpret vs. native) and the frame execution loop with exception-table unwinding."""
from __future__ import annotations

import builtins
import functools
import inspect
import os
import sys
import threading
import types
from typing import Any, Callable

from thunder.interpreter.binding import bind_arguments
from thunder.interpreter.compat import HANDLERS
from thunder.interpreter.errors import InterpreterError
from thunder.interpreter.frame import Frame, Provenance
from thunder.interpreter.opcodes import RETURN, UNSUPPORTED_HINTS

__all__ = ["Runtime", "current_frame", "active_frames"]

# The only mutable module state: per-thread stack of (runtime, frame) being executed, innermost last.
# Shared by nested interpret() calls, so current_source_location() sees the innermost user frame.
_tls = threading.local()


def active_frames() -> list[tuple["Runtime", Frame]]:
    frames = getattr(_tls, "frames", None)
    if frames is None:
        frames = _tls.frames = []
    return frames


def current_frame() -> Frame | None:
    frames = active_frames()
    return frames[-1][1] if frames else None


# Generator-like code objects are never interpreted; sync generators are called natively.
_CO_GENERATOR = inspect.CO_GENERATOR

_OBJECT_NEW = object.__new__
_OBJECT_INIT = object.__init__
_OBJECT_GETATTRIBUTE = object.__dict__["__getattribute__"]
_TYPE_CALL = type.__dict__["__call__"]
_PARTIAL_CALL = functools.partial.__call__


def _mro_lookup(tp: type, name: str) -> Any:
    """The raw class-dict entry for ``name`` along ``tp``'s MRO (no descriptor binding), or None."""
    for klass in tp.__mro__:
        d = klass.__dict__
        if name in d:
            return d[name]
    return None


class Runtime:
    def __init__(self, lookup: Callable | None, on_load: Callable | None, record: bool,
                 on_store: Callable | None = None):
        self.lookup = lookup
        self.on_load = on_load
        self.on_store = on_store
        self.own_cells: set[int] = set()  # ids of cells made by interpreted frames (MAKE_CELL)
        self.record = record
        self.instructions: list = []
        self.log: list[str] = []
        self.handlers = HANDLERS
        # The exception being handled (what a bare `raise` re-raises and new exceptions chain to).
        # Mirrors the thread's exc_info for interpreted code; starts from the caller's state.
        frames = active_frames()
        self.handled_exc: BaseException | None = frames[-1][0].handled_exc if frames else sys.exc_info()[1]

    # ------------------------------------------------------------------------------------------
    # hooks
    # ------------------------------------------------------------------------------------------
    def loaded(self, value: Any, kind: str, name: str, owner: Any, f: Frame) -> Any:
        """Passes a value read from a global / closure cell / attribute through on_load."""
        if self.on_load is None:
            return value
        return self.on_load(value, Provenance(kind, name, owner, f.code.co_name, f.code.co_filename, f.lineno))

    def stored(self, value: Any, kind: str, name: str, owner: Any, f: Frame) -> None:
        """Tells on_store about a write to a global or an attribute (before it happens)."""
        if self.on_store is not None:
            self.on_store(value, Provenance(kind, name, owner, f.code.co_name, f.code.co_filename, f.lineno))

    def unsupported(self, f: Frame, what: str, hint: str | None = None) -> InterpreterError:
        return InterpreterError(what, f.code.co_name, f.code.co_filename, f.lineno, hint)

    # ------------------------------------------------------------------------------------------
    # exceptions
    # ------------------------------------------------------------------------------------------
    def set_context(self, exc: BaseException, overwrite: bool) -> None:
        """Implicit exception chaining (``__context__``) against the interpreted handled exception,
        breaking cycles the way CPython's _PyErr_SetObject does."""
        handled = self.handled_exc
        if handled is None or handled is exc:
            return
        if not overwrite and exc.__context__ is not None:
            return
        o = handled
        while True:
            ctx = o.__context__
            if ctx is None:
                break
            if ctx is exc:
                o.__context__ = None
                break
            o = ctx
        exc.__context__ = handled

    # ------------------------------------------------------------------------------------------
    # attribute access
    # ------------------------------------------------------------------------------------------
    def get_attribute(self, obj: Any, name: str, f: Frame) -> Any:
        # Interpret Python property getters (they may contain ops the caller wants to see), but only in
        # the plain case where getattr would certainly call fget: default __getattribute__, no __getattr__
        # fallback, and not a class (class attribute access returns the property object itself).
        tp = type(obj)
        if not issubclass(tp, type):
            attr = _mro_lookup(tp, name)
            if (type(attr) is property and isinstance(attr.fget, types.FunctionType)
                    and _mro_lookup(tp, "__getattribute__") is _OBJECT_GETATTRIBUTE
                    and _mro_lookup(tp, "__getattr__") is None):
                return self.call(attr.fget, (obj,), {}, f)
        return getattr(obj, name)

    # ------------------------------------------------------------------------------------------
    # calls
    # ------------------------------------------------------------------------------------------
    def call(self, fn: Any, args: tuple, kwargs: dict, caller: Frame | None) -> Any:
        """A call site: ask ``lookup`` first, then interpret or call natively."""
        if self.lookup is not None:
            replacement = self.lookup(fn)
            if replacement is not None:
                if self.record:
                    self.log.append(f"lookup {_callable_name(fn)} -> {_callable_name(replacement)}")
                return replacement(*args, **kwargs)
        return self.call_unlooked(fn, args, kwargs, caller)

    def call_unlooked(self, fn: Any, args: tuple, kwargs: dict, caller: Frame | None) -> Any:
        # The wrappers below are unwrapped through self.call, so lookup also sees the inner callable.
        # Exact type checks: isinstance() trusts __class__, which mocks and proxies can fake.
        tp = type(fn)
        if tp is types.FunctionType:
            return self.interpret_function(fn, args, kwargs)
        if tp is types.MethodType:
            return self.call(fn.__func__, (fn.__self__, *args), kwargs, caller)
        if issubclass(tp, functools.partial) and tp.__call__ is _PARTIAL_CALL:
            return self.call(fn.func, (*fn.args, *args), {**fn.keywords, **kwargs}, caller)
        if issubclass(tp, type):
            return self.call_class(fn, args, kwargs, caller)
        if caller is not None and tp is types.BuiltinFunctionType:
            special = _FRAME_BUILTINS.get(fn)
            if special is not None:
                handled, result = special(self, caller, args, kwargs)
                if handled:
                    return result
            return fn(*args, **kwargs)
        call_attr = _mro_lookup(tp, "__call__")
        if type(call_attr) is types.FunctionType:  # callable object with a Python __call__
            return self.call(call_attr, (fn, *args), kwargs, caller)
        return fn(*args, **kwargs)

    def call_class(self, cls: type, args: tuple, kwargs: dict, caller: Frame | None) -> Any:
        """Emulates type.__call__: native __new__ (unless Python-defined), interpreted Python __init__."""
        if super is cls and caller is not None and not args and not kwargs:
            return _zero_arg_super(caller)
        if _mro_lookup(type(cls), "__call__") is not _TYPE_CALL:  # custom metaclass __call__ (Enum, ...)
            return cls(*args, **kwargs)
        new = _mro_lookup(cls, "__new__")
        init = _mro_lookup(cls, "__init__")
        py_new = isinstance(new, staticmethod) and isinstance(new.__func__, types.FunctionType)
        py_init = isinstance(init, types.FunctionType)
        if not (py_new or py_init):
            return cls(*args, **kwargs)
        new_fn = cls.__new__
        if new_fn is _OBJECT_NEW:
            obj = _OBJECT_NEW(cls)  # object.__new__ ignores the arguments when __init__ is overridden
        else:
            obj = self.call(new_fn, (cls, *args), kwargs, caller)
        if not isinstance(obj, cls):
            return obj
        init = _mro_lookup(type(obj), "__init__")
        if init is None or init is _OBJECT_INIT:
            return obj
        res = self.call(init, (obj, *args), kwargs, caller)
        if res is not None:
            raise TypeError(f"__init__() should return None, not '{type(res).__name__}'")
        return obj

    def interpret_function(self, fn: types.FunctionType, args: tuple, kwargs: dict) -> Any:
        code = fn.__code__
        if code.co_flags & _CO_GENERATOR:
            # Generator frames outlive the call and are resumed by native code (for loops, next());
            # they run natively. Coroutines/async generators are interpreted and hit RETURN_GENERATOR,
            # which raises InterpreterError.
            return fn(*args, **kwargs)
        frame = Frame(fn, code, bind_arguments(fn, args, kwargs))
        return self.run_frame(frame)

    # ------------------------------------------------------------------------------------------
    # the loop
    # ------------------------------------------------------------------------------------------
    def run_frame(self, f: Frame) -> Any:
        frames = active_frames()
        frames.append((self, f))
        record = self.record
        if record:
            self.log.append(f"call {f.code.co_name} ({os.path.basename(f.code.co_filename)}:"
                            f"{f.code.co_firstlineno})")
        instructions = f.info.instructions
        handlers = self.handlers
        try:
            while True:
                f.cur = idx = f.idx
                instr = f.instr = instructions[idx]
                f.idx = idx + 1
                if record:
                    self.instructions.append(instr)
                handler = handlers.get(instr.opname)
                if handler is None:
                    raise self.unsupported(f, f"unsupported bytecode {instr.opname}",
                                           UNSUPPORTED_HINTS.get(instr.opname))
                try:
                    if handler(self, f, instr) is RETURN:
                        if record:
                            self.log.append(f"return {f.code.co_name}")
                        return f.return_value
                    continue
                except InterpreterError:
                    raise  # interpreter limitations are not catchable by the interpreted program
                except BaseException as e:
                    exc = e
                # Outside the `except` clause on purpose: the real interpreter must not chain `exc`
                # to anything of its own when we re-raise it below.
                if f.reraising:
                    f.reraising = False
                else:
                    self.set_context(exc, overwrite=False)
                entry = f.info.handler_for(instr.offset)
                if entry is None:
                    if record:
                        self.log.append(f"raise {f.code.co_name}: {type(exc).__name__}")
                    raise exc
                del f.stack[entry.depth:]
                if entry.lasti:
                    f.stack.append(instr.offset)
                f.stack.append(exc)
                f.jump(entry.target)
                del exc
        finally:
            frames.pop()


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


# ----------------------------------------------------------------------------------------------
# builtins that inspect their caller's frame: give them the interpreted frame, not ours
# ----------------------------------------------------------------------------------------------
def _zero_arg_super(f: Frame) -> Any:
    code = f.code
    if code.co_argcount == 0 and not (code.co_flags & inspect.CO_VARARGS):
        raise RuntimeError("super(): no arguments")
    cell = f.cells.get("__class__")
    if cell is None or "__class__" not in code.co_freevars:
        raise RuntimeError("super(): __class__ cell not found")
    try:
        cls = cell.cell_contents
    except ValueError:
        raise RuntimeError("super(): empty __class__ cell") from None
    if not isinstance(cls, type):
        raise RuntimeError(f"super(): __class__ is not a type ({type(cls).__name__})")
    first = code.co_varnames[0]
    if first in f.cells:  # the first argument is captured by a closure: it lives in its cell
        try:
            obj = f.cells[first].cell_contents
        except ValueError:
            raise RuntimeError("super(): arg[0] deleted") from None
    elif first in f.locals:
        obj = f.locals[first]
    else:
        raise RuntimeError("super(): arg[0] deleted")
    return super(cls, obj)


def _b_globals(rt, f, args, kwargs):
    return (not args and not kwargs), f.globals


def _b_locals(rt, f, args, kwargs):
    return (not args and not kwargs), (f.locals_snapshot() if not args and not kwargs else None)


def _b_dir(rt, f, args, kwargs):
    if args or kwargs:
        return False, None
    return True, sorted(f.locals_snapshot())


def _b_eval_exec(fn):
    def special(rt, f, args, kwargs):
        if len(args) != 1 or kwargs:
            return False, None
        return True, fn(args[0], f.globals, f.locals_snapshot())

    return special


_FRAME_BUILTINS = {
    builtins.globals: _b_globals,
    builtins.locals: _b_locals,
    builtins.vars: _b_locals,
    builtins.dir: _b_dir,
    builtins.eval: _b_eval_exec(builtins.eval),
    builtins.exec: _b_eval_exec(builtins.exec),
}
