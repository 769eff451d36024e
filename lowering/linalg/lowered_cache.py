"""Lowered regions on disk, so that a new process does not lower a region to linalg again.

A kernel's disk-cache entry (disk_cache.py) is keyed by its linalg text, so finding it takes the
region's lowering (to_linalg.lower_region: ~10-25 ms a region, on the main thread while the
program's first call runs). lower_region memoizes in memory by its own key (the region's text with
its func renamed, the strides, the options); this keeps the same in the kernel cache directory,
`<sha256>.lowered`: the lowered text and its tiling (rows, tile rows, axes), so that a process whose
kernels are all on disk neither lowers nor tiles. The key hashes FORMAT, lower_region's key, the
source of every module of lowering/linalg (the lowering is defined there: a changed lowering gets
new keys) and the MLIR bindings' version (whose printer writes the types). The file is written and
read as disk_cache.cached_text's (a trailer with the key and a sha256, atomic writes): a corrupt,
truncated or foreign one is lowered again and replaced. The kernel's own key is unchanged: it is
still the hash of the lowered text read back here. No disk cache (THUNDER_KERNEL_CACHE=off): the
region is lowered, as before.
"""
import functools
import hashlib
import json
import os

from thunder.lowering.linalg import disk_cache

FORMAT = "thunder-mlir-lowered-1"
# reads from disk, lowerings (a miss), files stored (tests, benchmarks)
stats = {"disk": 0, "compiled": 0, "stored": 0}


@functools.lru_cache(maxsize=None)
def _source():
    """A hash of the source of every module of lowering/linalg."""
    h = hashlib.sha256()
    folder = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def load_or_lower(key, lower):
    """The fields of lower()'s Lowered (a dict: text, rows, tile_rows, axes) for lower_region's
    memo key `key` (a tuple whose repr names it), read from the kernel cache directory when there,
    else lower()'s, stored. lower() raising (a region the lowering does not take) stores nothing."""
    try:
        parts = None if disk_cache.cache_dir() is None else (FORMAT, _source(), disk_cache.compiler(), repr(key))
    except OSError:  # (the lowering's source unreadable: no entry)
        parts = None
    if parts is None:
        return vars(lower())
    built = []

    def build():
        built.append(None)  # (lower() raising: its exception is the caller's)
        built[0] = vars(lower())
        return json.dumps(built[0])

    try:
        text = disk_cache.cached_text(parts, build, ".lowered", stats)
        return built[0] if built else json.loads(text)
    except ValueError:  # (a verified entry that is not text or JSON: not ours; lowered, not stored)
        if built:
            raise
        return vars(lower())
