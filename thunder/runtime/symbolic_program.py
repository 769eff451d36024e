"""One compile for all sizes: under cache="symbolic values" the trace recorded with symbolic
sizes is compiled as it is (runtime/compile.py compile_entry's symbolic_program): the passes run
on its `?` dims (docs/passes.md "Traces with dynamic sizes"), its fused regions become kernels
for every size (lowering/linalg/dynamic_region.py), the generated program reads its symbols from
its arguments' sizes, and the prologue checks the decisions the interpreter and the passes took
on them (the func's thunder.size_guards). Where it cannot be (NotSymbolic, or a pass refuses),
the call is compiled with concrete sizes and at two sampled sizes, and the three are fitted into
one program (runtime/generalize.py, runtime/symbolic.py)."""
import ast

from thunder.core.strides import dense_order
from thunder.dialects import sizes
from thunder.dialects.emit import find_func, loc_names
from thunder.runtime.codegen import compile_source
from thunder.runtime.traces import Trace


def symbol_names(sym_shapes):
    """The symbols of a call traced with sym_shapes (compile_entry's: tensor id -> a name or None
    per dim, an int argument -> its name), once each, in order."""
    return list(dict.fromkeys(n for v in sym_shapes.values() for n in ([v] if isinstance(v, str) else v) if n))


class NotSymbolic(Exception):
    """The call's trace cannot be compiled with its symbolic sizes (why)."""


def module_of(symbolic_trace, cs, leaks, inputs):
    """A fresh module of the trace with symbolic sizes, for the passes to change."""
    if not isinstance(symbolic_trace, Trace):
        raise NotSymbolic(symbolic_trace or "no trace with symbolic sizes")
    if cs.last_splits:
        raise NotSymbolic("the trace read tensor values")
    if cs.last_state_change:
        raise NotSymbolic(f"the function changes state while tracing ({cs.last_state_change})")
    if leaks:
        raise NotSymbolic("a size computed from the symbols is returned or stored as a Python number")
    if inputs.shared or inputs.storages:
        raise NotSymbolic("inputs share memory")
    return symbolic_trace.module()


def _pins(condition):
    """Whether a condition holds at one value of an expression of the symbols only (`(H - 7) //
    2 + 1 == 17`: a size the trace or a pass made a plain number; compiled so, every new size
    would compile again). A remainder equal to a number is a divisibility, which holds at many
    values (`((B * T) * 256) % ((B * T) * 64) == 0`, a view's)."""
    node = ast.parse(condition, mode="eval").body
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)):
        return False
    sides = (node.left, node.comparators[0])
    return any(isinstance(a, ast.Constant) and not isinstance(b, ast.Constant) and
               not (isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod)) for a, b in (sides, sides[::-1]))


def computation_for_prologue(computation, module, read, sym_shapes, prologue_args, program_guards=()):
    """(the program as the prologue calls it: its tensors and numbers, then every symbol; the
    prologue's `symbols`: each tensor's symbol per dim, the symbols, the decisions on them, the
    int arguments that are symbols). program_guards: those of a training program's forward and
    backward (thunder-autograd's and thunder-fuse's decisions)."""
    f = find_func(module.operation, "computation")
    sym_dims = {i: sym_shapes[id(t)] for i, t in enumerate(read) if any(sym_shapes.get(id(t), ()))}
    for i in prologue_args["strided"]:  # (a dense layout in another order: the prologue checks that order)
        t = read[i]
        if i in sym_dims and not t.is_contiguous() and dense_order(t.shape, t.stride()) is None:
            raise NotSymbolic(f"the program depends on the strides of tensor {i}, which is not dense")
    ints = {w: n for w, n in sym_shapes.items() if isinstance(w, tuple)}
    names = symbol_names(sym_shapes)
    # (the interpreter's decisions and the passes': what they emitted holds where these do)
    guards = {condition: True for condition in [*sizes.guards(f), *program_guards]}
    pinned = next((c for c in guards if _pins(c)), None)
    if pinned is not None:  # (a size lost its expression: the fit tells what the literal is)
        raise NotSymbolic(f"the program holds at one value of a size only ({pinned})")
    arguments = list(f.regions[0].blocks[0].arguments)
    int_params = [(loc_names(a.location) or [None])[0] for a in arguments[len(arguments) - len(ints):]]
    if sorted(int_params) != sorted(ints.values()):
        raise NotSymbolic("the program's int symbols are not its last parameters")
    params = [f"a{i}" for i in range(len(arguments) - len(ints))]
    source = (f"def computation({', '.join(params + names)}):\n"
              f"  return program({', '.join(params + int_params)})\n")
    return compile_source(source, constants={"program": computation}), (sym_dims, names, guards, ints)


def int_symbols(sym_shapes):
    """The names of the int arguments that are symbols, in the order the trace's func takes them."""
    return [name for key, name in sym_shapes.items() if isinstance(key, tuple)]


class BackwardSymbols:
    """A training program for all sizes: the values of the symbols its @backward takes as
    parameters after the cotangents (those no dim of its inputs gives: thunder-autograd), read
    from the forward's inputs (a dim's size, an int argument's value) when the backward runs."""

    def __init__(self, module):
        with module.context:
            fwd, bwd = find_func(module.operation, "forward"), find_func(module.operation, "backward")
            ints = set(sizes.symbol_values(fwd))
            args = list(fwd.regions[0].blocks[0].arguments)
            where = {}  # symbol -> ("int", input) or ("dim", input, dim)
            for i, a in enumerate(args):
                name = (loc_names(a.location) or [None])[0]
                if str(a.type) == "i64" and name in ints:
                    where.setdefault(name, ("int", i))
            for i, dims in enumerate(sizes.argument_dims(fwd, len(args))):
                for k, d in enumerate(dims or ()):
                    if d.isidentifier():
                        where.setdefault(d, ("dim", i, k))
            taken = []
            for a in reversed(list(bwd.regions[0].blocks[0].arguments)):  # (after the last tensor: symbols)
                if str(a.type) != "i64":
                    break
                name = (loc_names(a.location) or [None])[0]
                if name not in where:  # (only in an expression of an input's dim: not read alone)
                    raise NotSymbolic(f"the backward takes symbol {name}, which no input gives alone")
                taken.append(where[name])
        self.reads = taken[::-1]

    def __call__(self, inputs):
        return tuple(inputs[r[1]] if r[0] == "int" else inputs[r[1]].shape[r[2]] for r in self.reads)
