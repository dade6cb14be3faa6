"""Decisions finance can trust (issue 15): provenance, sensitivity, confidence, verification, headroom.

The break-even tests re-solve independently of the analysis that reported the figure: the
fleet must change 2 % beyond it and stay 2 % inside it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from catalog import load_catalog
from optimizer.models.fidelity import (
    DATASHEET_ONLY_BAND,
    SAME_GENERATION_BAND,
    capacity_factor_at,
    fidelity_of,
    measured_band,
)
from optimizer.models.params import FitRecord, load_params
from optimizer.optimize import optimize_plan
from optimizer.planning.candidate_set import fleet_problem
from optimizer.planning.candidates import model_candidates
from optimizer.planning.headroom import demand_factor
from optimizer.planning.milp.solve import solve_fleet
from optimizer.planning.sensitivity import analyse, fleet_of, with_capacity, with_price
from optimizer.planning.solver_options import SolverOptions
from optimizer.results.money import MoneyAssumptions
from tests.conftest import EXAMPLES
from workloads import load_plan, parse_plan, resolve_catalog

# The residual-band cases below were worked out on the v1 calibration (no leave-out bands):
# pinned to it, they test that fallback whatever the shipped fit measures.
V1_PARAMS = Path(__file__).resolve().parent.parent / "data" / "calibration-v1.yaml"

CHAT8B = {"name": "chat8b", "model": "llama-3.1-8b", "qps": 90, "prompt_tokens": {"mean": 1024, "p99": 4096},
          "output_tokens": {"mean": 256, "p99": 1024}, "slo": {"ttft_p99_ms": 1000, "tpot_p99_ms": 100},
          "precisions": ["bf16", "fp8"], "min_replicas": 1}


def _plan(devices: list[str], workload: dict = CHAT8B, **top):
    plan = parse_plan({"name": "t", "allowed_devices": devices, **top, "workloads": [workload]}, "t")
    return plan, resolve_catalog(plan, load_catalog(), "t")


@pytest.fixture(scope="module")
def small():
    """A one-workload plan over four devices: candidates, MILP data, base solution, analysis."""
    plan, cat = _plan(["h100-sxm", "mi300x", "mi355x", "l40s"])
    params = load_params(None)
    cset = model_candidates(plan, cat, params)
    problem = fleet_problem(cset, plan)
    base = solve_fleet(problem, **SolverOptions().solve_kwargs)
    fid = {d: fidelity_of(cat.devices[d], params, cat.devices) for d in problem.units}
    return plan, cat, cset, problem, base, analyse(plan, cset, problem, base, fid)


def _fleet(sol) -> dict:
    return {d: g for d, (g, _) in fleet_of(sol).items()}


def test_break_even_price_is_honest(small):
    """2 % above the reported break-even price the optimal fleet changes; 2 % below it does not."""
    plan, cat, cset, problem, base, s = small
    a = MoneyAssumptions.from_plan(plan)
    for d in s.devices:
        assert d.break_even_price is not None and d.break_even_price > d.price
        above = solve_fleet(with_price(problem, cset, a, d.device, d.price_field, 1.02 * d.break_even_price))
        below = solve_fleet(with_price(problem, cset, a, d.device, d.price_field, 0.98 * d.break_even_price))
        assert _fleet(above) != _fleet(base)
        assert _fleet(below) == _fleet(base)


def test_break_even_price_holds_through_the_front_door(small):
    """The same claim through a plan's devices: override and a full optimize (fresh candidates)."""
    plan, cat, cset, problem, base, s = small
    d = s.devices[0]
    for factor, same in ((1.02, False), (0.98, True)):
        quoted = plan.model_copy(update={"devices": {d.device: {d.price_field: factor * d.break_even_price}}})
        r = optimize_plan(quoted, resolve_catalog(quoted, load_catalog(), "t"), compare_single_device=False)
        assert ({f.device: f.gpus for f in r.fleet} == _fleet(base)) is same
        assert {f.device: f.price_basis for f in r.fleet}.get(d.device) in (None, "quoted")


def test_break_even_capacity_factor_is_honest(small):
    """Below 0.98 × the reported factor the fleet changes; at 1.02 × (still < 1) it does not."""
    plan, cat, cset, problem, base, s = small
    for d in s.devices:
        f = d.break_even_capacity_factor
        assert f is not None and 0 < f <= 1
        assert _fleet(solve_fleet(with_capacity(problem, {d.device: 0.98 * f}))) != _fleet(base)
        if 1.02 * f <= 1:
            assert _fleet(solve_fleet(with_capacity(problem, {d.device: 1.02 * f}))) == _fleet(base)


