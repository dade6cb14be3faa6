"""The optimize terminal's cost table against the plan's own fleet rows."""

from __future__ import annotations

import json
import re

import yaml

from tests.conftest import EXAMPLES

ONE_GPU_ON_AN_OAM_BOARD = {
    "name": "one-gpu", "objective": "capex", "allowed_devices": ["mi300x"],
    "workloads": [{"name": "chat", "model": "llama-3.1-8b", "qps": 1, "prompt_tokens": 512, "output_tokens": 128,
                   "slo": {"ttft_p99_ms": 2000, "tpot_p99_ms": 100}, "precisions": ["bf16"]}],
}


def test_costs_table_counts_the_gpus_bought_beside_those_in_use(run_cli, tmp_path):
    """MI300X is sold on 8-GPU OAM boards: one replica of one GPU buys 8 GPUs and 1 server, capex 8 × $12,500 +
    the board's server. The cost table printed 'GPUs / servers 1 / 1' beside that capex (a GB200 NVL72 plan:
    '28 / 1' beside $3,024,000 for 72 GPUs), where the workbook's Summary says 'GPUs bought 8'."""
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump(ONE_GPU_ON_AN_OAM_BOARD))
    out = tmp_path / "p.json"
    r = run_cli("optimize", plan, "--no-sensitivity", "--no-verify", "--no-cache", "--json", out)
    assert r.code == 0, r.stderr
    data = json.loads(out.read_text())
    (fleet,) = data["fleet"]
    assert (fleet["gpus"], fleet["gpus_installed"], fleet["nodes"]) == (1, 8, 1)
    assert data["capex_usd"] == 8 * fleet["purchase_usd"] + fleet["server_usd"]
    line = next(x for x in r.stdout.splitlines() if "GPUs in use / bought / servers" in x)
    assert re.search(r"\b1 / 8 / 1\b", line), line


def test_costs_table_says_one_year_for_a_one_year_horizon(run_cli, tmp_path):
    """The Mélange example plans one year: the cost table printed 'TCO over 1 years' (the workbook says 'year')."""
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({**ONE_GPU_ON_AN_OAM_BOARD, "horizon_years": 1}))
    r = run_cli("optimize", plan, "--no-sensitivity", "--no-verify", "--no-cache")
    assert r.code == 0, r.stderr
    assert re.search(r"TCO over 1 year\b", r.stdout) and "1 years" not in r.stdout, r.stdout


def _pool(key: str, stage: str, replicas: int, qps: float, pair_link_gb_s: float) -> dict:
    return {"workload": "rag", "key": key, "stage": stage, "device": "h100-sxm", "precision": "fp8", "tp": 8, "pp": 1,
            "ep": 1, "replicas": replicas, "qps": qps, "capacity_qps": qps, "ttft_p99_ms": 999.0 if stage == "prefill"
            else None, "tpot_p99_ms": None if stage == "prefill" else 40.0, "e2e_p99_ms": None, "technique": "",
            "kv_link_gb_s": 7.5 * qps, "pair_link_gb_s": pair_link_gb_s}


