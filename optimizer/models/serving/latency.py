"""Latency percentiles and KV occupancy of every configuration at a request rate (``serve_at_rate``).

Formulas: see :mod:`optimizer.models.serving` (the tails part of its docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from catalog.errors import ModelError
from optimizer.models import perf
from optimizer.models.configs import Configs
from optimizer.models.constants import DEFAULT_PREFILL_CHUNK_TOKENS, Z99
from optimizer.models.lengths import window_pair
from optimizer.models.params import CalibrationParams
from optimizer.models.serving.carrying import carrying_step_sums
from optimizer.models.serving.feedback import (
    batch_average_cumulants,
    feedback_factors,
)
from optimizer.models.serving.fixed_point import State, solve_state
from optimizer.models.serving.rows import RowLengths, row_lengths
from optimizer.models.serving.state import lengths_for
from optimizer.models.serving.tails import gamma_gauss_rule, gamma_quantile, mixture_quantile
from optimizer.models.techniques import ServingTechnique
from workloads.spec import LengthDist

SLO_LIMITS = ("ttft", "tpot", "e2e")
Z999 = 3.0902  # standard normal 99.9th percentile


@dataclass(frozen=True)
class LoadResult:
    """Latency percentiles (ms) and state of each configuration at one request rate (arrays (N,)).

    ``saturated`` configurations have no steady state (their latencies are ``inf``);
    ``kv_fits`` is False when the p99.9 KV occupancy of an attention rank exceeds the rank's cache (``kv_per_rank``;
    one rank, the replica's, when ep is 1; requests would queue
    for memory or be preempted, which the percentiles here do not include). p99.9, not p99: a
    cache full 1 % of the time stalls admission for about 1 % of the arrivals, which is the TTFT
    p99 itself (llama-3.1-70b fp8 on l40s pp2 with its KV p99 at the cache: simulated TTFT p99
    1.2-2.6 s and preemptions in 3 of 3 runs, analytic 1.0 s). The running batch against the
    scheduler cap the same way, ``b + Z999·√(b·F) <= batch_cap``: at the p99 a full batch queued
    about 1 % of the arrivals for a slot (llama-3.1-70b fp8 on h100-sxm tp4, --max-batch 32, prompts
    1,000/p99 3,000, answers 1,000/p99 3,000 at 1.41 req/s: simulated TTFT p99 1.41 s, analytic 0.22 s).
    Per attention rank at ep > 1, as the KV: each rank's scheduler runs at most batch_cap/ep sequences (the
    engine's per-rank cap, ``configs.build_configs``), held against one rank's batch p99.9 (``batch_per_rank``).
    """

    qps: np.ndarray
    ttft_mean_ms: np.ndarray
    ttft_p50_ms: np.ndarray
    ttft_p99_ms: np.ndarray
    tpot_mean_ms: np.ndarray
    tpot_p50_ms: np.ndarray
    tpot_p99_ms: np.ndarray
    e2e_mean_ms: np.ndarray
    e2e_p50_ms: np.ndarray
    e2e_p99_ms: np.ndarray
    utilization: np.ndarray
    saturated: np.ndarray
    running_batch: np.ndarray  # mean decoding sequences (Little's law)
    step_ms: np.ndarray  # mean step duration t̄
    kv_p99_tokens: np.ndarray
    kv_p999_tokens: np.ndarray  # p99.9 occupancy of the replica
    kv_capacity_tokens: np.ndarray
    kv_fits: np.ndarray
    kv_rank_p99_tokens: np.ndarray  # p99 occupancy of one attention rank (ep 1: the replica's)
    kv_rank_p999_tokens: np.ndarray  # p99.9 occupancy of one attention rank, what ``kv_fits`` holds against ...
    kv_rank_capacity_tokens: np.ndarray  # ... the rank's cache, kv_capacity_tokens / ep (``kv_per_rank``)
    batch_rank_p999: np.ndarray  # p99.9 running batch of one attention rank (ep 1: b + Z999·√(b·F)), held against ...
    batch_rank_cap: np.ndarray  # ... the rank's scheduler cap, batch_cap / ep (``batch_per_rank``)
    output_tokens_per_s: np.ndarray  # λ·E[O]



# ---------------------------------------------------------------------------------------
# Public API


def check_rate(qps) -> np.ndarray:
    lam = np.asarray(qps, dtype=float)
    if lam.size and not np.all(np.isfinite(lam) & (lam > 0)):
        bad = lam[~(np.isfinite(lam) & (lam > 0))].ravel()[0]
        raise ModelError(f"request rate must be a positive number of requests per second (got {bad:g}); "
                         "give --qps > 0")
    return lam


def serve_at_rate(
    c: Configs,
    qps,
    prompt: LengthDist,
    output: LengthDist,
    params: CalibrationParams | None = None,
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
    percentiles: bool = True,
    technique: ServingTechnique | None = None,
) -> LoadResult:
    """Latencies and state of every configuration at ``qps`` requests/s (scalar or (N,)).

    See the module docstring for the formulas. ``params`` is accepted for symmetry with
    the perf model (its factors are already folded into ``c``). ``technique``: prefix caching
    and speculative decoding (``optimizer.models.techniques``). The lengths are cut to the model's
    context window (``lengths.window_pair``), as the simulator cuts them.
    """
    lam = np.broadcast_to(check_rate(qps), (len(c),)).astype(float)
    if technique is not None:
        c = technique.configure(c)
    lens = row_lengths([lengths_for(*window_pair(prompt, output, c.model.max_context_tokens), technique)], len(c))
    return evaluate_load(c, lam, lens, prefill_chunk_tokens, need=set(SLO_LIMITS) if percentiles else set())


def take_state(s: State, rows: np.ndarray) -> State:
    """The state of the configurations at ``rows``."""
    return State(s.b[rows], s.step_s[rows], s.steps.take(rows), s.slope_s[rows], s.eps_s[rows], s.rho1[rows],
                  s.t_full_s[rows], s.saturated[rows], s.d_next_s[rows])


def evaluate_load(c: Configs, lam: np.ndarray, lens: RowLengths, chunk: int, need: set[str],
                  t0: np.ndarray | None = None, p50: bool = True, state: State | None = None) -> LoadResult:
    """Latencies, KV occupancy and utilisation at rates ``lam`` (formulas: :mod:`optimizer.models.serving`);
    percentiles only of the limits in ``need`` (and p50s only when ``p50``); each row at its own lengths."""
    runnable = np.asarray(c.supported, dtype=bool)
    s = solve_state(c, lam, lens, chunk, t0) if state is None else state
    sat = s.saturated | ~runnable
    tbar = np.where(sat, np.nan, s.step_s)
    concave = concave_step(c)
    d_tag = s.d_next_s
    if concave:
        spread, gain = _at_spread_slope(c, lam, s, lens)
        fb = feedback_factors(lam, spread, lens, gain)
        fb, d_tag = _size_biased_step(c, lam, s, lens, fb, spread.slope_s)
    else:
        fb = feedback_factors(lam, s, lens)
    # the decoding batch per unit of time (Little's law on the request-weighted step), what a busy prefill queue runs with
    b_busy = s.b * (1.0 + np.where(sat, 0.0, fb.bias_s) / np.where(sat, 1.0, tbar))
    ttft = _ttft_moments(c, lam, lens, s, chunk, b_busy, np.sqrt(np.where(sat, 0.0, fb.occupancy_factor) * b_busy))
    tp = _queue_behind(_tpot_moments(c, lam, lens, s, fb, sat, tbar, concave, d_tag), c, lens, ttft, b_busy, chunk)
    out = _percentiles(len(c), lens, tp, ttft, need, p50, concave)
    ttft_mean = np.sum(np.where(lens.l_w > 0, ttft.mean, 0.0) * lens.l_w, axis=1)  # padded nodes (weight 0) aside
    e2e_mean = ttft_mean + lens.mean_o1 * tp.mean

    # ---- KV occupancy (M/G/∞ shot noise, over-dispersed by load feedback) and utilisation
    life = tbar + np.where(sat, 0.0, fb.bias_s)  # request-weighted step: a sequence's time per decode step
    kv_mean = lam * life * lens.kv_tok_steps + lam * ttft_mean * lens.kv_prompt_tokens
    # shot noise: κ2 = F·λt̄·E[Σ(L+j)²], κ3 = F²·λt̄·E[Σ(L+j)³] (a cluster of 1/(1−g) sequences, third
    # moment ~F² of the Poisson one); p99 of the shifted gamma — the count of sequences is skewed —
    # never below the normal one (Wilson–Hilferty fails at the huge skew of a nearly idle replica)
    kv_var = lam * tbar * lens.kv_tok2_steps * fb.occupancy_factor
    kv_k3 = lam * tbar * lens.kv_tok3_steps * fb.occupancy_factor**1.5
    kv_p99, kv_p999 = (_kv_quantile(q, z, kv_mean, kv_var, kv_k3) for q, z in ((0.99, Z99), (0.999, Z999)))
    kv_var_even = lam * tbar * lens.kv_mean2_steps * fb.occupancy_factor  # ∫m², what even spacing takes off κ2
    kv_rank_p99, kv_rank_p999, kv_rank_cap = kv_per_rank(c, kv_mean, kv_var, kv_k3, kv_p99, kv_p999, kv_var_even, s.b)
    b_p999 = s.b + Z999 * np.sqrt(s.b * fb.occupancy_factor)  # p99.9 against the cap, as the KV (class doc)
    b_rank_p999, b_rank_cap = batch_per_rank(c, s.b, fb.occupancy_factor, b_p999, lens)
    kv_cap = np.asarray(c.kv_capacity_tokens, dtype=float)
    kv_fits = (kv_rank_p999 <= kv_rank_cap) & (b_rank_p999 <= b_rank_cap) & ~sat
    util = lam * (s.eps_s + lens.mean_o1 * s.slope_s)
    util = np.where(sat, np.maximum(util, 1.0), util)

    def ms(x):
        return np.where(sat, np.inf, x * 1e3)

    a = lens.tokens_per_step  # TPOT per output token: a speculative step emits A tokens
    return LoadResult(
        qps=lam,
        ttft_mean_ms=ms(ttft_mean), ttft_p50_ms=ms(out["ttft_p50"]), ttft_p99_ms=ms(out["ttft_p99"]),
        tpot_mean_ms=ms(tp.mean / a), tpot_p50_ms=ms(out["tpot_p50"] / a), tpot_p99_ms=ms(out["tpot_p99"] / a),
        e2e_mean_ms=ms(e2e_mean), e2e_p50_ms=ms(out["e2e_p50"]), e2e_p99_ms=ms(out["e2e_p99"]),
        utilization=util, saturated=sat, running_batch=s.b, step_ms=ms(tbar),
        kv_p99_tokens=np.where(sat, np.inf, kv_p99), kv_p999_tokens=np.where(sat, np.inf, kv_p999),
        kv_capacity_tokens=kv_cap, kv_fits=kv_fits,
        kv_rank_p99_tokens=np.where(sat, np.inf, kv_rank_p99), kv_rank_p999_tokens=np.where(sat, np.inf, kv_rank_p999), kv_rank_capacity_tokens=kv_rank_cap,
        batch_rank_p999=np.where(sat, np.inf, b_rank_p999), batch_rank_cap=b_rank_cap,
        output_tokens_per_s=np.where(sat, np.nan, lam * lens.mean_o),
    )


def _kv_quantile(q: float, z: float, mean: np.ndarray, var: np.ndarray, k3: np.ndarray) -> np.ndarray:
    """The q-quantile of a KV occupancy of these cumulants: the shifted gamma's, never below the normal
    ``mean + z·sd`` (Wilson–Hilferty fails at the huge skew of a nearly idle replica)."""
    return np.fmax(gamma_quantile(q, mean, np.nan_to_num(var), np.nan_to_num(k3)), mean + z * np.sqrt(var))


def kv_per_rank(c: Configs, kv_mean: np.ndarray, kv_var: np.ndarray, kv_k3: np.ndarray, kv_p99: np.ndarray,
                kv_p999: np.ndarray, kv_var_even: np.ndarray | float = 0.0,
                batch: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p99 and p99.9 KV occupancy of one attention rank, the rank's KV capacity), tokens, from the replica's
    occupancy cumulants (mean, κ2, κ3) and quantiles (``kv_p99``, ``kv_p999``: the rank's where ep is 1).

    A replica of e = ep attention data-parallel ranks keeps a sequence's KV on one rank, and each rank has its
    own cache, K/e of the replica's K tokens (each GPU's HBM less its weights and activations; the shared
    prefix of a prefix cache is held once per rank, ``techniques.configure``). The load balancer sends each
    request to one rank, round robin (SGLang's data-parallel default; vLLM's DP coordinator and TensorRT-LLM's
    attention DP send it to the rank with the fewest waiting/running requests, at least as even in count), so a
    rank serves λ/e of the arrivals, every e-th one: a renewal process whose gaps are Erlang-e (the sum of e
    exponential gaps), squared coefficient of variation c_a² = 1/e. Its occupancy is a shot noise
    X = Σ_i f_i(t − A_i) (f_i a request's KV over its life, m = E[f] the mean profile) with

        κ2 = (λ/e)·[∫E[f²] − (1 − c_a²)·η·∫m²]

    η = 1: the GI/G/∞ variance with the arrivals' Bartlett spectrum taken at frequency 0, right when a request's
    life is many gaps long (Whitt's peakedness z = 1 + (c_a² − 1)·μ∫G_c², for f a 0/1 pulse of survival G_c; a
    Poisson thinning, c_a² = 1, gives the replica's κ2/e). A rank running n = b/e sequences sees about n
    arrivals in a life; where n is small the gaps are not short against the life and less variance goes: η(n)
    is that of an exponential life of the same mean, whose GI/M/∞ peakedness is exact, z = 1/(1 − φ) − n with
    φ = (e·n/(e·n + 1))^e the Laplace transform of the Erlang-e gap at the life's rate: η = (1 − z)/((1 − c_a²)/2),
    → 1 as n → ∞, ≈ 2n/(1 − 1/e) as n → 0 (at n = 0.22, e = 4: 0.45; n = 2: 0.90). Here ∫E[f²] = t̄·E[Σ(L+j)²] and
    ∫m² = t̄·Σ_j m(j)², ``kv_var_even`` (= λ·t̄·``Lengths.kv_mean2_steps``·F, the load feedback F kept: the
    ranks step in lockstep, so F is the replica's); κ3 is the thinning's κ3/e scaled by (κ2/(κ2_thinning))^1.5,
    the skewness of the thinning kept (a stated approximation; the count of an Erlang renewal process is less
    skewed still). The mean is the replica's / e. Checked against the simulator's round robin
    (``tests/models/test_ep_kv_per_rank.py``). The p99.9 hold is per rank, ``Q_0.999(rank cumulants) <= K/e`` —
    one rank full stalls the requests sent to it while another has room — instead of the pooled
    ``Q_0.999(mean, κ2, κ3) <= K``. e = 1: the pooled hold, bit for bit.

    It holds whole sequences: the thinning's κ2 is at least b_r·c̄² (c̄ the time-weighted context) and round robin
    takes off at most (1 − 1/e) of it (η <= 1, ∫m² <= ∫E[f²]), so sd ≥ √(b_r/e)·c̄ and b_r·c̄ + 3.09·√(b_r/e)·c̄ <= K/e;
    b_r ≥ n would need n + 3.09·√(n/e) < n + 1, i.e. n < 0.105·e, impossible for n ≥ 1 at e <= 9: b_r <
    floor(K/(e·c̄)) running sequences per rank when that is ≥ 1, and the replica's KV-limited batch is at most
    ``perf.max_sequences(c, c̄)`` = e·floor(K/(e·c̄)), as ``capacity._feasible_qps_bound`` takes it."""
    e = np.asarray(c.ep, dtype=float)
    cap = np.asarray(c.kv_capacity_tokens, dtype=float) / e
    if np.all(e == 1.0):
        return kv_p99, kv_p999, cap
    one = e == 1.0
    thin_var = kv_var / e
    var = np.maximum(thin_var - (1.0 - 1.0 / e) * erlang_eta(np.asarray(batch, dtype=float) / e, e) * kv_var_even / e,
                     0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(thin_var > 0, var / thin_var, 1.0)
    k3 = kv_k3 / e * ratio**1.5
    p99, p999 = (np.where(one, pooled, _kv_quantile(q, z, kv_mean / e, var, k3))
                 for q, z, pooled in ((0.99, Z99, kv_p99), (0.999, Z999, kv_p999)))
    return p99, p999, cap


def batch_per_rank(c: Configs, b: np.ndarray, occupancy_factor: np.ndarray, b_p999: np.ndarray, lens: RowLengths
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(p99.9 running batch of one attention rank, the rank's scheduler cap), sequences.

    ``c.batch_cap`` is the replica's: e = ep times the engine's per-rank cap (vLLM ``max_num_seqs`` and
    TensorRT-LLM ``max_batch_size`` apply to each data-parallel rank's scheduler, ``configs.build_configs``), and one
    rank at its cap queues the requests sent to it while another has slots. A rank runs b_r = b/e sequences on
    average; its count is the shot noise of ``kv_per_rank`` with a 0/1 pulse over a request's S decode steps
    (∫E[f²] = E[S]·t̄, ∫m² = E[min(S, S')]·t̄), so with round robin its variance is
    b_r·F·(1 − (1 − 1/e)·η(b_r)·E[min(S, S')]/E[S]) (F the replica's load feedback), and the hold is
    ``b_r + Z999·sd <= batch_cap/e``. As the variance factor is at least 1/e, this is at least as strict as the
    pooled ``b + Z999·√(b·F) <= batch_cap``; e = 1: that, bit for bit (``b_p999``)."""
    e = np.asarray(c.ep, dtype=float)
    cap = np.asarray(c.batch_cap, dtype=float)
    if np.all(e == 1.0):
        return b_p999, cap
    b_r = b / e
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(lens.mean_o1 > 0, lens.mean_min_steps / np.maximum(lens.mean_o1, 1e-300), 0.0)
    v = 1.0 - (1.0 - 1.0 / e) * erlang_eta(b_r, e) * share
    return np.where(e == 1.0, b_p999, b_r + Z999 * np.sqrt(b_r * occupancy_factor * v)), cap / e


def erlang_eta(n: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The share η ∈ [0, 1] of the low-frequency variance reduction (1 − c_a²)·∫m² that Erlang-e arrivals (c_a² =
    1/e) reach when n arrivals fall in a mean life (``kv_per_rank``): the exact GI/M/∞ peakedness of an exponential
    life, z = 1/(1 − φ) − n, φ = (e·n/(e·n + 1))^e, as η = (1 − z)/((1 − 1/e)/2); 0 where e = 1 or n = 0."""
    n = np.maximum(np.asarray(n, dtype=float), 0.0)
    e = np.asarray(e, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        z = 1.0 / -np.expm1(e * (np.log(e * n) - np.log1p(e * n))) - n  # 1 − φ = −expm1(ln φ)
        eta = (1.0 - z) / ((1.0 - 1.0 / e) / 2.0)
    return np.where((e > 1.0) & (n > 0) & np.isfinite(eta), np.clip(eta, 0.0, 1.0), 0.0)


@dataclass(frozen=True)
class _TpotMoments:
    """TPOT moments of a request by output node: ``mean`` (N,), ``mt``, ``var``, ``k3`` (N, QO) in s, s², s³,
    and the request weights of the nodes that have a TPOT (``weights``, (N, QO); a row of zeros: no node has one)."""

    mean: np.ndarray
    mt: np.ndarray
    var: np.ndarray
    k3: np.ndarray
    weights: np.ndarray


def concave_step(c: Configs) -> bool:
    """Whether the load feedback and the batch drift of ``c``'s rows are taken over the batch's spread
    (``_at_spread_slope``, ``_drift_through_step``, ``_size_biased_step``, the mirrored gamma of ``tails._shape``)
    instead of on the tangent D(b̄ + 1) − D(b̄).

    Only for MoE models, whose decode step D(b) is concave over the batch's spread: flat on [0, 1] (a step reads at
    least one token's experts), then rising ever more slowly until every expert is touched, so the tangent at b̄
    lends the feedback a gain and the drift a tail the spread of b does not have (docs/model-accuracy.md, "MoE
    TPOT p99 at mid load"; qwen3-30b-a3b's capacity at a TPOT SLO of 2× its zero-load p99 +71 % optimistic on the
    tangent). A dense D is linear over the batch's spread (weights once a step, KV per sequence), so the tangent is
    its regression slope already: measured, the spread path moves dense capacities < 0.1 % (llama-3.1-8b at 2×
    14.004 → 13.991 req/s) for +60 % of the capacity search's CPU, so dense rows keep the tangent, bit for bit."""
    return bool(c.model.is_moe)


def _tpot_moments(c: Configs, lam: np.ndarray, lens: RowLengths, s: State, fb, sat: np.ndarray,
                  tbar: np.ndarray, concave: bool, d_tag: np.ndarray) -> _TpotMoments:
    """TPOT | O = mean of O−1 step durations + batch drift over its life W = (O−1)·t̄, with load feedback.

    ``concave`` (``concave_step``): the drift is D(1 + B) through D itself over a life of (O − 1) request-weighted
    steps, and the mean is the size-biased step of ``_size_biased_step`` (in ``fb.bias_s``); else the drift is
    s·δb̄_W, s the tangent, over (O − 1)·t̄: variance s²·Var(b̄_W)·F and third cumulant s³·κ3(b̄_W)·(1 + 2g)·F²
    (``batch_average_cumulants``; the third was left out, so the drift's right skew too: a decode pool of 70B on
    H20 at 60 % of its capacity, L 4,000/p99 12,000: TPOT p99 28.3 ms without it, 28.8 with it, 30.1 simulated over
    3 seeds). Both add the contexts' drift
    (``_context_drift_var``). ``d_tag``: the decode part of the mean (D(b̄ + 1) on the tangent), the rest being the
    prefill share whose variance is bounded."""
    o1 = np.maximum(lens.o_nodes - 1.0, 0.0)  # (N, QO) decode steps of a request
    m1, m2, m3 = (s.steps.moment(r) for r in (1, 2, 3))
    var_t = np.maximum(m2 - m1**2, 0.0)
    k3_t = m3 - 3 * m1 * m2 + 2 * m1**3
    # request-weighted mean step E[b·T]/E[b] = t̄ + Cov(b, T)/b̄, Little's law shift included (for a concave MoE
    # step the size-biased E[D(1 + B')] of ``_size_biased_step``); ``d_tag`` its decode part
    mean_tpot = m1 + np.where(sat, 0.0, fb.bias_s)
    steps_n = np.maximum(o1, 1.0)
    # a request lives (O − 1) request-weighted steps (Little's law: the batch it finds is λ·E[O − 1]·that step)
    life = np.where(sat | ~np.isfinite(mean_tpot), tbar, mean_tpot) if concave else tbar
    window = o1 * life[:, None]  # (N, QO)
    var_b, k3_b = batch_average_cumulants(lam, life, window, o1, lens.o_w)
    var_pref = (var_t * fb.prefill_factor)[:, None] / steps_n + fb.cross_var_s2[:, None]
    # prefill share Y = TPOT − D(b+1) is a per-step average in [0, e_full]: Var ≤ Ȳ·(e_full − Ȳ)
    y_bar = np.maximum(mean_tpot - d_tag, 0.0)
    room = np.maximum(s.t_full_s - s.steps.d - y_bar, 0.0)  # e_full − Ȳ
    bound = y_bar * room
    shrink = np.minimum(1.0, bound[:, None] / np.maximum(var_pref, 1e-300))
    if concave:
        var_drift, k3_drift = _drift_through_step(c, s, lens, var_b * fb.batch_factor[:, None],
                                                  k3_b * fb.batch_k3_factor[:, None], s.b * life / tbar)
    else:
        var_drift = (s.slope_s[:, None] ** 2) * var_b * fb.batch_factor[:, None]
    var_drift = var_drift + _context_drift_var(c, s, lens, var_b)
    var_tpot = var_pref * shrink + var_drift
    # its third cumulant, the load feedback's (1 + 2g)·F² clusters (``feedback``), at most that of the two-point
    # law on [0, e_full] with this mean and variance: κ3 ≤ v·(e − Ȳ − v/(e − Ȳ)), v = the shrunk variance (it binds
    # near saturation on short outputs: at 90 % load 4 of 22 output nodes of llama-3.1-8b a100, scripts/agreement.py)
    var_y = var_pref * shrink
    k3_cap = var_y * np.maximum(room[:, None] - var_y / np.maximum(room[:, None], 1e-300), 0.0)
    k3_tpot = np.minimum((k3_t * fb.prefill_k3_factor)[:, None] / steps_n**2 * shrink**1.5, k3_cap)
    if concave:
        k3_tpot = k3_tpot + k3_drift
    else:  # the tangent's drift s·δb̄_W: the window-averaged batch's third cumulant, clustered as its variance
        k3_tpot = k3_tpot + (s.slope_s[:, None] ** 3) * k3_b * fb.batch_k3_factor[:, None]
    w_tpot = np.where(o1 >= 0.5, lens.o_w, 0.0)
    total = w_tpot.sum(axis=1)[:, None]
    w_tpot = np.where(total > 0, w_tpot / np.where(total > 0, total, 1.0), w_tpot)
    return _TpotMoments(mean_tpot, np.broadcast_to(mean_tpot[:, None], var_tpot.shape), var_tpot, k3_tpot, w_tpot)


def _context_drift_var(c: Configs, s: State, lens: RowLengths, var_b: np.ndarray) -> np.ndarray:
    """Variance (s², (N, QO)) a request's TPOT takes from the contexts its batch reads, beside their number.

    A decode step reads each running sequence's KV: its attention is a_dec·Σ_i c_i (a_dec = ∂D/∂c / b̄, the
    step's time per sequence per context token, at b̄ and c̄). The batch drift above counts the sequences at the mean
    context c̄; with c_i = c̄ + δ_i and the δ_i independent across sequences (their prompts are, Var δ = Var(L)
    = ``ctx_var_tokens2``), the window average of Σ_i δ_i·(overlap_i/W) adds Var(L)·E[Σ_i (overlap_i/W)²] =
    Var(L)·var_b (var_b the M/G/∞ window variance, the same second moment of the overlaps whatever the arrivals'
    clustering): ``a_dec²·Var(L)·var_b``. Zero for fixed prompts; large where prompts are long and spread and the
    step is attention-bound (a decode pool of 4,000-token prompts, p99 12,000). The request's own prompt,
    a_dec·δ_self on each of its steps, is left out: a constant of the request (1/var_b of the term, var_b ≈ 10-30 at
    mid load), which lumped into one shifted gamma per output node beside a rare prefill's skew made the TPOT p99 fall
    as the rate rose from 0 (llama-3.1-70b fp8 h100 tp2, prompts 2,048 / p99 16,384: 20.54 → 20.40 ms at
    0.001 → 0.0018 req/s); it would need the TPOT mixed over the prompt nodes, as the TTFT is."""
    b = np.maximum(np.where(np.isfinite(s.b), s.b, 1.0), 1.0)
    ctx = lens.ctx
    dc = np.maximum(0.01 * ctx, 1.0)
    with np.errstate(invalid="ignore"):
        a_dec = (perf.decode_step_s(c, b, ctx + dc) - perf.decode_step_s(c, b, ctx)) / (b * dc)
    a_dec = np.where(np.isfinite(a_dec), np.maximum(a_dec, 0.0), 0.0)
    return (a_dec**2 * lens.ctx_var_tokens2)[:, None] * var_b


# Gauss–Hermite (probabilists') nodes and weights of a standard normal, 7 points: E[f(Z)] ≈ Σ w_j·f(z_j)
_SPREAD_Z, _SPREAD_W = np.polynomial.hermite_e.hermegauss(7)
_SPREAD_W = _SPREAD_W / _SPREAD_W.sum()
SPREAD_SLOPE_ITERATIONS = 2  # s → F(s) → s: a third round moves qwen3-30b-a3b's and mixtral-8x7b's capacities < 0.1 %


def _at_spread_slope(c: Configs, lam: np.ndarray, s: State, lens: RowLengths) -> tuple[State, np.ndarray]:
    """``s`` with ``slope_s`` the least-squares slope of the decode step D over the batch's fluctuations,
    ``Cov(B, D(B))/Var(B)``, for the load feedback (``feedback_factors``).

    The feedback is a linear response δT = s·δb; for a D that is not linear over the spread of b it is exact with s
    the regression slope over that spread, not the tangent at b̄. B is taken normal, mean b̄ and variance
    F·b̄ (the M/G/∞ batch is Poisson(b̄), over-dispersed by F = ``occupancy_factor``), and for a Poisson B the slope
    is exactly E[D(B + 1) − D(B)] (Stein–Chen: Cov(B, f(B)) = b̄·E[f(B + 1) − f(B)]), so
    s = Σ_j w_j·(D(x_j + 1) − D(x_j)), x_j = max(b̄ + √(F·b̄)·z_j, 0) at the 7 Gauss–Hermite nodes. F depends on s:
    ``SPREAD_SLOPE_ITERATIONS`` rounds from the tangent D(b̄ + 1) − D(b̄). For a D linear over the spread this is
    the tangent; an MoE step is flat on [0, 1] (a step reads at least one token's experts) and concave until every
    expert is touched — mixtral-8x7b fp8 tp2 on h100-sxm: D = 5.05, 5.05, 7.05, 8.53, 11.14, 12.50, 13.08 ms at
    b = 0, 1, 2, 3, 6, 10, 15 — and the tangent at b̄ ≈ 1-4 (1-2 ms a sequence) lent the feedback a gain the
    spread of b does not have: the mean TPOT 11.75 ms at 1.01 req/s against 8.46 simulated (docs/model-accuracy.md,
    "MoE TPOT p99 at mid load").

    Also returned: the feedback's gain slope (N,), Σ_j w_j·(D(x_j + 2) − D(x_j + 1)), the regression slope of a
    running step D(1 + B) on the others B: a step runs only with at least one sequence, so one more sequence lengthens
    the steps the others (and the arrivals it lets in) run by D(B + 2) − D(B + 1), not by the flat D(1) − D(0) of an
    idle replica (qwen3-30b-a3b fp8 on h100-sxm: D = 2.37, 2.37, 3.17 ms at b = 0, 1, 2; at b̄ = 0.42 the spread
    slope 0.35 ms, the gain slope 0.8). For a D linear over the spread both are the tangent."""
    slope = gain = s.slope_s
    ctx = lens.ctx[:, None]
    k = len(_SPREAD_Z)
    for _ in range(SPREAD_SLOPE_ITERATIONS):
        occ = feedback_factors(lam, replace(s, slope_s=slope), lens, gain).occupancy_factor
        sd = np.sqrt(np.maximum(np.nan_to_num(occ), 0.0) * np.maximum(s.b, 0.0))
        x = np.maximum(s.b[:, None] + sd[:, None] * _SPREAD_Z, 0.0)
        d = perf.decode_step_s(c, np.concatenate([x, x + 1.0, x + 2.0], axis=1), ctx)
        finite = np.isfinite(s.b)
        slope = np.where(finite, (d[:, k:2 * k] - d[:, :k]) @ _SPREAD_W, s.slope_s)
        gain = np.where(finite, (d[:, 2 * k:] - d[:, k:2 * k]) @ _SPREAD_W, s.slope_s)
    return replace(s, slope_s=slope), gain


DRIFT_NODES = 5  # Gauss nodes of the batch's law: 9 move the MoE capacities of scripts/moe_tpot_capacity.py ≤ 1.4 %, 3 up to 2.6×


def _gamma_nodes(var: np.ndarray, k3: np.ndarray, b_mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes B_j = max(b̄ + √var·z_j, 0) and weights w_j (…, ``DRIFT_NODES``) of the shifted gamma of mean ``b_mean``
    (…), variance ``var`` and third cumulant ``k3`` (skewness γ = κ3/var^1.5, ``tails.gamma_gauss_rule``)."""
    sd = np.sqrt(np.maximum(np.nan_to_num(var), 0.0))
    k3 = np.maximum(np.nan_to_num(k3, posinf=0.0), 0.0)
    gam = np.divide(k3, sd**3, out=np.zeros_like(sd), where=sd > 1e-100)  # clipped at 1e3 (a gamma of shape 4e-6)
    z, w = gamma_gauss_rule(gam, DRIFT_NODES)
    return np.maximum(np.where(np.isfinite(b_mean), b_mean, 0.0)[..., None] + sd[..., None] * z, 0.0), w


def _drift_through_step(c: Configs, s: State, lens: RowLengths, var: np.ndarray, k3: np.ndarray,
                        b_mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Variance and third cumulant (N, QO) of the batch drift Y = D(1 + B) carried into a request's TPOT, B the
    batch of the others averaged over its life (mean ``b_mean`` (N,), variance ``var``, third cumulant ``k3``, per
    output node).

    The tagged request's steps run its own sequence and the others' (PASTA: an arrival sees the time-average batch),
    so its drift is D at 1 + B, taken through D itself rather than a tangent: B is the shifted gamma of
    those three cumulants (the window-averaged M/G/∞ count is skewed at small b̄, ``batch_average_k3``), integrated
    by ``DRIFT_NODES``-point Gauss quadrature (``_gamma_nodes``). Then Var(Y) = Σ w_j·(D_j − Ȳ)²,
    κ3(Y) = Σ w_j·(D_j − Ȳ)³ with Ȳ = Σ w_j·D_j; the mean stays the fixed point's. For a D linear in b this is s²·var
    and s³·κ3 (dense rows); the MoE step is flat on [0, 1] then concave (mixtral-8x7b fp8 tp2 on h100-sxm:
    D = 5.07, 7.05, 8.53, 9.65 ms at b = 1, 2, 3, 4), which the tangent at b̄ (D(b̄ + 1) − D(b̄)) both over- and
    under-states: docs/model-accuracy.md, "MoE TPOT p99 at mid load"."""
    x, w = _gamma_nodes(var, k3, b_mean[:, None])
    rows, qo = var.shape
    d = perf.decode_step_s(c, 1.0 + x.reshape(rows, -1), lens.ctx[:, None]).reshape(rows, qo, DRIFT_NODES)
    d = np.where(np.isfinite(d), d, 0.0)
    mean = np.sum(w * d, axis=-1)
    dev = d - mean[..., None]
    return np.sum(w * dev**2, axis=-1), np.sum(w * dev**3, axis=-1)


def _size_biased_step(c: Configs, lam: np.ndarray, s: State, lens: RowLengths, fb, slope_s: np.ndarray):
    """``fb`` with ``bias_s`` the request-weighted step of a concave MoE step less t̄, and that step's decode part
    (N,): the TPOT mean, Little's law's life and the busy batch, taken through D over the batch's law instead of
    the tangent and the linear response.

    The request-weighted step is an identity over the steps' joint law of (b, T): E[b·T]/E[b] — a static functional
    of the law of the batch B at a step, whatever made it over-dispersed. B is the mixed Poisson count of mean b̄
    and variance F·b̄ (F = ``occupancy_factor``, third cumulant (1 + 2g)·F²·b̄, the feedback's clusters); its decode
    part E[B·D(B)]/b̄ = E[D(1 + B')], B' the others a sequence finds in its step, the size-biased law less one
    (for a negative binomial of dispersion F: mean b̄ + F − 1, variance F·(b̄ + F − 1); Stein–Chen for F = 1).
    Two corrections of the tangent model, both of D's curvature over that law:

    - the fixed point is t̄ = D(b̄) + prefill, but a step lasts E[D(B)] on average: t̄ moves by Jensen's gap
      J = E[D(B)] − D(b̄), amplified by the fixed point's response 1/(1 − g), g = u_p + λ·E[O − 1]·s (s the
      spread slope; linear response), and b̄ by λ·E[O − 1] times that;
    - the size bias E[D(1 + B')] − E[D(B)] at that b̄ replaces s·F·(1 − u_p)/(1 − g) (the linear response's
      bias, whose fixed-point factor the shifted fixed point now carries).

    The prefill part of the bias (ε's terms of ``feedback_factors``) is kept. mixtral-8x7b int8 tp2 on l40s
    (prompts and outputs lognormal 256 / p99 1,024) at 0.5 req/s: J = −2.7 ms at b̄ = 4.1 (D = 21.4, 31.4, 40.3 ms
    at b = 2, 4, 8), the mean TPOT 40.8 → 32.9 ms against 33.4 simulated (docs/model-accuracy.md, "MoE mean TPOT at
    mid load (moehump)"). Each expectation by the ``DRIFT_NODES``-point rule of the shifted gamma (``_gamma_nodes``)."""
    b = np.where(np.isfinite(s.b), np.maximum(s.b, 0.0), 0.0)
    occ = np.where(np.isfinite(fb.occupancy_factor), fb.occupancy_factor, 1.0)
    cluster = fb.batch_k3_factor / np.maximum(fb.batch_factor, 1e-300) ** 2  # 1 + 2g
    up = np.clip(s.rho1, 0.0, 0.95)
    slope = np.maximum(slope_s, 0.0)
    rate = lam * lens.mean_o1  # b̄ per second of t̄
    response = (1.0 - up) / (1.0 - np.minimum(up + rate * slope, 0.98))  # (1 − u_p)/(1 − g)
    ctx = lens.ctx[:, None]
    x, w = _gamma_nodes(occ * b, cluster * occ**2 * b, b)
    d = perf.decode_step_s(c, x, ctx)
    gap = np.sum(w * np.where(np.isfinite(d), d, 0.0), axis=-1) - s.steps.d
    shift = np.where(np.isfinite(gap), gap, 0.0) * response / (1.0 - up)  # J/(1 − g)
    others = np.maximum(b + rate * shift, 0.0) + occ - 1.0  # B': the size-biased batch less the tagged sequence
    x, w = _gamma_nodes(occ * others, cluster * occ**2 * others, others)
    d = perf.decode_step_s(c, 1.0 + x, ctx)
    decode = np.sum(w * np.where(np.isfinite(d), d, 0.0), axis=-1)
    prefill = fb.bias_s - slope * occ * response  # the bias's ε terms
    ok = np.isfinite(s.step_s) & np.isfinite(s.b) & np.isfinite(decode) & np.isfinite(prefill)
    bias = np.where(ok, decode + prefill - np.where(ok, s.steps.d, 0.0), 0.0)  # E[D(1 + B')] + prefill − t̄
    return replace(fb, bias_s=np.where(ok, bias, fb.bias_s)), np.where(ok, decode, s.d_next_s)


def _percentiles(n: int, lens: RowLengths, tp: _TpotMoments, ttft: _TtftMoments, need: set[str], p50: bool,
                 concave: bool = False) -> dict[str, np.ndarray]:
    """p99 (and p50) of TPOT, TTFT and E2E (s) for the limits in ``need``; NaN for the others. ``concave``
    (``concave_step``): a TPOT node of negative third cumulant is the mirrored shifted gamma (``tails._shape``), a law
    bounded above — the drift D(1 + B) of a concave step is (mixtral-8x7b int8 tp2 on l40s at 0.5 req/s: the
    simulated TPOT's skewness −0.86; as a normal, skewness 0, its p99 was +10 % over the simulator's)."""
    nan = np.full(n, np.nan)
    out = {k: nan.copy() for k in ("tpot_p50", "tpot_p99", "ttft_p50", "ttft_p99", "e2e_p50", "e2e_p99")}
    qs = (0.99, 0.50) if p50 else (0.99,)
    if "tpot" in need:
        # a row whose requests all have one output token: no gap between tokens, so no time per
        # output token to wait for — a TPOT SLO is met trivially (0 ms), not unmeetable (nan)
        has = tp.weights.sum(axis=1) > 0
        out["tpot_p99"], out["tpot_p50"] = np.where(has, np.nan, 0.0), np.where(has, np.nan, 0.0)
    # the TTFT nodes split at the wait's atom at zero (``_TtftMoments.mixture``), for the TTFT and E2E mixtures
    ttft_w, ttft_m, ttft_v, ttft_k3 = ttft.mixture(lens.l_w) if need & {"ttft", "e2e"} else (None,) * 4
    mixtures = {}  # name: (rows or None for all, weights, mean, var, κ3, mirrored)
    if "tpot" in need and len(rows := np.flatnonzero(has)):
        every = len(rows) == n
        mixtures["tpot"] = (None if every else rows, *(x if every else x[rows]
                                                      for x in (tp.weights, tp.mt, tp.var, tp.k3)), concave)
    if "ttft" in need:
        mixtures["ttft"] = (None, ttft_w, ttft_m, ttft_v, ttft_k3, False)
    for q in qs:
        for name, (rows_of, values) in _mixture_quantiles(q, mixtures).items():
            key = f"{name}_p{round(q * 100)}"
            if rows_of is None:
                out[key] = values
            else:
                out[key][rows_of] = values
    if p50 and "ttft" in need:
        # quantiles of one distribution: p50 <= p99. Each is found to QUANTILE_RTOL (1e-5) of its value, so where the
        # TTFT is nearly one number (fixed prompts, the no-wait component's spread < 1e-5 of it) the two may cross
        out["ttft_p50"] = np.fmin(out["ttft_p50"], out["ttft_p99"])
    if "e2e" in need:
        # components (L node, O node): TTFT(L) + (O−1)·TPOT(O), independent
        o1 = np.maximum(lens.o_nodes - 1.0, 0.0)[:, None, :]
        m = ttft_m[:, :, None] + o1 * tp.mt[:, None, :]
        v = (ttft_v[:, :, None] + (o1**2) * tp.var[:, None, :]
             + (tp.mt**2 * lens.o_var)[:, None, :])  # output length spread inside a stratum
        k3 = ttft_k3[:, :, None] + (o1**3) * tp.k3[:, None, :]
        w = (ttft_w[:, :, None] * lens.o_w[:, None, :]).reshape(n, -1)
        for q in qs:
            out[f"e2e_p{round(q * 100)}"] = mixture_quantile(q, w, m.reshape(n, -1), v.reshape(n, -1),
                                                            k3.reshape(n, -1))
    return out


def _mixture_quantiles(q: float, mixtures: dict[str, tuple]) -> dict[str, tuple]:
    """``mixture_quantile`` at q of each (rows, weights, mean, var, κ3, mirrored) of ``mixtures`` (arrays (rows, J);
    mirrored a bool: ``tails._shape``'s mirror for all its rows): {name: (rows, quantiles)}. Mixtures with as many
    components run as one call of their rows stacked (every row's quantile is its own: the search is row by row)."""
    out: dict[str, tuple] = {}
    by_width: dict[int, list[str]] = {}
    for name, (_, w, *_rest) in mixtures.items():
        by_width.setdefault(np.shape(w)[-1], []).append(name)
    for names in by_width.values():
        parts = [mixtures[name][1:5] for name in names]
        sizes = [len(p[1]) for p in parts]
        flags = [mixtures[name][5] for name in names]
        mirror = np.concatenate([np.full((k, 1), f) for k, f in zip(sizes, flags, strict=True)]) if any(flags) else None
        stacked = [np.concatenate([np.broadcast_to(p[i], p[1].shape) for p in parts]) for i in range(4)]
        values = (mixture_quantile(q, *stacked, mirror=mirror) if len(parts) > 1
                  else mixture_quantile(q, *parts[0], mirror=mirror))
        for name, piece in zip(names, np.split(values, np.cumsum(sizes)[:-1]), strict=True):
            out[name] = (mixtures[name][0], piece)
    return out


@dataclass(frozen=True)
class _TtftMoments:
    """TTFT moments (s, s², s³) by prompt node, (N, QL): the nodes and weights of ``RowLengths.l_nodes``/``l_w``."""

    mean: np.ndarray
    var: np.ndarray
    k3: np.ndarray
    behind: tuple[np.ndarray, np.ndarray, np.ndarray]  # mean, variance, κ3 of the work H left behind (s), (N,)
    # the TTFT split at the wait's atom at zero, for the percentiles (``_split_at_no_wait``): P(W > 0) (N,) and the
    # moments (mean, variance, κ3; each (N, QL)) of the prompt nodes without a wait and with one (W | W > 0)
    waited: np.ndarray | None = None
    no_wait: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    with_wait: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def mixture(self, l_w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(weights, mean, var, κ3), each (N, 2·QL): the prompt nodes without a wait (weights l_w·(1 − p))
        then with one (l_w·p), p = P(W > 0); the collapsed nodes (l_w, mean, var, κ3) when not split."""
        if self.waited is None:
            return l_w, self.mean, self.var, self.k3
        p = self.waited[:, None]
        w = np.concatenate([l_w * (1.0 - p), l_w * p], axis=1)
        return (w, *(np.concatenate(pair, axis=1) for pair in zip(self.no_wait, self.with_wait, strict=True)))


# The prefill queue runs with the decode batch of the moment, which drifts over a request's life
# (E[O−1]·t̄, seconds) while the queue turns over in E[S]/(1 − u): quasi-static, the waiting time is
# a mixture over the batch. Three nodes of its normal approximation (mean, variance and kurtosis kept); the
# mixture of the waits is carried by its first three moments (the raw moments add with the weights).
BATCH_NODES = np.array([-math.sqrt(3.0), 0.0, math.sqrt(3.0)])
BATCH_WEIGHTS = np.array([1.0 / 6.0, 2.0 / 3.0, 1.0 / 6.0])
_CENTRE_NODE = int(np.flatnonzero(BATCH_NODES == 0.0)[0])  # the mean batch, where the work left behind is taken


def _ttft_moments(c: Configs, lam: np.ndarray, lens: RowLengths, s: State, chunk: int, b_busy: np.ndarray,
                  b_sd: np.ndarray) -> _TtftMoments:
    """Moments of TTFT for each prompt node (``_TtftMoments``).

    TTFT = R + T_next + W_q: the residual R of the step in progress (length-biased, uniform
    inside the step; 0 when the replica is idle), the step(s) that carry the prompt with
    J ~ Poisson(λ·E[T²]/E[T]) other prompts that arrived during the same step, and the
    M/G/1 waiting time W of the prompt work ahead in the FCFS prefill queue, in full-chunk
    steps (``prefill_service_s``, ``_prefill_wait_moments``), mixed over the decode batch b at the
    ``BATCH_NODES`` of its distribution: mean ``b_busy`` (the time-averaged batch), sd
    ``b_sd`` (``√(F·b)``, the over-dispersed M/G/∞ population of the KV model); unstable at any node
    = no steady state (TTFT ``inf``).
    """
    st = s.steps
    mom = [st.moment(r) for r in (1, 2, 3, 4)]
    busy = 1.0 - np.exp(-s.b)
    r1 = busy * mom[1] / (2.0 * mom[0])
    r2 = busy * mom[2] / (3.0 * mom[0])
    r3 = busy * mom[3] / (4.0 * mom[0])
    var_r = r2 - r1**2
    k3_r = r3 - 3 * r1 * r2 + 2 * r1**3
    # the step(s) carrying the prompt: D + g(L + J·E[L]) (N, QL, J)
    lb_mean = mom[1] / mom[0]
    mj = busy * lam * lb_mean
    o1, o2, o3, o_j = carrying_step_sums(c, s, lens, chunk, mj)
    var_o = np.maximum(o2 - o1**2, 0.0)
    k3_o = o3 - 3 * o1 * o2 + 2 * o1**3
    # R and J grow together with the length of the step in progress: Cov(R, own) ≈ λ/2·Var_lb(T)·ε_J
    var_lb = mom[2] / mom[0] - lb_mean**2
    eps_j = o_j / np.maximum(mj, 1e-12)[:, None]
    cov = busy[:, None] * lam[:, None] / 2.0 * var_lb[:, None] * np.where(mj[:, None] > 0, eps_j, 0.0)
    mean0 = o1 + r1[:, None] + c.request_overhead_s  # + the per-request front-end time
    var0 = var_o + var_r[:, None] + 2.0 * cov
    k30 = k3_o + k3_r[:, None]
    # FCFS queue of prompt work ahead in full-chunk steps, M/G/1 (Takács moments) at each batch node;
    # W is their mixture, collapsed to its first three moments (raw moments add with the weights)
    # (the nodes in one step-time evaluation and one pass of the service moments: arrays (N, nodes, QL))
    nodes = np.clip(b_busy[:, None] + BATCH_NODES[None, :] * b_sd[:, None], 0.0, np.asarray(c.batch_cap, dtype=float)[:, None])
    services, slopes = prefill_service_s(c, nodes, lens, chunk)
    moments = service_moments(lens, services, slopes)
    waits = _prefill_wait_moments(lam[:, None], lens, services, slopes, moments)
    raw, stable_all = np.zeros((3, len(lam))), ~s.saturated
    for i, weight in enumerate(BATCH_WEIGHTS):
        w1, w2, w3, stable = (w[:, i] for w in waits)
        stable_all &= stable
        raw += weight * np.stack([w1, w2 + w1 * w1, w3 + 3.0 * w1 * w2 + w1**3])
    centre = _CENTRE_NODE
    slope = slopes[:, centre]
    m1 = raw[0]
    m2c = raw[1] - m1 * m1
    m3c = raw[2] - 3.0 * m1 * raw[1] + 2.0 * m1**3
    behind = _work_behind(lam, [mk[:, centre] for mk in moments], tuple(w[:, centre] for w in waits[:3]), ~stable_all)
    unstable = ~stable_all[:, None]
    # the prompt length spread inside each stratum, at the marginal full-chunk cost of a token
    mean = np.where(unstable, np.inf, mean0 + m1[:, None])
    var = np.where(unstable, 0.0, var0 + m2c[:, None] + slope**2 * lens.l_var)
    k3 = np.where(unstable, 0.0, k30 + m3c[:, None])
    waited, no_wait, with_wait = _split_at_no_wait(lam, moments[0], raw, unstable,
                                                   (mean0, var0 + slope**2 * lens.l_var, k30))
    return _TtftMoments(mean, var, k3, behind, waited, no_wait, with_wait)


def _split_at_no_wait(lam: np.ndarray, s1: np.ndarray, raw: np.ndarray, unstable: np.ndarray,
                      own: tuple[np.ndarray, np.ndarray, np.ndarray]):
    """The TTFT of a prompt node as two components, at the atom of the FCFS wait W at zero.

    M/G/1: a request waits with probability P(W > 0) = u = λ·E[S] (PASTA: the queue's busy share), so over
    the batch nodes ``p = Σ_i w_i·λ·E[S_i]`` (``s1`` (N, nodes)), and ``E[W^k | W > 0] = E[W^k]/p`` (``raw``
    (3, N): E[W^k] mixed over the nodes). TTFT = own (``own``: mean, variance, κ3 (N, QL), the prompt's
    stratum spread included) with weight 1 − p, own + (W | W > 0) with weight p. The collapsed own + W,
    one shifted gamma of three moments, cannot hold an atom of mass 1 − u at zero beside a long tail: at
    1-2 % utilisation its p99 fell with the rate (qwen2.5-72b fp8 on h100-nvl, lognormal prompts mean 512 /
    p99 4,096: 549.5 ms at 0.05 req/s, 496.6 ms at 0.2). Returns (p (N,), no-wait moments, waited moments);
    Where the queue is unstable p = 0 and both components' means are ``inf`` (no steady state).
    """
    mean0, var0, k30 = own
    stable = ~unstable[:, 0]
    p = np.where(stable, np.clip(np.sum(BATCH_WEIGHTS * lam[:, None] * s1, axis=1), 0.0, 1.0), 0.0)
    pos = p > 0
    c = raw / np.where(pos, p, 1.0)  # E[W^k | W > 0]
    w1 = np.where(pos, c[0], 0.0)
    w2 = np.where(pos, np.maximum(c[1] - w1 * w1, 0.0), 0.0)
    w3 = np.where(pos, c[2] - 3.0 * w1 * c[1] + 2.0 * w1**3, 0.0)
    no_wait = (np.where(unstable, np.inf, mean0), np.where(unstable, 0.0, var0), np.where(unstable, 0.0, k30))
    with_wait = (np.where(unstable, np.inf, mean0 + w1[:, None]), np.where(unstable, 0.0, var0 + w2[:, None]),
                 np.where(unstable, 0.0, k30 + w3[:, None]))
    return p, no_wait, with_wait


def _work_behind(lam, moments, wait, bad) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, variance, κ3 (s, s², s³; (N,)) of the prompt work H a request leaves queued behind it when
    its prefill ends: FCFS, the prompts that arrived during its sojourn T = W + S (wait and own service),
    a compound Poisson given T: ``E[H] = λE[S]·E[T]``, ``Var(H) = λE[S²]·E[T] + (λE[S])²·Var(T)``,
    ``κ3(H) = λE[S³]·E[T] + 3·λE[S]·λE[S²]·Var(T) + (λE[S])³·κ3(T)`` (W and S independent; 0 where the
    queue is unstable). ``moments``: E[S^k], k = 1..4 (``service_moments``), ``wait`` W's mean, variance, κ3."""
    s1, s2, s3, _ = moments
    w1, w2, w3 = wait
    t1, t2, t3 = w1 + s1, w2 + s2 - s1 * s1, w3 + s3 - 3.0 * s1 * s2 + 2.0 * s1**3
    a1, a2, a3 = lam * s1, lam * s2, lam * s3
    h1 = a1 * t1
    h2 = a2 * t1 + a1 * a1 * t2
    h3 = a3 * t1 + 3.0 * a1 * a2 * t2 + a1**3 * t3
    return tuple(np.where(bad, 0.0, h) for h in (h1, h2, h3))


def _queue_behind(tp: _TpotMoments, c: Configs, lens: RowLengths, ttft: _TtftMoments, b_busy: np.ndarray,
                  chunk: int) -> _TpotMoments:
    """TPOT moments with the prefill work a request finds queued behind it when it starts to decode.

    Its first token ends a prefill step, and the prompts that arrived while it waited and prefilled
    are still queued (FCFS): work H (``_work_behind``, at the mean batch). It runs in its first
    decode steps, each a full-chunk step of
    which the share ``f = 1 − D(b)/t(b, c̄, C, span)`` is prefill (b the time-averaged batch, span the
    token-weighted mean ``o + E[L²]/(2E[L])``, ``prefill_service_s``). Over n = O − 1 steps that is
    ``f·H/n`` more per token; a request ends at a random step rather than just after a prefill, so the
    token-weighted mean — what ``_tpot_moments`` has by Little's law — does not move: the node mean
    shifts by ``f·E[H]·(1/n − 1/E[n])`` and the variance and κ3 grow by ``f²·Var(H)/n²``, ``f³·κ3(H)/n³``.
    Without it the TPOT p99 of short outputs was 10-50 % under the simulator's near saturation
    (llama-3.1-70b fp4, 1.4k-20k-token prompts, on mi355x at its TPOT capacity: 100 vs 129-150 ms).
    """
    w1, w2, w3 = ttft.behind
    el = np.maximum(lens.mean_l, 1.0)
    span = lens.span_offset + (lens.var_l + el * el) / (2.0 * el)
    # t(b, c̄, C, span) and D(b), one step-time evaluation
    both = perf.decode_step_s(c, b_busy[:, None], lens.ctx[:, None], np.array([float(chunk), 0.0]),
                              np.stack([span, np.zeros(len(span))], axis=1))
    f = np.clip(1.0 - both[:, 1] / np.maximum(both[:, 0], 1e-300), 0.0, 1.0)
    f = np.where(np.isfinite(f), f, 0.0)[:, None]
    n = np.maximum(lens.o_nodes - 1.0, 1.0)
    n_bar = np.maximum(lens.mean_o1, 1.0)[:, None]
    mt = tp.mt + f * w1[:, None] * (1.0 / n - 1.0 / n_bar)
    var = tp.var + (f * f) * w2[:, None] / (n * n)
    k3 = tp.k3 + (f**3) * w3[:, None] / (n**3)
    return _TpotMoments(tp.mean, mt, var, k3, tp.weights)


def prefill_service_s(c: Configs, b: np.ndarray, lens: RowLengths, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Service time S(L) (s) of each prompt node in a busy prefill queue, and dS/dL (s/token); each (N, QL),
    or (N, B, QL) for batches ``b`` (N, B) (one step-time evaluation for all of them).

    While prompts queue every step is full: C prompt tokens with the ``b`` decoding sequences,
    ``t(b, c̄, C, span) = t₀ + a·C·span`` (``perf.decode_step_s``: prefill attention is linear in
    the tokens' mean span). The tokens of a prompt of L tokens attend to their position plus the
    cached prefix o (``span_offset``), and however the chunks cut the prompt (alone or straddling
    others) their spans sum to ``Σ_j n_j·(o + p_j + n_j/2) = L·o + L²/2`` (p_j the tokens before
    chunk j), so ``S(L) = (L/C)·t(b, c̄, C, o + L/2)`` exactly; dS/dL = S/L + (L/C)·∂t/∂span/2.
    The time-averaged batch ``b`` (not the step-averaged one) rides along: a step is long while
    the queue is busy, and the decoding population is counted per unit of time (Little's law
    on a request's decode residence ``(O − 1)·(t̄ + Cov(b, T)/b̄)``).
    It replaced ``L·t(b̄, C, C/2)/C`` (every chunk at the span of a prompt's first): for the
    2.5k-10.8k-token bucket of llama-3.1-8b fp8 on l40s the full-chunk step was 78 ms against the
    simulator's 88 ms (span 2,440, batch 44), the prefill queue 70 % busy against 81 %, and the
    TTFT p99 at the planning ceiling 1.76 s against 3.0-6.0 s (tests/models/test_serving_saturation.py).
    """
    ln = lens.l_nodes
    span = lens.span_offset[:, None] + ln / 2.0
    dspan = np.maximum(ln, 1.0) * 1e-3
    q_l = ln.shape[1]
    b = np.asarray(b, dtype=float)
    spans = np.concatenate([span, span + dspan / 2.0], axis=1)
    if b.ndim == 2:  # batches (N, B): the node arrays as (N, 1, QL)
        ln, dspan, spans = ln[:, None, :], dspan[:, None, :], spans[:, None, :]
    # one step-time evaluation per batch: at the span and just past it (∂t/∂span by a difference)
    t2 = perf.decode_step_s(c, b[..., None], lens.ctx.reshape((-1,) + (1,) * b.ndim), float(chunk), spans)
    t, dt = t2[..., :q_l], (t2[..., q_l:] - t2[..., :q_l]) / dspan * 2.0
    return ln / chunk * t, t / chunk + ln / chunk * dt / 2.0


def service_moments(lens: RowLengths, service: np.ndarray, slope: np.ndarray) -> list[np.ndarray]:
    """E[S^k], k = 1..4 (each (N,), or (N, B) for ``service``, ``slope`` (N, B, QL)), over the prompt nodes
    with each stratum's spread.

    E[S] is the plain node sum (what the queue's utilisation is). For k >= 2, inside a stratum the
    service is the quadratic ``S(L) = S_i + S'·δ + (S''/2)·δ²`` (δ = L − L_i; exact, the step time being
    linear in the span: ``S'' = 2(S' − S_i/L_i)/L_i`` from ``prefill_service_s``), and
    ``E[S^k | stratum] = Σ_j coef_j(S^k)·E[δ^j | stratum]`` with the deviations of the prompt to δ⁸,
    censored at ``lengths.QUEUE_TAIL_Q`` (``lens.l_dev``). The second-order ``S^k + k(k−1)/2·S^(k−2)·S'²·Var(L)``
    it replaced had E[S³] at 0.18 of the integral for svc07's lognormal prompts (mean 512 / p99 4,096,
    llama-3.1-405b fp8 gb200 pp4), its TTFT p99 at 87.5 % of its capacity 447 ms against 491-579 ms simulated.
    """
    lw, ln = lens.l_w, np.maximum(lens.l_nodes, 1.0)
    dev = np.moveaxis(lens.l_dev, -1, 0)  # E[δ^j], j = 1..8, each (N, QL)
    if service.ndim == 3:
        lw, ln, dev = lw[:, None, :], ln[:, None, :], dev[:, :, None, :]
    poly = [service, slope, (slope - service / ln) / ln]  # coefficients of S in δ (S''/2 the last), each (..., QL)
    out, power = [np.sum(lw * service, axis=-1)], poly
    for _ in (2, 3, 4):
        power = _poly_mul(power, poly)
        # Σ_j coef_j·E[δ^j] in the order of a sum over a last axis of length K (``_sum_in_order``)
        out.append(np.sum(lw * _sum_in_order([power[0]] + [p * dev[j - 1] for j, p in enumerate(power) if j]),
                          axis=-1))
    return out


def _poly_mul(a: list[np.ndarray], b: list[np.ndarray]) -> list[np.ndarray]:
    """Product of polynomials given by their coefficients (ascending powers, arrays of one shape):
    ``c_k = Σ_j a_{k−j}·b_j``, the terms added by ascending j."""
    out: list[np.ndarray | None] = [None] * (len(a) + len(b) - 1)
    for j, b_j in enumerate(b):
        for i, a_i in enumerate(a):
            term = a_i * b_j
            out[i + j] = term if out[i + j] is None else out[i + j] + term
    return out  # type: ignore[return-value]


def _sum_in_order(terms: list[np.ndarray]) -> np.ndarray:
    """Σ terms, elementwise, in the order numpy's ``sum`` over a last axis of that length adds them
    (pairwise: one after the other below 8 terms, else 8 partial sums ((0+1)+(2+3))+((4+5)+(6+7)) and
    the rest one by one, up to 15 terms): the coefficients are separate arrays here (long passes, where
    an (..., K) array of K <= 9 coefficients runs numpy's loops K elements at a time), the sum the same."""
    if len(terms) < 8:
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return total
    if len(terms) >= 16:
        raise ValueError(f"_sum_in_order: {len(terms)} terms, at most 15")
    t = terms
    total = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]))
    for rest in t[8:]:
        total = total + rest
    return total


def _prefill_wait_moments(lam: np.ndarray, lens: RowLengths, service: np.ndarray, slope: np.ndarray,
                          moments: list[np.ndarray] | None = None):
    """Mean, variance, third cumulant (s, s², s³; each (N,)) of the M/G/1 FCFS waiting time W of
    the prompt work ahead, and whether the queue is stable (u = λ·E[S] < 1).

    Service S(L) per prompt node (``prefill_service_s``, (N, QL)); raw moments
    s_k = E[S^k] over the quadrature, each node's stratum spread included (``service_moments``). Takács:
    ``E[W^k] = λ/(1−u)·Σ_{i=1..k} C(k, i)·s_{i+1}/(i+1)·E[W^(k−i)]``, so
    E[W] = λs₂/(2(1−u)) (Pollaczek–Khinchine: ``E[S]·(1 + c_s²)/2·u/(1 − u)``), E[W²] = 2E[W]² + λs₃/(3(1−u)),
    E[W³] = λ/(1−u)·(3/2·s₂·E[W²] + s₃·E[W] + s₄/4). W holds the whole residual work of the
    prompt in prefill, as in ``disagg.PrefillQueue``. (It replaced ``u·E[W]`` with an exponential
    tail, "the queue beyond one step": that left the TTFT p99 of lognormal prompts 10-19 % under
    the simulator's, scripts/agreement.py; with the full W: −8 % to +6 %.)
    """
    s1, s2, s3, s4 = service_moments(lens, service, slope) if moments is None else moments
    u = lam * s1
    stable = u < 1
    q = np.where(stable, lam / np.where(stable, 1.0 - u, 1.0), 0.0)
    m1 = q * s2 / 2.0
    m2 = 2.0 * m1 * m1 + q * s3 / 3.0
    m3 = q * (1.5 * s2 * m2 + s3 * m1 + s4 / 4.0)
    return m1, m2 - m1 * m1, m3 - 3.0 * m1 * m2 + 2.0 * m1**3, stable
