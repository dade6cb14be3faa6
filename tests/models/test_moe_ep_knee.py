"""TTFT p99 of an expert-parallel MoE replica at its SLO capacity, analytic against the simulator (knee10).

The case: deepseek-v3 fp4 on 2× mi355x, ep2 (vLLM), prompts lognormal mean 1,024 / p99 4,096, outputs mean 128 /
p99 512, SLO TTFT p99 2,000 ms and TPOT p99 100 ms (svc17 of ``scripts/bench_optimizer.py``). Its capacity at the SLO
is 19.71 req/s (TPOT-bound; 19.79 before the branching-process TPOT κ3 of ``serving.feedback``); the prefill queue
there is u = λ·E[S] = 0.89 busy in full-chunk steps, so the TTFT p99 is a queueing tail and one simulation's p99
is noisy.

It was reported as the analytic TTFT p99 being optimistic at the knee (1,848 ms against 3,237 ms simulated). That
figure is one run: seed 0 of 8,000 requests (the verification's run length) gives 3,261 ms, the largest of
seeds 0-39 (whose p99s span 1,161-3,261 ms, median 1,687 ms). Pooled over seeds 0-7 of 20,000 requests the simulated
p99 is 550 / 1,003 / 1,834 ms at 0.7 / 0.9 / 1.0 × capacity against the analytic 587 / 1,016 / 1,850 ms (at the
capacity 19.70-19.71 of now: 547 / 983 / 1,763 against 583 / 999 / 1,776): the analytic model is on the
conservative side, within 7 %. So the pooled p99 over many requests is the reference here, not one run.
"""

import numpy as np
import pytest

from catalog import load_catalog
from optimizer.models.configs import build_configs
from optimizer.models.params import load_params
from optimizer.models.serving import capacity_at_slo, serve_at_rate
from optimizer.models.simulate import simulate, step_time_for
from workloads.spec import SLO, LengthDist

PROMPT, OUTPUT = LengthDist(mean=1024, p99=4096), LengthDist(mean=128, p99=512)
SLO_SVC17 = SLO(ttft_p99_ms=2000, tpot_p99_ms=100)


@pytest.fixture(scope="module")
def ds_ep2():
    cat, params = load_catalog(None), load_params(None)
    c = build_configs(cat.model("deepseek-v3"), [(cat.device("mi355x"), cat.precision("fp4"), 1, 1)], params,
                      ep=[2])
    cap = capacity_at_slo(c, PROMPT, OUTPUT, SLO_SVC17, params)
    return c, float(cap.max_qps[0]), cap.limited_by[0]


def test_ep2_capacity_is_the_reported_one(ds_ep2):
    """The case of the report: 19.71 req/s at the SLO (19.79 when reported), bound by TPOT (so its TTFT p99 there,
    1,785 ms, is under the 2,000 ms SLO by the model's own account)."""
    _, mu, limit = ds_ep2
    assert mu == pytest.approx(19.71, rel=0.02)
    assert limit == "tpot"


@pytest.mark.parametrize("share", [0.7, 1.0])
def test_ep2_ttft_p99_at_the_knee_is_not_optimistic(ds_ep2, share):
    """Analytic TTFT p99 against the simulated p99 pooled over seeds 0-7 of 20,000 requests (160,000 requests; the
    pooled p99's own spread at 1.0× is about ±5 %, from seeds 0-9: 1,910 ms, and 0-39 of 8,000: 1,883 ms).
    Measured: +6.6 % at 0.7× (583 vs 547 ms), +0.7 % at 1.0× (1,776 vs 1,763 ms). Held: not more than 10 % under
    the simulator (an optimistic TTFT makes verification re-size the fleet) nor more than 25 % over it
    (scripts/agreement.py's worst-case target)."""
    c, mu, _ = ds_ep2
    q = share * mu
    st = step_time_for(c, 0)
    runs = [simulate(c, 0, q, PROMPT, OUTPUT, requests=20_000, seed=s, step_time=st).ttft_s for s in range(8)]
    sim_ms = float(np.percentile(np.concatenate(runs), 99.0)) * 1e3
    analytic_ms = float(serve_at_rate(c, q, PROMPT, OUTPUT).ttft_p99_ms[0])
    assert 0.90 * sim_ms <= analytic_ms <= 1.25 * sim_ms, (share, analytic_ms, sim_ms)


def test_one_verification_run_at_the_knee_is_not_a_reference(ds_ep2):
    """Why the report's 3,237 ms was not a model error: at 1.0× capacity one 8,000-request run's p99 ranges over a
    factor ~2.7 between seeds (at 19.71 req/s seeds 0-39 measured 1,156-3,078 ms, median 1,650; seed 0 the
    largest), so a single run is no yardstick for the analytic p99 near the knee. Held: seed 0 is more than 1.5×
    seed 1's (3,078 vs 1,303 ms), and the analytic p99 (1,785 ms) lies between the two."""
    c, mu, _ = ds_ep2
    st = step_time_for(c, 0)
    p99 = [float(simulate(c, 0, mu, PROMPT, OUTPUT, requests=8_000, seed=s, step_time=st).ttft[99.0].value_ms)
           for s in (0, 1)]
    analytic_ms = float(serve_at_rate(c, mu, PROMPT, OUTPUT).ttft_p99_ms[0])
    assert p99[0] > 1.5 * p99[1], p99
    assert p99[1] < analytic_ms < p99[0], (p99, analytic_ms)
