"""The Runtime: one ``interpret`` call's state (hooks, recording, the handled-exception slot) plus the
call dispatch (interpret vs. native) and the frame execution loop with exception-table unwinding."""
from __future__ import annotations

import builtins
import collections
import functools
import inspect
import itertools
import os
import sys
import threading
import types
from typing import Any, Callable
import operator

from thunder.core import symbols
from thunder.interpreter.binding import bind_arguments
from thunder.interpreter.compat import HANDLERS, SENT_RETURNED
from thunder.interpreter.errors import InterpreterError
from thunder.interpreter.frame import Frame, Provenance
from thunder.interpreter.opcodes.table import RETURN, SUSPEND, UNSUPPORTED_HINTS

__all__ = ["Runtime", "WithRuntime", "current_frame", "active_frames"]

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


_CO_GENERATOR = inspect.CO_GENERATOR
# generator functions of these packages run natively (torch's Module.parameters() and the like:
# as before generators were interpreted, what they hand back is reported as native results); not
# their generator expressions, which test the values around them (isinstance of a proxy)
NATIVE_GENERATOR_PACKAGES = ("torch",)


_PACKAGE_DIRS = {}  # package name -> its directory + os.sep, once it is imported


def _native_generator(code: types.CodeType) -> bool:
    for name in NATIVE_GENERATOR_PACKAGES:
        where = _PACKAGE_DIRS.get(name)
        if where is None:
            file = getattr(sys.modules.get(name), "__file__", None)
            if not file:
                continue
            where = _PACKAGE_DIRS[name] = os.path.dirname(file) + os.sep
        if code.co_filename.startswith(where):
            return True
    return False

_OBJECT_NEW = object.__new__
_OBJECT_INIT = object.__init__
_OBJECT_GETATTRIBUTE = object.__dict__["__getattribute__"]
_TYPE_CALL = type.__dict__["__call__"]
_PARTIAL_CALL = functools.partial.__call__


# natives that call the functions they are given (map(f, xs), sorted(xs, key=f)): Python
# functions passed to them are interpreted when called, so they see what the caller's code sees
_CALLBACK_TAKERS = frozenset({map, filter, sorted, min, max, functools.reduce, itertools.starmap,
                              itertools.filterfalse, itertools.takewhile, itertools.dropwhile, itertools.groupby,
                              itertools.accumulate})


def _takes_callbacks(fn) -> bool:
    try:
        return fn in _CALLBACK_TAKERS or (getattr(fn, "__name__", None) == "sort" and
                                          type(getattr(fn, "__self__", None)) is list)
    except TypeError:  # unhashable
        return False


class _Callback:
    """A Python function handed to native code, interpreted when called."""

    __slots__ = ("rt", "fn", "caller")

    def __init__(self, rt, fn, caller):
        self.rt, self.fn, self.caller = rt, fn, caller

    def __call__(self, *args, **kwargs):
        return self.rt.call(self.fn, args, kwargs, self.caller)


def _interpreted_callbacks(rt, args, kwargs, caller):
    def wrap(v):
        python = type(v) is types.FunctionType or (type(v) is types.MethodType and
                                                   type(v.__func__) is types.FunctionType)
        return _Callback(rt, v, caller) if python else v

    return tuple(wrap(a) for a in args), {k: wrap(v) for k, v in kwargs.items()}


def _delegating(f: Frame) -> bool:
    """Whether a suspended generator frame is in a `yield from` (its yield follows a SEND)."""
    return f.cur > 0 and f.info.instructions[f.cur - 1].opname == "SEND"


def _mro_lookup(tp: type, name: str) -> Any:
    """The raw class-dict entry for ``name`` along ``tp``'s MRO (no descriptor binding), or None."""
    for klass in tp.__mro__:
        d = klass.__dict__
        if name in d:
            return d[name]
    return None


