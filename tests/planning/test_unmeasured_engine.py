"""A deployment served by an engine its device's generation was never measured with (vLLM on H100: the shipped
calibration has Hopper under TensorRT-LLM only) is rated datasheet-only and warned about, with the host times it
assumes next to those the fit gave the engine where it was measured (docs/model-accuracy.md, "Finite benchmark
runs": a refit without an engine's rows lands 14-41 % off)."""

from __future__ import annotations

import pytest

from catalog import load_catalog
from optimizer.calibration.bands import coverage
from optimizer.calibration.measurements import load_measurements
from optimizer.calibration.shipped import SHIPPED_MEASUREMENT_FILES, shipped_measurements
from optimizer.models.fidelity import engine_unmeasured
from optimizer.models.params import load_params
from optimizer.optimize import optimize_plan
from workloads import parse_plan, resolve_catalog


def _plan(engine: str):
    plan = parse_plan({"name": "e", "allowed_devices": ["h100-sxm"], "workloads": [
        {"name": "chat", "model": "llama-3.1-8b", "qps": 20, "prompt_tokens": {"mean": 1024, "p99": 4096},
         "output_tokens": {"mean": 256, "p99": 1024}, "slo": {"ttft_p99_ms": 1000}, "precisions": ["fp8"],
         "engine": engine}]}, "e")
    return plan, resolve_catalog(plan, load_catalog(), "e")


def test_the_shipped_coverage_records_each_generation_with_its_engine():
    """The shipped file's generation/engine pairs are what ``bands.coverage`` gives on its own rows."""
    cat = load_catalog()
    rows = [m for name in SHIPPED_MEASUREMENT_FILES for m in load_measurements(shipped_measurements(name), cat)]
    assert coverage(rows, cat).generation_engines == load_params(None).coverage.generation_engines == [
        "ada/trtllm", "ampere/trtllm", "blackwell/trtllm", "cdna3/vllm", "hopper/trtllm"]


def test_vllm_on_h100_is_warned_with_the_host_times_it_assumes():
    """0.82 ms per step and 3.8 µs per sequence are the NVIDIA (TensorRT-LLM) fit's; 2.57 ms / 4.0 µs the vLLM
    override's fitted on MI300X (``factors_for``); the warning names both, the class band and the fixes."""
    params = load_params(None)
    cat = load_catalog()
    here, there = params.factors_for(cat.devices["h100-sxm"], "vllm"), params.factors_for(cat.devices["mi300x"], "vllm")
    assert (round(here.step_overhead_ms, 2), round(there.step_overhead_ms, 2)) == (0.82, 2.57)
    plan, cat = _plan("vllm")
    r = optimize_plan(plan, cat, compare_single_device=False, verify=False, sensitivity=False)
    (d,) = r.deployments
    assert d.fidelity.class_ == "datasheet-only"
    notes = [n for n in r.diagnostics if n.code == "engine_unmeasured"]
    assert len(notes) == 1 and notes[0].level == "warning"
    text = notes[0].message
    for part in (f"{d.key} (chat)", "vllm was never measured on hopper (its rows ran trtllm)",
                 "0.82 ms per step, 3.8 µs per running sequence",
                 "where vllm was measured (mi300x) the fit gives it 2.57 ms per step and 4.0 µs per running sequence",
                 f"×{d.fidelity.low_factor:.2f}–{d.fidelity.high_factor:.2f}", "--confidence 0.9", "gpuplan calibrate"):
        assert part in text, part
    assert any(x["code"] == "engine_unmeasured" for x in r.to_json()["diagnostics"])


def test_the_measured_engine_is_not_warned():
    plan, cat = _plan("trtllm")
    r = optimize_plan(plan, cat, compare_single_device=False, verify=False, sensitivity=False)
    assert r.deployments[0].fidelity.class_ == "measured"
    assert not [n for n in r.diagnostics if n.code == "engine_unmeasured"]


@pytest.mark.parametrize(("device", "engine", "unmeasured"), [
    ("h100-sxm", "vllm", True), ("h20", "sglang", True), ("mi300x", "sglang", True),
    ("h100-sxm", "trtllm", False), ("h20", "trtllm", False), ("mi300x", "vllm", False),
    ("mi355x", "vllm", False),  # CDNA 4 was never measured at all: datasheet-only for that reason, not this one
])
def test_engine_unmeasured_on_the_shipped_coverage(device, engine, unmeasured):
    cat = load_catalog()
    assert engine_unmeasured(cat.devices[device], engine, load_params(None)) is unmeasured
