"""The machine at hand: which CPU it is, where thunder keeps files across processes, and values
measured on this CPU kept there, so the next process reads them instead of measuring again.

- cache_dir(): $THUNDER_KERNEL_CACHE if set ("", "0", "off", "false", "no", "none": no disk cache),
  else ${XDG_CACHE_HOME:-~/.cache}/thunder-mlir/kernels on Linux (none elsewhere). The kernel
  cache (lowering/linalg/disk_cache.py), the program cache (runtime/persist.py) and the files
  below live there.
- cpu(): the machine, model name and ISA flags (the key of everything compiled for this CPU).
- measured_here(name, parts, measure, valid): a value measured on this CPU (the cost model's
  constants, oneDNN's GEMM time against torch's, packed weights' products), read from
  `<name>-<key>.json` where an intact file of the same key exists, else measured and stored. The
  key hashes the name, `parts` (what else the value depends on: thread count, shapes), the CPU
  (model, family, flags) and torch's version. A corrupt, truncated, edited or foreign file is
  ignored, measured again and replaced; writes go to a temporary file renamed into place, so
  concurrent processes are safe. Without a cache folder every process measures.
"""
import functools
import hashlib
import json
import os
import platform
import sys
import tempfile

import torch

FORMAT = "thunder-mlir-measured-1"
_OFF = {"", "0", "off", "false", "no", "none"}

# counters for tests: values measured, files read, files rejected (all names together)
stats = {"probed": 0, "read": 0, "rejected": 0}


def cache_dir():
    """The cache folder, or None when the disk cache is disabled."""
    env = os.environ.get("THUNDER_KERNEL_CACHE")
    if env is not None:
        return None if env.strip().lower() in _OFF else os.path.abspath(os.path.expanduser(env))
    if not sys.platform.startswith("linux"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "thunder-mlir", "kernels")


def write_atomically(path, data):
    """Writes bytes to path through a temporary file in its folder renamed into place (os.replace
    is atomic: concurrent readers and writers see a whole file or none); raises OSError."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def cpuinfo(names):
    """{name: value} of the first CPU's /proc/cpuinfo fields among names (those it has)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip()
                if k in names and k not in fields:
                    fields[k] = " ".join(v.split())
    except OSError:
        pass
    return fields


@functools.lru_cache(maxsize=None)
def cpu():
    """The machine, the CPU's model name and its ISA flags, as one string."""
    fields = cpuinfo(("model name", "flags", "Features", "CPU part"))
    return "|".join([platform.machine()] + [f"{k}={v}" for k, v in sorted(fields.items())])


@functools.lru_cache(maxsize=None)
def _family():
    """The CPU's family and model numbers (two CPUs of one model name may differ in these)."""
    return " ".join(f"{k}={v}" for k, v in sorted(cpuinfo(("cpu family", "model")).items()))


def key(name, parts):
    """The hex digest naming the file of the value `name` measured with `parts` on this CPU."""
    h = hashlib.sha256()
    for part in (FORMAT, name, *map(str, parts), cpu(), _family(), torch.__version__):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def checksum(body):
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def measured_here(name, parts, measure, valid, directory=None, counts=stats, samples=1, merge=None):
    """measure()'s value (JSON data) on this CPU: read from its file in `directory` (default:
    cache_dir()) where an intact one of this key is there and valid(value) holds, else measured
    and stored (see the module's doc). samples > 1: the first `samples` processes each measure
    and store merge(stored, theirs) (timings: the best of each), later ones read: one probe
    disturbed by another process's load does not decide for good. counts: the counters to add to
    (besides `stats`)."""
    directory = cache_dir() if directory is None else directory
    the_key = key(name, parts)
    where = None if directory is None else os.path.join(directory, f"{name}-{the_key[:32]}.json")
    stored, n = _read(where, the_key, valid, counts) if where is not None else (None, 0)
    if stored is not None and n >= samples:
        return stored
    value = measure()
    _count(counts, "probed")
    if stored is not None:
        value = merge(stored, value)
    if where is not None:
        _write(where, the_key, value, n + 1)
    return value


def best_of(a, b):
    """merge for {name: seconds} timings: the best of each."""
    return {k: min(a[k], b[k]) if k in a else b[k] for k in b}


def _count(counts, what):
    stats[what] += 1
    if counts is not stats:
        counts[what] += 1


def _read(where, expected_key, valid, counts):
    try:
        with open(where) as f:
            data = json.load(f)
        body, check = data["body"], data["checksum"]
        ok = (check == checksum(body) and body["format"] == FORMAT and body["key"] == expected_key
              and type(body["samples"]) is int and valid(body["measured"]))
    except FileNotFoundError:
        return None, 0
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        _count(counts, "rejected")
        return None, 0
    _count(counts, "read")
    return body["measured"], body["samples"]


def _write(where, the_key, value, samples):
    """Atomically; any failure just skips storing."""
    body = {"format": FORMAT, "key": the_key, "measured": value, "samples": samples}
    try:
        write_atomically(where, json.dumps({"body": body, "checksum": checksum(body)}, sort_keys=True).encode())
    except (OSError, TypeError, ValueError):
        pass
