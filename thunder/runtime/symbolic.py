"""One program for changing sizes: cache="symbolic values" and the default option's automatic dynamic.

How it works (docs/api.md "Cache options"): the call that asks for symbols (under symbolic
values the first call of a structure: same arguments, dtypes, devices, ranks, same tensors read
from state; under the default the second, for the sizes that changed) is traced with them as
SymInts (core/symbols.py), so every decision the function's Python takes on them (a comparison,
`min`/`max`, a branch, `range(n)`) is recorded, and compiled; the same function is compiled at
two other sizes that runtime/dynamic.py chooses (stand-in inputs). Where a tensor read from
state changed its size instead, the three are the call and the two calls of its structure
before it, the symbols the dims that differ in the three (dims with the same sizes in all
three are one symbol, as torch.compile's duck sizing does); sizes 0 and 1 are never symbols.
The three compiled programs are then compared token by token: they must be the same except
for number literals, and each literal that differs must be a size the trace computed (`C //
H`) or an integer polynomial term (`c * m + b`, m a product of up to three symbols or sizes the
trace computed that are no polynomial of them, a conv's `(H - 4) // 4 + 1`; terms of the
symbols alone first) found from two of the calls and checked on the third (where several fit, they must
agree at other sizes), or a float the trace computed from the symbols (`math.sqrt(T)`) that
gives it in all three. The fused kernels' regions are compared the same way. What comes out:

- the program, with the symbols as parameters and the literals as expressions of them;
- fused regions whose text depends on the symbols (a family): for linalg, one kernel for every
  size where the three texts lower to the same code with their changing sizes read at run time
  and their scalar constants that change with the sizes as arguments computed at each call
  (lowering/linalg/any_size.py); else compiled per new size on first use (the executor's cache
  shares the code of sizes that lower alike);
- a prologue that reads the symbols from the inputs' shapes, checks the static dims, equal
  dims, sizes >= 2 and every recorded decision.

Anything that does not fit (a different program, a literal no term explains, a decision that
went another way in an earlier call, a size returned or stored as a Python number) leaves the
call compiled for its sizes, as "constant values" does; compile_stats().generalizations says
why."""
from fractions import Fraction
import functools
import io
import itertools
import math
import random
import re
import tokenize

import torch

from thunder.core.strides import dense_order
from thunder.dialects.emit import find_func, mismatch
from thunder.dialects.mlir import LOCK
from thunder.lowering import executors
from thunder.lowering.linalg.any_size import AnySizeKernel, COMPILING, made_up_values, MLIR_NUMBER as _MLIR_NUMBER
from thunder.lowering.linalg.to_linalg import parse_region
from thunder.runtime.autograd import _ThunderAutograd
from thunder.runtime.codegen import compile_source, python_source
from thunder.runtime.dynamic import evaluate
from thunder.runtime.options import CacheEntry
from thunder.runtime import outline, tiered
from thunder.runtime.prologue import Prologue
from thunder.runtime.traces import Trace


class Plan:
    """The symbols for the current call from the shapes of three calls (oldest first)."""

    def __init__(self, shapes3, where):
        self.names = []  # symbol names
        self.values = []  # per call: {name: size}
        self.dims = []  # per tensor: a name or None per dim
        self.where = {}  # name -> the dims it stands for (for messages)
        self.ints = {}  # int arguments that are symbols: ("arg", i) / ("kwarg", k) -> name
        self.input_name = where  # index -> a name for messages ("tensor argument 0")
        groups = {}
        for i, shape in enumerate(shapes3[2]):
            names = []
            for k in range(len(shape)):
                triple = tuple(s[i][k] for s in shapes3)
                if len(set(triple)) == 1:
                    names.append(None)
                    continue
                if min(triple) < 2:
                    raise _NoFit(f"{where(i)} dim {k} is {min(triple)} in one call (sizes 0 and 1 are never symbols)")
                if triple not in groups:
                    groups[triple] = f"_sym{len(groups)}"
                    self.names.append(groups[triple])
                names.append(groups[triple])
                w = where(i)
                self.where.setdefault(groups[triple], []).append(w if w.startswith("int ") else f"{w} dim {k}")
            self.dims.append(tuple(names))
        self.values = [{n: t[c] for t, n in groups.items()} for c in range(3)]
        if not self.names:
            raise _NoFit("no size changed")

    def sym_shapes(self, tensors):
        return {id(t): names for t, names in zip(tensors, self.dims) if any(names)}

    def describe(self):
        return ", ".join(f"{n}: {' = '.join(w)}" for n, w in self.where.items())


