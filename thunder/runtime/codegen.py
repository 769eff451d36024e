"""Code generation: an MLIR trace module becomes a Python function that calls torch."""
from thunder.core.pysource import Name, py_repr
from thunder.dialects import attrs, sizes
from thunder.dialects.definitions import LIST_OP, UNLIST_OP, decode_op, expand, results_of
from thunder.dialects.emit import find_func, loc_file_line, loc_names, mutated_inputs
from thunder.dialects.mlir import ir
from thunder.ops import registry
from thunder.ops.execute import NAMESPACE, call_args
from thunder.lowering import executors
from thunder.lowering.fuse import kernel_text
from thunder.runtime import code_objects, outline
from thunder.runtime import reinplace as reinplacing
from thunder.runtime.structure import rebuild_source


# on an op whose result the program does not compute: its uses read its first operand (a cast
# left to torch's autocast, runtime/grad_free_rewrites.py)
PASS_OPERAND = "thunder.pass_operand"


class Unprintable(NotImplementedError):
    """A func the generated Python cannot express (an op other than ltorch/thunder ops, numbers,
    fusion calls and return; an argument that is not a tensor); location: where in the module."""

    def __init__(self, message, location=None):
        super().__init__(message)
        self.location = location


def _source_line(loc):
    """file:line for the comment of a traced op (named locations only: parsed files have none)."""
    where = loc_file_line(loc) if loc_names(loc) else None
    return f"{where[0]}:{where[1]}" if where else None


class _Namer:
    def __init__(self):
        self.names = {}  # ir.Value -> str
        self.used = set()
        self.counter = 0

    def assign(self, value, wanted=None):
        name = wanted
        if not name or not name.isidentifier() or name in self.used:
            base = name if name and name.isidentifier() else "t"
            i = 0 if base != "t" else self.counter
            while True:
                name = f"{base}_{i}" if base != "t" else f"t{i}"
                i += 1
                if name not in self.used:
                    break
            if base == "t":
                self.counter = i
        self.used.add(name)
        self.names[value] = name
        return name


