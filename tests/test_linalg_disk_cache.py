"""The disk cache of compiled kernels (thunder.lowering.linalg.disk_cache): a second process
loads a kernel instead of compiling it; disabling, corrupt entries, unwritable directories; the
lowered regions kept beside the kernels (lowered_cache.py)."""
import importlib
import json
import os
import subprocess
import sys

import pytest
import torch

import thunder
from thunder.dialects.mlir import ir
from thunder.lowering.linalg import disk_cache, lower_to_llvm, lowered_cache, to_linalg
from thunder.lowering.linalg.runtime import CompiledFunction

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or disk_cache._linker() is None,
                                reason="the disk cache needs Linux and a linker (binutils ld)")


def fn(x, b):
    return torch.softmax(x + b, -1)


# kernels with fn's signature that compute something else (for entries under the wrong key)
OTHERS = [lambda x, b: torch.softmax(x - b, -1), lambda x, b: torch.tanh(x * b)]


def make_inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 100, generator=g), torch.randn(100, generator=g)


def region_text(f=fn):
    """f's region: the func @computation of thunder prims."""
    jf = thunder.jit(f, transforms=["thunder-decompose"], executors=["torch"])
    jf(*make_inputs())
    return str(thunder.last_traces(jf)[-2].to_mlir())


def linalg_text(f=fn):
    """The linalg func @computation of f's region, for contiguous inputs (not tiled)."""
    return to_linalg(region_text(f), "computation", [(100, 1), (1,)], tile=False)


def builder(text, name="computation", calls=None):
    """build() for load_or_compile, as Kernel._variant compiles; counts calls in calls."""
    def build():
        if calls is not None:
            calls.append(1)
        ctx = ir.Context()
        with ctx, ir.Location.unknown():
            module = ir.Module.parse(text)
            lower_to_llvm(module)
        return CompiledFunction(module, name)
    return build


def check(fn_, f=fn):
    x, b = make_inputs()
    out = torch.empty(8, 100)
    fn_([x, b, out])
    torch.testing.assert_close(out, f(x, b))


@pytest.fixture
def text():
    return linalg_text()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "kernels"
    monkeypatch.setenv("THUNDER_KERNEL_CACHE", str(d))
    return d


def entries(d):
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


SECOND_PROCESS = r"""
import json, sys
from thunder.lowering.linalg import disk_cache
sys.path.insert(0, sys.argv[2])
import test_linalg_disk_cache as t

def build():
    raise AssertionError("compiled again")

text = open(sys.argv[1]).read()
f, how = disk_cache.compiled_function(text, "computation", build)
t.check(f)
print(json.dumps({"how": how, "stats": disk_cache.stats}))
"""


