"""Symbolic sizes in MLIR traces (cache="symbolic values", runtime/symbolic.py).

A trace recorded with symbolic sizes (core/symbols.py: SymInt dims, numbers computed from them)
is emitted with dynamic dims (`tensor<?x32xf32>`) and its sizes as SSA values: each symbol is
read from the first input dim it stands for (`tensor.dim`), or is an i64 parameter of the func
(an int argument that is a symbol); a size computed from symbols is arith/math ops on them. An
op attribute that holds sizes (params of kind int, Ints, Dims, Index: reshape's shape, a slice's
bounds) keeps its static entries and has DYNAMIC where an entry is symbolic, whose values are the
op's `dynamic_sizes` operands in order (MLIR's mixed static/dynamic convention, as in
tensor.extract_slice). A number operand computed from symbols is an i64/f64 value.

PYTHON gives each op such a value uses as a Python expression: code generation writes them
(`_sym0 = x.shape[0]`), and the verifier evaluates them on placeholder sizes."""
import ast
import collections
import functools
import math

from thunder.core import symbols
from thunder.dialects.attrs import constant_value, is_constant
from thunder.dialects.mlir import arith, ir

DYNAMIC = -(2 ** 63)  # ir.ShapedType.get_dynamic_size(): a `?` dim, an attribute entry given by an operand
SIZE_KINDS = ("int", "Ints", "Dims", "Index")  # attribute kinds whose entries may be sizes
OPERAND = "dynamic_sizes"  # the operand group of the symbolic entries of an op's size attributes

# the ops of size computations, as Python expressions of their operands
PYTHON = {
    "tensor.dim": "{0}.shape[{1}]",
    "arith.addi": "{0} + {1}", "arith.subi": "{0} - {1}", "arith.muli": "{0} * {1}",
    "arith.floordivsi": "{0} // {1}",
    "arith.addf": "{0} + {1}", "arith.subf": "{0} - {1}", "arith.mulf": "{0} * {1}", "arith.divf": "{0} / {1}",
    "arith.index_cast": "{0}", "arith.sitofp": "float({0})", "arith.fptosi": "int({0})",
    "math.floor": "float(math.floor({0}))", "math.ceil": "float(math.ceil({0}))",
    "math.roundeven": "float(round({0}))", "math.absi": "abs({0})", "math.absf": "abs({0})",
    "math.sqrt": "math.sqrt({0})",
}


DIMS = "thunder.dims"  # argument attribute: each dim's size, an expression of the symbols where it is `?`
VALUES = "thunder.symbol_values"  # func attribute: each symbol's value in the call traced
GUARDS = "thunder.size_guards"  # func attribute: conditions on the symbols the func holds under


_FUNCTIONS = {"math", "abs", "int", "float", "round"}  # (what size expressions call: no symbols)


@functools.lru_cache(maxsize=4096)
def symbol_names(source):
    """The symbols an expression reads."""
    return {n.id for n in ast.walk(ast.parse(source, mode="eval")) if isinstance(n, ast.Name)} - _FUNCTIONS


def symbolic_value(source, symbols_):
    """The value of a size expression at the symbols given (SymInts: the result keeps its
    expression), as sizes.evaluate computes PYTHON's templates."""
    return eval(source, {**_EVAL_GLOBALS, "abs": abs, "round": round}, {n: symbols_[n] for n in symbol_names(source)})  # noqa: S307


class Inexpressible(NotImplementedError):
    """A symbolic value where a trace cannot hold one (a float attribute, an unknown function)."""


def is_dynamic_type(t):
    """A tensor type with a `?` dim, or a size (index)."""
    return isinstance(t, ir.IndexType) or isinstance(t, ir.RankedTensorType) and any(d == DYNAMIC for d in t.shape)


