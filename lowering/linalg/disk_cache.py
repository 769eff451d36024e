"""A disk cache of compiled kernels, so that a second Python process does not compile again.

An entry is a shared library: after the ExecutionEngine has JIT-compiled a kernel, its object
code is dumped (`ExecutionEngine.dump_to_object_file`), linked by the system linker
(`ld -shared`, binutils) and stored as `<dir>/<sha256 of the key>.so`. Another process
`dlopen`s it (ctypes) and calls the same packed entry `_mlir__mlir_ciface_<name>` that
`ExecutionEngine.raw_lookup("_mlir_ciface_<name>")` returns: no MLIR parsing, no pass pipeline,
no LLVM codegen. The JIT emits large-code-model objects with absolute relocations, so the
library has text relocations (fine for glibc's loader; a system that forbids them only makes
loads fail, which falls back to compiling). The library is linked with -z defs against
libc/libm/libgcc_s (malloc/free, libm calls, compiler-rt helpers): a kernel calling anything else
is not stored. Linking and storing add ~5-15 ms to a compile of ~50-120 ms; a load takes ~0.1 ms.

The key hashes: the region's linalg text (with the func name and the input strides), the name,
the pass pipeline, the opt level, the MLIR bindings (torch-mlir version, the ExecutionEngine
extension's size and mtime), the CPU (machine, model name, flags: LLVM compiles for the host
CPU's features) and FORMAT below (bump it when the stored format or the calling convention
changes). Each file ends with a trailer: magic, the entry's key and a sha256 over the library and
the key. Loading checks both against the key asked for, so an entry is only ever loaded as the
kernel it was stored for: a corrupt, truncated, foreign, renamed, swapped or unloadable entry is
ignored, compiled again and replaced.

Directory: core/machine.py's cache_dir(): $THUNDER_KERNEL_CACHE if set ("", "0", "off", "false",
"no": no disk cache), else ${XDG_CACHE_HOME:-~/.cache}/thunder-mlir/kernels. Writes go to a temporary file renamed into
place (os.replace), so concurrent processes are safe. Storing is skipped silently when the
directory is not writable, no linker is found or the platform is not Linux; the kernel is then
just compiled as without the cache. Entries are never evicted: delete the directory to clear it.
"""
import contextlib
import ctypes
import functools
import hashlib
import importlib.metadata
import logging
import os
import shutil
import subprocess
import sys
import tempfile

from thunder.core.machine import cache_dir, cpu as _cpu, write_atomically
from thunder.lowering.linalg.pipeline import OPT_LEVEL
from thunder.dialects.mlir import ExecutionEngine
from thunder.lowering.linalg.pipeline import pipeline
from thunder.lowering.linalg.runtime import CompiledFunction

FORMAT = "thunder-mlir-kernel-2"
_MAGIC = b"THKCACHE"
_TRAILER = len(_MAGIC) + 32 + 32  # magic, key, sha256(library + key)

log = logging.getLogger(__name__)

# counters for tests and benchmarks: loads from disk, compiles, stores, entries rejected
stats = {"disk": 0, "compiled": 0, "stored": 0, "rejected": 0}
_store_broken = False  # a verified entry failed to load here: stop storing in this process


@functools.lru_cache(maxsize=None)
def _compiler():
    parts = []
    for dist in ("torch-mlir", "mlir", "mlir-python-bindings"):
        try:
            parts.append(f"{dist}={importlib.metadata.version(dist)}")
            break
        except importlib.metadata.PackageNotFoundError:
            pass
    try:  # a rebuilt wheel with the same version number still gets new keys
        st = os.stat(sys.modules[ExecutionEngine.__module__].__file__)
        parts.append(f"{st.st_size}:{st.st_mtime_ns}")
    except Exception:
        pass
    return " ".join(parts)


def compiler():
    """The MLIR bindings' version (part of every key)."""
    return _compiler()