def test_prefill_pools_of_different_receive_tiers_are_told_apart():
    """examples/rag-disaggregated.yaml planned H100 tp8 prefill pools of three receive tiers before the tie-break (...__rx800gbps,
    __rx1600gbps, __rx3200gbps): the Deployments table printed three identical-looking 'prefill pool h100-sxm fp8
    tp8 pp1' rows. The KV pairing link (pair_link_gb_s, the workbook's 'KV pairing link' column) tells them apart."""
    from cli.common import stdout
    from cli.optimize_cmd import render

    deployments = [_pool("prefill__h100_sxm__fp8__tp8__pp1__rx800gbps", "prefill", 1, 0.94, 680.0),
                   _pool("prefill__h100_sxm__fp8__tp8__pp1__rx3200gbps", "prefill", 18, 17.67, 2720.0),
                   _pool("decode__h100_sxm__fp8__tp8__pp1", "decode", 3, 18.61, 2720.0)]
    money = dict.fromkeys(("objective_usd", "capex_usd", "annual_opex_usd", "annual_power_usd", "annual_maintenance_usd",
                           "annual_cloud_usd", "tco_usd", "npv_usd", "power_kw", "cost_per_million_output_tokens_usd"), 1.0)
    data = {"plan_name": "rag", "status": "optimal", "status_detail": "proven optimal", "objective": "tco",
            "solve_seconds": 0.1, "solver": "highs", "fleet": [], "deployments": deployments, "diagnostics": [],
            "workloads": [{"name": "rag", "model": "llama-3.1-70b", "kind": "online", "qps": 18.61, "met": True,
                           "cost_per_million_output_tokens_usd": 4.9, "slo_ttft_p99_ms": 1000.0,
                           "slo_tpot_p99_ms": 50.0, "slo_e2e_p99_ms": None}],
            "assumptions": {"horizon_years": 3}, "gpus_total": 176, "nodes_total": 22, **money}
    with stdout.capture() as cap:
        render(data)
    text = cap.get()
    assert "pairing" in text, text
    rows = [line for line in text.splitlines() if "prefill pool" in line or "decode pool" in line]
    assert len(rows) == 3 and rows[0].rstrip(" │").endswith("680") and rows[1].rstrip(" │").endswith("2,720"), rows


def test_validate_counts_one_year_and_one_workload_in_the_singular(run_cli, tmp_path):
    """`gpuplan validate` on a one-workload, one-year plan printed 'horizon 1 years, 1 workloads'."""
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({**ONE_GPU_ON_AN_OAM_BOARD, "horizon_years": 1}))
    r = run_cli("validate", plan)
    assert r.code == 0, r.stderr
    assert "horizon 1 year, 1 workload" in " ".join(r.stdout.split()), r.stdout
    r = run_cli("validate", EXAMPLES / "chat-fleet.yaml")
    assert "horizon 3 years, 3 workloads" in " ".join(r.stdout.split()), r.stdout


def test_a_split_workload_shows_which_request_sizes_go_where():
    # Planner review 26: a workload split into request-size buckets needs a size-aware router, and only the JSON's
    # buckets[] and routing[] said which sizes each deployment takes. One row per (bucket, deployment) routed.
    from cli.optimize_cmd import split_routing_rows

    dep = {"workload": "rag", "device": "mi355x", "precision": "fp4", "tp": 1, "pp": 1, "stage": "colocated"}
    data = {
        "buckets": [{"workload": "rag", "bucket": 0, "fraction": 0.5, "label": "b0_2377_6421tok"},
                    {"workload": "rag", "bucket": 1, "fraction": 0.5, "label": "b1_6422_33573tok"},
                    {"workload": "chat", "bucket": 0, "fraction": 1.0, "label": "all"}],
        "deployments": [{**dep, "key": "a", "ep": 4}, {**dep, "key": "b", "ep": 2},
                        {**dep, "workload": "chat", "key": "a", "ep": 4}],
        "routing": [{"workload": "rag", "bucket": 0, "key": "a", "qps": 1.5, "stage": "colocated"},
                    {"workload": "rag", "bucket": 1, "key": "b", "qps": 1.184, "stage": "colocated"},
                    {"workload": "rag", "bucket": 1, "key": "a", "qps": 0.316, "stage": "colocated"},
                    {"workload": "chat", "bucket": 0, "key": "a", "qps": 40.0, "stage": "colocated"}],
    }
    assert split_routing_rows(data) == [
        ["rag", 0, "2,377–6,421", "50%", "mi355x fp4 tp1 pp1 ep4", "1.50"],
        ["rag", 1, "6,422–33,573", "50%", "mi355x fp4 tp1 pp1 ep2", "1.18"],
        ["rag", 1, "6,422–33,573", "50%", "mi355x fp4 tp1 pp1 ep4", "0.32"],
    ]
    # every workload whole: no table
    data["buckets"] = [b for b in data["buckets"] if b["workload"] == "chat"]
    data["routing"] = [r for r in data["routing"] if r["workload"] == "chat"]
    assert split_routing_rows(data) == []