def test_runner_up_avoids_the_main_device_and_costs_more(small):
    *_, base, s = small
    ru = s.runner_up
    assert ru.excluded_device in _fleet(base)
    assert ru.excluded_device not in {f.device for f in ru.fleet}
    assert ru.objective_usd >= s.base_objective_usd
    assert ru.difference_usd == pytest.approx(ru.objective_usd - s.base_objective_usd)


def test_tornado_brackets_the_base(small):
    """Every input's two ends bracket or touch the base objective; rows sorted by swing."""
    *_, s = small
    inputs = [t.input for t in s.tornado]
    assert any(i.startswith("electricity") for i in inputs) and any(i.startswith("demand") for i in inputs)
    assert any(i.startswith("performance") for i in inputs)
    for t in s.tornado:
        lo, hi = t.low_usd, t.high_usd
        if lo is not None and hi is not None:
            assert min(lo, hi) <= s.base_objective_usd * (1 + 1e-9) <= max(lo, hi) * (1 + 1e-9) + 1e-6
    swings = [t.swing_usd for t in s.tornado]
    assert swings == sorted(swings, reverse=True)


def test_fidelity_classes_and_bands():
    """h100-sxm measured (p90 |error| 34.37 % over 217 rows → [1/1.3437, 1/0.6563]); h200 same
    generation; mi355x datasheet-only, with nested bands."""
    cat, params = load_catalog(), load_params(V1_PARAMS)
    h100 = fidelity_of(cat.devices["h100-sxm"], params, cat.devices)
    h200 = fidelity_of(cat.devices["h200-sxm"], params, cat.devices)
    mi355 = fidelity_of(cat.devices["mi355x"], params, cat.devices)
    assert (h100.class_, h200.class_, mi355.class_) == ("measured", "same-generation", "datasheet-only")
    assert h100.low_factor == pytest.approx(1 / 1.3437, rel=1e-3)
    assert h100.high_factor == pytest.approx(1 / (1 - 0.3437), rel=1e-3)
    assert h200.low_factor == pytest.approx(min(SAME_GENERATION_BAND[0], h100.low_factor))
    assert h200.high_factor == pytest.approx(max(SAME_GENERATION_BAND[1], h100.high_factor))
    assert mi355.low_factor == pytest.approx(min(DATASHEET_ONLY_BAND[0], SAME_GENERATION_BAND[0]))
    assert mi355.low_factor <= h200.low_factor < h100.low_factor
    assert mi355.high_factor >= h200.high_factor >= h100.high_factor
    assert capacity_factor_at(mi355, 0.9) == pytest.approx(mi355.low_factor, rel=1e-9)
    assert capacity_factor_at(h100, 0.5) == 1.0  # never above the point estimate


def test_user_params_make_their_devices_measured():
    """A calibration fitted on the user's MI300X rows (p90 |error| 12 %) makes it measured: its in-sample band
    [1/1.12, 1/0.88] = [0.8929, 1.1364] widened to MEASURED_BAND_FLOOR, [0.767, 1.275], instead of the (wider)
    datasheet-only one."""
    cat = load_catalog()
    shipped = load_params(V1_PARAMS)
    fit = FitRecord(data_file="mine.csv", rows_used=40, method="test", median_abs_pct_error=5.0,
                    p90_abs_pct_error=12.0, by_device={"mi300x": {"n": 40, "median_abs_pct_error": 5.0,
                                                                   "p90_abs_pct_error": 12.0}})
    mine = shipped.model_copy(update={"fit": fit})
    before = fidelity_of(cat.devices["mi300x"], shipped, cat.devices)
    after = fidelity_of(cat.devices["mi300x"], mine, cat.devices)
    assert before.class_ == "datasheet-only" and after.class_ == "measured"
    assert measured_band(12.0) == pytest.approx((1 / 1.12, 1 / 0.88))
    assert (after.low_factor, after.high_factor) == pytest.approx((0.767, 1.275))
    assert after.high_factor / after.low_factor < before.high_factor / before.low_factor


@pytest.mark.parametrize("device, low", [("h100-sxm", 1 / 1.3437),
                                         ("mi300x", min(DATASHEET_ONLY_BAND[0], SAME_GENERATION_BAND[0]))])
