"""What-if: frontier properties, base = plain optimize, same results for any backend or worker count."""

from __future__ import annotations

import json

import pytest
import yaml

from catalog import load_catalog
from optimizer.planning.milp.problem import Demand, FleetProblem, Limits, Option, UnitTerms
from optimizer.planning.solver_options import SolverOptions
from optimizer.results.money import LinearTerms
from optimizer.results.plan_result import Deployment, PlanResult, SolveStatus, WorkloadResult
from optimizer.results.provenance import Fidelity
from optimizer.whatif_demand import bisect, round_down, solve_max_share
from optimizer.whatif_uncertainty import fixed_fleet_meets, model_error_draws, summarise_uncertainty
from tests.conftest import EXAMPLES
from workloads.scenarios import load_scenarios

SMALL = {
    "base": str(EXAMPLES / "chat-fleet.yaml"),
    "variants": [{"name": "traffic-2x", "set": {"workloads.chat.qps": 80}}],
    "sweeps": [{"name": "budget", "kind": "budget", "from": 400000, "to": 1600000, "steps": 3},
               {"name": "growth", "kind": "demand", "multipliers": [1, 2]}],
    "uncertainty": {"demand": {"sigma": 0.3}},
}


def _strip(result):
    """A scenario result's JSON row without its timings (the simulator check's too), the only figures allowed to
    differ between runs.

    Every scenario's candidate set comes from the first scenario with the same candidate key
    in every process and on every backend (``optimizer.whatif.candidate_sources``), so the
    split-or-whole notes (``planned_whole``) must be identical too, with the fleet, replicas,
    routing and money.
    """
    row = json.loads(json.dumps(result if isinstance(result, dict) else result.to_json()))
    for r in [row, row.get("plan", {})]:
        for key in ("solve_seconds", "created_utc", "timings_s"):
            r.pop(key, None)
    if row.get("plan", {}).get("verification"):
        row["plan"]["verification"].pop("seconds")  # the simulator check's wall time
    return row


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("whatif") / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    _, _, scenarios = load_scenarios(path, load_catalog())
    from optimizer.whatif import ScenarioOptions, run_scenarios

    rows = [r.to_json() for r in run_scenarios(scenarios, ScenarioOptions(), workers=1)]
    return path, scenarios, rows


def test_base_equals_plain_optimize(small):
    _, scenarios, rows = small
    from optimizer.models.params import load_params
    from optimizer.optimize import optimize_plan
    from workloads import resolve_catalog

    plan = scenarios[0].plan
    direct = optimize_plan(plan, resolve_catalog(plan, load_catalog(), "x"), load_params(), verify=None).to_json()
    assert rows[0]["name"] == "base"
    assert rows[0]["objective_usd"] == pytest.approx(direct["objective_usd"], rel=1e-9)
    assert rows[0]["fleet"] == {r["device"]: r["gpus"] for r in direct["fleet"]}


def test_served_demand_never_falls_as_budget_rises(small):
    _, _, rows = small
    budget = [r for r in rows if r["group"] == "budget"]
    assert [r["level"] for r in budget] == sorted(r["level"] for r in budget)
    served = [r["demand_multiplier"] for r in budget]
    assert all(b >= a for a, b in zip(served, served[1:], strict=False)), served
    for r in budget:
        if r["status"] in ("optimal", "feasible"):
            assert r["capex_usd"] <= r["level"] * (1 + 1e-6)


def test_cost_never_falls_as_demand_rises(small):
    _, _, rows = small
    growth = sorted((r["level"], r["objective_usd"]) for r in rows if r["group"] == "growth")
    costs = [c for _, c in growth]
    assert all(b >= a - 1e-6 for a, b in zip(costs, costs[1:], strict=False)), growth
    base = next(r for r in rows if r["name"] == "base")
    assert growth[0][1] == pytest.approx(base["objective_usd"], rel=1e-9)
    x2 = next(r for r in rows if r["group"] == "growth" and r["level"] == 2)
    assert x2["demand_multiplier"] == 2
    assert x2["served_qps"] == pytest.approx(2 * base["served_qps"], rel=1e-9)


