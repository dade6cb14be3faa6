"""The simulator check's sequential stopping rule (optimizer/planning/verify.py), on paper-derived cases."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from catalog import load_catalog
from optimizer.optimize import optimize_plan
from optimizer.planning import verify
from optimizer.planning.verify import MIN_REPLICATIONS, REPLICATIONS, _decided
from workloads import parse_plan, resolve_catalog


def _w(ttft_ms: float | None = None, tpot_ms: float | None = None):
    return SimpleNamespace(slo=SimpleNamespace(ttft_p99_ms=ttft_ms, tpot_p99_ms=tpot_ms, e2e_p99_ms=None))


def _runs(p99s_ms: list[float], attr: str = "ttft_s") -> list[dict[str, np.ndarray]]:
    return [{attr: np.full(200, v / 1e3)} for v in p99s_ms]  # every request at v: the run's p99 is v


@pytest.mark.parametrize(("p99s", "slo", "decided"), [
    # bounds exp(m ± t·s/√R) over the runs' log p99s (t one-sided 99 %: 31.821 at 2 runs, 6.965 at 3)
    # 2 runs: ln 100, ln 110 -> m 4.653, s 0.0674: exp(4.653 + 31.821·0.0674/√2) = 478 < 1000 -> met early
    ([100, 110], 1000, True),
    # straddling the SLO: 41 .. 24,234 -> undecided
    ([900, 1100], 1000, False),
    # 2 runs above but spread: 218 .. 11,698 -> undecided ...
    ([1500, 1700], 1000, False),
    # ... 2 runs 3x above and close: 1,110 .. 8,651 > 1000 -> missed, decided (mean − t·sd of the raw
    # p99s, 3100 − 31.821·141/√2 = −82, could not tell it from the SLO)
    ([3000, 3200], 1000, True),
    # a third run: 2,485 .. 4,111 -> missed
    ([3000, 3200, 3400], 1000, True),
    # one run is too few for any bound
    ([100], 1000, False),
])
def test_stops_only_when_a_one_sided_99_bound_clears_the_slo(p99s, slo, decided):
    assert _decided(_runs(p99s), _w(ttft_ms=slo)) is decided


def test_interval_is_positive_and_contains_the_pooled_p99():
    """Runs 20 s and 2 s apart by 10x (a queue near saturation): the raw-scale interval went below 0."""
    runs = [np.full(200, 2.0), np.full(200, 20.0), np.full(200, 5.0)]
    pooled, low, high = verify.replicated_p99_ms(runs)
    assert pooled == pytest.approx(20_000.0)
    # logs of 2000, 20000, 5000 ms: m 8.674, s 1.159; t 4.303 (2 dof, 97.5 %): exp(8.674 ± 2.880) = 329 .. 102,600
    assert low == pytest.approx(np.exp(8.674 - 2.880), rel=2e-3) and low > 0
    assert high == pytest.approx(np.exp(8.674 + 2.880), rel=2e-3) and high >= pooled


def test_every_metric_must_be_decided():
    runs = [{"ttft_s": np.full(200, 0.1), "tpot_s": np.full(200, t)} for t in (0.045, 0.055)]
    assert _decided(runs, _w(ttft_ms=1000)) is True  # TTFT alone: clear
    assert _decided(runs, _w(ttft_ms=1000, tpot_ms=50)) is False  # TPOT straddles 50 ms
    assert MIN_REPLICATIONS == 2 and REPLICATIONS == 5


def test_verification_is_the_same_with_one_or_two_workers(monkeypatch):
    plan = parse_plan({"name": "v", "allowed_devices": ["h100-sxm", "l40s"], "workloads": [
        {"name": "chat", "model": "llama-3.1-8b", "qps": 20, "prompt_tokens": {"mean": 1024, "p99": 4096},
         "output_tokens": {"mean": 256, "p99": 1024}, "slo": {"ttft_p99_ms": 1000}, "precisions": ["fp8"]},
        {"name": "code", "model": "llama-3.1-8b", "qps": 40, "prompt_tokens": {"mean": 512, "p99": 2048},
         "output_tokens": {"mean": 64, "p99": 256}, "slo": {"ttft_p99_ms": 500}, "precisions": ["fp8"]}]}, "v")
    cat = resolve_catalog(plan, load_catalog(), "v")
    got = []
    for workers in ("1", "2"):
        monkeypatch.setenv("GPUPLAN_WORKERS", workers)
        r = optimize_plan(plan, cat, compare_single_device=False, verify=True)
        got.append((r.objective_usd, [(v.key, v.simulated_ms, v.requests, v.met) for v in r.verification.deployments]))
    assert got[0] == got[1]
    assert got[0][1] and all(n % 8000 == 0 and 2 * 8000 <= n <= 5 * 8000 for _, _, n, _ in got[0][1])


def test_a_deployment_is_simulated_with_the_engine_it_was_planned_with(monkeypatch):
    """A workload naming vLLM on an H100 (default TensorRT-LLM) is checked as vLLM, not as the default."""
    seen = []
    real = verify._checks

    def spy(*args, **kwargs):
        checks, notes = real(*args, **kwargs)
        seen.extend((ch.c.key, ch.configs.keys[0]) for ch in checks)
        return checks, notes

    monkeypatch.setattr(verify, "_checks", spy)
    plan = parse_plan({"name": "e", "allowed_devices": ["h100-sxm"], "workloads": [
        {"name": "chat", "model": "llama-3.1-8b", "qps": 20, "engine": "vllm",
         "prompt_tokens": {"mean": 1024, "p99": 4096}, "output_tokens": {"mean": 256, "p99": 1024},
         "slo": {"ttft_p99_ms": 1000}, "precisions": ["fp8"]}]}, "e")
    optimize_plan(plan, resolve_catalog(plan, load_catalog(), "e"), compare_single_device=False, verify=True)
    assert seen and all("vllm" in simulated and planned.startswith(simulated) for planned, simulated in seen), seen


def test_a_plan_too_large_to_simulate_by_default_says_so(monkeypatch):
    """Over MAX_VERIFIED_DEPLOYMENTS online deployments the check is off by default: the result
    warns that its p99s are the analytic model's alone (it said nothing: the 20-workload plan's 29
    deployments went unsimulated in silence); an explicit --no-verify stays quiet."""
    from optimizer import optimize as optimize_mod

    monkeypatch.setattr(optimize_mod, "verify_by_default", lambda cset, sol: False)
    plan = parse_plan({"name": "big", "allowed_devices": ["h100-sxm"], "workloads": [
        {"name": "chat", "model": "llama-3.1-8b", "qps": 20, "prompt_tokens": {"mean": 1024, "p99": 4096},
         "output_tokens": {"mean": 256, "p99": 1024}, "slo": {"ttft_p99_ms": 1000}, "precisions": ["fp8"]}]}, "big")
    cat = resolve_catalog(plan, load_catalog(), "big")
    quiet = optimize_plan(plan, cat, compare_single_device=False, verify=False)
    told = optimize_plan(plan, cat, compare_single_device=False, verify=None)  # the CLI default
    assert told.verification is None and quiet.verification is None
    [warning] = [d for d in told.diagnostics if d.code == "verification_skipped"]
    assert warning.level == "warning" and "1 online deployments were not simulated" in warning.message
    assert not any(d.code == "verification_skipped" for d in quiet.diagnostics)
