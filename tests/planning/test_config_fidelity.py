"""Fidelity per configuration (device, engine, ep), not per device (issue 14, "Error bands").

The shipped calibration measured H100 SXM with TensorRT-LLM and not with vLLM
(``coverage.device_engines``: ``h100-sxm/trtllm`` only; ``coverage.generation_engines``: Hopper under
``hopper/trtllm`` only), and carries leave-out bands a = ×0.7671–1.2753, b = ×0.8284–1.4275,
c = ×0.6867–1.3609 (each widened to contain the better classes: b ×0.7671–1.4275, c ×0.6867–1.4275;
the refit with the MoE routing glue, moe_glue_bytes_per_element ≈ 17.84, and the unused override values dropped
(session 19; c was ×0.6842–1.3571 before); before the glue: a ×0.7391–1.3168,
b ×0.8138–1.4624, c ×0.6293–1.3012). A plan with one workload served by TensorRT-LLM and one by vLLM
on H100 has a class-(a) and a class-(c) configuration on the same device (vLLM was never measured on
Hopper: its host time and kernels there are as unknown as a new generation's,
``fidelity.engine_unmeasured``; it was class b before generation_engines was recorded): each deployment
must carry its own class, and sizing at a confidence level must derate each candidate by its own band.

capacity_factor_at(band, 0.95) = exp(μ + σ·Φ⁻¹(0.05)), μ = (ln lo + ln hi)/2, σ = (ln hi − ln lo)/(2·1.281552):
- a: ln 0.76712 = −0.26511, ln 1.27532 = 0.24320 → μ = −0.010956, σ = 0.198318 → exp(−0.33716) = 0.71379;
- c: ln 0.68670 = −0.37586, ln 1.42750 = 0.35592 → μ = −0.009967, σ = 0.285506 → exp(−0.47958) = 0.61904.
(At 0.9 the trtllm candidate is at its low end 0.7671 and the vLLM one at 0.6867.)
"""

from __future__ import annotations

import math
import statistics

import pytest

from catalog import load_catalog
from optimizer.models.fidelity import (
    DATASHEET_ONLY_BAND,
    MEASURED_BAND_FLOOR,
    SAME_GENERATION_BAND,
    fallback_letter,
    fidelity_of,
)
from optimizer.models.params import CalibrationParams, Coverage, ErrorBand, FitRecord, load_params
from optimizer.optimize import optimize_plan
from optimizer.planning import safeguards
from optimizer.planning.candidates import model_candidates
from optimizer.planning.headroom import capacity_factors, fidelity_key, sized
from optimizer.planning.safeguards import device_fidelity, fidelity_map
from optimizer.whatif_uncertainty import model_error_draws
from workloads import parse_plan, resolve_catalog

FACTOR_095 = {"trtllm": 0.71379, "vllm": 0.61904}  # module docstring


def _workload(name: str, engine: str) -> dict:
    return {"name": name, "model": "llama-3.1-8b", "qps": 20, "prompt_tokens": {"mean": 1024, "p99": 4096},
            "output_tokens": {"mean": 256, "p99": 1024}, "slo": {"ttft_p99_ms": 1000}, "precisions": ["fp8"],
            "engine": engine}


def _plan(confidence: float | None = None):
    data = {"name": "f", "allowed_devices": ["h100-sxm"],
            "workloads": [_workload("fast", "trtllm"), _workload("other", "vllm")]}
    if confidence is not None:
        data["confidence"] = confidence
    plan = parse_plan(data, "f")
    return plan, resolve_catalog(plan, load_catalog(), "f")


def test_the_shipped_bands_are_what_this_test_assumes():
    p = load_params(None)
    assert "h100-sxm/trtllm" in p.coverage.device_engines and "h100-sxm/vllm" not in p.coverage.device_engines
    assert (p.error_bands["a"].low_factor, p.error_bands["a"].high_factor) == pytest.approx((0.76712, 1.27532), abs=5e-5)
    assert p.error_bands["b"].high_factor == pytest.approx(1.42750, abs=5e-5)
    assert p.error_bands["b"].low_factor > p.error_bands["a"].low_factor  # b's low end widened to a's


