"""Symbols from one real call: the sizes a generalized program is fitted at (runtime/generalize.py).

runtime/symbolic.py fits one program for all sizes from three compiled programs of the same
structure. Rather than wait for three calls, the call that asks for symbols (the first call
under cache="symbolic values", the second distinct size under the default option's automatic
dynamic) is compiled at its own sizes with the symbols as SymInts, and twice more at sizes
chosen here: stand-in arguments of the same structure, dtypes, devices and layouts, whose
symbolic dims and int arguments are the call's times a small factor per symbol (in the
first sample a distinct prime per symbol). Those two programs are never run (their inputs hold no data); they only show which literal of the
program is which expression of the symbols.

The factors are chosen so that the three calls are alike where the program could tell them
apart: every decision the traced call recorded (a comparison, `min`/`max`, a branch) goes the
same way, and every size expression that is not constant takes three different values (so no
literal stays the same by accident). A `//` or `%` that divides evenly at the call's sizes is
first sampled where it does not (the program then holds for both); where that fails (a
`view(B, T, H, C // H)` refuses an uneven C), at sizes where it does, and the generalized
program's prologue checks that it still does (even_divisions); where the decisions bound
the sizes (`max(T - 7, 0)` at T < 7), sizes within the bounds. A function that reads tensor values while tracing is not sampled this way (its
stand-ins hold no values)."""
import ast
import functools
import itertools
import math
import random

import torch

from thunder.core.strides import contiguous, dense_order

# the first sample's factors are distinct primes, one per symbol: no two products of up to
# three symbols then change by the same factor, so a literal that is one of them is no other
PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
FACTORS = (2, 3, 4, 5)  # the second sample's
TRIES = 400
# stand-in tensors per sample: on a device that allocates them for real; on the CPU (pages
# that are never touched cost no memory)
MAX_BYTES, MAX_CPU_BYTES = 1 << 30, 1 << 34


class NoSample(Exception):
    """The call cannot be compiled at other sizes (why)."""


_NAMESPACE = {"math": math, "max": max, "min": min, "abs": abs}


@functools.lru_cache(maxsize=4096)
def _code(source):
    return compile(source, "<thunder size>", "eval")


def evaluate(source, env):
    """A size expression or decision (Python source over the symbols) at env, compiled once."""
    return eval(_code(source), _NAMESPACE, env)  # noqa: S307 - our own expressions


def even_divisions(exprs, env):
    """The guards (source -> True) that every `a // b` and `a % b` among the size expressions
    exprs that divides evenly at env (the call's sizes) keeps dividing evenly: a program traced
    at such sizes may hold their quotient as an exact size (`view(B, T, H, C // H)`) or have left
    out what a zero remainder needs no op for."""
    out = {}
    for e in exprs:
        try:
            tree = ast.parse(e, mode="eval")
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod)) and not (
                    isinstance(node.right, ast.Constant) and node.right.value == 1):  # (a slice's step 1)
                guard = f"(({ast.unparse(node.left)}) % ({ast.unparse(node.right)}) == 0)"
                try:
                    if evaluate(guard, env) is True:
                        out[guard] = True
                except Exception:  # noqa: BLE001 - not defined at these sizes: no guard
                    continue
    return out


def choose_values(names, real, guards, exprs, uneven=(), seed=0, near=False):
    """Two assignments {name: size} for the symbols (real: their values at the call) with the
    recorded decisions (guards: source -> outcome, with the even divisions) unchanged, and each
    symbol and every non-constant expression of exprs taking three different values (two where
    the decisions leave no more): first each symbol's value times a factor (a distinct prime per symbol in the first); where the
    decisions bound the sizes (`max(T - 7, 0)` at T < 7), any sizes in those bounds (the fitting
    then refuses a literal that two terms explain). uneven: guards (even divisions) each of
    which must not hold at one of the two. near: sizes near the call's only (where the passes
    decide by size, the fusion policy: the programs at twice the sizes differ). Raises NoSample."""
    rng = random.Random(seed)
    probes = [{n: rng.randrange(2, 4 * v + 8) for n, v in real.items()} for _ in range(4)]
    # (products of up to three symbols too: a size a pass computes, B * T, must not stay the same)
    varying = [" * ".join(m) for d in (1, 2, 3) for m in itertools.combinations_with_replacement(names, d)]
    for e in exprs:
        try:
            if len({evaluate(e, p) for p in probes + [real]}) > 1:
                varying.append(e)
        except Exception:  # noqa: BLE001
            varying.append(e)
    best, feasible = None, 0
    for _ in range(TRIES if len(names) <= len(PRIMES) and not near else 0):
        pair = [dict(), dict()]
        primes = rng.sample(PRIMES[:max(len(names) + 2, 4)], len(names))
        for n, a in zip(names, primes):
            b = rng.choice([f for f in FACTORS if f != a])
            pair[0][n], pair[1][n] = real[n] * a, real[n] * b
        if _fits(pair, real, guards, varying, uneven=uneven):
            cost = sum(pair[0].values()) + sum(pair[1].values())
            feasible += 1
            if best is None or cost < best[0]:
                best = (cost, pair)
            if feasible == 24:  # (the smallest of these)
                break
    if best is not None:
        return best[1]
    for distinct in (3, 2):  # (where the bounds leave too few sizes: two values of three)
        for _ in range(2 * TRIES):
            pair = [{n: _near(rng, real[n]) for n in names} for _ in range(2)]
            if _fits(pair, real, guards, varying, distinct, uneven):
                return pair
    raise NoSample("no other sizes keep the decisions the trace recorded and its sizes' even divisions")