def python_source(module, fn_name="computation", output_spec=None, comments=True, header=None, constants=None,
                  no_grad_copies=(), grad_free=False, region_texts=None, size_checks=True):
    """Python source of func @fn_name. output_spec, when given, rebuilds the user's output
    structure from the flat results (see thunder.runtime.structure). no_grad_copies: the inputs
    (indices) whose in-place updates are written back outside autograd (tensors that require
    grad, updated under no_grad: an optimizer step's p.sub_(lr * p.grad)). grad_free: the program
    always runs with no autograd history recorded (under torch.no_grad, or in a cache entry for
    grad mode off), so ops may use their `python_grad_free` code. Ops marked to run in place
    (runtime/grad_free_rewrites.py, before code generation) are printed in their in-place form
    (runtime/reinplace.py), and the inputs they update are not copied back; ops marked
    PASS_OPERAND are not printed (their uses read their first operand). region_texts: {fusion
    callee: its kernel text}, where known (fuse_module's texts: not printed again here).
    size_checks=False: a func with dynamic sizes reads its symbols without checking its
    arguments' sizes and size guards (a prologue checked them: runtime/symbolic_program.py)."""
    with module.context:
        f = find_func(module.operation, fn_name)
        if f is None:
            raise KeyError(f"no func @{fn_name} in the module")
        block = f.regions[0].blocks[0]
        namer = _Namer()
        callees = _fusion_callees(module)
        namer.used.update(callees)  # fusion_N names the kernel in the program's namespace
        namer.used.update(NAMESPACE)  # (a parameter named torch, impl or math must not shadow them)
        namer.used.add(outline.ARGS)  # (the calls of outlined blocks pass their arguments in it)
        for a in block.arguments:  # (i64: also an int symbol, dialects/sizes.py)
            if not attrs.is_tensor_type(a.type) and str(a.type) not in attrs.NUMBER_TYPE_NAMES:
                raise Unprintable(f"codegen: @{fn_name} has an argument of type {a.type}: its Python program takes "
                                  "tensors and runtime numbers (f64, i64, i1) only", f.location)
        params = [namer.assign(a, (loc_names(a.location) or [None])[0]) for a in block.arguments]
        lines = [f"def {fn_name}({', '.join(params)}):"]
        if comments:
            for p, a in zip(params, block.arguments):
                lines.append(f"  # {p}: {_describe(a.type)}")
        assigned, reads, checks = sizes.guard_lines(f, params, size_checks)  # (dynamic sizes: what it holds under)
        namer.used.update(assigned)
        lines += [f"  {line}" for line in checks]
        arg_index = {a: i for i, a in enumerate(block.arguments)}
        rng = _rng_line(block)
        if rng:
            lines.append(f"  {rng}")
        body = []  # outline.Stmt and outline.Del records, made lines at the end (outlined or not)
        kernels = dict(region_texts or {})  # fusion callee -> its kernel text (as needed)
        operations = list(block.operations)
        names_of = [o.operation.name for o in operations]
        operands_of = [expand(o.operands) for o in operations]  # (read three times per op below)
        last_use = _last_uses(operands_of)
        leaves = (_GradLeaves((a for i, a in enumerate(block.arguments) if i in no_grad_copies), callees)
                  if grad_free else None)
        updated_in_place = reinplacing.updated_in_place(f)
        returned = {v for name, vs in zip(names_of, operands_of) if name == "func.return" for v in vs}
        types = _Types()
        op_counts = {}  # kernel text (or callee name) -> its ops (_fusion_call's comment)
        dels = _Dels(last_use, namer)
        passed = set()  # results of casts left to autocast (PASS_OPERAND)
        for index, operation in enumerate(operations):
            name = names_of[index]
            if name in attrs.CONSTANT_OPS:
                continue  # numbers are written inline where they are used
            if PASS_OPERAND in operation.attributes:
                namer.names[operation.results[0]] = namer.names[operation.operands[0]]
                last_use[operation.results[0]] = float("inf")  # (deleted as its operand is, if ever)
                passed.add(operation.results[0])
                continue
            if name in (LIST_OP, UNLIST_OP):
                continue  # (lists of any length: read as their op's operands and results, dialects/lists.py)
            if name == "func.return":
                flat = [namer.names[v] for v in operation.operands]
                mutated = mutated_inputs(f)
                if mutated:
                    # in-place updates of inputs: the caller sees them, as in eager
                    k = len(mutated)
                    for i, v in zip(mutated, flat[-k:]):
                        if i in updated_in_place:
                            continue  # (updated in place)
                        target = f"{params[i]}.detach()" if i in no_grad_copies else params[i]
                        body.append(outline.Stmt(f"{target}.copy_({v})", fixed=True))
                    flat = flat[:-k]
                body.append(outline.Stmt("return " + _return_expr(flat, output_spec, constants, params), fixed=True))
                continue
            if name == "func.call":
                body.append(outline.Stmt(*_fusion_call(operation, namer, callees, constants, comments, types,
                                                       kernels, op_counts)))
                outline.add_dels(body, dels(results_of(operation), operands_of[index], index))
                if leaves is not None:
                    leaves.update(operation)
                continue
            if name == "tensor.dim" and (arg_index.get(operation.operands[0]), attrs.constant_value(
                    operation.operands[1]) if attrs.is_constant(operation.operands[1]) else None) in reads:
                namer.names[operation.result] = reads[(arg_index[operation.operands[0]],
                                                       attrs.constant_value(operation.operands[1]))]
                continue  # (read by the size checks already)
            if name in sizes.PYTHON and len(operation.results) == 1 and \
                    not attrs.is_tensor_type(operation.results[0].type):  # a size computed from the symbols
                args = [py_repr(attrs.constant_value(v)) if attrs.is_constant(v) else namer.names[v]
                        for v in operation.operands]
                if name == "arith.index_cast" and not attrs.is_constant(operation.operands[0]):
                    namer.names[operation.result] = args[0]  # (the same Python int)
                    continue
                out = namer.assign(operation.result, (loc_names(operation.location) or ["s"])[0])
                body.append(outline.Stmt(f"{out} = {sizes.PYTHON[name].format(*args)}"))
                continue
            try:
                op, values = decode_op(operation.operation, lambda v: Name(namer.names[v], *types.meta(v.type)))
            except (NotImplementedError, ValueError) as e:
                raise Unprintable(f"codegen: {e}: a Python program holds ltorch and thunder ops, numbers "
                                  f"(arith.constant) and calls of fusion regions", operation.location) from None
            location = operation.location
            wanted = loc_names(location)
            results = results_of(operation)
            outs = [namer.assign(r, wanted[i] if i < len(wanted) else None) for i, r in enumerate(results)]
            before = len(body)
            autocast = None
            if leaves is not None and op.name == "detach" and not leaves.holds(operation.operands[0]) and \
                    not (operation.results[0] in returned and operation.operands[0] in returned):  # (both: two tensors)
                body.append(outline.Stmt(f"{outs[0]} = {namer.names[operation.operands[0]]}"))  # (no history to cut)
            elif reinplacing.IN_PLACE in operation.attributes:
                body += [outline.Stmt(st) for st in reinplacing.inplace_form(op, values, outs)[1]]
                if leaves is not None and leaves.holds(reinplacing.updated_operand(operation)):
                    leaves.values.update(results)  # (the input itself)
            else:
                statements = op_statements(op, values, outs, grad_free)
                autocast = _autocast_device(operands_of[index], passed)
                if autocast:  # (the program runs with autocast off: runtime/autocast_casts.py)
                    statements = [f"torch.set_autocast_enabled({autocast!r}, True)", *statements,
                                  f"torch.set_autocast_enabled({autocast!r}, False)"]
                body += [outline.Stmt(st) for st in statements]
            if leaves is not None:
                leaves.update(operation, values)
            if comments:
                described = ", ".join(types.describe(r.type) for r in results)
                src = _source_line(location)
                comment = " ".join(x for x in (described, f"({src})" if src else "") if x)
                if comment and len(body) > before:  # (on the op's last statement, before autocast's toggle)
                    body[-2 if autocast else -1].comment = comment
            outline.add_dels(body, dels(results, operands_of[index], index))
        # (a block gets _rng as an argument: value checks read it; and the symbols read from the
        # arguments' sizes, which are bound before the body as the parameters are)
        bound = params + sorted(assigned) + (["_rng"] if rng else [])
        local_names = set(namer.names.values()) | set(bound)
        outlined = outline.outline(body, bound, local_names,
                                   lambda c: _kernel_id(c, callees, kernels), namer.used | set(callees))
        blocks, body_lines = outlined if outlined else ([], outline.inline_lines(body))
        head = [f"# {h}" for h in header.splitlines()] if header else []
    return "\n".join(head + blocks + lines + body_lines) + "\n"


