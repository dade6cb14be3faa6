"""The ``measured_configuration_off`` warning (``optimizer.planning.known_limits``) and the fit record it reads
(``FitRecord.by_configuration``, ``optimizer.calibration.fit.by_configuration``).

The shipped fit misses a few configurations of its own rows by more than their band (docs/model-accuracy.md,
"Configurations the model misses"): Llama-4-Maverick FP8 DEP8 on H200 (5 rows of the TensorRT-LLM perf overview)
runs at 0.6591× the prediction and DeepSeek-R1 FP4 DEP4 on B200 (9 rows) at 1.3317×, while H200's band (class a,
TensorRT-LLM measured with ep) is ×0.7946–1.2237. So a plan serving Maverick that way counts on
1/0.6591 − 1 = 51.7 % → "52 %" too much capacity, and one serving DeepSeek-R1 that way on B200 on
1 − 1/1.3317 = 24.9 % → "25 %" too little.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from catalog import load_catalog
from catalog.errors import GpuplanError
from optimizer.calibration.fit import by_configuration
from optimizer.calibration.measurements import load_measurements
from optimizer.calibration.predict import offline_skip_reason
from optimizer.calibration.shipped import shipped_measurements
from optimizer.models.estimate import estimate_config
from optimizer.models.fidelity import fidelity_of
from optimizer.models.params import (
    MIN_CONFIGURATION_ROWS,
    ConfigurationRecord,
    configuration_key,
    load_params,
)
from optimizer.optimize import optimize_plan
from optimizer.planning.known_limits import measured_configuration_notes
from optimizer.results.plan_result import Deployment
from workloads import parse_plan, resolve_catalog


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _plan(model: str):
    return parse_plan({"name": "p", "workloads": [{
        "name": "chat", "model": model, "qps": 10, "prompt_tokens": {"mean": 1000, "p99": 2000},
        "output_tokens": {"mean": 1000, "p99": 2000}, "slo": {"tpot_p99_ms": 100}}]}, "test")


def _deployment(cat, device: str, precision: str, tp: int, ep: int) -> Deployment:
    fid = fidelity_of(cat.devices[device], load_params(None), cat.devices, engine="trtllm", ep=ep)
    return Deployment("chat", f"{device.replace('-', '_')}__{precision}__tp{tp}__pp1__ep{ep}", device, precision,
                      tp, 1, 2, 10.0, 12.0, tpot_p99_ms=60.0, fidelity=fid, ep=ep, engine="trtllm")


def test_a_configuration_the_model_overrates_is_warned(cat):
    d = _deployment(cat, "h200-sxm", "fp8", 1, 8)
    assert (d.fidelity.low_factor, d.fidelity.high_factor) == pytest.approx((0.79455, 1.22367), abs=5e-5)
    notes = measured_configuration_notes(_plan("llama-4-maverick"), [d, d], load_params(None), cat)
    assert [n.code for n in notes] == ["measured_configuration_off"]  # one per configuration, naming each deployment
    assert notes[0].message.startswith(f"{d.key} (chat), {d.key} (chat): ")
    assert notes[0].level == "warning"
    for part in ("5 measured offline rows", "h200-sxm/trtllm/llama-4-maverick/fp8/tp1/ep8", "0.66×", "×0.79–1.22",
                 "52 % too high", "only to ×0.79", "target_utilization 0.66", "gpuplan calibrate"):
        assert part in notes[0].message, part


def test_a_configuration_the_model_underrates_is_warned_the_other_way(cat):
    notes = measured_configuration_notes(_plan("deepseek-r1"), [_deployment(cat, "b200", "fp4", 1, 4)],
                                         load_params(None), cat)
    assert len(notes) == 1
    assert "1.33×" in notes[0].message and "25 % understated" in notes[0].message


def test_configurations_inside_their_band_or_unmeasured_are_not(cat):
    params = load_params(None)
    # Maverick FP8 on H200 by tensor parallelism was never measured (the rows are DEP8): no record, no note
    assert measured_configuration_notes(_plan("llama-4-maverick"), [_deployment(cat, "h200-sxm", "fp8", 8, 1)],
                                        params, cat) == []
    # Llama-3.1-70B FP8 tp2 on H200 is measured and inside its band
    rec = params.fit.by_configuration[configuration_key("h200-sxm", "trtllm", "llama-3.1-70b", "fp8", 2, 1)]
    assert rec.n >= MIN_CONFIGURATION_ROWS and 0.7946 <= rec.median_measured_over_predicted <= 1.2237
    assert measured_configuration_notes(_plan("llama-3.1-70b"), [_deployment(cat, "h200-sxm", "fp8", 2, 1)],
                                        params, cat) == []
    # parameters without a fit record (a hand-written --params file) warn about nothing
    assert measured_configuration_notes(_plan("llama-4-maverick"), [_deployment(cat, "h200-sxm", "fp8", 1, 8)],
                                        params.model_copy(update={"fit": None}), cat) == []


def test_the_record_is_the_median_of_measured_over_predicted_per_configuration(cat):
    """Three rows of one configuration predicted at half, a third and a quarter of their measured throughput:
    ratios 2, 3, 4, median 3; a row without a prediction (NaN) is left out."""
    rows = [m for m in load_measurements(shipped_measurements("measurements-2026.csv"), cat)
            if offline_skip_reason(m) is None and m.device_key == "h200-sxm" and m.model_key == "llama-4-maverick"]
    assert len(rows) >= 4
    measured = np.array([m.throughput_tok_s for m in rows[:4]], dtype=float)
    got = by_configuration(rows[:4], cat, np.array([*(measured[:3] / [2.0, 3.0, 4.0]), np.nan]))
    key = configuration_key("h200-sxm", "trtllm", "llama-4-maverick", "fp8", rows[0].tp, rows[0].ep)
    assert got == {key: ConfigurationRecord(n=3, median_measured_over_predicted=3.0)}


def test_the_shipped_record_covers_every_fitted_row():
    fit = load_params(None).fit
    assert sum(r.n for r in fit.by_configuration.values()) == fit.rows_used == 635


def test_estimate_reports_the_configurations_own_rows(cat):
    """`gpuplan estimate` of Maverick FP8 DEP8 on H200: the record (5 rows, 0.6591) and, as it is outside the
    band, a fidelity basis that says so."""
    out = estimate_config(cat.models["llama-4-maverick"], cat.devices["h200-sxm"], cat.precisions["fp8"], 1, 1,
                          1000, 1000, load_params(None), devices=cat.devices, max_throughput=True, ep=8)
    assert out["measured_configuration"] == {"key": "h200-sxm/trtllm/llama-4-maverick/fp8/tp1/ep8", "n": 5,
                                             "median_measured_over_predicted": 0.6591}
    assert "5 measured offline rows of this configuration ran at 0.66× the prediction" in out["fidelity"]["basis"]


def test_a_plan_on_such_a_configuration_carries_the_warning(cat):
    """DeepSeek-R1 FP4 on B200 only: the cheapest replica is the DEP4 one the 9 rows measured (1.33×)."""
    plan = parse_plan({"name": "p", "allowed_devices": ["b200"], "workloads": [{
        "name": "reasoning", "model": "deepseek-r1", "qps": 5, "precisions": ["fp4"],
        "prompt_tokens": {"mean": 1000, "p99": 3000}, "output_tokens": {"mean": 1000, "p99": 2000},
        "slo": {"ttft_p99_ms": 5000, "tpot_p99_ms": 150}}]}, "test")
    r = optimize_plan(plan, resolve_catalog(plan, cat, "test"), compare_single_device=False, verify=False)
    assert [(d.key, d.engine) for d in r.deployments] == [("b200__fp4__tp1__pp1__ep4", "trtllm")]
    notes = [n for n in r.diagnostics if n.code == "measured_configuration_off"]
    assert len(notes) == 1 and "b200/trtllm/deepseek-r1/fp4/tp1/ep4" in notes[0].message


def test_a_malformed_record_is_a_load_error_naming_the_field(tmp_path):
    """A hand-edited parameter file whose record lacks its ratio fails to load, naming the field (no KeyError
    in the middle of a plan)."""
    src = load_params(None).model_dump(mode="json")
    src["fit"]["by_configuration"] = {"b200/trtllm/deepseek-r1/fp4/tp1/ep4": {"n": 9}}
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(src))
    with pytest.raises(GpuplanError, match="median_measured_over_predicted"):
        load_params(bad)
