"""The values of a func with dynamic sizes (`?` dims, sizes as index values: dialects/sizes.py)
as Python rules compute with them: tensors as proxies whose `?` dims are SymInts
(core/symbols.py), sizes as SymInts, so a decomposition or a VJP run on them computes its sizes
as expressions of the func's symbols, as the interpreter did when it recorded the trace.

A `?` dim of an argument is the expression its `thunder.dims` attribute gives (emission writes
them), else the name of a `tensor.dim` reading it, else a symbol of its own. An i64 argument named
in `thunder.symbol_values` is an int symbol (others are runtime numbers). A symbol's value, what
the rules see as the interpreter saw the call's sizes, is its entry there, else a made-up one
(large, distinct). The results' sizes are their ops' meta functions on these. Each decision the
rules take on the symbols (a comparison, `==` and `!=` in native code included, and a size used
as a plain number: core/symbols.py `sym_strict`) is recorded in `guards`: what is emitted from
them holds where those hold (sizes.GUARDS on the func; code generation checks them). What
Python's C code does with an int (`range(T)`) reads a SymInt's value unseen: the passes record
each rule twice, at other values the second time, and compare (`same_recording`)."""
import math

from thunder.core import symbols
from thunder.core import trace as tracing
from thunder.core.trace import BoundSymbol, Ref
from thunder.core.proxies import proxy_of_meta
from thunder.dialects import attrs, sizes
from thunder.dialects.definitions import LIST_OP, UNLIST_OP, decode_op, results_of
from thunder.dialects.emit import loc_names
from thunder.dialects.mlir import ir
from thunder.ops import registry
from thunder.ops.record import run_meta

# made-up values of symbols no call gave: distinct, large, divisible by 1..16 (sizes.PLACEHOLDER
# times primes above 16, so no product of a few of them equals another)
_MADE_UP = [sizes.PLACEHOLDER * p for p in (17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79)]


# (other primes than _MADE_UP's: divisible by 1..16 too, as a view's -1 often needs)
_OTHER = [sizes.PLACEHOLDER * p for p in (83, 89, 97, 101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157, 163)]
_UNKNOWN = object()  # the meta of a value whose op's meta function failed


class LostExpression(NotImplementedError):
    """A rule made a size from the symbols a plain number where no decision says why (Python's
    C code reads an int subclass's value: `range(T)`, `slice.indices`): what it emits would hold
    at this size only."""


def revalued(x, values):
    """x (a meta, a shape, a number) with each symbolic number at the symbols' values given, its
    expression the same."""
    if symbols.is_symbolic(x):
        try:
            v = eval(x.expr, _PLAIN, dict(values))  # noqa: S307
        except (ArithmeticError, ValueError, NameError) as e:
            raise LostExpression(f"{x.expr} at other sizes: {e}") from None
        return symbols.SymInt(int(v), x.expr) if isinstance(x, int) else symbols.SymFloat(float(v), x.expr)
    if isinstance(x, tuple):
        return tuple(revalued(v, values) for v in x)
    return x


_PLAIN = {"math": math, "abs": abs, "int": int, "float": float, "round": round}


def same_recording(a, b):
    """Whether two recordings of one rule (lists of BoundSymbols, or any values in them), run
    at different values of the symbols, are the same program: the same ops, names and plain
    values, the same expressions where sizes are symbolic. Where they differ, a size lost its
    expression (or a decision went another way)."""
    if symbols.is_symbolic(a) or symbols.is_symbolic(b):
        return symbols.is_symbolic(a) and symbols.is_symbolic(b) and a.expr == b.expr
    if isinstance(a, BoundSymbol) and isinstance(b, BoundSymbol):
        return a.op is b.op and same_recording(a.args, b.args) and same_recording(a.outputs, b.outputs)
    if isinstance(a, Ref) and isinstance(b, Ref):
        return a.name == b.name and a.dtype == b.dtype and a.device == b.device and same_recording(
            tuple(a.shape), tuple(b.shape))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same_recording(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_recording(a[k], b[k]) for k in a)
    if isinstance(a, slice) and isinstance(b, slice):
        return same_recording((a.start, a.stop, a.step), (b.start, b.stop, b.step))
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)
    names = (getattr(a, "name", None), getattr(b, "name", None))
    if names[0] is not None or names[1] is not None:  # (proxies of runtime numbers)
        return names[0] == names[1]
    return a == b


class UnknownSizes(NotImplementedError):
    """A value whose sizes the symbols' values do not give (a pass leaves its ops as they are)."""