def test_same_results_with_two_workers(small):
    _, scenarios, rows = small
    from optimizer.whatif import ScenarioOptions, run_scenarios

    subset = scenarios[:4]  # base, a variant and two budget levels: both modes, two processes
    rows2 = run_scenarios(subset, ScenarioOptions(), workers=2)
    assert [_strip(r) for r in rows2] == [_strip(r) for r in rows[:4]]


def test_ray_backend_same_results(small):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'gpuplan[ray]'); Ray backend untested")
    _, scenarios, rows = small
    from optimizer.whatif import ScenarioOptions, run_scenarios

    subset = scenarios[:3]
    rows_ray = run_scenarios(subset, ScenarioOptions(), backend="ray")
    assert [_strip(r) for r in rows_ray] == [_strip(r) for r in rows[:3]]


def test_cli_outputs(run_cli, tmp_path):
    path = tmp_path / "cli.yaml"
    path.write_text(yaml.safe_dump({**{k: v for k, v in SMALL.items() if k != "sweeps"},
                                    "sweeps": [{"name": "growth", "kind": "demand", "multipliers": [1, 2]}]}))
    out, js, png = tmp_path / "c.xlsx", tmp_path / "c.json", tmp_path / "f.png"
    r = run_cli("whatif", str(path), "--out", str(out), "--json", str(js), "--plot", str(png),
                "--workers", "1", "--samples", "3")
    assert r.code == 0, r.stderr
    data = json.loads(js.read_text())
    assert [s["name"] for s in data["scenarios"]][:2] == ["base", "traffic-2x"]
    u = data["uncertainty"]
    assert u["samples"] == 3 and 0.0 <= u["base_fleet_meets_slo_probability"] <= 1.0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from openpyxl import load_workbook

    wb = load_workbook(out)
    assert wb.sheetnames[:3] == ["Scenarios", "Budget frontier", "Demand frontier"]
    assert wb["Scenarios"]["B1"].value == "base"
    # the rows the command writes carry `simulated`: the Scenarios sheet words the simulator's check of each fleet
    checks = next([c.value for c in r[1:]] for r in wb["Scenarios"].iter_rows(min_row=2) if r[0].value == "Simulator check")
    assert checks[0] in ("met", "at the SLO, within the simulation's noise (not re-sized)",
                         "MISSED beyond the simulation's noise")  # the base is a min-cost scenario: simulated


def test_comparison_workbook_keeps_text_as_text(tmp_path):
    """No user string becomes a formula in the what-if workbook (reports.xl.Sheet.put)."""
    from openpyxl import load_workbook

    from reports.whatif_workbook import write_whatif_workbook

    evil = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "@SUM(A1)"]
    row = {"name": "base", "group": "base", "mode": "min_cost", "level": None, "overrides": {},
           "status": "optimal", "objective_usd": 1.0, "capex_usd": 1.0, "annual_opex_usd": 0.0, "tco_usd": 1.0,
           "power_kw": 1.0, "gpus_total": 1, "fleet": {evil[1]: 1}, "demand_multiplier": 1.0, "served_qps": 1.0,
           "workloads": [{"name": n, "qps": 1.0, "met": True, "ttft_p99_ms": 1.0} for n in evil]}
    path = write_whatif_workbook([row], tmp_path / "w.xlsx")
    wb = load_workbook(path)
    texts = [c for ws in wb.worksheets for r in ws.iter_rows() for c in r if isinstance(c.value, str)]
    risky = [c for c in texts if c.value[:1] in "=+@"]
    assert len(risky) >= 4
    assert all(c.data_type == "s" for c in risky)