def test_each_deployment_reports_the_class_of_its_own_configuration():
    """The TensorRT-LLM deployment on H100 is measured although a vLLM one shares the device
    (main rated the device as its least trusted engine: same-generation for both)."""
    plan, cat = _plan()
    r = optimize_plan(plan, cat, compare_single_device=False, verify=False)
    by_workload = {d.workload: d for d in r.deployments}
    assert {d.device for d in r.deployments} == {"h100-sxm"}
    fast, other = by_workload["fast"], by_workload["other"]
    assert (fast.engine, fast.fidelity.class_) == ("trtllm", "measured")
    assert "h100-sxm served by trtllm is in the fit" in fast.fidelity.basis
    assert (fast.fidelity.low_factor, fast.fidelity.high_factor) == pytest.approx((0.76712, 1.27532), abs=5e-5)
    assert (other.engine, other.fidelity.class_) == ("vllm", "datasheet-only")
    assert "hopper measured only with trtllm, never served by vllm" in other.fidelity.basis
    assert (other.fidelity.low_factor, other.fidelity.high_factor) == pytest.approx((0.68670, 1.42750), abs=5e-5)
    rows = {d["workload"]: d for d in r.to_json()["deployments"]}
    assert rows["fast"]["fidelity"]["class"] == "measured" and rows["other"]["fidelity"]["class"] == "datasheet-only"


def test_confidence_derates_each_candidate_by_its_own_band():
    """At confidence 0.95 every kept TensorRT-LLM candidate's capacity is × 0.71379 (band a) and every
    vLLM one's × 0.61904 (band c), on the same device."""
    plan, cat = _plan(0.95)
    params = load_params(None)
    cset = model_candidates(plan, cat, params)
    fid = fidelity_map(cset, params, cat)
    out = sized(cset, capacity_factors(plan, fid))
    seen = set()
    for before, after in zip(cset.workloads, out.workloads, strict=True):
        for c0, c1 in zip(before.candidates, after.candidates, strict=True):
            if not c0.kept:
                continue
            seen.add(c0.engine)
            for mu0, mu1 in zip(c0.capacity_qps, c1.capacity_qps, strict=True):
                assert mu1 == pytest.approx(mu0 * FACTOR_095[c0.engine], rel=1e-4), (c0.key, c0.engine)
    assert seen == {"trtllm", "vllm"}


def test_confidence_sizes_the_deployment_by_its_own_band():
    """The chosen TensorRT-LLM deployment's capacity per replica at 0.95 = its point capacity × 0.71379."""
    plan, cat = _plan()
    point = {d.workload: d for d in optimize_plan(plan, cat, compare_single_device=False, verify=False).deployments}
    plan95, cat = _plan(0.95)
    sure = {d.workload: d for d in optimize_plan(plan95, cat, compare_single_device=False, verify=False).deployments}
    for w in ("fast", "other"):
        assert sure[w].key == point[w].key
        per_replica = (sure[w].capacity_qps / sure[w].replicas) / (point[w].capacity_qps / point[w].replicas)
        assert per_replica == pytest.approx(FACTOR_095[sure[w].engine], rel=1e-4), w


def test_fidelity_is_computed_once_per_configuration_and_kept_least_trusted_per_device(monkeypatch):
    """Two TensorRT-LLM workloads and a vLLM one on H100: 2 distinct (device, engine, ep) triples, 2
    ``fidelity_of`` calls; the per-device map (the tornado's) keeps the vLLM one's (least trusted)."""
    data = {"name": "f", "allowed_devices": ["h100-sxm"],
            "workloads": [_workload("a", "trtllm"), _workload("b", "trtllm"), _workload("c", "vllm")]}
    plan = parse_plan(data, "f")
    cat = resolve_catalog(plan, load_catalog(), "f")
    params = load_params(None)
    cset = model_candidates(plan, cat, params)
    calls = []
    real = safeguards.fidelity_of

    def counting(*args, **kwargs):
        calls.append((args[0].key, kwargs.get("engine"), kwargs.get("ep")))
        return real(*args, **kwargs)

    monkeypatch.setattr(safeguards, "fidelity_of", counting)
    fid = fidelity_map(cset, params, cat)
    assert sorted(fid) == [("h100-sxm", "trtllm", 1), ("h100-sxm", "vllm", 1)]
    assert sorted(calls) == [("h100-sxm", "trtllm", 1), ("h100-sxm", "vllm", 1)]
    assert {fidelity_key(c) for wc in cset.workloads for c in wc.kept} == set(fid)
    per_device = device_fidelity(fid)
    assert per_device == {"h100-sxm": fid[("h100-sxm", "vllm", 1)]}
    assert per_device["h100-sxm"].class_ == "datasheet-only"


# ---------------------------------------------------------------- the fallback (parameter files without bands)

def _fit(**by_device: float) -> FitRecord:
    """A fit record with 40 rows of each device at the given p90 |error| %."""
    return FitRecord(data_file="mine.csv", rows_used=40 * len(by_device), method="test", median_abs_pct_error=5.0,
                     p90_abs_pct_error=max(by_device.values()),
                     by_device={k.replace("_", "-"): {"n": 40, "median_abs_pct_error": 5.0, "p90_abs_pct_error": v}
                                for k, v in by_device.items()})


