"""The third cumulant of the TPOT's prefill noise under load feedback (knee10, ``serving.feedback``).

Arrivals under load feedback come in clusters — an immigrant and its descendants, each request letting in
Poisson(g) more — so a count over a long window is a Poisson number of Borel-sized clusters, whose cumulants are a
Poisson count's × 1, 1/(1 − g)², (1 + 2g)/(1 − g)⁴: the κ3 factor is (1 + 2g)·F² of the variance factor F, where
the model had F^1.5 (a Poisson count's skewness kept). With F^1.5 the TPOT p99 at the TPOT capacity of a dense
replica with a large prefill share was 5.7 % under the simulator's (the per-output-length sds within 5 %, their
p99s 6-10 % under), and verification re-sized the 20-workload plan three rounds for it.
"""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from catalog import load_catalog
from optimizer.models.configs import build_configs
from optimizer.models.params import load_params
from optimizer.models.serving import capacity_at_slo, feedback_factors, serve_at_rate
from optimizer.models.simulate import simulate, step_time_for
from workloads.spec import SLO, LengthDist


@pytest.mark.parametrize("g", [0.2, 0.5, 0.8])
def test_borel_cluster_moments_on_paper(g):
    """Total progeny of a Galton–Watson tree with Poisson(g) offspring: P(N = n) = e^{−gn}(gn)^{n−1}/n! (Borel).
    E[N] = 1/(1 − g), E[N²] = 1/(1 − g)³, E[N³] = (1 + 2g)/(1 − g)⁵, so per unit of mean the second and third
    moments are 1/(1 − g)² and (1 + 2g)/(1 − g)⁴ = (1 + 2g)·(1/(1 − g)²)²: summed over the pmf to n = 20,000."""
    n = np.arange(1, 20_001, dtype=float)
    log_p = -g * n + (n - 1) * np.log(g * n) - np.array([math.lgamma(k + 1) for k in n])
    p = np.exp(log_p)
    m1, m2, m3 = (float(np.sum(p * n**k)) for k in (1, 2, 3))
    assert m1 == pytest.approx(1 / (1 - g), rel=1e-6)
    assert m2 / m1 == pytest.approx(1 / (1 - g) ** 2, rel=1e-6)
    assert m3 / m1 == pytest.approx((1 + 2 * g) * (1 / (1 - g) ** 2) ** 2, rel=1e-6)


def test_feedback_k3_factor_is_the_cluster_one():
    """Prefill gain u_p = 0.3, no decode gain (dD/db = 0): F = 1/(1 − 0.3)² = 2.0408 and the κ3 factor
    (1 + 0.6)/(0.7)⁴ = 6.6639 = 1.6·F² (it was F^1.5 = 2.9155); no feedback (u_p = 0): both 1."""
    lens = SimpleNamespace(mean_o1=np.array([100.0, 100.0]))
    s = SimpleNamespace(rho1=np.array([0.3, 0.0]), slope_s=np.zeros(2), eps_s=np.array([0.01, 0.0]),
                        step_s=np.array([0.05, 0.05]))
    fb = feedback_factors(np.array([30.0, 30.0]), s, lens)
    assert fb.prefill_factor[0] == pytest.approx(1 / 0.49, rel=1e-12)
    assert fb.prefill_k3_factor[0] == pytest.approx(1.6 / 0.7**4, rel=1e-12)
    assert fb.prefill_factor[1] == pytest.approx(1.0) and fb.prefill_k3_factor[1] == pytest.approx(1.0)


def test_tpot_p99_at_the_tpot_capacity_tracks_the_simulator():
    """llama-3.1-70b fp4 on one rtx_pro_6000, prompts lognormal 1,024 / p99 4,096, outputs 128 / 512 (svc01 of
    ``scripts/bench_optimizer.py``; SLO TTFT 2,000 ms, TPOT 100 ms): TPOT-bound capacity 1.56 req/s (1.67 with
    F^1.5). Simulated TPOT p99 pooled over seeds 0-7 of 20,000 requests at it: 100.2 ms, analytic 100.0 (−0.2 %;
    with F^1.5 at its own capacity 100.0 against 106.1 ms, −5.7 %). Held: analytic within −3 % / +10 % of the
    pooled simulation (the F^1.5 model fails the −3 %)."""
    cat, params = load_catalog(None), load_params(None)
    c = build_configs(cat.model("llama-3.1-70b"), [(cat.device("rtx_pro_6000"), cat.precision("fp4"), 1, 1)],
                      params)
    prompt, output = LengthDist(mean=1024, p99=4096), LengthDist(mean=128, p99=512)
    cap = capacity_at_slo(c, prompt, output, SLO(ttft_p99_ms=2000, tpot_p99_ms=100), params)
    assert cap.limited_by[0] == "tpot"
    mu = float(cap.max_qps[0])
    st = step_time_for(c, 0)
    runs = [simulate(c, 0, mu, prompt, output, requests=20_000, seed=s, step_time=st).tpot_s for s in range(8)]
    sim_ms = float(np.percentile(np.concatenate(runs), 99.0)) * 1e3
    analytic_ms = float(serve_at_rate(c, mu, prompt, output).tpot_p99_ms[0])
    assert 0.97 * sim_ms <= analytic_ms <= 1.10 * sim_ms, (mu, analytic_ms, sim_ms)
