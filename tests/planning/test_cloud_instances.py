"""Objective cloud rents a device in instances of ``cloud_gpus_per_instance`` GPUs (planner review 23b, B11).

Costs worked out on paper from the catalog's H100 SXM rate, $2.49 per GPU-hour (devices.yaml, Lambda
on-demand), 8,760 h a year and the plans' 3-year horizon: one GPU rented is 2.49 × 8,760 = $21,812.40 a
year, $65,437.20 over the horizon.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import openpyxl
import pytest
import yaml

from catalog import load_catalog
from catalog.errors import CatalogError, WorkloadError
from optimizer.models.params import load_params
from optimizer.optimize import optimize_plan
from optimizer.planning.candidates import model_candidates
from optimizer.planning.milp.problem import Demand, FleetProblem, Option, UnitTerms
from optimizer.planning.milp.solve import solve_fleet
from optimizer.results.check import check_plan
from optimizer.results.money import LinearTerms
from optimizer.results.plan_result import SolveStatus
from reports.recalc import pdf_to_png, recalculate, soffice_path, to_pdf
from reports.workbook import write_workbook
from tests.reports.test_workbook import check_recalculated, fleet_rows
from workloads import parse_plan, resolve_catalog

H100_USD_PER_GPU_YEAR = 2.49 * 8760  # $21,812.40
HORIZON_YEARS = 3

# One H100 SXM carries this: llama-3.1-8b fp8 at 5 req/s, where one GPU's capacity at these SLOs is about
# 59 req/s (12× the load), so one GPU is in use whatever the rental unit.
ONE_GPU_PLAN = """
name: one-h100
objective: cloud
allowed_devices: [h100-sxm]
workloads:
  - {name: chat, model: llama-3.1-8b, qps: 5, prompt_tokens: 512, output_tokens: 256,
     slo: {ttft_p99_ms: 2000, tpot_p99_ms: 100}, precisions: [fp8]}