class _NoFit(Exception):
    pass


# ---- generalization


def _generalize(entries, plan):
    parts = [e.parts for e in entries]
    if parts[2].leaks:
        raise _NoFit("a size computed from the symbols is returned or stored as a Python number")
    guards = parts[2].guards or {}
    for c in range(2):
        for source, outcome in guards.items():
            if evaluate(source, plan.values[c]) != outcome:
                raise _NoFit(f"the decision {source} == {outcome} went the other way in an earlier call")
    fit = _Fitter(plan, parts[2].float_exprs, parts[2].int_exprs, guards)
    for e in tuple(parts[2].int_exprs) + tuple(parts[2].float_exprs):
        # a size the trace computed that the three calls hold equal (`T // 3` at T = 3, 4, 5) but
        # other sizes not: a literal from it would look like a constant of the program
        try:
            same = len({evaluate(e, p) for p in plan.values}) == 1
        except Exception:  # noqa: BLE001 - undefined at a call's sizes
            continue
        if same and len(set(map(repr, fit._at(e)))) > 1:
            raise _NoFit(f"the size {e} is the same in the three calls but not at other sizes (a literal from it "
                         "would be taken for a constant)")
    names = ", ".join(plan.names)
    constants = _constants([p.constants for p in parts], fit, names)
    program = constants.get("_program")
    if isinstance(program, _SymbolicProgram):  # training: the forward and backward programs too
        calls = [p.constants["_program"] for p in parts]
        program.build([c.forward_source for c in calls], [c.constants["forward"] for c in calls],
                      [c.backward_source for c in calls], [c.constants["backward"] for c in calls], fit, names,
                      calls)
    source = _render_python([p.source for p in parts], fit, "computation", names, constants, last=True)
    computation = compile_source(source, constants=constants)
    arg_specs, kw_specs, read, prologue_args = parts[2].prologue
    for i in prologue_args["strided"]:  # (a dense layout in another order: the prologue checks that order)
        if any(plan.dims[i]) and not read[i].is_contiguous() and dense_order(read[i].shape, read[i].stride()) is None:
            raise _NoFit(f"the program depends on the strides of {plan.input_name(i)}, which is not dense")
    if any(any(plan.dims[i]) for i in prologue_args["storages"]) or prologue_args["shared"]:
        raise _NoFit("inputs share memory")
    sym_dims = {i: d for i, d in enumerate(plan.dims[:len(read)]) if any(d)}
    prologue = Prologue(arg_specs, kw_specs, read, **prologue_args,
                        symbols=(sym_dims, plan.names, guards, plan.ints))
    run, first_run = prologue.compile(computation)
    traces = list(entries[2].traces)
    if not isinstance(parts[2].symbolic_trace, str):
        parts[2].symbolic_trace = _checked_symbolic_trace(parts[2].symbolic_trace, entries, plan)
    if not isinstance(parts[2].symbolic_trace, str):
        traces.insert(0, parts[2].symbolic_trace)
    text = source if program is None else source + "\n" + program.forward_source
    traces.append(Trace("symbolic values (the program for all sizes)", python=text, fn=computation))
    prologue_trace = Trace("prologue", python=prologue.source, fn_name="entry", fn=run)
    backward = list(entries[2].backward_traces)
    if program is not None:
        backward.append(Trace("symbolic values (backward)", python=program.backward_source, fn_name="backward",
                              fn=program.backward))
    return CacheEntry(run, traces, [prologue_trace], entries[2].description, backward, first_run)


