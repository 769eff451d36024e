"""Opcode handlers: exceptions and with-statements."""
from __future__ import annotations

from typing import Any

from thunder.interpreter.frame import Frame
from thunder.interpreter.opcodes.table import op


# ----------------------------------------------------------------------------------------------
# exceptions
# ----------------------------------------------------------------------------------------------
@op("PUSH_EXC_INFO")
def _push_exc_info(rt, f: Frame, i) -> None:
    exc = f.stack.pop()
    f.stack.append(rt.handled_exc)  # restored by POP_EXCEPT when the handler finishes
    rt.handled_exc = exc
    f.stack.append(exc)


@op("POP_EXCEPT")
def _pop_except(rt, f: Frame, i) -> None:
    rt.handled_exc = f.stack.pop()


def _exception_matches(exc: BaseException, match: Any) -> bool:
    """PyErr_GivenExceptionMatches: plain MRO check, no __subclasscheck__/__instancecheck__ hooks."""
    if isinstance(match, tuple):
        return any(_exception_matches(exc, m) for m in match)
    return match in type(exc).__mro__


def _check_except_type(match: Any) -> None:
    items = match if isinstance(match, tuple) else (match,)
    for m in items:
        if not (isinstance(m, type) and issubclass(m, BaseException)):
            raise TypeError("catching classes that do not inherit from BaseException is not allowed")


@op("CHECK_EXC_MATCH")
def _check_exc_match(rt, f: Frame, i) -> None:
    match = f.stack.pop()
    _check_except_type(match)
    f.stack.append(_exception_matches(f.stack[-1], match))


def _raise(exc: BaseException):
    """Raises exc without a local of the raising frame holding it (a cycle through the traceback
    would keep the frames, and the tensors they hold, alive until the next garbage collection)."""
    try:
        raise exc
    finally:
        del exc


@op("RERAISE")
def _reraise(rt, f: Frame, i) -> None:
    f.reraising = f.keep_traceback = True  # keep the exception's context/traceback as they are
    _raise(f.stack.pop())


@op("RAISE_VARARGS")
def _raise_varargs(rt, f: Frame, i) -> None:
    cause = f.stack.pop() if i.arg == 2 else None
    if i.arg == 0:  # bare `raise`
        exc = rt.handled_exc
        if exc is None:
            raise RuntimeError("No active exception to reraise")
        f.reraising = f.keep_traceback = True
        del exc
        _raise(rt.handled_exc)
    exc = f.stack.pop()
    if isinstance(exc, type) and issubclass(exc, BaseException):
        cls = exc
        exc = cls()
        if not isinstance(exc, BaseException):
            raise TypeError(f"calling {cls!r} should have returned an instance of BaseException, "
                            f"not {type(exc).__name__}")
    elif not isinstance(exc, BaseException):
        raise TypeError("exceptions must derive from BaseException")
    if i.arg == 2:
        if isinstance(cause, type) and issubclass(cause, BaseException):
            cause = cause()
        elif cause is not None and not isinstance(cause, BaseException):
            raise TypeError("exception causes must derive from BaseException")
        exc.__cause__ = cause  # also sets __suppress_context__
    rt.set_context(exc, overwrite=True)
    f.reraising = True  # context already set above
    try:
        raise exc
    finally:
        del exc, cause  # see _raise


@op("LOAD_ASSERTION_ERROR")
def _load_assertion_error(rt, f: Frame, i) -> None:
    f.stack.append(AssertionError)


# ----------------------------------------------------------------------------------------------
# with-statements
# ----------------------------------------------------------------------------------------------
def _lookup_special(obj: Any, name: str) -> Any:
    """_PyObject_LookupSpecial: look the name up on the type and bind it (instance dict is ignored)."""
    for klass in type(obj).__mro__:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            get = getattr(type(attr), "__get__", None)
            return get(attr, obj, type(obj)) if get is not None else attr
    return None


@op("BEFORE_WITH")
def _before_with(rt, f: Frame, i) -> None:
    mgr = f.stack.pop()
    enter = _lookup_special(mgr, "__enter__")
    if enter is None:
        raise TypeError(f"'{type(mgr).__name__}' object does not support the context manager protocol")
    exit_ = _lookup_special(mgr, "__exit__")
    if exit_ is None:
        raise TypeError(f"'{type(mgr).__name__}' object does not support the context manager protocol "
                        f"(missed __exit__ method)")
    f.stack.append(exit_)  # called later by CALL (normal exit) or WITH_EXCEPT_START
    # __enter__/__exit__ go through rt.call like explicit calls: lookup may intercept, Python ones are interpreted.
    f.stack.append(rt.call(enter, (), {}, f))


@op("WITH_EXCEPT_START")
def _with_except_start(rt, f: Frame, i) -> None:
    """Stack: [__exit__, lasti, previous exc, exc] -> calls __exit__(type, exc, tb) and pushes its result."""
    exc = f.stack[-1]
    exit_ = f.stack[-4]
    f.stack.append(rt.call(exit_, (type(exc), exc, exc.__traceback__), {}, f))