class WithRuntime:
    """A replacement that lookup answers which runs as part of the interpretation: called as
    ``fn(rt, caller, *args, **kwargs)`` (the Runtime, the calling Frame or None), it may report
    reads to ``rt.on_load``, tell ``rt.on_call``, interpret calls (``rt.call``) or interpret the
    callable it stands for after all (``rt.call_unlooked``)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable):
        self.fn = fn


class Runtime:
    def __init__(self, lookup: Callable | None, on_load: Callable | None, record: bool,
                 on_store: Callable | None = None, on_call: Callable | None = None,
                 on_create: Callable | None = None, on_key: Callable | None = None,
                 on_is: Callable | None = None):
        self.lookup = lookup
        self.on_key = on_key  # the key a read of a dict or set looks up (interpret's doc)
        self.on_is = on_is
        self.on_create = on_create  # told of each instance of a Python class the program makes
        self.on_load = on_load
        self.on_store = on_store
        self.on_call = on_call
        self.own_cells: dict = {}  # id -> cell made by an interpreted frame (MAKE_CELL; cells are unhashable)
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
    def key(self, container: Any, key: Any, write: bool = False) -> Any:
        """The key a read (or write) of container (a dict or set) uses: on_key's answer."""
        if self.on_key is None or not isinstance(container, (dict, set, frozenset)):
            return key
        return self.on_key(container, key, write)

    def same(self, a: Any, b: Any) -> bool:
        """`a is b`, as on_is answers it for stand-ins."""
        if a is b or self.on_is is None:
            return a is b
        return self.on_is(a, b)

    def loaded(self, value: Any, kind: str, name: str, owner: Any, f: Frame) -> Any:
        """Passes a value read from a global / closure cell / attribute through on_load."""
        if self.on_load is None:
            return value
        return self.on_load(value, Provenance(kind, name, owner, f.code.co_name, f.code.co_filename, f.lineno))

    def stored(self, value: Any, kind: str, name: str, owner: Any, f: Frame) -> bool:
        """Tells on_store about a write to a global or an attribute (before it happens); whether
        on_store took the write over (an attribute store is then not made)."""
        if self.on_store is not None:
            return bool(self.on_store(value, Provenance(kind, name, owner, f.code.co_name, f.code.co_filename,
                                                         f.lineno)))
        return False

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
    def load_attribute(self, obj: Any, name: str, f: Frame, report: bool = True) -> Any:
        """getattr(obj, name) as the program does it. Python property getters are interpreted (they
        may contain ops the caller wants to see; their own reads are reported, their result is not),
        but only in the plain case where getattr would certainly call fget: default __getattribute__,
        no __getattr__ fallback, and not a class (class attribute access returns the property object
        itself). Other values go through on_load (unless report is False)."""
        tp = type(obj)
        if not issubclass(tp, type):
            attr = _mro_lookup(tp, name)
            if (type(attr) is property and isinstance(attr.fget, types.FunctionType)
                    and _mro_lookup(tp, "__getattribute__") is _OBJECT_GETATTRIBUTE):
                fallback = _mro_lookup(tp, "__getattr__")
                if fallback is None:
                    return self.call(attr.fget, (obj,), {}, f)
                # (nn.Module's __getattr__: a getter that raises AttributeError falls back to it, as
                # CPython's slot does; a getter run natively instead would run its side effects at
                # tracing and again in the prologue: a spectral norm's power iteration twice)
                try:
                    return self.call(attr.fget, (obj,), {}, f)
                except AttributeError:
                    if isinstance(fallback, types.FunctionType):
                        return self.call(fallback, (obj, name), {}, f)
                    value = fallback(obj, name)
                    return self.loaded(value, "attr", name, obj, f) if report else value
        value = getattr(obj, name)
        return self.loaded(value, "attr", name, obj, f) if report else value

    def python_slot(self, obj: Any, name: str) -> types.FunctionType | None:
        """The Python function implementing special method `name` for obj (to be interpreted, so
        what it reads is seen), or None when it is native or obj is a class."""
        tp = type(obj)
        if issubclass(tp, type):
            return None
        fn = _mro_lookup(tp, name)
        return fn if type(fn) is types.FunctionType else None

    def truth(self, v: Any, f: Frame) -> bool:
        """bool(v) with Python __bool__/__len__ interpreted (the checks of PyObject_IsTrue)."""
        tp = type(v)
        if tp is bool:
            return v
        if tp in _NATIVE_TRUTH:
            return bool(v)
        if tp is symbols.SymInt or tp is symbols.SymFloat:  # a decision on a symbolic size: a guard
            return symbols.truth(v)
        fn = self.python_slot(v, "__bool__")
        if fn is not None:
            r = self.call(fn, (v,), {}, f)
            if type(r) is not bool:
                raise TypeError(f"__bool__ should return bool, returned {type(r).__name__}")
            return r
        if _mro_lookup(tp, "__bool__") is None:
            fn = self.python_slot(v, "__len__")
            if fn is not None:
                return self.length(v, fn, f) != 0
        return bool(v)

    def length(self, v: Any, fn: types.FunctionType, f: Frame) -> int:
        """len(v) through an interpreted Python __len__, with len()'s checks."""
        n = operator.index(self.call(fn, (v,), {}, f))
        if n < 0:
            raise ValueError("__len__() should return >= 0")
        return n

    def items(self, seq: Any, f: Frame) -> Any:
        """An iterator over a list or tuple that reports each item to on_load (kind "item")."""
        if self.on_load is None:
            return iter(seq)
        return _ReportingIterator(self, seq, f)

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
                if type(replacement) is WithRuntime:
                    return replacement.fn(self, caller, *args, **kwargs)
                return replacement(*args, **kwargs)
        return self.call_unlooked(fn, args, kwargs, caller)

    def call_unlooked(self, fn: Any, args: tuple, kwargs: dict, caller: Frame | None) -> Any:
        # The wrappers below are unwrapped through self.call, so lookup also sees the inner callable.
        # Exact type checks: isinstance() trusts __class__, which mocks and proxies can fake.
        tp = type(fn)
        if tp is types.FunctionType:
            return self.interpret_function(fn, args, kwargs)
        if caller is not None and (tp is types.BuiltinFunctionType or tp is type) and _takes_callbacks(fn):
            args, kwargs = _interpreted_callbacks(self, args, kwargs, caller)
        if tp is types.MethodType:
            return self.call(fn.__func__, (fn.__self__, *args), kwargs, caller)
        if issubclass(tp, functools.partial) and tp.__call__ is _PARTIAL_CALL:
            bound, keywords = self._partial_bound(fn, caller)
            return self.call(fn.func, (*bound, *args), {**keywords, **kwargs}, caller)
        if issubclass(tp, type):
            return self.call_class(fn, args, kwargs, caller)
        if caller is not None and tp is types.BuiltinFunctionType:
            special = _FRAME_BUILTINS.get(fn)
            if special is not None:
                handled, result = special(self, caller, args, kwargs)
                if handled:
                    return result
            owner = getattr(fn, "__self__", None)
            if type(owner) in _CONTAINERS and fn.__name__ in _MUTATORS:  # lst.append(x), d.update(...)
                self.stored((*args, *kwargs.values()), "mutator", fn.__name__, owner, caller)
            elif args and fn.__name__ in _KEY_READS and isinstance(owner, (dict, set, frozenset)):
                args = (self.key(owner, args[0]), *args[1:])
                if fn.__name__ != "__contains__" and isinstance(owner, dict) and not kwargs and args[0] in owner:
                    # d.get(k) / d.__getitem__(k) of a key it holds: an item read, as d[k] (on_load)
                    return self.loaded(fn(*args), "item", args[0], owner, caller)  # (the dict's own method)
            return self.native(fn, args, kwargs, caller)
        call_attr = _mro_lookup(tp, "__call__")
        if type(call_attr) is types.FunctionType:  # callable object with a Python __call__
            return self.call(call_attr, (fn, *args), kwargs, caller)
        return self.native(fn, args, kwargs, caller)

    def _partial_bound(self, p: functools.partial, caller: Frame | None) -> tuple[tuple, dict]:
        """The arguments a functools.partial binds, passed through on_load as what they are (its
        attributes `args` and `keywords`), so a tensor bound outside the call is seen as read."""
        if self.on_load is None:
            return p.args, p.keywords
        code = caller.code if caller is not None else getattr(p.func, "__code__", None)
        where = (code.co_name, code.co_filename, caller.lineno if caller is not None else code.co_firstlineno) \
            if code is not None else ("?", "?", None)
        args = self.on_load(p.args, Provenance("attr", "args", p, *where))
        keywords = p.keywords
        if keywords:
            keywords = {k: self.on_load(v, Provenance("item", k, keywords, *where))
                        for k, v in self.on_load(keywords, Provenance("attr", "keywords", p, *where)).items()}
        return args, keywords

    def native(self, fn: Any, args: tuple, kwargs: dict, caller: Frame | None) -> Any:
        """A native call; its result passes on_load (kind "native", owner fn), so a caller that
        stands proxies for some objects can map them (a weakref resolving to an input tensor)."""
        result = fn(*args, **kwargs)
        if self.on_load is None or caller is None:
            return result
        return self.on_load(result, Provenance("native", getattr(fn, "__name__", "?"), fn, caller.code.co_name,
                                               caller.code.co_filename, caller.lineno))

    def call_class(self, cls: type, args: tuple, kwargs: dict, caller: Frame | None) -> Any:
        """Emulates type.__call__: native __new__ (unless Python-defined), interpreted Python __init__."""
        obj = self._make_instance(cls, args, kwargs, caller)
        if self.on_create is not None and type(obj).__module__ != "builtins":
            self.on_create(obj)
        return obj

    def _make_instance(self, cls: type, args: tuple, kwargs: dict, caller: Frame | None) -> Any:
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

    def _reported(self, gen, fn):
        """A native generator whose items pass on_load (kind "native", name "<generator>"), as a
        native call's result does: a caller standing proxies for objects can map them."""
        code = fn.__code__
        for item in gen:
            yield self.on_load(item, Provenance("native", "<generator>", fn, code.co_name, code.co_filename,
                                                code.co_firstlineno))

    def interpret_function(self, fn: types.FunctionType, args: tuple, kwargs: dict) -> Any:
        code = fn.__code__
        if code.co_flags & _CO_GENERATOR and code.co_name != "<genexpr>" and _native_generator(code):
            gen = fn(*args, **kwargs)
            return gen if self.on_load is None else self._reported(gen, fn)
        done = self.on_call(fn) if self.on_call is not None else None
        load_default = None
        if self.on_load is not None:
            def load_default(name, value):
                return self.on_load(value, Provenance("default", name, fn, code.co_name, code.co_filename,
                                                      code.co_firstlineno))
        frame = Frame(fn, code, bind_arguments(fn, args, kwargs, load_default))
        if code.co_flags & _CO_GENERATOR:
            gen = self.generator(frame)
            gen.__name__, gen.__qualname__ = fn.__name__, fn.__qualname__
            return gen
        result = self.run_frame(frame)
        if done is not None:
            done(result)
        return result

    def generator(self, f: Frame):
        """The generator object of a generator function's call: each resumption (next, send,
        throw, close, by interpreted or native code) interprets its frame up to the next yield.
        (Coroutines and async generators are not: their frames stop at an unsupported opcode.)"""
        sent, thrown = None, None
        while True:
            try:
                if thrown is None:
                    result = self.run_frame(f)
                elif _delegating(f):
                    result = self._throw_delegated(f, thrown)
                else:
                    result = self.run_frame(f, (f.instr, thrown))
            except StopIteration as e:  # (3.11; 3.12's bytecode converts it itself)
                raise RuntimeError("generator raised StopIteration") from e
            finally:
                thrown = None
            if result is not SUSPEND:
                return result
            try:
                sent = yield f.yielded
            except BaseException as e:  # noqa: BLE001 - throw(), close(): raised where the frame yields
                thrown = e
            else:
                f.stack.append(sent)  # the value of the yield expression

    def _throw_delegated(self, f: Frame, exc: BaseException):
        """throw()/close() of a generator suspended in `yield from`: to the sub-iterator first, as
        CPython does; what it raises is raised in the frame at its SEND."""
        send_instr = f.info.instructions[f.cur - 1]
        receiver = f.stack[-1]
        try:
            if isinstance(exc, GeneratorExit):
                close = getattr(receiver, "close", None)
                if close is not None:
                    close()
                raise exc
            throw = getattr(receiver, "throw", None)
            if throw is None:
                raise exc
            f.yielded = throw(exc)
            return SUSPEND
        except StopIteration as e:  # the sub-iterator returned: on after the yield from, with its value
            SENT_RETURNED(f, e.value)
            f.jump(send_instr.argval)
            return self.run_frame(f)
        except BaseException as e:  # noqa: BLE001 - raised in the frame
            return self.run_frame(f, (send_instr, e))

    # ------------------------------------------------------------------------------------------
    # the loop
    # ------------------------------------------------------------------------------------------
    def run_frame(self, f: Frame, throw: tuple | None = None) -> Any:
        """Runs f until it returns (its value) or yields (SUSPEND); throw: (instruction,
        exception) raised there first (throw() into a suspended generator)."""
        frames = active_frames()
        frames.append((self, f))
        record = self.record
        if record:
            self.log.append(f"call {f.code.co_name} ({os.path.basename(f.code.co_filename)}:"
                            f"{f.code.co_firstlineno})")
        info = f.info
        instructions = info.instructions
        if self.handlers is HANDLERS:  # (each instruction's handler looked up once per code object)
            handlers = info.handlers
            if handlers is None:
                handlers = info.handlers = [HANDLERS.get(ins.opname) for ins in instructions]
        else:
            handlers = [self.handlers.get(ins.opname) for ins in instructions]
        try:
            while True:
                if throw is not None:
                    instr, exc = throw
                    throw = None
                else:
                    f.cur = idx = f.idx
                    instr = f.instr = instructions[idx]
                    f.idx = idx + 1
                    if record:
                        self.instructions.append(instr)
                    handler = handlers[idx]
                    if handler is None:
                        raise self.unsupported(f, f"unsupported bytecode {instr.opname}",
                                               UNSUPPORTED_HINTS.get(instr.opname))
                    try:
                        result = handler(self, f, instr)
                        if result is RETURN:
                            if record:
                                self.log.append(f"return {f.code.co_name}")
                            return f.return_value
                        if result is SUSPEND:
                            return SUSPEND
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
                # like CPython, an exception raised (not re-raised) in a frame gets a traceback
                # entry for it at this line, in place of the interpreter's own entries
                if f.keep_traceback:
                    f.keep_traceback = False
                    exc.__traceback__ = strip_interpreter(exc.__traceback__)
                else:
                    exc.__traceback__ = user_traceback(exc.__traceback__, f)
                entry = f.info.handler_for(instr.offset)
                if entry is None:
                    if record:
                        self.log.append(f"raise {f.code.co_name}: {type(exc).__name__}")
                    f.stack.clear()  # the frame drops its values, as CPython's does
                    try:
                        raise exc
                    finally:
                        del exc  # a local holding the exception would make a cycle with its traceback
                del f.stack[entry.depth:]
                if entry.lasti:
                    f.stack.append(instr.offset)
                f.stack.append(exc)
                f.jump(entry.target)
                del exc
        finally:
            frames.pop()