def test_second_process_loads_from_disk(text, cache, tmp_path):
    calls = []
    keep, addr, how = disk_cache.load_or_compile(text, "computation", builder(text, calls=calls))
    assert how == "compiled" and calls == [1] and isinstance(keep, CompiledFunction)
    assert addr == keep.engine.raw_lookup("_mlir_ciface_computation")
    check(keep)
    (entry,) = entries(cache)  # one library, no temporary files left
    assert entry == disk_cache.key(text, "computation") + ".so"

    src = tmp_path / "kernel.mlir"
    src.write_text(text)
    env = dict(os.environ, THUNDER_KERNEL_CACHE=str(cache))
    r = subprocess.run([sys.executable, "-c", SECOND_PROCESS, str(src), os.path.dirname(__file__)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["how"] == "disk" and res["stats"]["compiled"] == 0 and res["stats"]["disk"] == 1

    # in this process too, a new lookup loads the library (build is not called)
    keep2, addr2, how2 = disk_cache.load_or_compile(text, "computation", builder(text, calls=calls))
    assert how2 == "disk" and calls == [1] and addr2
    f, how3 = disk_cache.compiled_function(text, "computation", builder(text, calls=calls))
    assert how3 == "disk" and calls == [1]
    check(f)


@pytest.mark.parametrize("value", ["0", "off", "OFF", ""])
def test_disabled_stores_nothing(text, tmp_path, monkeypatch, value):
    monkeypatch.setenv("THUNDER_KERNEL_CACHE", value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the default directory would be here
    assert disk_cache.cache_dir() is None
    calls = []
    for _ in range(2):
        f, how = disk_cache.compiled_function(text, "computation", builder(text, calls=calls))
        assert how == "compiled"
    assert calls == [1, 1]
    check(f)
    assert list(tmp_path.iterdir()) == []


def test_default_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("THUNDER_KERNEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert disk_cache.cache_dir() == os.path.join(str(tmp_path), "thunder-mlir", "kernels")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert disk_cache.cache_dir() == os.path.expanduser("~/.cache/thunder-mlir/kernels")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped byte", "empty"])
def test_corrupt_entry_is_recompiled_and_replaced(text, cache, damage):
    disk_cache.load_or_compile(text, "computation", builder(text))
    (entry,) = cache.iterdir()
    data = entry.read_bytes()
    bad = {"garbage": b"not a library" * 100, "truncated": data[: len(data) // 2],
           "flipped byte": data[:100] + bytes([data[100] ^ 0xFF]) + data[101:], "empty": b""}[damage]
    entry.write_bytes(bad)
    rejected = disk_cache.stats["rejected"]
    calls = []
    f, how = disk_cache.compiled_function(text, "computation", builder(text, calls=calls))
    assert how == "compiled" and calls == [1] and disk_cache.stats["rejected"] == rejected + 1
    check(f)
    assert disk_cache._read_verified(entry, entry.stem) is not None  # replaced by a good entry
    f, how = disk_cache.compiled_function(text, "computation", builder(text, calls=calls))
    assert how == "disk" and calls == [1]
    check(f)


def test_verified_but_unloadable_entry(text, cache, monkeypatch):
    # an entry whose checksum is right but which dlopen refuses (as under a loader policy that
    # forbids text relocations): compiled, and this process stops storing
    monkeypatch.setattr(disk_cache, "_store_broken", False)
    cache.mkdir()
    body = b"\x7fELF but not really"
    digest = disk_cache.key(text, "computation")
    (cache / (digest + ".so")).write_bytes(body + disk_cache._trailer(body, digest))
    f, how = disk_cache.compiled_function(text, "computation", builder(text))
    assert how == "compiled" and disk_cache._store_broken
    check(f)


def test_unwritable_directory_only_disables_storing(text, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the directory should be")
    monkeypatch.setenv("THUNDER_KERNEL_CACHE", str(blocker / "kernels"))
    stored = disk_cache.stats["stored"]
    f, how = disk_cache.compiled_function(text, "computation", builder(text))
    assert how == "compiled" and disk_cache.stats["stored"] == stored
    check(f)


def test_key_covers_options_and_text(text):
    k = disk_cache.key(text, "computation")
    assert k == disk_cache.key(text, "computation")
    assert len({k, disk_cache.key(text, "computation", opt_level=disk_cache.OPT_LEVEL + 1),
                disk_cache.key(text, "computation", loops="affine-vector"),
                disk_cache.key(text + " ", "computation"), disk_cache.key(text, "other")}) == 5


@pytest.mark.parametrize("driver", ["ld", "gcc"])
def test_linkers(text, cache, monkeypatch, driver):
    import shutil
    path = shutil.which(driver)
    if path is None:
        pytest.skip(f"no {driver}")
    link = ([path], "") if driver == "ld" else ([path, "-nostdlib"], "-Wl,")
    monkeypatch.setattr(disk_cache, "_linker", lambda: link)
    disk_cache.load_or_compile(text, "computation", builder(text))
    assert len(entries(cache)) == 1
    f, how = disk_cache.compiled_function(text, "computation", builder(text))
    assert how == "disk"
    check(f)


def _store_entries(cache, functions):
    """Compile and store one entry per function; [(function, linalg text, entry path)]."""
    out = []
    for f in functions:
        t = linalg_text(f)
        disk_cache.load_or_compile(t, "computation", builder(t))
        out.append((f, t, cache / (disk_cache.key(t, "computation") + ".so")))
    assert sorted(p.name for _, _, p in out) == entries(cache)
    return out


def _expect_rebuilt(stored):
    """Each entry is rejected (not loaded as another kernel), compiled again, correct, and
    replaced by its own entry, which the next lookup loads."""
    rejected = disk_cache.stats["rejected"]
    for f, t, path in stored:
        calls = []
        k, how = disk_cache.compiled_function(t, "computation", builder(t, calls=calls))
        assert how == "compiled" and calls == [1]
        check(k, f)
        assert disk_cache._read_verified(path, path.stem) is not None
        k, how = disk_cache.compiled_function(t, "computation", builder(t, calls=calls))
        assert how == "disk" and calls == [1]
        check(k, f)
    assert disk_cache.stats["rejected"] == rejected + len(stored)


@pytest.mark.parametrize("move", ["swap", "rotate"])
def test_entries_under_another_key_are_rebuilt(cache, move):
    # each entry passes an integrity check on its own; only the key inside the checked content
    # tells that a file holds another kernel (loaded, it computed the other kernel silently, or
    # crashed on another signature)
    stored = _store_entries(cache, [fn] + (OTHERS[:1] if move == "swap" else OTHERS))
    data = [p.read_bytes() for _, _, p in stored]
    for (_, _, path), d in zip(stored, data[1:] + data[:1]):
        path.write_bytes(d)
    _expect_rebuilt(stored)


@pytest.mark.parametrize("damage", ["foreign library", "old format", "cut trailer"])
def test_entries_without_their_key_are_rebuilt(cache, damage):
    import hashlib
    (stored,) = _store_entries(cache, [fn])
    path = stored[2]
    data = path.read_bytes()
    lib = data[:-disk_cache._TRAILER]
    bad = {"foreign library": lib,  # a valid shared library, no trailer
           "old format": lib + disk_cache._MAGIC + hashlib.sha256(lib).digest(),  # no key
           "cut trailer": data[:-1]}[damage]
    path.write_bytes(bad)
    _expect_rebuilt([stored])


def test_text_entries_are_bound_to_their_key(cache):
    # cached_text (the CUDA executor's PTX) shares the kernels' trailer: an entry moved under
    # another key is rebuilt, not returned
    calls = []

    def build(text):
        return lambda: calls.append(text) or text

    a = disk_cache.cached_text(("a",), build("text of a"), ".txt")
    b = disk_cache.cached_text(("b",), build("text of b"), ".txt")
    assert (a, b) == ("text of a", "text of b") and len(entries(cache)) == 2
    assert disk_cache.cached_text(("a",), build("again"), ".txt") == "text of a"  # from disk
    pa, pb = sorted(cache.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    data_a, data_b = pa.read_bytes(), pb.read_bytes()
    pa.write_bytes(data_b)
    pb.write_bytes(data_a)
    assert disk_cache.cached_text(("a",), build("rebuilt a"), ".txt") == "rebuilt a"
    assert disk_cache.cached_text(("b",), build("rebuilt b"), ".txt") == "rebuilt b"
    assert calls == ["text of a", "text of b", "rebuilt a", "rebuilt b"]


TO_LINALG = importlib.import_module("thunder.lowering.linalg.to_linalg")  # (the package's to_linalg is the function)


def fields(lowered):
    return lowered.text, lowered.rows, lowered.tile_rows, lowered.axes and list(lowered.axes)


def test_lowered_region_is_read_back_not_lowered_again(cache, monkeypatch):
    region = region_text()
    monkeypatch.setattr(TO_LINALG, "_LOWERED", {})
    before = dict(lowered_cache.stats)
    tiled = TO_LINALG.lower_region(region, "computation", ((100, 1), (0,)), out_name="kernel")
    untiled = TO_LINALG.lower_region(region, "computation", ((100, 1), (0,)), tile=False, out_name="kernel")
    assert tiled.rows == 8 and untiled.rows is None  # (a different lowering: a different entry)
    assert lowered_cache.stats["compiled"] == before["compiled"] + 2
    assert lowered_cache.stats["stored"] == before["stored"] + 2
    assert len([e for e in entries(cache) if e.endswith(".lowered")]) == 2

    # a new process (no lowering in memory) reads both back: the same text and tiling, no lowering
    def refuse(*args):
        raise AssertionError("lowered again")

    monkeypatch.setattr(TO_LINALG, "_LOWERED", {})
    monkeypatch.setattr(TO_LINALG, "_lower_region", refuse)
    renamed = region.replace("@computation(", "@fusion_7(")  # (another layer's region: the same entry)
    assert fields(TO_LINALG.lower_region(renamed, "fusion_7", ((100, 1), (0,)), out_name="kernel")) == fields(tiled)
    assert fields(TO_LINALG.lower_region(region, "computation", ((100, 1), (0,)), tile=False,
                                         out_name="kernel")) == fields(untiled)
    assert lowered_cache.stats["disk"] == before["disk"] + 2
    # other strides, or a changed lowering (its source), are lowered, not read
    with pytest.raises(AssertionError, match="lowered again"):
        TO_LINALG.lower_region(region, "computation", ((1, 8), (0,)), out_name="kernel")
    monkeypatch.setattr(lowered_cache, "_source", lambda: "another lowering")
    monkeypatch.setattr(TO_LINALG, "_LOWERED", {})
    with pytest.raises(AssertionError, match="lowered again"):
        TO_LINALG.lower_region(region, "computation", ((100, 1), (0,)), tile=False, out_name="kernel")


@pytest.mark.parametrize("damage", ["truncated", "flipped byte"])
def test_corrupt_lowered_region_is_lowered_again_and_replaced(cache, monkeypatch, damage):
    region = region_text()
    monkeypatch.setattr(TO_LINALG, "_LOWERED", {})
    good = fields(TO_LINALG.lower_region(region, "computation", ((100, 1), (0,)), out_name="kernel"))
    (entry,) = [cache / e for e in entries(cache) if e.endswith(".lowered")]
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2] if damage == "truncated" else data[:50] + bytes([data[50] ^ 1]) + data[51:])
    monkeypatch.setattr(TO_LINALG, "_LOWERED", {})
    compiled = lowered_cache.stats["compiled"]
    assert fields(TO_LINALG.lower_region(region, "computation", ((100, 1), (0,)), out_name="kernel")) == good
    assert lowered_cache.stats["compiled"] == compiled + 1
    assert disk_cache._read_verified(entry, entry.stem) is not None  # replaced by a good entry


def test_kernel_from_a_lowered_region_read_back_equals_eager(cache, monkeypatch):
    from thunder.lowering.linalg import Kernel
    region = region_text()
    x, b = make_inputs()
    monkeypatch.setattr(TO_LINALG, "_LOWERED", {})
    Kernel(region, "computation")(x, b)  # (stores the lowered region and the kernel)
    monkeypatch.setattr(TO_LINALG, "_LOWERED", {})
    disk = lowered_cache.stats["disk"]
    (out,) = Kernel(region, "computation")(x, b)
    assert lowered_cache.stats["disk"] == disk + 1
    torch.testing.assert_close(out, fn(x, b))