def refuse_dynamic(what):
    """Passes that run Python rules (decompositions, VJPs) on proxies of static shapes refuse a
    trace with dynamic sizes rather than compute with `?` as a number."""
    raise NotImplementedError(
        f"thunder: this pass takes traces with static shapes; {what} has a dynamic size (traces recorded "
        "under cache=\"symbolic values\" have them; thunder.jit compiles the sizes of each call and "
        "generalizes the programs, docs/api.md). Workaround: give the dims their sizes.")


# ---- attribute values: symbolic entries out (emission) and back in (decoding)
def split(kind, value):
    """(value with DYNAMIC for its symbolic entries, those entries in order)."""
    k = kind.base_name
    if value is None or k not in SIZE_KINDS:
        if _has_symbolic(value):
            raise Inexpressible(f"a size computed from the symbols in an attribute of kind {kind.name}")
        return value, []
    found = []

    def out(v):
        if symbols.is_symbolic(v):
            if not isinstance(v, int):
                raise Inexpressible(f"a float computed from the symbols in an attribute of kind {kind.name}")
            found.append(v)
            return DYNAMIC
        if isinstance(v, slice):
            return slice(out(v.start), out(v.stop), out(v.step))
        if isinstance(v, tuple):
            return tuple(out(x) for x in v)
        return v

    return out(value), found


def fill(kind, value, dynamic):
    """value with its DYNAMIC entries replaced by the next items of the iterator dynamic."""
    if value is None or kind.base_name not in SIZE_KINDS:
        return value

    def put(v):
        if isinstance(v, int) and not isinstance(v, bool) and v == DYNAMIC:
            try:
                return next(dynamic)
            except StopIteration:
                raise ValueError(f"fewer '{OPERAND}' operands than dynamic attribute entries") from None
        if isinstance(v, slice):
            return slice(put(v.start), put(v.stop), put(v.step))
        if isinstance(v, tuple):
            return tuple(put(x) for x in v)
        return v

    return put(value)


def _has_symbolic(v):
    if symbols.is_symbolic(v):
        return True
    if isinstance(v, (tuple, list)):
        return any(_has_symbolic(x) for x in v)
    if isinstance(v, slice):
        return any(_has_symbolic(x) for x in (v.start, v.stop, v.step))
    return False


# ---- what a func with dynamic sizes says of them (dialects/symbolic_lift.py reads it)
def unread_symbols(trace, outputs, names):
    """The symbols among names (in order) that the trace's ops or outputs use and no dim of its
    inputs is: its func takes them as int parameters."""
    read = {d.expr for r in trace.inputs for d in getattr(r, "shape", ()) if symbols.is_symbolic(d)}
    used = set()
    for b in trace.symbols:
        _collect_names([*b.args.values(), *b.outputs], used)
    _collect_names(outputs, used)
    return [n for n in names if n in used and n not in read]


def _collect_names(values, found):
    for v in values:
        if symbols.is_symbolic(v):
            found.update(symbol_names(v.expr))
        elif isinstance(v, (tuple, list)):
            _collect_names(v, found)
        elif isinstance(v, slice):
            _collect_names((v.start, v.stop, v.step), found)
        elif hasattr(v, "shape") and isinstance(getattr(v, "shape"), tuple):
            _collect_names(v.shape, found)


def signature_attributes(inputs, int_symbols, symbols_in, arg_attrs=None, known=None):
    """(arg_attrs, {VALUES: ...}) of a func with dynamic sizes: each input with symbolic dims gets
    DIMS (every dim's size as text: `["_sym0", "8"]`), so which `?` dims are one symbol survives
    in MLIR; VALUES gives the symbols' values in the call traced (known: by name, else from the
    inputs' dims and symbols_in: the values the trace's ops hold, where int symbols appear)."""
    given = list(arg_attrs) if arg_attrs is not None else [None] * (len(inputs) + len(int_symbols))
    out, values = [], {}
    for name in (known or {}):
        if name in int_symbols or any(symbols.is_symbolic(x) and name in symbol_names(x.expr)
                                      for r in inputs for x in getattr(r, "shape", ())):
            values[name] = known[name]
    for i, entry in enumerate(given):
        d = {n.name: n.attr for n in ir.DictAttr(entry)} if entry is not None else {}
        shape = getattr(inputs[i], "shape", ()) if i < len(inputs) else ()
        if any(symbols.is_symbolic(x) for x in shape):
            d[DIMS] = ir.ArrayAttr.get([ir.StringAttr.get(symbols.expr_of(x)) for x in shape])
            for x in shape:
                if symbols.is_symbolic(x) and x.expr.isidentifier():
                    values.setdefault(x.expr, int(x))
        out.append(ir.DictAttr.get(d))
    for v in symbols_in:
        if isinstance(v, symbols.SymInt) and v.expr in int_symbols:
            values.setdefault(v.expr, int(v))
    i64 = ir.IntegerType.get_signless(64)
    return out, {VALUES: ir.DictAttr.get({k: ir.IntegerAttr.get(i64, v) for k, v in values.items()})}


