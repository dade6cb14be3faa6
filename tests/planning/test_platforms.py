"""Platforms: devices are bought as servers of a fixed size, with per-platform price and power.

Paper figures: the MILP instances below have optima worked out by hand; the finance
formulas are checked against hand-computed depreciation, book value and annuity figures.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from catalog import load_catalog
from catalog.errors import CatalogError
from optimizer.optimize import optimize_plan
from optimizer.planning.diagnose import single_device_note
from optimizer.planning.milp.problem import Demand, FleetProblem, Option, UnitTerms
from optimizer.planning.milp.solve import solve_fleet
from optimizer.results.check import check_plan
from optimizer.results.money import (
    LinearTerms,
    MoneyAssumptions,
    UnitPrice,
    annual_facility_terms,
    annuity_payment_usd,
    bought_terms,
    capex_terms,
    finance_figures,
    fleet_money,
)
from optimizer.results.plan_result import SingleDeviceBest, SolveStatus
from workloads import parse_plan, resolve_catalog

ZERO = LinearTerms(0.0, 0.0)


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


# ---------------------------------------------------------------- catalog


def test_every_device_has_one_platform(cat):
    for key in cat.devices:
        assert cat.platform_of(key) is not None, f"{key} has no platform in catalog/data/platforms.yaml"


def test_platform_sizes(cat):
    # HGX/DGX and OAM boards: 8 GPUs; GB200 NVL72: one 72-GPU rack; PCIe: slots.
    for key in ("h100-sxm", "h200-sxm", "b200", "b300", "a100-80gb-sxm", "mi300x", "mi325x", "mi355x", "gaudi3"):
        p = cat.platform_of(key)
        assert (p.gpus_per_server, p.fixed_size) == (8, True), key
    for key in ("gb200", "gb300"):
        nvl = cat.platform_of(key)
        assert (nvl.kind, nvl.gpus_per_server, nvl.server_usd) == ("rack", 72, 0.0)  # the rack price is per GPU
    assert cat.platform_of("l40s").kind == "pcie" and not cat.platform_of("l40s").fixed_size


def test_platform_figures_are_sourced(cat):
    for p in cat.platforms.values():
        for s in p.sources.values():
            assert s.url.startswith("https://") and len(s.as_of) >= 4, p.key
        for figure in ("server_usd", "server_power_w", "nic_gb_s_per_gpu", "rack_units"):
            assert figure in p.sources or figure in p.estimated or "specs" in p.sources, (p.key, figure)
        if p.kind != "cloud-host" and p.server_usd > 0:
            assert "server_usd" in p.estimated, f"{p.key}: server prices are not published; say it is an estimate"


def test_dgx_h100_server_power_is_system_max_less_gpus(cat):
    # DGX H100: ~10.2 kW max system power with 8 x 700 W H100 -> 4,600 W for the rest.
    assert cat.platforms["hgx-h100-8"].server_power_w == pytest.approx(10_200 - 8 * 700)


def test_platform_override_and_unknown_device(tmp_path, cat):
    pcie4 = cat.with_platform_overrides({"pcie-8": {"gpus_per_server": 4}}, "plan.yaml")
    assert pcie4.platform_of("l40s").gpus_per_server == 4
    bad = tmp_path / "cat.yaml"
    bad.write_text("platforms:\n- key: pcie-8\n  devices: [l40s, no-such-gpu]\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="unknown device 'no-such-gpu'"):
        load_catalog(bad)


# ---------------------------------------------------------------- money


def test_fixed_size_terms_move_into_the_server():
    price = UnitPrice(10_000.0, None, 700.0, server_usd=50_000.0, server_power_w=4600.0, gpus_per_server=8,
                      fixed_size=True)
    a = MoneyAssumptions()
    c = capex_terms(price, a)
    assert (c.per_gpu, c.per_node) == (10_000.0, 50_000.0)
    assert bought_terms(c, price) == LinearTerms(0.0, 50_000.0 + 8 * 10_000.0)
    pcie = UnitPrice(5000.0, None, 350.0, server_usd=25_000.0, gpus_per_server=8)
    assert bought_terms(capex_terms(pcie, a), pcie) == LinearTerms(5000.0, 25_000.0)


def test_plan_server_overhead_overrides_nothing_when_absent():
    # A unit with no platform figures uses the plan-wide fallback (old plans: every server).
    a = MoneyAssumptions(server_overhead_usd=30_000.0, server_power_w=1500.0)
    bare = UnitPrice(10_000.0, None, 400.0)
    assert capex_terms(bare, a).per_node == 30_000.0


def test_facility_costs_on_paper():
    # 2 servers of 8 x 700 W + 4,600 W = 10.2 kW each -> 20.4 kW; $150/kW-month -> $36,720/yr.
    # 2 x 8U of a 42U rack at $1,500/rack-month -> 12 x 1,500 x 16/42 = $6,857.14/yr.
    price = UnitPrice(10_000.0, None, 700.0, server_usd=50_000.0, server_power_w=4600.0, gpus_per_server=8,
                      fixed_size=True, rack_units=8.0)
    a = MoneyAssumptions(colocation_usd_per_kw_month=150.0, colocation_usd_per_rack_month=1500.0)
    assert annual_facility_terms(price, a).at(16, 2) == pytest.approx(36_720.0 + 12 * 1500 * 16 / 42)
    m = fleet_money([(price, 16, 2)], a)
    assert m.annual_facility_usd == pytest.approx(36_720.0 + 12 * 1500 * 16 / 42)
    assert m.annual_opex_usd == pytest.approx(m.annual_power_usd + m.annual_maintenance_usd + m.annual_facility_usd)


def test_assumptions_default_to_a_plan_that_states_none():
    """MoneyAssumptions declares no default of its own: a plan with only a workload gives them all
    (the plan file's defaults: 3 years, $0.10/kWh, PUE 1.3, 8 %, no budget; servers at the fallback)."""
    plan = parse_plan({"workloads": [{"name": "w", "model": "llama-3.1-8b", "qps": 1, "prompt_tokens": 100,
                                      "output_tokens": 10, "slo": {"ttft_p99_ms": 1000}}]}, "test")
    a = MoneyAssumptions()
    assert MoneyAssumptions.from_plan(plan) == a
    assert (a.horizon_years, a.electricity_usd_per_kwh, a.pue, a.discount_rate) == (3, 0.10, 1.3, 0.08)
    assert (a.capex_budget_usd, a.depreciation_years, a.rack_units_per_rack) == (None, None, 42)


def test_finance_on_paper():
    # capex $100,000, horizon 3 years, life 5: $20,000/yr, book value 100,000 x (1 - 3/5) = $40,000.
    # Lease at 8 % over 3 years: 100,000 x 0.08 / (1 - 1.08^-3) = $38,803.35 per year, $116,410.05 in total.
    f = finance_figures(100_000.0, MoneyAssumptions(horizon_years=3, depreciation_years=5, lease_interest_rate=0.08))
    assert f.annual_depreciation_usd == pytest.approx(20_000.0)
    assert f.residual_value_usd == pytest.approx(40_000.0)
    assert f.annual_lease_payment_usd == pytest.approx(38_803.35, abs=0.01)
    assert f.lease_total_usd == pytest.approx(116_410.05, abs=0.02)
    # Life = horizon (the default): nothing left at the horizon.
    assert finance_figures(100_000.0, MoneyAssumptions(horizon_years=3)).residual_value_usd == 0.0
    assert annuity_payment_usd(90_000.0, 0.0, 3) == pytest.approx(30_000.0)


def test_lease_at_a_rate_below_the_float_spacing_is_the_limit_not_a_division_by_zero():
    """Hostile round 26: lease_interest_rate 5e-324 (also 1e-17) crashed optimize and whatif (exit 70,
    ZeroDivisionError: 1 + r rounds to 1, so 1 − (1+r)^−n was 0). As r → 0 the annuity P·r / (1 − (1+r)^−n)
    tends to P/n, and for small r it is P/n · (1 + r(n+1)/2 + O(r²)) (the series of r / (1 − e^(−n·ln(1+r))))."""
    for rate in (5e-324, 1e-17, 1e-300):
        assert annuity_payment_usd(90_000.0, rate, 3) == pytest.approx(30_000.0, rel=1e-15)
    # r = 1e-9, n = 3: 30,000 × (1 + 2e-9) = 30,000.00006; the naive form loses about half of these digits
    assert annuity_payment_usd(90_000.0, 1e-9, 3) == pytest.approx(30_000.00006, rel=1e-13)


# ---------------------------------------------------------------- MILP


def board(name: str = "hgx", *, full: bool = False) -> UnitTerms:
    """An 8-GPU board: $10 per GPU + $20 per server, both paid per server (8 x 10 + 20 = $100)."""
    return UnitTerms(name, 8, LinearTerms(0.0, 100.0), LinearTerms(0.0, 100.0), ZERO, ZERO,
                     fixed_size=True, full_servers_only=full)


def test_partly_used_board_is_paid_in_full():
    # 10 req/s at 1 req/s per 1-GPU replica: 10 GPUs -> 2 boards (16 GPUs bought, 6 idle) = $200.
    p = FleetProblem((Demand("w", (10.0,)),), (Option("w", "k", "hgx", 1, (1.0,)),), {"hgx": board()})
    s = solve_fleet(p)
    assert s.status == SolveStatus.OPTIMAL
    assert (s.gpus["hgx"], s.nodes["hgx"]) == (10, 2)
    assert s.objective_usd == pytest.approx(200.0)
    assert p.units["hgx"].installed_gpus(s.gpus["hgx"], s.nodes["hgx"]) == 16


def test_forbidding_partial_boards_fills_them():
    p = FleetProblem((Demand("w", (10.0,)),), (Option("w", "k", "hgx", 1, (1.0,)),), {"hgx": board(full=True)})
    s = solve_fleet(p)
    assert (s.gpus["hgx"], s.nodes["hgx"]) == (16, 2)
    assert s.objective_usd == pytest.approx(200.0)


def test_n_plus_one_per_server_keeps_a_server_of_spares():
    # 4 req/s on 1-GPU replicas of 1 req/s on 8-GPU boards. n+1 (replica): 5 replicas, 1 board.
    # n+1-node: one board holds 8 replicas, so load 4 <= n - 8 -> 12 replicas on shared boards; or
    # spread q per board of their own, 4 <= n - q on ⌈n/q⌉ boards: one board never (q ≥ n), two from
    # q = 4 (8 replicas) on. Either way 2 boards ($200), paid in full; the replica count is a tie.
    opt = Option("w", "k", "hgx", 1, (1.0,))
    per_replica = solve_fleet(FleetProblem((Demand("w", (4.0,), n_plus_one=True),), (opt,), {"hgx": board()}))
    assert per_replica.replicas[("w", "k")] == 5 and per_replica.nodes["hgx"] == 1
    per_server = solve_fleet(FleetProblem((Demand("w", (4.0,), n_plus_one=True, per_server=True),), (opt,),
                                          {"hgx": board()}))
    n, q = per_server.replicas[("w", "k")], per_server.replicas_per_server.get(("w", "k"))
    assert per_server.nodes["hgx"] == 2 and n - (q or 8) >= 4 and (q is None or -(-n // q) <= 2)
    assert per_server.objective_usd == pytest.approx(200.0)
    # An 8-GPU replica fills a server: one spare replica is one spare server.
    big = Option("w", "k8", "hgx", 8, (3.0,))
    s = solve_fleet(FleetProblem((Demand("w", (4.0,), n_plus_one=True, per_server=True),), (big,), {"hgx": board()}))
    assert s.replicas[("w", "k8")] == 3  # ⌈4/3⌉ = 2 carry the load, + 1 spare server


# ---------------------------------------------------------------- end to end


def _hgx_plan(**changes):
    """One chat service on H100 SXM only (HGX boards of 8); fields of the plan or the workload changed."""
    workload = {"name": "chat", "model": "llama-3.1-8b", "qps": 30, "prompt_tokens": {"mean": 512, "p99": 2048},
                "output_tokens": {"mean": 128, "p99": 512}, "slo": {"ttft_p99_ms": 1000, "tpot_p99_ms": 100},
                "precisions": ["fp8"], "min_replicas": 1}
    workload.update(changes.pop("workload", {}))
    return parse_plan({"name": "hgx", "allowed_devices": ["h100-sxm"], "workloads": [workload], **changes}, "test")


@pytest.fixture(scope="module")
def hgx_runs(cat):
    out = {}
    for name, plan in {"partial": _hgx_plan(), "full": _hgx_plan(allow_partial_servers=False),
                       "node": _hgx_plan(workload={"redundancy": "n+1-node"})}.items():
        out[name] = (plan, optimize_plan(plan, resolve_catalog(plan, cat, "test"), compare_single_device=False))
    return out


def test_hgx_boards_are_bought_whole(hgx_runs):
    for name, (plan, r) in hgx_runs.items():
        assert r.status == SolveStatus.OPTIMAL, name
        assert check_plan(r, plan) == [], name
        (f,) = r.fleet
        assert f.platform == "hgx-h100-8" and f.fixed_size
        assert f.installed == 8 * f.nodes  # never a partial board: idle GPUs are bought with it
        assert f.capex_usd == pytest.approx(f.installed * f.purchase_usd + f.nodes * 50_000.0)
    full = hgx_runs["full"][1].fleet[0]
    assert full.idle_gpus == 0  # the plan forbids partly used servers: every GPU bought serves


def test_n_plus_one_per_server_survives_losing_any_server(hgx_runs):
    plan, r = hgx_runs["node"]
    assert check_plan(r, plan) == []  # includes the loss of any one server
    (f,) = r.fleet
    assert f.nodes >= 2  # one server down must leave enough: one server alone cannot be N+1
    # a server lost takes the replicas it holds: ⌊8/g⌋ on shared boards, q when spread at most q per board of its own
    per_server = {d.key: d.replicas_per_server or max(1, 8 // (d.tp * d.pp)) for d in r.deployments}
    for d in r.deployments:
        lost = min(d.replicas, per_server[d.key])
        assert (d.replicas - lost) * d.capacity_qps / d.replicas >= d.qps * (1 - 1e-9)
    # the same fleet with one server fewer fails the check
    short = replace(r, deployments=tuple(replace(d, replicas=d.replicas - per_server[d.key])
                                         for d in r.deployments if d.replicas > per_server[d.key]))
    assert any(v.startswith("N+1 per server") or v.startswith("capacity") for v in check_plan(short, plan))


def test_single_device_note_counts_the_gpus_bought_not_those_in_use():
    # Planner review 24: a 7-GPU need on an 8-GPU HGX board printed "the cheapest one-device fleet is 7 × b200 at
    # $471,198" — the price of 8 GPUs (one board, bought whole), and the workbook's "all b200 (8 GPUs)" beside it.
    board = single_device_note(SingleDeviceBest("b200", 471_198.164, gpus=7, nodes=1, gpus_installed=8), 471_198.164)
    assert board.message == "the cheapest one-device fleet is 8 × b200 (7 in use) at $471,198, +0.0 % vs this plan"
    pcie = single_device_note(SingleDeviceBest("l40s", 10_000.0, gpus=3, nodes=1, gpus_installed=3), 9_000.0)
    assert pcie.message == "the cheapest one-device fleet is 3 × l40s at $10,000, +11.1 % vs this plan"
