"""A fused region with dynamic sizes (thunder-fuse on a trace with `?` dims): one kernel for
every size where it has one, else compiled per size on first use.

The region func's arguments carry sizes.DIMS (each `?` dim's expression of the symbols); a call
reads each symbol from the first argument dim that is that symbol alone. The floats its size
computations give its prims (a mean's 1 / count, attention's 1 / sqrt(D)) become arguments of
the func, computed at each call from the symbols, so the region's text at three made-up values
of the symbols (primes of other residues, twice primes in the third: any_size.made_up_values;
or the first call's values times those where its decisions need a divisibility that primes
break) differs in sizes only: any_size.AnySizeKernel lowers the three with those sizes
read at run time and, where the code is the same, runs it for every size. Else (or for strides
whose code for all sizes did not compile) the region at the call's sizes (dialects/lift.py
static_text) compiles as a kernel of its own, tiled along the sizes that change (its code shared
by the sizes that lower alike)."""
from thunder.core import symbols
from thunder.dialects import sizes
from thunder.dialects.definitions import context
from thunder.dialects.emit import find_func
from thunder.dialects.lift import static_text
from thunder.dialects.mlir import LOCK, ir
from thunder.dialects.symbolic_lift import SymbolicFunc
from thunder.lowering.linalg import compile_region
from thunder.lowering.linalg.any_size import AnySizeKernel, COMPILING, made_up_values, MLIR_NUMBER, primes_from

_CHECK_MAGNITUDES = (1009, 10007, 100003, 1000003)  # where what looks constant at them is checked


def has_dynamic_sizes(text):
    """Whether a region's text has `?` dims in its signature."""
    head = text.split("{", 1)[0]
    return "<?" in head or "x?" in head


class DynamicRegion:
    """What the linalg executor's compile gives for a region text with `?` dims: called with the
    region's arguments, its results (see the module doc)."""

    def __init__(self, text, name):
        """text: the region func @name, its `?` arguments with sizes.DIMS."""
        self.text, self.name = text, name
        with LOCK, context():
            self._module = ir.Module.parse(text)
            func = find_func(self._module.operation, name)
            n = len(func.regions[0].blocks[0].arguments)
            self.reads = {}  # symbol -> (argument, dim) it is read from
            needed = set()
            for i, dims in enumerate(sizes.argument_dims(func, n)):
                for k, d in enumerate(dims or ()):
                    if d.isidentifier():
                        self.reads.setdefault(d, (i, k))
                    elif not d.lstrip("-").isdigit():
                        needed |= sizes.symbol_names(d)
            if needed - set(self.reads):
                raise ValueError(f"{name}: the symbols {sorted(needed - set(self.reads))} are no argument's dim")
            self.names = sorted(self.reads)
            self._func = func
            self._lifted_func, self.lifted = _lift_floats(func)
        self.in_background = False  # (runtime/tiered.py sets it: the code compiles in the compile worker)
        self.torch_region = None  # text -> callable running it as torch calls (runtime/tiered.py)
        self.wrap_per_size = None  # (kernel, text) -> what runs it (runtime/tiered.py)
        self.any_size = None  # (AnySizeKernel, {value in its first text: expression}) or False
        self.per_size = {}  # symbols' values -> what runs the region at them
        self._floats = {}  # symbols' values -> the lifted floats there (a decode loop's steps: a few)

    def symbol_values(self, args):
        return {s: args[i].shape[k] for s, (i, k) in self.reads.items()}

    def __call__(self, *args):
        values = self.symbol_values(args)
        kernel = self._any_size(values)
        if kernel is not None:
            outs = kernel.call(args + self._lifted_at(values), values)
            if outs is COMPILING and self.torch_region is not None:
                # (its torch calls for every size, made once: its text at each new size would
                # be written and generated again at every size met while the kernel compiles)
                return self.torch_region(self.text)(*args)
            if outs is not None and outs is not COMPILING:
                return outs
        try:
            run = self._at(values)
        except Exception:  # noqa: BLE001 - its ops' rules refuse these sizes (torch's calls raise eager's error)
            if self.torch_region is None:
                raise
            run = self.torch_region(self.text)  # (its torch calls for every size)
        return run(*args)

    def _lifted_at(self, values):
        key = tuple(values.values())
        found = self._floats.get(key)
        if found is None:
            if len(self._floats) >= 64:
                self._floats.clear()
            found = self._floats[key] = tuple(float(sizes.symbolic_value(e, values)) for e in self.lifted)
        return found

    def text_at(self, values):
        with LOCK, context():
            return static_text(self._func, values, self.name)

    def _at(self, values):
        """The region compiled at these values of the symbols."""
        key = tuple(values[n] for n in self.names)
        run = self.per_size.get(key)
        if run is None:
            text = self.text_at(values)
            with LOCK, context():
                changing = SymbolicFunc(self._func, values)
                tiled = tuple(sorted({int(d) for a in self._func.regions[0].blocks[0].arguments
                                      if isinstance(a.type, ir.RankedTensorType)
                                      for d in changing.meta(a)[0] if symbols.is_symbolic(d)}))
            kernel = compile_region(text, self.name, sizes=tiled)
            run = self.per_size[key] = kernel if self.wrap_per_size is None else self.wrap_per_size(kernel, text)
        return run

    def _any_size(self, values):
        """The kernel for every size (None where there is none); values: the first call's
        symbols (their multiples are made-up values where primes are refused)."""
        if self.any_size is None:
            with LOCK, context():
                made_up = _made_up_texts(self._lifted_func, self.names, self.name, values)
            if made_up is None:
                self.any_size = False
            else:
                texts, by_value = made_up
                self.any_size = (AnySizeKernel(texts, self.name, in_background=self.in_background,
                                               size_of=lambda v, values: sizes.symbolic_value(by_value[v], values)),
                                 by_value)
        return self.any_size[0] if self.any_size else None