def _call_in(fn: Callable, *args: Any) -> Any:
    return fn(*args)


# CPython (3.11, 3.12) keeps frames on a stack of memory chunks and frees a chunk as soon as the
# frame at its base returns, so a call made again and again at a chunk's boundary maps and unmaps
# memory each time. Interpreting nests many Python frames per level of the program, and where the
# boundary fell depended on the caller's stack depth: at some depths one interpretation of a
# 24-layer Llama forward mapped and unmapped 6,430 chunks (~15% of its time). An interpretation
# runs under this frame of 1 MiB of stack slots (never written, so never touched), which opens a
# chunk with about as much room after it for the interpretation's frames.
call_with_room = types.FunctionType(_call_in.__code__.replace(co_stacksize=1 << 17), {}, "call_with_room")


class _ReportingIterator:
    """Iterates a list (live, as list iteration does) or a tuple, passing each item to on_load."""

    __slots__ = ("rt", "seq", "f", "i")

    def __init__(self, rt: Runtime, seq: Any, f: Frame):
        self.rt, self.seq, self.f, self.i = rt, seq, f, 0

    def __iter__(self):
        return self

    def __next__(self):
        i = self.i
        try:
            value = self.seq[i]
        except IndexError:
            raise StopIteration from None
        self.i = i + 1
        return self.rt.loaded(value, "item", i, self.seq, self.f)


