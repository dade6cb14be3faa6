"""The what-if workbook on hand-made scenario rows (no solving): words, deltas, charts, Monte Carlo."""

from __future__ import annotations

from openpyxl import load_workbook
from openpyxl.chart import BarChart, ScatterChart

from reports.whatif_workbook import describe_overrides, histogram, write_whatif_workbook


def _row(name, group="variant", objective=100_000.0, fleet=None, overrides=None, mode="min_cost", level=None):
    return {"name": name, "group": group, "mode": mode, "level": level, "overrides": overrides or {},
            "status": "optimal", "objective_usd": objective, "capex_usd": objective, "annual_opex_usd": 0.0,
            "tco_usd": objective, "power_kw": 1.0, "gpus_total": 8, "fleet": fleet or {"h100-sxm": 8},
            "demand_multiplier": (overrides or {}).get("demand_multiplier", 1.0), "served_qps": 1.0,
            "workloads": [{"name": "chat", "qps": 1.0, "met": True, "ttft_p99_ms": 900.0}]}


def test_overrides_in_words():
    assert describe_overrides({"devices.h200-sxm.purchase_usd": 24000}) == "h200-sxm price $24,000"
    assert describe_overrides({"workloads.chat.qps": 80}) == "chat rate (req/s) 80"
    assert describe_overrides({"budget.capex_usd": 3e6}) == "capex budget $3,000,000"
    assert describe_overrides({"demand_multiplier": 1.5}) == "all demand × 1.5"
    assert describe_overrides({}) == "nothing (the plan file as written)"


def test_histogram_counts_every_value():
    bins = histogram([1.0, 2.0, 2.5, 10.0], bins=3)
    assert [n for *_, n in bins] == [3, 0, 1]  # [1, 4), [4, 7), [7, 10]
    assert bins[0][0] == 1.0 and bins[-1][1] == 10.0


def test_scenarios_sheet_frontiers_and_monte_carlo(tmp_path):
    rows = [
        _row("base", "base"),
        _row("h200 @ $24,000", "h200", overrides={"devices.h200-sxm.purchase_usd": 24000}),
        _row("growth @ 1.5x", "growth", 150_000.0, {"h100-sxm": 16}, {"demand_multiplier": 1.5}, level=1.5),
        _row("growth @ 3x", "growth", 280_000.0, {"h100-sxm": 32}, {"demand_multiplier": 3.0}, level=3.0),
        *[_row(f"sample-{i}", "samples", 90_000.0 + 10_000 * i, overrides={"demand_multiplier": 1.0}, level=1.0)
          for i in range(1, 6)],
    ]
    summary = {"samples": 5, "seed": 0, "cost_p50_usd": 120_000.0, "cost_p90_usd": 136_000.0,
               "infeasible_samples": 0, "base_fleet_meets_slo_probability": 0.8}
    wb = load_workbook(write_whatif_workbook(rows, tmp_path / "w.xlsx", uncertainty=summary))
    ws = wb["Scenarios"]
    header = [c.value for c in ws[1]]
    assert header == ["scenario", "base", "h200 @ $24,000", "growth @ 1.5x", "growth @ 3x"]  # no samples here
    lines = {r[0].value: [c.value for c in r[1:]] for r in ws.iter_rows(min_row=2) if r[0].value}
    assert lines["what it changed"][1] == "h200-sxm price $24,000"
    assert lines["Δ objective vs base ($)"] == [0.0, 0.0, 50_000.0, 180_000.0]
    assert lines["Δ objective vs base (%)"][3] == 1.8
    assert "h200-sxm is still not chosen at this price" in lines["note"][1]
    for title in ("Budget frontier", "Demand frontier"):
        assert all(isinstance(c, ScatterChart) for c in wb[title]._charts)
    assert len(wb["Demand frontier"]._charts) == 1
    mc = wb["Monte Carlo"]
    values = {r[0].value: r[1].value for r in mc.iter_rows(min_row=3, max_row=8)}
    assert values["cost p50 ($)"] == 120_000.0 and values["probability the base fleet meets every SLO"] == 0.8
    assert [type(c) for c in mc._charts] == [BarChart]
    counts = [mc.cell(row=r, column=10).value for r in range(11, 21)]
    assert sum(counts) == 5


