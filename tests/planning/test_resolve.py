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
from optimizer.planning.milp.resolve import is_feasible, topped_up, transplant, trimmed
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
    """At f = 0.8 the 5 × a plan no longer fits as it is (5 × 8 = 40 req/s < 45); topped up
    (:func:`topped_up`) it is the start: the 5 req/s overflow on one more a ($100 marginal) rather
    than one b (2 GPUs, $400) = 6 × a = $600, the optimum (3 × a + 1 × b: $700).
    At demand × 0.75 it fits, and trimmed (:func:`trimmed`: 33.75 req/s need ⌈3.375⌉ = 4 replicas)
    it is the start 4 × a = $400, the optimum."""
    solve = _Solver(SolverOptions(), (PROBLEM, base))
    changed = with_capacity(PROBLEM, {"a": 0.8})
    assert not is_feasible(changed, base)
    assert fleet_of(solve.start(changed)) == {"a": (6, 1)}
    assert fleet_of(solve(changed)) == fleet_of(solve_fleet(changed)) == {"a": (6, 1)}
    lower = with_demand(PROBLEM, 0.75)
    assert fleet_of(solve.start(lower)) == {"a": (4, 1)}
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


def test_top_up_places_the_overflow_at_the_least_marginal_cost(base):
    """Demand × 1.5 (67.5 req/s) on 5 × a (50 req/s): without filling idle GPUs, a keeps 50/67.5 of
    each bucket and the 17.5 req/s overflow goes to one option: 2 more a ($200, 20 req/s) or 1 b
    (2 GPUs, $400, 30 req/s) → 7 × a. With b's GPUs free (per_gpu $0) the b replica costs nothing
    more: 5 × a + 1 × b. Filling the 3 idle GPUs of a's server first: ⌈6.75 − 5⌉ = 2 more a → 7 × a
    either way."""
    high = with_demand(PROBLEM, 1.5)
    for fill in (True, False):
        up = topped_up(high, transplant(base, PROBLEM, high), fill_idle=fill)
        assert fleet_of(up) == {"a": (7, 1)} and up.objective_usd == pytest.approx(700.0)
        assert sum(up.routed_qps.values()) == pytest.approx(67.5)
        assert is_feasible(high, up)
    free_b = FleetProblem(high.demands, high.options, {**high.units, "b": _unit("b", 0.0)})
    assert fleet_of(topped_up(free_b, transplant(base, PROBLEM, free_b))) == {"a": (7, 1)}
    up = topped_up(free_b, transplant(base, PROBLEM, free_b), fill_idle=False)
    assert fleet_of(up) == {"a": (5, 1), "b": (2, 1)}
    assert up.routed_qps[("w", 0, "b__tp2")] == pytest.approx(17.5)
    assert is_feasible(free_b, up)
    assert topped_up(PROBLEM, base) is None  # nothing overflows


def test_top_up_keeps_the_n_plus_one_spare(base):
    """N+1: 5 × a carries 4 × 10 = 40 req/s; 45 − 40 = 5 req/s overflow → one more a plus its own
    spare (⌈0.5⌉ + 1 = 2 replicas: $200 vs 1 b + spare = 2 × 2 GPUs × $200 = $800) → 7 × a; filling
    an idle GPU of a's server instead, ⌈4.5 − 4⌉ = 1 more a carries it: 6 × a."""
    n1 = FleetProblem((Demand("w", (45.0,), n_plus_one=True),), PROBLEM.options, PROBLEM.units)
    up = topped_up(n1, transplant(base, PROBLEM, n1), fill_idle=False)
    assert fleet_of(up) == {"a": (7, 1)}
    assert is_feasible(n1, up)
    filled = topped_up(n1, transplant(base, PROBLEM, n1))
    assert fleet_of(filled) == {"a": (6, 1)} and filled.routed_qps == base.routed_qps
    assert is_feasible(n1, filled)


def test_trim_cuts_idle_replicas_only_to_what_the_load_needs(base):
    """Demand × 0.5 (22.5 req/s) on 5 × a: ⌈2.25⌉ = 3 replicas; the replica minimum of 4 makes it
    infeasible (left to is_feasible); at full demand nothing is trimmed (None)."""
    half = with_demand(PROBLEM, 0.5)
    cut = trimmed(half, transplant(base, PROBLEM, half))
    assert fleet_of(cut) == {"a": (3, 1)} and cut.objective_usd == pytest.approx(300.0)
    assert is_feasible(half, cut)
    floor4 = FleetProblem((Demand("w", (22.5,), min_replicas=4),), PROBLEM.options, PROBLEM.units)
    assert not is_feasible(floor4, trimmed(floor4, transplant(base, PROBLEM, floor4)))
    assert trimmed(PROBLEM, base) is None


@pytest.mark.parametrize(("usd_per_gpu", "expected"), [(200.0, None), (300.0, None), (400.0, 800.0), (1000.0, 800.0)])
def test_a_dearer_chosen_device_gives_way_to_the_best_fleet_without_it(base, usd_per_gpu, expected):
    """B = 5 × a ($500), A = 2 × b ($800, the best without a). At a's price P per GPU every fleet that
    buys a costs at least $500 + (P − 100) (one more GPU's worth of the rise): from P = 400 on that
    is ≥ $800, so A is the optimum there (at P = 400: 5 × a $2,000, 3 × a + 1 × b $1,600, 2 × b $800);
    below it the bound does not decide (at P = 300 the optimum is still 2 × b, but a re-solve says so)."""
    at = FleetProblem(PROBLEM.demands, PROBLEM.options, {**PROBLEM.units, "a": _unit("a", usd_per_gpu)})
    assert sensitivity._dearer_end(PROBLEM, at, "a", 500.0, 800.0, 0.0) == expected
    if expected is not None:
        assert solve_fleet(at).objective_usd == pytest.approx(expected, rel=1e-6)
    assert sensitivity._dearer_end(PROBLEM, at, "a", 500.0, 800.0, 1e-3) == (
        800.0 if usd_per_gpu > 400.0 else None)  # the base plan's gap is taken off its cost
    cheaper = FleetProblem(PROBLEM.demands, PROBLEM.options, {**PROBLEM.units, "a": _unit("a", 50.0)})
    assert sensitivity._dearer_end(PROBLEM, cheaper, "a", 500.0, 800.0, 0.0) is None  # a lower price: no claim
