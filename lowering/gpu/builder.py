"""Writes one GPU kernel (a `gpu.func` as MLIR text) that computes some outputs of a graph
(graph.py) by evaluating each value where it is needed.

Values are computed at symbolic indices: `value(node, idx)` returns the SSA name of `node` at
the index `idx` (one `Lin` per dim), following indexing maps, slices and reshapes back to loads
of the inputs. Every op is emitted once per (text, scope) (CSE), into the outermost scope whose
values it uses, so what does not depend on a loop is computed before it. Nothing reads memory
under a condition: indices are clamped into range, and only stores are guarded.

Reductions are either
- cooperative (`cooperative=True`, index the same in every thread of the block): each thread
  combines the elements `lane, lane + W, ...` of the reduced space (unrolled when there are at
  most UNROLL per thread, so the values stay in registers for later uses in the row), then
  `gpu.all_reduce` combines the threads (warp shuffles, lowered by convert-gpu-to-nvvm);
- or sequential: an `scf.for` over the reduced elements in each thread.

Index arithmetic is i64. Kernel arguments: one `!llvm.ptr<1>` per tensor, then `%n` (i64),
the number of rows or elements this launch covers.
"""
from __future__ import annotations

import math
import re

from thunder.dialects.mlir import ir
from thunder.lowering.linalg.scalar import UnsupportedOp, literal

UNROLL = 8  # elements per thread of a row kept in registers (else a loop recomputes them)

_COMBINE = {"arith.addf": "add", "arith.addi": "add", "arith.mulf": "mul", "arith.muli": "mul",
            "arith.maximumf": "maximumf", "arith.minimumf": "minimumf", "arith.maxsi": "maxsi",
            "arith.minsi": "minsi", "arith.ori": "or", "arith.andi": "and", "arith.xori": "xor"}
_SHUFFLE_TYPES = {"f32", "f64", "i32", "i64"}
_SSA = re.compile(r"%[A-Za-z_][\w$.-]*")


def storage(elt):
    """How a tensor of this element type is stored (torch's bool is a byte)."""
    return "i8" if elt == "i1" else elt


def elt_size(elt):
    return {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8}[elt]


class Lin:
    """sum(coeff * atom) + const over i64 SSA atoms (nonnegative values)."""
    __slots__ = ("terms", "const")

    def __init__(self, terms=(), const=0):
        merged = {}
        for a, c in terms:
            merged[a] = merged.get(a, 0) + c
        self.terms = tuple(sorted((a, c) for a, c in merged.items() if c))
        self.const = const

    @property
    def key(self):
        return self.terms, self.const

    def __add__(self, other):
        if isinstance(other, int):
            return Lin(self.terms, self.const + other)
        return Lin(self.terms + other.terms, self.const + other.const)

    def __mul__(self, k):
        return Lin(tuple((a, c * k) for a, c in self.terms), self.const * k)

    def __eq__(self, other):
        return isinstance(other, Lin) and self.key == other.key

    def __hash__(self):
        return hash(self.key)


def const(c):
    return Lin((), c)


class Scope:
    """Lines of one region (the kernel body, a loop body, a guarded store). Items are lines or
    child scopes; `at` is where the next line goes: before the child that is open."""

    def __init__(self, header=None, footer=("}",)):
        self.items, self.at = [], 0
        self.header, self.footer = header, footer
        self.ops, self.values = {}, {}  # CSE: op text -> name; (node, idx) -> name

    def add(self, item):
        self.items.insert(self.at, item)
        self.at += 1

    def render(self, indent, out):
        for item in self.items:
            if isinstance(item, Scope):
                out.append(indent + item.header)
                item.render(indent + "  ", out)
                out.extend(indent + f for f in item.footer)
            else:
                out.append(indent + item)


