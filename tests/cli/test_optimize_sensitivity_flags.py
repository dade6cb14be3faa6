"""`gpuplan optimize` flags of issue 15: --no-sensitivity, --no-verify, --confidence."""

from __future__ import annotations

import json

import yaml

PLAN = {"name": "flags", "allowed_devices": ["h100-sxm"],
        "workloads": [{"name": "chat8b", "model": "llama-3.1-8b", "qps": 40,
                       "prompt_tokens": {"mean": 1024, "p99": 4096}, "output_tokens": {"mean": 256, "p99": 1024},
                       "slo": {"ttft_p99_ms": 1000}, "precisions": ["fp8"]}]}


def test_flags_switch_the_analyses_and_state_the_sizing(run_cli, tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump(PLAN))
    off = run_cli("optimize", plan, "--no-sensitivity", "--no-verify", "--json", "-")
    assert off.code == 0, off.stderr
    data = json.loads(off.stdout)
    assert data["sensitivity"] is None and data["verification"] is None
    assert data["headroom"]["sized_for"] == "point estimate"
    assert data["fleet"][0]["price_basis"] == "list"  # h100-sxm: a sourced catalog price
    sure = run_cli("optimize", plan, "--confidence", "0.9", "--no-verify", "--sensitivity")
    assert sure.code == 0, sure.stderr
    assert "sized for: confidence 0.9 of the performance band" in sure.stdout
    assert "runner-up" in sure.stdout and "Tornado" in sure.stdout
    bad = run_cli("optimize", plan, "--confidence", "1.5")
    assert bad.code != 0


def test_sensitivity_by_default_only_with_the_workbook(run_cli, tmp_path):
    """Without a flag the re-solves run when --out writes the workbook (its Sensitivity sheet), not otherwise."""
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump(PLAN))
    quick = run_cli("optimize", plan, "--no-verify", "--json", "-")
    assert quick.code == 0, quick.stderr
    assert json.loads(quick.stdout)["sensitivity"] is None
    shown = run_cli("optimize", plan, "--no-verify")
    assert "sensitivity: not computed (--sensitivity" in shown.stdout
    book = run_cli("optimize", plan, "--no-verify", "--json", tmp_path / "p.json", "--out", tmp_path / "p.xlsx")
    assert book.code == 0, book.stderr
    assert json.loads((tmp_path / "p.json").read_text())["sensitivity"]["solves"] > 0
