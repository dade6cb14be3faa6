"""The two LPs that let the sensitivity analysis skip exact re-solves (issue 13), and the routing LP
that spreads a plan's load by capacity, on problems worked on paper.

- :func:`~optimizer.planning.milp.routing.lowest_capacity_factor`: one workload of 10 req/s
  (one bucket) on 2 replicas of ``a`` (4 req/s each) and 1 replica of ``b`` (5 req/s). At a
  factor f on a's capacity the fleet carries 8·f + 5 req/s, so it fits while f ≥ 5/8 = 0.625,
  whatever the routing; with N+1 (one spare replica per candidate that carries load) a keeps
  1 replica of room (4·f) and b none, so it never fits: b's replica is its own spare.
- :func:`~optimizer.planning.milp.relax.cheapest_with_device_bound`: the same 10 req/s; device
  ``rack`` is bought by the 8-GPU server at $800,000 (100 req/s per 1-GPU replica) and device
  ``card`` at $1,000 per GPU (1 req/s per 1-GPU replica). The optimum is 10 cards, $10,000;
  every fleet that buys the rack pays at least one server, $800,000, which the LP with
  m[rack] ≥ 1 and the routed-needs-a-server rows finds exactly; under a 1 kW power cap a rack
  server (8 × 0.7 kW) cannot be bought at all: the LP is infeasible (bound ∞).
"""

from __future__ import annotations

import math

import pytest

from optimizer.planning.milp.problem import (
    Demand,
    FleetProblem,
    FleetSolution,
    Limits,
    Option,
    UnitTerms,
)
from optimizer.planning.milp.relax import cheapest_with_device_bound
from optimizer.planning.milp.routing import FACTOR_GRID, balanced_routing, lowest_capacity_factor
from optimizer.planning.milp.solve import solve_fleet
from optimizer.results.money import LinearTerms
from optimizer.results.plan_result import SolveStatus

ZERO = LinearTerms(0.0, 0.0)


def _unit(device: str, per_gpu_usd: float, per_node_usd: float = 0.0, kw_per_node: float = 0.0) -> UnitTerms:
    """A fixed-size platform (per_node_usd > 0) carries its GPUs' money and power per server."""
    usd = LinearTerms(per_gpu_usd, per_node_usd)
    return UnitTerms(device, 8, usd, usd, ZERO, LinearTerms(0.0, kw_per_node), fixed_size=per_node_usd > 0)


def _routing_problem(n_plus_one: bool = False) -> FleetProblem:
    return FleetProblem((Demand("w", (10.0,), n_plus_one=n_plus_one),),
                        (Option("w", "a__tp1", "a", 1, (4.0,)), Option("w", "b__tp1", "b", 1, (5.0,))),
                        {"a": _unit("a", 100.0), "b": _unit("b", 100.0)})


def _plan(replicas: dict[str, int]) -> FleetSolution:
    return FleetSolution(SolveStatus.OPTIMAL, "", replicas={("w", k): n for k, n in replicas.items()})


def test_the_fleet_fits_down_to_the_factor_worked_on_paper():
    f = lowest_capacity_factor(_routing_problem(), _plan({"a__tp1": 2, "b__tp1": 1}), "a")
    assert 0.625 <= f <= 0.625 + 2 * FACTOR_GRID


def test_a_device_the_routing_can_avoid_can_lose_all_its_capacity():
    """3 replicas of b carry 15 ≥ 10 req/s alone: a's factor may fall to 0."""
    assert lowest_capacity_factor(_routing_problem(), _plan({"a__tp1": 2, "b__tp1": 3}), "a") == pytest.approx(0.0, abs=2 * FACTOR_GRID)


def test_replicas_that_cannot_carry_the_load_have_no_factor():
    assert lowest_capacity_factor(_routing_problem(), _plan({"a__tp1": 1, "b__tp1": 1}), "a") is None  # 9 < 10 req/s
    assert lowest_capacity_factor(_routing_problem(n_plus_one=True), _plan({"a__tp1": 2, "b__tp1": 1}), "a") is None


def test_a_replica_outside_the_problem_has_no_factor():
    assert lowest_capacity_factor(_routing_problem(), _plan({"c__tp1": 3}), "a") is None


