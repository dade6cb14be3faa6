"""Safeguards for large plans: a time-limited solve never returns a plan dearer than the
best one-device fleet, and the candidate listing stays bounded."""

from __future__ import annotations

from dataclasses import replace

import pytest

import optimizer.assemble as assemble_mod
import optimizer.optimize as optimize_mod
from catalog import load_catalog
from optimizer.results.check import check_plan
from optimizer.results.plan_result import SolveStatus
from tests.conftest import EXAMPLES
from workloads import load_plan, resolve_catalog


@pytest.fixture(scope="module")
def chat():
    plan = load_plan(EXAMPLES / "chat-fleet.yaml")
    return plan, resolve_catalog(plan, load_catalog(), "chat")


def test_time_limited_plan_falls_back_to_cheaper_one_device_fleet(chat, monkeypatch):
    plan, cat = chat
    real = optimize_mod.solve_fleet

    def stopped_early(problem, **kw):
        """The main solve 'hits its time limit' holding a plan 5x dearer than it is."""
        sol = real(problem, **kw)
        return replace(sol, status=SolveStatus.FEASIBLE, objective_usd=sol.objective_usd * 5, gap=0.8,
                       bound_usd=sol.objective_usd)

    monkeypatch.setattr(optimize_mod, "solve_fleet", stopped_early)
    result = optimize_mod.optimize_plan(plan, cat)
    codes = [d.code for d in result.diagnostics]
    assert "time_limit_fallback" in codes
    assert result.status == SolveStatus.FEASIBLE
    assert len({f.device for f in result.fleet}) == 1
    assert result.single_device_best is not None
    assert result.objective_usd == pytest.approx(result.single_device_best.objective_usd, rel=1e-6)
    assert check_plan(result, plan) == []


def test_candidate_listing_is_bounded(chat, monkeypatch):
    plan, cat = chat
    monkeypatch.setattr(assemble_mod, "MAX_CANDIDATE_ROWS", 60)
    result = optimize_mod.optimize_plan(plan, cat)
    note = next(d for d in result.diagnostics if d.code == "candidates_trimmed")
    assert "candidate rows evaluated" in note.message
    chosen = {(d.workload, d.key) for d in result.deployments}
    listed = {(c.workload, c.key) for c in result.candidates}
    assert chosen <= listed
    assert len(result.candidates) <= 60 + 4 * len(chosen)
    assert check_plan(result, plan) == []