_NATIVE_TRUTH = frozenset({int, float, str, type(None), list, tuple, dict, set, bytes})


# ----------------------------------------------------------------------------------------------
# tracebacks: exceptions leaving interpreted frames carry the user's frames, as in eager
# ----------------------------------------------------------------------------------------------
def _interpreter_files() -> frozenset:
    folder = os.path.dirname(os.path.abspath(__file__))  # with its subpackages (opcodes/)
    return frozenset(os.path.join(d, n) for d, _, names in os.walk(folder) for n in names if n.endswith(".py"))


_INTERPRETER_FILES = _interpreter_files()


def _frame_template(getframe):
    return getframe()


@functools.lru_cache(maxsize=1024)
def _frame_code(code: types.CodeType) -> types.CodeType:
    """A code object that returns its own frame, named and placed like `code`."""
    return _frame_template.__code__.replace(co_name=code.co_name, co_qualname=getattr(code, "co_qualname", code.co_name),
                                            co_filename=code.co_filename, co_firstlineno=code.co_firstlineno)


def strip_interpreter(tb: types.TracebackType | None) -> types.TracebackType | None:
    """tb without its leading entries in the interpreter's own code."""
    while tb is not None and tb.tb_frame.f_code.co_filename in _INTERPRETER_FILES:
        tb = tb.tb_next
    return tb


