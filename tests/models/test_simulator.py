"""Discrete-event simulator: exact zero-load case, determinism, KV pressure, CIs."""

from __future__ import annotations

import numpy as np
import pytest

from catalog import load_catalog
from catalog.errors import ModelError
from optimizer.models import perf
from optimizer.models.configs import build_configs
from optimizer.models.params import load_params
from optimizer.models.simulate import StepTime, percentile_ci, simulate
from workloads.spec import LengthDist

CAT = load_catalog(None)
PARAMS = load_params()


def cfg(model="llama-3.1-8b", device="h100-sxm", prec="bf16", tp=1):
    return build_configs(CAT.model(model), [(CAT.device(device), CAT.precision(prec), tp, 1)], PARAMS)


def test_step_table_equals_perf_model():
    c = cfg("mixtral-8x7b", "h100-sxm", "fp8", 2)  # MoE: non-linear expert reads
    st = StepTime(c, 0, 4096)
    for b, ctx, n, span in [(0, 0, 500, 250), (1, 700, 0, 0), (64, 1200, 2048, 3000), (300, 5000, 17, 8)]:
        assert st(b, ctx, n, span) == pytest.approx(float(perf.decode_step_s(c, b, ctx, n, span)[0]), rel=1e-12)


def test_fixed_lengths_zero_load_ttft_is_prefill_and_tpot_is_step_time():
    """Arrivals 10^5 s apart never overlap: TTFT = prefill_s(L) + the front-end time
    (request_overhead_s), TPOT = mean of batch-1 steps."""
    c = cfg()
    L, out = 467, 32
    r = simulate(c, 0, 1e-5, LengthDist(mean=L), LengthDist(mean=out), requests=20, seed=3, warmup_fraction=0)
    prefill = float(perf.prefill_s(c, L)[0]) + c.request_overhead_s
    steps = perf.decode_step_s(c, 1, L + np.arange(1, out))  # context L + g before emitting token g + 1
    assert np.allclose(r.ttft_s, prefill, rtol=1e-12)
    assert np.allclose(r.tpot_s, steps.mean(), rtol=1e-12)
    assert np.allclose(r.e2e_s, prefill + steps.sum(), rtol=1e-12)


def test_zero_load_sliding_window_model_matches_perf_model():
    """The scheduler loop inlines the step time with ``Model.effective_kv_tokens`` spelt out for a
    windowed model: at zero load it must still give the perf model's figures. gemma-3-27b (window
    1024 on its local layers): a 3,000-token prompt in one 4,096-token chunk attends a span of 1,500
    and decodes at contexts 3,001-3,199, both past the window (the loop without the window gives TPOT and TTFT 1.6 % higher)."""
    c = cfg("gemma-3-27b")
    L, out = 3000, 200
    r = simulate(c, 0, 1e-5, LengthDist(mean=L), LengthDist(mean=out), requests=20, seed=3, warmup_fraction=0,
                 prefill_chunk_tokens=4096)
    prefill = float(perf.prefill_s(c, L)[0]) + c.request_overhead_s
    steps = perf.decode_step_s(c, 1, L + np.arange(1, out))
    assert np.allclose(r.ttft_s, prefill, rtol=1e-12)
    assert np.allclose(r.tpot_s, steps.mean(), rtol=1e-12)
    assert np.allclose(r.e2e_s, prefill + steps.sum(), rtol=1e-12)


def test_seed_determines_the_result():
    c = cfg()
    p, o = LengthDist(mean=800, p99=3000), LengthDist(mean=200, p99=900)
    a = simulate(c, 0, 10, p, o, requests=3000, seed=7)
    b = simulate(c, 0, 10, p, o, requests=3000, seed=7)
    d = simulate(c, 0, 10, p, o, requests=3000, seed=8)
    assert np.array_equal(a.ttft_s, b.ttft_s) and np.array_equal(a.tpot_s, b.tpot_s)
    assert not np.array_equal(a.ttft_s, d.ttft_s)


def test_kv_pressure_queues_and_preempts_but_finishes_everything():
    c = cfg()
    c = c.__class__(**{**c.__dict__, "kv_capacity_tokens": np.array([20_000.0])})
    r = simulate(c, 0, 40, LengthDist(mean=2000), LengthDist(mean=400), requests=2000, seed=1)
    assert r.preemptions > 0
    assert r.max_kv_tokens <= 20_000
    assert np.all(np.isfinite(r.e2e_s)) and np.all(r.e2e_s > 0)


def test_request_larger_than_kv_cache_is_an_error():
    c = cfg()
    c = c.__class__(**{**c.__dict__, "kv_capacity_tokens": np.array([1000.0])})
    with pytest.raises(ModelError, match="does not fit in the KV cache"):
        simulate(c, 0, 1, LengthDist(mean=900), LengthDist(mean=200), requests=10)


def test_order_statistic_ci_brackets_the_percentile():
    x = np.random.default_rng(0).exponential(1.0, 20_000)
    p = percentile_ci(x, 99.0)
    assert p.ci_low_ms < p.value_ms < p.ci_high_ms
    assert p.ci_low_ms < np.log(100) * 1e3 < p.ci_high_ms  # true p99 of Exp(1)