def argument_dims(func_op, n):
    """Each of the func's n arguments' DIMS entries (texts), None where it has none."""
    out = [None] * n
    if "arg_attrs" in func_op.attributes:
        for i, entry in enumerate(ir.ArrayAttr(func_op.attributes["arg_attrs"])):
            d = ir.DictAttr(entry)
            if DIMS in d:
                out[i] = [ir.StringAttr(s).value for s in ir.ArrayAttr(d[DIMS])]
    return out


def symbol_values(func_op):
    """The func's VALUES: {symbol: its value in the call traced}."""
    if VALUES not in func_op.attributes:
        return {}
    return {n.name: ir.IntegerAttr(n.attr).value for n in ir.DictAttr(func_op.attributes[VALUES])}


def guards(func_op):
    """The func's GUARDS: Python conditions on its symbols."""
    if GUARDS not in func_op.attributes:
        return []
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(func_op.attributes[GUARDS])]


def conditions(decisions):
    """Recorded decisions ({source: outcome}, core/symbols.py `decided`) as Python conditions
    that hold where they go the same way (a comparison that went False written negated)."""
    return [source if outcome is True else _negated(source) if outcome is False else f"({source} == {outcome!r})"
            for source, outcome in decisions.items()]


_NEGATED_TEXT = {" == ": " != ", " != ": " == ", " < ": " >= ", " >= ": " < ", " > ": " <= ", " <= ": " > "}


@functools.lru_cache(maxsize=4096)
def _negated(source):
    """The condition that a decision went False: a comparison `(a op b)` (as core/symbols.py
    writes them) negated, else `not`. (Found by scanning: printing a long expression's AST back
    costs more than the passes that recorded it.)"""
    if source.startswith("(") and source.endswith(")"):
        depth = 0
        for i, ch in enumerate(source[1:-1], 1):
            depth += ch == "("
            depth -= ch == ")"
            if depth < 0:
                break  # ("(a) < (b)": the first parenthesis closes before the end)
            if depth == 0:
                for op, negated in _NEGATED_TEXT.items():
                    if source.startswith(op, i):
                        return f"{source[:i]}{negated}{source[i + len(op):]}"
    return f"not {source}"


def set_guards(func_op, conditions_):
    """The func's GUARDS: the conditions (in order, once each), but those that the bounds the
    others give the symbols imply (`(_sym0 >= 2)` implies `(_sym0 * 2 != -1)`)."""
    unique = list(dict.fromkeys(conditions_))
    sizes_ = _bounds([], func_op)
    bounds = _bounds(unique, func_op)
    frozen = frozenset(bounds.items())
    kept, stated = [], set()
    for c in unique:
        b = _bound_of(c)
        if b is not None:  # (the strongest bound of a symbol, once, where a size's >= 0 is not it)
            if b[1] == bounds[b[0]] and b[0] not in stated and b[1] > sizes_.get(b[0], b[1] - 1):
                stated.add(b[0])
                kept.append(c)
        elif not _implied(c, frozen):
            kept.append(c)
    if kept:
        func_op.attributes[GUARDS] = ir.ArrayAttr.get([ir.StringAttr.get(c) for c in kept])


