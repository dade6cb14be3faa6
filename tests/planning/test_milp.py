"""The fleet MILP on tiny instances whose optimum is worked out on paper: exact counts and cost."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import pulp
import pytest

from optimizer.planning.diagnose import binding_limits
from optimizer.planning.milp.build import build_model, replica_upper_bound
from optimizer.planning.milp.problem import Demand, FleetProblem, Limits, Option, UnitTerms
from optimizer.planning.milp.solve import classify_run, solve_fleet
from optimizer.results.money import (
    LinearTerms,
    MoneyAssumptions,
    UnitPrice,
    fleet_money,
    npv_factor,
    objective_terms,
    tco_terms,
)
from optimizer.results.plan_result import SolveStatus

ZERO = LinearTerms(0.0, 0.0)


def unit(name: str, obj_gpu: float, *, gpn: int = 1, obj_node: float = 0.0, capex_gpu: float = 0.0,
         power_gpu_kw: float = 0.0, inventory: int | None = None, allowed: bool = True) -> UnitTerms:
    return UnitTerms(name, gpn, LinearTerms(obj_gpu, obj_node), LinearTerms(capex_gpu, 0.0), ZERO,
                     LinearTerms(power_gpu_kw, 0.0), inventory, allowed)


def two_device_problem(**limits) -> FleetProblem:
    """4 req/s; A and B serve 1 req/s per GPU. A: $10 objective, $10 capex, 1 kW; B: $12, $5, 0.5 kW."""
    return FleetProblem(
        demands=(Demand("w", (4.0,)),),
        options=(Option("w", "a", "a", 1, (1.0,)), Option("w", "b", "b", 1, (1.0,))),
        units={"a": unit("a", 10, capex_gpu=10, power_gpu_kw=1.0), "b": unit("b", 12, capex_gpu=5, power_gpu_kw=0.5)},
        limits=Limits(**limits),
    )


def test_one_option_rounds_up_replicas():
    # 10 req/s at 3 req/s per replica: ⌈10/3⌉ = 4 replicas at $7 = $28.
    p = FleetProblem((Demand("w", (10.0,)),), (Option("w", "k", "d", 1, (3.0,)),), {"d": unit("d", 7)})
    s = solve_fleet(p)
    assert s.status == SolveStatus.OPTIMAL
    assert s.replicas == {("w", "k"): 4}
    assert s.objective_usd == pytest.approx(28.0)
    assert s.routed_qps == {("w", 0, "k"): pytest.approx(10.0)}


A100_CAPACITY = (20, 20, 40, 20)


def melange_problem(a10g_capacity: tuple[float, ...]) -> FleetProblem:
    """Mélange's toy example (see test_melange.py): 6, 3, 15, 6 req/s in four buckets; A10G $1.01/h, A100 $3.67/h."""
    return FleetProblem(
        (Demand("w", (6.0, 3.0, 15.0, 6.0)),),
        (Option("w", "a10g", "a10g", 1, a10g_capacity), Option("w", "a100", "a100", 1, A100_CAPACITY)),
        {"a10g": unit("a10g", 1.01), "a100": unit("a100", 3.67)},
    )


def test_continuous_shares_mix_buckets_exactly():
    # Mélange's toy example: 1 × A100 ($3.67) + 1 × A10G ($1.01) = $4.68/h (see test_melange.py).
    s = solve_fleet(melange_problem((2, 1, 5, 2)))
    assert s.replicas == {("w", "a10g"): 1, ("w", "a100"): 1}
    assert s.objective_usd == pytest.approx(4.68)
    assert s.routed_qps[("w", 2, "a10g")] == pytest.approx(5.0)


def test_a_huge_capacity_in_one_bucket_is_not_free():
    # Mélange's example with the A10G's bucket-0 capacity typed as 1e7 req/s. On paper: bucket 0 (6 req/s)
    # costs 6e-7 of an A10G, but any share of it needs one whole A10G; 1 × A100 alone needs 1.125 A100s,
    # so the optimum is still 1 × A10G + 1 × A100 = $4.68 (0 A10G: 2 × A100 = $7.34; 0 A100: 10 × A10G).
    # Without the routed row the solver sent bucket 0 to zero A10Gs: 1 × A100 at $3.67, overloaded.
    capacity = {"a10g": (1e7, 1, 5, 2), "a100": A100_CAPACITY}
    s = solve_fleet(melange_problem(capacity["a10g"]))
    assert s.replicas == {("w", "a10g"): 1, ("w", "a100"): 1}
    assert s.objective_usd == pytest.approx(4.68)
    load = {k: sum(q / capacity[k][b] for (w, b, key), q in s.routed_qps.items() if key == k) for k in capacity}
    assert load["a100"] <= 1 + 1e-6 and load["a10g"] <= 1 + 1e-6  # check_plan's REL_TOL
    assert sum(s.routed_qps.values()) == pytest.approx(30.0)


