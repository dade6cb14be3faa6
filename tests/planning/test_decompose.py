"""The decomposition of the fleet MILP (optimizer/planning/milp/heuristic.py, decompose.py):
each workload alone, pooled on shared servers, the MILP over their neighbourhood, the bound Σ_w L[w].

The hand-worked case (two workloads, two devices; objective $ per GPU and per server):

- device a: 8 GPUs a server, $100 a GPU + $800 a server (amortised $200 a GPU);
- device b: 2 GPUs a server, $180 a GPU + $80 a server (amortised $220 a GPU);
- w1: 10 req/s, 4 req/s per 1-GPU replica on either: ⌈2.5⌉ = 3 replicas; alone a: 3·200 = $600
  (b: $660; 2 on a + 1 on b: $620);
- w2: 6 req/s, 3 req/s per replica on either: 2 replicas; alone a: $400 (b: $440).

So Σ_w L[w] = $1,000. Pooled alone plans: 5 GPUs of a on one server, 5·100 + 800 = $1,300.
Every fleet: all on b 5 GPUs on 3 servers, 5·180 + 3·80 = $1,140 (the optimum); all on a
$1,300; w1 on a and w2 on b 300 + 800 + 360 + 80 = $1,540; w1 on b and w2 on a
540 + 160 + 200 + 800 = $1,700. The neighbourhood MILP (every option here) finds $1,140.
With an inventory of 4 b GPUs the all-b fleet is out and the optimum is all on a, $1,300.
"""

from __future__ import annotations

import pytest

from catalog import load_catalog
from optimizer.assemble import assemble
from optimizer.models.params import load_params
from optimizer.planning import candidates as candidates_mod
from optimizer.planning.candidate_set import fleet_problem
from optimizer.planning.diagnose import single_device_solution
from optimizer.planning.milp import decompose
from optimizer.planning.milp.decompose import pooled_start, solve_decomposed, workload_plans
from optimizer.planning.milp.heuristic import (
    analytic_lower_bounds,
    consolidate,
    fleet_cost_usd,
    fleet_violations,
    placed_in_fleet,
    pooled_bound,
    pooled_fleet,
    single_option_plan,
)
from optimizer.planning.milp.problem import Demand, FleetProblem, Limits, Option, UnitTerms
from optimizer.planning.milp.solve import solve_fleet
from optimizer.results.check import check_plan
from optimizer.results.money import LinearTerms
from optimizer.results.plan_result import Provenance, SolveStatus
from tests.conftest import EXAMPLES
from workloads import load_plan, resolve_catalog

ZERO = LinearTerms(0.0, 0.0)


def unit(name: str, gpn: int, per_gpu: float, per_node: float, inventory: int | None = None) -> UnitTerms:
    return UnitTerms(name, gpn, LinearTerms(per_gpu, per_node), ZERO, ZERO, ZERO, inventory)


def hand_problem(inventory_b: int | None = None) -> FleetProblem:
    return FleetProblem(
        demands=(Demand("w1", (10.0,)), Demand("w2", (6.0,))),
        options=(Option("w1", "a1", "a", 1, (4.0,)), Option("w1", "b1", "b", 1, (4.0,)),
                 Option("w2", "a2", "a", 1, (3.0,)), Option("w2", "b2", "b", 1, (3.0,))),
        units={"a": unit("a", 8, 100.0, 800.0), "b": unit("b", 2, 180.0, 80.0, inventory_b)},
        limits=Limits(),
    )


def test_bounds_of_the_hand_worked_case_are_below_its_optimum():
    p = hand_problem()
    assert analytic_lower_bounds(p) == pytest.approx({"w1": 500.0, "w2": 400.0})  # 10·200/4, 6·200/3
    plans = workload_plans(p, time_limit_s=10, gap=1e-6)
    assert pooled_bound(p, plans) == pytest.approx(1000.0, rel=1e-5)
    optimum = solve_fleet(p, time_limit_s=10, gap=1e-9, bounds=False)
    assert optimum.objective_usd == pytest.approx(1140.0)
    assert pooled_bound(p, plans) <= optimum.objective_usd


def test_pooled_plans_share_servers():
    p = hand_problem()
    fleet, lower, cuts = pooled_start(p, time_limit_s=10, gap=1e-6)
    assert fleet.gpus == {"a": 5} and fleet.nodes == {"a": 1}
    assert fleet.objective_usd == pytest.approx(1300.0)
    assert lower == pytest.approx(1000.0, rel=1e-5)
    assert set(cuts) == {"w1", "w2"}
    assert fleet.routed_qps == {("w1", 0, "a1"): pytest.approx(10.0), ("w2", 0, "a2"): pytest.approx(6.0)}


def test_a_shared_row_the_pooled_fleet_breaks_keeps_it_out():
    p = hand_problem(inventory_b=4)
    on_b = {d.workload: single_option_plan(d, tuple(o for o in p.options if o.workload == d.workload and o.device == "b"),
                                           p.units) for d in p.demands}
    all_b = pooled_fleet(p, on_b)
    assert all_b.gpus == {"b": 5}
    assert fleet_violations(p, all_b) == ["b: 5 GPUs > inventory 4"]
    assert fleet_violations(hand_problem(), all_b) == []
    p = hand_problem(inventory_b=0)
    p = FleetProblem(p.demands, tuple(o for o in p.options if o.device == "b"), p.units)  # only b, none in stock
    fleet, _, _ = pooled_start(p, time_limit_s=10, gap=1e-6)
    assert fleet is None


