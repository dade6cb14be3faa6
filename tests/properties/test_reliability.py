"""Issue 18's general rules that the bad-input corpus cannot show (it only holds failing inputs):
results independent of workload order, a 1-token output meets a TPOT SLO, dotted paths to
workload names with dots, unique sweep labels, control characters escaped on the terminal,
duplicate keys refused at any depth, and the worker pool's behaviour."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import yaml

from catalog import load_catalog
from catalog.errors import WorkloadError
from catalog.files import StrictLoader
from optimizer.optimize import optimize_plan
from optimizer.planning.solver_options import SolverOptions
from optimizer.workers import run_pool
from workloads import resolve_catalog
from workloads.load import parse_plan
from workloads.scenarios import ScenarioFile, apply_override, expand_scenarios

CAT = load_catalog()
VOLATILE = ("timings_s", "created_utc", "solve_seconds", "input_file", "input_sha256")


def _workloads() -> list[dict]:
    return [
        {"name": "chat", "model": "llama-3.1-8b", "qps": 6, "prompt_tokens": {"mean": 512, "p99": 2048},
         "output_tokens": {"mean": 128, "p99": 512}, "precisions": ["fp8"], "slo": {"ttft_p99_ms": 2000}},
        {"name": "batchy", "model": "llama-3.1-8b", "qps": 3, "prompt_tokens": 1024, "output_tokens": 256,
         "precisions": ["fp8"], "slo": {"ttft_p99_ms": 4000, "tpot_p99_ms": 100}},
        {"name": "code", "model": "llama-3.1-8b", "qps": 9, "prompt_tokens": {"mean": 256, "p99": 1024},
         "output_tokens": {"mean": 64, "p99": 256}, "precisions": ["fp8"], "slo": {"ttft_p99_ms": 800}},
    ]


def _solve(workloads: list[dict]) -> dict:
    plan = parse_plan({"name": "order", "allowed_devices": ["l4", "l40s"], "workloads": workloads}, "test")
    result = optimize_plan(plan, resolve_catalog(plan, CAT, "test"), options=SolverOptions(time_limit_s=30),
                           n_buckets=2)
    return {k: v for k, v in result.to_json().items() if k not in VOLATILE}


def test_reversing_workload_order_gives_identical_results():
    forward = _solve(_workloads())
    backward = _solve(list(reversed(_workloads())))
    assert forward["status"] in ("optimal", "feasible")
    assert json.dumps(forward, sort_keys=True) == json.dumps(backward, sort_keys=True)
    assert [w["name"] for w in forward["workloads"]] == ["batchy", "chat", "code"]  # name order


def test_one_token_output_meets_a_tpot_slo():
    """TPOT is the gap between output tokens; with one output token there is none: met, 0 ms."""
    w = {"name": "classify", "model": "llama-3.1-8b", "qps": 5, "prompt_tokens": 512, "output_tokens": 1,
         "precisions": ["fp8"], "slo": {"tpot_p99_ms": 50}}
    result = _solve([w])
    assert result["status"] in ("optimal", "feasible"), result["status_detail"]
    assert all(d["tpot_p99_ms"] == 0 for d in result["deployments"])
    assert result["workloads"][0]["met"] is True


def _plan_data() -> dict:
    return {"workloads": [{"name": "chat-v1.5", "model": "llama-3.1-8b", "qps": 3, "prompt_tokens": 100,
                           "output_tokens": 100, "slo": {"ttft_p99_ms": 2000}}]}


@pytest.mark.parametrize("path", ["workloads.chat-v1.5.qps", 'workloads."chat-v1.5".qps', "workloads.'chat-v1.5'.qps"])
def test_dotted_path_reaches_a_workload_with_dots(path):
    data = _plan_data()
    apply_override(data, path, 7, CAT, "test")
    assert data["workloads"][0]["qps"] == 7


def test_dotted_path_reaches_a_device_field():
    data = _plan_data()
    apply_override(data, "devices.h200-sxm.purchase_usd", 24000, CAT, "test")
    assert data["devices"] == {"h200-sxm": {"purchase_usd": 24000}}


def test_sweep_labels_are_unique_and_readable():
    spec = ScenarioFile.model_validate({"plan": _plan_data(), "sweeps": [
        {"name": "b", "kind": "budget", "from": 100000, "to": 100001, "steps": 3},
        {"name": "g", "kind": "demand", "multipliers": [1, 1.5, 2]}]})
    names = [s.name for s in expand_scenarios(spec, _plan_data(), CAT, "test")]
    assert names == ["base", "b @ $100,000.0", "b @ $100,000.5", "b @ $100,001.0", "g @ 1x", "g @ 1.5x", "g @ 2x"]
    assert len(set(names)) == len(names)


def test_budget_labels_keep_whole_dollars_when_they_differ():
    spec = ScenarioFile.model_validate({"plan": _plan_data(), "sweeps": [
        {"name": "b", "kind": "budget", "from": 100000, "to": 500000, "steps": 3}]})
    names = [s.name for s in expand_scenarios(spec, _plan_data(), CAT, "test")]
    assert names == ["base", "b @ $100,000", "b @ $300,000", "b @ $500,000"]


@pytest.mark.parametrize("text", [
    "a: 1\na: 2\n",
    "top:\n  inner:\n    x: 1\n    x: 1\n",
    "list:\n  - {k: 1, k: 2}\n",
    "a:\n  - b:\n      c: 1\n      d: [{e: 1, e: 2}]\n",
])
def test_duplicate_keys_are_refused_at_any_depth(text):
    with pytest.raises(yaml.YAMLError, match="duplicate key"):
        yaml.load(text, Loader=StrictLoader)  # noqa: S506 - SafeLoader subclass


@pytest.mark.parametrize("text", ["a: {<<: {b: 1}, b: 2}\n", "a: 017\n", "a: -017\n", "a: 1:30\n", "a: 1:30.5\n"])
def test_yaml_11_readings_that_change_the_value_are_refused(text):
    """A merge key hides the value it brings in; 017 is octal 15 and 1:30 base-60 90 in YAML 1.1."""
    with pytest.raises(yaml.YAMLError, match="merge keys|leading zero|base-60"):
        yaml.load(text, Loader=StrictLoader)  # noqa: S506 - SafeLoader subclass


def test_numbers_and_dates_read_as_written():
    """0x10, 1_000, 0, 0.5 and 1.0e+3 mean what they say; a date is text (no field is a date)."""
    text = "a: 0x10\nb: 1_000\nc: 0\nd: 0.5\ne: 1.0e+3\nf: 2026-01-01\n"
    assert yaml.load(text, Loader=StrictLoader) == {  # noqa: S506
        "a": 16, "b": 1000, "c": 0, "d": 0.5, "e": 1000.0, "f": "2026-01-01"}


def test_distinct_keys_still_load():
    assert yaml.load("a: 1\nb: {a: 2}\nc: [{a: 3}, {a: 4}]\n", Loader=StrictLoader) == {  # noqa: S506
        "a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]}


def test_control_characters_in_a_plan_name_are_escaped_on_the_terminal(run_cli, tmp_path):
    plan = tmp_path / "p.yaml"
    data = {"name": "evil\x1b[2J\x1b]0;title\x07", "allowed_devices": ["l4"], "workloads": [_workloads()[0]]}
    plan.write_text(yaml.safe_dump(data))
    r = run_cli("optimize", plan)
    assert r.code == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "evil\\x1b[2J\\x1b]0;title\\x07" in r.stdout


def test_context_check_names_the_workload_and_the_model():
    plan = parse_plan({"workloads": [{"name": "long", "model": "llama-2-7b", "qps": 1, "prompt_tokens": 4000,
                                      "output_tokens": 200, "slo": {"ttft_p99_ms": 5000}}]}, "p.yaml")
    with pytest.raises(WorkloadError, match=r"p\.yaml: workloads\[0\]\.prompt_tokens: 'long' asks for 4,000 prompt "
                                            r"\+ 200 output tokens at p99, beyond the 4,096-token context of llama-2-7b"):
        resolve_catalog(plan, CAT, "p.yaml")


def _square(x: int) -> int:
    return x * x


def _fail_on_three(x: int) -> int:
    if x == 3:
        raise WorkloadError("three is not allowed")
    return x


def test_pool_keeps_order_and_reports_progress():
    seen = []
    assert run_pool(_square, range(7), 2, progress=seen.append) == [0, 1, 4, 9, 16, 25, 36]
    assert seen == [1] * 7


def test_pool_reraises_a_worker_error_as_itself():
    with pytest.raises(WorkloadError, match="three is not allowed"):
        run_pool(_fail_on_three, range(6), 2)


def _die_by_sigkill(x: int) -> int:
    if x == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does to a worker
    time.sleep(0.2)
    return x


def test_a_killed_worker_is_a_one_line_error_not_a_traceback():
    """A worker killed from outside (OOM killer, `kill PID`) surfaced as concurrent.futures' BrokenProcessPool
    traceback with exit 1; now a GpuplanError naming the worker and the signal, the other workers killed."""
    from catalog.errors import GpuplanError
    from optimizer.workers import WorkerDied

    with pytest.raises(WorkerDied, match=r"^a worker process \(pid \d+\) was killed by SIGKILL .*GPUPLAN_WORKERS=1") as exc:
        run_pool(_die_by_sigkill, [0, 1, 2, 3], 2)
    assert isinstance(exc.value, GpuplanError)


@pytest.mark.parametrize(("exitcode", "how"), [
    (-signal.SIGKILL, "was killed by SIGKILL (the out-of-memory killer, or a kill of its pid)"),
    (-signal.SIGTERM, "was killed by SIGTERM (a kill of its pid)"),  # the OOM killer never sends SIGTERM
    (3, "ended with exit code 3 (it exited without its result)"),
])
def test_a_dead_worker_is_blamed_on_what_could_have_killed_it(exitcode, how):
    from types import SimpleNamespace

    from optimizer.workers import _death_text

    assert _death_text([SimpleNamespace(pid=7, exitcode=exitcode)]).startswith(f"a worker process (pid 7) {how} and")
