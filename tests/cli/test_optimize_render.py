"""The optimize terminal's cost table against the plan's own fleet rows."""

from __future__ import annotations

import json
import re

import yaml

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
