"""Properties of the optimum (hypothesis): more demand never costs less, more budget never costs
more, a tighter SLO never costs less, and the reported totals are the sum of their parts.

Random instances go through the whole pipeline — capacity table → optimize_plan → PlanResult —
and every result is checked by check_plan. Solves use gap 0 so that the optima compared are exact.
"""

from __future__ import annotations

from dataclasses import replace
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import load_catalog
from optimizer.optimize import optimize_plan
from optimizer.planning.capacity_table import parse_capacity_table
from optimizer.planning.milp.problem import Demand, FleetProblem, Limits, Option, UnitTerms
from optimizer.planning.milp.solve import solve_fleet
from optimizer.planning.solver_options import SolverOptions
from optimizer.results.check import check_plan
from optimizer.results.money import LinearTerms
from optimizer.results.plan_result import SolveStatus
from workloads import parse_plan, resolve_catalog

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CATALOG = load_catalog()
HEADER = ("workload,unit,gpus,gpus_per_node,cost_usd_per_hour,input_bucket,output_bucket,max_request_rate_qps,"
          "bucket_fraction,total_request_rate_qps")


@st.composite
def instances(draw):
    """1-2 workloads, 1-3 buckets each, 2-3 units (1-4 GPUs, 1-8 per server) with random capacities."""
    n_units = draw(st.integers(2, 3))
    units = []
    for u in range(n_units):
        gpus = draw(st.sampled_from([1, 2, 4]))
        per_node = draw(st.sampled_from([g for g in (1, 2, 4, 8) if g % gpus == 0 or gpus % g == 0]))
        units.append((f"U{u}", gpus, max(per_node, gpus), draw(st.floats(0.2, 10.0).map(lambda x: round(x, 2)))))
    workloads = []
    for w in range(draw(st.integers(1, 2))):
        n_b = draw(st.integers(1, 3))
        weights = [draw(st.integers(1, 5)) for _ in range(n_b)]
        fractions = [x / sum(weights) for x in weights]
        rate = draw(st.floats(0.5, 40.0).map(lambda x: round(x, 3)))
        caps = {u[0]: [draw(st.sampled_from([0.0, 0.5, 1.0, 2.5, 4.0, 9.0])) for _ in range(n_b)] for u in units}
        for b in range(n_b):  # every bucket servable by someone
            if not any(caps[u[0]][b] for u in units):
                caps[units[0][0]][b] = 1.0
        workloads.append({"name": f"w{w}", "rate": rate, "fractions": fractions, "caps": caps,
                          "min_replicas": draw(st.integers(0, 2)), "n_plus_one": draw(st.booleans())})
    return {"units": units, "workloads": workloads}


def table_text(inst) -> str:
    rows = [HEADER]
    for w in inst["workloads"]:
        for name, gpus, per_node, cost in inst["units"]:
            for b, f in enumerate(w["fractions"]):
                rows.append(f"{w['name']},{name},{gpus},{per_node},{cost},{b},0,{w['caps'][name][b]},{f!r},{w['rate']!r}")
    return "\n".join(rows) + "\n"


def plan_of(inst, annual_usd: float | None = None):
    return parse_plan({
        "objective": "cloud", "horizon_years": 2, "budget": {"annual_usd": annual_usd} if annual_usd else {},
        "workloads": [{"name": w["name"], "model": "llama-2-7b", "qps": w["rate"], "prompt_tokens": 100,
                       "output_tokens": 50, "slo": {"tpot_p99_ms": 100}, "min_replicas": w["min_replicas"],
                       "redundancy": "n+1" if w["n_plus_one"] else "none"} for w in inst["workloads"]],
    }, "property")


def solve(inst, annual_usd: float | None = None):
    plan = plan_of(inst, annual_usd)
    table = parse_capacity_table(table_text(inst), "property.csv")
    result = optimize_plan(plan, CATALOG, capacity_table=table, options=SolverOptions(gap=0.0), compare_single_device=False)
    assert check_plan(result, plan) == []
    return result


def cost(result) -> float:
    return result.objective_usd if result.status.has_plan else float("inf")


@SETTINGS
@given(inst=instances(), which=st.integers(0, 1), factor=st.floats(1.0, 3.0))
def test_raising_qps_never_lowers_cost(inst, which, factor):
    base = solve(inst)
    assert base.status == SolveStatus.OPTIMAL
    w = inst["workloads"][which % len(inst["workloads"])]
    more = {**inst, "workloads": [({**x, "rate": round(x["rate"] * factor, 3)} if x is w else x)
                                  for x in inst["workloads"]]}
    assert cost(solve(more)) >= cost(base) * (1 - 1e-9)


@SETTINGS
@given(inst=instances(), tight=st.floats(0.3, 1.0), extra=st.floats(1.0, 2.0))
def test_raising_a_budget_never_raises_cost(inst, tight, extra):
    free = solve(inst)
    budget = free.annual_opex_usd * tight
    low, high = solve(inst, budget), solve(inst, budget * extra)
    assert cost(high) <= cost(low) * (1 + 1e-9)
    assert cost(high) >= cost(free) * (1 - 1e-9)
    for r in (low, high):
        if r.status.has_plan:
            assert r.annual_opex_usd <= budget * extra * (1 + 1e-9)
        else:
            assert any(d.code.startswith("binding_") for d in r.diagnostics)


