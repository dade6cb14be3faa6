"""The optimizer's shortcuts give the answers of the slow paths they replace."""

from __future__ import annotations

from dataclasses import replace

import pytest

from catalog import load_catalog
from optimizer.models.params import load_params
from optimizer.planning import evaluate
from optimizer.planning.candidate_set import fleet_problem
from optimizer.planning.candidates import model_candidates
from optimizer.planning.diagnose import single_device_best
from optimizer.planning.milp.problem import Limits
from optimizer.planning.milp.solve import workload_lower_bounds
from optimizer.planning.shortlist import single_device_shortlist
from tests.conftest import EXAMPLES
from workloads import load_plan, resolve_catalog


@pytest.fixture(scope="module")
def chat():
    plan = load_plan(EXAMPLES / "chat-fleet.yaml")
    catalog = resolve_catalog(plan, load_catalog(), "chat-fleet.yaml")
    return plan, catalog, load_params(None)


def _capacities(cset):
    return [(c.workload, c.key, c.capacity_qps, c.limited_by, c.pruned_reason)
            for wc in cset.workloads for c in wc.candidates]


def test_worker_pool_gives_the_serial_capacities(chat, monkeypatch):
    plan, catalog, params = chat
    monkeypatch.setattr(evaluate, "_CAPACITY_CACHE", {})
    monkeypatch.setenv("GPUPLAN_WORKERS", "1")
    serial = model_candidates(plan, catalog, params)
    monkeypatch.setattr(evaluate, "_CAPACITY_CACHE", {})
    monkeypatch.setenv("GPUPLAN_WORKERS", "2")
    pooled = model_candidates(plan, catalog, params)
    assert _capacities(pooled) == _capacities(serial)


def test_single_device_shortlist_keeps_the_best(chat):
    plan, catalog, params = chat
    problem = fleet_problem(model_candidates(plan, catalog, params), plan)
    short = single_device_shortlist(problem, 1e-3)
    assert {o.device for o in short.options} < {o.device for o in problem.options}
    solve = dict(time_limit_s=10.0, gap=1e-3)
    assert single_device_best(short, **solve) == single_device_best(problem, **solve)
    # caps could make the shortcut's upper bound infeasible: then every device is solved
    capped = replace(problem, limits=Limits(capex_usd=1e9))
    assert single_device_shortlist(capped, 1e-3) is capped


def test_bound_sub_solves_keep_to_their_budget(chat):
    plan, catalog, params = chat
    problem = fleet_problem(model_candidates(plan, catalog, params), plan)
    assert workload_lower_bounds(problem, time_limit_s=1e-3, gap=1e-3) == {}  # the budget runs out before any
    assert set(workload_lower_bounds(problem, time_limit_s=30.0, gap=1e-3)) == {w.name for w in plan.workloads}