def test_fallback_without_coverage_rates_another_engine_as_its_generation():
    """No coverage: the fit's H100 rows count as TensorRT-LLM (its default engine). p90 20 % →
    in-sample band [1/1.2, 1/0.8] = [0.8333, 1.25], widened to contain MEASURED_BAND_FLOOR (0.767, 1.275):
    [0.767, 1.275]; with vLLM it is same-generation, band the envelope of SAME_GENERATION_BAND and that
    measured band."""
    cat = load_catalog()
    params = CalibrationParams(fit=_fit(h100_sxm=20.0))
    h100 = cat.devices["h100-sxm"]
    trt = fidelity_of(h100, params, cat.devices)
    vllm = fidelity_of(h100, params, cat.devices, engine="vllm")
    assert trt.class_ == "measured" and (trt.low_factor, trt.high_factor) == pytest.approx((0.767, 1.275))
    assert vllm.class_ == "same-generation" and "not served by vllm" in vllm.basis
    assert (vllm.low_factor, vllm.high_factor) == pytest.approx(
        (min(SAME_GENERATION_BAND[0], 0.767), max(SAME_GENERATION_BAND[1], 1.275)))
    assert fidelity_of(h100, params, cat.devices, ep=8).class_ == "measured"  # no ep record: the device's class
    assert fallback_letter(cat.devices["mi300x"], "vllm", params, cat.devices) == "c"


def test_an_in_sample_fit_never_rates_its_device_tighter_than_the_leave_out_floor():
    """Six rows of one source group fitted to a p90 |error| of 2.7 % (review 2026-12-07): in-sample
    [1/1.027, 1/0.973] = [0.9737, 1.0277], which said ±3 %; rated by MEASURED_BAND_FLOOR (0.767, 1.275) instead,
    the shipped calibration's leave-one-source-group-out band of measured devices. A p90 of 40 % keeps its own,
    wider band [1/1.4, 1/0.6] = [0.7143, 1.6667]."""
    cat = load_catalog()
    h100 = cat.devices["h100-sxm"]
    tight = fidelity_of(h100, CalibrationParams(fit=_fit(h100_sxm=2.7)), cat.devices)
    assert tight.class_ == "measured" and (tight.low_factor, tight.high_factor) == pytest.approx((0.767, 1.275))
    wide = fidelity_of(h100, CalibrationParams(fit=_fit(h100_sxm=40.0)), cat.devices)
    assert (wide.low_factor, wide.high_factor) == pytest.approx((1 / 1.4, 1 / 0.6))


def test_fallback_with_coverage_follows_its_engine_and_ep_pairs():
    """``gpuplan calibrate --no-bands`` writes coverage without bands: the class comes from its
    device/engine and ep pairs as on the banded path, the band from the fit record."""
    cat = load_catalog()
    cov = Coverage(device_engines=["h100-sxm/trtllm", "mi300x/vllm"], generations=["hopper", "cdna3"],
                   vendors=["nvidia", "amd"], expert_parallel_device_engines=["h100-sxm/trtllm"])
    params = CalibrationParams(coverage=cov, fit=_fit(h100_sxm=20.0, mi300x=30.0))
    h100, mi300x, h200 = cat.devices["h100-sxm"], cat.devices["mi300x"], cat.devices["h200-sxm"]
    assert fidelity_of(h100, params, cat.devices, ep=8).class_ == "measured"
    tp = fidelity_of(mi300x, params, cat.devices, engine="vllm")
    ep8 = fidelity_of(mi300x, params, cat.devices, engine="vllm", ep=8)
    # p90 30 %: [1/1.3, 1/0.7] = [0.7692, 1.4286], its low end widened to the floor's 0.767
    assert tp.class_ == "measured" and (tp.low_factor, tp.high_factor) == pytest.approx((0.767, 1 / 0.7))
    assert ep8.class_ == "same-generation" and "never with expert parallelism (ep 8)" in ep8.basis
    assert ep8.low_factor <= tp.low_factor and ep8.high_factor >= tp.high_factor  # nested
    sg = fidelity_of(mi300x, params, cat.devices, engine="sglang")
    assert sg.class_ == "same-generation" and "not served by sglang" in sg.basis  # no generation/engine record
    assert fidelity_of(h200, params, cat.devices).class_ == "same-generation"
    # in the coverage, but too few rows in the fit for a band of its own
    thin = CalibrationParams(coverage=cov, fit=_fit(h100_sxm=20.0))
    assert fallback_letter(mi300x, "vllm", thin, cat.devices) == "b"
    # with the generation/engine pairs recorded, an engine never measured on the generation is class c
    rec = CalibrationParams(coverage=cov.model_copy(update={"generation_engines": ["cdna3/vllm", "hopper/trtllm"]}),
                            fit=_fit(h100_sxm=20.0, mi300x=30.0))
    sg = fidelity_of(mi300x, rec, cat.devices, engine="sglang")
    assert sg.class_ == "datasheet-only" and "cdna3 measured only with vllm, never served by sglang" in sg.basis
    assert fidelity_of(h200, rec, cat.devices).class_ == "same-generation"  # Hopper measured under trtllm
    assert fidelity_of(h200, rec, cat.devices, engine="vllm").class_ == "datasheet-only"
    assert fidelity_of(mi300x, rec, cat.devices, engine="vllm").class_ == "measured"