def key(key_text, name, loops="loops", opt_level=OPT_LEVEL):
    """The hex digest naming the entry of a kernel."""
    h = hashlib.sha256()
    for part in (FORMAT, key_text, name, pipeline(loops), str(opt_level), _compiler(), _cpu()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _linker():
    """(argv prefix, prefix of linker flags) of the system linker, or None."""
    if not sys.platform.startswith("linux"):
        return None
    # -Bsymbolic: the kernel's own symbols bind inside the library (never to a same-named
    # symbol elsewhere in the process); -z notext: text relocations are expected, no warning
    ld = shutil.which("ld")
    if ld:
        return [ld], ""
    for cc in ("cc", "gcc", "clang"):  # the compiler driver passing flags on to its linker
        path = shutil.which(cc)
        if path:
            return [path, "-nostdlib"], "-Wl,"
    return None


def _link_command(link, obj, so, extra):
    argv, wl = link
    flags = ["-Bsymbolic", "-z", "notext"] + extra
    return argv + ["-shared", "-o", so, obj] + [wl + f for f in flags]


# what the kernels may call (malloc/free, libm, compiler-rt helpers), by soname (no -dev
# packages needed); with -z defs any other undefined symbol fails the link, so an entry that
# could not load is never stored. Without these libraries (another layout), link without the
# check: symbols then resolve against the process at load time, as in the JIT.
_LINK_LIBS = (
    ["-z", "defs", "--as-needed", "-l:libm.so.6", "-l:libc.so.6", "-l:libgcc_s.so.1"],
    [],
)


def _trailer(lib, digest):
    """What follows the library in the entry of key digest (hex): the key is inside the checked
    content, so an entry moved under another key's name fails the check."""
    k = bytes.fromhex(digest)
    return _MAGIC + k + hashlib.sha256(lib + k).digest()


def _read_verified(path, digest):
    """The library bytes of a cache file if it is intact and the entry of key digest, else None."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) <= _TRAILER:
        return None
    lib = data[:-_TRAILER]
    return lib if data[-_TRAILER:] == _trailer(lib, digest) else None


def _load(path, digest, name):
    """(library, address of the packed entry) of the cache file of key digest, or None
    (missing, or not that key's intact entry)."""
    global _store_broken
    if not os.path.exists(path):
        return None
    if _read_verified(path, digest) is None:
        log.debug("kernel cache: corrupt entry %s", path)
        stats["rejected"] += 1
        return None
    try:
        lib = ctypes.CDLL(path)  # RTLD_NOW: an unresolvable symbol fails here, not in a call
        addr = ctypes.cast(getattr(lib, "_mlir__mlir_ciface_" + name), ctypes.c_void_p).value
    except (OSError, AttributeError) as e:
        log.debug("kernel cache: cannot load %s: %s", path, e)
        stats["rejected"] += 1
        _store_broken = True  # a verified library that does not load: a loader policy issue
        return None
    return (lib, addr) if addr else None


@contextlib.contextmanager
def scratch(directory, digest):
    """A temporary folder inside directory (same file system: os.replace is atomic), removed after."""
    os.makedirs(directory, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{digest[:16]}-", dir=directory)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _store(directory, digest, engine):
    """Dump, link and atomically write the entry; any failure just skips storing."""
    if not can_link():
        return False
    try:
        with scratch(directory, digest) as tmp:
            obj = os.path.join(tmp, "k.o")
            engine.dump_to_object_file(obj)
            return store_object(directory, digest, obj)
    except Exception as e:  # never let storing break compiling
        log.debug("kernel cache: not stored: %s", e)
        return False


def can_link():
    """Whether object code can become an entry here (Linux, a system linker)."""
    return _linker() is not None and not _store_broken


def store_object(directory, digest, obj):
    """Link the object file obj (a kernel's code, ExecutionEngine.dump_to_object_file) and write
    it atomically as the entry of key digest in directory; whether it was stored (a failure is
    logged at debug level, never raised). The background compiles (background.py) store their
    kernels this way, in a private folder when the cache is off."""
    if not can_link() or not os.path.exists(obj):
        return False
    try:
        with scratch(directory, digest) as tmp:
            so = os.path.join(tmp, "k.so")
            for extra in _LINK_LIBS:
                r = subprocess.run(_link_command(_linker(), obj, so, extra), capture_output=True, timeout=60)
                if r.returncode == 0:
                    break
                if b"cannot find" not in r.stderr:  # e.g. an undefined symbol: do not store
                    break
            if r.returncode != 0:
                log.debug("kernel cache: link failed: %s", r.stderr.decode(errors="replace"))
                return False
            with open(so, "rb") as f:
                lib = f.read()
            with open(so, "ab") as f:
                f.write(_trailer(lib, digest))
            os.replace(so, os.path.join(directory, digest + ".so"))
        stats["stored"] += 1
        return True
    except Exception as e:  # never let storing break compiling
        log.debug("kernel cache: not stored: %s", e)
        return False


def _lookup(key_text, name, loops, opt_level):
    """(cache directory or None, the entry's key or None, (library, address) of the entry or None)."""
    directory = cache_dir()
    if directory is None:
        return None, None, None
    digest = hit = None
    try:
        digest = key(key_text, name, loops, opt_level)
        hit = _load(os.path.join(directory, digest + ".so"), digest, name)
    except Exception as e:  # never let the cache break compiling
        log.debug("kernel cache: lookup failed: %s", e)
    if hit is not None:
        stats["disk"] += 1
    return directory, digest, hit


def cached_function(key_text, name, *, loops="loops", opt_level=OPT_LEVEL):
    """The kernel `name` loaded from the cache (called like a CompiledFunction), or None."""
    _, _, hit = _lookup(key_text, name, loops, opt_level)
    return None if hit is None else _loaded_function_type()(hit[0], hit[1], name)


def load_entry(directory, digest, name):
    """The kernel `name` of the entry of key digest in directory (store_object's), or None."""
    hit = _load(os.path.join(directory, digest + ".so"), digest, name)
    return None if hit is None else _loaded_function_type()(hit[0], hit[1], name)


def load_or_compile(key_text, name, build, *, loops="loops", opt_level=OPT_LEVEL):
    """(keepalive, address, how) for the kernel `name` whose linalg text is key_text.

    address: the packed entry `void f(void **args)` (what ExecutionEngine.raw_lookup(
    "_mlir_ciface_" + name) returns); keepalive owns the code (keep it as long as the address is
    used). how: "disk" (loaded from the cache: build was not called) or "compiled" (keepalive
    is what build() returned, an object with .engine, stored to the cache when possible).
    loops and opt_level must be those build uses: they are part of the key."""
    directory, digest, hit = _lookup(key_text, name, loops, opt_level)
    if hit is not None:
        return hit[0], hit[1], "disk"
    compiled = build()
    addr = compiled.engine.raw_lookup("_mlir_ciface_" + name)
    stats["compiled"] += 1
    if digest is not None:
        _store(directory, digest, compiled.engine)
    return compiled, addr, "compiled"


@functools.lru_cache(maxsize=None)
def _loaded_function_type():
    class LoadedFunction(CompiledFunction):
        """A kernel loaded from the disk cache; called like a CompiledFunction (inherits
        __call__, which only uses self.fn, the packed entry)."""

        def __init__(self, lib, addr, name):
            self.lib, self.name = lib, name  # ctypes never unloads a library
            self.engine = self.module = None
            self.fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr)

    return LoadedFunction


def compiled_function(key_text, name, build, *, loops="loops", opt_level=OPT_LEVEL):
    """(callable on a list of tensors (inputs then outputs), how): build()'s CompiledFunction
    when compiled, a CompiledFunction subclass over the loaded library when from disk."""
    keep, addr, how = load_or_compile(key_text, name, build, loops=loops, opt_level=opt_level)
    if how == "compiled":
        return keep, how
    return _loaded_function_type()(keep, addr, name), how


def cached_text(parts, build, suffix, counts=stats):
    """build()'s text (e.g. PTX), kept in the cache directory under a hash of FORMAT and parts
    (strings that determine it, the target chip among them): read back when present, intact and
    stored under this key, else built and stored. Same trailer (key included) and atomic writes as
    the kernels' libraries. counts: the counters it adds to ("disk", "compiled", "stored")."""
    directory = cache_dir()
    path = None
    if directory is not None:
        h = hashlib.sha256()
        for part in (FORMAT, *parts):
            h.update(part.encode())
            h.update(b"\0")
        digest = h.hexdigest()
        path = os.path.join(directory, digest + suffix)
        data = _read_verified(path, digest)
        if data is not None:
            counts["disk"] += 1
            return data.decode()
    text = build()
    counts["compiled"] += 1
    if path is not None:
        try:
            data = text.encode()
            write_atomically(path, data + _trailer(data, digest))
            counts["stored"] += 1
        except OSError as e:  # never let storing break compiling
            log.debug("kernel cache: not stored: %s", e)
    return text