def _bound_of(condition):
    """(name, lower bound) of a condition `(name >= k)` / `(name > k)`, else None."""
    node = ast.parse(condition, mode="eval").body
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.left, ast.Name) and \
            isinstance(node.comparators[0], ast.Constant) and type(node.comparators[0].value) is int:
        k = node.comparators[0].value
        if isinstance(node.ops[0], ast.GtE):
            return node.left.id, k
        if isinstance(node.ops[0], ast.Gt):
            return node.left.id, k + 1
    return None


def _bounds(conditions_, func_op):
    """Lower bounds of the symbols: a dim is >= 0, and the conditions' own `(name >= k)`."""
    found = {}
    for dims in argument_dims(func_op, len(func_op.regions[0].blocks[0].arguments)):
        for d in dims or ():
            if d.isidentifier():
                found[d] = 0
    for c in conditions_:
        b = _bound_of(c)
        if b is not None:
            found[b[0]] = max(found.get(b[0], b[1]), b[1])
    return found


_INF = float("inf")


_PROVABLE_LENGTH = 400  # (longer conditions are kept unproven: the proof's cost grows with them)


@functools.lru_cache(maxsize=8192)
def _implied(condition, bounds):
    """Whether the condition holds for all symbol values within the bounds: its two sides'
    difference as a polynomial (`(T - 0 + 1 - 1) // 1 == T` holds), each term's range by
    interval arithmetic; False where it cannot tell."""
    if len(condition) > _PROVABLE_LENGTH:
        return False
    node = ast.parse(condition, mode="eval").body
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return False
    bounds = dict(bounds)
    a, b = _polynomial(node.left, condition, bounds), _polynomial(node.comparators[0], condition, bounds)
    if a is None or b is None:
        return False
    lo = hi = 0
    for term, c in _sum(a, b, -1).items():
        r = (1, 1)
        for atom in term:
            x = _interval(atom, bounds)
            if x is None or x[0] < 0:
                return False
            r = (r[0] * x[0], 0 if 0 in (r[1], x[1]) else r[1] * x[1])
        lo, hi = (lo + c * r[0], hi + c * r[1]) if c > 0 else (lo + c * r[1], hi + c * r[0])
    op = type(node.ops[0])
    return {ast.GtE: lo >= 0, ast.Gt: lo > 0, ast.LtE: hi <= 0, ast.Lt: hi < 0, ast.NotEq: lo > 0 or hi < 0,
            ast.Eq: lo == hi == 0}.get(op, False)


def _polynomial(node, source, bounds=None):
    """{term: coefficient} of an integer expression (parsed from source, one line), a term a
    sorted tuple of atoms (names, and the subexpressions other than +, -, * and an exact `//` or
    `%` by a term that bounds (symbol -> lower bound) keep from 0, by their text); None where not
    an int. (`((B * T) * 256) // ((B * T) * 64)` is 4: expressions of sizes computed through
    reshapes grow so.)"""
    if isinstance(node, ast.Constant):
        return {(): node.value} if type(node.value) is int else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        x = _polynomial(node.operand, source, bounds)
        return None if x is None else {t: -c for t, c in x.items()}
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        a, b = _polynomial(node.left, source, bounds), _polynomial(node.right, source, bounds)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Mult):
            out = {}
            for ta, ca in a.items():
                for tb, cb in b.items():
                    out = _sum(out, {tuple(sorted(ta + tb, key=lambda x: x.text)): ca * cb})
            return out
        return _sum(a, b, 1 if isinstance(node.op, ast.Add) else -1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod)):
        a, b = _polynomial(node.left, source, bounds), _polynomial(node.right, source, bounds)
        quotient = _exact_quotient(a, b, bounds) if a is not None and b is not None else None
        if quotient is not None:
            return quotient if isinstance(node.op, ast.FloorDiv) else {}
    return {(_Atom(node, source),): 1}