def _autocast_device(operands, passed):
    """The device type of the first operand that is a cast left to torch's autocast (the op
    runs in the caller's region, which casts it), or None."""
    for v in operands:
        if v in passed:
            return attrs.tensor_meta(v.type)[2].type
    return None


def _kernel_id(name, callees, kernels):
    """The kernel text of fusion callee `name` (identical regions of two layers: one text), or
    None when name is no callee."""
    f = callees.get(name)
    if f is None:
        return None
    text = kernels.get(name)
    if text is None:
        text = kernels[name] = kernel_text(f, name)
    return text


class _Types:
    """tensor_meta and _describe of the types of one program's values, each computed once (a
    program holds a few distinct types, read for every op)."""

    def __init__(self):
        self._meta, self._described = {}, {}

    def meta(self, t):
        m = self._meta.get(t)
        if m is None:
            m = self._meta[t] = attrs.tensor_meta(t)
        return m

    def describe(self, t):
        d = self._described.get(t)
        if d is None:
            d = self._described[t] = _describe(t)
        return d


class _GradLeaves:
    """The values of a grad-free program (python_source's grad_free: no autograd history is
    recorded when it runs) that may require grad when it runs: the inputs that require grad,
    tensors created with requires_grad=True, and what may share memory with those: results of
    view ops (a view made under no_grad of a tensor that requires grad requires grad), of ops
    that may return their input (x.to(x.dtype)), of the fallback's torch calls (which may return
    views), and what a fusion region returns of its arguments. A detach of any other value is the
    identity there (under torch.no_grad() the trace records one after each op on a tensor that
    requires grad, to cut thunder-autograd's gradient flow)."""

    ALIASING = ("torch_call", "torch_call_random")

    def __init__(self, args, callees):
        self.values, self.callees = set(args), callees

    def holds(self, value):
        return value in self.values

    def update(self, operation, values=None):
        """Adds the results of operation (values: its decoded arguments, when it is an op)."""
        tainted = [i for i, v in enumerate(expand(operation.operands)) if v in self.values]
        if not tainted:
            if values is not None and values.get("requires_grad") is True:  # torch.ones(..., requires_grad=True)
                self.values.update(results_of(operation))
            return
        name = operation.operation.name
        if name == "func.call":
            callee = self.callees[ir.FlatSymbolRefAttr(operation.attributes["callee"]).value]
            block = callee.regions[0].blocks[0]
            inner = _GradLeaves((block.arguments[i] for i in tainted), self.callees)
            for o in block.operations:
                if o.operation.name == "func.return":
                    self.values.update(r for r, v in zip(results_of(operation), expand(o.operands))
                                       if inner.holds(v))
                elif o.operation.name != "arith.constant":
                    inner.update(o)
            return
        op = registry.OPS.get(name)
        if op is None or op.is_view or op.returns_input or op.name in self.ALIASING:
            self.values.update(results_of(operation))


