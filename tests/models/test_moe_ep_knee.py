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

The case is kept as reported: FP4 GEMMs on MI355X credited with the datasheet's 2x over FP8
(``measured_compute_dtypes_by_vendor`` None), which is what puts its prefill queue at the TTFT knee. The shipped
parameters (refitted with the soft_l1 loss, fit-v10, and holding FP4 on AMD to the FP8 FLOPS, since no AMD FP4 row
was ever fitted) give it 8.82 req/s, TPOT-bound with a TTFT p99 of 706 ms, far from any knee (pooled simulator
669 ms). With those refitted factors and FP4 trusted (lead, 2026-12-06): capacity 20.21 req/s (TPOT), analytic TTFT
p99 576 / 1,950 ms at 0.7 / 1.0 × against 540 / 1,934 pooled (+6.6 / +0.9 %), one 8,000-request run at capacity
3,615 ms (seed 0) and 1,380 ms (seed 1).

With the parameters refitted with the MoE routing glue (2026-12-07, ``moe_glue_bytes_per_element`` 17.84: a
memory-bound time per routed token beside the grouped GEMMs; a full 2,048-token chunk step at b = 160 83.5 → 98.0 ms
with it, the prefill share +45 %) and FP4 trusted: capacity 15.60 req/s (TPOT; the refit without its glue term,
21.24 TTFT-bound), analytic TTFT p99 539 / 990 ms at 0.7 / 1.0 × against 506 / 960 pooled (+6.7 / +3.1 %), but there
u = 0.76, below the knee: one 8,000-request run gives 976 ms (seed 0) and 938 ms (seed 1), seeds 0-39 781-1,263 ms.
The case reaches the knee at its capacity at the TTFT SLO alone, 17.84 req/s (1.14 × its SLO capacity; before the
glue the two coincided, 20.26 against 20.21): u = 0.89 there, analytic TTFT p99 2,000 ms against 1,954 pooled
(+2.4 %), one 8,000-request run 3,511 ms (seed 0) and 1,423 ms (seed 1), seeds 0-39 1,279-3,511 ms (median
1,814; seed 0 the largest again). The shipped parameters (FP4 held to FP8 on AMD) now give it 7.84 req/s (TPOT),
TTFT p99 685 ms (pooled simulator 642).
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
    cat = load_catalog(None)
    params = load_params(None).model_copy(update={"measured_compute_dtypes_by_vendor": None})  # FP4 trusted (above)
    c = build_configs(cat.model("deepseek-v3"), [(cat.device("mi355x"), cat.precision("fp4"), 1, 1)], params,
                      ep=[2])
    cap = capacity_at_slo(c, PROMPT, OUTPUT, SLO_SVC17, params)
    return c, float(cap.max_qps[0]), cap.limited_by[0]


@pytest.fixture(scope="module")
def ds_ep2_knee(ds_ep2):
    """The rate (req/s) at which the case's prefill queue is at the TTFT knee: its capacity at the TTFT SLO alone
    (2,000 ms, no TPOT SLO). There the queue is u = λ·E[S] = 0.89 busy in full-chunk steps (u of the analytic model,
    ``latency.prefill_service_s`` at the running batch), the figure at which the case was reported; 17.84 req/s, 1.14×
    the SLO capacity since the MoE routing glue made TPOT bind first (before it the two coincided, 20.26 / 20.21)."""
    c, _, _ = ds_ep2
    params = load_params(None).model_copy(update={"measured_compute_dtypes_by_vendor": None})  # FP4 trusted
    cap = capacity_at_slo(c, PROMPT, OUTPUT, SLO(ttft_p99_ms=SLO_SVC17.ttft_p99_ms), params)
    assert cap.limited_by[0] == "ttft"
    return float(cap.max_qps[0])


def test_ep2_capacity_is_the_reported_one(ds_ep2):
    """The case of the report: 15.60 req/s at the SLO with the MoE routing glue refit (20.21 before it with the
    fit-v10 factors, 19.71 before those, 19.79 when reported), bound by TPOT (so its TTFT p99 there, 990 ms, 1,950
    before the glue, is under the 2,000 ms SLO by the model's own account)."""
    _, mu, limit = ds_ep2
    assert mu == pytest.approx(15.60, rel=0.02)
    assert limit == "tpot"


@pytest.mark.parametrize("share", [0.7, 1.0])
def test_ep2_ttft_p99_at_the_knee_is_not_optimistic(ds_ep2, ds_ep2_knee, share):
    """Analytic TTFT p99 against the simulated p99 pooled over seeds 0-7 of 20,000 requests (160,000 requests; the
    pooled p99's own spread at 1.0× is about ±5 %, from seeds 0-9: 1,910 ms, and 0-39 of 8,000: 1,883 ms), at
    ``share`` × the knee rate (``ds_ep2_knee``, 17.84 req/s). Measured: +7.2 % at 0.7× (630 vs 588 ms), +2.4 % at
    1.0× (2,000 vs 1,954 ms); before the MoE routing glue, at the capacity 20.21 req/s (then the knee), +6.6 % (576
    vs 540 ms) and +0.9 % (1,950 vs 1,934 ms); at the capacity with the glue, 15.60 req/s (u = 0.76), +3.1 % (990 vs
    960 ms). Held: not more than 10 % under the simulator (an optimistic TTFT makes verification re-size the fleet)
    nor more than 25 % over it (scripts/agreement.py's worst-case target)."""
    c, _, _ = ds_ep2
    q = share * ds_ep2_knee
    st = step_time_for(c, 0)
    runs = [simulate(c, 0, q, PROMPT, OUTPUT, requests=20_000, seed=s, step_time=st).ttft_s for s in range(8)]
    sim_ms = float(np.percentile(np.concatenate(runs), 99.0)) * 1e3
    analytic_ms = float(serve_at_rate(c, q, PROMPT, OUTPUT).ttft_p99_ms[0])
    assert 0.90 * sim_ms <= analytic_ms <= 1.25 * sim_ms, (share, analytic_ms, sim_ms)


def test_one_verification_run_at_the_knee_is_not_a_reference(ds_ep2, ds_ep2_knee):
    """Why the report's 3,237 ms was not a model error: at the knee one 8,000-request run's p99 ranges over a
    factor ~2.7 between seeds (at 19.71 req/s, 1.0× capacity then, seeds 0-39 measured 1,156-3,078 ms, median 1,650;
    seed 0 the largest), so a single run is no yardstick for the analytic p99 near the knee. Held at the knee rate
    (``ds_ep2_knee``, 17.84 req/s; the capacity until the MoE routing glue, 20.21, where seed 0 / 1 gave 3,615 /
    1,380 ms and the analytic 1,950): seed 0 is more than 1.5× seed 1's (now 3,511 vs 1,423 ms), and the analytic
    p99 (2,000 ms) lies between the two. (At the capacity with the glue, 15.60 req/s, u = 0.76, below the knee: 976
    vs 938 ms.)"""
    c, _, _ = ds_ep2
    knee = ds_ep2_knee
    st = step_time_for(c, 0)
    p99 = [float(simulate(c, 0, knee, PROMPT, OUTPUT, requests=8_000, seed=s, step_time=st).ttft[99.0].value_ms)
           for s in (0, 1)]
    analytic_ms = float(serve_at_rate(c, knee, PROMPT, OUTPUT).ttft_p99_ms[0])
    assert p99[0] > 1.5 * p99[1], p99
    assert p99[1] < analytic_ms < p99[0], (p99, analytic_ms)
