"""Run the kernels of a region on the CPU by interpreting their gpu.func (before NVVM) with numpy,
every thread of the grid at once, for tests and debugging without a GPU.

    outs = emulate_region(region_text, "fusion_0", *cpu_tensors)

Each SSA value is an array over all threads (grid x block); `gpu.all_reduce` combines the
threads of each block, `scf.if` masks, `scf.for` runs its body once per iteration. The launch
configuration, the index arithmetic, the clamping, the vector loads and the stores are the ones
the GPU runs (the same kernel text), and the checks are stricter than a GPU's: every load of
every thread (masked or not) must be inside its tensor, and every output element must be
written exactly once. f16 rounds per op (numpy float16), bf16 is computed in f32 and rounded
to nearest even per op (as the NVVM lowering does); fma is computed in f64 and rounded once.
"""
from __future__ import annotations

import math
import re

import numpy as np
import torch

from thunder.dialects.mlir import ir
from thunder.lowering.gpu import region_kernels
from thunder.lowering.linalg.to_linalg import parse_region

_NP = {"f16": np.float16, "bf16": np.float32, "f32": np.float32, "f64": np.float64, "i1": np.bool_,
       "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "index": np.int64}
_UNSIGNED = {np.dtype(np.int8): np.uint8, np.dtype(np.int16): np.uint16, np.dtype(np.int32): np.uint32,
             np.dtype(np.int64): np.uint64, np.dtype(np.bool_): np.uint8}


class EmulationError(AssertionError):
    pass


def _bf16_round(x):
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), rounded)


def _type(t):
    """(numpy dtype, vector width or None, MLIR element type name)."""
    s = str(t)
    m = re.fullmatch(r"vector<(\d+)x(\w+)>", s)
    if m:
        return _NP[m.group(2)], int(m.group(1)), m.group(2)
    return _NP.get(s), None, s


def _cast(x, elt):
    dt = _NP[elt]
    with np.errstate(all="ignore"):
        y = np.asarray(x).astype(dt)
    return _bf16_round(y) if elt == "bf16" else y


def _unsigned(x):
    return x.view(_UNSIGNED[x.dtype]) if x.dtype in _UNSIGNED else x


_CMPF = {0: lambda a, b: np.zeros(a.shape, bool), 1: lambda a, b: a == b, 2: lambda a, b: a > b,
         3: lambda a, b: a >= b, 4: lambda a, b: a < b, 5: lambda a, b: a <= b,
         6: lambda a, b: (a != b) & ~np.isnan(a) & ~np.isnan(b), 7: lambda a, b: ~np.isnan(a) & ~np.isnan(b),
         8: lambda a, b: (a == b) | np.isnan(a) | np.isnan(b), 9: lambda a, b: ~(a <= b), 10: lambda a, b: ~(a < b),
         11: lambda a, b: ~(a >= b), 12: lambda a, b: ~(a > b), 13: lambda a, b: a != b,
         14: lambda a, b: np.isnan(a) | np.isnan(b), 15: lambda a, b: np.ones(a.shape, bool)}
_CMPI = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater, 5: np.greater_equal}


def _divsi(a, b):
    """Division rounding toward zero (floor division corrected), as LLVM's sdiv."""
    b = np.where(b == 0, 1, b).astype(a.dtype)
    q = a // b
    return np.where((a % b != 0) & ((a < 0) != (b < 0)), q + 1, q).astype(a.dtype)