def test_a_tiny_capacity_in_one_bucket_does_not_break_the_solve():
    # Mélange's example with the A10G's bucket-0 capacity 1e-9 req/s: λ/μ = 6e9 in its capacity row. On paper the
    # optimum is unchanged, 1 × A10G + 1 × A100 = $4.68 (the A100 takes bucket 0 whole, as at capacity 0). With that
    # coefficient HiGHS called the plan infeasible (no start) and, started from 2 × A100, answered $7.34 "optimal".
    # The MILP's options (bucketing.problem_parts) carry a bucket only where λ/μ <= MAX_BUCKET_LOAD.
    from optimizer.planning.bucketing import problem_parts

    def candidate(key, caps):
        return SimpleNamespace(key=key, device=key, gpus=1, capacity_qps=caps, stage="colocated",
                               pair_link_bytes_s=None)
    wc = SimpleNamespace(workload=SimpleNamespace(name="w", min_replicas=1, redundancy="none"),
                         buckets=tuple(SimpleNamespace(qps=q) for q in (6.0, 3.0, 15.0, 6.0)),
                         kept=(candidate("a10g", (1e-9, 1, 5, 2)), candidate("a100", A100_CAPACITY)))
    demand, options = problem_parts(wc)
    assert options[0].capacity_qps == (0.0, 1, 5, 2)
    s = solve_fleet(FleetProblem((demand,), options, {"a10g": unit("a10g", 1.01), "a100": unit("a100", 3.67)}))
    assert s.replicas == {("w", "a10g"): 1, ("w", "a100"): 1}
    assert s.objective_usd == pytest.approx(4.68)


def test_whole_servers_with_overhead():
    # 5 replicas of a tp2 candidate = 10 GPUs on 8-GPU servers → 2 servers: 10·$100 + 2·$50 = $1,100.
    p = FleetProblem((Demand("w", (9.0,)),), (Option("w", "k", "d", 2, (2.0,)),),
                     {"d": unit("d", 100, gpn=8, obj_node=50)})
    s = solve_fleet(p)
    assert s.replicas == {("w", "k"): 5}
    assert (s.gpus, s.nodes) == ({"d": 10}, {"d": 2})
    assert s.objective_usd == pytest.approx(1100.0)


def test_servers_shared_between_workloads():
    # Two workloads of 3 GPUs each share one 8-GPU server: 6·$10 + 1·$100 = $160 (not two servers).
    p = FleetProblem(
        (Demand("a", (3.0,)), Demand("b", (3.0,))),
        (Option("a", "k", "d", 1, (1.0,)), Option("b", "k", "d", 1, (1.0,))),
        {"d": unit("d", 10, gpn=8, obj_node=100)},
    )
    s = solve_fleet(p)
    assert s.nodes == {"d": 1}
    assert s.objective_usd == pytest.approx(160.0)


def test_min_replicas():
    p = FleetProblem((Demand("w", (0.1,), min_replicas=3),), (Option("w", "k", "d", 1, (5.0,)),), {"d": unit("d", 1)})
    assert solve_fleet(p).replicas == {("w", "k"): 3}


def test_n_plus_one_keeps_a_spare_per_loaded_candidate():
    # 10 req/s at 5 per replica: 2 replicas; N+1 → 3.
    base = FleetProblem((Demand("w", (10.0,)),), (Option("w", "k", "d", 1, (5.0,)),), {"d": unit("d", 1)})
    assert solve_fleet(base).replicas == {("w", "k"): 2}
    n1 = replace(base, demands=(Demand("w", (10.0,), n_plus_one=True),))
    s = solve_fleet(n1)
    assert s.replicas == {("w", "k"): 3}
    assert replica_upper_bound(n1.demands[0], n1.options[0]) == 3