def user_traceback(tb: types.TracebackType | None, f: Frame) -> types.TracebackType:
    """The traceback of an exception leaving interpreted frame f: an entry for f at its current
    line (a real frame object of a code object named and placed like f's, made by running it),
    then what happened below it (the interpreter's own entries dropped)."""
    # (the new frame's f_back is this function's frame: no local of it may hold the new frame)
    # (its globals are f's, for linecache; it reads none, so sys._getframe comes as an argument)
    return types.TracebackType(strip_interpreter(tb), types.FunctionType(_frame_code(f.code), f.globals)(sys._getframe),
                               -1, f.lineno or f.code.co_firstlineno)


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


# ----------------------------------------------------------------------------------------------
# builtins that inspect their caller's frame (given the interpreted frame, not ours), and those that
# read or write attributes and lengths (getattr, hasattr, setattr, len: their reads are reported)
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


def _b_getattr(rt, f, args, kwargs):
    if kwargs or len(args) not in (2, 3) or not isinstance(args[1], str):
        return False, None
    obj, name = args[0], args[1]
    if len(args) == 2:
        return True, rt.load_attribute(obj, name, f)
    try:
        return True, rt.load_attribute(obj, name, f)
    except AttributeError:
        rt.loaded(False, "hasattr", name, obj, f)
        return True, args[2]