def _checked_symbolic_trace(trace, entries, plan):
    """The acquisition trace with symbolic sizes if, its sizes taken from each of the three calls,
    it is that call's trace (the same check as the programs': a number the recording made
    constant differs); else why not."""
    module = trace.module()
    with module.context:
        f = find_func(module.operation, trace.fn_name)
        for k, e in enumerate(entries):
            concrete = e.traces[0].module()
            try:
                where = mismatch(f, find_func(concrete.operation, trace.fn_name), plan.values[k])
            except Exception as err:  # noqa: BLE001 - a trace to show, never a reason to fail the call
                where = f"a check that failed ({type(err).__name__}: {err})"
            if where is not None:
                return f"the trace with symbolic sizes is not the trace of call {k + 1} of 3 in {where}"
    return trace


class _Fitter:
    """Expressions of the symbols for the literals that differ between the three calls."""

    def __init__(self, plan, float_exprs=(), int_exprs=(), guards=None):
        self.plan = plan
        self.float_exprs = float_exprs
        self.int_exprs = int_exprs  # sizes the trace computed (`C // H`, `max(T - 3, 0)`): candidates first
        self.guards = guards or {}
        self._probes = None
        self._exprs = {}  # values -> expr's answer (the same sizes recur in every region of a deep model)
        self.families = {}  # (executor, texts) -> the _KernelFamily made for them (every layer's region)
        # the factors of the polynomial terms: the symbols, then the sizes the trace computed that
        # are no polynomial of them (a conv's or patch grid's (H - 4) // 4 + 1: a ViT's token
        # count 3 * (H // 4) ** 2 + 3), one per tuple of values at the three calls
        self.values = {n: [p[n] for p in plan.values] for n in plan.names}
        seen = {tuple(v) for v in self.values.values()}
        for e in int_exprs:
            if not any(op in e for op in ("//", "%", "abs", "max", "min", "math.")):
                continue
            try:
                v = [evaluate(e, p) for p in plan.values]
            except Exception:  # noqa: BLE001 - not defined at a call's sizes
                continue
            if tuple(v) not in seen and all(type(x) is int for x in v):
                seen.add(tuple(v))
                self.values[e] = v  # (its own parentheses: SymInt writes "(a // b)")
        monomials = []
        for degree in (1, 2, 3):
            monomials += list(itertools.combinations_with_replacement(self.values, degree))
        self.monomials = monomials

    def expr(self, values):
        """Python source of an int matching values (one per call): a size the trace computed
        or an integer c * m + b; where several match, they must agree at other sizes that keep
        the recorded decisions (else the literal is ambiguous)."""
        key = tuple(values)
        if key not in self._exprs:
            try:
                self._exprs[key] = (True, self._expr(values))
            except _NoFit as e:
                self._exprs[key] = (False, str(e))
        fits, answer = self._exprs[key]
        if not fits:
            raise _NoFit(answer)
        return answer

    def _expr(self, values):
        found = []
        for e in self.int_exprs:
            try:
                if [evaluate(e, p) for p in self.plan.values] == list(values):
                    found.append(f"({e})")
            except Exception:  # noqa: BLE001 - not defined at another call's sizes
                continue
        try:
            found = self._polynomial(values) + found
        except _NoFit:
            if not found:
                raise
        at = [self._at(e) for e in found]
        if any(a != at[0] for a in at):
            raise _NoFit(f"a literal ({', '.join(map(str, values))} in the three calls) is explained by sizes that "
                         f"differ at other sizes ({' / '.join(found)})")
        return found[0]

    def _at(self, source):
        """The values of a size expression at other sizes that keep the recorded decisions."""
        if self._probes is None:
            rng = random.Random(0)
            top = max(max(p.values()) for p in self.plan.values)
            self._probes = []
            for _ in range(400):
                p = {n: rng.randrange(2, 2 * top + 8) for n in self.plan.names}
                try:
                    if all(evaluate(g, p) == o for g, o in self.guards.items()):
                        self._probes.append(p)
                except Exception:  # noqa: BLE001
                    continue
                if len(self._probes) == 16:
                    break
        out = []
        for p in self._probes:
            try:
                out.append(evaluate(source, p))
            except Exception as e:  # noqa: BLE001 - undefined there (a division by zero)
                out.append(type(e).__name__)
        return out

    def _polynomial(self, values):
        """Python sources of the integer terms c * m + b matching values (one per call), m a
        product of the symbols and computed sizes (self.values), the simplest first: terms of
        the symbols alone, then without b, then of fewer factors."""
        found = []
        for m in self.monomials:
            ms = [math.prod(self.values[n][k] for n in m) for k in range(3)]
            pair = next(((i, j) for i, j in ((0, 1), (0, 2), (1, 2)) if ms[i] != ms[j]), None)
            if pair is None:
                continue
            i, j = pair
            c = Fraction(values[j] - values[i], ms[j] - ms[i])
            if c.denominator != 1 or c == 0:
                continue
            c, b = int(c), values[i] - int(c) * ms[i]
            if all(v == c * x + b for v, x in zip(values, ms)):
                found.append(((sum(n not in self.plan.names for n in m), b != 0, len(m)), m, c, b))
        if not found:
            raise _NoFit(f"the program has a literal ({', '.join(map(str, values))} in the three calls) that no "
                         "term of the symbols explains")
        found.sort(key=lambda f: f[0])
        out = []
        for _, m, c, b in found:
            text = " * ".join(m)
            if c != 1:
                text = f"{c} * {text}"
            if b:
                text = f"{text} {'+' if b > 0 else '-'} {abs(b)}"
            out.append(f"({text})")
        return out

    def float_expr(self, values):
        """The expression, among the floats the trace computed from sizes, or those plus or
        minus a small number (a VJP's `y - 1` of an exponent y = 1 / T), whose values in the
        three calls are values (exactly); None if none is."""
        for e in self.float_exprs:
            for form in _FLOAT_FORMS:
                source = form.format(e)
                try:
                    if [float(evaluate(source, p)) for p in self.plan.values] == values:
                        return f"({source})"
                except Exception:  # noqa: BLE001 - not defined at another call's sizes (a division by zero)
                    continue
        return None