def test_confidence_buys_headroom_by_fidelity(device, low):
    """At confidence 0.9 every deployment's point capacity covers its load 1/low times over
    (h100-sxm measured: ≥ 1.344×; mi300x datasheet-only: ≥ 1/0.392 = 2.55×), and never costs less."""
    plan, cat = _plan([device])
    point = optimize_plan(plan, cat, compare_single_device=False)
    sure = optimize_plan(plan.model_copy(update={"confidence": 0.9}), cat, compare_single_device=False)
    assert sure.objective_usd >= point.objective_usd - 1e-6
    assert sure.headroom.confidence == 0.9 and point.headroom.confidence is None
    for d in sure.deployments:
        point_capacity = d.capacity_qps / low  # capacities were derated by exactly `low`
        assert point_capacity / d.qps >= 1 / low * (1 - 1e-9)
    assert sum(d.capacity_qps for d in sure.deployments) / low >= 1 / low * plan.workloads[0].qps * (1 - 1e-9)


def test_confidence_headroom_is_visibly_larger_on_datasheet_devices():
    """The same workload: GPUs at 0.9 / GPUs at the point estimate is larger on a datasheet-only
    device (mi355x: no CDNA 4 measurement) than on a measured one (h100-sxm)."""
    ratios = {}
    for device in ("h100-sxm", "mi355x"):
        plan, cat = _plan([device], {**CHAT8B, "qps": 400})
        point = optimize_plan(plan, cat, compare_single_device=False)
        sure = optimize_plan(plan.model_copy(update={"confidence": 0.9}), cat, compare_single_device=False)
        ratios[device] = sure.gpus_total / point.gpus_total
    assert ratios["mi355x"] > ratios["h100-sxm"] >= 1.0
    assert ratios["mi355x"] >= 1.5


def test_demand_quantile_and_target_utilization():
    """demand_quantile 0.9 at σ 0.25 sizes for exp(0.25 · 1.2816) = 1.3776 × the rate;
    target_utilization 0.8 keeps routed load ≤ 0.8 × SLO capacity."""
    plan, cat = _plan(["h100-sxm"], demand_quantile=0.9, demand_sigma=0.25, target_utilization=0.8)
    assert demand_factor(plan) == pytest.approx(math.exp(0.25 * 1.2815516), rel=1e-6)
    r = optimize_plan(plan, cat, compare_single_device=False)
    base, _ = _plan(["h100-sxm"])
    b = optimize_plan(base, cat, compare_single_device=False)
    assert r.headroom.demand_factor == pytest.approx(1.3776, rel=1e-4)
    assert sum(d.qps for d in r.deployments) == pytest.approx(90 * 1.3776, rel=1e-4)
    for d in r.deployments:
        # capacity_qps is already × 0.8; the SLO capacity is capacity_qps / 0.8
        assert d.qps <= d.capacity_qps * (1 + 1e-9)
    assert r.objective_usd >= b.objective_usd


RAG = {"name": "rag", "model": "llama-3.1-8b", "qps": 62, "prompt_tokens": {"mean": 2000, "p99": 8000},
       "output_tokens": {"mean": 256, "p99": 1024}, "slo": {"ttft_p99_ms": 800}, "precisions": ["bf16"]}


def test_rag_on_mi300x_now_meets_the_slo_without_resizing():
    """Issue 15's case (8B RAG on MI300X, TTFT SLO 800 ms: predicted 648 ms, simulated 874 ms) after
    issue 14's serving fixes (full M/G/1 prefill queue, p99.9 KV fit): the analytic plan simulates
    within its SLO, so verification changes nothing, and the prediction is within 10 % of the
    simulated p99 (measured 729 vs 703 ms).

    Since planner-23 (a prompt's chunks past the 4th charged at their own attention span) the MILP's first fleet is
    another of the same cost (two MI300X boards either way), whose tp1 replicas run at their SLO (799 ms predicted,
    804 simulated, the interval above 800): one re-size round of × 0.975 moves them to the fleet of before
    (5 × tp2 + 2 × tp4, 771 / 739 ms predicted, 707 / 697 simulated) at the same cost.

    Since the tie-break's headroom level (session 25) the plan is 5 × tp4 (69.8 req/s for the 62 routed) rather than
    10 × tp2 (65.4 req/s): the same two boards and cost, one configuration either way. At 89 % of their capacity the
    tp4 replicas are predicted at 672 ms and simulate at 601 (the analytic TTFT p99 12 % high, on the safe side;
    10 × tp2: 769 against 703, 9 %), so the agreement is asked as: never more than 10 % under the simulator, at most
    15 % over it (scripts/agreement.py's TTFT worst case is 21.4 %)."""
    plan, cat = _plan(["mi300x"], RAG)
    verified = optimize_plan(plan, cat, compare_single_device=False, verify=True)
    unverified = optimize_plan(plan, cat, compare_single_device=False, verify=False)
    v = verified.verification
    assert v is not None and v.rounds <= 1 and v.all_met
    assert verified.objective_usd == pytest.approx(unverified.objective_usd, rel=1e-12)
    for d in verified.deployments:
        assert d.verification is not None
        assert d.verification.simulated_ms <= d.verification.slo_ms
        assert 0.90 * d.verification.simulated_ms <= d.verification.predicted_ms <= 1.15 * d.verification.simulated_ms


