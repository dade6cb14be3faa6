"""The fixed point's slope dE[T]/dm is taken at one resolved prompt count (``fixed_point._mean_at_k_of``).

llama-2-7b fp8 tp8 on gaudi2, prompts lognormal 1,920 / p99 3,840, outputs 64 / p99 256. Between 13.965 and 13.985
req/s the rate m = λ·t̄ of prompts per step is 0.377-0.381, where m and m + δm (δm = 1 % of m) resolve 10 and 11
prompts a step (``state.step_k_rows``). Their means then carried different truncations of the count's tail (E[T] at
K = 10 is 0.16 % under its converged value, at 11 0.09 %), the difference quotient read a slope 10 % too steep, the
lag-1 correlation ρ₁ jumped 0.771 → 0.845, the batch's spread doubled (its top node 101 → 230 sequences) and the
prefill queue at that node went unstable: TTFT p99 = ∞ over that window, though the replica serves up to 14.12
req/s — a capacity search probing there stopped 1 % low (13.965 instead of 14.12 req/s).
"""

from __future__ import annotations

import numpy as np

from catalog import load_catalog
from optimizer.models.configs import build_configs
from optimizer.models.params import load_params
from optimizer.models.serving.capacity import tiled_rows
from optimizer.models.serving.fixed_point import solve_state
from optimizer.models.serving.latency import evaluate_load
from workloads.spec import LengthDist

PARAMS = load_params(None)


def _case():
    catalog = load_catalog()
    c = build_configs(catalog.model("llama-2-7b"), [(catalog.device("gaudi2"), catalog.precision("fp8"), 8, 1)], PARAMS)
    return tiled_rows(c, [(LengthDist(mean=1920, p99=3840), LengthDist(mean=64, p99=256))])


def test_ttft_stays_finite_where_the_resolved_prompt_count_steps():
    c, lens = _case()
    rates = np.linspace(13.955, 13.995, 17)
    ttft = np.array([evaluate_load(c, np.array([q]), lens, 2048, {"ttft", "tpot"}, p50=False).ttft_p99_ms[0]
                     for q in rates])
    assert np.all(np.isfinite(ttft)), ttft  # was ∞ at 13.965-13.985
    assert np.all(np.diff(ttft) >= 0.0), ttft  # and rising with the rate (by 5 % at most per step of 0.0025 req/s)
    assert np.all(ttft[1:] / ttft[:-1] <= 1.05), ttft


def test_lag_one_correlation_is_continuous_across_the_step():
    c, lens = _case()
    rho = [float(solve_state(c, np.array([q]), lens, 2048).rho1[0]) for q in (13.96, 13.965)]
    # m and m + δm resolve 10 prompts at 13.96, 10 and 11 at 13.965: ρ₁ 0.7714 → 0.8451 before, 0.7752 now
    assert abs(rho[1] - rho[0]) <= 0.01, rho
