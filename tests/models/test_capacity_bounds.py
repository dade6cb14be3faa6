"""``serving.capacity_upper_bound_sets`` bounds the capacity at the SLO from above, on the shipped catalog.

Screening (``optimizer.planning.screening``) marks a candidate dominated without a capacity search when
a smaller evaluated one covers this bound, so the bound must never be under the search's result: every
catalog device × precision × tp (smallest pp that fits) for two models, on a workload's buckets and
whole, under SLOs that bind by TTFT, by TPOT and by E2E, plain and with a prefix cache and speculative
decoding. Where the offline ceiling binds (limited_by 'utilization') the bound is the capacity itself.
"""

from __future__ import annotations

import numpy as np
import pytest

from catalog import load_catalog
from optimizer.models import perf, serving
from optimizer.models.configs import build_configs
from optimizer.models.lengths import split_buckets
from optimizer.models.params import load_params
from optimizer.models.serving.bounds import TPOT_BOUND_MARGIN, tpot_rate_bound
from optimizer.models.serving.rows import row_lengths
from optimizer.models.serving.state import lengths_for
from optimizer.models.techniques import ServingTechnique, workload_technique
from workloads.spec import SLO, LengthDist, Workload

CAT = load_catalog()
PARAMS = load_params(None)
CHAT_P = LengthDist(mean=1200, p99=6000)
CHAT_O = LengthDist(mean=250, p99=1000)
SHORT_P = LengthDist(mean=300, p99=1200)
SHORT_O = LengthDist(mean=60, p99=300)


def _configs(model_key: str, tps=(1, 2, 4, 8), precisions=("bf16", "fp8", "int4")):
    """Every datacenter device × precision it runs × tp within its server, the smallest pp that fits."""
    model = CAT.model(model_key)
    grid = []
    for d in CAT.devices.values():
        for q in precisions:
            if d.consumer or CAT.precision(q).unsupported_reason(d) is not None:
                continue
            grid += [(d, CAT.precision(q), t, p) for t in tps if t <= d.gpus_per_node for p in (1, 2, 4)]
    fit = build_configs(model, grid, PARAMS)
    chosen, seen = [], set()
    for i, (d, q, t, p) in enumerate(grid):
        if fit.runnable[i] and (d.key, q.key, t) not in seen:
            seen.add((d.key, q.key, t))
            chosen.append((d, q, t, p))
    return build_configs(model, chosen, PARAMS)


def _sets(prompt: LengthDist, output: LengthDist) -> list[tuple[LengthDist, LengthDist]]:
    return [(b.prompt, b.output) for b in split_buckets(prompt, output, 2)] + [(prompt, output)]


def _check(c, sets, slo, technique=None) -> tuple[int, int]:
    """(rows with capacity, rows capped by the offline ceiling), after checking the bound on every row."""
    caps = serving.capacity_at_slo_sets(c, sets, slo, PARAMS, technique=technique, p99s_at_capacity=False)
    bounds = serving.capacity_upper_bound_sets(c, sets, slo, technique)
    capped = servable = 0
    for cap, bound in zip(caps, bounds, strict=True):
        assert bound.shape == cap.max_qps.shape
        got = np.nan_to_num(cap.max_qps, nan=0.0)
        over = np.flatnonzero(got > bound * (1.0 + 1e-9))
        assert over.size == 0, [(c.keys[i], got[i], bound[i], cap.limited_by[i]) for i in over]
        util = np.array([lim == "utilization" for lim in cap.limited_by])
        np.testing.assert_allclose(bound[util], got[util], rtol=1e-9)
        capped += int(util.sum())
        servable += int((got > 0).sum())
    return servable, capped


@pytest.mark.parametrize(("model", "prompt", "output", "slo"), [
    ("llama-3.1-70b", CHAT_P, CHAT_O, SLO(ttft_p99_ms=2000, tpot_p99_ms=200)),
    ("llama-3.1-70b", CHAT_P, CHAT_O, SLO(ttft_p99_ms=8000, tpot_p99_ms=40)),  # TPOT binds
    ("llama-3.1-8b", SHORT_P, SHORT_O, SLO(ttft_p99_ms=300, tpot_p99_ms=100)),  # TTFT binds
    ("llama-3.1-8b", SHORT_P, SHORT_O, SLO(tpot_p99_ms=15, e2e_p99_ms=4000)),
])
def test_the_bound_is_never_under_the_capacity(model, prompt, output, slo):
    c = _configs(model)
    assert len(c) > 100  # the shipped catalog's devices, precisions and tps
    servable, _ = _check(c, _sets(prompt, output), slo)
    assert servable > 50


def test_where_the_offline_ceiling_binds_the_bound_is_the_capacity():
    servable, capped = _check(_configs("llama-3.1-8b"), _sets(SHORT_P, SHORT_O), SLO(ttft_p99_ms=2000,
                                                                                      tpot_p99_ms=200))
    assert capped > 50 and servable >= capped


def test_the_bound_holds_with_a_prefix_cache_and_speculative_decoding():
    c = _configs("llama-3.1-70b", tps=(1, 2, 4), precisions=("bf16", "fp8"))
    slo = SLO(ttft_p99_ms=1500, tpot_p99_ms=60)
    _check(c, _sets(CHAT_P, CHAT_O), slo, ServingTechnique(prefix_hit_fraction=0.4, shared_prefix_tokens=200))
    w = Workload(name="w", model="llama-3.1-70b", qps=1, prompt_tokens=CHAT_P, output_tokens=CHAT_O, slo=slo,
                 speculative={"method": "eagle", "tokens": 3, "acceptance_rate": 0.7})
    spec = workload_technique(w, CAT.model("llama-3.1-70b"))
    assert spec.speculative is not None
    _check(c, _sets(CHAT_P, CHAT_O), slo, spec)


def test_the_tpot_bound_is_the_roofline_at_the_batch_meeting_the_target():
    """One config by hand: a TPOT target of D(16)/1.01 (the margin) gives b_T = 16 and
    λ_tpot = 16/(E[O−1]·D(16)); a target above D(max_batch) gives b_T = max_batch."""
    c = build_configs(CAT.model("llama-3.1-8b"), [(CAT.device("h100-sxm"), CAT.precision("fp8"), 1, 1)], PARAMS)
    lens = row_lengths([lengths_for(SHORT_P, SHORT_O)], 1)
    d16 = float(perf.decode_step_s(c, 16.0, lens.ctx)[0])
    rate = float(tpot_rate_bound(c, lens, d16 * 1e3 / (1 + TPOT_BOUND_MARGIN))[0])
    assert rate == pytest.approx(16.0 / (float(lens.mean_o1[0]) * d16), rel=1e-6)
    b_max = float(c.batch_cap[0])
    d_max = float(perf.decode_step_s(c, b_max, lens.ctx)[0])
    loose = float(tpot_rate_bound(c, lens, 2 * d_max * 1e3)[0])
    assert loose == pytest.approx(b_max / (float(lens.mean_o1[0]) * d_max), rel=1e-9)
