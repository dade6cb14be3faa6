"""Properties of the decomposition (optimizer/planning/milp/decompose.py) on random two-workload
problems with servers, budgets and N+1: its bound never exceeds the exact optimum, its plan
never costs less than it, and a plan reported optimal is within the gap of it."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from hypothesis import given

from optimizer.planning.milp import decompose
from optimizer.planning.milp.decompose import solve_decomposed
from optimizer.planning.milp.solve import solve_fleet
from optimizer.results.plan_result import SolveStatus
from tests.properties.test_optimizer_properties import SETTINGS, two_workload_problems


@SETTINGS
@given(p=two_workload_problems())
def test_decomposition_bound_and_plan_bracket_the_optimum(p):
    exact = solve_fleet(p, gap=0.0, bounds=False)
    with patch.object(decompose, "BOUNDS_MIN_OPTIONS", 0):  # hypothesis: no function-scoped monkeypatch
        sol = solve_decomposed(p, time_limit_s=10, gap=1e-3)
    if not exact.status.has_plan:
        assert sol.status == exact.status
        return
    assert sol.bound_usd <= exact.objective_usd * (1 + 1e-7) + 1e-6
    assert sol.objective_usd >= exact.objective_usd * (1 - 1e-7) - 1e-6
    if sol.status == SolveStatus.OPTIMAL:
        assert sol.objective_usd <= exact.objective_usd * (1 + 1e-3) + 1e-6
    assert sol.gap == pytest.approx(max(sol.objective_usd - sol.bound_usd, 0.0) / sol.objective_usd, abs=1e-9)