def test_shipped_example(run_cli, tmp_path):
    """examples/whatif-budget.yaml end to end: every scenario solved, frontiers monotone."""
    js = tmp_path / "whatif.json"
    r = run_cli("whatif", str(EXAMPLES / "whatif-budget.yaml"), "--json", str(js), "--workers", "2")
    assert r.code == 0, r.stderr
    rows = json.loads(js.read_text())["scenarios"]
    assert [r["name"] for r in rows[:3]] == ["base", "traffic-2x", "h200-price-drop"]
    assert all(r["status"] in ("optimal", "feasible") for r in rows)
    budget = [r["demand_multiplier"] for r in rows if r["group"] == "budget"]
    assert len(budget) == 5 and budget == sorted(budget)
    assert budget[0] < 1 < budget[-1]  # $100k cannot carry today's demand; $500k carries more
    growth = [r["objective_usd"] for r in rows if r["group"] == "growth"]
    assert growth == sorted(growth)


@pytest.mark.parametrize("headroom, expected", [(1.0, 0.5986), (1.5, 0.8146)])
def test_monte_carlo_model_error_by_fidelity_class(headroom, expected):
    """A fleet with capacity = headroom × load on one device of band [0.523, 2.617]:
    log factor ~ N(μ = 0.15695, σ = 0.62826), so P(meets) = Φ((μ − ln(1/headroom))/σ):
    Φ(0.2498) = 0.5986 at 1.0×, Φ(0.8951) = 0.8146 at 1.5×."""
    band = Fidelity("datasheet-only", "", 0.523, 2.617)
    workload = WorkloadResult("w", "m", 10.0, True, "online", None, None, None, None, None, None, 0.0, 0.0, None)
    base = PlanResult(SolveStatus.OPTIMAL, "", "tco", workloads=(workload,),
                      deployments=(Deployment("w", "k", "mi355x", "fp8", 1, 1, 1, 10.0, 10.0 * headroom,
                                              fidelity=band),))
    n = 4000
    draws = model_error_draws(base, n, seed=0)
    meets = fixed_fleet_meets(base, [1.0] * n, draws)
    assert sum(meets) / n == pytest.approx(expected, abs=0.025)
    assert all(fixed_fleet_meets(base, [1.0] * 3))  # the point model: always met
    summary = summarise_uncertainty(base, [(1.0, base)] * n, seed=0)
    assert summary.base_fleet_meets_slo_probability == sum(meets) / n
    assert summary.base_fleet_meets_slo_probability_without_model_error == 1.0


def _two_devices(n_plus_one: bool = False, capex_usd: float = 35.0) -> FleetProblem:
    """10 req/s of one workload; x: $10 per GPU, 2 req/s per replica; y: $20 per GPU, 5 req/s; 1 GPU each."""
    def unit(device: str, usd: float) -> UnitTerms:
        zero = LinearTerms(0.0, 0.0)
        return UnitTerms(device, 1, LinearTerms(usd, 0.0), LinearTerms(usd, 0.0), zero, zero)

    return FleetProblem((Demand("w", (10.0,), n_plus_one=n_plus_one),),
                        (Option("w", "x1", "x", 1, (2.0,)), Option("w", "y1", "y", 1, (5.0,))),
                        {"x": unit("x", 10.0), "y": unit("y", 20.0)}, Limits(capex_usd=capex_usd))


@pytest.mark.parametrize("n_plus_one, capex_usd, share", [
    (False, 35.0, 0.7),   # $35 buys 1 y + 1 x (7 req/s); 3 x carry 6, 2 y cost $40
    (True, 35.0, 0.4),    # N+1: every candidate carrying load keeps a spare: 3 x carry 2 × 2 req/s
    (False, 1000.0, 1.0),  # the budget is not binding: the whole demand, t capped at 1
    (False, 5.0, 0.0),    # $5 buys no replica
])
def test_max_share_milp_on_paper(n_plus_one, capex_usd, share):
    status, t, fleet = solve_max_share(_two_devices(n_plus_one, capex_usd), SolverOptions())
    assert status == SolveStatus.OPTIMAL
    assert t == pytest.approx(share, abs=1e-7)
    if share > 0:
        assert sum(fleet.routed_qps.values()) == pytest.approx(10.0)  # routed at the full rate: shares sum to 1


