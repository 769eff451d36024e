"""The program cache on disk: compiled programs (prologue + program, not only kernels) persist, so
a second process running the same script calls them without tracing or running passes.

Where: $THUNDER_PROGRAM_CACHE if set ("", "0", "off", "false", "no", "none": off), else the
"programs" folder of the kernel cache (lowering/linalg/disk_cache.py: off when it is off).
thunder.jit(fn, persist=False) turns it off for one function.

What is persisted, per cache entry: the prologue's source (the checks of the call's inputs and
of everything the trace read from outside them: the guards), the program's source (and the
autograd program's forward source, its unfused backward's MLIR and the backwards compiled so
far: the entry is stored again, its file replaced, when a backward compiles on its first
backward call, runtime/autograd.py), and a portable description (runtime/portable.py)
of every object they refer to: kernels by their region (the kernel cache holds the binaries),
constants by value, functions, classes and modules by their qualified name, closure cells by
their function, the jitted module's submodules by name. An entry holding anything else is not
persisted (it is compiled in every process, as without the cache).

Keys (a folder per key, one file per entry): FORMAT, Python, torch, the MLIR bindings, thunder's
own sources (paths, sizes, modification times), the jitted function (module, qualified name, its code's hash) or
module class (and its forward's code), the jit options, the ambient torch state (grad mode,
default dtype, autocast, ...), CUDA's availability and torch's thread count. On a miss, the
entries under the key are loaded; one is used only when
  - its file checks (magic, the key it was stored for, a sha256 over payload and key),
  - the source files whose code the trace ran (other than torch's and the standard library's:
    the script, its helper modules, other packages) hash as when it was stored,
  - every description resolves here (a function's code hashes the same, a submodule has the
    same class), and
  - its prologue accepts the call (the same checks as in the process that compiled it).
Anything else (a truncated or corrupt file, another version, a changed source file) is ignored
and the call compiles as usual; the new entry is stored beside it. Writes go to a temporary file
renamed into place (os.replace); a key folder keeps its MAX_FILES newest entries."""
import functools
import hashlib
import logging
import os
import pickle
import sys
import time
import types

import torch

from thunder.lowering.linalg import disk_cache
from thunder.ops.impl import ValueChanged
from thunder.runtime import code_objects, guards, tiered
from thunder.runtime.autograd import AutogradProgram
from thunder.runtime.codegen import compile_source
from thunder.runtime.options import CACHE_OPTIONS, CacheEntry
from thunder.runtime.portable import Describer, Resolver, Unportable, code_hash
from thunder.runtime.prologue import MISS, compile_prologue
from thunder.runtime.state import Constant, Item
from thunder.runtime.traces import Trace

FORMAT = "thunder-mlir-program-2"
_MAGIC = b"THPCACHE"
_TRAILER = len(_MAGIC) + 32 + 32  # magic, key, sha256(payload + key)
_OFF = {"", "0", "off", "false", "no", "none"}
MAX_FILES = 16

log = logging.getLogger(__name__)

# counters for tests and benchmarks: entries used, stored, stored again with a backward compiled
# since, rejected (corrupt, stale), not persisted (an object with no portable description)
stats = {"loaded": 0, "stored": 0, "updated": 0, "rejected": 0, "unportable": 0}


def cache_dir():
    env = os.environ.get("THUNDER_PROGRAM_CACHE")
    if env is not None:
        return None if env.strip().lower() in _OFF else os.path.abspath(os.path.expanduser(env))
    kernels = disk_cache.cache_dir()
    return None if kernels is None else os.path.join(kernels, "programs")


def enabled(cd):
    return (cd.persist and cd.cache_option == CACHE_OPTIONS.CONSTANT_VALUES and cd.sharp_edges == "allow"
            and not any(callable(t) for t in cd.transforms) and cache_dir() is not None)


