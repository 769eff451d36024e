"""Opcode handlers shared by the supported Python versions, one module per opcode family.

A handler is ``handler(rt, frame, instr)``: ``rt`` is the Runtime (calls, loads, exception state),
``frame`` the executing Frame and ``instr`` the ``dis.Instruction``. Handlers that leave the function
return ``RETURN``; jumps set ``frame.idx`` via ``frame.jump(offset)`` (``dis`` already resolved every
jump oparg to an absolute target offset in ``instr.argval``).

``table.py`` holds ``COMMON_HANDLERS`` and ``register``/``op``; importing this package imports every
family module, which registers its handlers there (in this order):

* ``loads_stores``: no-ops, stack manipulation, constants, locals, cells, globals, attributes
* ``operators``: binary/unary/compare operators, subscripting
* ``containers``: building containers and strings, unpacking
* ``jumps``: iteration and jumps
* ``generators``: generators
* ``calls``: calls and function creation
* ``exceptions``: exceptions and with-statements
* ``match``: match statements

Version-specific handlers live in ``compat.py``, which assembles the table actually used.
"""
from thunder.interpreter.opcodes import (loads_stores, operators, containers, jumps, generators,  # noqa: F401
                                         calls, exceptions, match)
from thunder.interpreter.opcodes.generators import send
from thunder.interpreter.opcodes.loads_stores import load_attr
from thunder.interpreter.opcodes.operators import subscript
from thunder.interpreter.opcodes.table import COMMON_HANDLERS, RETURN, SUSPEND, UNSUPPORTED_HINTS, register

__all__ = ["COMMON_HANDLERS", "RETURN", "SUSPEND", "UNSUPPORTED_HINTS", "load_attr", "register", "send", "subscript"]
