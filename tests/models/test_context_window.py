"""Requests fit the model's context window: the cut laws (``optimizer.models.lengths.fit_window``), the
simulator that never samples past the window, the plan's warning and the validation of lengths that cannot fit.

Paper values: a lognormal fitted to mean 1,000 / p99 4,000 has sigma = z − sqrt(z² − 2·ln 4) = 0.701754
(z = 2.326348) and mu = ln 1,000 − sigma²/2 = 6.661526; cut at c = 5,000 tokens, z_c = (ln c − mu)/sigma =
2.644328, Phi(z_c) = 0.995907 of the law is kept and E[X | X <= c] = mean·Phi(z_c − sigma)/Phi(z_c) =
1,000 × 0.973980 / 0.995907 = 977.97 tokens.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from catalog import load_catalog
from catalog.errors import ModelError, WorkloadError
from optimizer.models.configs import build_configs
from optimizer.models.lengths import (
    QUEUE_TAIL_Q,
    WINDOW_SHARE_WARNED,
    fit_window,
    quadrature,
    quadrature_spread,
    quantile_tokens,
    sample_requests,
    sample_tokens,
    split_buckets,
    stratum_deviations,
)
from optimizer.models.params import load_params
from optimizer.models.simulate import simulate
from optimizer.planning.context_window import fit_plan_windows
from workloads.load import resolve_catalog
from workloads.spec import MAX_TOKENS, LengthDist, Plan

CAT = load_catalog(None)
N = NormalDist()
Z99 = 2.3263478740408408


def _paper(mean: float, p99: float, cut: float) -> tuple[float, float, float]:
    """(mu, sigma, z_c) of the lognormal fitted to {mean, p99}, computed here from the formulas above."""
    sigma = Z99 - math.sqrt(Z99 * Z99 - 2.0 * math.log(p99 / mean))
    mu = math.log(mean) - sigma * sigma / 2.0
    return mu, sigma, (math.log(cut) - mu) / sigma


CUT = LengthDist(mean=1000, p99=4000, max=5000)


def test_cut_lognormal_mean_is_the_closed_form():
    mu, sigma, z_c = _paper(1000, 4000, 5000)
    assert sigma == pytest.approx(0.701754, abs=1e-6) and z_c == pytest.approx(2.644328, abs=1e-6)
    want = 1000 * N.cdf(z_c - sigma) / N.cdf(z_c)
    assert want == pytest.approx(977.97, abs=0.01)
    assert CUT.mean_tokens == pytest.approx(want, rel=1e-9)
    nodes, weights = quadrature(CUT)
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    assert float(weights @ nodes) == pytest.approx(want, rel=1e-9)  # Σ w·x = E[X | X <= c], node by node exact
    assert nodes.max() <= 5000
    # the second moment E[X² | X <= c] = e^{2mu + 2sigma²}·Phi(z_c − 2sigma)/Phi(z_c), through the strata's spread
    n2, w2, var = quadrature_spread(CUT)
    second = math.exp(2 * mu + 2 * sigma * sigma) * N.cdf(z_c - 2 * sigma) / N.cdf(z_c)
    assert float(w2 @ (var + n2 ** 2)) == pytest.approx(second, rel=1e-9)
    # p99 of the cut law: exp(mu + sigma·Phi^-1(0.99·Phi(z_c))) = 3,649.9 (uncut: 4,000)
    p99 = math.exp(mu + sigma * N.inv_cdf(0.99 * N.cdf(z_c)))
    assert p99 == pytest.approx(3649.93, abs=0.01)
    assert CUT.p99_tokens == pytest.approx(p99, rel=1e-9)
    assert float(quantile_tokens(CUT, 0.99)) == pytest.approx(p99, rel=1e-9)


def test_cut_lognormal_queue_deviations_censor_at_the_cut_laws_quantile():
    # Σ_i w_i·E[min(X, x_cap) − node_i | i] = E[min(X, x_cap)] − E[X] = −E[(X − x_cap)^+ | X <= c], x_cap the
    # QUEUE_TAIL_Q quantile of the cut law: (mean·(Phi(z_c − sigma) − Phi(z_k − sigma)) − x_cap·(Phi(z_c) − Phi(z_k)))/Phi(z_c)
    mu, sigma, z_c = _paper(1000, 4000, 5000)
    z_k = N.inv_cdf(QUEUE_TAIL_Q * N.cdf(z_c))
    x_cap = math.exp(mu + sigma * z_k)
    tail = (1000 * (N.cdf(z_c - sigma) - N.cdf(z_k - sigma)) - x_cap * (N.cdf(z_c) - N.cdf(z_k))) / N.cdf(z_c)
    nodes, weights = quadrature(CUT, 10)
    dev = stratum_deviations(CUT, 10)
    assert float(weights @ dev[:, 0]) == pytest.approx(-tail, rel=1e-6)


def test_cut_lognormal_samples_are_the_cut_law():
    x = sample_tokens(CUT, 200_000, np.random.default_rng(0))
    assert x.max() <= 5000
    se = float(np.sqrt(quadrature_spread(CUT)[2].max() + 1e6)) / math.sqrt(len(x))  # generous: sd < 1,000 + spread
    assert abs(float(x.mean()) - 977.97) < 4 * se
    # a cut no draw reaches leaves the draws (and the stream) as without it
    plain = LengthDist(mean=1000, p99=4000)
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    assert np.array_equal(sample_tokens(plain, 1000, rng_a), sample_tokens(plain, 1000, rng_b, limit_tokens=1e7))
    assert rng_a.random() == rng_b.random()


def test_max_is_for_lognormals_only():
    with pytest.raises(ValidationError, match="max .* cuts a {mean, p99} law only"):
        LengthDist(mean=1000, max=2000)
    with pytest.raises(ValidationError, match="cuts a {mean, p99} law only"):
        LengthDist(histogram=[[100, 1], [200, 1]], max=150)


def test_fit_window_rules():
    prompt, output = LengthDist(mean=1024, p99=8192), LengthDist(mean=256)
    w = fit_window(prompt, output, 131_072)
    # a bounded output is kept whole; the prompt is cut at W − 256 = 130,816: P(X > c) = Phi(−z_c)
    mu, sigma, z_c = _paper(1024, 8192, 130_816)
    assert w.output is output and w.prompt.max == 130_816 and w.output_cut_tokens == 256
    assert w.share_cut == pytest.approx(N.cdf(-z_c), rel=1e-9)
    assert 1e-6 < w.share_cut < 1e-5  # 1.9e-6
    # cut once, fits: not cut again
    again = fit_window(w.prompt, w.output, 131_072)
    assert again.prompt is w.prompt and again.share_cut == 0.0
    # two lognormals: the split keeps the most requests (no whole token either side keeps more)
    both = fit_window(prompt, LengthDist(mean=256, p99=1024), 131_072)
    c = both.prompt_cut_tokens
    assert both.prompt_cut_tokens + both.output_cut_tokens == 131_072

    def kept(cp):
        return (1 - _share(prompt, cp)) * (1 - _share(LengthDist(mean=256, p99=1024), 131_072 - cp))
    assert kept(c) >= kept(c - 1) and kept(c) >= kept(c + 1)
    assert both.share_cut == pytest.approx(1 - kept(c), rel=1e-6)
    # laws far inside the window come back as they are (the chat example: analytic figures unchanged)
    chat_p, chat_o = LengthDist(mean=1024, p99=4096), LengthDist(mean=256, p99=1024)
    chat = fit_window(chat_p, chat_o, 131_072)
    assert chat.prompt is chat_p and chat.output is chat_o and chat.share_cut < 1e-9


def _share(dist: LengthDist, cut: float) -> float:
    """P(X > cut) of an uncut lognormal, from the paper formulas."""
    _, _, z_c = _paper(dist.mean, dist.p99, cut)
    return N.cdf(-z_c)


def test_bounded_laws_that_do_not_fit_are_errors():
    with pytest.raises(ModelError, match="130,000 prompt \\+ 2,000 output tokens does not fit the 131,072-token"):
        fit_window(LengthDist(mean=130_000), LengthDist(histogram=[[100, 1], [2000, 1]]), 131_072)
    with pytest.raises(ModelError, match="a 4,096-token prompt leaves no token of the 4,096-token context window to the output"):
        fit_window(LengthDist(mean=4096), LengthDist(mean=50, p99=100), 4096)


def _plan(model: str, prompt, output) -> Plan:
    return Plan.model_validate({"workloads": [{"name": "svc", "model": model, "qps": 1, "prompt_tokens": prompt,
                                               "output_tokens": output, "slo": {"ttft_p99_ms": 1000}}]})


def test_fixed_prompt_beyond_the_window_is_a_validation_error():
    plan = _plan("llama-3.1-8b", 140_000, 256)
    with pytest.raises(WorkloadError, match=r"plan\.yaml: workloads\[0\]\.prompt_tokens: 'svc' asks for 140,000 prompt "
                                            r"\+ 256 output tokens .*beyond the 131,072-token context of llama-3\.1-8b; "
                                            "shorten the requests or choose a model with a longer context"):
        resolve_catalog(plan, CAT, "plan.yaml")


def test_mass_beyond_the_window_is_cut_and_warned():
    # llama-2-7b: 4,096 tokens. Prompts lognormal 1,000 / p99 3,000 + 500 fixed output tokens fit at p99
    # (validation passes) but P(prompt > 3,596) = Phi(−z_c) = 0.38 % of the requests would be rejected.
    plan = _plan("llama-2-7b", {"mean": 1000, "p99": 3000}, 500)
    resolve_catalog(plan, CAT, "plan.yaml")
    cut, notes = fit_plan_windows(plan, CAT)
    _, _, z_c = _paper(1000, 3000, 3596)
    assert N.cdf(-z_c) == pytest.approx(0.00384, abs=1e-5)
    assert cut.workloads[0].prompt_tokens.max == 3596 and cut.workloads[0].output_tokens.mean == 500
    assert [n.code for n in notes] == ["context_window"] and notes[0].level == "warning"
    assert notes[0].message.startswith(f"svc: {100 * N.cdf(-z_c):.3g} % of its requests (prompt + output beyond the "
                                       "4,096-token context of llama-2-7b) would be rejected")
    assert "choose a model with a longer context" in notes[0].message
    # within the window by far: the same plan object, no note
    inside = _plan("llama-3.1-8b", {"mean": 1024, "p99": 4096}, {"mean": 256, "p99": 1024})
    same, none = fit_plan_windows(inside, CAT)
    assert same is inside and none == []
    assert WINDOW_SHARE_WARNED == 1e-4


LAWS = st.one_of(
    st.builds(lambda m: LengthDist(mean=m), st.integers(1, 3000)),
    st.builds(lambda m, r: LengthDist(mean=m, p99=m * r), st.integers(1, 2000), st.floats(1.01, 12.0)),
    st.builds(lambda rows: LengthDist(histogram=[[t, w] for t, w in rows.items()]),
              st.dictionaries(st.integers(1, 3000), st.floats(0.01, 1.0), min_size=1, max_size=5)),
)


@settings(max_examples=60, deadline=None)
@given(prompt=LAWS, output=LAWS, window=st.integers(2048, 8192), seed=st.integers(0, 2**32 - 1))
def test_sampled_requests_never_exceed_the_window(prompt, output, window, seed):
    try:
        w = fit_window(prompt, output, window)
    except ModelError:  # two bounded laws over the window: refused, nothing sampled
        return
    p, o = sample_requests(w, 4000, np.random.default_rng(seed))
    assert int((p + o).max()) <= window and p.min() >= 1 and o.min() >= 1
    p2, o2 = sample_requests(w, 4000, np.random.default_rng(seed))  # deterministic for a seed
    assert np.array_equal(p, p2) and np.array_equal(o, o2)


def _llama2():
    return build_configs(CAT.model("llama-2-7b"), [(CAT.device("h100-sxm"), CAT.precision("bf16"), 1, 1)],
                         load_params(None))


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), ratio=st.floats(4.0, 6.0))
def test_simulator_never_runs_a_request_beyond_the_window(seed, ratio):
    # one sequence at a time (max_sequences=1): the KV occupancy is one request's context, prompt + tokens so far.
    # Prompts lognormal 1,000 / p99 4,000-6,000 with 64 output tokens on a 4,096-token window: 1.0-2.7 % of the
    # uncut prompts exceed 4,032 tokens (sigma 0.70-0.97), about 10-27 of these 1,000 requests.
    prompt, output = LengthDist(mean=1000, p99=1000 * ratio), LengthDist(mean=64)
    r = simulate(_llama2(), 0, 0.5, prompt, output, requests=1000, seed=seed, max_sequences=1)
    assert r.max_kv_tokens <= 4096
    assert r.max_kv_tokens > 3500  # the long prompts are there, cut at the window (uncut: 5,900-12,500 tokens)


def test_buckets_hold_no_request_beyond_the_window():
    # prompts lognormal 1,000 / p99 3,000 and 500 output tokens on a 4,096-token window: 0.38 % of the 40,000 sampled
    # prompts are above 3,596 (about 150); within the window the top bucket's longest prompt is at most 3,596
    prompt, output = LengthDist(mean=1000, p99=3000), LengthDist(mean=500)
    uncut = split_buckets(prompt, output, 4)
    cut = split_buckets(prompt, output, 4, 4096)
    assert max(t for t, _ in uncut[-1].prompt.histogram) > 3596  # the case needs the window

    def top(d):
        return max(t for t, _ in d.histogram) if d.histogram else d.mean

    assert max(top(b.prompt) for b in cut) <= 3596 and all(b.output.mean == 500 for b in cut)
    # far inside the window: the same buckets
    chat = split_buckets(LengthDist(mean=1024, p99=4096), LengthDist(mean=256, p99=1024), 4)
    assert chat == split_buckets(LengthDist(mean=1024, p99=4096), LengthDist(mean=256, p99=1024), 4, 131_072)


def test_a_stated_cut_within_the_window_is_kept_and_not_warned():
    # mixtral-8x7b's 32,768 tokens, 256 output tokens: prompts 1,024 / p99 8,192 cut at 32,512 by the planner
    # (2.6e-4 left out: a warning), or stated so in the plan (nothing left out by the window: no warning)
    stated = _plan("mixtral-8x7b", {"mean": 1024, "p99": 8192, "max": 32512}, 256)
    same, notes = fit_plan_windows(stated, CAT)
    assert same is stated and notes == []
    cut, warned = fit_plan_windows(_plan("mixtral-8x7b", {"mean": 1024, "p99": 8192}, 256), CAT)
    assert cut.workloads[0].prompt_tokens == stated.workloads[0].prompt_tokens
    assert [n.code for n in warned] == ["context_window"] and "0.0262 %" in warned[0].message


def test_a_window_above_the_stated_length_bound_is_cut_without_error():
    # Llama 4 Scout's 10,485,760-token window is above MAX_TOKENS (10,000,000, the bound on a stated length).
    # Prompts {mean 500, p99 7480} (p99/mean 14.96, near a lognormal's widest): sigma = z - sqrt(z^2 - 2 ln 14.96)
    # = 2.2927, mu = ln 500 - sigma^2/2 = 3.5864; P(X > 10.43e6) = Phi(-(ln 10.43e6 - mu)/sigma) = Phi(-5.48) = 2.1e-8
    # > 1e-9, so the prompt law is cut near the window. That LengthDist(max=...) was refused ("less than or equal
    # to 10000000") and optimize, simulate and estimate all ended in a traceback.
    window = CAT.model("llama-4-scout").max_context_tokens
    assert window == 10_485_760 > MAX_TOKENS
    w = fit_window(LengthDist(mean=500, p99=7480), LengthDist(mean=300, p99=1500), window)
    assert MAX_TOKENS < w.prompt.max < window
    assert 1e-8 < w.share_cut < 1e-7
    cut, notes = fit_plan_windows(_plan("llama-4-scout", {"mean": 500, "p99": 7480}, 300), CAT)
    # a fixed 300-token output is kept whole: the prompt is cut at the window less 300 tokens; 2e-8 left out is
    # below the warning's 1e-4
    assert cut.workloads[0].prompt_tokens.max == 10_485_460 and notes == []
