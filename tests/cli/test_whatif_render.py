"""The what-if table of ``gpuplan whatif`` (``cli.whatif_cmd._render``): a scenario without a fleet shows no figures
of one. ``ScenarioResult.to_json`` writes zeros there; the table printed them as "0 | 0 | 1.00× (0.0 req/s) | 0.0",
a $0 plan serving the base demand."""

from cli.common import stdout
from cli.whatif_cmd import _render


def _row(name, status, objective, served_qps, power_kw, fleet, mode="min_cost", multiplier=1.0):
    return {"name": name, "group": "variant", "mode": mode, "status": status, "objective_usd": objective,
            "capex_usd": objective, "fleet": fleet, "demand_multiplier": multiplier, "served_qps": served_qps,
            "power_kw": power_kw,
            "workloads": [{"name": "chat", "met": status == "optimal", "ttft_p99_ms": 900.0 if fleet else None,
                           "slo_ttft_p99_ms": 2000.0}]}


def test_an_infeasible_scenario_has_no_cost_demand_or_power():
    rows = [_row("base", "optimal", 471_198.0, 246.8, 14.3, {"b200": 7}),
            _row("tight", "infeasible", 0.0, 0.0, 0.0, {}),
            _row("b @ $1,000", "infeasible", 0.0, 0.0, 0.0, {}, mode="max_demand", multiplier=0.0)]
    with stdout.capture() as cap:
        _render(rows, None)
    lines = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
             for line in cap.get().splitlines() if line.startswith("│")}
    assert lines["base"][:3] == ["optimal", "471,198", "471,198"] and lines["base"][4] == "1.00× (246.8 req/s)"
    assert lines["base"][-1] == "14.3"
    tight = lines["tight"]
    assert tight[:3] == ["infeasible", "—", "—"] and tight[4] == "—" and tight[-1] == "—"
    poor = lines["b @ $1,000"]  # a budget level that buys nothing: it serves 0.00× of the demand, a figure
    assert poor[:3] == ["infeasible", "—", "—"] and poor[4] == "0.00× (0.0 req/s)" and poor[-1] == "—"


def test_scenarios_not_simulated_are_named_under_the_table():
    """A budget level's fleet rests on the analytic capacities (``simulated`` false): the table names it, and not a
    min-cost scenario the simulator checked, nor an infeasible level (no fleet to check)."""
    rows = [{**_row("base", "optimal", 471_198.0, 246.8, 14.3, {"b200": 7}), "simulated": True},
            {**_row("b @ $400,000", "optimal", 471_198.0, 292.7, 14.3, {"b200": 8}, mode="max_demand"),
             "simulated": False},
            {**_row("b @ $1,000", "infeasible", 0.0, 0.0, 0.0, {}, mode="max_demand", multiplier=0.0),
             "simulated": False}]
    with stdout.capture() as cap:
        _render(rows, None)
    (line,) = [x for x in cap.get().splitlines() if x.startswith("not simulated")]
    assert line.endswith(": b @ $400,000")



def test_a_scenario_the_simulator_finds_over_an_slo_is_named_under_the_table():
    """A min-cost scenario is simulated and re-sized as `gpuplan optimize` does, but a re-size can end with a miss
    (``tests/test_whatif.py``: the re-sized fleet over the scenario's budget, 'the plan is kept as solved'). Its
    workloads' `met` is the analytic model's, so the table said "ok" only; the row's verdict names it under the
    table, and not a scenario within the simulation's noise (which optimize does not call a miss either)."""
    rows = [{**_row("base", "optimal", 471_198.0, 246.8, 14.3, {"b200": 7}), "simulated": True,
             "simulation_verdict": "at_slo"},
            {**_row("capped", "optimal", 300_000.0, 246.8, 10.0, {"b200": 5}), "simulated": True,
             "simulation_verdict": "missed"}]
    with stdout.capture() as cap:
        _render(rows, None)
    (line,) = [x for x in cap.get().splitlines() if x.startswith("simulated over an SLO")]
    assert line.endswith(": capped")


def test_a_scenario_without_a_fleet_names_the_binding_limit_not_a_missed_slo():
    """Planner review 24: a power-cap variant below every fleet printed "chat MISSED" in the p99 column, as if the
    workload had missed its SLO, and nothing of the power cap that binds (`gpuplan optimize` names it)."""
    why = ("no fleet satisfies every constraint; max_power_kw = 14.00 kW binds: the smallest value that makes the "
           "plan feasible (other limits kept) is 14.30 kW")
    rows = [_row("base", "optimal", 471_198.0, 246.8, 14.3, {"b200": 7}),
            {**_row("cap-14", "infeasible", 0.0, 0.0, 0.0, {}), "no_fleet_reason": why}]
    with stdout.capture() as cap:
        _render(rows, None)
    text = " ".join(" ".join(c.strip() for c in line.split("│")) for line in cap.get().splitlines())
    assert "MISSED" not in text
    assert "no fleet: no fleet satisfies every constraint; max_power_kw = 14.00 kW binds" in " ".join(text.split())
    assert "14.30 kW" in text


def test_the_power_column_shows_the_power_cap_that_holds_a_budget_level():
    """Planner review 26: a $2.4 M budget level served 3.36× with $2.02 M of capex, as $2.0 M served 3.35×, and nothing
    said why: its fleet drew 86.6 kW under the plan's 90 kW cap (one more board, 14.3 kW, would pass it)."""
    rows = [{**_row("base", "optimal", 1_004_928.0, 80.0, 38.5, {"b200": 8}), "max_power_kw": 90.0},
            {**_row("budget @ $2,400,000", "optimal", 2_587_004.0, 268.6, 86.6, {"b200": 32}, mode="max_demand",
                    multiplier=3.358), "max_power_kw": 90.0},
            {**_row("rent", "optimal", 900_000.0, 80.0, 52.3, {"b200": 8}), "max_power_kw": None}]
    with stdout.capture() as cap:
        _render(rows, None)
    text = cap.get()
    lines = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
             for line in text.splitlines() if line.startswith("│")}
    assert lines["budget @ $2,400,000"][-1] == "86.6 / 90.0" and lines["base"][-1] == "38.5 / 90.0"
    assert lines["rent"][-1] == "52.3"
    assert "power kW (/ cap)" in text
