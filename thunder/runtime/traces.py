"""Trace objects: what `thunder.last_traces` returns. Each is one stage of compilation, readable
as Python (`str(trace)`) and as MLIR (`trace.to_mlir()`), and names the pass that produced it."""
import ast
import functools

from thunder.core.trace import Ref
from thunder.dialects.attrs import tensor_meta
from thunder.dialects.definitions import context
from thunder.dialects.emit import find_func, loc_names
from thunder.dialects.mlir import LOCK, ir
from thunder.runtime.codegen import compile_source, python_source


def _locked(method):
    """A method that reads the trace's module in the shared MLIR context (dialects/mlir.py LOCK:
    another thread may be compiling)."""
    @functools.wraps(method)
    def locked(*args, **kwargs):
        with LOCK:
            return method(*args, **kwargs)

    return locked


def _snapshot(module):
    """A clone of module's op that no block holds. Given no insertion point, the bindings' clone
    inserts at the active one if there is one (a caller's `with ir.InsertionPoint(...)`), which
    would put the copy into the caller's block; so it is made in a holder and detached from it
    (printed inside another op, its locations would lose their #loc aliases)."""
    holder = ir.Module.create(loc=ir.Location.unknown(context=module.context))
    copy = module.operation.clone(ip=ir.InsertionPoint(holder.body))
    copy.detach_from_parent()
    return copy


class Trace:
    def __init__(self, producer, module=None, python=None, output_spec=None, fn_name="computation", fn=None,
                 codegen=None):
        """codegen: python_source's options for the Python printed from module when asked
        (default: header "produced by: <producer>")."""
        self.producer = producer
        self._fn = fn  # the compiled function that runs, for the traces that ran
        self.fn_name = fn_name  # e.g. "interpreter (acquisition)", "cse", "torch executor"
        # a copy of the module as the pass left it (the passes after it change the module),
        # printed with locations when first asked for: cloning costs ~1% of printing, which was
        # most of what keeping a trace cost on a first call
        self._copy = _snapshot(module) if module is not None else None
        self._mlir_debug = None
        self._mlir = None
        self._python = python
        self._output_spec = output_spec
        self._codegen = codegen or {"header": f"produced by: {producer}"}

    @classmethod
    def from_mlir(cls, producer, text, fn_name, codegen=None, python=None, fn=None):
        """A trace of MLIR text (with locations) printed before (a func's: @backward; a program
        from the program cache, with its Python)."""
        trace = cls(producer, python=python, fn_name=fn_name, fn=fn, codegen=codegen)
        trace._mlir_debug = text
        return trace

    @property
    def name(self):
        return self.producer

    def _debug_text(self):
        """The module's text with locations (None for a trace of Python only); under LOCK.
        Not verified again: the pass manager verified it after the pass, and verifying while
        printing runs every op's meta function once more per trace kept."""
        if self._mlir_debug is None and self._copy is not None:
            self._mlir_debug = self._copy.get_asm(enable_debug_info=True, assume_verified=True)
            self._copy = None
        return self._mlir_debug

    @_locked
    def to_mlir(self, debug_info=False) -> str:
        """The trace as MLIR text in the ltorch/thunder dialects (with locations: the names of
        values and the user's source lines, when debug_info)."""
        text = self._debug_text()
        if debug_info or text is None:
            return text
        if self._mlir is None:
            self._mlir = str(self.module())
        return self._mlir

    @_locked
    def module(self):
        """A fresh ir.Module of this trace (with locations)."""
        with context():
            return ir.Module.parse(self._debug_text())

    @_locked
    def python(self) -> str:
        if self._python is None:
            self._python = python_source(self.module(), self.fn_name, output_spec=self._output_spec,
                                         **self._codegen)
        return self._python

    def __str__(self):
        return self.python()

    def __repr__(self):
        return f"<Trace produced by {self.producer!r}>"

    @property
    @_locked
    def args(self):
        """The trace function's parameters, in order: Refs (name, shape, dtype, device) of its
        tensors; parameter names for the prologue, which takes (args, kwargs)."""
        if self._debug_text() is not None:
            module = self.module()
            with module.context:
                f = find_func(module.operation, self.fn_name)
                if f is not None:
                    return [Ref((loc_names(a.location) or [f"arg{i}"])[0], *tensor_meta(a.type))
                            for i, a in enumerate(f.regions[0].blocks[0].arguments)]

        first = next(n for n in ast.parse(self.python()).body  # (not an outlined block before it)
                     if isinstance(n, ast.FunctionDef) and n.name == self.fn_name)
        return [a.arg for a in first.args.args]

    @_locked
    def python_callable(self):
        """A Python function that runs this trace on real tensors: the very function that ran,
        for the programs of a call (execution trace, forward, backward, prologue), else compiled
        from the trace's Python (a trace before code generation may hold what Python cannot
        express: codegen.Unprintable says so)."""
        if self._fn is not None:
            return self._fn

        if self._debug_text() is None:
            return compile_source(self._python, self.fn_name)
        constants = {}
        source = python_source(self.module(), self.fn_name, output_spec=self._output_spec, constants=constants)
        return compile_source(source, self.fn_name, constants=constants)

    def save_trace(self, path):
        """Writes the trace's Python (str(trace)) to the file path."""
        with open(path, "w") as f:
            f.write(self.python())
