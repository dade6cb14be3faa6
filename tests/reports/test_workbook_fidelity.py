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
