"""MoE TPOT mean and p99 at mid load against the simulator (``latency._size_biased_step``, the mirrored gamma of
``tails._shape``): the request-weighted step taken through D over the batch's law, with the fixed point's Jensen
gap, instead of the tangent's linear response.

On the spread slopes alone (moep3) the analytic TPOT of mixtral-8x7b humped at mid load: int8 tp2 on l40s, prompts
and outputs lognormal 256 / p99 1,024, mean 40.81 ms and p99 54.24 ms at 0.5 req/s against 33.36 / 43.47 simulated
(+22 % / +25 %), so the margin of a 50 ms TPOT SLO had two roots (0.44 and ~2.4 req/s) and the capacity search
could land on either. docs/model-accuracy.md, "MoE mean TPOT at mid load (moehump)".

Simulated figures: the TPOTs of ``simulate(c, 0, λ, prompt, output, requests=20_000, seed=s)``, s = 0, 1, 2
pooled (one seed moves them < 0.5 %). Tolerances: the mean ±6 % (the model's other approximations: the batch a
negative binomial of the linear response's dispersion, the fixed point's shift by linear response; measured
−1.7 … +5.2 %); the p99 −5 % … +10 % (a planner may be pessimistic, not optimistic), +15 % at 0.3 req/s on l40s
(b̄ ≈ 1.2-2, where the drift's gamma keeps a positive skew the simulated TPOT, bounded by D's ceiling, has not:
measured +13.6 %).
"""

from __future__ import annotations

import numpy as np
import pytest

from catalog import load_catalog
from optimizer.models.configs import build_configs
from optimizer.models.params import load_params
from optimizer.models.serving import capacity_at_slo, serve_at_rate
from workloads.spec import SLO, LengthDist

LOGNORMAL_256 = LengthDist(mean=256, p99=1024)
# (device, precision, tp, prompt, output) and, by rate (req/s), the simulated TPOT (mean, p99) in ms
L40S = ("l40s", "int8", 2, LOGNORMAL_256, LOGNORMAL_256)
L40S_SIMULATED = {0.3: (25.14, 39.67), 0.5: (33.36, 43.47), 0.83: (41.30, 45.69), 1.36: (45.27, 47.47),
                  2.44: (47.88, 50.20)}
H100 = ("h100-sxm", "fp8", 2, LengthDist(mean=1024, p99=8192), LengthDist(mean=256))  # test_ttft_wait_atom's case
H100_SIMULATED = {0.7: (7.33, 11.19), 1.01: (8.44, 12.13), 1.46: (9.93, 12.99), 2.10: (11.54, 13.86),
                  3.02: (12.83, 14.77)}
# the simulated capacity of L40S at TPOT p99 <= 50 ms (seeds 0-2 pooled, bisected on λ): 2.353 req/s, where the
# simulated p99 lies within 0.01 ms of 50 from 2.35 to 2.36
L40S_SIMULATED_CAPACITY_50MS = 2.353


def _configs(case, n=1):
    cat = load_catalog()
    device, precision, tp = case[:3]
    return build_configs(cat.model("mixtral-8x7b"), [(cat.device(device), cat.precision(precision), tp, 1)] * n,
                         load_params())


def _analytic(case, rates):
    r = serve_at_rate(_configs(case, len(rates)), np.asarray(rates, dtype=float), *case[3:])
    return r.tpot_mean_ms, r.tpot_p99_ms


@pytest.mark.parametrize("case, simulated", [(L40S, L40S_SIMULATED), (H100, H100_SIMULATED)], ids=["l40s", "h100"])
def test_mixtral_tpot_mean_agrees_with_the_simulator_at_mid_load(case, simulated):
    rates = list(simulated)
    mean, _ = _analytic(case, rates)
    ratio = mean / np.array([simulated[q][0] for q in rates])
    assert np.all(np.abs(ratio - 1.0) <= 0.06), dict(zip(rates, np.round(ratio, 4), strict=True))


@pytest.mark.parametrize("case, simulated", [(L40S, L40S_SIMULATED), (H100, H100_SIMULATED)], ids=["l40s", "h100"])
def test_mixtral_tpot_p99_agrees_with_the_simulator_at_mid_load(case, simulated):
    rates = list(simulated)
    _, p99 = _analytic(case, rates)
    ratio = p99 / np.array([simulated[q][1] for q in rates])
    high = np.array([0.15 if (case is L40S and q == 0.3) else 0.10 for q in rates])
    assert np.all((ratio >= 0.95) & (ratio <= 1.0 + high)), dict(zip(rates, np.round(ratio, 4), strict=True))


def test_mixtral_l40s_tpot_capacity_is_the_one_root():
    """At TPOT p99 <= 50 ms the margin has one root: the p99 is under the SLO at every rate below the capacity
    (it was 54.2 ms at 0.5 req/s), and the capacity is the simulator's within −5 % … +5 % (the simulated p99 is
    flat near 50 ms there: 0.01 ms a 0.01 req/s)."""
    c = _configs(L40S)
    cap = float(capacity_at_slo(c, *L40S[3:], SLO(ttft_p99_ms=1000, tpot_p99_ms=50)).max_qps[0])
    _, p99 = _analytic(L40S, np.geomspace(0.01, cap, 80))
    assert np.all(p99 <= 50.0 * (1.0 + 1e-6)), float(p99.max())
    assert abs(cap / L40S_SIMULATED_CAPACITY_50MS - 1.0) <= 0.05, cap
