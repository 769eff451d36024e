"""One kernel for every size of a fused region whose sizes change (a kernel family of a program
for all sizes: runtime/symbolic.py).

The family writes its region at three made-up values of its symbols at which every changing
size differs from the others and from the text's fixed numbers (the lowering tells sizes apart
by value). Each is lowered with its changing sizes dynamic (to_linalg.lower_region's `dynamic`:
the kernel reads them from its arguments); where the three lowered texts are the same, that
code serves every size: the lowering wrote none of those sizes into it and made no choice by
them that differs between the three (the program for all sizes is checked the same way:
runtime/symbolic.py). A call then allocates the outputs at the shapes the
arguments' sizes give (sizes that only the outputs have, from the program's symbols: size_of)
and runs the code; nothing is lowered or compiled per size. (The family makes the region's
scalar constants that change with the sizes, 1/sqrt(T), arguments of its func first.) Where the
texts differ or the lowering needs a size as a number (a slice from `T // 4` to `T // 2`), `call`
answers None and the family compiles per size, as before.
"""
import re
import threading

import torch

from thunder.core import fresh_memory
from thunder.dialects.mlir import LOCK
from thunder.lowering.linalg import background, engine, Kernel, row_ranges
from thunder.lowering.linalg.runtime import CallFrame
from thunder.lowering.linalg.scalar import UnsupportedOp
from thunder.lowering.linalg.tiling import row_major_strides
from thunder.lowering.linalg.to_linalg import lower_region

_FRAMES_MAX = 64  # call frames kept per kernel and thread (a decode loop makes one per length)
# the number literals of MLIR text (hex, float, int), as re.split pieces
MLIR_NUMBER = re.compile(r"(0x[0-9A-Fa-f]+|\d+\.\d*(?:[eE][+-]?\d+)?|\d+)")


def changing_sizes(texts):
    """Per text, the integer literals that differ between the texts (which have the same
    tokens but for numbers)."""
    splits = [MLIR_NUMBER.split(t) for t in texts]
    if len({len(s) for s in splits}) != 1:
        raise ValueError("the texts differ in more than numbers")
    found = [set() for _ in texts]
    for parts in zip(*splits):
        if len(set(parts)) > 1 and all(p.isdigit() for p in parts):
            for sizes, p in zip(found, parts):
                sizes.add(int(p))
    return [tuple(sorted(s)) for s in found]


def primes_from(n):
    """The primes from n on (made-up sizes: a product of a few never equals another's)."""
    while True:
        if n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)):
            yield n
        n += 1


def made_up_values(nth, odd_only=False):
    """Made-up values of the symbols, endless, for the nth (0, 1, 2) of the three texts a kernel
    for every size is lowered at: primes from 101 that are 1 (first text) or 11 (second) mod 12,
    and twice primes in the third, so that the three share no residue mod 2, 3, 4 or 6 (at
    sizes that all share one, the lowering may derive T - 1 as (T // 2) * 2, the same code at
    all three: at an even T that kernel computed wrong and wrote out of bounds). odd_only: the
    third's are primes 5 mod 12 (the region refuses even values: its decisions hold at odd
    ones only, where such a size is always right)."""
    if nth == 2 and not odd_only:
        return (2 * p for p in primes_from(101))
    return (p for p in primes_from(101) if p % 12 == (1, 11, 5)[nth])


COMPILING = object()  # call's answer while the code for all sizes compiles in the background


