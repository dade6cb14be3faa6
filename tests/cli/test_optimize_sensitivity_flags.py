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


def test_sensitivity_is_on_by_default_and_skipping_it_is_said(run_cli, tmp_path):
    """Issue 15's contract: without a flag the terminal shows runner-up, break-evens and tornado;
    --no-sensitivity skips the re-solves and says so."""
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump(PLAN))
    default = run_cli("optimize", plan, "--no-verify", "--json", "-")
    assert default.code == 0, default.stderr
    assert json.loads(default.stdout)["sensitivity"]["solves"] > 0
    skipped = run_cli("optimize", plan, "--no-verify", "--no-sensitivity")
    assert skipped.code == 0, skipped.stderr
    assert "sensitivity: not computed (--no-sensitivity" in skipped.stdout