class SymbolicFunc:
    """The Python values of a func's arguments and of its ops' results (`meta`), computed once in
    program order; `note` adds those of ops a pass inserts."""

    def __init__(self, func_op, values=None):
        """values: the symbols' values to use instead of the func's (a rule's second run at
        other values: `same_recording`)."""
        self.func = func_op
        self.guards = {}  # decision (Python source over the symbols) -> outcome
        self.ctx = tracing.TraceCtx()
        self.ctx.sym_guards, self.ctx.sym_strict = self.guards, True
        self._metas = {}  # ir.Value -> (shape, dtype, device) with SymInt dims, or a SymInt size
        self.symbols = {}  # name -> SymInt
        self._emitter = None
        self.hints = sizes.symbol_values(func_op)
        self._int_names = set(self.hints)  # (an i64 argument named here is an int symbol)
        self.hints.update(values or {})
        block = func_op.regions[0].blocks[0]
        self.block = block
        self.int_symbols = []  # names of the i64 arguments that are symbols, in order
        reads = _dim_reads(block)
        dims = sizes.argument_dims(func_op, len(block.arguments))
        for i, a in enumerate(block.arguments):
            name = (loc_names(a.location) or [None])[0]
            if str(a.type) == "i64" and name in self._int_names:
                self.int_symbols.append(name)
                self._metas[a] = self._symbol(name)
                continue
            shape, dtype, device = attrs.tensor_meta(a.type)
            if device is None or sizes.DYNAMIC not in shape:
                self._metas[a] = (shape, dtype, device)
                continue
            given = dims[i]
            shape = tuple(self._dim(given[k] if given else reads.get((i, k)), (i, k)) if d == sizes.DYNAMIC else d
                          for k, d in enumerate(shape))
            self._metas[a] = (shape, dtype, device)
        with tracing.tracing(self.ctx):
            for operation in block.operations:
                self._infer(operation.operation)

    def int_symbol_arguments(self):
        """The block arguments that are int symbols (i64 parameters named in sizes.VALUES)."""
        return [a for a in self.block.arguments if (loc_names(a.location) or [None])[0] in self.int_symbols
                and str(a.type) == "i64"]

    # ---- symbols
    def _symbol(self, name):
        if name not in self.symbols:
            value = self.hints.get(name)
            if value is None:
                value = self.hints[name] = _MADE_UP[len(self.symbols) % len(_MADE_UP)] + len(self.symbols) // len(_MADE_UP)
            self.symbols[name] = symbols.SymInt(value, name)
        return self.symbols[name]

    def _dim(self, source, where):
        """The SymInt of an argument's `?` dim from its expression (None: a symbol of its own)."""
        if not source:
            source = f"_d{where[0]}_{where[1]}"
        if source.isidentifier():
            return self._symbol(source)
        value = sizes.symbolic_value(source, {n: self._symbol(n) for n in sizes.symbol_names(source)})
        if not isinstance(value, symbols.SymInt):
            raise ValueError(f"{sizes.DIMS} entry {source!r} is not a size computed from symbols")
        return value

    # ---- values
    def meta(self, value):
        """(shape, dtype, device) of a tensor or runtime number, shape with SymInt dims; a SymInt
        for a size."""
        found = self._metas.get(value)
        if found is _UNKNOWN:
            raise UnknownSizes(f"the sizes of {value.get_name()} (its op's meta function failed at the symbols' values)")
        if found is None:
            if isinstance(value.type, ir.RankedTensorType) or str(value.type) not in ("index", "i64", "f64"):
                raise KeyError(f"no symbolic sizes known for a value of type {value.type}")
            found = self._metas[value] = self._number(value)
        return found

    def _number(self, value):
        with tracing.tracing(self.ctx):
            found = sizes.evaluate(value, self._leaf)
        return found if found is not None else attrs.tensor_meta(value.type)

    def _leaf(self, value):
        """sizes.evaluate's leaf: a tensor's proxy, a symbol's SymInt; None for a runtime number."""
        m = self.meta(value)
        if not isinstance(m, tuple):
            return m
        return proxy_of_meta(*m) if m[2] is not None else None

    def value(self, v, name=None, values=None):
        """What a rule gets for v: a proxy with SymInt dims, a NumberProxy, or a SymInt/SymFloat;
        values: the symbols at other values (their expressions the same)."""
        m = self.meta(v)
        if values is not None:
            m = revalued(m, values)
        if isinstance(m, tuple):
            return proxy_of_meta(*m, name=name)
        return m

    def other_values(self):
        """Other values of the symbols, for a second run of a rule (`same_recording`): made-up,
        distinct from these and each other."""
        return {name: _OTHER[i % len(_OTHER)] + i // len(_OTHER) for i, name in enumerate(self.symbols)}

    def restore(self, guards):
        """Forget the decisions recorded since guards (a copy of them) was taken: a rule that
        failed part way took them for nothing."""
        self.guards.clear()
        self.guards.update(guards)

    def note(self, value, meta):
        """A value a pass inserted has this (shape, dtype, device)."""
        self._metas[value] = meta

    def _infer(self, operation):
        name = operation.name
        if name in attrs.CONSTANT_OPS or name in sizes.PYTHON or name in (LIST_OP, UNLIST_OP, "func.return"):
            return
        op = registry.OPS.get(name)
        results = results_of(operation)
        if op is None:  # (a call of a fused region: its results' types, static)
            for r in results:
                self._metas[r] = attrs.tensor_meta(r.type)
            return
        before = dict(self.guards)
        try:
            _, args = decode_op(operation, lambda v: self.value(v, "v"))
            out = run_meta(op, args)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            metas = [self._checked(r, o, op) for r, o in zip(results, outs)]
        except Exception:  # noqa: BLE001 - sizes these values cannot have (two `?` dims not known equal)
            metas = [_UNKNOWN] * len(results)
            self.restore(before)
        for r, m in zip(results, metas):
            self._metas[r] = m

    def _checked(self, result, proxy, op):
        """The result's meta from the meta function's proxy, against its MLIR type: a static dim
        the type gives where the meta function computed one from the symbols holds as a guard; a
        `?` the meta function found static stays a size (its constant expression)."""
        shape, dtype, device = attrs.tensor_meta(result.type)
        if device is None:
            return shape, dtype, device
        got = tuple(getattr(proxy, "shape", ()))
        if len(got) != len(shape):
            raise ValueError(f"{op.qualname}: the meta function's rank {len(got)} is not the type's {result.type}")
        dims = []
        for d, g in zip(shape, got):
            if d == sizes.DYNAMIC:
                dims.append(g if symbols.is_symbolic(g) else symbols.SymInt(g, str(g)))
            else:
                if symbols.is_symbolic(g):
                    if g.plain() != d:
                        raise ValueError(f"{op.qualname}: the meta function gives {g.plain()} where the type {result.type} has {d}")
                    symbols.decided(f"({g.expr} == {d})", True)
                dims.append(d)
        return tuple(dims), dtype, device

    # ---- what a pass writes back
    def emitter(self):
        """A sizes.Emitter writing size computations into this func: the symbols read at the
        start of its block (arguments' dims, int symbols' parameters). One for every op a pass
        rewrites in program order: what it computed for one op is reused at the ops after it."""
        if self._emitter is None:
            self._emitter = self._new_emitter()
        return self._emitter

    def _new_emitter(self):
        block = self.block
        inputs = [_Shaped(self.meta(a)[0]) if isinstance(self.meta(a), tuple) else None for a in block.arguments]
        ints = [a for a in block.arguments if (loc_names(a.location) or [None])[0] in self.int_symbols]
        tensors = [(r, a) for r, a in zip(inputs, block.arguments) if r is not None]
        first = block.operations[0] if len(block.operations) else None
        with ir.InsertionPoint(first) if first is not None else ir.InsertionPoint(block), ir.Location.unknown():
            return sizes.Emitter([r for r, _ in tensors], [a for _, a in tensors] + ints, self.int_symbols)

    def write_guards(self, func_op=None):
        """The decisions recorded, as the sizes.GUARDS of the func (or of func_op, one a pass
        made from it), with those it had; arguments of the func whose `?` dims had no
        sizes.DIMS get theirs (the symbols the guards name)."""
        if func_op is not None:
            sizes.set_guards(func_op, sizes.guards(self.func) + sizes.conditions(self.guards))
            return
        block = self.block
        given = sizes.argument_dims(self.func, len(block.arguments))
        if any(g is None and _has_dynamic(a.type) for g, a in zip(given, block.arguments)):
            entries = (list(ir.ArrayAttr(self.func.attributes["arg_attrs"])) if "arg_attrs" in self.func.attributes
                       else [ir.DictAttr.get({})] * len(block.arguments))
            for i, (g, a) in enumerate(zip(given, block.arguments)):
                if g is None and _has_dynamic(a.type):
                    d = {n.name: n.attr for n in ir.DictAttr(entries[i])}
                    d[sizes.DIMS] = ir.ArrayAttr.get([ir.StringAttr.get(symbols.expr_of(x)) for x in self.meta(a)[0]])
                    entries[i] = ir.DictAttr.get(d)
            self.func.attributes["arg_attrs"] = ir.ArrayAttr.get(entries)
        sizes.set_guards(self.func, sizes.guards(self.func) + sizes.conditions(self.guards))


def _has_dynamic(t):
    return isinstance(t, ir.RankedTensorType) and sizes.DYNAMIC in ir.RankedTensorType(t).shape


class _Shaped:
    def __init__(self, shape):
        self.shape = shape


def _dim_reads(block):
    """(argument index, dim) -> the name of a tensor.dim that reads it."""
    args = {a: i for i, a in enumerate(block.arguments)}
    found = {}
    for operation in block.operations:
        if operation.operation.name == "tensor.dim":
            src, k = operation.operands
            names = loc_names(operation.location)
            if src in args and attrs.is_constant(k) and names and names[0].isidentifier():
                found.setdefault((args[src], attrs.constant_value(k)), names[0])
    return found
