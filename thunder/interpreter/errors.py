"""Errors raised by the interpreter itself (as opposed to by the interpreted program)."""
from __future__ import annotations

__all__ = ["InterpreterError"]


class InterpreterError(NotImplementedError):
    """Raised when the interpreter meets something it cannot execute (an unsupported opcode or construct).

    It is a limitation of the interpreter, not an error of the program, so interpreted ``except`` blocks
    never see it: it always propagates straight to the caller of ``interpret``.
    """

    def __init__(self, what: str, fn_name: str | None = None, filename: str | None = None,
                 lineno: int | None = None, hint: str | None = None):
        self.what = what
        self.fn_name = fn_name
        self.filename = filename
        self.lineno = lineno
        self.hint = hint
        where = ""
        if fn_name is not None:
            where = f" in {fn_name} ({filename}:{lineno})"
        msg = f"thunder interpreter: {what}{where}"
        if hint:
            msg += f"; {hint}"
        super().__init__(msg)