def test_an_optimistic_capacity_is_resized_until_simulation_meets_the_slo():
    """The safety net on its own: every candidate's capacity overstated 1.5x (a model 50 %
    optimistic), the plan under-provisions; verification re-sizes it until every simulated p99
    meets the SLO, never making it cheaper."""
    plan, cat = _plan(["mi300x"], RAG)
    cset = model_candidates(plan, cat, load_params(None))
    optimistic = replace(cset, workloads=tuple(
        replace(wc, candidates=tuple(replace(c, capacity_qps=tuple(q * 1.5 for q in c.capacity_qps))
                                     for c in wc.candidates))
        for wc in cset.workloads))
    unverified = optimize_plan(plan, cat, candidates=optimistic, compare_single_device=False, verify=False)
    verified = optimize_plan(plan, cat, candidates=optimistic, compare_single_device=False, verify=True)
    v = verified.verification
    assert v is not None and v.rounds >= 1 and v.all_met
    assert verified.objective_usd >= unverified.objective_usd
    for d in verified.deployments:
        assert d.verification is not None and d.verification.simulated_ms <= d.verification.slo_ms
    assert "simulated ttft_p99_ms" in v.note


@pytest.mark.parametrize("example", ["chat-fleet.yaml", "chat-fleet-power-cap.yaml"])
def test_examples_meet_their_slos_in_simulation(example):
    """Every simulated p99 meets its SLO. With the MoE routing glue refit (fit-v11) the power-cap plan's MILP vertex
    routed code-completion's 200 req/s to 1 × H100 NVL at 86.0 and 3 × RTX 6000 Ada at 38.0 each, their capacity at
    the 300 ms TTFT SLO: analytic 300.0 ms, seed 0 simulated 326.8 (95 % CI 277-371; seeds 0-7 pooled 300.4), a
    ``simulation_at_slo`` warning. Routing spread by capacity (``balanced_routing``) puts both at 0.938 of it."""
    plan = load_plan(EXAMPLES / example)
    r = optimize_plan(plan, resolve_catalog(plan, load_catalog(), example), compare_single_device=False, verify=True)
    assert r.verification is not None and r.verification.all_met
    for d in r.deployments:
        if d.verification is not None:
            assert d.verification.simulated_ms <= d.verification.slo_ms


def test_json_keys(small):
    """The keys of the issue, with price basis and fidelity on every row."""
    plan, cat, *_ = small
    data = optimize_plan(plan, cat, sensitivity=True, verify=True).to_json()
    s = data["sensitivity"]
    assert {"fleet", "objective_usd"} <= set(s["runner_up"])
    for d in s["devices"]:
        assert {"device", "purchase_usd", "break_even_purchase_usd", "break_even_capacity_factor"} <= set(d)
    for t in s["tornado"]:
        assert {"input", "low_usd", "high_usd"} <= set(t)
    for f in data["fleet"]:
        assert f["price_basis"] in ("quoted", "list", "estimated")
    for d in data["deployments"]:
        assert d["fidelity"]["class"] in ("measured", "same-generation", "datasheet-only")
        assert d["verification"]["simulated_ms"] <= d["verification"]["slo_ms"]
    assert data["headroom"]["sized_for"] == "point estimate"


def test_estimated_price_warns():
    """MI355X's catalog price is an estimate: the plan says so and tells where to put the quote."""
    plan, cat = _plan(["mi355x"])
    r = optimize_plan(plan, cat, compare_single_device=False)
    assert [f.price_basis for f in r.fleet] == ["estimated"]
    warn = [d.message for d in r.diagnostics if d.code == "price_estimated"]
    assert warn and "is an estimate" in warn[0] and "Assumptions" in warn[0]