@functools.lru_cache(maxsize=None)
def _sources_hash():
    """sha256 over thunder's own Python sources (thunder/, dialects/, lowering/): each file's
    path, size and modification time (reading them all costs ~0.1 s of a warm start; an edit or
    a checkout changes the time)."""
    roots = {os.path.dirname(os.path.abspath(sys.modules[package].__file__))
             for package in ("thunder", "thunder.dialects", "thunder.lowering")}
    h = hashlib.sha256()
    for root in sorted(roots):
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                st = os.stat(path)
                h.update(f"{os.path.relpath(path, root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def _function_key(cd):
    """What names the jitted callable across processes, or None (no portable name)."""
    fn = cd.fn
    if cd.module is not None:
        cls = type(fn)
        forward = getattr(cls, "forward", None)
        code = getattr(forward, "__code__", None)
        return f"module {cls.__module__}.{cls.__qualname__} {code_hash(code) if code else ''}"
    owner = ""
    if isinstance(fn, types.MethodType):
        owner = f"{type(fn.__self__).__module__}.{type(fn.__self__).__qualname__}"
        fn = fn.__func__
    if not isinstance(fn, types.FunctionType):
        return None
    return f"function {owner} {fn.__module__}.{fn.__qualname__} {fn.__code__.co_filename} {code_hash(fn.__code__)}"


def key(cd):
    """The hex digest of the folder of cd.fn's entries for a call now (ambient state included),
    or None when the function has no portable name."""
    name = _function_key(cd)
    if name is None:
        return None
    options = (str(cd.cache_option), [getattr(e, "name", e) for e in cd.executors], cd.fusion,
               cd.disable_torch_autograd, list(cd.transforms), cd.sharp_edges, cd.strict)
    h = hashlib.sha256()
    for part in (FORMAT, sys.version, torch.__version__, disk_cache._compiler(), _sources_hash(), name,
                 repr(options), repr(sorted(guards.ambient_snapshot().items())),
                 str(torch.cuda.is_available()), str(torch.get_num_threads()),
                 os.environ.get("THUNDER_CPU_MATMUL", "auto"),  # (decides the program's matmuls: ops/onednn.py)
                 os.environ.get("THUNDER_PACKED_WEIGHTS", "auto")):  # (and its bf16 linears: ops/packed_linear.py)
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _file_hash(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


# -- storing
def store(cd, entry, update=False):
    """Persist a compiled entry (best effort: nothing is raised; an entry with no portable
    description is left out, counted in stats["unportable"]). update: the entry was stored
    before and has compiled a backward since (its file is replaced: store_backwards)."""
    if not enabled(cd) or entry.persist is None:
        return
    try:
        # (stored again: under the key of the call that compiled it; a backward call's ambient
        # state differs, e.g. grad mode off)
        k = entry.persist["key"] if update else key(cd)
        if k is None:
            raise Unportable("the jitted callable has no portable name")
        payload = pickle.dumps(_payload(cd, entry), protocol=pickle.HIGHEST_PROTOCOL)
    except Unportable as e:
        stats["unportable"] += 1
        log.debug("thunder: program not persisted: %s", e)
        return
    except Exception as e:  # noqa: BLE001 - pickling a value that cannot be: not persisted
        stats["unportable"] += 1
        log.debug("thunder: program not persisted: %s: %s", type(e).__name__, e)
        return
    folder = os.path.join(cache_dir(), k)
    blob = _MAGIC + payload + bytes.fromhex(k) + hashlib.sha256(payload + bytes.fromhex(k)).digest()
    path = os.path.join(folder, hashlib.sha256(payload).hexdigest()[:40] + ".entry")
    try:
        disk_cache.write_atomically(path, blob)
        before, entry.persist["path"], entry.persist["key"] = entry.persist.get("path"), path, k
        if before is not None and before != path:
            try:
                os.unlink(before)  # (the same entry, stored before its backward compiled)
            except OSError:
                pass
        stats["updated" if update else "stored"] += 1
        _trim(folder)
    except OSError as e:
        log.debug("thunder: program not stored in %s: %s", folder, e)


def store_backwards(cd, entry):
    """After store(): the entry's autograd program compiles each backward on its first backward
    call (runtime/autograd.py); the entry is stored again with it then, so that another process
    loads the backward too rather than compiling it."""
    program = entry.persist["constants"].get("_program") if entry.persist is not None else None
    if program is not None and entry.persist.get("path") is not None:
        program.on_compiled = functools.partial(store, cd, entry, update=True)


def _trim(folder):
    entries = []
    for name in os.listdir(folder):
        if name.endswith(".entry"):
            try:
                entries.append((os.stat(os.path.join(folder, name)).st_mtime_ns, name))
            except OSError:
                pass
    for _, name in sorted(entries, reverse=True)[MAX_FILES:]:
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass


def _payload(cd, entry):
    rec = entry.persist
    # what the entry's first store described is described as it was then (the entry is stored
    # again when a backward compiles, runtime/autograd.py): only its constants, the autograd
    # program among them, are described again
    fixed = rec.get("described")
    if fixed is None:
        fixed = rec["described"] = _fixed_payload(cd, rec, entry)
    d = _describer(cd, rec)
    constants = {k: d.describe(v) for k, v in rec["constants"].items()}
    hashes = dict(fixed["files"])
    for path in sorted(d.files - set(hashes)):
        hashes[path] = _source_hash(path)
    return dict(fixed, files=hashes, constants=constants, code=code_objects.dump(_sources(fixed, rec)))


def _sources(fixed, rec):
    """(source, filename) of the code a loaded entry compiles: its prologue, its computation and
    its autograd program's forward, backward and backward variants."""
    out = [(fixed["prologue"], "<thunder prologue>"), (fixed["source"], "<thunder>")]
    program = rec["constants"].get("_program")
    if isinstance(program, AutogradProgram):  # (its __dict__: reading backward_source would compile it)
        out += [(program.forward_source, "<thunder>"), (program.__dict__.get("backward_source"), "<thunder>")]
        out += [(v.source, "<thunder>") for v in program.__dict__.get("variants", {}).values()]
    return [(s, f) for s, f in out if isinstance(s, str)]


def _describer(cd, rec):
    prologue = rec["prologue"]
    for _, name, value in rec["writes"]:
        if isinstance(value, Constant) and value.fresh:  # (a per-call copy keeping objects by id)
            raise Unportable(f"a write of a new object to attribute {name}")
        if isinstance(name, Item):  # (keyed by objects of this process: an optimizer's parameters)
            raise Unportable("a write of a container's item")
    paths = {id(g.expected): g.expr for g in rec["guards"] if g.check == "is"}
    for g in rec["guards"]:  # (a bound method's object: no_grad() in the closure of its decorator)
        if g.check == "method":
            paths.setdefault(id(g.expected[1]), f"{g.expr}.__self__")
    return Describer(cd, known=list(prologue.consts.values()), paths=paths)


def _fixed_payload(cd, rec, entry):
    """The payload but for its constants (and the files only they refer to)."""
    prologue = rec["prologue"]
    d = _describer(cd, rec)
    consts = {k: d.describe(v) for k, v in prologue.consts.items()}
    description = d.describe(tuple(entry.description))
    # the code the trace ran: its source files must not change; code made at run time (a
    # dataclass's __init__, exec) must be reached by its name and hash the same
    files, made = set(), []
    for fn in rec["interpreted"]:
        path = fn.__code__.co_filename
        if path.startswith("<frozen "):  # (Python's own frozen modules: keyed by its version)
            continue
        if os.path.isabs(path):
            files.add(path)
        else:
            made.append(d.describe(fn))
    files |= d.files
    hashes = {path: _source_hash(path) for path in sorted(files)}
    # (the execution trace's MLIR, with locations: a loaded program's trace reads as MLIR too)
    return dict(format=FORMAT, files=hashes, made=made, prologue=prologue.source, consts=consts, source=rec["source"],
                mlir=rec["trace"].to_mlir(debug_info=True), description=description)


def _source_hash(path):
    h = _file_hash(path)
    if h is None:
        raise Unportable(f"code from {path}, which is no source file to check")
    return h


# -- loading
class Seen:
    """A jitted function's entries from disk in this process: file name -> the entry, or None
    (rejected); so each file is read and resolved once."""

    def __init__(self):
        self.entries = {}


def load(cd, seen, args, kwargs):
    """(entry, result) for an entry on disk whose prologue accepts this call (the result is its
    run's), or None."""
    try:
        k = key(cd)
        folder = os.path.join(cache_dir(), k) if k is not None else None
        names = sorted(os.listdir(folder), key=lambda n: -_mtime(os.path.join(folder, n))) \
            if folder and os.path.isdir(folder) else []
    except Exception as e:  # noqa: BLE001 - no folder, an unreadable source: nothing to load
        log.debug("thunder: program cache not read: %s: %s", type(e).__name__, e)
        names = []
    for name in names:
        if not name.endswith(".entry"):
            continue
        if name not in seen.entries:
            seen.entries[name] = _load_file(cd, os.path.join(folder, name), k)
        entry = seen.entries[name]
        if entry is None:
            continue
        try:
            result = entry.run(args, kwargs)
        except ValueChanged:  # a value the program was specialized on differs
            continue
        if result is not MISS:
            stats["loaded"] += 1
            del seen.entries[name]
            return entry, result
    return None


def _mtime(path):
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _load_file(cd, path, k):
    try:
        with open(path, "rb") as f:
            blob = f.read()
        kb = bytes.fromhex(k)
        payload = blob[len(_MAGIC):-64]
        if (len(blob) < _TRAILER or not blob.startswith(_MAGIC) or blob[-64:-32] != kb
                or hashlib.sha256(payload + kb).digest() != blob[-32:]):
            raise Unportable("a corrupt or foreign file")
        p = pickle.loads(payload)
        if p.get("format") != FORMAT:
            raise Unportable("another format")
        for file, h in p["files"].items():
            if _file_hash(file) != h:
                raise Unportable(f"{file} changed")
        return _entry(cd, p)
    except Exception as e:  # noqa: BLE001 - whatever is wrong with the entry: it is not used
        stats["rejected"] += 1
        log.debug("thunder: program cache entry %s ignored: %s: %s", path, type(e).__name__, e)
        return None


def _entry(cd, p):
    code_objects.load(p.get("code", {}))  # (older entries lack it: their sources compile)
    r = Resolver(cd, p["consts"])
    for d in p["made"]:
        r.resolve(d)  # (raises when the function is gone or its code changed)
    consts = r.namespace.resolve_all()
    constants = {k: r.resolve(v) for k, v in p["constants"].items()}
    computation = compile_source(p["source"], constants=tiered.tier(constants))
    if cd.disable_torch_autograd:
        computation = torch.no_grad()(computation)
    run = compile_prologue(p["prologue"], consts, computation)
    traces = [Trace.from_mlir("torch executor (execution trace, from the program cache)", p["mlir"], "computation",
                              python=p["source"], fn=computation)]
    program = constants.get("_program")
    backward = []
    if program is not None:
        producer = "thunder-autograd (backward, from the program cache)"
        if "backward" in program.__dict__:
            backward.append(Trace(producer, python=program.backward_source, fn_name="backward", fn=program.backward))
        else:  # (stored before its first backward call: compiled on the first here, runtime/autograd.py)
            backward.append(Trace.from_mlir(producer, program.backward_mlir, "backward",
                                            codegen=dict(header=f"produced by: {producer}", grad_free=True)))
        for variant in program.variants.values():
            backward.append(Trace(f"{variant.producer} (from the program cache)", python=variant.source,
                                  fn_name="backward", fn=variant.backward))
        program.backward_traces = backward  # (and each backward's, compiled on its first call)
    prologue = [Trace("prologue", python=p["prologue"], fn_name="entry", fn=run)]
    return CacheEntry(run, traces, prologue, list(r.resolve(p["description"])), backward, run)


def timed_load(cd, cs, seen, args, kwargs):
    """load(), with the compile stats of a call that used an entry from disk."""
    t = time.perf_counter()
    found = load(cd, seen, args, kwargs)
    if found is not None:
        cs.disk_loads += 1
        cs.last_compile_time = time.perf_counter() - t
        cs.last_stage_times = {"program cache": cs.last_compile_time}
    return found