def test_round_down_and_bisection_agree_with_the_milp():
    assert round_down(9.45694) == 9.456 and round_down(0.27689) == 0.2768 and round_down(1024.0) == 1024.0
    served = 7.0  # the first case above, as a multiplier of 1 req/s: feasible up to 7
    found = bisect(lambda m: m <= served)
    assert served * (1 - 0.02) <= found <= served


def test_whatif_json_keys_are_the_documented_ones():
    """docs/plan-json.md "What-if JSON" lists exactly the keys `gpuplan whatif --json` writes (the top level, a
    scenario row, its workloads, the uncertainty summary); ``plan`` is the plan result, documented above it."""
    from optimizer.whatif import ScenarioResult, WhatifStudy
    from optimizer.whatif_uncertainty import UncertaintySummary
    from tests.conftest import REPO
    from tests.doc_keys import block_starting, json_keys, parse_key_block

    _, _, scenarios = load_scenarios(EXAMPLES / "whatif-budget.yaml", load_catalog())
    workload = WorkloadResult("chat", "llama-3.1-70b", 40.0, True, "online", 600.0, 50.0, None, 2000.0, 200.0, None,
                              0.0, 0.0, None)
    result = PlanResult(SolveStatus.OPTIMAL, "", "tco", workloads=(workload,),
                        deployments=(Deployment("chat", "k", "b200", "fp8", 1, 1, 4, 40.0, 47.0),))
    summary = UncertaintySummary(samples=2, seed=0, cost_p50_usd=1.0, cost_p90_usd=1.0, infeasible_samples=0,
                                 base_fleet_meets_slo_probability=1.0,
                                 base_fleet_meets_slo_probability_without_model_error=1.0)
    data = json.loads(json.dumps(WhatifStudy("w.yaml", (ScenarioResult(scenarios[0], result),), summary).to_json()))
    documented = parse_key_block(block_starting((REPO / "docs" / "plan-json.md").read_text(encoding="utf-8"), "file"))
    written = json_keys(data)
    for path in ("", "scenarios", "scenarios.workloads", "uncertainty"):
        assert written[path] == documented[path], path


# Fixed 32,768-token prompts on llama-3.1-8b fp8 / L40S: the analytic TPOT p99 there is still ~20 % under the
# simulator's (16 prefill chunks stall every decoding request: docs/planner-review-23.md F5, N2), so
# `gpuplan optimize` re-sizes the analytic fleet of 9 replicas ($123,958) to 11 ($137,132) after simulating it. A
# what-if scenario at the same inputs is the same plan: before planner-23 whatif never simulated, and reported the
# 9-replica fleet, and its cost, as meeting the SLOs (a RAG plan at 2x its rate: $793,853 where optimize planned
# $942,396).
LONG_PROMPTS = {
    "name": "long", "objective": "tco", "horizon_years": 3, "allowed_devices": ["l40s"],
    "workloads": [{"name": "long", "model": "llama-3.1-8b", "qps": 1, "prompt_tokens": 32768, "output_tokens": 256,
                   "slo": {"ttft_p99_ms": 10000, "tpot_p99_ms": 60}, "precisions": ["fp8"]}],
}