def _b_hasattr(rt, f, args, kwargs):
    if kwargs or len(args) != 2 or not isinstance(args[1], str):
        return False, None
    try:
        rt.load_attribute(args[0], args[1], f, report=False)
        found = True
    except AttributeError:
        found = False
    rt.loaded(found, "hasattr", args[1], args[0], f)
    return True, found


def _b_setattr(rt, f, args, kwargs):
    if kwargs or len(args) != 3 or not isinstance(args[1], str):
        return False, None
    if not rt.stored(args[2], "attr", args[1], args[0], f):
        setattr(*args)
    return True, None


def _b_len(rt, f, args, kwargs):
    if kwargs or len(args) != 1:
        return False, None
    fn = rt.python_slot(args[0], "__len__")
    if fn is None:
        return False, None
    return True, rt.length(args[0], fn, f)


def _b_exc_info(rt, f, args, kwargs):
    """sys.exc_info() in interpreted code: the exception its except block handles (the thread's
    own state does not have it: the interpreter catches exceptions natively and leaves its handler)."""
    if args or kwargs:
        return False, None
    e = rt.handled_exc
    return True, ((None, None, None) if e is None else (type(e), e, e.__traceback__))


def _b_exception(rt, f, args, kwargs):
    return (not args and not kwargs), rt.handled_exc


# builtin containers and their methods that change them: told to on_store (kind "mutator")
_CONTAINERS = frozenset({list, dict, set, collections.OrderedDict, collections.defaultdict, collections.deque})
_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "popitem",
                       "add", "discard", "sort", "reverse", "appendleft", "extendleft", "popleft", "rotate",
                       "__setitem__", "__delitem__", "__iadd__", "move_to_end"})

_KEY_READS = frozenset({"get", "__getitem__", "__contains__"})  # (methods of dicts and sets reading by key)

_FRAME_BUILTINS = {
    sys.exc_info: _b_exc_info,
    **({sys.exception: _b_exception} if hasattr(sys, "exception") else {}),
    builtins.getattr: _b_getattr,
    builtins.hasattr: _b_hasattr,
    builtins.setattr: _b_setattr,
    builtins.len: _b_len,
    builtins.globals: _b_globals,
    builtins.locals: _b_locals,
    builtins.vars: _b_locals,
    builtins.dir: _b_dir,
    builtins.eval: _b_eval_exec(builtins.eval),
    builtins.exec: _b_eval_exec(builtins.exec),
}