def test_monte_carlo_model_error_is_drawn_per_configuration():
    """``gpuplan whatif --samples``: the TensorRT-LLM and vLLM deployments on H100 draw from their own
    bands: median log factor = μ of each band (a: −0.010956, c: −0.011788, module docstring; σ of a
    median of 4,000 draws ≈ 1.2533·0.287/√4000 = 0.0057); and the spread of each is its band's σ
    (a 0.198318, c 0.286927: the vLLM draws spread ~1.45× as wide)."""
    plan, cat = _plan()
    base = optimize_plan(plan, cat, compare_single_device=False, verify=False)
    draws = model_error_draws(base, 4000, seed=0)
    keys = {("h100-sxm", "trtllm", 1), ("h100-sxm", "vllm", 1)}
    assert set(draws[0]) == keys
    for key, mu, sigma in ((("h100-sxm", "trtllm", 1), -0.010956, 0.198318), (("h100-sxm", "vllm", 1), -0.011788, 0.286927)):
        logs = [math.log(d[key]) for d in draws]
        assert statistics.median(logs) == pytest.approx(mu, abs=0.02), key
        assert statistics.stdev(logs) == pytest.approx(sigma, rel=0.05), key


def test_factors_keyed_by_device_alone_are_refused_not_ignored():
    """A factor map that misses a kept candidate's (device, engine, ep) would leave it at factor 1
    (no target utilisation, no band) in silence: ``sized`` raises instead."""
    plan, cat = _plan(0.95)
    params = load_params(None)
    cset = model_candidates(plan, cat, params)
    by_device = {d: 0.5 for d, _, _ in fidelity_map(cset, params, cat)}
    with pytest.raises(KeyError, match="no capacity factor for configuration"):
        sized(cset, by_device)


def test_a_file_with_the_class_a_band_only_rates_its_device_by_it():
    """`gpuplan calibrate` on one device's rows from two source groups writes the leave-one-source-group-out
    band of class a only (no other device or generation to hold out). The measured device is rated by that
    band, ×0.70–1.60, not by the fit record's in-sample p90 3 % (×0.9709–1.0309, what it got when every class
    had to be present); an unmeasured device's fallback band is widened to contain it: h200 (same generation)
    [min(0.392, 0.9709, 0.70), max(1.417, 1.0309, 1.60)] = ×0.392–1.60, b200 (datasheet-only)
    [min(0.539, 0.392, 0.70), max(1.488, 1.417, 1.60)] = ×0.392–1.60."""
    cat = load_catalog()
    cov = Coverage(device_engines=["h100-sxm/vllm"], generations=["hopper"], vendors=["nvidia"],
                   expert_parallel_device_engines=[], generation_engines=["hopper/vllm"])
    band_a = ErrorBand(low_factor=0.70, high_factor=1.60, n=6, basis="leave-one-source-group-out predictions")
    params = CalibrationParams(coverage=cov, fit=_fit(h100_sxm=3.0), error_bands={"a": band_a})
    h100 = fidelity_of(cat.devices["h100-sxm"], params, cat.devices, engine="vllm")
    assert h100.class_ == "measured" and (h100.low_factor, h100.high_factor) == pytest.approx((0.70, 1.60))
    assert "6 leave-one-source-group-out predictions" in h100.basis
    h200 = fidelity_of(cat.devices["h200-sxm"], params, cat.devices, engine="vllm")
    assert h200.class_ == "same-generation"
    assert (h200.low_factor, h200.high_factor) == pytest.approx((SAME_GENERATION_BAND[0], 1.60))
    b200 = fidelity_of(cat.devices["b200"], params, cat.devices, engine="vllm")
    assert b200.class_ == "datasheet-only"
    assert (b200.low_factor, b200.high_factor) == pytest.approx(
        (min(DATASHEET_ONLY_BAND[0], SAME_GENERATION_BAND[0]), 1.60))
    # without the band: the in-sample record (×0.9709–1.0309) widened to MEASURED_BAND_FLOOR, and the basis says so
    bare = fidelity_of(cat.devices["h100-sxm"], params.model_copy(update={"error_bands": {}}), cat.devices,
                       engine="vllm")
    assert (bare.low_factor, bare.high_factor) == pytest.approx(MEASURED_BAND_FLOOR)
    assert "in-sample p90 |error| 3.0 %" in bare.basis and "no leave-out band" in bare.basis