class AnySizeKernel:
    def __init__(self, texts, name="fusion", size_of=None, in_background=False):
        """texts: the region (func @name) at three sizes, the same text but for numbers;
        size_of(n, symbols): the size at the call's symbols that is n in texts[0] (for sizes
        that only the outputs have: a table of positions computed from an iota), or None.
        in_background: the code compiles in the compile worker (background.py), `call` answering
        COMPILING until it is ready; else in the call that needs it."""
        self.texts, self.sizes, self.size_of = texts, changing_sizes(texts), size_of
        self.kernel = Kernel(texts[0], name, sizes=self.sizes[0])  # (the signature, strides keys)
        self.name, self.scalars = self.kernel.name, self.kernel.scalars
        self.loops, self.opt_level = self.kernel.loops, self.kernel.opt_level
        self.in_background = in_background and background.available()
        self.variants = {}  # strides key -> (compiled function, Lowered)
        self.lowerings = {}  # strides key -> the Lowered code for all sizes, or None: none
        self.jobs = {}  # strides key -> its background job
        self.frames = {}  # thread id -> {(shapes, strides, threads): CallFrame}

    def _key(self, strides):  # (background.submit's view of a kernel)
        return self.kernel._key(strides)

    def engine_key(self, key):
        lowered = self._lowered(key)
        return lowered, (lowered.text, self.loops, self.opt_level)

    def _variant(self, strides):
        """(compiled function, Lowered) for inputs of these strides; None where no code serves
        every size; COMPILING."""
        key = self._key(strides)
        v = self.variants.get(key)
        if v is not None:
            return v
        with LOCK:
            v = self.variants.get(key)
            if v is not None:
                return v
            lowered = self._lowered(key)
            if lowered is None:
                return None
            if self.in_background:
                job = self.jobs.get(key)
                if job is None:
                    job = self.jobs[key] = background.submit(self, strides)  # (None: its code is here now)
                if key in self.variants:
                    return self.variants[key]
                if job is not None:
                    if not job.failed:
                        return COMPILING
                    self.lowerings[key] = None
                    return None
            try:
                v = self.variants[key] = (engine(lowered, self.name, self.loops, self.opt_level), lowered)
            except Exception:  # noqa: BLE001 - the code for all sizes did not compile: per size then
                self.lowerings[key] = None
            return v

    def _lowered(self, key):
        if key not in self.lowerings:
            self.lowerings[key] = self._lower(key)
        return self.lowerings[key]

    def _lower(self, key):
        try:
            lowered = [lower_region(t, self.name, key, out_name="kernel", prefer=s, dynamic=s)
                       for t, s in zip(self.texts, self.sizes)]
        except UnsupportedOp:
            return None
        except Exception:  # noqa: BLE001 - a lowering that meets a size or runtime number where it
            return None  # needs a literal: per size then (whose text has the literals)
        first = lowered[0]
        if len({low.text for low in lowered}) != 1 or first.out_shapes is None:
            return None
        inputs = len(self.kernel.inputs)
        needed = {s for shape in first.out_shapes for s in shape if isinstance(s, str)}
        if isinstance(first.rows_size, str):
            needed.add(first.rows_size)
        if self.size_of is None and any(first.sizes_at[s][0] >= inputs for s in needed):  # (outputs' only)
            return None
        return first

    def call(self, args, symbols=None):
        """The region's outputs for these arguments (symbols: the program's symbols at this call,
        for size_of), or None where no code serves every size, or COMPILING."""
        kernel = self.kernel
        if len(args) != len(kernel.inputs):
            raise TypeError(f"{self.name}: expected {len(kernel.inputs)} arguments, got {len(args)}")
        strides = kernel.strides(args)
        v = self._variant(strides)
        if v is None or v is COMPILING:
            return v
        fn, lowered = v
        sizes = {name: args[i].shape[d] if i < len(args) else self.size_of(lowered.size_values[name], symbols)
                 for name, (i, d) in lowered.sizes_at.items()}
        out_shapes = tuple(tuple(sizes[s] if isinstance(s, str) else s for s in shape) for shape in lowered.out_shapes)
        outs = tuple(fresh_memory.empty(shape, dtype) for shape, (_, dtype) in zip(out_shapes, kernel.outputs))
        frame = self._frame(fn, lowered, args, outs, strides, sizes)
        frame(args + outs)
        return outs

    def _frame(self, fn, lowered, args, outs, strides, sizes):
        frames = self.frames.get(threading.get_ident())
        if frames is None:
            frames = self.frames[threading.get_ident()] = {}
        shapes = tuple(() if i in self.scalars else tuple(a.shape) for i, a in enumerate(args))
        out_shapes = tuple(tuple(o.shape) for o in outs)  # (not always the inputs' sizes: an iota's)
        key = (shapes, out_shapes, strides, torch.get_num_threads())
        frame = frames.get(key)
        if frame is None:
            if len(frames) >= _FRAMES_MAX:
                frames.clear()
            ranges, threads = None, 1
            if lowered.rows is not None:
                rows = sizes[lowered.rows_size] if isinstance(lowered.rows_size, str) else lowered.rows_size
                nbytes = sum(t.numel() * t.element_size() for t in (*args, *outs) if isinstance(t, torch.Tensor))
                ranges, threads = row_ranges(rows, 1, nbytes)  # (tiles of the kernel's size at run time)
            frame = frames[key] = CallFrame(fn, list(shapes) + list(out_shapes),
                                            list(strides) + [tuple(row_major_strides(s)) for s in out_shapes],
                                            ranges, self.scalars, threads)
        return frame
