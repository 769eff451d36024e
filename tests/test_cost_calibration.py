"""The linalg cost model measured on this CPU (lowering/cost_calibration.py): probed once, cached
on disk next to the kernel cache, a bad file ignored and rewritten, THUNDER_COST_MODEL=fixed
honored (the rest of the suite runs with it: tests/conftest.py)."""
import json
import os

import pytest
import torch

from thunder.core import machine
from thunder.lowering import cost_calibration as cc
from thunder.lowering import executors

FIXED = executors.get("linalg").fixed_cost


@pytest.fixture(scope="module")
def measured():
    """One quick probe for the module's tests (its values are this machine's, not checked), with
    torch's thread count before and after it."""
    threads = torch.get_num_threads()
    return cc.measure(quick=True), threads, torch.get_num_threads()


@pytest.fixture
def probe(monkeypatch, measured):
    """cc.measure counting its calls, answering the module's one probe."""
    calls = []

    def fake(quick=False):
        calls.append(quick)
        return json.loads(json.dumps(measured[0]))  # (a fresh copy, as a probe makes)

    monkeypatch.setattr(cc, "measure", fake)
    return calls


def test_probe_measures_what_the_model_needs(measured):
    values, threads_before, threads_after = measured
    assert cc._valid(values)
    assert set(values["element_seconds"]) == set(cc._MATH)
    assert set(values["op_element_seconds"]) == {name for name, _, _ in FIXED.op_element_seconds}
    assert values["op_seconds"] > 0 and values["call_seconds"] > 0 and values["bytes_per_second"] > 0
    assert threads_after == threads_before  # (it measures with one thread, then restores torch's count)


def test_probed_once_then_read_from_its_file(tmp_path, probe):
    first = cc.calibrated(FIXED, directory=str(tmp_path), quick=True)
    files = [f for f in os.listdir(tmp_path) if f.startswith("cost-model-")]
    assert len(probe) == 1 and len(files) == 1 and files[0] == f"cost-model-{cc.key()[:32]}.json"
    read = cc.stats["read"]
    second = cc.calibrated(FIXED, directory=str(tmp_path), quick=True)  # (as a second process does)
    assert len(probe) == 1 and cc.stats["read"] == read + 1
    assert second == first and second != FIXED
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]  # (written by rename)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "edited", "foreign key"])
def test_bad_file_is_ignored_and_rewritten(tmp_path, probe, damage):
    cc.calibrated(FIXED, directory=str(tmp_path), quick=True)
    (path,) = [tmp_path / f for f in os.listdir(tmp_path)]
    text = path.read_text()
    data = json.loads(text)
    if damage == "garbage":
        path.write_bytes(b"\x00\xffnot json")
    elif damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "edited":  # a constant changed without its checksum
        data["body"]["measured"]["op_seconds"] = 1.0
        path.write_text(json.dumps(data))
    else:  # another CPU's or torch's file under this name, with a matching checksum
        data["body"]["key"] = "0" * 64
        data["checksum"] = machine.checksum(data["body"])
        path.write_text(json.dumps(data))
    rejected = cc.stats["rejected"]
    again = cc.calibrated(FIXED, directory=str(tmp_path), quick=True)
    assert cc.stats["rejected"] == rejected + 1 and len(probe) == 2
    read = cc.stats["read"]
    assert cc.calibrated(FIXED, directory=str(tmp_path), quick=True) == again  # rewritten: read back
    assert cc.stats["read"] == read + 1 and len(probe) == 2


def test_constants_stay_near_the_fixed_ones(measured):
    wild = {**measured[0], "op_seconds": 10.0, "call_seconds": 1e-15, "bytes_per_second": 1e20,
            "element_seconds": {p: 0.0 for p in measured[0]["element_seconds"]}}
    model = cc.apply(FIXED, wild)
    assert model.op_seconds == FIXED.op_seconds * cc.MAX_FACTOR
    assert model.call_seconds == FIXED.call_seconds / cc.MAX_FACTOR
    assert model.bytes_per_second == FIXED.bytes_per_second * cc.MAX_FACTOR
    for (p, on_torch, in_kernel), (q, fixed_torch, fixed_kernel) in zip(model.element_seconds, FIXED.element_seconds):
        assert p == q and in_kernel == fixed_kernel  # (our kernels' math: the fixed constants)
        assert on_torch == (fixed_torch / cc.MAX_FACTOR if p in wild["element_seconds"] else fixed_torch)


def test_environment_variable_pins_or_calibrates(tmp_path, monkeypatch, probe):
    linalg = executors.get("linalg")
    monkeypatch.setattr(cc, "_CHOSEN", {})
    monkeypatch.setenv("THUNDER_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("THUNDER_COST_MODEL", "fixed")  # (as tests/conftest.py sets it)
    assert linalg.cost is FIXED and not probe and not os.listdir(tmp_path)

    monkeypatch.setattr(cc, "_CHOSEN", {})
    monkeypatch.setenv("THUNDER_COST_MODEL", "calibrated")
    model = linalg.cost
    assert model != FIXED and len(probe) == 1 and len(os.listdir(tmp_path)) == 1
    # one cost model for the process's life: fusion decisions do not change between compiles
    monkeypatch.setenv("THUNDER_COST_MODEL", "fixed")
    assert linalg.cost is model and len(probe) == 1

    monkeypatch.setattr(cc, "_CHOSEN", {})
    monkeypatch.setenv("THUNDER_COST_MODEL", "measured")
    with pytest.raises(ValueError, match="THUNDER_COST_MODEL='measured'; expected one of 'fixed', 'calibrated'"):
        linalg.cost


def test_a_failing_probe_leaves_the_fixed_constants(tmp_path, monkeypatch, caplog):
    def broken(quick=False):
        raise RuntimeError("no kernel here")

    monkeypatch.setattr(cc, "measure", broken)
    monkeypatch.setattr(cc, "_CHOSEN", {})
    monkeypatch.setenv("THUNDER_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("THUNDER_COST_MODEL", "calibrated")
    assert executors.get("linalg").cost is FIXED and not os.listdir(tmp_path)
    assert "measuring the cost model failed (RuntimeError: no kernel here)" in caplog.text