_BINARY = {
    "arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply, "arith.divf": np.divide,
    "arith.maximumf": np.maximum, "arith.minimumf": np.minimum, "arith.addi": np.add, "arith.subi": np.subtract,
    "arith.muli": np.multiply, "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor,
    "arith.maxsi": np.maximum, "arith.minsi": np.minimum, "arith.divsi": _divsi,
    "arith.remsi": lambda a, b: a - _divsi(a, b) * b,
    "arith.divui": lambda a, b: (_unsigned(a) // np.where(b == 0, 1, _unsigned(b))).view(a.dtype),
    "arith.remui": lambda a, b: (_unsigned(a) % np.where(b == 0, 1, _unsigned(b))).view(a.dtype),
    "arith.shli": lambda a, b: np.left_shift(a, b), "arith.shrsi": lambda a, b: np.right_shift(a, b),
    "arith.shrui": lambda a, b: np.right_shift(_unsigned(a), _unsigned(b)).view(a.dtype),
    "math.copysign": np.copysign,
}
_UNARY = {"arith.negf": np.negative, "math.floor": np.floor, "math.ceil": np.ceil, "math.trunc": np.trunc,
          "math.roundeven": np.rint, "math.sqrt": np.sqrt, "math.absf": np.abs, "math.absi": np.abs}
_REDUCE = {"add": np.sum, "mul": np.prod, "maximumf": np.max, "minimumf": np.min, "maxsi": np.max,
           "minsi": np.min, "or": np.bitwise_or.reduce, "and": np.bitwise_and.reduce,
           "xor": np.bitwise_xor.reduce}


class _Memory:
    """A tensor as flat numpy storage from its first element; bf16 as float32 values."""

    def __init__(self, t, writable):
        span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
        flat = torch.as_strided(t, (span,), (1,)) if span else t.reshape(0)
        if t.dtype == torch.bfloat16:
            self.array = flat.float().numpy().copy() if not writable else np.zeros(span, np.float32)
        else:
            self.array = flat.numpy() if not writable else flat.numpy()
        self.tensor, self.writable = t, writable
        self.writes = np.zeros(span, np.int64) if writable else None

    def finish(self):
        if self.tensor.dtype == torch.bfloat16 and self.writable:
            self.tensor.copy_(torch.from_numpy(self.array).view(self.tensor.shape).to(torch.bfloat16))


class _Kernel:
    def __init__(self, func, memories, n, grid, threads):
        self.func, self.memories, self.threads = func, memories, threads
        self.lanes = grid * threads
        self.tid = np.arange(self.lanes, dtype=np.int64)
        args = func.regions[0].blocks[0].arguments
        self.env = {}
        for a, m in zip(list(args)[:-1], memories):
            self.env[a] = ("ptr", m, np.zeros(self.lanes, np.int64))
        self.env[list(args)[-1]] = np.full(self.lanes, n, np.int64)

    def run(self):
        self.block(self.func.regions[0].blocks[0], np.ones(self.lanes, bool))

    def block(self, block, mask):
        for op in block.operations:
            op = op.operation
            name = op.name
            if name in ("gpu.return", "scf.yield"):
                return [self.env[v] for v in op.operands]
            self.op(op, name, mask)
        return []

    def op(self, op, name, mask):
        env = self.env
        ins = [env[v] for v in op.operands]
        rtype = _type(op.results[0].type) if len(op.results) else None
        with np.errstate(all="ignore"):
            if name in ("arith.constant", "llvm.mlir.constant"):
                attr = op.attributes["value"]
                v = ir.FloatAttr(attr).value if isinstance(attr, ir.FloatAttr) else ir.IntegerAttr(attr).value
                out = _cast(np.full(self.lanes, v), rtype[2])
            elif name == "gpu.thread_id":
                out = self.tid % self.threads
            elif name == "gpu.block_id":
                out = self.tid // self.threads
            elif name == "arith.index_cast":
                out = ins[0].astype(np.int64)
            elif name in _BINARY:
                a, b = ins
                if rtype[2] == "bf16":
                    a, b = a.astype(np.float32), b.astype(np.float32)
                fastmath = str(op.attributes["fastmath"]) if "fastmath" in op.attributes else ""
                if name == "arith.divf" and "arcp" in fastmath:  # the reciprocal may be used
                    out = _cast(np.multiply(a, _cast(np.divide(1, b), rtype[2])), rtype[2])
                else:
                    out = _cast(_BINARY[name](a, b), rtype[2])
            elif name in _UNARY:
                out = _cast(_UNARY[name](ins[0]), rtype[2])
            elif name == "math.fma":
                out = _cast(ins[0].astype(np.float64) * ins[1] + ins[2], rtype[2])
            elif name == "math.ipowi":
                base, e = ins[0].copy(), ins[1].copy()
                out = np.ones_like(base)
                for _ in range(64):
                    out = np.where(e & 1, out * base, out)
                    base, e = base * base, e >> 1
            elif name == "arith.cmpf":
                out = _CMPF[ir.IntegerAttr(op.attributes["predicate"]).value](ins[0], ins[1])
            elif name == "arith.cmpi":
                p = ir.IntegerAttr(op.attributes["predicate"]).value
                a, b = (ins[0], ins[1]) if p < 6 else (_unsigned(ins[0]), _unsigned(ins[1]))
                out = _CMPI[p % 6 if p < 6 else p - 4](a, b)
            elif name == "arith.select":
                c = ins[0] if ins[0].ndim == ins[1].ndim else ins[0][..., None]
                out = np.where(c, ins[1], ins[2])
            elif name in ("arith.extf", "arith.truncf", "arith.sitofp", "arith.fptosi", "arith.extsi"):
                out = _cast(ins[0], rtype[2])
            elif name == "arith.uitofp":
                out = _cast(_unsigned(ins[0]) if ins[0].dtype != np.bool_ else ins[0], rtype[2])
            elif name == "arith.extui":
                out = _cast(_unsigned(ins[0]), rtype[2])
            elif name == "arith.trunci":
                out = (ins[0] & 1).astype(bool) if rtype[2] == "i1" else _cast(ins[0], rtype[2])
            elif name == "arith.bitcast":
                out = ins[0].view(rtype[0])
            elif name == "llvm.mlir.undef":
                out = np.zeros((self.lanes, rtype[1]), rtype[0])
            elif name == "llvm.getelementptr":
                _, mem, off = ins[0]
                idx = ins[1] if len(ins) > 1 else np.int64(ir.DenseI32ArrayAttr(op.attributes["rawConstantIndices"])[0])
                out = ("ptr", mem, off + idx)
            elif name == "llvm.load":
                _, mem, off = ins[0]
                width = rtype[1] or 1
                if off.min(initial=0) < 0 or off.max(initial=0) + width > len(mem.array):
                    raise EmulationError(f"load out of bounds: offsets {off.min()}..{off.max() + width - 1} of "
                                         f"{len(mem.array)} elements")
                if rtype[1]:
                    out = np.stack([mem.array[off + k] for k in range(width)], axis=-1)
                else:
                    out = mem.array[off]
                out = out.astype(rtype[0]) if rtype[2] != "i1" else out
            elif name == "llvm.extractelement":
                out = ins[0][:, int(ins[1][0])]
            elif name == "llvm.insertelement":  # operands: vector, value, position
                out = ins[0].copy()
                out[:, int(ins[2][0])] = ins[1]
            elif name == "llvm.store":
                self.store(ins[0], ins[1], mask)
                return
            elif name == "gpu.all_reduce":
                kind = str(op.attributes["op"]).split()[-1].rstrip(">")
                blocks = ins[0].reshape(-1, self.threads)
                x = blocks.astype(np.float64) if blocks.dtype == np.float32 else blocks
                red = _REDUCE[kind](x, axis=1)
                out = np.repeat(red, self.threads).astype(ins[0].dtype)
            elif name == "scf.if":
                self.block(op.regions[0].blocks[0], mask & ins[0])
                return
            elif name == "scf.for":
                lb, ub, step = (int(ins[k][0]) for k in range(3))
                carried = ins[3:]
                body = op.regions[0].blocks[0]
                args = list(body.arguments)
                for i in range(lb, ub, step):
                    env[args[0]] = np.full(self.lanes, i, np.int64)
                    for a, c in zip(args[1:], carried):
                        env[a] = c
                    carried = self.block(body, mask)
                for r, c in zip(op.results, carried):
                    env[r] = c
                return
            else:
                raise EmulationError(f"no emulation of {name}")
        env[op.results[0]] = out

    def store(self, value, ptr, mask):
        _, mem, off = ptr
        width = value.shape[1] if value.ndim == 2 else 1
        lanes = np.nonzero(mask)[0]
        for k in range(width):
            o = off[lanes] + k
            if o.size and (o.min() < 0 or o.max() >= len(mem.array)):
                raise EmulationError(f"store out of bounds: {o.min()}..{o.max()} of {len(mem.array)}")
            v = value[lanes, k] if width > 1 else value[lanes]
            mem.array[o] = v.astype(mem.array.dtype) if mem.array.dtype != np.bool_ else v.astype(bool)
            np.add.at(mem.writes, o, 1)


def emulate_region(text, name, *args):
    """The region's outputs computed by its kernels (region_kernels with the arguments' strides
    and alignment), interpreted on the CPU."""
    strides = [tuple(0 if n == 1 else s for n, s in zip(a.shape, a.stride())) for a in args]
    aligned = [i for i, a in enumerate(args) if a.data_ptr() % 16 == 0]
    kernels = region_kernels(text, name, strides, aligned)
    outs = [torch.empty(s, dtype=d, device="cpu") for s, d in zip(kernels.out_shapes, kernels.out_dtypes)]
    ins = [_Memory(a, False) for a in args]
    out_mems = [_Memory(o, True) for o in outs]
    ctx, module = parse_region(kernels.module)  # (the shared context: a new one costs ~15 ms)
    with ctx:
        gpu_module = next(op for op in module.body.operations if op.operation.name == "gpu.module")
        funcs = {ir.StringAttr(f.attributes["sym_name"]).value: f for f in gpu_module.regions[0].blocks[0].operations}
        for launch in kernels.launches:
            n = launch.count(kernels.out_shapes)
            if n == 0:
                continue
            mems = ins + [out_mems[j] for j in launch.outputs]
            _Kernel(funcs[launch.name], mems, n, launch.grid(n), launch.threads).run()
    for j, m in enumerate(out_mems):
        if m.writes is not None and len(m.writes) and math.prod(outs[j].shape) and not (m.writes == 1).all():
            bad = np.nonzero(m.writes != 1)[0]
            raise EmulationError(f"output {j}: elements written {m.writes[bad[:5]]} times at {bad[:5]}, expected once")
        m.finish()
    return tuple(outs)