def _near(rng, v):
    """A size >= 2 other than v, mostly near it."""
    while True:
        w = rng.choice((rng.randrange(2, v + 4), v + rng.randrange(1, 9), rng.randrange(2, 4 * v + 8)))
        if w != v:
            return w


def _fits(pair, real, guards, varying, distinct=3, uneven=()):
    try:
        if not all(any(not evaluate(g, env) for env in pair) for g in uneven):
            return False
        for env in pair:
            for source, outcome in guards.items():
                if evaluate(source, env) != outcome:
                    return False
        for e in varying:
            if len({evaluate(e, real), evaluate(e, pair[0]), evaluate(e, pair[1])}) < distinct:
                return False
    except Exception:  # noqa: BLE001 - an expression undefined at a candidate (a division by zero)
        return False
    return True


def stand_in(t, shape):
    """An uninitialized tensor like t (dtype, device, requires_grad, layout order) of shape."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.is_sparse or t.layout != torch.strided:
        raise NoSample(f"an input is a {type(t).__name__} with layout {t.layout}")
    if t.is_contiguous():
        strides = contiguous(shape)
    else:  # a permutation of a dense layout keeps its order
        order = dense_order(t.shape, t.stride())
        if order is None:
            raise NoSample("an input whose sizes change is not dense in memory")
        strides = [0] * t.dim()
        step = 1
        for d in reversed(order):
            strides[d] = step
            step *= shape[d]
    with torch.no_grad():
        out = torch.empty_strided(tuple(shape), tuple(strides), dtype=t.dtype, device=t.device)
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(out, requires_grad=t.requires_grad)
    return out.requires_grad_(t.requires_grad)


def stand_in_call(args, kwargs, tensors, shapes, ints):
    """(args, kwargs, {id(tensor): its stand-in}) with each tensor of tensors (by identity)
    replaced by a stand-in of the shape at its place in shapes (those read from state are read
    in their place: compile.compile_entry's stand_ins), and int arguments by ints:
    {("arg", i) / ("kwarg", k): value}."""
    for cpu, limit in ((False, MAX_BYTES), (True, MAX_CPU_BYTES)):
        nbytes = sum(math.prod(s) * t.element_size() for t, s in zip(tensors, shapes) if (t.device.type == "cpu") == cpu)
        if nbytes > limit:
            raise NoSample(f"the inputs at other sizes would take {nbytes >> 20} MiB")
    swap = {}
    for t, s in zip(tensors, shapes):
        if id(t) not in swap:
            swap[id(t)] = stand_in(t, s) if tuple(s) != tuple(t.shape) else t

    def walk(v, depth=0):
        if isinstance(v, torch.Tensor):
            if id(v) not in swap:
                raise NoSample("an input tensor sits where its stand-in cannot be put")
            return swap[id(v)]
        if depth > 8:
            return v
        if type(v) in (list, tuple):
            return type(v)(walk(x, depth + 1) for x in v)
        if type(v) is dict:
            return {k: walk(x, depth + 1) for k, x in v.items()}
        if isinstance(v, (tuple, list, dict)) or hasattr(v, "__dict__") and _holds_tensor(v):
            raise NoSample(f"an input tensor sits in a {type(v).__name__}")
        return v

    new_args = [ints.get(("arg", i), walk(a)) for i, a in enumerate(args)]
    new_kwargs = {k: ints.get(("kwarg", k), walk(v)) for k, v in kwargs.items()}
    return new_args, new_kwargs, swap


def _holds_tensor(v):
    try:
        return any(isinstance(x, torch.Tensor) for x in vars(v).values())
    except TypeError:
        return False