def test_solve_decomposed_proves_the_hand_worked_optimum(monkeypatch):
    monkeypatch.setattr(decompose, "BOUNDS_MIN_OPTIONS", 0)
    sol = solve_decomposed(hand_problem(), time_limit_s=10, gap=1e-3)
    assert sol.status == SolveStatus.OPTIMAL
    assert sol.objective_usd == pytest.approx(1140.0)
    assert sol.bound_usd <= 1140.0 * (1 + 1e-9)
    sol = solve_decomposed(hand_problem(inventory_b=4), time_limit_s=10, gap=1e-3)
    assert sol.objective_usd == pytest.approx(1300.0)


def test_single_option_plan_keeps_replica_minimum_and_n_plus_one_spare():
    opts = (Option("w", "k", "d", 2, (4.0,)),)
    units = {"d": unit("d", 8, 10.0, 0.0)}
    # ⌈10/4⌉ = 3 replicas, + 1 spare with N+1
    assert single_option_plan(Demand("w", (10.0,), n_plus_one=True), opts, units).replicas == {("w", "k"): 4}
    assert single_option_plan(Demand("w", (1.0,), min_replicas=2), opts, units).replicas == {("w", "k"): 2}
    # per server: the spares are the replicas one 8-GPU server holds, 8 // 2 = 4
    demand = Demand("w", (10.0,), n_plus_one=True, per_server=True)
    assert single_option_plan(demand, opts, units).replicas == {("w", "k"): 7}


@pytest.fixture(scope="module")
def chat():
    plan = load_plan(EXAMPLES / "chat-fleet.yaml")
    cat = resolve_catalog(plan, load_catalog(), "chat")
    cset = candidates_mod.model_candidates(plan, cat, load_params(None))
    return plan, cset, fleet_problem(cset, plan)


def test_pooled_fleet_passes_the_solver_free_check_and_never_loses_to_one_device(chat, monkeypatch):
    plan, cset, problem = chat
    monkeypatch.setattr(decompose, "BOUNDS_MIN_OPTIONS", 0)  # the chat fleet (~100 options) decomposed
    fleet, lower, _ = pooled_start(problem, time_limit_s=30, gap=1e-3)
    assert fleet is not None and fleet.objective_usd >= lower
    result = assemble(plan, cset, fleet, [], None, Provenance(), problem)
    assert check_plan(result, plan) == []
    _, one = single_device_solution(problem, time_limit_s=10, gap=1e-3)
    sol = solve_decomposed(problem, time_limit_s=10, gap=1e-3, start=one)
    assert sol.objective_usd <= one.objective_usd * (1 + 1e-9)
    exact = solve_fleet(problem, time_limit_s=30, gap=1e-6)
    assert sol.bound_usd <= exact.objective_usd * (1 + 1e-9) <= sol.objective_usd * (1 + 1e-9)
    assert sol.objective_usd <= fleet.objective_usd * (1 + 1e-3)
    assert check_plan(assemble(plan, cset, sol, [], None, Provenance(), problem), plan) == []


def test_consolidation_empties_the_device_whose_server_is_mostly_idle():
    # pooled: 5 of a's 8 GPUs ($1,300; $300 of idle GPUs). Re-placing w1 beside w2 keeps a
    # (3 × $100 on the paid server vs 3 × $180 + 2 × $80 on b); emptying a puts both on b: $1,140.
    p = hand_problem()
    plans = workload_plans(p, time_limit_s=10, gap=1e-6)
    fleet = pooled_fleet(p, consolidate(p, plans, time_limit_s=10))
    assert fleet.gpus == {"b": 5} and fleet.objective_usd == pytest.approx(1140.0)
    assert fleet_cost_usd(p.units, fleet.gpus) == pytest.approx(1140.0)
    # with 4 b GPUs in stock w2 no longer fits on b: the fleet stays on a
    p = hand_problem(inventory_b=4)
    fleet = pooled_fleet(p, consolidate(p, workload_plans(p, time_limit_s=10, gap=1e-6), time_limit_s=10))
    assert fleet.gpus == {"a": 5} and fleet_violations(p, fleet) == []


def test_placed_in_fleet_counts_only_the_servers_it_adds():
    p = hand_problem()
    w2 = p.demands[1]
    # beside 3 GPUs of a (5 free on the paid server), w2's 2 replicas on a cost 2 × $100
    plan = placed_in_fleet(w2, p.options[2:], p.units, {"a": 3})
    assert plan.replicas == {("w2", "a2"): 2}
    # beside nothing, a costs 2 × 100 + 800 = $1,000 and b 2 × 180 + 80 = $440
    assert placed_in_fleet(w2, p.options[2:], p.units, {}).replicas == {("w2", "b2"): 2}
    assert placed_in_fleet(w2, p.options[2:], p.units, {}, frozenset({"a", "b"})) is None