def test_whatif_scenarios_are_simulated_as_optimize_plans_them(tmp_path):
    from optimizer.models.params import load_params
    from optimizer.optimize import optimize_plan
    from optimizer.whatif import ScenarioOptions, run_scenarios
    from workloads import resolve_catalog

    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({"plan": LONG_PROMPTS,
                                    "sweeps": [{"name": "budget", "kind": "budget", "from": 100000, "to": 200000,
                                                "steps": 2}]}))
    _, _, scenarios = load_scenarios(path, load_catalog())
    rows = [r.to_json() for r in run_scenarios(scenarios, ScenarioOptions(), workers=1)]
    plan = scenarios[0].plan
    catalog = resolve_catalog(plan, load_catalog(), "x")
    checked = optimize_plan(plan, catalog, load_params(), verify=None).to_json()  # what `gpuplan optimize` plans
    unchecked = optimize_plan(plan, catalog, load_params(), verify=False).to_json()
    assert unchecked["fleet"][0]["gpus"] == 9 and checked["fleet"][0]["gpus"] == 11  # the simulator re-sizes
    base = rows[0]
    assert base["fleet"] == {"l40s": 11}
    assert base["objective_usd"] == pytest.approx(checked["objective_usd"], rel=1e-9)
    assert base["objective_usd"] > unchecked["objective_usd"] * 1.05
    assert base["simulated"] and base["plan"]["verification"] is not None
    assert [d["replicas"] for d in base["plan"]["deployments"]] == [d["replicas"] for d in checked["deployments"]]
    # a budget level's most served demand rests on the analytic capacities: it says so
    levels = [r for r in rows if r["mode"] == "max_demand"]
    assert levels and all(not r["simulated"] for r in levels)
    assert all(any(d["code"] == "scenario_not_simulated" for d in r["plan"]["diagnostics"]) for r in levels
               if r["status"] != "infeasible")


def test_a_scenario_whose_simulated_miss_cannot_be_re_sized_says_so(tmp_path):
    """LONG_PROMPTS under a capex budget of the analytic fleet ($95,000 × 1.001): the simulator finds TPOT p99 71 ms
    against 60 and re-sizing leaves no fleet within the budget, so the plan is kept as solved with verdict "missed"
    (`gpuplan optimize`: "SLO MISSED"), while its workloads' analytic `met` stays true. Before, the what-if row said
    only `simulated: true`, and the table "long ok"."""
    from cli.common import stdout
    from cli.whatif_cmd import _render
    from optimizer.whatif import ScenarioOptions, run_scenarios

    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({"plan": {**LONG_PROMPTS, "budget": {"capex_usd": 95_095}}}))
    _, _, scenarios = load_scenarios(path, load_catalog())
    (row,) = [r.to_json(with_plan=False) for r in run_scenarios(scenarios, ScenarioOptions(), workers=1)]
    assert row["fleet"] == {"l40s": 9} and row["workloads"][0]["met"] is True
    assert row["simulated"] and row["simulation_verdict"] == "missed"
    with stdout.capture() as cap:
        _render([row], None)
    assert any(x.startswith("simulated over an SLO") and x.endswith(": base") for x in cap.get().splitlines())


# one L40S card in an 8-slot PCIe server at 1 req/s (1.85 kW with its server)
ONE_L40S = {"name": "small", "allowed_devices": ["l40s"],
            "workloads": [{"name": "chat", "model": "llama-3.1-8b", "qps": 1, "prompt_tokens": 512,
                           "output_tokens": 128, "slo": {"tpot_p99_ms": 100}, "precisions": ["fp8"]}]}


def test_a_scenario_without_a_fleet_carries_the_binding_limit(tmp_path):
    """Planner review 24: DeepSeek-R1 under max_power_kw 14 (one B200 board draws 14.3 kW, one MI355X 14.7): the
    what-if row said only "no fleet satisfies every constraint"; `gpuplan optimize` adds the limit that binds and the
    smallest value that makes the plan feasible. Here one L40S card in an 8-slot PCIe server at 1 req/s: the
    cheapest fleet is also the least power, so the smallest feasible cap is the base fleet's power."""
    from optimizer.whatif import ScenarioOptions, run_scenarios

    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({"plan": ONE_L40S, "variants": [{"name": "cap", "set": {"max_power_kw": 0.1}}]}))
    _, _, scenarios = load_scenarios(path, load_catalog())
    base, cap = [r.to_json(with_plan=False) for r in run_scenarios(scenarios, ScenarioOptions(), workers=1)]
    assert base["no_fleet_reason"] is None and base["fleet"] == {"l40s": 1}
    assert cap["status"] == "infeasible"
    assert cap["no_fleet_reason"] == (
        "no fleet satisfies every constraint; max_power_kw = 0.10 kW binds: the smallest value that makes the plan "
        f"feasible (other limits kept) is {base['power_kw']:.2f} kW")
    # the row names the scenario's power cap (planner review 26), none for the base
    assert cap["max_power_kw"] == 0.1 and base["max_power_kw"] is None


