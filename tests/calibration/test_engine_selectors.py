"""Which devices an engine's fitted factors apply to (optimizer.calibration.fit.engine_selectors).

The shipped data measure vLLM on MI300X only and TensorRT-LLM on NVIDIA only, so the vLLM rows cannot
tell vLLM from AMD's hardware and ROCm kernels: their factors go to every vendor but NVIDIA. Once the
same engine is measured on an NVIDIA device too, the factors are the engine's.
"""

from __future__ import annotations

from dataclasses import replace

from catalog import load_catalog
from optimizer.calibration.fit import class_overrides, engine_selectors
from optimizer.calibration.measurements import load_measurements
from optimizer.calibration.predict import offline_skip_reason
from optimizer.calibration.shipped import SHIPPED_MEASUREMENT_FILES, shipped_measurements
from optimizer.models.params import FactorOverride

CAT = load_catalog()


def _rows():
    return [m for name in SHIPPED_MEASUREMENT_FILES for m in load_measurements(shipped_measurements(name), CAT)]


def test_vllm_measured_on_amd_only_selects_every_vendor_but_nvidia():
    rows = _rows()
    assert {m.engine for m in rows if m.device_key == "mi300x"} == {"vllm"}
    assert engine_selectors(rows, CAT, "vllm") == {"exclude_vendors": ["nvidia"]}


def test_vllm_measured_on_nvidia_too_selects_the_engine():
    rows = _rows()
    h100 = next(m for m in rows if m.device_key == "h100-sxm")
    assert engine_selectors([*rows, replace(h100, engine="vllm")], CAT, "vllm") == {"engine": "vllm"}


def test_exclude_vendors_matches_every_other_vendor():
    o = FactorOverride(exclude_vendors=["nvidia"], compute_efficiency=0.2)
    assert not o.matches(CAT.device("h100-sxm"), "vllm")
    assert o.matches(CAT.device("mi300x"), "vllm") and o.matches(CAT.device("mi300x"), "sglang")
    assert o.matches(CAT.device("gaudi3"), "vllm")
    assert o.selector == "exclude_vendors=nvidia"


def test_a_row_without_an_engine_runs_its_devices_default():
    """MI300X rows whose engine is left blank run vLLM (``default_engine``, as the predictor has it), so the
    fit still gives them the vLLM override; counted as TensorRT-LLM they got none (the fit before review9)."""
    usable = [m for m in _rows() if offline_skip_reason(m) is None]
    blank = [replace(m, engine=None) if m.device_key == "mi300x" else m for m in usable]
    devices = [CAT.devices[k] for k in sorted({m.device_key for m in usable})]

    def selectors(rows):
        return [o.selector for o in class_overrides(rows, CAT, devices, True, True, a2a_start_us=8.0)[0]]

    assert "exclude_vendors=nvidia" in selectors(usable)
    assert selectors(blank) == selectors(usable)