def test_n_plus_one_idle_candidates_need_no_spare():
    # A cheap option carries everything; the expensive one gets no replicas at all.
    p = FleetProblem(
        (Demand("w", (2.0,), n_plus_one=True),),
        (Option("w", "cheap", "c", 1, (2.0,)), Option("w", "dear", "x", 1, (2.0,))),
        {"c": unit("c", 1), "x": unit("x", 5)},
    )
    s = solve_fleet(p)
    assert s.replicas == {("w", "cheap"): 2}


def test_unconstrained_two_devices():
    s = solve_fleet(two_device_problem())
    assert s.replicas == {("w", "a"): 4}
    assert s.objective_usd == pytest.approx(40.0)


@pytest.mark.parametrize(
    ("limits", "replicas", "objective"),
    [
        # capex 10a + 5b ≤ 30 with a + b = 4 → a ≤ 2: 2A + 2B = $44.
        ({"capex_usd": 30.0}, {("w", "a"): 2, ("w", "b"): 2}, 44.0),
        # power a + 0.5b ≤ 3 with a + b = 4 → a ≤ 2: $44.
        ({"power_kw": 3.0}, {("w", "a"): 2, ("w", "b"): 2}, 44.0),
    ],
)
def test_budget_and_power_caps(limits, replicas, objective):
    s = solve_fleet(two_device_problem(**limits))
    assert s.replicas == replicas
    assert s.objective_usd == pytest.approx(objective)


def test_annual_budget():
    p = two_device_problem(annual_opex_usd=2.0)
    p = replace(p, units={k: replace(u, annual_opex_usd=LinearTerms(1.0 if k == "a" else 0.0, 0.0))
                          for k, u in p.units.items()})
    s = solve_fleet(p)
    assert s.replicas == {("w", "a"): 2, ("w", "b"): 2}


def test_inventory_and_allowed_devices():
    p = two_device_problem()
    inv = replace(p, units={**p.units, "a": replace(p.units["a"], inventory_gpus=1)})
    assert solve_fleet(inv).replicas == {("w", "a"): 1, ("w", "b"): 3}
    banned = replace(p, units={**p.units, "a": replace(p.units["a"], allowed=False)})
    s = solve_fleet(banned)
    assert s.replicas == {("w", "b"): 4}
    assert s.objective_usd == pytest.approx(48.0)


def test_infeasible_budget_is_diagnosed_with_smallest_value():
    p = two_device_problem(capex_usd=15.0)
    s = solve_fleet(p)
    assert s.status == SolveStatus.INFEASIBLE
    diags = binding_limits(p, time_limit_s=5, gap=1e-6)
    assert [d.code for d in diags] == ["binding_capex_budget"]
    assert "$20" in diags[0].message  # 4 × B at $5


def test_uncovered_bucket_is_infeasible_without_solving():
    p = FleetProblem((Demand("w", (1.0, 1.0)),), (Option("w", "k", "d", 1, (1.0, 0.0)),), {"d": unit("d", 1)})
    s = solve_fleet(p)
    assert s.status == SolveStatus.INFEASIBLE
    assert "bucket 1" in s.detail


def test_names_are_domain_keys():
    p = FleetProblem(
        (Demand("Chat-Bot.v2", (1.0,), n_plus_one=True), Demand("chat_bot_v2", (1.0,))),
        (Option("Chat-Bot.v2", "h100_sxm__fp8__tp4__pp1", "h100-sxm", 4, (3.0,)),
         Option("chat_bot_v2", "h100_sxm__fp8__tp4__pp1", "h100-sxm", 4, (3.0,))),
        {"h100-sxm": unit("h100-sxm", 1, gpn=8)},
        Limits(1e9, 1e9, 1e9),
    )
    model = build_model(p)
    names = [c.name for c in model.prob.constraints()] + [v.name for v in model.prob.variables()]
    assert all(re.fullmatch(r"[a-z0-9_]+", n) for n in names), names
    assert "capacity__chat_bot_v2__h100_sxm__fp8__tp4__pp1" in names
    assert "capacity__chat_bot_v2_2__h100_sxm__fp8__tp4__pp1" in names  # colliding slugs stay apart
    assert {"servers__h100_sxm", "capex_budget", "annual_budget", "max_power_kw"} <= set(names)