def _infeasible(name, **kw):
    """A scenario without a fleet as ScenarioResult.to_json writes it: zeros in every fleet figure."""
    r = _row(name, **kw)
    r.update(status="infeasible", objective_usd=0.0, capex_usd=0.0, annual_opex_usd=0.0, tco_usd=0.0, power_kw=0.0,
             gpus_total=0, fleet={}, served_qps=0.0)
    return r


def test_a_scenario_without_a_fleet_is_not_a_zero_dollar_plan(tmp_path):
    # an infeasible variant's zeros used to read as "Δ objective vs base -$100,000, -100 %", objective $0 and
    # demand served 1.00×; its fleet cells are now empty, and so is its Monte Carlo cost
    # a budget level that buys nothing (mode max_demand) does serve a known share: none, 0.00×
    poor = _infeasible("b @ $1,000", group="b", mode="max_demand", level=1000.0, overrides={"budget.capex_usd": 1000})
    poor["demand_multiplier"] = 0.0
    rows = [_row("base", "base"), _infeasible("tight budget", overrides={"budget.capex_usd": 100}), poor,
            _infeasible("sample-1", group="samples", overrides={"demand_multiplier": 1.0}, level=1.0)]
    wb = load_workbook(write_whatif_workbook(rows, tmp_path / "w.xlsx", uncertainty={"samples": 1, "seed": 0}))
    lines = {r[0].value: [c.value for c in r[1:]] for r in wb["Scenarios"].iter_rows(min_row=2) if r[0].value}
    assert lines["Δ objective vs base ($)"] == [0.0, None, None] and lines["Δ objective vs base (%)"] == [0.0, None, None]
    assert lines["status"] == ["optimal", "infeasible", "infeasible"]
    for label in ("objective ($)", "capex ($)", "TCO ($)", "power (kW)", "GPUs", "demand multiplier served",
                  "served demand (req/s)", "GPUs in use: h100-sxm"):
        assert lines[label][1] is None, label
    assert lines["objective ($)"][0] == 100_000.0 and lines["GPUs in use: h100-sxm"] == [8, None, None]
    assert lines["demand multiplier served"] == [1.0, None, 0.0] and lines["served demand (req/s)"] == [1.0, None, 0.0]
    assert lines["objective ($)"][2] is None
    mc = wb["Monte Carlo"]
    head = next(r for r in range(1, 20) if mc.cell(row=r, column=1).value == "sample")
    assert [mc.cell(row=head + 1, column=c).value for c in (1, 3, 4)] == ["sample-1", "infeasible", None]


def test_a_scenario_without_a_fleet_says_why_and_misses_no_slo(tmp_path):
    # Planner review 24: a power cap below every fleet read "status infeasible" and "chat: SLOs met: no", as if the
    # workload had missed its SLO; the binding limit was only in the scenario's plan diagnostics
    why = ("no fleet satisfies every constraint; max_power_kw = 14.00 kW binds: the smallest value that makes the "
           "plan feasible (other limits kept) is 14.30 kW")
    capped = {**_infeasible("cap-14", overrides={"max_power_kw": 14}), "no_fleet_reason": why}
    capped["workloads"] = [{"name": "chat", "qps": 1.0, "met": False, "ttft_p99_ms": None}]
    rows = [{**_row("base", "base"), "no_fleet_reason": None}, capped]
    wb = load_workbook(write_whatif_workbook(rows, tmp_path / "w.xlsx"))
    lines = {r[0].value: [c.value for c in r[1:]] for r in wb["Scenarios"].iter_rows(min_row=2) if r[0].value}
    assert lines["why no fleet"] == [None, why]
    assert lines["chat: SLOs met"] == ["yes", None]


def test_a_variant_with_another_objective_has_no_delta(tmp_path):
    # set: {objective: capex} on a tco base keeps the fleet; its objective is the capex ($380,000), the base's the
    # TCO ($471,198): the sheet showed "Δ objective vs base -$91,198 (-19.4 %)", a saving that is not one
    base = _row("base", "base", 471_198.0)
    base["objective"] = "tco"
    capex = _row("capex-objective", objective=380_000.0, overrides={"objective": "capex"})
    capex.update(objective="capex", tco_usd=471_198.0)
    longer = _row("longer", objective=531_997.0, overrides={"horizon_years": 5})
    longer["objective"] = "tco"
    wb = load_workbook(write_whatif_workbook([base, capex, longer], tmp_path / "w.xlsx"))
    lines = {r[0].value: [c.value for c in r[1:]] for r in wb["Scenarios"].iter_rows(min_row=2) if r[0].value}
    assert lines["Δ objective vs base ($)"] == [0.0, None, 60_799.0]
    assert lines["Δ objective vs base (%)"][1] is None
    assert lines["note"][1].startswith("objective capex, the base's tco")
    assert lines["TCO ($)"] == [471_198.0, 471_198.0, 531_997.0]


