"""Prologues: generated straight-line Python that checks a call's inputs against what a cache
entry was compiled for, unpacks the tensors and calls the entry's program.

An entry function returns MISS when any check fails, so the cache can try the next entry."""
import torch

MISS = object()


class _Gen:
    def __init__(self, check_metadata):
        self.lines = []
        self.consts = {}
        self.check = check_metadata
        self.tensor_vars = {}

    def const(self, value):
        name = f"_c{len(self.consts)}"
        self.consts[name] = value
        return name

    def emit(self, line):
        self.lines.append("  " + line)

    def miss_if(self, cond):
        self.emit(f"if {cond}: return MISS")

    def tensor(self, expr, index, var):
        self.emit(f"{var} = {expr}")
        self.tensor_vars[index] = var
        if self.check:
            t = self._example[index]
            dev = -1 if t.device.type == "cpu" else t.get_device()
            conds = [f"not isinstance({var}, Tensor)", f"{var}.dtype is not {self.const(t.dtype)}",
                     f"{var}.shape != {self.const(t.shape)}", f"{var}.get_device() != {dev}",
                     f"{'not ' if t.requires_grad else ''}{var}.requires_grad"]
            if t.device.type not in ("cpu", "cuda"):
                conds.append(f"{var}.device != {self.const(t.device)}")
            self.miss_if(" or ".join(conds))

    def value(self, expr, spec, var):
        kind = spec[0]
        if kind == "tensor":
            self.tensor(expr, spec[1], var)
            return
        if not self.check:
            if kind in ("tuple", "list", "namedtuple"):
                self._children(expr, spec, var)
            elif kind == "dict":
                for k, s in spec[1]:
                    self.value(f"{expr}[{k!r}]", s, f"{var}_{len(self.lines)}")
            elif kind == "dataclass":
                for f, s in spec[2]:
                    self.value(f"{expr}.{f}", s, f"{var}_{len(self.lines)}")
            return
        if kind == "const":
            v = spec[1]
            if isinstance(v, (bool, int, float, complex, str)) and not isinstance(v, torch.Size):
                self.miss_if(f"type({expr}) is not {type(v).__name__} or {expr} != {v!r}")
            elif v is None or v is Ellipsis:
                self.miss_if(f"{expr} is not {v!r}")
            else:
                c = self.const(v)
                self.miss_if(f"type({expr}) is not type({c}) or {expr} != {c}")
            return
        if kind == "object":
            self.miss_if(f"{expr} is not {self.const(spec[1])}")
            return
        if kind in ("tuple", "list", "namedtuple"):
            typ = {"tuple": "tuple", "list": "list"}.get(kind) or self.const(spec[1])
            self.emit(f"{var} = {expr}")
            n = len(spec[-1])
            self.miss_if(f"type({var}) is not {typ} or len({var}) != {n}")
            self._children(var, spec, var)
            return
        if kind == "dataclass":
            self.emit(f"{var} = {expr}")
            self.miss_if(f"type({var}) is not {self.const(spec[1])}")
            for i, (f, s) in enumerate(spec[2]):
                self.value(f"{var}.{f}", s, f"{var}_{i}")
            return
        if kind == "dict":
            self.emit(f"{var} = {expr}")
            keys = [k for k, _ in spec[1]]
            self.miss_if(f"type({var}) is not dict or list({var}) != {keys!r}")
            for i, (k, s) in enumerate(spec[1]):
                self.value(f"{var}[{k!r}]", s, f"{var}_{i}")
            return
        raise ValueError(kind)

    def _children(self, var, spec, base):
        for i, s in enumerate(spec[-1]):
            self.value(f"{var}[{i}]", s, f"{base}_{i}")


def prologue_source(args_spec, kwargs_spec, example_tensors, arg_names, check_metadata=True, grad_mode=None,
                    state=None, writes=()):
    """Source of `def entry(args, kwargs)` for the input specs (see structure.py);
    example_tensors are the tensors the entry was compiled with. arg_names name the flat
    tensors (the computation's parameters)."""
    g = _Gen(check_metadata)
    g._example = example_tensors
    g.lines.append("def entry(args, kwargs):")
    g.miss_if(f"len(args) != {len(args_spec)}")
    if kwargs_spec:
        g.miss_if(f"kwargs.keys() != {{{', '.join(repr(k) for k, _ in kwargs_spec)}}}")
    else:
        g.miss_if("kwargs")
    for i, s in enumerate(args_spec):
        g.value(f"args[{i}]", s, f"a{i}")
    for i, (k, s) in enumerate(kwargs_spec):
        g.value(f"kwargs[{k!r}]", s, f"k{i}")
    if state is not None:
        # tensors read from modules, objects, globals and cells, and the module flags that
        # decide what forward does (see state.py)
        g.consts.update(state.consts)
        for expr, expected in state.guards:
            if expected is None or isinstance(expected, bool):
                g.miss_if(f"{expr} is not {expected!r}")
            else:
                g.miss_if(f"{expr} != {expected!r}")
        for i, (expr, index) in enumerate(state.reads):
            g.tensor(expr, index, f"s{i}")
    if check_metadata:
        # an ambient torch.autocast region changes the program (its casts are traced)
        for dev in sorted({t.device.type for t in example_tensors} & {"cpu", "cuda"}):
            if torch.is_autocast_enabled(dev):
                g.miss_if(f"not is_autocast_enabled({dev!r}) or get_autocast_dtype({dev!r}) is not "
                          f"{g.const(torch.get_autocast_dtype(dev))}")
            else:
                g.miss_if(f"is_autocast_enabled({dev!r})")
    if grad_mode is not None and check_metadata:
        # with inputs that require grad, the program differs with grad mode (autograd or not)
        g.miss_if(f"{'not ' if grad_mode else ''}is_grad_enabled()")
    flat = ", ".join(g.tensor_vars[i] for i in range(len(example_tensors)))
    if not writes:
        g.emit(f"return computation({flat})")
    else:
        # attribute writes of the jitted code, replayed: tensors come back after the output
        tensor_writes = [w for w in writes if not isinstance(w[2], (bool, int, float, str, type(None)))]
        outs = ", ".join(["out"] + [f"w{i}" for i in range(len(tensor_writes))])
        g.emit(f"{outs}, = computation({flat})" if tensor_writes else f"out = computation({flat})")
        i = 0
        for expr, name, value in writes:
            if isinstance(value, (bool, int, float, str, type(None))):
                g.emit(f"{expr}.{name} = {value!r}")
            else:
                g.emit(f"{expr}.{name} = w{i}")
                i += 1
        g.emit("return out")
    return "\n".join(g.lines) + "\n", g.consts


def compile_prologue(source, consts, computation):
    ns = {"MISS": MISS, "Tensor": torch.Tensor, "computation": computation,
          "is_grad_enabled": torch.is_grad_enabled, "is_autocast_enabled": torch.is_autocast_enabled,
          "get_autocast_dtype": torch.get_autocast_dtype, **consts}
    exec(compile(source, "<thunder prologue>", "exec"), ns)
    return ns["entry"]