# the forms of a float from sizes, e, that a literal may hold (exactly, at all three calls)
_FLOAT_FORMS = ("{}",) + tuple(f"({{}} {op} {b})" for b in (1, 2, 0.5) for op in "+-") + \
    tuple(f"({b} - {{}})" for b in (1, 2, 0.5))


def _fit_number(texts, fit, what):
    """(expression, whether a float) for a number that differs between the calls: an integer,
    a float holding an integer (a size times a float tensor: `x * n`), or a float the trace
    computed from the sizes. The texts are compared as the numbers they are (Python and MLIR
    write a float's shortest exact form, or MLIR six digits where those are exact)."""
    try:
        return fit.expr([int(x) for x in texts]), False
    except ValueError:
        pass
    try:
        values = [float(x) for x in texts]
    except ValueError:
        raise _NoFit(f"{what} differ ({' / '.join(texts)})") from None
    if not all(v.is_integer() and abs(v) < 2 ** 53 for v in values):
        expr = fit.float_expr(values)  # a float computed from the sizes (T / 2)
        if expr is not None:
            return expr, True
        raise _NoFit(f"{what} differ in a number that is not an integer ({' / '.join(texts)})")
    return fit.expr([int(v) for v in values]), True


def _python_tokens(source):
    """(kind, text, start, end) of the tokens that matter (no comments)."""
    out = []
    for t in tokenize.generate_tokens(io.StringIO(source).readline):
        if t.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING):
            continue
        out.append(t)
    return out