def _exact_quotient(a, b, bounds):
    """a / b for polynomials where b is one term, never 0 within bounds, that divides each of
    a's terms; else None."""
    if len(b) != 1:
        return None
    ((term, c),) = b.items()
    if c == 0 or any((_interval(atom, bounds or {}) or (0,))[0] < 1 for atom in term):
        return None
    divisor = collections.Counter(term)
    out = {}
    for t, k in a.items():
        left = collections.Counter(t)
        left.subtract(divisor)
        if k % c or any(n < 0 for n in left.values()):
            return None
        out[tuple(sorted(left.elements(), key=lambda x: x.text))] = k // c
    return out


class _Atom:
    """A subexpression in a polynomial's term: equal where its text is."""

    def __init__(self, node, source):
        # (its text in the condition: one printer wrote them all; ast.dump costs far more)
        self.node, self.text = node, source[node.col_offset:node.end_col_offset]

    def __eq__(self, other):
        return isinstance(other, _Atom) and other.text == self.text

    def __hash__(self):
        return hash(self.text)


def _sum(a, b, sign=1):
    out = dict(a)
    for t, c in b.items():
        out[t] = out.get(t, 0) + sign * c
        if out[t] == 0:
            del out[t]
    return out


def _interval(node, bounds):
    """(lo, hi) of an integer expression over the symbols, None where not known."""
    if isinstance(node, _Atom):
        node = node.node
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value, node.value
    if isinstance(node, ast.Name):
        return (bounds[node.id], _INF) if node.id in bounds else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        x = _interval(node.operand, bounds)
        return None if x is None else (-x[1], -x[0])
    if not isinstance(node, ast.BinOp):
        return None
    a, b = _interval(node.left, bounds), _interval(node.right, bounds)
    if a is None or b is None:
        return None
    if isinstance(node.op, ast.Add):
        return a[0] + b[0], a[1] + b[1]
    if isinstance(node.op, ast.Sub):
        return a[0] - b[1], a[1] - b[0]
    if isinstance(node.op, ast.Mult) and a[0] >= 0 and b[0] >= 0:
        return a[0] * b[0], 0 if 0 in (a[1], b[1]) else a[1] * b[1]  # (inf * 0 is no number)
    if isinstance(node.op, ast.FloorDiv) and a[0] >= 0 and b[0] == b[1] and b[0] > 0:
        return a[0] // b[0], a[1] // b[0] if a[1] != _INF else _INF
    if isinstance(node.op, ast.Mod) and b[0] == b[1] and b[0] > 0:
        return 0, b[0] - 1
    return None


def guard_lines(func_op, params, checks=True):
    """(names assigned, {(argument index, dim): symbol read}, Python lines) that check what a
    func with dynamic sizes holds under (params: its parameters' Python names): each symbol is
    read from the first argument dim DIMS names it by (an int symbol is its parameter), every
    other dim of an argument with DIMS is checked against its size there (a symbol read before:
    two dims of one symbol hold only where they are equal; an expression; a static size), then
    each of GUARDS (checks=False: the symbols read only, where a prologue checked the rest).
    Nothing for a func without either."""
    conditions = guards(func_op)
    dims = argument_dims(func_op, len(params))
    if not conditions and not any(dims):
        return set(), {}, []
    block = func_op.regions[0].blocks[0]
    values = set(symbol_values(func_op))
    lines, found, reads = [], set(), {}

    def check(c):
        lines.append(f"if not ({c}): raise ValueError(\"thunder: this program holds only where {c}; the arguments' "
                     f"sizes make it false\")")

    for p, a in zip(params, block.arguments):
        name = _location_name(a)
        if str(a.type) == "i64" and name in values:
            found.add(name)
            if p != name:
                lines.append(f"{name} = {p}")
    dim_checks = []
    for i, entries in enumerate(dims):
        for k, d in enumerate(entries or ()):
            if d.isidentifier() and d not in found:
                lines.append(f"{d} = {params[i]}.shape[{k}]")
                found.add(d)
                reads[(i, k)] = d
            else:
                dim_checks.append(f"{params[i]}.shape[{k}] == {d}")
    names = set().union(*(symbol_names(c) for c in conditions + dim_checks))
    missing = sorted(n for n in names - found if n not in params)
    if missing:
        raise Inexpressible(f"the symbols {', '.join(missing)} of the func's {GUARDS} (no argument dim is one)")
    for c in (dim_checks + conditions) if checks else ():
        check(ast.unparse(ast.parse(c, mode="eval")))
    return found, reads, lines