def _last_uses(operands_of):
    """value -> index of the last operation of the block that uses it (operands_of: each
    operation's operands, expanded)."""
    last = {}
    for i, operands in enumerate(operands_of):
        for v in operands:
            last[v] = i
    return last


class _Dels:
    """`del` of the values computed in the program that no operation after this one uses (its
    unused results, operands it used last), so their memory is freed as the program goes, as
    eager's autograd frees what a backward node has used: holding every intermediate until the
    function returns grows the heap each call, and the pages it gives back are faulted in again
    on the next. (Parameters are the caller's, and numbers hold no memory: not deleted.)"""

    def __init__(self, last_use, namer):
        self.last_use, self.names = last_use, namer.names
        self._freed = {}  # value -> whether it is a tensor computed in the program (asked once)

    def __call__(self, results, operands, index):
        """The names to delete after operation `index` (its results, its operands expanded)."""
        dead = []
        for v in (*results, *operands):
            if self.last_use.get(v, -1) <= index and v in self.names and self._computed_tensor(v):
                name = self.names[v]
                if name not in dead:
                    dead.append(name)
        return dead

    def _computed_tensor(self, v):
        freed = self._freed.get(v)
        if freed is None:
            freed = self._freed[v] = attrs.is_tensor_type(v.type) and not isinstance(v.owner, ir.Block)
        return freed


def op_statements(op, values, outs, grad_free=False):
    """The Python statements that run one op: values are its bound arguments (tensors and runtime
    numbers as Names), outs the names of its results; grad_free: see python_source."""
    if grad_free and op.python_grad_free is not None:
        statements = op.python_grad_free(values, outs)
        if statements is not None:
            return statements
    if op.python is not None:
        return op.python(values, outs)
    args, kwargs = call_args(op, values)
    call = ", ".join([py_repr(a) for a in args] + [f"{k}={py_repr(v)}" for k, v in kwargs.items()])
    if op.returns_sequence:
        target = ", ".join(outs) + ("," if len(outs) == 1 else "") or "()"  # (no results: `() = f()`)
    else:
        target = outs[0]
    return [f"{target} = {op.torch_name}({call})"]


def _rng_line(block):
    """`_rng = ...` for a function with checks of values (ltorch.check): the random generators'
    state at its start when a random op runs before a check (a failing check restores it, so
    the next cache entry draws the same numbers), else None."""
    random = checks = snapshot = python = False
    for operation in block.operations:
        name = operation.operation.name
        if name == "ltorch.check":
            checks, snapshot = True, snapshot or random
        op = registry.OPS.get(name)
        random = random or (op is not None and op.random and name != "ltorch.rng_state")
        python = python or name == "ltorch.python_draw"  # (Python's and numpy's generators too)
    if not checks:
        return None
    return f"_rng = impl.rng_snapshot({'python=True' if python else ''})" if snapshot else "_rng = None"