def test_a_budget_sweep_serves_a_workload_whose_length_tail_the_context_window_cuts(tmp_path):
    """Planner review 24: a budget sweep on qwen3-235b-a22b (context 40,960 tokens) with prompts {2000, p99 6000} and
    outputs {500, p99 2000} ended in "internal error … workload 'qwen' changed its model, lengths, …" (exit 70): the
    candidates are computed on the lengths cut to the context window (``fit_plan_windows``: a lognormal's far tail),
    the budget level's MILP rebased them on the plan's uncut lengths. Here qwen3-8b (context 40,960 too) on L40S."""
    from optimizer.whatif import ScenarioOptions, run_scenarios

    plan = {"name": "tail", "allowed_devices": ["l40s"],
            "workloads": [{"name": "qwen", "model": "qwen3-8b", "qps": 2, "prompt_tokens": {"mean": 2000, "p99": 6000},
                           "output_tokens": {"mean": 500, "p99": 2000}, "slo": {"tpot_p99_ms": 100},
                           "precisions": ["fp8"]}]}
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({"plan": plan, "sweeps": [{"name": "budget", "kind": "budget",
                                                              "from": 50000, "to": 100000, "steps": 2}]}))
    _, _, scenarios = load_scenarios(path, load_catalog())
    assert scenarios[0].plan.workloads[0].prompt_tokens.max is None  # the plan as written: no cut of its own
    base, *levels = [r.to_json(with_plan=False) for r in run_scenarios(scenarios, ScenarioOptions(), workers=1)]
    assert base["status"] == "optimal" and len(levels) == 2
    assert all(r["status"] == "optimal" and r["demand_multiplier"] > 0 for r in levels)
    assert levels[0]["demand_multiplier"] < levels[1]["demand_multiplier"]


@pytest.mark.parametrize(("variant_cap_kw", "code"), [(0.2, 1), (100.0, 0)])
def test_whatif_exits_1_when_no_scenario_has_a_fleet(run_cli, tmp_path, variant_cap_kw, code):
    """Hostile round 24 W40/W41: every scenario infeasible exited 0, and a script read success. The rule: exit 1
    when no scenario of the file (the base included; Monte Carlo draws are no scenario of it) has a fleet, after
    writing the files, whose rows say why. One L40S in its server (1.85 kW) under max_power_kw 0.1 has no fleet; a
    variant at 0.2 kW has none either (exit 1), one at 100 kW has (exit 0: a comparison with a plan in it)."""
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({"plan": {**ONE_L40S, "max_power_kw": 0.1},
                                    "variants": [{"name": "cap", "set": {"max_power_kw": variant_cap_kw}}]}))
    js, out, png = tmp_path / "w.json", tmp_path / "w.xlsx", tmp_path / "w.png"
    r = run_cli("whatif", str(path), "--json", str(js), "--out", str(out), "--plot", str(png), "--workers", "1")
    assert r.code == code, r.stderr
    statuses = [s["status"] for s in json.loads(js.read_text())["scenarios"]]  # written either way
    assert out.stat().st_size > 0 and png.read_bytes()[:4] == b"\x89PNG"
    if code:
        assert statuses == ["infeasible", "infeasible"]
        assert r.stderr.count("\n") == 1 and "no scenario has a fleet (all 2, the base included" in r.stderr
        assert "max_power_kw = 0.10 kW binds" in r.stderr  # the base's reason, as its row says it
    else:
        assert statuses == ["infeasible", "optimal"] and "error" not in r.stderr
