"""The workbook shows the simulator's re-check of each online deployment (Deployments) and its count (Summary).

Figures: rag-disaggregated's plan (2026-12-07): its prefill pool simulated at 1,022.6 ms (95 % CI 980.2-1,071.1)
against a 1,000 ms TTFT SLO, not re-sized as within the simulation's noise; its decode pool at 42.4 ms against 50.
Before, the workbook showed the analytic p99s only ("SLOs met: 1 of 1") and nothing of the simulator's check.
"""

from __future__ import annotations

import copy

import pytest

from reports.context import HEADER_ROW
from reports.workbook import build_workbook
from tests.reports.test_workbook_fidelity import _rows, two_engines  # noqa: F401 - the fixture


def _verified(v: dict, simulated: float, low: float, high: float, slo: float, verdict: str) -> None:
    v["verification"] = {"metric": "ttft_p99_ms", "slo_ms": slo, "predicted_ms": 990.7, "simulated_ms": simulated,
                         "simulated_ci95_ms": [low, high], "qps_per_replica": 1.0, "requests": 40000, "seed": 0,
                         "met": verdict == "met", "verdict": verdict, "derate_factor": 1.0}


def _summary_line(wb, label: str) -> tuple:
    return next(r for r in wb["Summary"].iter_rows(values_only=True) if r[0] == label)


def test_each_simulated_deployment_shows_its_p99_interval_and_check(two_engines):  # noqa: F811
    data = copy.deepcopy(two_engines)
    fast, other = sorted(data["deployments"], key=lambda d: d["workload"])
    _verified(fast, 1022.6, 980.2, 1071.1, 1000.0, "at_slo")
    _verified(other, 42.4, 36.4, 45.2, 50.0, "met")
    wb = build_workbook(data)
    rows = {r["Workload"]: r for r in _rows(wb["Deployments"])}
    r = rows["fast"]
    assert (r["Simulated p99 of"], r["Simulated p99 (ms)"]) == ("TTFT", pytest.approx(1022.6))
    assert (r["Simulated p99 95 % CI low (ms)"], r["Simulated p99 95 % CI high (ms)"]) == (
        pytest.approx(980.2), pytest.approx(1071.1))
    assert r["Simulator check"] == "at the SLO, within the simulation's noise (not re-sized)"
    assert rows["other"]["Simulator check"] == "met"
    value, _, note = _summary_line(wb, "Simulator check")[1:4]
    assert value == "1 of 2 deployments at the SLO" and "not re-sized" in note
    _verified(fast, 1300.0, 1200.0, 1400.0, 1000.0, "missed")
    wb = build_workbook(data)
    assert _summary_line(wb, "Simulator check")[1] == "1 of 2 deployments missed"
    assert {r["Workload"]: r for r in _rows(wb["Deployments"])}["fast"]["Simulator check"] == (
        "MISSED beyond the simulation's noise")


def test_a_result_without_simulation_says_so_and_has_no_empty_columns(two_engines):  # noqa: F811
    wb = build_workbook(two_engines)  # verify=False: nothing simulated
    headers = [c.value for c in wb["Deployments"][HEADER_ROW]]
    assert "Simulator check" not in headers
    assert _summary_line(wb, "Simulator check")[1] == "not simulated"
    data = copy.deepcopy(two_engines)  # written before verdicts: met / missed from `met`
    for d, met in zip(sorted(data["deployments"], key=lambda d: d["workload"]), (True, True), strict=True):
        _verified(d, 40.0, 36.0, 44.0, 50.0, "met")
        del d["verification"]["verdict"]
        d["verification"]["met"] = met
    assert _summary_line(build_workbook(data), "Simulator check")[1] == "every SLO met (2 deployments)"


def test_a_result_written_before_verdicts_gets_its_verdict_from_its_figures(two_engines):  # noqa: F811
    """A result JSON of before verdicts carries `met: false` for a deployment over its SLO within the simulation's
    noise too (not re-sized): its figures, not `met` alone, tell it from a miss. fast: simulated 1,022.6 ms, CI
    980.2-1,071.1 (low end under the 1,000 ms SLO), 1.023× the SLO (under SIMULATED_MISS_RATIO 1.2), predicted
    990.7 ≤ 1,000: at the SLO. other: 1,300 ms, CI 1,200-1,400, all above a 1,000 ms SLO: missed. Before: both
    "MISSED beyond the simulation's noise", "2 of 2 deployments missed"."""
    data = copy.deepcopy(two_engines)
    fast, other = sorted(data["deployments"], key=lambda d: d["workload"])
    _verified(fast, 1022.6, 980.2, 1071.1, 1000.0, "at_slo")
    _verified(other, 1300.0, 1200.0, 1400.0, 1000.0, "missed")
    for d in (fast, other):
        del d["verification"]["verdict"]
    wb = build_workbook(data)
    rows = {r["Workload"]: r for r in _rows(wb["Deployments"])}
    assert rows["fast"]["Simulator check"] == "at the SLO, within the simulation's noise (not re-sized)"
    assert rows["other"]["Simulator check"] == "MISSED beyond the simulation's noise"
    assert _summary_line(wb, "Simulator check")[1] == "1 of 2 deployments missed"
    assert "1 over the SLO within the simulation's noise" in _summary_line(wb, "Simulator check")[3]
