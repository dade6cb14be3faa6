"""CLI skeleton: catalog listings, plan validation, and bad input (exit 1, one line, the fix)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import EXAMPLES, assert_no_traceback

CHAT = EXAMPLES / "chat-fleet.yaml"


def test_version(run_cli):
    r = run_cli("--version")
    assert r.code == 0 and r.stdout.startswith("gpuplan ")


def test_devices_json_lists_28_with_sources(run_cli):
    r = run_cli("catalog", "devices", "--json")
    assert r.code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 28
    for row in rows:
        for key in ("key", "memory_gb", "memory_bandwidth_tb_s", "tdp_w", "purchase_usd", "sources"):
            assert key in row
        assert row["sources"]["specs"]["source"]


def test_devices_token_bound_for_model(run_cli):
    """Batch-1 bound = bandwidth / weight bytes: H100 SXM 3.35e12 / (70.6e9 · 2) = 23.7 tokens/s."""
    r = run_cli("catalog", "devices", "--model", "llama-3.1-70b", "--sort", "tokens", "--json")
    rows = json.loads(r.stdout)
    h100 = next(x for x in rows if x["key"] == "h100-sxm")
    assert h100["bound_tokens_per_s"] == pytest.approx(3.35e12 / (70.6e9 * 2), rel=1e-3)
    bounds = [x["bound_tokens_per_s"] for x in rows]
    assert bounds == sorted(bounds, reverse=True)


def test_devices_table_shows_estimates_and_unusable(run_cli):
    r = run_cli("catalog", "devices")
    assert r.code == 0
    assert "purchase_usd*" in r.stdout
    assert "cloud (no hourly price)" in r.stdout


@pytest.mark.parametrize("what", ["models", "precisions"])
def test_other_listings(run_cli, what):
    r = run_cli("catalog", what, "--json")
    assert r.code == 0 and json.loads(r.stdout)


def test_show(run_cli):
    r = run_cli("catalog", "show", "llama-3.3-70b", "--json")
    assert json.loads(r.stdout)["key"] == "llama-3.1-70b"
    r = run_cli("catalog", "show", "h100-sxn")
    assert r.code == 1 and "did you mean 'h100-sxm'" in r.stderr


def test_validate_example(run_cli):
    r = run_cli("validate", str(CHAT), "--json")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert [w["name"] for w in data["workloads"]] == ["chat", "code-completion", "nightly-summaries"]
    # Batch volume → request rate: 5e7 tokens / (256 tokens · 8 h · 3600 s) = 6.78 req/s.
    assert data["workloads"][2]["qps"] == pytest.approx(5e7 / (256 * 8 * 3600), rel=1e-3)


def test_schema(run_cli):
    r = run_cli("schema")
    assert r.code == 0 and "workloads" in json.loads(r.stdout)["properties"]


def _plan(tmp_path, mutate):
    data = yaml.safe_load(CHAT.read_text())
    mutate(data)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _set(path, value):
    def mutate(d):
        cur = d
        for p in path[:-1]:
            cur = cur[p]
        cur[path[-1]] = value
    return mutate


def _delete(path):
    def mutate(d):
        cur = d
        for p in path[:-1]:
            cur = cur[p]
        del cur[path[-1]]
    return mutate


BAD_PLANS = {
    "unknown top-level key": (_set(["budjet"], {"capex_usd": 1}), r"budjet: unknown field \(did you mean 'budget'"),
    "typo in workload field": (_set(["workloads", 0, "qsp"], 3), r"workloads\.0\.qsp: unknown field \(did you mean 'qps'"),
    "negative qps": (_set(["workloads", 0, "qps"], -40), r"workloads\.0\.qps: input should be greater than 0 \(got -40\)"),
    "zero qps": (_set(["workloads", 0, "qps"], 0), r"workloads\.0\.qps: input should be greater than 0 \(got 0\)"),
    "missing model": (_delete(["workloads", 0, "model"]), r"workloads\.0\.model: required field is missing"),
    "unknown model": (_set(["workloads", 0, "model"], "llama-3.1-7b"), r"workloads\[0\]\.model: unknown model 'llama-3.1-7b' \(did you mean"),
    "unknown precision": (_set(["workloads", 0, "precisions"], ["fp9"]), r"precisions\[0\]: unknown precision 'fp9'"),
    "unknown device": (_set(["allowed_devices"], ["h100-sxn"]), r"allowed_devices: unknown device 'h100-sxn' \(did you mean 'h100-sxm'"),
    "p99 below mean": (_set(["workloads", 0, "prompt_tokens"], {"mean": 1000, "p99": 10}), r"p99 \(10\) is below the mean \(1000\)"),
    "duplicate names": (lambda d: d["workloads"][1].update(name="chat"), r"two workloads are named 'chat'"),
    "no slo for online": (_delete(["workloads", 0, "slo"]), r"needs an slo"),
    "wrong type": (_set(["workloads", 0, "qps"], "forty"), r"workloads\.0\.qps: .*number.*\(got 'forty'\)"),
    "absurd qps": (_set(["workloads", 0, "qps"], 1e30), r"workloads\.0\.qps: input should be less than or equal to"),
    "no workloads": (_set(["workloads"], []), r"workloads: .*at least 1"),
}


@pytest.mark.parametrize("case", BAD_PLANS)
def test_bad_plan(run_cli, tmp_path, case):
    mutate, pattern = BAD_PLANS[case]
    path = _plan(tmp_path, mutate)
    r = run_cli("validate", str(path))
    assert r.code == 1, r.stdout
    assert_no_traceback(r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1
    assert str(path) in r.stderr
    import re
    assert re.search(pattern, r.stderr), r.stderr


@pytest.mark.parametrize("content,pattern", [
    (b"", "file is empty"),
    (b"workloads: [\n", "not valid YAML"),
    (b"- just\n- a list\n", "expected a mapping"),
    (b"\xff\xfe\x00\x01binary", "binary file"),
    (b"name: caf\xe9\n", "not UTF-8"),
    (b"a: &a [1,2]\nb: *a\n", "aliases"),
])
def test_unreadable_plan(run_cli, tmp_path, content, pattern):
    path = tmp_path / "plan.yaml"
    path.write_bytes(content)
    r = run_cli("validate", str(path))
    assert r.code == 1 and pattern in r.stderr
    assert_no_traceback(r.stderr)


def test_missing_file(run_cli, tmp_path):
    r = run_cli("validate", str(tmp_path / "nope.yaml"))
    assert r.code == 1 and "not found" in r.stderr


def test_debug_shows_traceback(run_cli, tmp_path):
    from catalog.errors import GpuplanError

    with pytest.raises(GpuplanError):
        run_cli("--debug", "validate", str(tmp_path / "nope.yaml"))
