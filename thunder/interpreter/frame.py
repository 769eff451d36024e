"""Per-call state of the interpreter: a Frame (locals, cells, value stack, position) and the
static analysis of a code object (instruction list, jump-target index, exception table, lines)."""
from __future__ import annotations

import dis
import functools
import types
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["NULL", "Provenance", "CodeInfo", "ExceptionTableEntry", "analyze", "Frame"]


class _Null:
    """The NULL that CPython pushes below a callable (PUSH_NULL, LOAD_GLOBAL/LOAD_METHOD/LOAD_ATTR low bit).

    A distinct object rather than None because None is an ordinary value on the stack."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


# eq=False: owners can be dicts/tensors, compare by identity only. Not frozen (treat it as
# immutable): one is made for every load, and a frozen dataclass's __init__ costs 4x as much
@dataclass(eq=False, slots=True)
class Provenance:
    """Where a value handed to ``on_load`` came from."""

    kind: str  # "global" | "closure" | "attr"
    name: str  # global name, cell variable name or attribute name
    owner: Any  # globals dict | the cell | the object the attribute was read from
    fn_name: str  # co_name of the function doing the load
    filename: str
    lineno: int | None


class ExceptionTableEntry(NamedTuple):
    start: int  # first offset covered
    end: int  # one past the last offset covered
    target: int  # handler offset
    depth: int  # stack depth to unwind to
    lasti: bool  # whether to push the offset of the raising instruction


def parse_exception_table(code: types.CodeType) -> list[ExceptionTableEntry]:
    """Decode ``co_exceptiontable`` (3.11+ format: varints of 6-bit chunks, bit 6 = continue,
    bit 7 marks the start of an entry; offsets in code units)."""
    data = code.co_exceptiontable
    entries: list[ExceptionTableEntry] = []
    pos = 0

    def varint() -> int:
        nonlocal pos
        b = data[pos]
        pos += 1
        val = b & 63
        while b & 64:
            b = data[pos]
            pos += 1
            val = (val << 6) | (b & 63)
        return val

    while pos < len(data):
        start = varint() * 2
        length = varint() * 2
        target = varint() * 2
        depth_lasti = varint()
        entries.append(ExceptionTableEntry(start, start + length, target, depth_lasti >> 1, bool(depth_lasti & 1)))
    return entries


class CodeInfo:
    """Immutable per-code-object analysis, computed once and cached."""

    __slots__ = ("instructions", "index_of", "exception_table", "linenos", "handlers")

    def __init__(self, code: types.CodeType):
        self.instructions: list[dis.Instruction] = list(dis.get_instructions(code))
        # the opcode handler of each instruction (or None: unsupported), filled by the runtime
        # on the code's first run (runtime.py run_frame)
        self.handlers: list | None = None
        self.index_of: dict[int, int] = {ins.offset: idx for idx, ins in enumerate(self.instructions)}
        self.exception_table = parse_exception_table(code)
        # Source line per instruction; instructions without a position inherit the previous line.
        linenos: list[int | None] = []
        line = code.co_firstlineno
        for ins in self.instructions:
            pos = getattr(ins, "positions", None)
            if pos is not None and pos.lineno is not None:
                line = pos.lineno
            elif ins.starts_line is not None:
                line = ins.starts_line
            linenos.append(line)
        self.linenos = linenos

    def handler_for(self, offset: int) -> ExceptionTableEntry | None:
        # Entries never overlap (nesting is flattened by the compiler), so the first hit is the handler.
        for entry in self.exception_table:
            if entry.start <= offset < entry.end:
                return entry
        return None


@functools.lru_cache(maxsize=4096)
def analyze(code: types.CodeType) -> CodeInfo:
    return CodeInfo(code)


class Frame:
    """One activation of an interpreted function.

    Fast locals and cells are keyed by *name*: ``dis`` already resolves every local/cell/free-variable
    oparg to its name, and names are unique across co_varnames/co_cellvars/co_freevars (an argument that
    is also a cell variable shares one slot, which MAKE_CELL converts into a cell)."""

    __slots__ = ("fn", "code", "info", "globals", "builtins", "locals", "cells", "stack", "idx",
                 "cur", "instr", "kw_names", "return_value", "reraising", "keep_traceback", "yielded")

    def __init__(self, fn: types.FunctionType, code: types.CodeType, locals_: dict[str, Any]):
        self.fn = fn  # needed for COPY_FREE_VARS (closure) and zero-arg super()
        self.code = code
        self.info = analyze(code)
        self.globals: dict = fn.__globals__
        builtins = fn.__builtins__
        self.builtins: dict = builtins if isinstance(builtins, dict) else builtins.__dict__
        self.locals = locals_
        self.cells: dict[str, types.CellType] = {}
        self.stack: list[Any] = []
        self.idx = 0  # index (into info.instructions) of the next instruction to execute
        self.cur = 0  # index of the instruction currently executing
        self.instr: dis.Instruction | None = None  # instruction currently executing
        self.kw_names: tuple[str, ...] = ()  # set by KW_NAMES, consumed by CALL
        self.return_value: Any = None
        self.reraising = False  # set by RERAISE / raise: such exceptions keep their __context__
        self.keep_traceback = False  # set by RERAISE / bare raise: no traceback entry for this frame
        self.yielded: Any = None  # a generator frame: the value of its last YIELD_VALUE

    # --- stack helpers ---
    def push(self, v: Any) -> None:
        self.stack.append(v)

    def pop(self) -> Any:
        return self.stack.pop()

    def top(self) -> Any:
        return self.stack[-1]

    def peek(self, n: int) -> Any:
        """n-th item from the top, 1-based like CPython's PEEK."""
        return self.stack[-n]

    def popn(self, n: int) -> list[Any]:
        if n == 0:  # stack[-0:] would be the whole stack
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    # --- position ---
    def jump(self, offset: int) -> None:
        self.idx = self.info.index_of[offset]

    @property
    def fn_name(self) -> str:
        return self.code.co_name

    @property
    def filename(self) -> str:
        return self.code.co_filename

    @property
    def lineno(self) -> int | None:
        if self.info.linenos:
            return self.info.linenos[self.cur]
        return self.code.co_firstlineno

    def locals_snapshot(self) -> dict[str, Any]:
        """What ``locals()`` would return inside this frame (fast locals plus bound cells)."""
        out = {}
        for name in self.code.co_varnames + self.code.co_cellvars + self.code.co_freevars:
            if name in self.cells:
                try:
                    out[name] = self.cells[name].cell_contents
                except ValueError:
                    pass
            elif name in self.locals:
                out[name] = self.locals[name]
        return out
