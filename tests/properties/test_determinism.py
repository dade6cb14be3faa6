"""Determinism: the same input gives byte-identical JSON (apart from timings) and the same fleet.

Across processes (different ``PYTHONHASHSEED``, so set and dict orders of str keys differ),
across the order of the plan's workloads, and across what-if worker counts. Exact ties
between fleets of equal cost follow the rule of ``optimizer.planning.milp`` (module docstring):
the GPUs go to the device whose key sorts first (:func:`optimizer.planning.milp.tie_break`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from catalog import load_catalog
from optimizer.optimize import optimize_plan
from optimizer.results.check import check_plan
from tests.conftest import EXAMPLES, REPO
from workloads import parse_plan, resolve_catalog

TIMINGS = re.compile(r'"(solve_seconds|created_utc|seconds)": [^,\n]+')  # seconds: sensitivity, verification
STAGE_TIMINGS = re.compile(r'"(timings_s|cache)": (\{[^}]*\}|null)')  # cache: the disk cache's hits this run


def _without_timings(text: str) -> str:
    return STAGE_TIMINGS.sub(r'"\1": null', TIMINGS.sub(r'"\1": null', text))


def test_optimize_json_is_byte_identical_across_processes(tmp_path):
    data = yaml.safe_load((EXAMPLES / "chat-fleet.yaml").read_text())
    plan = tmp_path / "chat.yaml"
    plan.write_text(yaml.safe_dump({**data, "allowed_devices": ["l40s", "h100-sxm", "mi300x", "l4"]}))
    procs = [subprocess.Popen([sys.executable, "-m", "cli.app", "optimize", str(plan), "--sensitivity", "--json",
                               str(tmp_path / f"run{seed}.json")], cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONHASHSEED": seed})
             for seed in ("1", "2")]
    for proc in procs:
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
    texts = [(tmp_path / f"run{seed}.json").read_text() for seed in ("1", "2")]
    assert texts[0] != _without_timings(texts[0])  # the timings were there and were masked
    assert _without_timings(texts[0]) == _without_timings(texts[1])


def _plan(workloads: list[dict], **top) -> tuple:
    plan = parse_plan({"name": "t", **top, "workloads": workloads}, "t")
    return plan, resolve_catalog(plan, load_catalog(), "t")


def test_same_fleet_whatever_the_order_of_the_workloads():
    data = yaml.safe_load((EXAMPLES / "chat-fleet.yaml").read_text())
    data["allowed_devices"] = ["l40s", "h100-sxm", "mi300x", "l4"]  # fewer candidates: a quicker test
    results = []
    for workloads in (data["workloads"], data["workloads"][::-1]):
        plan = parse_plan({**data, "workloads": workloads}, "chat-fleet.yaml")
        results.append(optimize_plan(plan, resolve_catalog(plan, load_catalog(), "p"), compare_single_device=False))
    a, b = results
    assert a.fleet == b.fleet
    assert a.objective_usd == pytest.approx(b.objective_usd, rel=1e-12)
    # Which replicas run on the GPUs of a board bought whole is a tie (those GPUs cost the same used
    # or not), so the order of the workloads may pick another split of the same servers; each is sound.
    assert check_plan(a, None) == [] and check_plan(b, None) == []
    for r in (a, b):
        assert sum(d.gpus for d in r.deployments) == sum(f.gpus for f in r.fleet)


@pytest.mark.parametrize("twin", ["a-l40s", "z-l40s"])
def test_exact_tie_goes_to_the_device_key_that_sorts_first(tmp_path, twin):
    """An identical copy of the L40S (same figures, another key) ties with it on every candidate."""
    base = load_catalog().devices["l40s"].model_dump(mode="json", exclude_none=True)
    override = tmp_path / "twin.yaml"
    platform = load_catalog().platforms["pcie-8"].model_dump(mode="json")
    override.write_text(yaml.safe_dump({"devices": [{**base, "key": twin}],  # and a copy of its server
                                        "platforms": [{**platform, "key": "pcie-8-twin", "devices": [twin]}]}))
    catalog = load_catalog(override)
    fleets = []
    for order in (["l40s", twin], [twin, "l40s"]):
        plan = parse_plan({"name": "t", "allowed_devices": order, "workloads": [{
            "name": "w", "model": "llama-3.1-8b", "qps": 30, "prompt_tokens": 512, "output_tokens": 128,
            "slo": {"tpot_p99_ms": 100}, "precisions": ["fp8"]}]}, "t")
        r = optimize_plan(plan, resolve_catalog(plan, catalog, "t"), compare_single_device=False)
        fleets.append([(f.device, f.gpus) for f in r.fleet])
    first = min("l40s", twin)
    assert fleets[0] == fleets[1]
    assert {d for d, _ in fleets[0]} == {first}


def test_whatif_same_rows_with_one_or_two_workers(run_cli, tmp_path):
    scenario = tmp_path / "whatif.yaml"
    scenario.write_text(yaml.safe_dump({
        "plan": {"name": "w", "allowed_devices": ["l40s", "h100-sxm", "l4"], "workloads": [
            {"name": "chat", "model": "llama-3.1-8b", "qps": 20, "prompt_tokens": {"mean": 512, "p99": 2048},
             "output_tokens": {"mean": 128, "p99": 512}, "slo": {"ttft_p99_ms": 1000, "tpot_p99_ms": 100},
             "precisions": ["fp8"], "min_replicas": 1}]},
        "variants": [{"name": "x3", "set": {"workloads.chat.qps": 60}},
                     {"name": "cheap-h100", "set": {"devices.h100-sxm.purchase_usd": 15000}}],
        "sweeps": [{"name": "growth", "kind": "demand", "multipliers": [1.5, 2]}],
    }))
    texts = []
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}.json"
        r = run_cli("whatif", scenario, "--workers", workers, "--json", out)
        assert r.code == 0, r.stderr
        texts.append(_without_timings(out.read_text()))
    assert texts[0] == texts[1]
    rows = json.loads(texts[0])["scenarios"]
    assert [r["name"] for r in rows] == ["base", "x3", "cheap-h100", "growth @ 1.5x", "growth @ 2x"]
