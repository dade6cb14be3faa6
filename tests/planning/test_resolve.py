"""Warm-started re-solves (optimizer/planning/milp/resolve.py): a known plan carried onto a
changed problem is given to the solver only when it satisfies every constraint there.

The problem is worked on paper: one workload of 45 req/s (one bucket), device ``a`` (1 GPU per
replica, 10 req/s, $100 per GPU) and device ``b`` (2 GPUs per replica, 30 req/s, $200 per GPU),
8 GPUs per server, servers free. The cheapest fleet is 5 × a = $500 at utilisation 45/50 = 0.9
(2 × b = $800; 3 × a + 1 × b = $700).
"""

from __future__ import annotations

import pytest

from optimizer.planning import sensitivity
from optimizer.planning.milp.problem import Demand, FleetProblem, Limits, Option, UnitTerms
from optimizer.planning.milp.resolve import is_feasible, transplant
from optimizer.planning.milp.solve import solve_fleet
from optimizer.planning.sensitivity import (
    _Solver,
    fleet_of,
    with_capacity,
    with_demand,
    without_device,
)
from optimizer.planning.solver_options import SolverOptions
from optimizer.results.money import LinearTerms


def _unit(device: str, usd_per_gpu: float) -> UnitTerms:
    zero = LinearTerms(0.0, 0.0)
    return UnitTerms(device, 8, LinearTerms(usd_per_gpu, 0.0), LinearTerms(usd_per_gpu, 0.0), zero, zero)


PROBLEM = FleetProblem(
    (Demand("w", (45.0,)),),
    (Option("w", "a__tp1", "a", 1, (10.0,)), Option("w", "b__tp2", "b", 2, (30.0,))),
    {"a": _unit("a", 100.0), "b": _unit("b", 200.0)},
)


@pytest.fixture(scope="module")
def base():
    sol = solve_fleet(PROBLEM)
    assert sol.objective_usd == pytest.approx(500.0, rel=1e-6)
    assert fleet_of(sol) == {"a": (5, 1)}
    return sol


def test_the_plan_is_feasible_in_its_own_problem(base):
    assert is_feasible(PROBLEM, base)


@pytest.mark.parametrize(("factor", "feasible"), [(0.91, True), (0.9, True), (0.89, False)])
def test_capacity_below_the_plans_utilisation_makes_it_infeasible(base, factor, feasible):
    """5 replicas of 10·f req/s carry 45 req/s while f ≥ 0.9."""
    assert is_feasible(with_capacity(PROBLEM, {"a": factor}), base) is feasible


@pytest.mark.parametrize(("factor", "feasible"), [(0.75, True), (50 / 45, True), (1.2, False)])
def test_demand_scales_the_routed_load(base, factor, feasible):
    """Shares are kept, so the routed load is 45·q req/s on 50 req/s of replicas."""
    target = with_demand(PROBLEM, factor)
    moved = transplant(base, PROBLEM, target)
    assert moved is not None
    assert sum(moved.routed_qps.values()) == pytest.approx(45.0 * factor)
    assert is_feasible(target, moved) is feasible


def test_a_plan_on_a_removed_device_or_over_a_limit_is_refused(base):
    assert not is_feasible(without_device(PROBLEM, "a"), base)
    capped = FleetProblem(PROBLEM.demands, PROBLEM.options, PROBLEM.units, Limits(capex_usd=499.0))
    assert not is_feasible(capped, base)
    assert is_feasible(FleetProblem(PROBLEM.demands, PROBLEM.options, PROBLEM.units, Limits(capex_usd=500.0)), base)


def test_warm_and_cold_re_solves_agree(base):
    """At f = 0.8 the 5 × a plan no longer fits (no start): 6 × a = $600 (3 × a + 1 × b: $700).
    At demand × 0.75 it still fits and is the start; the optimum is then 4 × a = $400."""
    solve = _Solver(SolverOptions(), (PROBLEM, base))
    changed = with_capacity(PROBLEM, {"a": 0.8})
    assert solve.start(changed) is None
    assert fleet_of(solve(changed)) == fleet_of(solve_fleet(changed)) == {"a": (6, 1)}
    lower = with_demand(PROBLEM, 0.75)
    assert fleet_of(solve.start(lower)) == {"a": (5, 1)}
    warm = solve(lower)
    assert fleet_of(warm) == fleet_of(solve_fleet(lower)) == {"a": (4, 1)}
    assert warm.objective_usd == pytest.approx(400.0, rel=1e-6)
    assert solve.count == 2


def test_a_known_one_device_plan_starts_the_fleet_without_the_main_device(base):
    """Without device a only b's plan fits: 2 × b (4 GPUs, $800), given as the known plan."""
    without_a = without_device(PROBLEM, "a")
    b_only = solve_fleet(without_a)
    assert fleet_of(b_only) == {"b": (4, 1)}
    solve = _Solver(SolverOptions(), (PROBLEM, base), [(PROBLEM, b_only)])
    assert fleet_of(solve.start(without_a)) == {"b": (4, 1)}
    assert solve(without_a).objective_usd == pytest.approx(800.0, rel=1e-6)


@pytest.mark.parametrize("workers", [1, 2])
def test_many_re_solves_from_the_same_known_plans(base, workers, monkeypatch):
    """``_Solver.many`` (the tornado's re-solves): each from the plans known before the call, on
    ``workers`` processes, the same answers as one by one from those plans. Demand × 0.75:
    4 × a = $400; capacity of a × 0.8: 6 × a = $600; without a: 2 × b = $800; demand × 2: 9 × a
    (90 req/s on 90 req/s of replicas) = $900."""
    monkeypatch.setattr(sensitivity, "parallel_workers", lambda: workers)
    problems = [with_demand(PROBLEM, 0.75), with_capacity(PROBLEM, {"a": 0.8}), without_device(PROBLEM, "a"),
                with_demand(PROBLEM, 2.0)]
    solve = _Solver(SolverOptions(), (PROBLEM, base))
    got = solve.many(problems)
    assert [round(s.objective_usd, 6) for s in got] == [400.0, 600.0, 800.0, 900.0]
    assert solve.count == 4 and len(solve.known) == 5
    one_by_one = [_Solver(SolverOptions(), (PROBLEM, base))(p) for p in problems]
    assert [(s.replicas, s.routed_qps) for s in got] == [(s.replicas, s.routed_qps) for s in one_by_one]
