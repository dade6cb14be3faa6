"""The workbook shows each deployment's own fidelity and each candidate's engine and ep.

The plan (tests/planning/test_config_fidelity.py): H100 SXM serving one workload with TensorRT-LLM
(measured with the shipped calibration) and one with vLLM (datasheet-only: Hopper was never measured with vLLM).
"""

from __future__ import annotations

import copy

import pytest

from optimizer.optimize import optimize_plan
from reports.context import FIRST_ROW, HEADER_ROW
from reports.workbook import build_workbook
from tests.planning.test_config_fidelity import _plan


@pytest.fixture(scope="module")
def two_engines():
    plan, cat = _plan()
    return optimize_plan(plan, cat, compare_single_device=False, verify=False).to_json()


def _rows(ws) -> list[dict[str, object]]:
    headers = [c.value for c in ws[HEADER_ROW]]
    out = []
    for row in ws.iter_rows(min_row=FIRST_ROW, values_only=True):
        if row[0] is None or not any(v is not None for v in row[1:]):
            break
        out.append(dict(zip(headers, row, strict=False)))
    return out


def test_deployments_sheet_carries_each_deployments_own_fidelity(two_engines):
    wb = build_workbook(two_engines)
    rows = {r["Workload"]: r for r in _rows(wb["Deployments"])}
    by_workload = {d["workload"]: d["fidelity"] for d in two_engines["deployments"]}
    assert rows["fast"]["Engine"] == "trtllm" and rows["other"]["Engine"] == "vllm"
    for w, cls in (("fast", "measured"), ("other", "datasheet-only")):
        r, f = rows[w], by_workload[w]
        assert r["Fidelity class"] == cls == f["class"]
        assert r["Capacity band low (× predicted)"] == pytest.approx(f["low_factor"])
        assert r["Capacity band high (× predicted)"] == pytest.approx(f["high_factor"])
        assert r["Fidelity basis"] == f["basis"]
    assert rows["fast"]["Capacity band high (× predicted)"] < rows["other"]["Capacity band high (× predicted)"]


def test_summary_says_which_deployment_rests_on_another_engine(two_engines):
    """Row 3 of Summary names the vLLM-served H100 as resting on measurements of other configurations, not as a
    datasheet extrapolation (Hopper is measured, under TensorRT-LLM)."""
    text = build_workbook(two_engines)["Summary"].cell(3, 1).value
    assert "H100-SXM served by vllm rests on measurements of other configurations" in text
    assert "extrapolated from datasheets" not in text


def test_candidates_sheet_has_engine_and_ep_columns(two_engines):
    wb = build_workbook(two_engines)
    rows = _rows(wb["Candidates"])
    assert rows and {"Engine", "Expert parallel"} <= set(rows[0])
    engines = {(r["Workload"], r["Engine"]) for r in rows}
    assert engines == {("fast", "trtllm"), ("other", "vllm")}
    assert all(r["Expert parallel"] == 1 for r in rows)  # llama-3.1-8b is dense: no ep
    for r in rows:
        assert r["GPUs per replica"] == r["Tensor parallel"] * r["Pipeline parallel"] * r["Expert parallel"]


def test_results_without_fidelity_or_engine_leave_those_columns_out(two_engines):
    """A capacity table's result (no model, no engine) or one written before: no empty columns."""
    data = copy.deepcopy(two_engines)
    for d in data["deployments"]:
        d["fidelity"] = None
        d["engine"] = ""
    headers = [c.value for c in build_workbook(data)["Deployments"][HEADER_ROW]]
    assert "Engine" not in headers and "Fidelity class" not in headers and "Fidelity basis" not in headers


def test_summary_says_a_plan_rests_on_a_same_generation_device():
    """H100 NVL was never measured (its generation, Hopper, was): a plan buying only H100 NVLs is sized on a
    same-generation capacity (80 % band ×0.77–1.43 in the shipped fit), which the Summary's first lines left unsaid
    (only datasheet-only figures were named there)."""
    from catalog import load_catalog
    from workloads import resolve_catalog
    from workloads.spec import Plan

    plan = Plan(name="nvl", objective="capex", allowed_devices=["h100-nvl"],
                workloads=[{"name": "chat", "model": "llama-3.1-8b", "qps": 2, "prompt_tokens": 512,
                            "output_tokens": 128, "slo": {"ttft_p99_ms": 2000, "tpot_p99_ms": 100},
                            "precisions": ["bf16"]}])
    data = optimize_plan(plan, resolve_catalog(plan, load_catalog(), "x"), compare_single_device=False,
                         verify=False).to_json()
    (f,) = {d["device"]: d["fidelity"] for d in data["deployments"]}.items()
    assert f[0] == "h100-nvl" and f[1]["class"] == "same-generation"
    text = build_workbook(data)["Summary"].cell(3, 1).value
    assert (f"Performance of H100-NVL is inferred from measurements of its generation, not of the device itself "
            f"(80 % capacity band ×{f[1]['low_factor']:.2f}–{f[1]['high_factor']:.2f})") in text


def test_summary_states_the_target_utilization_the_fleet_was_sized_with(two_engines):
    # Planner review 23b: a plan with confidence 0.9 and target_utilization 0.8 said "Sized for the confidence 0.9 of
    # the performance band." only; target_utilization (every capacity × 0.8) appeared nowhere in the workbook, and
    # "Least headroom: ... runs at 95% of its SLO-safe capacity" read as 5 % spare where 42 % of the point capacity is.
    data = copy.deepcopy(two_engines)
    data["headroom"] = {"confidence": 0.9, "sized_for": "confidence 0.9 of the performance band",
                        "target_utilization": 0.8, "demand_quantile": 0.5, "demand_sigma": 0.25, "demand_factor": 1.0}
    wb = build_workbook(data)
    a3 = wb["Summary"]["A3"].value
    assert "Sized for the confidence 0.9 of the performance band; target_utilization 0.8 (every capacity × 0.8)." in a3
    words = " ".join(str(r[0]) for r in wb["Summary"].iter_rows(values_only=True) if r[0])
    assert "SLO-safe capacity as sized (already derated" in words
    data["headroom"] = {"confidence": None, "sized_for": "point estimate", "target_utilization": 1.0,
                        "demand_quantile": 0.5, "demand_sigma": 0.25, "demand_factor": 1.0}
    wb = build_workbook(data)
    assert "Sized for the point estimate." in wb["Summary"]["A3"].value
    assert "already derated" not in " ".join(str(r[0]) for r in wb["Summary"].iter_rows(values_only=True) if r[0])