def test_the_fleet_sheet_of_a_scenario_without_a_fleet_shows_no_zero_dollars(tmp_path):
    wb = load_workbook(write_whatif_workbook([_row("base", "base"), _infeasible("tiny-power")], tmp_path / "w.xlsx"))
    ws = wb["Fleet tiny-power"]
    values = {ws.cell(row=r, column=1).value: ws.cell(row=r, column=2).value for r in range(2, 6)}
    assert values["status"] == "infeasible"
    assert "objective ($)" in values and values["objective ($)"] is None  # was 0, a $0 plan
    assert wb["Fleet base"].cell(row=5, column=2).value == 100_000.0


def test_the_scenarios_sheet_shows_the_simulator_check(tmp_path):
    # the what-if rows carry `simulated` and `simulation_verdict` (optimizer/whatif.py); the Scenarios sheet
    # words them as the plan workbook's Deployments sheet does, and a budget level reads "not simulated"
    rows = [_row("base", "base"), _row("at the edge"), _row("missed"),
            _row("b @ $3M", "b", mode="max_demand", level=3e6, overrides={"budget.capex_usd": 3e6})]
    for r, simulated, verdict in zip(rows, (True, True, True, False), ("met", "at_slo", "missed", None), strict=True):
        r.update(simulated=simulated, simulation_verdict=verdict)
    wb = load_workbook(write_whatif_workbook(rows, tmp_path / "w.xlsx"))
    lines = {r[0].value: [c.value for c in r[1:]] for r in wb["Scenarios"].iter_rows(min_row=2) if r[0].value}
    assert lines["Simulator check"] == ["met", "at the SLO, within the simulation's noise (not re-sized)",
                                        "MISSED beyond the simulation's noise", "not simulated"]


def test_older_whatif_rows_without_the_simulator_keys_still_make_a_workbook(tmp_path):
    # rows written before `simulated` existed: no line claims a check that was never recorded
    wb = load_workbook(write_whatif_workbook([_row("base", "base"), _row("v")], tmp_path / "w.xlsx"))
    labels = [r[0].value for r in wb["Scenarios"].iter_rows(min_row=2)]
    assert "objective ($)" in labels and "Simulator check" not in labels
    # a mix (an older row next to a newer one): the older one's cell is empty, not "not simulated"
    newer = _row("v")
    newer.update(simulated=True, simulation_verdict="met")
    wb = load_workbook(write_whatif_workbook([_row("base", "base"), newer], tmp_path / "w2.xlsx"))
    lines = {r[0].value: [c.value for c in r[1:]] for r in wb["Scenarios"].iter_rows(min_row=2) if r[0].value}
    assert lines["Simulator check"] == [None, "met"]


def test_the_scenarios_sheet_shows_the_power_cap_beside_the_power(tmp_path):
    # planner review 26: a budget level held by the plan's 90 kW power cap, not its budget, showed its power only
    rows = [_row("base", "base"), _row("b @ $2.4M", "b", mode="max_demand", level=2.4e6), _row("rent")]
    for r, cap in zip(rows, (90.0, 90.0, None), strict=True):
        r["max_power_kw"] = cap
    wb = load_workbook(write_whatif_workbook(rows, tmp_path / "w.xlsx"))
    lines = {r[0].value: [c.value for c in r[1:]] for r in wb["Scenarios"].iter_rows(min_row=2) if r[0].value}
    assert lines["power cap, max_power_kw (kW)"] == [90.0, 90.0, None]
    wb = load_workbook(write_whatif_workbook([_row("base", "base")], tmp_path / "w2.xlsx"))
    assert "power cap, max_power_kw (kW)" not in [r[0].value for r in wb["Scenarios"].iter_rows(min_row=2)]