"""


def one_gpu_result(instance: int | None, extra: dict | None = None):
    data = yaml.safe_load(ONE_GPU_PLAN)
    if instance is not None:
        data["devices"] = {"h100-sxm": {"cloud_gpus_per_instance": instance}}
    data.update(extra or {})
    plan = parse_plan(data, "one-h100")
    catalog = resolve_catalog(plan, load_catalog(), "one-h100")
    return plan, optimize_plan(plan, catalog, load_params(None), sensitivity=False, verify=False)


@pytest.mark.parametrize(("instance", "rented"), [(None, 8), (8, 8), (4, 4), (2, 2), (1, 1)])
def test_one_gpu_needed_rents_one_instance(instance, rented):
    # Default (None) = the HGX board whole, as before B11: 8 × $21,812.40 = $174,499.20 a year.
    plan, r = one_gpu_result(instance)
    assert r.status == SolveStatus.OPTIMAL
    (f,) = r.fleet
    assert (f.device, f.gpus, f.installed, f.nodes) == ("h100-sxm", 1, rented, 1)
    assert f.fixed_size == (rented == 8)
    assert f.gpus_per_instance == (1 if rented == 8 else rented)
    assert r.annual_cloud_usd == pytest.approx(rented * H100_USD_PER_GPU_YEAR, rel=1e-12)
    assert r.objective_usd == pytest.approx(HORIZON_YEARS * rented * H100_USD_PER_GPU_YEAR, rel=1e-12)
    assert r.capex_usd == 0.0
    assert check_plan(r, plan) == []


def test_the_unit_applies_only_under_objective_cloud():
    # Bought (tco), the board is whole whatever the cloud rents: 8 GPUs installed for the one in use.
    _, r = one_gpu_result(1, {"objective": "tco"})
    (f,) = r.fleet
    assert (f.gpus, f.installed, f.fixed_size, f.gpus_per_instance) == (1, 8, True, 1)


def test_checker_recomputes_the_instances_without_the_solver():
    plan, r = one_gpu_result(4)
    (f,) = r.fleet
    assert check_plan(r, plan) == []
    short = replace(r, fleet=(replace(f, gpus_installed=1),))
    assert any("1 GPUs installed, 1 in use in instances of 4 need 4" in v for v in check_plan(short, plan))
    # money follows the GPUs rented: the stated rental of 4 GPUs is not that of 1
    assert any(v.startswith("annual_cloud_usd") for v in check_plan(short, plan))
    # instances are a cloud's: a bought fleet stating them is caught
    bought = replace(r, assumptions=replace(r.assumptions, objective="tco"))
    assert any("only a cloud rents instances" in v for v in check_plan(bought, plan))


def test_milp_rounds_the_gpus_in_use_up_to_whole_instances():
    # 5 req/s, 1 req/s per 1-GPU replica: 5 GPUs in use. Instances of 2 on an 8-GPU server: ⌈5/2⌉ = 3 instances,
    # 6 GPUs rented at $10 = $60 (not $50 for the GPUs in use, nor $80 for the whole server).
    unit = UnitTerms("d", 8, LinearTerms(10.0, 0.0), LinearTerms(0.0, 0.0), LinearTerms(10.0, 0.0),
                     LinearTerms(0.7, 1.0), gpus_per_instance=2)
    p = FleetProblem((Demand("w", (5.0,)),), (Option("w", "k", "d", 1, (1.0,)),), {"d": unit})
    s = solve_fleet(p)
    assert s.status == SolveStatus.OPTIMAL
    assert (s.gpus, s.nodes) == ({"d": 5}, {"d": 1})
    assert s.objective_usd == pytest.approx(60.0)
    assert unit.installed_gpus(5, 1) == 6
    # an inventory (quota) of 5 GPUs cannot hold 3 instances of 2: the device is not usable beyond 2 instances
    capped = FleetProblem(p.demands, p.options, {"d": UnitTerms(**{**unit.__dict__, "inventory_gpus": 5})})
    assert solve_fleet(capped).status == SolveStatus.INFEASIBLE


def test_an_inventory_short_of_one_instance_leaves_the_device_out():
    plan = parse_plan({**yaml.safe_load(ONE_GPU_PLAN), "devices": {"h100-sxm": {"cloud_gpus_per_instance": 4}},
                       "inventory": {"h100-sxm": 2}}, "short")
    catalog = resolve_catalog(plan, load_catalog(), "short")
    cset = model_candidates(plan, catalog, load_params(None))
    reasons = {c.pruned_reason for c in cset.workloads[0].candidates if c.device == "h100-sxm"}
    assert ("inventory of h100-sxm (2 GPUs) is less than one cloud instance of 4 GPUs (cloud_gpus_per_instance)"
            in reasons)
    (note,) = [d for d in cset.diagnostics if d.code == "inventory_below_server"]
    assert "h100-sxm (2 of 4 GPUs)" in note.message


@pytest.mark.parametrize(("value", "needle"), [
    (3, "devices.h100-sxm.cloud_gpus_per_instance 3 is not a rental unit of h100-sxm: its platform hgx-h100-8 "
        "holds 8 GPUs, and an instance is the whole server or a power of two dividing it; use one of 1, 2, 4, 8"),
    (16, "cloud_gpus_per_instance 16 is not a rental unit of h100-sxm"),
    (1.5, "cloud_gpus_per_instance: must be a whole number (got 1.5); use 1 or 2"),
    (0, "cloud_gpus_per_instance: input should be greater than 0 (got 0"),
])
def test_bad_instance_sizes_name_the_field_value_and_fix(tmp_path, value, needle):
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump({"devices": [{"key": "h100-sxm", "cloud_gpus_per_instance": value}]}))
    with pytest.raises(CatalogError) as err:
        load_catalog(path)
    assert needle in str(err.value)
    # the plan's devices: section is checked the same way
    with pytest.raises(WorkloadError) as err:
        one_gpu_result(value)
    assert needle in str(err.value)


def test_a_rack_takes_its_whole_size_or_a_power_of_two_dividing_it(tmp_path):
    # GB200 NVL72: 72 GPUs a rack; 8 (a power of two dividing 72) and 72 are units, 6 and 9 are not.
    for ok in (1, 8, 72):
        path = tmp_path / f"ok{ok}.yaml"
        path.write_text(yaml.safe_dump({"devices": [{"key": "gb200", "cloud_gpus_per_instance": ok}]}))
        assert load_catalog(path).devices["gb200"].cloud_gpus_per_instance == ok
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"devices": [{"key": "gb200", "cloud_gpus_per_instance": 6}]}))
    with pytest.raises(CatalogError, match="use one of 1, 2, 4, 8, 72"):
        load_catalog(path)


def test_cli_prints_gpus_rented(run_cli, tmp_path):
    data = {**yaml.safe_load(ONE_GPU_PLAN), "devices": {"h100-sxm": {"cloud_gpus_per_instance": 2}}}
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump(data))
    out = tmp_path / "p.json"
    r = run_cli("optimize", plan, "--no-sensitivity", "--no-verify", "--no-cache", "--json", out)
    assert r.code == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if "GPUs in use / rented / servers" in x)
    assert "1 / 2 / 1" in line
    assert "rented in 2-GPU instances" in r.stdout
    (fleet,) = json.loads(out.read_text())["fleet"]
    assert (fleet["gpus"], fleet["gpus_installed"], fleet["gpus_per_instance"]) == (1, 2, 2)


def test_workbook_counts_the_instances_with_a_live_formula(tmp_path):
    _, r = one_gpu_result(4)
    result = r.to_json()
    xlsx = write_workbook(result, tmp_path / "cloud.xlsx")
    wb = openpyxl.load_workbook(xlsx)
    ws = wb["Fleet"]
    header = [c.value for c in ws[4]]
    row = {h: ws.cell(row=5, column=i + 1).value for i, h in enumerate(header)}
    wb.close()
    assert row["GPUs per purchase (server or instance)"] == 4
    assert row["GPUs bought"] == "=ROUNDUP(C5/F5,0)*F5"
    if soffice_path() is None:
        pytest.skip("LibreOffice (soffice) is not installed: workbook RECALCULATION NOT CHECKED")
    recalced = recalculate(xlsx, tmp_path / "recalc")
    check_recalculated(recalced, result)
    fleet = fleet_rows(recalced)["h100-sxm"]
    assert fleet["GPUs bought"] == 4
    assert fleet["Cloud rental per year ($)"] == pytest.approx(4 * H100_USD_PER_GPU_YEAR, rel=1e-9)
    png = pdf_to_png(to_pdf(recalced, tmp_path / "pdf"), tmp_path / "png")
    assert png and all(math.isfinite(p.stat().st_size) and p.stat().st_size > 0 for p in png)


def test_whatif_compares_renting_the_board_with_renting_one_gpu(tmp_path):
    # A variant sets the rental unit: the base rents the HGX board whole (3 × 8 × $21,812.40 = $523,497.60), the
    # variant one GPU ($65,437.20); the demand sweep at 2× still needs one GPU (≈59 req/s per GPU against 10).
    from optimizer.whatif import ScenarioOptions, run_scenarios
    from workloads.scenarios import load_scenarios

    base = tmp_path / "one-h100.yaml"
    base.write_text(ONE_GPU_PLAN)
    path = tmp_path / "whatif.yaml"
    path.write_text(yaml.safe_dump({
        "base": str(base),
        "variants": [{"name": "one-gpu-instances", "set": {"devices.h100-sxm.cloud_gpus_per_instance": 1}}],
    }))
    _, _, scenarios = load_scenarios(path, load_catalog())
    rows = {r.scenario.name: r.to_json() for r in run_scenarios(scenarios, ScenarioOptions(), workers=1)}
    assert rows["base"]["objective_usd"] == pytest.approx(3 * 8 * H100_USD_PER_GPU_YEAR, rel=1e-12)
    assert rows["one-gpu-instances"]["objective_usd"] == pytest.approx(3 * H100_USD_PER_GPU_YEAR, rel=1e-12)


def test_n_plus_one_node_keeps_whole_server_spares_in_instances():
    # 2 req/s on 1-GPU replicas of 1 req/s, n+1-node on 8-GPU servers rented in 2-GPU instances: the spares are those
    # one server can hold, ⌊8/1⌋ = 8 (no spread over servers of their own: each would rent a partly used instance),
    # so 10 replicas, 10 GPUs in 5 instances at $10 a GPU = $100.
    from optimizer.planning.milp.problem import spread_packings

    unit = UnitTerms("d", 8, LinearTerms(10.0, 0.0), LinearTerms(0.0, 0.0), LinearTerms(10.0, 0.0),
                     LinearTerms(0.7, 1.0), gpus_per_instance=2)
    demand = Demand("w", (2.0,), n_plus_one=True, per_server=True)
    option = Option("w", "k", "d", 1, (1.0,))
    assert spread_packings(demand, option, unit) == ()
    assert spread_packings(demand, option, UnitTerms(**{**unit.__dict__, "gpus_per_instance": 1})) != ()
    s = solve_fleet(FleetProblem((demand,), (option,), {"d": unit}))
    assert s.replicas == {("w", "k"): 10}
    assert s.objective_usd == pytest.approx(100.0)


def test_a_workload_alone_is_costed_per_gpu_in_use_at_amortised_prices():
    # The split-or-whole choice and the bound cuts cost a workload alone with each server's $ spread over its GPUs:
    # an 8-GPU board at $80 is $10 a GPU, so 3 GPUs in use cost $30 (not the $80 board), and instances of 2 are not
    # rounded there either (a bound must not count another workload's share of an instance).
    from optimizer.planning.milp.solve import solve_alone

    board = UnitTerms("d", 8, LinearTerms(0.0, 80.0), LinearTerms(0.0, 80.0), LinearTerms(0.0, 0.0),
                      LinearTerms(0.0, 1.0), fixed_size=True)
    demand, options = Demand("w", (3.0,)), (Option("w", "k", "d", 1, (1.0,)),)
    assert solve_alone(demand, options, {"d": board}, time_limit_s=5, gap=0).objective_usd == pytest.approx(30.0)
    rented = UnitTerms("d", 8, LinearTerms(10.0, 0.0), LinearTerms(0.0, 0.0), LinearTerms(10.0, 0.0),
                       LinearTerms(0.7, 1.0), gpus_per_instance=2)
    assert solve_alone(demand, options, {"d": rented}, time_limit_s=5, gap=0).objective_usd == pytest.approx(30.0)