def _fusion_callees(module):
    """name -> func op of the regions thunder-fuse outlined (thunder.executor = "<name>")."""
    out = {}
    for op in module.body.operations:
        if op.operation.name == "func.func" and "thunder.executor" in op.attributes:
            out[ir.StringAttr(op.attributes["sym_name"]).value] = op
    return out


def _fusion_call(operation, namer, callees, constants, comments, types, texts=None, op_counts=None):
    """`t5, t6 = fusion_0(a, t3)`; constants (when given) gets fusion_0 bound to what the
    region's executor compiles (lowering/executors.py; the kernels themselves are compiled on
    first call, for each new combination of input strides); texts: python_source's region_texts;
    op_counts: a dict remembering the number of ops of each kernel text. Returns (code, comment).
    texts gets the kernel texts it computes."""
    callee = ir.FlatSymbolRefAttr(operation.attributes["callee"]).value
    f = callees.get(callee)
    if f is None:
        raise Unprintable(f"codegen: func.call of @{callee}, which is not a fusion region", operation.location)
    try:
        executor = executors.of_region(f).name
    except ValueError as e:  # an executor name no registry entry has
        raise Unprintable(f"codegen: @{callee}: {e}", operation.location) from None
    if constants is not None and callee not in constants:
        # one symbol name for all regions: identical regions (the same block in every layer)
        # share one kernel in the executor's cache
        text = texts.get(callee) if texts is not None else None
        if text is None:
            text = kernel_text(f, callee)
            if texts is not None:
                texts[callee] = text
        constants[callee] = executors.get(executor).compile(text, "fusion")
        try:  # what the region is, for cache="symbolic values" (runtime/symbolic.py)
            constants[callee].region = (executor, text)
        except AttributeError:
            pass
    args = ", ".join(namer.names[v] for v in operation.operands)
    wanted = loc_names(operation.location)
    outs = [namer.assign(r, wanted[i] if i < len(wanted) else None) for i, r in enumerate(operation.results)]
    code = f"{', '.join(outs)}{',' if len(outs) == 1 else ''} = {callee}({args})"
    comment = None
    if comments:
        key = (texts or {}).get(callee) or callee
        n = (op_counts or {}).get(key)
        if n is None:
            n = sum(1 for o in f.regions[0].blocks[0].operations
                    if o.operation.name not in ("arith.constant", "func.return"))
            if op_counts is not None:
                op_counts[key] = n
        comment = f"{', '.join(types.describe(r.type) for r in operation.results)} ({executor}: {n} ops)"
    return code, comment


def _describe(t):
    shape, dtype, device = attrs.tensor_meta(t)
    if device is None:
        return {"float64": "float", "int64": "int", "bool": "bool"}[str(dtype).replace("torch.", "")]
    dims = ", ".join("?" if d == sizes.DYNAMIC else str(d) for d in shape)
    return f"{device.type} {str(dtype).replace('torch.', '')}[{dims}]"


def _return_expr(flat, output_spec, constants, params):
    if output_spec is None:
        return "(" + ", ".join(flat) + ("," if len(flat) == 1 else "") + ")" if len(flat) != 1 else flat[0]
    return rebuild_source(output_spec, distinct_results(flat), constants, params)


def distinct_results(flat):
    """The results of a program, each a tensor of its own: the trace's results are distinct
    tensors (one returned twice is one result), as eager's objects are, but cse may have merged
    two that compute the same (`return x + 1, x + 1`, four optimizer states' `torch.tensor(0.0)`):
    the later ones are copies, so that an update of one does not reach the other."""
    seen, out = set(), []
    for name in flat:
        out.append(f"{name}.clone()" if name in seen else name)
        seen.add(name)
    return out


def compile_source(source, fn_name="computation", filename="<thunder>", constants=None):
    ns = dict(NAMESPACE)
    ns.update(constants or {})
    exec(code_objects.compiled(source, filename), ns)
    return ns[fn_name]