def _location_name(v):
    """The name a block argument's location gives it (emit.py `location`), None where unnamed."""
    loc = v.location
    return ir.NameLoc(loc).name_str.split(",")[0] if loc.typeid == ir.NameLoc.static_typeid else None


# ---- emission of size computations
class Emitter:
    """Makes the SSA values of symbolic numbers inside a func being emitted (at the current
    insertion point; the symbols are read at the start of the block)."""

    def __init__(self, inputs, arguments, int_symbols):
        """inputs: the func's input Refs, arguments: its block arguments (the int symbols' i64
        parameters last, named by int_symbols)."""
        self.memo = {}
        self.symbols = {}
        for name, a in zip(int_symbols, arguments[len(inputs):]):
            self.symbols[name] = self._op("arith.index_cast", [a], self.index, name)
        for r, a in zip(inputs, arguments):
            for k, d in enumerate(getattr(r, "shape", ())):
                if symbols.is_symbolic(d) and d.expr.isidentifier() and d.expr not in self.symbols:
                    self.symbols[d.expr] = self._op("tensor.dim", [a, self._constant(k)], self.index, d.expr)

    @property
    def index(self):
        return ir.IndexType.get()

    def _op(self, name, operands, result_type, loc=None):
        location = ir.Location.name(loc) if loc else ir.Location.unknown()
        return ir.Operation.create(name, results=[result_type], operands=operands, loc=location).result

    def _constant(self, v):
        key = ("const", type(v), v)
        if key not in self.memo:
            t = ir.F64Type.get() if isinstance(v, float) else self.index
            attr = ir.FloatAttr.get(t, v) if isinstance(v, float) else ir.IntegerAttr.get(t, int(v))
            self.memo[key] = arith.ConstantOp(t, attr).result
        return self.memo[key]

    def size(self, v):
        """An index value for the symbolic int v."""
        return self._as(self._expr(v.expr), "index")

    def number(self, v):
        """An i64 (SymInt) or f64 (SymFloat) operand for the symbolic number v."""
        value = self._expr(v.expr)
        if not isinstance(v, int):
            return self._as(value, "f64")
        key = ("i64", v.expr)
        if key not in self.memo:
            self.memo[key] = self._op("arith.index_cast", [self._as(value, "index")], ir.IntegerType.get_signless(64))
        return self.memo[key]

    def _expr(self, source):
        if source not in self.memo:
            try:
                node = ast.parse(source, mode="eval").body
            except SyntaxError:
                raise Inexpressible(f"the size expression {source!r}") from None
            self.memo[source] = self._compile(node, source)
        return self.memo[source]

    def _as(self, v, kind):
        """v converted to index or f64 (Python's int <-> float)."""
        if str(v.type) == kind:
            return v
        if is_constant(v):
            return self._constant(float(constant_value(v)) if kind == "f64" else int(constant_value(v)))
        key = ("as", v, kind)
        if key not in self.memo:
            i64 = ir.IntegerType.get_signless(64)
            if kind == "f64":
                self.memo[key] = self._op("arith.sitofp", [self._op("arith.index_cast", [v], i64)], ir.F64Type.get())
            else:
                self.memo[key] = self._op("arith.index_cast", [self._op("arith.fptosi", [v], i64)], self.index)
        return self.memo[key]

    _INT = {ast.Add: "arith.addi", ast.Sub: "arith.subi", ast.Mult: "arith.muli", ast.FloorDiv: "arith.floordivsi"}
    _FLOAT = {ast.Add: "arith.addf", ast.Sub: "arith.subf", ast.Mult: "arith.mulf", ast.Div: "arith.divf"}

    def _compile(self, node, source):
        if isinstance(node, ast.Name):
            if node.id not in self.symbols:
                raise Inexpressible(f"the symbol {node.id} (not a dim of an input)")
            return self.symbols[node.id]
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return self._constant(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            x = self._compile(node.operand, source)
            return self._binary(ast.Sub, self._constant(0 if str(x.type) == "index" else 0.0), x, source)
        if isinstance(node, ast.BinOp):
            a, b = self._compile(node.left, source), self._compile(node.right, source)
            if isinstance(node.op, ast.Mod):  # Python's floored modulo: a - (a // b) * b
                q = self._binary(ast.FloorDiv, a, b, source)
                return self._binary(ast.Sub, a, self._binary(ast.Mult, q, b, source), source)
            if isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) and \
                    type(node.right.value) is int and 1 <= node.right.value <= 4 and str(a.type) == "index":
                out = a
                for _ in range(node.right.value - 1):
                    out = self._binary(ast.Mult, out, a, source)
                return out
            return self._binary(type(node.op), a, b, source)
        if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
            fn = ast.unparse(node.func)
            x = self._compile(node.args[0], source)
            is_int = str(x.type) == "index"
            if fn == "int":
                return x if is_int else self._as(x, "index")
            if fn == "float":
                return self._as(x, "f64")
            if fn == "abs":
                return self._op("math.absi" if is_int else "math.absf", [x], x.type)
            if fn in ("math.floor", "math.ceil", "round"):
                if is_int:
                    return x
                name = {"math.floor": "math.floor", "math.ceil": "math.ceil", "round": "math.roundeven"}[fn]
                return self._as(self._op(name, [x], x.type), "index")
            if fn == "math.sqrt":
                x = self._as(x, "f64")
                return self._op("math.sqrt", [x], x.type)
        raise Inexpressible(f"the size expression {source!r}")

    def _binary(self, op, a, b, source):
        if str(a.type) == "index" and str(b.type) == "index" and op in self._INT:
            return self._op(self._INT[op], [a, b], self.index)
        if op not in self._FLOAT:
            raise Inexpressible(f"the size expression {source!r}")
        a, b = self._as(a, "f64"), self._as(b, "f64")
        return self._op(self._FLOAT[op], [a, b], ir.F64Type.get())


