"""Trace objects: what `thunder.last_traces` returns. Each is one stage of compilation, readable
as Python (`str(trace)`) and as MLIR (`trace.to_mlir()`), and names the pass that produced it."""
from thunder.dialects.definitions import context
from thunder.dialects.mlir import ir


class Trace:
    def __init__(self, producer, module=None, python=None, output_spec=None, fn_name="computation"):
        self.producer = producer
        self.fn_name = fn_name  # e.g. "interpreter (acquisition)", "cse", "torch executor"
        self._mlir_debug = module.operation.get_asm(enable_debug_info=True) if module is not None else None
        self._mlir = str(module) if module is not None else None
        self._python = python
        self._output_spec = output_spec

    @property
    def name(self):
        return self.producer

    def to_mlir(self, debug_info=False) -> str:
        """The trace as MLIR text in the ltorch/thunder dialects (with locations: the names of
        values and the user's source lines, when debug_info)."""
        return self._mlir_debug if debug_info else self._mlir

    def module(self):
        """A fresh ir.Module of this trace (with locations)."""
        with context():
            return ir.Module.parse(self._mlir_debug)

    def python(self) -> str:
        if self._python is None:
            from thunder.runtime.codegen import python_source

            self._python = python_source(self.module(), self.fn_name, output_spec=self._output_spec,
                                         header=f"produced by: {self.producer}")
        return self._python

    def __str__(self):
        return self.python()

    def __repr__(self):
        return f"<Trace produced by {self.producer!r}>"