class KernelBuilder:
    def __init__(self, graph, input_strides, threads, cooperative=False, vector=1, aligned=()):
        self.graph, self.strides, self.threads = graph, input_strides, threads
        self.cooperative, self.vector, self.aligned = cooperative, vector, set(aligned)
        self.root = Scope()
        self.stack = [self.root]
        self.info = {}  # SSA name -> (depth, varying, exclusive upper bound or None)
        self.n = 0
        self.sequential = 0  # reductions that were not cooperative
        self.nested = 0  # of those, computed inside another one's loop (once per iteration of it)
        self.longest_loop = 0  # the most reduced elements one of those loops over
        self._looping = 0
        self.vec_inner = None  # pointwise with vector > 1: lane 0's index along the last dim
        self.lane_offset = 0

    # ---- SSA values
    def fresh(self, base="v"):
        self.n += 1
        return f"%{base}{self.n}"

    def define(self, name, depth=0, varying=False, bound=None):
        self.info[name] = (depth, varying, bound)
        return name

    def op(self, rhs, varying=None, bound=None, base="v"):
        """Emit `%r = rhs` (once per scope) into the outermost scope where its operands exist."""
        deps = [d for d in _SSA.findall(rhs) if d in self.info]
        depth = max((self.info[d][0] for d in deps), default=0)
        scope = self.stack[depth]
        r = scope.ops.get(rhs)
        if r is None:
            r = self.fresh(base)
            scope.add(f"{r} = {rhs}")
            var = any(self.info[d][1] for d in deps) if varying is None else varying
            self.define(r, depth, var, bound)
            scope.ops[rhs] = r
        return r

    def stmt(self, text):
        """A side effect (a store), in the innermost scope."""
        self.stack[-1].add(text)

    def cst(self, value, t):
        if t == "i64" and isinstance(value, int):
            return self.op(f"arith.constant {value} : i64", base="c")
        return self.op(f"arith.constant {literal(value, t)} : {t}", base="c")

    def varying(self, name):
        return self.info[name][1]

    # ---- scopes
    def open(self, depth):
        """A child scope of the scope at `depth` (closing deeper ones for the time being); the
        caller sets its header (and footer) and closes it with close(child, saved)."""
        saved = self.stack[depth + 1:]
        del self.stack[depth + 1:]
        child = Scope()
        self.stack[-1].add(child)
        self.stack[-1].at -= 1  # later lines of the parent go before the child
        self.stack.append(child)
        return child, saved

    def close(self, child, saved):
        self.stack.pop()
        parent = self.stack[-1]
        parent.at = parent.items.index(child) + 1
        if saved:
            self.stack.extend(saved)
            parent.at = parent.items.index(saved[0])

    # ---- index arithmetic
    def lin_depth(self, lin):
        return max((self.info[a][0] for a, _ in lin.terms), default=0)

    def lin_uniform(self, lin):
        return not any(self.info[a][1] for a, _ in lin.terms)

    def bound(self, lin):
        """Exclusive upper bound of a Lin, or None."""
        total = lin.const
        for a, c in lin.terms:
            b = self.info[a][2]
            if b is None or c < 0:
                return None
            total += c * (b - 1)
        return total + 1

    def ssa(self, lin):
        """The Lin as an i64 SSA value."""
        if not lin.terms:
            return self.cst(lin.const, "i64")
        if len(lin.terms) == 1 and lin.terms[0][1] == 1 and lin.const == 0:
            return lin.terms[0][0]
        acc = None
        for a, c in lin.terms:
            t = a if c == 1 else self.op(f"arith.muli {a}, {self.cst(c, 'i64')} : i64")
            acc = t if acc is None else self.op(f"arith.addi {acc}, {t} : i64")
        if lin.const:
            acc = self.op(f"arith.addi {acc}, {self.cst(lin.const, 'i64')} : i64")
        return acc

    def atom(self, rhs, bound=None):
        return Lin(((self.op(rhs, bound=bound), 1),))

    def floordiv(self, lin, m):
        if m == 1:
            return lin
        if not lin.terms:
            return const(lin.const // m)
        b = self.bound(lin)
        if b is not None and b <= m:
            return const(0)
        whole = Lin(tuple((a, c // m) for a, c in lin.terms if c % m == 0))
        rest = Lin(tuple((a, c) for a, c in lin.terms if c % m), lin.const)
        rb = self.bound(rest)
        if rest.const >= 0 and rb is not None and rb <= m:
            return whole
        if not rest.terms:
            return whole + rest.const // m
        return self.atom(f"arith.divui {self.ssa(lin)}, {self.cst(m, 'i64')} : i64",
                         None if b is None else -(-b // m))

    def mod(self, lin, m):
        if m == 1:
            return const(0)
        rest = Lin(tuple((a, c) for a, c in lin.terms if c % m), lin.const % m)
        b = self.bound(rest)
        if b is not None and b <= m:
            return rest
        return self.atom(f"arith.remui {self.ssa(lin)}, {self.cst(m, 'i64')} : i64", m)

    def delinearize(self, lin, shape):
        """Row-major indices of a linear index in shape (the first dim is not wrapped)."""
        out = []
        for k, size in enumerate(shape):
            if size == 1:
                out.append(const(0))
                continue
            q = self.floordiv(lin, math.prod(shape[k + 1:]))
            out.append(q if k == 0 else self.mod(q, size))
        return out

    def clamp(self, lin, top):
        """min(lin, top - 1) and whether lin < top (None: always)."""
        b = self.bound(lin)
        if b is not None and b <= top:
            return lin, None
        s = self.ssa(lin)
        clamped = Lin(((self.op(f"arith.minsi {s}, {self.cst(top - 1, 'i64')} : i64", bound=top), 1),))
        return clamped, self.op(f"arith.cmpi slt, {s}, {self.cst(top, 'i64')} : i64")

    # ---- values
    def value(self, node, idx):
        key = (id(node), tuple(i.key for i in idx))
        scope = self.stack[max((self.lin_depth(i) for i in idx), default=0)]
        r = scope.values.get(key)
        if r is None:
            r = scope.values[key] = self._compute(node, idx)
        return r

    def _compute(self, node, idx):
        k = node.kind
        if k == "input":
            return self.load(node, idx)
        if k == "fill":
            return self.cst(node.value, node.elt)
        if k == "slice":
            return self.value(node.src, [i * s + o for i, s, o in zip(idx, node.steps, node.offsets)])
        if k == "insert":
            return self.inserted(node, idx)
        if k == "reshape":
            lin = const(0)
            for i, st in zip(idx, _row_major(node.shape)):
                lin = lin + i * st
            return self.value(node.src, self.delinearize(lin, node.src.shape))
        if k == "generic":
            if "reduction" in node.iterators:
                return self.reduce(node, idx)
            loop = [None] * node.loops
            for (kind, d), i in zip(node.out_map, idx):
                loop[d] = i
            return self.body(node, loop, idx)
        raise UnsupportedOp(f"reading a {k} value")

    def inserted(self, node, idx):
        """A chain of tensor.insert_slice (a cat, a pad): per element, the value of the last
        piece that holds the index (arith.select; each piece is read at its index clamped into
        it, so no load leaves its tensor). The chain's base is read where no piece is; an empty
        base (a cat's, which its pieces cover) never is."""
        pieces = []
        while node.kind == "insert":
            pieces.append(node)
            node = node.dest
        result = None if node.kind == "empty" else self.value(node, idx)
        for p in reversed(pieces):  # in the order they were inserted: a later one overwrites
            inside, src_idx = self._piece(p, idx)
            if inside is False:
                continue
            v = self.value(p.src, src_idx)
            result = v if inside is True or result is None else self.op(
                f"arith.select {inside}, {v}, {result} : {p.elt}")
        return self.cst(0, node.elt) if result is None else result  # (an element no piece wrote)

    def _piece(self, p, idx):
        """(whether idx is inside the piece p inserts: True, False or an i1 SSA value; the
        index of p.src there, clamped into p.src)."""
        conds, src_idx = [], []
        i64 = "i64"
        for i, off, step, size, full in zip(idx, p.offsets, p.steps, p.src.shape, p.shape):
            if off == 0 and step == 1 and size == full:
                src_idx.append(i)
                continue
            span = (size - 1) * step + 1  # the piece covers off .. off + span - 1
            if not i.terms:
                c = i.const - off
                if c < 0 or c >= span or c % step:
                    return False, None
                src_idx.append(const(c // step))
                continue
            lo = i.const if all(c > 0 for _, c in i.terms) else None  # (atoms are >= 0)
            hi = self.bound(i)
            if (hi is not None and hi <= off) or (lo is not None and lo >= off + span):
                return False, None
            below = lo is None or lo < off  # may the index be before the piece, after it?
            after = hi is None or hi > off + span
            if step == 1 and not below and not after:
                src_idx.append(i + (-off))
                continue
            s = self.ssa(i)
            rel = self.op(f"arith.subi {s}, {self.cst(off, i64)} : i64") if off else s
            if below:
                conds.append(self.op(f"arith.cmpi sge, {rel}, {self.cst(0, i64)} : i64"))
            if after:
                conds.append(self.op(f"arith.cmpi slt, {rel}, {self.cst(span, i64)} : i64"))
            q = rel
            if step > 1:
                r = self.op(f"arith.remsi {rel}, {self.cst(step, i64)} : i64")
                conds.append(self.op(f"arith.cmpi eq, {r}, {self.cst(0, i64)} : i64"))
                q = self.op(f"arith.divsi {rel}, {self.cst(step, i64)} : i64")
            if below:
                q = self.op(f"arith.maxsi {q}, {self.cst(0, i64)} : i64", bound=None if after else size)
            if after:
                q = self.op(f"arith.minsi {q}, {self.cst(size - 1, i64)} : i64", bound=size)
            src_idx.append(Lin(((q, 1),)))
        inside = True
        for c in conds:
            inside = c if inside is True else self.op(f"arith.andi {inside}, {c} : i1")
        return inside, src_idx

    def body(self, node, loop, idx, acc=None):
        args = [self.value(x, [loop[d] if kind == "d" else const(d) for kind, d in m])
                for x, m in zip(node.ins, node.maps)]
        block = node.body
        acc_arg = block.arguments[len(node.ins)]
        if acc is None and list(acc_arg.uses):
            acc = self.value(node.init, idx)
        names = dict(zip(block.arguments, args + [acc]))
        for o in block.operations:
            o = o.operation
            if o.name == "linalg.yield":
                return names[o.operands[0]]
            if o.name == "math.ipowi":  # no NVVM lowering: square and multiply
                names[o.results[0]] = self.ipowi(*(names[v] for v in o.operands), str(o.results[0].type))
                continue
            if o.name == "linalg.index":  # the loop's index along a dim (iota): this thread's
                d = ir.IntegerAttr(o.attributes["dim"]).value
                names[o.results[0]] = self.op(f"arith.index_cast {self.ssa(loop[d])} : i64 to index")
                continue
            operands = ", ".join(names[v] for v in o.operands)
            attrs = ", ".join(f"{k} = {o.attributes[k]}" for k in o.attributes)
            types = ", ".join(str(v.type) for v in o.operands)
            rhs = f'"{o.name}"({operands}) {{{attrs}}} : ({types}) -> {o.results[0].type}'
            names[o.results[0]] = self.op(rhs)
        raise UnsupportedOp("a linalg body without yield")

    def ipowi(self, x, e, t):
        """x ** e for integers, e >= 0 (the caller selects): a loop over the exponent's bits."""
        one = self.cst(1, t)
        depth = max(self.info[x][0], self.info[e][0])
        i, r, b, k = (self.fresh(s) for s in ("i", "r", "b", "e"))
        child, saved = self.open(depth)
        for name in (r, b, k):
            self.define(name, depth + 1, True)
        self.define(i, depth + 1, False, 64)
        odd = self.op(f"arith.cmpi ne, {self.op(f'arith.andi {k}, {one} : {t}')}, {self.cst(0, t)} : {t}")
        r2 = self.op(f"arith.select {odd}, {self.op(f'arith.muli {r}, {b} : {t}')}, {r} : {t}")
        b2 = self.op(f"arith.muli {b}, {b} : {t}")
        k2 = self.op(f"arith.shrui {k}, {one} : {t}")
        p = self.fresh("pow")
        child.header = (f"{p}:3 = scf.for {i} = {self.cst(0, 'i64')} to {self.cst(64, 'i64')} step {self.cst(1, 'i64')} "
                        f"iter_args({r} = {one}, {b} = {x}, {k} = {e}) -> ({t}, {t}, {t}) : i64 {{")
        child.footer = (f"  scf.yield {r2}, {b2}, {k2} : {t}, {t}, {t}", "}")
        self.close(child, saved)
        self.define(p, depth, self.varying(x) or self.varying(e))
        return f"{p}#0"

    def _loop_sizes(self, node):
        sizes = [None] * node.loops
        for x, m in zip(node.ins, node.maps):
            for (kind, d), s in zip(m, x.shape):
                if kind == "d":
                    sizes[d] = s
        for (kind, d), s in zip(node.out_map, node.shape):
            sizes[d] = s
        return sizes

    def _combine_kind(self, node):
        block = node.body
        acc_arg = block.arguments[len(node.ins)]
        ops = [o.operation for o in block.operations]
        last = ops[-2] if len(ops) >= 2 else None
        if last is None or last.name not in _COMBINE or acc_arg not in list(last.operands):
            return None
        return _COMBINE[last.name]

    def reduce(self, node, idx):
        sizes = self._loop_sizes(node)
        red = [d for d, it in enumerate(node.iterators) if it == "reduction"]
        shape = [sizes[d] for d in red]
        total = math.prod(shape)
        t = node.elt
        init = self.cst(node.init.value, t)
        if total == 0:
            return init
        loop = [None] * node.loops
        for (kind, d), i in zip(node.out_map, idx):
            loop[d] = i
        kind = self._combine_kind(node)
        if (self.cooperative and kind and t in _SHUFFLE_TYPES and all(self.lin_uniform(i) for i in idx)):
            return self._cooperative(node, idx, loop, red, shape, total, init, kind)
        self.sequential += 1
        self.nested += self._looping > 0
        self.longest_loop = max(self.longest_loop, total)
        depth = max((self.lin_depth(i) for i in idx), default=0)
        k, a = self.fresh("k"), self.fresh("acc")
        child, saved = self.open(depth)
        self.define(k, depth + 1, any(not self.lin_uniform(i) for i in idx), total)
        self.define(a, depth + 1, True)
        for d, i in zip(red, self.delinearize(Lin(((k, 1),)), shape)):
            loop[d] = i
        self._looping += 1
        new = self.body(node, loop, idx, acc=a)
        self._looping -= 1
        r = self.fresh("red")
        lb, ub = self.cst(0, "i64"), self.cst(total, "i64")
        step = self.cst(1, "i64")
        child.header = f"{r} = scf.for {k} = {lb} to {ub} step {step} iter_args({a} = {init}) -> ({t}) : i64 {{"
        child.footer = (f"  scf.yield {new} : {t}", "}")
        self.close(child, saved)
        return self.define(r, depth, self.varying(new) or any(not self.lin_uniform(i) for i in idx))

    def _cooperative(self, node, idx, loop, red, shape, total, init, kind):
        """Each thread combines elements lane + j * W (with vector V: the V elements of chunk
        lane + j * W), then gpu.all_reduce across the block."""
        t, w = node.elt, self.threads
        depth = max((self.lin_depth(i) for i in idx), default=0)

        v = self.vector if self.vector > 1 and self.vec_inner is None and total % self.vector == 0 else 1
        per_thread = -(-total // (w * v))  # chunks of v consecutive elements: lane + j * W

        def step(acc, chunk):
            chunk, valid = self.clamp(chunk, total // v)
            new = acc
            for u in range(v):
                for d, i in zip(red, self.delinearize(chunk * v + u, shape)):
                    loop[d] = i
                new = self.body(node, loop, idx, acc=new)
            return new if valid is None else self.op(f"arith.select {valid}, {new}, {acc} : {t}")

        if per_thread * v <= UNROLL:
            acc = init
            for j in range(per_thread):
                acc = step(acc, self.lane + j * w)
        else:
            j, a = self.fresh("j"), self.fresh("acc")
            child, saved = self.open(depth)
            self.define(j, depth + 1, False, per_thread)
            self.define(a, depth + 1, True)
            new = step(a, self.lane + Lin(((j, w),)))
            acc = self.fresh("part")
            lb, ub, one = self.cst(0, "i64"), self.cst(per_thread, "i64"), self.cst(1, "i64")
            child.header = f"{acc} = scf.for {j} = {lb} to {ub} step {one} iter_args({a} = {init}) -> ({t}) : i64 {{"
            child.footer = (f"  scf.yield {new} : {t}", "}")
            self.close(child, saved)
            self.define(acc, depth, True)
        return self.op(f"gpu.all_reduce {kind} {acc} uniform {{}} : ({t}) -> ({t})", varying=False)

    # ---- memory
    def offset(self, idx, strides, shape):
        lin = const(0)
        for i, s, n in zip(idx, strides, shape):
            if n != 1:
                lin = lin + i * s
        return lin

    def load(self, node, idx):
        i = node.index
        strides = self.strides[i]
        off = self.offset(idx, strides, node.shape)
        st = storage(node.elt)
        v = self.lane_offset
        if self.vector > 1 and node.shape and strides[-1] == 1 and i in self.aligned:
            base = off + (-v)
            key = ("vector", i, base.key)  # kept in the scope of its index, like values
            memo = self.stack[self.lin_depth(base)].values
            vec = memo.get(key)
            inner = idx[-1] + (-v)
            if vec is None and v == 0 and inner == self.vec_inner and all(
                    s % self.vector == 0 for s, n in zip(strides[:-1], node.shape[:-1]) if n != 1):
                p = self.op(f"llvm.getelementptr %in{i}[{self.ssa(base)}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, {st}")
                vt = f"vector<{self.vector}x{st}>"
                vec = memo[key] = self.op(
                    f"llvm.load {p} {{alignment = {self.vector * elt_size(node.elt)} : i64}} : !llvm.ptr<1> -> {vt}")
            if vec is not None:
                lane = self.op(f"llvm.mlir.constant({v} : i32) : i32", base="c")
                x = self.op(f"llvm.extractelement {vec}[{lane} : i32] : vector<{self.vector}x{st}>")
                return self._from_storage(x, node.elt)
        if self.vector > 1 and self.vec_inner is None and i in self.aligned:
            x = self._chunk_load(node, i, idx, off, st)
            if x is not None:
                return x
        p = self.op(f"llvm.getelementptr %in{i}[{self.ssa(off)}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, {st}")
        return self._from_storage(self.op(f"llvm.load {p} : !llvm.ptr<1> -> {st}"), node.elt)

    def _chunk_load(self, node, i, idx, off, st):
        """Rows read in chunks of V (vector > 1 without vec_inner): an element whose last-dim index
        is V * atoms + u (u < V) and whose offset is V * atoms + const is lane u of the V-element
        vector at offset - u, which lies in the same row (the last dim a multiple of V, the input's
        pointer 16-byte aligned): one vector load per chunk, shared by its V elements."""
        v = self.vector
        if not (node.shape and node.shape[-1] % v == 0 and self.strides[i][-1] == 1 and idx):
            return None
        u = idx[-1].const % v
        if any(c % v for _, c in idx[-1].terms) or any(c % v for _, c in off.terms) or (off.const - u) % v:
            return None
        base = off + (-u)
        key = ("vector", i, base.key)
        memo = self.stack[self.lin_depth(base)].values
        vec = memo.get(key)
        vt = f"vector<{v}x{st}>"
        if vec is None:
            p = self.op(f"llvm.getelementptr %in{i}[{self.ssa(base)}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, {st}")
            vec = memo[key] = self.op(
                f"llvm.load {p} {{alignment = {v * elt_size(node.elt)} : i64}} : !llvm.ptr<1> -> {vt}")
        lane = self.op(f"llvm.mlir.constant({u} : i32) : i32", base="c")
        return self._from_storage(self.op(f"llvm.extractelement {vec}[{lane} : i32] : {vt}"), node.elt)

    def _from_storage(self, x, elt):
        return self.op(f"arith.trunci {x} : i8 to i1") if elt == "i1" else x

    def to_storage(self, x, elt):
        return self.op(f"arith.extui {x} : i1 to i8") if elt == "i1" else x

    def store(self, out_index, off, x, elt, valid):
        """Store x (an SSA name, or a list of V lane values) at element offset off of output
        out_index, under `valid` (None: always)."""
        st = storage(elt)
        p = self.op(f"llvm.getelementptr %out{out_index}[{self.ssa(off)}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, {st}")
        if isinstance(x, list):
            vt = f"vector<{len(x)}x{st}>"
            vec = self.op(f"llvm.mlir.undef : {vt}")
            for k, lane in enumerate(x):
                c = self.op(f"llvm.mlir.constant({k} : i32) : i32", base="c")
                vec = self.op(f"llvm.insertelement {self.to_storage(lane, elt)}, {vec}[{c} : i32] : {vt}")
            text = f"llvm.store {vec}, {p} {{alignment = {len(x) * elt_size(elt)} : i64}} : {vt}, !llvm.ptr<1>"
        else:
            text = f"llvm.store {self.to_storage(x, elt)}, {p} : {st}, !llvm.ptr<1>"
        if valid is None:
            self.stmt(text)
            return
        child, saved = self.open(len(self.stack) - 1)
        child.header = f"scf.if {valid} {{"
        self.stmt(text)
        self.close(child, saved)

    # ---- the kernel
    def thread_ids(self):
        tid = self.op("gpu.thread_id x", varying=True, base="tid")
        bid = self.op("gpu.block_id x", varying=False, base="bid")
        lane = self.op(f"arith.index_cast {tid} : index to i64", bound=self.threads, base="lane")
        block = self.op(f"arith.index_cast {bid} : index to i64", base="block")
        self.lane = Lin(((lane, 1),))
        self.block = Lin(((block, 1),))

    def func(self, name, n_outputs, attrs=""):
        params = [f"%in{i}: !llvm.ptr<1> {{llvm.noalias, llvm.readonly}}" for i in range(len(self.graph.inputs))]
        params += [f"%out{j}: !llvm.ptr<1> {{llvm.noalias}}" for j in range(n_outputs)]
        params.append("%n: i64")
        lines = []
        self.root.render("      ", lines)
        head = (f"    gpu.func @{name}({', '.join(params)}) kernel attributes "
                f"{{known_block_size = array<i32: {self.threads}, 1, 1>{attrs}}} {{")
        return "\n".join([head] + lines + ["      gpu.return", "    }"])


def _row_major(shape):
    return [math.prod(shape[k + 1:]) for k in range(len(shape))]