def _render_python(sources, fit, fn_name, names, constants, last=False):
    """sources' common program with the symbols as parameters (after the others when last,
    else first) and its differing literals as expressions; comments (the sizes of one call)
    dropped; calls of kernel families take the symbols."""
    streams = [_python_tokens(s) for s in sources]
    if len({len(s) for s in streams}) != 1:
        raise _NoFit(f"the {fn_name} programs of the three calls differ")
    replace = {}  # (row, col) -> (end, text)
    for toks in zip(*streams):
        texts = [t.string for t in toks]
        if len(set(texts)) == 1:
            continue
        if toks[0].type != tokenize.NUMBER or any(t.type != tokenize.NUMBER for t in toks):
            raise _NoFit(f"the {fn_name} programs of the three calls differ ({' / '.join(texts)})")
        expr, is_float = _fit_number(texts, fit, f"the {fn_name} programs")
        replace[toks[2].start] = (toks[2].end, f"float{expr}" if is_float else expr)
    lines = sources[2].splitlines(keepends=True)
    # drop comments, then substitute (right to left within a line, so columns stay valid)
    comments = [t for t in tokenize.generate_tokens(io.StringIO(sources[2]).readline) if t.type == tokenize.COMMENT]
    edits = [(t.start, t.end, "") for t in comments] + [(start, end, text) for start, (end, text) in replace.items()]
    for (row, col), (_, end_col), text in sorted(edits, reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + text + line[end_col:]
    source = "".join(line.rstrip() + "\n" if line.strip() else "" for line in lines)
    for name, value in constants.items():
        if isinstance(value, (_KernelFamily, _SymbolicProgram)):
            source = re.sub(rf"\b{re.escape(name)}\(", f"{name}.at({names})(", source)
    source = outline.pass_symbols(source, names)
    params = re.search(rf"def {fn_name}\((.*?)\):", source)
    if params is None:
        raise _NoFit(f"no def {fn_name} in the program")
    inner = params.group(1).strip()
    new = (f"{inner}, {names}" if inner else names) if last else (f"{names}, {inner}" if inner else names)
    return source[:params.start(1)] + new + source[params.end(1):]


def _constants(dicts, fit, names):
    """The program's constants for all sizes: equal ones kept, kernels whose region differs
    become a family, the autograd program a symbolic one."""
    if len({tuple(sorted(d)) for d in dicts}) != 1:
        raise _NoFit("the programs of the three calls use different constants")
    out = {}
    for name, v in dicts[2].items():
        vs = [d[name] for d in dicts]
        if all(x is v for x in vs):
            out[name] = v
        elif all(type(x).__name__ == "AutogradProgram" for x in vs):
            out[name] = _SymbolicProgram(v)
        elif all(getattr(x, "region", None) is not None for x in vs):
            texts = [x.region[1] for x in vs]
            if len(set(texts)) == 1:
                out[name] = v
            else:
                key = (v.region[0], tuple(texts))
                if key not in fit.families:
                    fit.families[key] = _KernelFamily(v.region[0], texts, fit)
                out[name] = fit.families[key]
        elif all(isinstance(x, torch.Tensor) for x in vs) and all(
                x.shape == v.shape and x.dtype == v.dtype and torch.equal(x, v) for x in vs):
            out[name] = v
        elif all(_equal(x, v) for x in vs):
            out[name] = v
        else:
            raise _NoFit(f"the programs' constant {name} differs between the calls")
    return out


def _equal(a, b):
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - not comparable: not the same constant
        return False


def _mlir_float(v):
    """v as an MLIR float literal that reads back as v (six digits where those are exact, as MLIR
    prints it; else all seventeen)."""
    short = "%e" % v
    return short if float(short) == v else "%.16e" % v


class _KernelFamily:
    """A fused region whose text depends on the symbols: one kernel for all sizes (linalg, where
    AnySizeKernel has code for the call's strides), else compiled per size on first use (the
    executor's cache shares compiled code between sizes that lower alike)."""

    def __init__(self, executor, texts, fit):
        splits = [_MLIR_NUMBER.split(t) for t in texts]
        if len({len(s) for s in splits}) != 1:
            raise _NoFit("a fused region differs between the calls")
        self.executor = executor
        self.pieces = []  # literal text or an expression of the symbols
        for parts in zip(*splits):
            if len(set(parts)) == 1:
                self.pieces.append(parts[0])
                continue
            expr, is_float = _fit_number(parts, fit, "fused regions of the calls")
            self.pieces.append((compile(expr, "<thunder symbolic>", "eval"), is_float, expr))
        self.names = fit.plan.names
        self.kernels = {}  # sizes -> what the program calls at them
        self.per_size = {}  # sizes -> the region compiled for them (_Member; or the executor's kernel)
        self.compiled = False  # whether a size compiled its kernel (later sizes do not compile)
        # where a size after the first found no compiled code (the region reduces over a changing
        # size), later new sizes run the region's torch calls for all sizes at once, without
        # writing, lowering or generating anything per size (a decode loop's every step is one)
        self.torch_only = False
        self._texts, self._fit, self._torch = texts, fit, None
        # (linalg) one kernel for every size where the region's texts lower to the same code; its
        # scalar constants that change with the sizes (1 / sqrt(T), T - 6) are its arguments
        self.any_size = None
        if executor == "linalg":
            self._lifted, self.lifted = _lift_constants(self.pieces)
            made_up = self._any_size_texts()
            if made_up is not None:
                texts, self._by_value = made_up
                self.any_size = AnySizeKernel(texts, size_of=self._size_of,
                                              in_background=tiered.mode() == "background")

    def at(self, *sizes):
        k = self.kernels.get(sizes)
        if k is None:
            if self.any_size is not None:
                k = self.kernels[sizes] = _AnySize(self, sizes)
            else:
                k = self.per_size_at(sizes)
        return k

    def per_size_at(self, sizes):
        """The region compiled for sizes (where a size after the first found no code, its torch
        calls for all sizes)."""
        if self.torch_only:
            k = self.torch_at(sizes)
            if k is not None:
                return k
        with LOCK:  # (a compile at call time: dialects/mlir.py)
            return self._compile_at(sizes)

    def torch_at(self, sizes):
        """The region's torch calls at sizes, from one program for all sizes (its literals fitted
        as the programs' are); None where they do not fit."""
        if self._torch is None:
            try:
                sources = [python_source(parse_region(t)[1], "fusion", comments=False) for t in self._texts]
                fn = compile_source(_render_python(sources, self._fit, "fusion", ", ".join(self.names), {}), "fusion")
                self._torch = functools.partial(_as_tuple, fn)
            except _NoFit:
                self._torch = False
        return None if self._torch is False else functools.partial(self._torch, *sizes)

    def torch_now(self, sizes):
        """The region's torch calls at sizes."""
        return self.torch_at(sizes) or tiered.torch_region(self._text_at(sizes)[0])

    def _text_at(self, sizes, pieces=None):
        """(the region's text at these values of the symbols, the values of its pieces)."""
        pieces = self.pieces if pieces is None else pieces
        env = dict(zip(self.names, sizes))
        values = [p if isinstance(p, str) else eval(p[0], {"math": math}, env) for p in pieces]  # noqa: S307
        return "".join(v if isinstance(v, str) else _mlir_float(float(v)) if p[1] else str(v)
                       for v, p in zip(values, pieces)), values

    def lifted_at(self, sizes):
        """The values of the kernel for all sizes' lifted constants at these values of the symbols."""
        env = dict(zip(self.names, sizes))
        return tuple((float if kind == "f64" else int)(sign * eval(code, {"math": math}, env))  # noqa: S307
                     for kind, sign, code in self.lifted)

    def _any_size_texts(self):
        """The region at three made-up values of the symbols (any_size.made_up_values: primes of
        other residues, twice primes in the third) at which every
        integer that changes takes a value of its own (none equal to another expression's or to a
        fixed literal of the text, none below 2), so that the kernel for all sizes names each
        changing size by what it is (AnySizeKernel groups sizes by value), with {value in the
        first: its expression} (_size_of); None where a few tries find none."""
        fixed = {int(p) for p in self._lifted if isinstance(p, str) and p.isdigit()}
        ints = {p[2]: p[0] for p in self._lifted if not isinstance(p, str) and not p[1]}
        texts, by_value, supplies = [], None, [made_up_values(i) for i in range(3)]
        for _ in range(12):
            sizes = tuple(next(supplies[len(texts)]) for _ in self.names)
            env = dict(zip(self.names, sizes))
            values = [eval(code, {"math": math}, env) for code in ints.values()]  # noqa: S307
            if len(set(values)) == len(values) and all(type(v) is int and v >= 2 and v not in fixed for v in values):
                by_value = by_value or dict(zip(values, ints.values()))
                texts.append(self._text_at(sizes, self._lifted)[0])
                if len(texts) == 3:
                    return texts, by_value
        return None

    def _size_of(self, value, symbols):
        """The size at these values of the symbols that is `value` in the first made-up text."""
        return eval(self._by_value[value], {"math": math}, dict(zip(self.names, symbols)))  # noqa: S307

    def _compile_at(self, sizes):
        k = self.per_size.get(sizes)
        if k is None:
            text, values = self._text_at(sizes)
            compile_region = executors.get(self.executor).compile
            if self.executor != "linalg":
                k = compile_region(text, "fusion")
            else:  # tiled along the changing sizes: one compile for all
                tiled = tuple({v for v in values if type(v) is int})
                k = _Member(self, text, compile_region(text, "fusion", sizes=tiled), sizes)
            self.per_size[sizes] = k
            if self.any_size is None:
                self.kernels[sizes] = k
        return k


# (a constant's name may hold its value too: %c5_i64)
_CONSTANT = re.compile(r"^ *(%(?:[\w.$-]|\0\d+\0)+) = arith\.constant (-?)\0(\d+)\0 : (f64|i64)\n", re.M)


def _lift_constants(pieces):
    """(pieces, lifted): the region's pieces with every scalar constant whose value changes with
    the symbols made an argument of its func (after the others), and per such argument (its
    type, its sign, its expression's code)."""
    marks, text = [], []
    for p in pieces:
        if isinstance(p, str):
            text.append(p)
        else:
            text.append(f"\0{len(marks)}\0")
            marks.append(p)
    lifted, args = [], []

    def lift(m):
        name, sign, mark, kind = m.groups()
        lifted.append((kind, -1 if sign else 1, marks[int(mark)][0]))
        args.append(f"{name}: {kind}")
        return ""

    text = _CONSTANT.sub(lift, "".join(text))
    head, sep, rest = text.partition(") -> ")  # (the func's arguments end there)
    if not lifted or "\n" in head or "(" not in head:
        return pieces, ()
    text = head + ("" if head.endswith("(") else ", ") + ", ".join(args) + sep + rest
    return [part if i % 2 == 0 else marks[int(part)] for i, part in enumerate(text.split("\0"))], tuple(lifted)


class _AnySize:
    """A kernel family's region at one size: the family's kernel for every size (its torch calls
    while that compiles in the background), or where it has none for the arguments' strides, the
    family's region at this size (_Member)."""

    def __init__(self, family, sizes):
        self.family, self.sizes, self.member, self.lifted, self.torch = family, sizes, None, None, None

    def __call__(self, *args):
        if self.member is None:
            if self.lifted is None:
                self.lifted = self.family.lifted_at(self.sizes)
            outs = self.family.any_size.call(args + self.lifted, self.sizes)
            if outs is COMPILING:  # (its code for all sizes compiles in the background)
                if self.torch is None:
                    self.torch = self.family.torch_now(self.sizes)
                return self.torch(*args)
            if outs is not None:
                return outs
            self.member = self.family.per_size_at(self.sizes)
        return self.member(*args)


class _Member:
    """A kernel family's region at one size. Its kernel runs where its code is compiled already
    (the family's first size, and every size sharing that code); elsewhere (a region that
    reduces over a changing size) the region runs as torch calls rather than compiling again."""

    def __init__(self, family, text, kernel, sizes):
        self.family, self.text, self.kernel, self.sizes = family, text, kernel, sizes
        self.runs = {}  # input strides -> the callable

    def __call__(self, *args):
        strides = self.kernel.strides(args)
        run = self.runs.get(strides)
        if run is None:
            if not self.family.compiled or self.kernel.has_code(strides):
                self.family.compiled = True
                run = self.kernel
            else:
                self.family.torch_only = True
                run = self.family.torch_now(self.sizes)
            self.runs[strides] = run
        return run(*args)


def _as_tuple(fn, *args):
    out = fn(*args)
    return out if isinstance(out, tuple) else (out,)


class _SymbolicProgram:
    """The autograd program for all sizes: forward and backward take the symbols first; `at`
    binds them for one call (the backward of that call gets the same)."""

    def __init__(self, program):
        self.num_outputs, self.grad_of = program.num_outputs, program.grad_of
        self.cotangent_for, self.num_inputs = program.cotangent_for, program.num_inputs
        self.reaches, self.grad_outputs = program.reaches, program.grad_outputs

    def build(self, fwd_sources, fwd_consts, bwd_sources, bwd_consts, fit, names, calls):
        self._calls, self._fit, self._names = calls, fit, names  # (differentiable_at)
        fc = _constants(fwd_consts, fit, names)
        bc = _constants(bwd_consts, fit, names)
        self.forward_source = _render_python(fwd_sources, fit, "forward", names, fc)
        self.backward_source = _render_python(bwd_sources, fit, "backward", names, bc)
        self.forward = compile_source(self.forward_source, "forward", constants=fc)
        self.backward = compile_source(self.backward_source, "backward", constants=bc)

    def at(self, *sizes):
        return _Bound(self, sizes)

    def differentiable_at(self, sizes):
        """AutogradProgram.differentiable for all sizes, bound to sizes: the three calls' sources
        before fusion fitted as the program's own were."""
        made = self.__dict__.get("_differentiable")
        if made is None:
            made = self._differentiable = self._make_differentiable()
        fwd, bwd, reason = made
        return (None, None, reason) if reason else (functools.partial(fwd, *sizes), functools.partial(bwd, *sizes),
                                                     None)

    def _make_differentiable(self):
        sources = [c.differentiable_sources() for c in self._calls]
        reason = next((s for s in sources if isinstance(s, str)), None)
        if reason:
            return None, None, reason
        try:
            fwd = _render_python([s[0] for s in sources], self._fit, "forward", self._names, {})
            bwd = _render_python([s[1] for s in sources], self._fit, "backward", self._names, {})
        except _NoFit as e:
            return None, None, f"the program for all sizes has no form without fused kernels ({e})"
        return compile_source(fwd, "forward"), compile_source(bwd, "backward"), None


class _Bound:
    """A symbolic autograd program with the sizes of one call bound (what _ThunderAutograd runs)."""

    def __init__(self, program, sizes):
        self.program = program
        self.sizes = sizes
        self.forward = functools.partial(program.forward, *sizes)
        self.backward = functools.partial(program.backward, *sizes)

    def differentiable(self):
        return self.program.differentiable_at(self.sizes)

    def __getattr__(self, name):  # num_outputs, grad_of, cotangent_for, num_inputs, reaches, grad_outputs
        return getattr(self.program, name)

    def __call__(self, *inputs):
        return _ThunderAutograd.apply(self, *inputs)