def test_time_limited_solve_is_feasible_not_optimal():
    # PuLP says "Optimal" for a solve stopped by its time limit; sol_status tells them apart.
    model = SimpleNamespace(prob=SimpleNamespace(status=pulp.LpStatusOptimal,
                                                 sol_status=pulp.LpSolutionIntegerFeasible))
    run = classify_run(model, "cbc", 1.0, 1.0)
    assert run.status == SolveStatus.FEASIBLE
    assert "time limit" in run.detail
    model.prob.sol_status = pulp.LpSolutionOptimal
    assert classify_run(model, "cbc", 1.0, 1.0).status == SolveStatus.OPTIMAL


def test_cbc_fallback_solves_the_same():
    s = solve_fleet(two_device_problem(capex_usd=30.0), solver="cbc")
    assert s.solver == "cbc"
    assert s.objective_usd == pytest.approx(44.0)


def test_solver_banner_does_not_reach_stdout():
    code = ("from optimizer.planning.milp.problem import Demand, FleetProblem, Option, UnitTerms\n"
            "from optimizer.planning.milp.solve import solve_fleet\n"
            "from optimizer.results.money import LinearTerms\n"
            "z = LinearTerms(0, 0)\n"
            "p = FleetProblem((Demand('w', (1.0,)),), (Option('w', 'k', 'd', 1, (1.0,)),),"
            " {'d': UnitTerms('d', 1, LinearTerms(1, 0), z, z, z)})\n"
            "print(solve_fleet(p).objective_usd)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == "1.0\n"


def test_money_terms_match_the_formulas():
    # One H100-like GPU ($30k, 700 W) in one server ($30k, 1.5 kW), tco over 3 years.
    a = MoneyAssumptions()
    price = UnitPrice(30000.0, 2.5, 700.0)
    m = fleet_money([(price, 8, 1)], a)
    capex = 8 * 30000 + 30000
    power_kw = (8 * 700 + 1500) / 1000
    annual_power = power_kw * 0.7 * 1.3 * 8760 * 0.10
    opex = annual_power + 0.05 * capex
    assert m.capex_usd == pytest.approx(capex)
    assert m.power_kw == pytest.approx(power_kw)
    assert m.annual_power_usd == pytest.approx(annual_power)
    assert m.tco_usd == pytest.approx(capex + 3 * opex)
    assert m.npv_usd == pytest.approx(capex + opex * npv_factor(a))
    assert m.objective_usd == pytest.approx(tco_terms(price, a).at(8, 1))
    cloud = MoneyAssumptions(objective="cloud")
    mc = fleet_money([(price, 8, 1)], cloud)
    assert (mc.capex_usd, mc.annual_power_usd) == (0.0, 0.0)
    assert mc.objective_usd == pytest.approx(3 * 8 * 2.5 * 8760)
    assert objective_terms(price, cloud).per_node == 0.0


def test_workload_bound_cuts_keep_the_optimum(monkeypatch):
    # Two workloads, two devices with server overhead: the cuts (each workload alone at
    # amortised server prices) must not cut off the joint optimum, only tighten the bound.
    from optimizer.planning.milp import problem as milp_problem
    from optimizer.planning.milp import solve as milp

    p = FleetProblem(
        (Demand("a", (3.0, 1.0), min_replicas=1), Demand("b", (5.0,), n_plus_one=True)),
        (Option("a", "x1", "x", 1, (1.0, 0.5)), Option("a", "y2", "y", 2, (3.0, 2.0)),
         Option("b", "x1", "x", 1, (2.0,)), Option("b", "y2", "y", 2, (4.5,))),
        {"x": unit("x", 10, gpn=4, obj_node=8), "y": unit("y", 9, gpn=8, obj_node=30)},
    )
    plain = solve_fleet(p, gap=0.0, bounds=False)
    monkeypatch.setattr(milp, "BOUNDS_MIN_OPTIONS", 0)
    cuts = milp.workload_lower_bounds(p, time_limit_s=5, gap=0.0)
    assert set(cuts) == {"a", "b"}
    # Each bound is at most the amortised cost of that workload's replicas in the optimum.
    amortised = {w: sum(milp_problem.amortised_usd_per_replica(p, o) * plain.replicas.get((w, o.key), 0)
                        for o in p.options if o.workload == w) for w in cuts}
    assert all(cuts[w] <= amortised[w] + 1e-6 for w in cuts)
    model = build_model(p, "objective", cuts)
    assert {"workload_bound__a", "workload_bound__b"} <= {c.name for c in model.prob.constraints()}
    cut = solve_fleet(p, gap=0.0)
    assert cut.objective_usd == pytest.approx(plain.objective_usd)


def test_infeasible_inventory_names_device_and_smallest_value():
    p = two_device_problem()
    p = replace(p, units={k: replace(u, inventory_gpus=1) for k, u in p.units.items()})
    assert solve_fleet(p).status == SolveStatus.INFEASIBLE
    diags = {d.code: d.message for d in binding_limits(p, time_limit_s=5, gap=1e-6)}
    # Either device alone needs 3 more GPUs: with the other's 1 GPU kept, 3 of its own.
    assert set(diags) == {"binding_inventory__a", "binding_inventory__b"}
    assert "inventory.a = 1 GPUs binds" in diags["binding_inventory__a"] and "is 3 GPUs" in diags["binding_inventory__a"]


def test_inventory_of_a_fixed_size_server_counts_the_whole_board():
    # 2 req/s, 1 req/s per GPU, an 8-GPU board bought whole: 2 GPUs serve, 8 are bought. An inventory of 4
    # cannot hold one board; the smallest inventory that does is 8 GPUs (was: "is 2 GPUs", the GPUs in use,
    # which the inventory of 4 already allows)
    board = replace(unit("h", 10, gpn=8), fixed_size=True, inventory_gpus=4)
    p = FleetProblem((Demand("w", (2.0,)),), (Option("w", "k", "h", 1, (1.0,)),), {"h": board})
    assert solve_fleet(p).status == SolveStatus.INFEASIBLE
    diags = {d.code: d.message for d in binding_limits(p, time_limit_s=5, gap=1e-6)}
    assert diags == {"binding_inventory__h": "inventory.h = 4 GPUs binds: the smallest value that makes the plan "
                                             "feasible (other limits kept) is 8 GPUs"}
    fits = solve_fleet(replace(p, units={"h": replace(board, inventory_gpus=8)}))
    assert fits.status == SolveStatus.OPTIMAL and fits.gpus == {"h": 2} and fits.nodes == {"h": 1}


def test_limits_binding_only_together():
    # 4 GPUs needed; capex ≥ 20 (all B) and power ≥ 2 kW (all B): capex 15 and power 1.5 each
    # stay infeasible when the other is dropped, so no single limit is named.
    p = two_device_problem(capex_usd=15.0, power_kw=1.5)
    diags = binding_limits(p, time_limit_s=5, gap=1e-6)
    assert [d.code for d in diags] == ["binding_combination"]
    assert "capex_usd >= $20 (now $15)" in diags[0].message
    assert "max_power_kw >= 2.00 kW (now 1.50 kW)" in diags[0].message


def test_a_bucket_only_a_trickle_serves_is_named_unservable():
    # One candidate with 1e-9 req/s in a bucket of 6 req/s: λ/μ = 6e9 > MAX_BUCKET_LOAD, so the MILP's options do not
    # carry it (carried_capacity) and the plan is infeasible. diagnose.unservable used to look at the raw capacity
    # (> 0: "served") and said nothing; it must name the bucket, the trickle and the replica count it would take.
    from optimizer.planning.diagnose import unservable

    cand = SimpleNamespace(key="a10g-tp1", device="a10g", gpus=1, capacity_qps=(1e-9,), stage="colocated",
                           pruned_reason=None, floor_p99_ms=None, limited_by=("tpot",))
    wc = SimpleNamespace(workload=SimpleNamespace(name="w", disaggregation="forbidden", is_batch=False, slo=None),
                         model="m", buckets=(SimpleNamespace(index=0, qps=6.0, fraction=1.0, label=""),),
                         kept=(cand,), candidates=(cand,))
    (d,) = unservable(SimpleNamespace(workloads=(wc,)))
    assert d.code == "workload_unservable"
    assert "1e-09 req/s per replica (a10g-tp1) against 6 req/s, more than 1,000,000 replicas" in d.message
    # A capacity the MILP carries (λ/μ = 6) is served: no error.
    cand.capacity_qps = (1.0,)
    assert unservable(SimpleNamespace(workloads=(wc,))) == []