# ---- the values of size computations on placeholder sizes (the verifier)
PLACEHOLDER = 720720  # what a `?` dim is taken to be: divisible by 1..16, larger than static dims


def placeholder():
    return symbols.SymInt(PLACEHOLDER, "?")


def evaluate(value, leaf):
    """The Python value of a size computation (ir.Value of index/i64/f64 type); leaf gives the
    value of a tensor (something with .shape) or of a func parameter. None where the value does
    not come from size computations (a runtime number read from a tensor)."""
    if is_constant(value):
        return constant_value(value)
    if isinstance(value.owner, ir.Block) or isinstance(value.type, ir.RankedTensorType):
        return leaf(value)
    template = PYTHON.get(value.owner.name)
    if template is None:
        return None
    args = [evaluate(v, leaf) for v in value.owner.operands]
    if any(x is None for x in args):
        return None
    return eval(_template_code(template, len(args)), _EVAL_GLOBALS,  # noqa: S307
                {f"_{i}": a for i, a in enumerate(args)})


@functools.lru_cache(maxsize=256)
def _template_code(template, n):
    """A PYTHON template compiled, its operands named _0.._n-1 (a verifier evaluates thousands)."""
    return compile(template.format(*(f"_{i}" for i in range(n))), "<size>", "eval")


class _SymbolicMath:
    """math's functions of PYTHON's templates, keeping symbolic numbers' expressions."""
    floor, ceil, sqrt = staticmethod(math.floor), staticmethod(math.ceil), staticmethod(symbols.sqrt)


_EVAL_GLOBALS = {"math": _SymbolicMath, "float": symbols.to_float, "int": symbols.to_int}