def _lift_floats(func):
    """(a copy of func whose prims read the floats its size computations give as arguments after
    the others, [each one's expression of the symbols])."""
    copy = func.clone()
    block = copy.regions[0].blocks[0]
    symbolic = SymbolicFunc(copy)
    exprs = []
    for o in list(block.operations):
        o = o.operation
        if o.name not in sizes.PYTHON or str(o.results[0].type) != "f64":
            continue
        r = o.results[0]
        uses = [u for u in r.uses if u.owner.name not in sizes.PYTHON]
        if not uses:
            continue
        value = symbolic.meta(r)
        if not symbols.is_symbolic(value):
            continue
        arg = block.add_argument(r.type, ir.Location.unknown())
        for u in uses:
            u.owner.operands[u.operand_number] = arg
        exprs.append(value.expr)
    if exprs:
        ftype = ir.FunctionType(ir.TypeAttr(copy.attributes["function_type"]).value)
        copy.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in block.arguments], list(ftype.results)))
        if "arg_attrs" in copy.attributes:
            entries = list(ir.ArrayAttr(copy.attributes["arg_attrs"]))
            copy.attributes["arg_attrs"] = ir.ArrayAttr.get(entries + [ir.DictAttr.get({})] * len(exprs))
    return copy, exprs


def _made_up_texts(func, names, name, call_values):
    """(the func's text at three made-up values of the symbols at which every size that changes
    has a value of its own, none a number the texts share; {a size's value in the first: its
    expression}), or None where a few tries find none. The values are primes, or where the func
    refuses those (a divisibility its decisions hold: a view's -1 that is T // 2), the call's
    values times primes, which keep it."""
    supplies = [made_up_values(i) for i in range(3)]
    texts, founds, scale, exprs = [], [], {}, None
    for _ in range(12):
        nth = len(texts)
        values = {n: scale.get(n, 1) * next(supplies[nth]) for n in names}
        try:
            exprs = _size_expressions(func, values) if exprs is None else exprs
            found = _sizes_at(exprs, values)
            text = static_text(func, values, name)
        except Exception:  # noqa: BLE001 - sizes the func refuses (a decision the made-up values break)
            if nth == 2:  # (even values refused)
                supplies[2] = made_up_values(2, odd_only=True)
            else:
                scale = call_values
            continue
        texts.append(text)
        founds.append(found)
        if len(texts) == 3:
            break
    if len(texts) < 3:
        return None
    # an expression of one value at every made-up value is a constant (`(B * T * 256) // (B * T
    # * 64)`), two of one value at each are one size (`(T + 1) - 1` and T): told at the texts'
    # values and at values of other magnitudes, so that no size that changes is taken for either
    # (`T // 50` is 2 at 101 to 149)
    checks = founds[:]
    for start in _CHECK_MAGNITUDES:
        primes = primes_from(start)
        try:
            checks.append(_sizes_at(exprs, {n: scale.get(n, 1) * next(primes) for n in names}))
        except Exception:  # noqa: BLE001 - sizes the func refuses: no kernel for every size then
            return None
    founds = [{e: v for e, v in found.items() if len({f.get(e) for f in checks}) > 1} for found in founds]
    checks = [{e: v for e, v in found.items() if e in founds[0]} for found in checks]
    if len({frozenset(frozenset(g) for g in _groups(found).values()) for found in checks}) != 1:
        return None
    splits = [MLIR_NUMBER.split(t) for t in texts]
    if len({len(s) for s in splits}) != 1:
        return None
    fixed = {p[0] for p in zip(*splits) if len(set(p)) == 1 and p[0].isdigit()}
    if any(str(v) in fixed for found in founds for v in found.values()):
        return None
    return texts, {v: e for e, v in founds[0].items()}


def _size_expressions(func, values):
    """The expressions of the symbols that the sizes of the func's tensors are, from its ops'
    rules at these values of the symbols (once: their values elsewhere are the expressions',
    as the kernel for every size computes them)."""
    symbolic = SymbolicFunc(func, values)
    return {d.expr for v in _tensor_values(func) for d in symbolic.meta(v)[0] if symbols.is_symbolic(d)}


def _sizes_at(exprs, values):
    """{expression: value} of the sizes >= 2 among exprs at these values of the symbols (`(-1 %
    T + 1) - -1 % T` is 1)."""
    found = {}
    for e in exprs:
        v = int(sizes.symbolic_value(e, values))
        if v >= 2:
            found[e] = v
    return found


def _groups(found):
    groups = {}
    for e, v in found.items():
        groups.setdefault(v, set()).add(e)
    return groups


def _tensor_values(func):
    block = func.regions[0].blocks[0]
    for a in block.arguments:
        if isinstance(a.type, ir.RankedTensorType):
            yield a
    for o in block.operations:
        for r in o.results:
            if isinstance(r.type, ir.RankedTensorType):
                yield r