@SETTINGS
@given(inst=instances())
def test_reported_total_is_the_sum_of_its_parts(inst):
    r = solve(inst)
    a = r.assumptions
    assert r.tco_usd == pytest.approx(r.capex_usd + a.horizon_years * r.annual_opex_usd)
    assert r.annual_opex_usd == pytest.approx(r.annual_power_usd + r.annual_maintenance_usd + r.annual_cloud_usd)
    assert r.objective_usd == pytest.approx(a.horizon_years * r.annual_cloud_usd)
    per_gpu_hour = {u[0]: u[3] / u[1] for u in inst["units"]}
    assert r.annual_cloud_usd == pytest.approx(sum(f.gpus * per_gpu_hour[f.device] for f in r.fleet) * 8760)
    assert r.gpus_total == sum(d.replicas * d.tp * d.pp for d in r.deployments)


@st.composite
def server_problems(draw):
    """Synthetic tco-like problems with servers, capex and power: limits on every family."""
    units = {}
    for name in ("a", "b"):
        units[name] = UnitTerms(
            name, draw(st.sampled_from([1, 4, 8])),
            LinearTerms(draw(st.floats(1, 50)), draw(st.floats(0, 100))),
            LinearTerms(draw(st.floats(1, 50)), draw(st.floats(0, 100))),
            LinearTerms(draw(st.floats(0, 5)), 0.0), LinearTerms(draw(st.floats(0.1, 1.0)), 0.5),
        )
    opts = tuple(Option("w", f"{d}_{g}", d, g, (draw(st.floats(0.5, 10)), draw(st.floats(0.5, 10))))
                 for d in units for g in (1, 2))
    demand = Demand("w", (draw(st.floats(0.1, 30)), draw(st.floats(0.1, 30))), draw(st.integers(0, 3)))
    return FleetProblem((demand,), opts, units)


@SETTINGS
@given(p=server_problems(), tight=st.floats(0.3, 1.0), extra=st.floats(1.0, 3.0),
       family=st.sampled_from(["capex_usd", "power_kw", "annual_opex_usd"]))
def test_raising_capex_or_power_limit_never_raises_cost(p, tight, extra, family):
    free = solve_fleet(p, gap=0.0)
    assert free.status == SolveStatus.OPTIMAL
    terms = {"capex_usd": "capex_usd", "power_kw": "power_kw", "annual_opex_usd": "annual_opex_usd"}[family]
    used = sum(getattr(p.units[d], terms).at(g, free.nodes[d]) for d, g in free.gpus.items())
    low = solve_fleet(replace(p, limits=Limits(**{family: used * tight})), gap=0.0)
    high = solve_fleet(replace(p, limits=Limits(**{family: used * tight * extra})), gap=0.0)
    c_low = low.objective_usd if low.status.has_plan else float("inf")
    c_high = high.objective_usd if high.status.has_plan else float("inf")
    assert c_high <= c_low * (1 + 1e-9) + 1e-9
    assert c_high >= free.objective_usd * (1 - 1e-9) - 1e-9


def slo_plan(ttft_ms: float, tpot_ms: float):
    plan = parse_plan({"allowed_devices": ["h100-sxm", "l40s"], "workloads": [{
        "name": "w", "model": "llama-3.1-8b", "qps": 20, "prompt_tokens": 512, "output_tokens": 128,
        "slo": {"ttft_p99_ms": ttft_ms, "tpot_p99_ms": tpot_ms}, "precisions": ["fp8"]}]}, "slo")
    return plan, resolve_catalog(plan, CATALOG, "slo")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ttft=st.floats(100, 3000), tpot=st.floats(15, 150), shrink=st.floats(0.3, 1.0),
       which=st.sampled_from(["ttft", "tpot"]))
def test_tightening_an_slo_never_lowers_cost(ttft, tpot, shrink, which):
    loose_plan, catalog = slo_plan(ttft, tpot)
    tight_plan, _ = slo_plan(ttft * shrink if which == "ttft" else ttft, tpot * shrink if which == "tpot" else tpot)
    loose = optimize_plan(loose_plan, catalog, options=SolverOptions(gap=0.0), compare_single_device=False)
    tight = optimize_plan(tight_plan, catalog, options=SolverOptions(gap=0.0), compare_single_device=False)
    assert loose.status.has_plan, loose.status_detail  # the property says nothing about two infeasible plans
    assert check_plan(loose, loose_plan) == [] and check_plan(tight, tight_plan) == []
    assert cost(tight) >= cost(loose) * (1 - 1e-9)


@st.composite
def two_workload_problems(draw):
    base = draw(server_problems())
    second = tuple(replace(o, workload="v", capacity_qps=(draw(st.floats(0.5, 10)), draw(st.floats(0.5, 10))))
                   for o in base.options)
    demand = Demand("v", (draw(st.floats(0.1, 30)), draw(st.floats(0.1, 30))), draw(st.integers(0, 2)),
                    draw(st.booleans()))
    return replace(base, demands=base.demands + (demand,), options=base.options + second)


@SETTINGS
@given(p=two_workload_problems())
def test_bound_cuts_never_change_the_optimum(p):
    import optimizer.planning.milp.solve as milp  # the module that reads BOUNDS_MIN_OPTIONS

    plain = solve_fleet(p, gap=0.0, bounds=False)
    with patch.object(milp, "BOUNDS_MIN_OPTIONS", 0):  # hypothesis: no function-scoped monkeypatch
        cut = solve_fleet(p, gap=0.0)
    assert cut.objective_usd == pytest.approx(plain.objective_usd, rel=1e-7, abs=1e-6)
