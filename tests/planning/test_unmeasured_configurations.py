"""Configurations whose hardware was measured, but not this way, are rated datasheet-only and warned about:

- an engine the device's generation was never measured with (vLLM on H100: the shipped calibration has Hopper
  under TensorRT-LLM only), with the host times it assumes next to those the fit gave the engine where it was
  measured (docs/model-accuracy.md, "Finite benchmark runs": a refit without an engine's rows lands 14-41 % off);
- a mixture-of-experts model on a generation and engine never measured with one (any MoE on MI300X: the AMD rows
  are dense Llama), with the grouped-GEMM share it assumes next to the span the fit gave the measured generations;
  likewise a weight-only precision (int4, W4A16) anywhere but Hopper under TensorRT-LLM, the one place it was measured;
- a pipeline-parallel configuration (pp > 1): rated same-generation at best, its pipeline terms never fitted;
- disaggregated pools on different vendors or engines: a KV hand-off serving stacks may not support, warned.
"""

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
    """0.84 ms per step and 3.0 µs per sequence are the NVIDIA (TensorRT-LLM) fit's; 2.47 ms / 4.1 µs the vLLM
    override's fitted on MI300X (``factors_for``); the warning names both, the class band and the fixes."""
    params = load_params(None)
    cat = load_catalog()
    here, there = params.factors_for(cat.devices["h100-sxm"], "vllm"), params.factors_for(cat.devices["mi300x"], "vllm")
    assert (round(here.step_overhead_ms, 2), round(there.step_overhead_ms, 2)) == (0.84, 2.47)
    plan, cat = _plan("vllm")
    r = optimize_plan(plan, cat, compare_single_device=False, verify=False, sensitivity=False)
    (d,) = r.deployments
    assert d.fidelity.class_ == "datasheet-only"
    notes = [n for n in r.diagnostics if n.code == "engine_unmeasured"]
    assert len(notes) == 1 and notes[0].level == "warning"
    text = notes[0].message
    for part in (f"{d.key} (chat)", "vllm was never measured on hopper (its rows ran trtllm)",
                 "0.84 ms per step, 3.0 µs per running sequence",
                 "where vllm was measured (mi300x) the fit gives it 2.47 ms per step and 4.1 µs per running sequence",
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


# ---------------------------------------------------------------- a MoE model on hardware measured with dense ones

def _moe_plan(device: str, model: str = "mixtral-8x7b"):
    plan = parse_plan({"name": "m", "allowed_devices": [device], "workloads": [
        {"name": "moe", "model": model, "qps": 10, "prompt_tokens": {"mean": 1024, "p99": 4096},
         "output_tokens": {"mean": 256, "p99": 1024}, "slo": {"ttft_p99_ms": 2000, "tpot_p99_ms": 200},
         "precisions": ["fp8"]}]}, "m")
    return plan, resolve_catalog(plan, load_catalog(), "m")


def test_the_shipped_coverage_records_which_generations_ran_moe():
    """The AMD rows are dense Llama: CDNA 3 under vLLM never ran a MoE model; every NVIDIA generation did."""
    cat = load_catalog()
    rows = [m for name in SHIPPED_MEASUREMENT_FILES for m in load_measurements(shipped_measurements(name), cat)]
    assert coverage(rows, cat).moe_generation_engines == load_params(None).coverage.moe_generation_engines == [
        "ada/trtllm", "ampere/trtllm", "blackwell/trtllm", "hopper/trtllm"]


def test_a_moe_model_on_mi300x_is_rated_datasheet_only_and_warned():
    """Mixtral on MI300X (measured, class a, with dense models): its deployment is datasheet-only with the class-c
    envelope ×0.6867–1.4275 (tests/planning/test_config_fidelity.py's docstring), and one moe_unmeasured warning
    names the grouped-GEMM share its capacity assumes (0.91, the global moe_efficiency: no CDNA 3 override sets it)
    and the span of the generations measured with MoE (Blackwell 0.36 to Ada 1.00 in the shipped overrides)."""
    params = load_params(None)
    cat = load_catalog()
    assert round(params.factors_for(cat.devices["mi300x"], "vllm").moe_efficiency, 2) == 0.91
    plan, cat = _moe_plan("mi300x")
    r = optimize_plan(plan, cat, compare_single_device=False, verify=False, sensitivity=False)
    (d,) = r.deployments
    assert d.fidelity.class_ == "datasheet-only"
    assert (d.fidelity.low_factor, d.fidelity.high_factor) == pytest.approx((0.68670, 1.42750), abs=5e-5)
    (note,) = [n for n in r.diagnostics if n.code == "moe_unmeasured"]
    for part in (f"{d.key} (moe)", "generation cdna3 never measured with a mixture-of-experts model served by vllm",
                 "grouped-GEMM share 0.91 is not fitted on it", "fitted 0.36-1.00", "×0.69–1.43", "--confidence 0.9"):
        assert part in note.message, part


def test_a_moe_model_on_a_generation_measured_with_moe_is_not_touched():
    """Mixtral on H100 keeps its class (measured) and band, with no moe_unmeasured warning; a dense model on
    MI300X keeps its class too (the rule is about the routed experts)."""
    plan, cat = _moe_plan("h100-sxm")
    r = optimize_plan(plan, cat, compare_single_device=False, verify=False, sensitivity=False)
    assert {d.fidelity.class_ for d in r.deployments} == {"measured"}
    assert not [n for n in r.diagnostics if n.code == "moe_unmeasured"]
    plan, cat = _moe_plan("mi300x", "llama-3.1-8b")
    r = optimize_plan(plan, cat, compare_single_device=False, verify=False, sensitivity=False)
    assert {d.fidelity.class_ for d in r.deployments} == {"measured"}
    assert not [n for n in r.diagnostics if n.code in ("moe_unmeasured", "engine_unmeasured")]


def test_estimate_rates_a_moe_model_on_mi300x_datasheet_only():
    """`gpuplan estimate` takes the same rule: DeepSeek-R1 tp8 on MI300X is datasheet-only, its band × 0.6867."""
    from optimizer.models.estimate import estimate_config

    cat, params = load_catalog(), load_params(None)
    out = estimate_config(cat.model("deepseek-r1"), cat.device("mi300x"), cat.precision("fp8"), 8, 1, 1024, 1024,
                          params, max_throughput=True, devices=cat.devices)
    assert out["fidelity"]["class"] == "datasheet-only" and "never measured with a mixture-of-experts" in \
        out["fidelity"]["basis"]
    assert out["output_tokens_per_s_low"] == pytest.approx(out["output_tokens_per_s"] * 0.68670, rel=1e-4)


# ---------------------------------------------------------------- pipeline parallelism: terms no fit sets

def test_a_pipeline_parallel_deployment_is_rated_same_generation_and_warned():
    """Llama-3.1-405B FP8 on L40S (48 GB) needs pipeline stages; L40S/TensorRT-LLM is measured (pp 1 rows only),
    so the pp > 1 deployment is same-generation with b's band widened to contain a's (×0.76712–1.42750,
    tests/planning/test_config_fidelity.py's docstring) and one pipeline_uncalibrated warning names the default
    terms (20 µs hop, 50 µs per micro-batch: CalibrationParams' defaults, never fitted)."""
    params = load_params(None)
    assert (params.pp_hop_latency_us, params.pp_microbatch_overhead_us) == (20.0, 50.0)
    plan = parse_plan({"name": "pp", "allowed_devices": ["l40s"], "workloads": [
        {"name": "big", "model": "llama-3.1-405b", "qps": 0.5, "prompt_tokens": {"mean": 1024, "p99": 2048},
         "output_tokens": {"mean": 128, "p99": 512}, "slo": {"ttft_p99_ms": 20000}, "precisions": ["fp8"]}]}, "pp")
    r = optimize_plan(plan, resolve_catalog(plan, load_catalog(), "pp"), compare_single_device=False, verify=False,
                      sensitivity=False)
    (d,) = r.deployments
    assert d.pp > 1 and d.fidelity.class_ == "same-generation"
    assert (d.fidelity.low_factor, d.fidelity.high_factor) == pytest.approx((0.76712, 1.42750), abs=5e-5)
    (note,) = [n for n in r.diagnostics if n.code == "pipeline_uncalibrated"]
    assert f"{d.key} (big)" in note.message and "20 µs" in note.message and "50 µs per step" in note.message


def test_estimate_rates_pp_as_the_plan_does():
    from optimizer.models.estimate import estimate_config

    cat, params = load_catalog(), load_params(None)
    args = (cat.model("llama-3.1-70b"), cat.device("h100-sxm"), cat.precision("fp8"))
    pp1 = estimate_config(*args, 2, 1, 1024, 256, params, max_throughput=True, devices=cat.devices)
    pp2 = estimate_config(*args, 1, 2, 1024, 256, params, max_throughput=True, devices=cat.devices)
    assert pp1["fidelity"]["class"] == "measured" and "uncalibrated" not in pp1
    assert pp2["fidelity"]["class"] == "same-generation" and "pipeline-parallel (pp 2)" in pp2["fidelity"]["basis"]
    assert "pipeline" in pp2["uncalibrated"]


# ---------------------------------------------------------------- disaggregated pools across vendors or engines

def _pool(stage: str, device: str, engine: str):
    from optimizer.results.plan_result import Deployment

    return Deployment("rag", f"{stage}__{device}", device, "fp8", 8, 1, 1, 1.0, 1.0, stage=stage, engine=engine)


def test_cross_stack_pools_are_warned_and_one_stack_is_not():
    from optimizer.planning.known_limits import cross_stack_notes

    cat = load_catalog()
    (note,) = cross_stack_notes([_pool("prefill", "h100-sxm", "trtllm"), _pool("decode", "mi300x", "vllm")], cat)
    assert note.code == "disaggregated_cross_stack" and note.level == "warning"
    assert "prefill on h100-sxm (nvidia, trtllm), decode on mi300x (amd, vllm)" in note.message
    assert not cross_stack_notes([_pool("prefill", "h100-sxm", "trtllm"), _pool("decode", "h20", "trtllm")], cat)
    assert cross_stack_notes([_pool("prefill", "h100-sxm", "trtllm"), _pool("decode", "h200-sxm", "vllm")], cat)


def test_the_disaggregated_example_says_its_pools_cross_vendors():
    """examples/rag-disaggregated.yaml serves prefill on H100 (TensorRT-LLM) and decode on MI300X (vLLM): its plan,
    not only the file's comment, says the hand-off crosses stacks."""
    from tests.conftest import EXAMPLES
    from workloads import load_plan

    plan = load_plan(EXAMPLES / "rag-disaggregated.yaml")
    r = optimize_plan(plan, resolve_catalog(plan, load_catalog(), "rag"), verify=False, sensitivity=False)
    stacks = {(d.stage, d.device) for d in r.deployments}
    assert ("prefill", "h100-sxm") in stacks and ("decode", "mi300x") in stacks
    assert [n.code for n in r.diagnostics].count("disaggregated_cross_stack") == 1


# ---------------------------------------------------------------- a weight-only precision off the hardware it was fitted on

def _int4_plan(device: str):
    plan = parse_plan({"name": "w", "allowed_devices": [device], "workloads": [
        {"name": "awq", "model": "llama-3.1-8b", "qps": 10, "prompt_tokens": {"mean": 1024, "p99": 4096},
         "output_tokens": {"mean": 256, "p99": 1024}, "slo": {"ttft_p99_ms": 2000}, "precisions": ["int4"]}]}, "w")
    return plan, resolve_catalog(plan, load_catalog(), "w")


def test_the_shipped_coverage_records_where_weight_only_ran():
    """The only weight-only rows are gpt-oss's MXFP4 experts dequantized on Hopper under TensorRT-LLM."""
    cat = load_catalog()
    rows = [m for name in SHIPPED_MEASUREMENT_FILES for m in load_measurements(shipped_measurements(name), cat)]
    assert coverage(rows, cat).weight_only_generation_engines == load_params(None).coverage.weight_only_generation_engines \
        == ["hopper/trtllm"]


def test_int4_on_a100_is_rated_datasheet_only_and_warned_and_on_h100_is_not():
    """AWQ int4 Llama-3.1-8B on A100 (measured with 16-bit and FP8 rows, never weight-only): datasheet-only with the
    class-c envelope and a weight_only_unmeasured warning naming the share its dequantizing GEMMs take (0.20, the
    weight_only override fitted on Hopper). On H100 it keeps its class, with no warning."""
    params = load_params(None)
    cat = load_catalog()
    assert round(params.factors_for(cat.devices["a100-80gb-sxm"], "trtllm", weight_only=True).compute_efficiency, 2) == 0.20
    plan, cat = _int4_plan("a100-80gb-sxm")
    r = optimize_plan(plan, cat, compare_single_device=False, verify=False, sensitivity=False)
    (d,) = r.deployments
    assert d.precision == "int4" and d.fidelity.class_ == "datasheet-only"
    assert (d.fidelity.low_factor, d.fidelity.high_factor) == pytest.approx((0.68670, 1.42750), abs=5e-5)
    (note,) = [n for n in r.diagnostics if n.code == "weight_only_unmeasured"]
    assert ("generation ampere never measured with a weight-only precision served by trtllm: its dequantizing GEMMs "
            "take the share 0.20 fitted on hopper/trtllm") in note.message
    plan, cat = _int4_plan("h100-sxm")
    r = optimize_plan(plan, cat, compare_single_device=False, verify=False, sensitivity=False)
    assert {d.fidelity.class_ for d in r.deployments} == {"measured"}
    assert not [n for n in r.diagnostics if n.code.endswith("_unmeasured")]


def test_a_weight_only_moe_names_both_families():
    """gpt-oss-20b at int4 on MI300X: neither its MoE nor its weight-only GEMMs were measured on CDNA 3 / vLLM; the
    basis names both (``for_kernels``)."""
    from optimizer.models.estimate import estimate_config

    cat, params = load_catalog(), load_params(None)
    out = estimate_config(cat.model("gpt-oss-20b"), cat.device("mi300x"), cat.precision("int4"), 1, 1, 1024, 1024,
                          params, max_throughput=True, devices=cat.devices)
    basis = out["fidelity"]["basis"]
    assert out["fidelity"]["class"] == "datasheet-only"
    assert "a mixture-of-experts model served by vllm" in basis and "a weight-only precision served by vllm" in basis


def test_without_leave_out_bands_the_lowered_ratings_take_the_residual_constants():
    """A parameter file without error bands (``gpuplan calibrate --no-bands``): pp > 1 is same-generation with
    SAME_GENERATION_BAND widened to contain the measured band, a MoE model on CDNA 3 datasheet-only with
    DATASHEET_ONLY_BAND and SAME_GENERATION_BAND as well (``fidelity._rated``)."""
    from optimizer.models.fidelity import (
        DATASHEET_ONLY_BAND,
        SAME_GENERATION_BAND,
        structure_rating,
    )
    from optimizer.models.params import CalibrationParams, Coverage
    from optimizer.results.provenance import Fidelity

    cat = load_catalog()
    params = CalibrationParams(coverage=Coverage(device_engines=["mi300x/vllm"], generations=["cdna3"],
                                                 vendors=["amd"], moe_generation_engines=[]))
    own = Fidelity("measured", "x", 0.9, 1.1)
    mi300x = cat.devices["mi300x"]
    pp2 = structure_rating(own, mi300x, "vllm", params, moe=False, weight_only=False, pp=2)
    assert pp2.class_ == "same-generation"
    assert (pp2.low_factor, pp2.high_factor) == (min(SAME_GENERATION_BAND[0], 0.9), max(SAME_GENERATION_BAND[1], 1.1))
    moe = structure_rating(own, mi300x, "vllm", params, moe=True, weight_only=False, pp=2)
    assert moe.class_ == "datasheet-only"  # the kernels first; pp does not lift it back
    assert (moe.low_factor, moe.high_factor) == (min(DATASHEET_ONLY_BAND[0], SAME_GENERATION_BAND[0], 0.9),
                                                 max(DATASHEET_ONLY_BAND[1], SAME_GENERATION_BAND[1], 1.1))
    assert structure_rating(own, mi300x, "vllm", params, moe=False, weight_only=False, pp=1) is own


def test_a_plan_sized_at_a_confidence_is_not_told_to_plan_with_one():
    """The rated-down warnings' first fix was "plan with --confidence 0.9 to size by that band" even for a plan with
    confidence 0.9 already, which read as advice not taken; such a plan is told the confidence it keeps."""
    from dataclasses import replace

    from optimizer.planning.known_limits import pipeline_notes

    for plan, cat, code in (_moe_plan("mi300x") + ("moe_unmeasured",), _plan("vllm") + ("engine_unmeasured",)):
        r = optimize_plan(plan.model_copy(update={"confidence": 0.9}), cat, compare_single_device=False, verify=False,
                          sensitivity=False)
        (note,) = [n for n in r.diagnostics if n.code == code]
        assert "keep the plan's confidence (0.9), which sizes it by that band" in note.message, note.message
        assert "plan with --confidence" not in note.message
    (staged,) = pipeline_notes([replace(r.deployments[0], pp=2)], load_params(None), 0.95)
    assert "keep the plan's confidence (0.95), which sizes it by its band" in staged.message
    (unset,) = pipeline_notes([replace(r.deployments[0], pp=2)], load_params(None))
    assert "plan with --confidence 0.9 to size by its band" in unset.message