def test_balanced_routing_loads_every_replica_to_the_same_share():
    """2 × a (4 req/s) and 3 × b (5 req/s) carry 23 req/s; 10 req/s routed by capacity puts each at
    10/23 of it: a 8·10/23 = 3.4783, b 15·10/23 = 6.5217 req/s (the MILP may route 10 to b alone)."""
    got = balanced_routing(_routing_problem(), _plan({"a__tp1": 2, "b__tp1": 3})).routed_qps
    assert got == pytest.approx({("w", 0, "a__tp1"): 80 / 23, ("w", 0, "b__tp1"): 150 / 23}, rel=1e-6)


def test_balanced_routing_balances_each_workload_on_its_own():
    """A second workload ``v`` of 3.9 req/s on its only option, 1 × c (4 req/s), sits at 0.975 of it
    whatever the routing; w's replicas are their own, so w is still routed at 10/23 of its capacity
    (one factor shared by both workloads would let w's routing stop anywhere under 0.975)."""
    base = _routing_problem()
    problem = FleetProblem((*base.demands, Demand("v", (3.9,))), (*base.options, Option("v", "c__tp1", "c", 1, (4.0,))),
                           {**base.units, "c": _unit("c", 100.0)})
    sol = FleetSolution(SolveStatus.OPTIMAL, "", replicas={("w", "a__tp1"): 2, ("w", "b__tp1"): 3, ("v", "c__tp1"): 1},
                        routed_qps={("w", 0, "b__tp1"): 10.0, ("v", 0, "c__tp1"): 3.9})
    got = balanced_routing(problem, sol).routed_qps
    assert got == pytest.approx({("w", 0, "a__tp1"): 80 / 23, ("w", 0, "b__tp1"): 150 / 23, ("v", 0, "c__tp1"): 3.9},
                                rel=1e-6)


def test_balanced_routing_keeps_a_plan_it_cannot_route():
    sol = _plan({"a__tp1": 1, "b__tp1": 1})  # 9 < 10 req/s: no routing fits
    assert balanced_routing(_routing_problem(), sol) is sol


def _rack_problem(power_kw: float | None = None) -> FleetProblem:
    return FleetProblem((Demand("w", (10.0,)),),
                        (Option("w", "rack__tp1", "rack", 1, (100.0,)), Option("w", "card__tp1", "card", 1, (1.0,))),
                        {"rack": _unit("rack", 0.0, 800_000.0, kw_per_node=8 * 0.7), "card": _unit("card", 1_000.0)},
                        Limits(power_kw=power_kw))


def test_a_fleet_that_buys_the_rack_pays_a_whole_server():
    assert solve_fleet(_rack_problem()).objective_usd == pytest.approx(10_000.0, rel=1e-6)
    assert cheapest_with_device_bound(_rack_problem(), "rack") == pytest.approx(800_000.0, rel=1e-6)
    assert cheapest_with_device_bound(_rack_problem(), "card") == pytest.approx(10_000.0, rel=1e-6)


def test_a_device_no_fleet_can_buy_has_an_infinite_bound():
    assert cheapest_with_device_bound(_rack_problem(power_kw=1.0), "rack") == math.inf
    assert cheapest_with_device_bound(_rack_problem(), "tpu") is None


def test_two_buckets_route_to_where_the_device_is_least_needed():
    """10 + 10 req/s in two buckets on 4 replicas of ``a`` (4 and 2 req/s) and 2 of ``b`` (5 and 5):
    b's 2 replicas carry bucket 1 whole (load 10/5 = 2), where a is slowest, so a carries bucket 0:
    10/4 = 2.5 replicas of load ≤ 4·f, f = 0.625 (any share of bucket 0 moved to b frees 2.5 of a's
    load per unit but costs 5 of it in bucket 1)."""
    problem = FleetProblem((Demand("w", (10.0, 10.0)),),
                           (Option("w", "a__tp1", "a", 1, (4.0, 2.0)), Option("w", "b__tp1", "b", 1, (5.0, 5.0))),
                           {"a": _unit("a", 100.0), "b": _unit("b", 100.0)})
    f = lowest_capacity_factor(problem, _plan({"a__tp1": 4, "b__tp1": 2}), "a")
    assert 0.625 <= f <= 0.625 + 2 * FACTOR_GRID