def test_a_quoted_price_is_not_swung_over_the_catalog_range():
    """Hostile round 23: h100-sxm quoted at $5,000 (plan devices: section) was swung over the shipped catalog range
    $25,000-30,678, which is about the catalog's figure, not the quote: both tornado ends came out far above the
    base (the chosen fleet re-priced at ~$25k a GPU). A quoted price keeps no shipped range or estimate row;
    every row then brackets the base."""
    plan = parse_plan({"name": "t", "allowed_devices": ["h100-sxm", "mi300x"], "workloads": [CHAT8B],
                       "devices": {"h100-sxm": {"purchase_usd": 5000}}}, "t")
    cat = resolve_catalog(plan, load_catalog(), "t")
    assert cat.devices["h100-sxm"].ranges["purchase_usd"] == (25000.0, 30678.0)  # the shipped range is still there
    r = optimize_plan(plan, cat, compare_single_device=False, sensitivity=True, verify=False)
    assert {f.device: f.price_basis for f in r.fleet} == {"h100-sxm": "quoted"}
    s = r.sensitivity
    assert not [t.input for t in s.tornado if t.input.startswith("h100-sxm")]
    for t in s.tornado:
        lo, hi = t.low_usd, t.high_usd
        if lo is not None and hi is not None:
            assert min(lo, hi) <= s.base_objective_usd * (1 + 1e-9) <= max(lo, hi) * (1 + 1e-9) + 1e-6, t
    assert any(t.input.startswith("mi300x purchase_usd (catalog range)") for t in s.tornado)  # unquoted: kept


def test_an_estimate_the_user_gives_with_the_price_is_still_swung(tmp_path):
    """A --catalog entry that sets a price and marks it estimated (``estimated: {purchase_usd: <basis>}``) is the
    user's own estimate: its tornado row swings it ±ESTIMATE_SWING (25 %), as a shipped estimate is (after the quoted-price
    change it had no row at all: a quote's price basis, and the estimate skipped for any quoted price). The shipped
    range (about the catalog's figure, inherited by the override) stays out. 21,000 × (1 ∓ 0.25) = 15,750 / 26,250."""
    f = tmp_path / "mine.yaml"
    f.write_text("devices:\n  - key: h100-sxm\n    purchase_usd: 21000\n"
                 "    estimated: {purchase_usd: budgetary quote}\n")
    plan = parse_plan({"name": "t", "allowed_devices": ["h100-sxm"], "workloads": [CHAT8B]}, "t")
    cat = resolve_catalog(plan, load_catalog(f), "t")
    r = optimize_plan(plan, cat, compare_single_device=False, sensitivity=True, verify=False)
    assert [f.device for f in r.fleet] == ["h100-sxm"]
    rows = [t for t in r.sensitivity.tornado if t.input.startswith("h100-sxm purchase_usd")]
    assert [t.input for t in rows] == ["h100-sxm purchase_usd (estimate ±25%)"]
    assert (rows[0].low_label, rows[0].high_label) == ("$15,750", "$26,250")


def test_runner_up_counts_the_gpus_bought_beside_its_price():
    """Planner review 26: the runner-up line printed "2 × mi300x at $189,469" for a fleet that buys a whole 8-GPU
    MI300X board (the price of 8: 8 × 12,500 + 45,000 server, plus three years' opex), as review 24's F1 found for
    the one-device fleet. Llama-3.1-8B at 20 req/s on L40S (2 cards) or MI300X: without L40S, 2 MI300X in use on
    one board of 8."""
    from cli.common import stdout
    from cli.provenance_render import render_sensitivity
    from reports.workbook import build_workbook

    w = dict(CHAT8B, qps=20, precisions=["fp8"])
    plan, cat = _plan(["l40s", "mi300x"], w)
    r = optimize_plan(plan, cat, sensitivity=True, compare_single_device=False, verify=False)
    ru = r.sensitivity.runner_up
    assert [(f.device, f.gpus, f.nodes, f.gpus_installed) for f in ru.fleet] == [("mi300x", 2, 1, 8)]
    # what the objective pays for, on paper: 8 GPUs and one server bought, their power and maintenance
    mi = cat.devices["mi300x"]
    a = MoneyAssumptions.from_plan(plan)
    capex = 8 * mi.purchase_usd + 45_000.0  # oam-mi300x-8: server_usd 45,000, server_power_w 3,500
    kw = (8 * mi.tdp_w + 3_500.0) / 1000
    opex = kw * a.power_utilization * a.pue * 8760 * a.electricity_usd_per_kwh + capex * a.maintenance_fraction_per_year
    assert ru.objective_usd == pytest.approx(capex + plan.horizon_years * opex, rel=1e-9)
    data = r.to_json()
    assert data["sensitivity"]["runner_up"]["fleet"][0]["gpus_installed"] == 8
    with stdout.capture() as cap:
        render_sensitivity(data)
    assert "runner-up without l40s: 8 × mi300x (2 in use) at $" in " ".join(cap.get().split())
    ws = build_workbook(data)["Sensitivity"]
    cells = [c.value for row in ws.iter_rows() for c in row if isinstance(c.value, str)]
    assert "8 × mi300x (2 in use)" in cells
