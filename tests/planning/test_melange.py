"""Capacity tables: Mélange's shipped inputs solved exactly, and strict CSV loading.

Mélange's example (melange/config/example.json): A10G $1.01/h with capacities
(2, 1, 5, 2) req/s, A100-80GB $3.67/h with (20, 20, 40, 20), buckets holding
(0.2, 0.1, 0.5, 0.2) of 30 req/s, i.e. λ = (6, 3, 15, 6). Mélange answers 3 × A10G +
1 × A100 = $6.70/h (each bucket sliced whole to one GPU type).

On paper, with continuous routing shares: the A100 costs less per unit of load in every
bucket, and all load on A100s needs Σ λ_b/μ_b = 0.3 + 0.15 + 0.375 + 0.3 = 1.125 A100s.
- 0 A100: 12 A10G (3 per bucket) = $12.12; ≥ 2 A100: ≥ $7.34.
- 1 A100 carries 1.0 of the 1.125; the other 0.125 A100-worth goes to A10Gs, cheapest
  in bucket (1,0) where one A10G replaces 5/40 = 0.125 A100: a third of that bucket
  (5 req/s) on one A10G fills it exactly, and the A100 carries 6/20 + 3/20 + 10/40 + 6/20 = 1.
So the optimum is 1 × A100 + 1 × A10G = $4.68/h (30 % below Mélange's sliced answer).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from catalog import load_catalog
from optimizer.optimize import optimize_plan
from optimizer.planning.capacity_table import (
    CapacityTableError,
    load_capacity_table,
    parse_capacity_table,
)
from optimizer.results.check import check_plan
from tests.conftest import EXAMPLES, MELANGE
from workloads import load_plan, parse_plan, resolve_catalog

HEADER = ("workload,unit,gpus,cost_usd_per_hour,input_bucket,output_bucket,max_request_rate_qps,"
          "bucket_fraction,total_request_rate_qps")


def hourly(result) -> float:
    return result.annual_cloud_usd / 8760.0


def cloud_plan(name: str, qps: float):
    return parse_plan({
        "name": name, "objective": "cloud", "horizon_years": 1, "server_power_w": 0,
        "workloads": [{"name": name, "model": "llama-2-7b", "qps": qps, "prompt_tokens": 100,
                       "output_tokens": 100, "slo": {"tpot_p99_ms": 120}, "min_replicas": 0}],
    }, "test")


def melange_reference_csv(tmp_path: Path) -> Path:
    """The shipped reference CSVs (gpu tputs + workload) joined into one capacity table."""
    with open(MELANGE / "example_config_workload.csv") as fh:
        workload = {(r["input_bucket_idx"], r["output_bucket_idx"]): r for r in csv.DictReader(fh)}
    lines = [HEADER]
    with open(MELANGE / "example_config_gpu_tputs.csv") as fh:
        for r in csv.DictReader(fh):
            w = workload[(r["input_bucket_idx"], r["output_bucket_idx"])]
            lines.append(f"melange,{r['gpu']},1,{r['cost_usd_per_hour']},{r['input_bucket_idx']},"
                         f"{r['output_bucket_idx']},{r['max_throughput_req_per_s']},{w['fraction_of_requests']},"
                         f"{w['total_request_rate_req_per_s']}")
    path = tmp_path / "melange.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_melange_example_exact_optimum(tmp_path):
    plan = cloud_plan("melange", 30.0)
    result = optimize_plan(plan, load_catalog(), capacity_table=melange_reference_csv(tmp_path))
    assert result.status == "optimal"
    assert {f.device: f.gpus for f in result.fleet} == {"A10G": 1, "A100-80GB": 1}
    assert hourly(result) == pytest.approx(4.68, abs=1e-9)
    assert hourly(result) <= 6.70  # never worse than Mélange's sliced answer
    assert result.single_device_best.device == "A100-80GB"
    assert result.single_device_best.gpus == 2
    assert check_plan(result, plan) == []
    a10g = next(d for d in result.deployments if d.device == "A10G")
    assert a10g.qps == pytest.approx(5.0)  # a third of bucket (1, 0)


def test_melange_shipped_example_files():
    plan = load_plan(EXAMPLES / "melange-example.yaml")
    catalog = resolve_catalog(plan, load_catalog(), "melange-example.yaml")
    result = optimize_plan(plan, catalog, capacity_table=EXAMPLES / "melange-example.csv")
    assert hourly(result) == pytest.approx(4.68, abs=1e-9)
    assert check_plan(result, plan) == []


def test_a_capacity_table_plan_says_which_limits_objective_cloud_leaves_out():
    """Objective cloud applies neither max_power_kw nor budget.capex_usd (README "Other plan fields"), and says so
    with an info line each. A capacity-table plan, Mélange's own use, left both out silently: the table's candidate
    set carried no diagnostics."""
    plan = load_plan(EXAMPLES / "melange-example.yaml")
    plan = plan.model_copy(update={"max_power_kw": 0.1,
                                   "budget": plan.budget.model_copy(update={"capex_usd": 1000.0})})
    catalog = resolve_catalog(plan, load_catalog(), "melange-example.yaml")
    result = optimize_plan(plan, catalog, capacity_table=EXAMPLES / "melange-example.csv", sensitivity=False)
    assert hourly(result) == pytest.approx(4.68, abs=1e-9)  # neither limit applied
    codes = [d.code for d in result.diagnostics if d.level == "info"]
    assert codes.count("power_cap_not_applied") == 1 and codes.count("capex_budget_not_applied") == 1, codes


def test_request_rate_figure(tmp_path):
    """Plot 5 of the Mélange blog: A100 2.0 req/s at $3.67, A10G 0.364 at $1.01, 4.3 req/s.

    On paper: 2a + 0.364g ≥ 4.3 → a=2, g=1: $8.35; a=1, g=7: $10.74; a=3: $11.01;
    a=0, g=12: $12.12. Optimum 2 × A100 + 1 × A10G = $8.35 (the figure's annotation).
    """
    with open(MELANGE / "request_rate_figure_digitised.csv") as fh:
        fig = {r["quantity"]: float(r["value"]) for r in csv.DictReader(fh) if r["unit"] != ""}
    rate = fig["headline point rate"]
    rows = [HEADER,
            f"fig,A100,1,{fig['A100 cost']},0,0,{fig['A100 capacity (Llama2-7b, figure workload)']},1,{rate}",
            f"fig,A10G,1,{fig['A10G cost']},0,0,{fig['A10G capacity (Llama2-7b, figure workload)']},1,{rate}"]
    path = tmp_path / "fig.csv"
    path.write_text("\n".join(rows) + "\n")
    plan = cloud_plan("fig", rate)
    result = optimize_plan(plan, load_catalog(), capacity_table=path)
    assert hourly(result) <= 8.35 + 1e-9
    assert hourly(result) == pytest.approx(8.35, abs=1e-9)
    assert {f.device: f.gpus for f in result.fleet} == {"A100": 2, "A10G": 1}
    assert check_plan(result, plan) == []


def test_table_units_with_servers_and_devices(tmp_path):
    # 2-GPU units on 8-GPU servers of a catalog device: power from its TDP.
    text = "\n".join([
        HEADER + ",device,gpus_per_node,tp",
        "w,2xA100,2,5.0,s,s,3,1,10,a100-80gb-sxm,8,2",
    ])
    path = tmp_path / "t.csv"
    path.write_text(text)
    plan = parse_plan({"objective": "cloud", "workloads": [
        {"name": "w", "model": "llama-2-7b", "qps": 10, "prompt_tokens": 100, "output_tokens": 100,
         "slo": {"tpot_p99_ms": 100}}]}, "t")
    result = optimize_plan(plan, load_catalog(), capacity_table=path)
    assert {f.device: (f.gpus, f.nodes) for f in result.fleet} == {"2xA100": (8, 1)}  # ⌈10/3⌉ = 4 units
    assert result.power_kw == pytest.approx((8 * 400 + 1500) / 1000)
    assert check_plan(result, plan) == []


GOOD = [HEADER, "w,A,1,1.0,0,0,2,0.5,4", "w,A,1,1.0,0,1,1,0.5,4"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: [r[0].replace("bucket_fraction", "bucket_share")] + r[1:], "unknown column"),
        (lambda r: [r[0].replace(",total_request_rate_qps", "")] + [x.rsplit(",", 1)[0] for x in r[1:]],
         "total_request_rate_qps: required column is missing"),
        (lambda r: r[:1] + ["w,A,1,abc,0,0,2,0.5,4"] + r[2:], "row 2, column cost_usd_per_hour: not a number"),
        (lambda r: r[:1] + ["w,A,1,1.0,0,0,-2,0.5,4"] + r[2:], "column max_request_rate_qps: must be >= 0"),
        (lambda r: r[:1] + ["w,A,1,1.0,0,0,2,0.6,4"] + r[2:], "sum to 1.1"),
        (lambda r: r[:2] + ["w,A,1,2.0,0,1,1,0.5,4"], "row 3: unit 'A' differs"),
        (lambda r: r[:2] + ["w,A,1,1.0,0,1,1,0.5,5"], "row 3, column total_request_rate_qps"),
        (lambda r: r + ["w,B,1,1.0,0,0,2,0.5,4"], "unit 'B' has no row for bucket 0/1"),
        (lambda r: r[:2] + ["w,A,1,1.0,0,1,1,0.5"], "row 3: has 8 fields"),
        (lambda r: r[:1] + ["w,A,0,1.0,0,0,2,0.5,4"] + r[2:], "column gpus: must be > 0"),
        # a rate or a price in the gpus column planned "tp1000000000"; a purchase price as an hourly one
        (lambda r: [x.replace("w,A,1,1.0,", "w,A,1025,1.0,") for x in r], "column gpus: 1,025 GPUs is above the ceiling"),
        (lambda r: [x.replace("w,A,1,1.0,", "w,A,2,2001,") for x in r],
         "column cost_usd_per_hour: $2,001.00 an hour for 2 GPU(s) is above $1,000 per GPU-hour"),
        (lambda r: r[:1], "no data rows"),
        # 'A 1' and 'a-1' are both a_1 to the MILP: overlapping constraint names, a PuLP traceback
        (lambda r: [r[0], *(x.replace("w,A,", "w,A 1,") for x in r[1:]), *(x.replace("w,A,", "w,a-1,") for x in r[1:])],
         "row 4, column unit: unit 'a-1' and unit 'A 1' (row 2) differ only in case or punctuation (both 'a_1')"),
        (lambda r: ["# only a comment"], "empty capacity table"),
    ],
)
def test_bad_tables_fail_with_one_line(edit, message):
    text = "\n".join(edit(list(GOOD))) + "\n"
    with pytest.raises(CapacityTableError) as exc:
        parse_capacity_table(text, "t.csv")
    assert message in str(exc.value)
    assert str(exc.value).startswith("t.csv")
    assert "\n" not in str(exc.value)


def test_comments_keep_line_numbers():
    text = "# a comment\n" + "\n".join([GOOD[0], "# another", GOOD[1], "w,A,1,x,0,1,1,0.5,4"])
    with pytest.raises(CapacityTableError, match="row 5, column cost_usd_per_hour"):
        parse_capacity_table(text, "t.csv")


def test_table_must_match_plan(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("\n".join(GOOD))
    table = load_capacity_table(path)
    with pytest.raises(CapacityTableError, match="set `objective: cloud`"):
        optimize_plan(parse_plan({"workloads": [{"name": "w", "model": "llama-2-7b", "qps": 4, "prompt_tokens": 1,
                                                 "output_tokens": 1, "slo": {"ttft_p99_ms": 1}}]}, "p"),
                      load_catalog(), capacity_table=table)
    with pytest.raises(CapacityTableError, match="says qps 5; make them agree"):
        optimize_plan(cloud_plan("w", 5.0), load_catalog(), capacity_table=table)
    with pytest.raises(CapacityTableError, match="workload 'w' is not in plan"):
        optimize_plan(cloud_plan("v", 4.0), load_catalog(), capacity_table=table)


def test_inventory_spelled_in_capitals_limits_the_table_units(tmp_path):
    # units tied to catalog devices by a `device` column: the inventory is looked up by the device key, so
    # `inventory: {A100-80GB-PCIE: 0}` was no limit and the plan bought an A100 (3 × A10G + 1 × A100 ...).
    # Stored as the catalog key, it now keeps the A100 out: the 30 req/s go to A10Gs alone.
    rows = list(csv.reader((EXAMPLES / "melange-example.csv").read_text().splitlines()))
    rows = [r for r in rows if r and not r[0].startswith("#")]
    rows = [rows[0] + ["device"]] + [r + ["a10g" if r[1] == "A10G" else "a100-80gb-pcie"] for r in rows[1:]]
    table = tmp_path / "t.csv"
    table.write_text("\n".join(",".join(r) for r in rows) + "\n")
    data = load_plan(EXAMPLES / "melange-example.yaml").model_dump(mode="json")
    data["inventory"] = {"A100-80GB-PCIE": 0}
    result = optimize_plan(parse_plan(data, "p"), load_catalog(), capacity_table=table)
    assert result.status.has_plan
    assert {f.device: f.gpus for f in result.fleet} == {"A10G": 12}


def test_plan_limits_and_overrides_a_table_does_not_apply_are_named():
    # A unit without a device column is capped by no inventory, and a plan's devices:/platforms: entries change no
    # unit (the table prices them): `inventory: {a100-80gb-pcie: 0}` beside the shipped table (units A10G, A100-80GB,
    # no device column) and a device price override left the $4.68/h answer as it was, without a word.
    data = load_plan(EXAMPLES / "melange-example.yaml").model_dump(mode="json")
    data["inventory"] = {"a100-80gb-pcie": 0}
    data["devices"] = {"a10g": {"cloud_usd_per_gpu_hour": 0.01}}
    data["platforms"] = {"pcie-8": {"server_usd": 1}}
    plan = parse_plan(data, "p")
    result = optimize_plan(plan, resolve_catalog(plan, load_catalog(), "p"),
                           capacity_table=EXAMPLES / "melange-example.csv", sensitivity=False)
    assert hourly(result) == pytest.approx(4.68, abs=1e-9)  # the table's prices and units, unlimited
    said = {d.code: d.message for d in result.diagnostics if d.level == "warning"}
    assert said["inventory_not_applied"] == ("inventory.a100-80gb-pcie (0 GPUs) limits nothing: no unit of the "
                                             "capacity table has device a100-80gb-pcie in its device column")
    overrides = [d.message for d in result.diagnostics if d.code == "override_not_applied"]
    assert [m.split(":")[0] for m in overrides] == ["devices.a10g", "platforms.pcie-8"]
