"""Analytic serving model of one replica under Poisson load, vectorised over configurations.

Scheduler (the one ``optimizer.simulate`` runs step by step): continuous batching; every
step decodes one token for each of the ``b`` running sequences and processes up to
``prefill_chunk_tokens`` prompt tokens FCFS (chunked prefill); a prompt's last chunk
emits the first token. Step time ``t(b, c, n, span)`` is ``optimizer.perf.decode_step_s``.

Mean behaviour (all arrays over the N configurations):

- ``D(b) = t(b, c̄, 0, 0)``: a decode-only step at mean context
  ``c̄ = E[L] + E[(O−1)·O]/(2·E[O−1])`` (time-weighted context of a running sequence).
- ``e(L) = Σ_chunks [t(b, c̄, n_j, s_j) − D(b)]``: extra step time a prompt of L tokens
  costs when its chunks ride alone; when ``m = λ·t̄`` prompts arrive per step they share
  steps, and the per-prompt cost ``ε`` blends ``E[e(L)]`` (weight ``e^{−m}``) with the
  full-step rate ``E[L]·e(n₊)/n₊``, ``n₊ = min(C, E[L]·(1 + m))``.
- Step time and running batch (Little's law), a fixed point solved by Newton's method:
  ``t̄ = D(b)/(1 − λ·ε)``, ``b = λ·E[O−1]·t̄``. No root (or ``λ·ε >= 1``, or a batch over
  the scheduler cap) = saturated. ``utilization = λ·(ε + E[O−1]·dD/db)`` (→ 1 at the
  compute limit).

Tails (per request; moments, then a shifted gamma with the Wilson–Hilferty tail, mixed
over quadrature nodes of the length distributions and inverted by bisection):

- **TPOT** of a request with O outputs lives ``W = (O−1)·t̄``: mean ``t̄`` plus the
  request-weighted bias ``Cov(b, T)/b̄`` (requests see steps in proportion to the batch),
  plus the prompts of the ``Poisson(λW)`` arrivals during its life (compound Poisson:
  variance ``λ·W·E[ε_L²]/(O−1)²``), the batch fluctuation of the M/G/∞ decode population
  averaged over W (``(dD/db)²·(2λ/W²)∫₀^W (W−τ)E[(S−τ)⁺]dτ``) and their covariance — all
  amplified by load feedback (a long step admits more arrivals, whose prefill and decode
  lengthen later steps: a self-exciting process with branching ratio ``λ·(ε + E[O−1]·dD/db)``,
  see ``_feedback``). The prefill share of TPOT is an average of per-step extras in
  ``[0, t(b, C) − D(b)]`` (a step carries at most one chunk), which bounds its variance.
- **TTFT** = residual of the step in progress (length-biased step durations, uniform
  residual; zero when the replica is idle, probability ``e^{−b}``) + prompts that join the
  same step + an M/G/1-type queue of prompt work at the full-chunk rate beyond one step
  (``E[W_q] = λE[S²]/2 · u/(1−u)``, ``u = λ·E[L]·t(b, C)/C``) + its own prefill steps
  + the front-end time ``request_overhead_s`` (tokenising, engine queueing, first-token
  detokenising/HTTP; a constant, calibrated on the online TTFT rows).
- **E2E** = TTFT + (O − 1)·TPOT (so the front-end time counts once in E2E too).
- **KV cache** (p99 occupancy, not the mean): resident tokens are an M/G/∞ shot noise
  over-dispersed by the same load feedback as the batch,
  ``mean = λ·(t̄ + bias)·E[Σ_j (L+j)] + λ·E[TTFT]·E[L]`` (decoding sequences at the
  request-weighted step ``t̄ + Cov(b, T)/b̄``, plus prompts waiting for or in prefill),
  ``var = F·λ·t̄·E[Σ_j (L+j)²]`` (j = 1..O−1) with ``F = A·I_c(v) = 1/((1 − u_p)(1 − g))``
  (``_feedback``: u_p = λ·ε, g = λ·(ε + E[O−1]·dD/db), capped at 0.98), p99 ≈ mean +
  2.326·sd; fits when p99 ≤ KV capacity and the batch ``b̄ + 2.326·√(F·b̄)`` is within the
  scheduler cap. F is 1.2-1.5 at 20 % load and 5-20 at 90 %; without it (F = 1, Poisson)
  the p99 was 13-30 % under the simulator's at 90 % load and memory-limited capacities
  5-10 % too high (the simulator preempted thousands of times at them).

Pure: no I/O, no printing. Times in seconds internally; ``_ms`` fields in results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import cached_property

import numpy as np

from catalog.errors import ModelError
from optimizer import perf
from optimizer.lengths import normal_ppf, quadrature_spread, quantile_tokens
from optimizer.params import CalibrationParams
from optimizer.perf import Configs
from workloads.spec import SLO, LengthDist

DEFAULT_PREFILL_CHUNK_TOKENS = 2048
Z99 = 2.326347874
QUAD_NODES = 12
NEWTON_ITERATIONS = 40
BISECTION_ITERATIONS = 40  # safeguarded regula falsi steps on ln λ (typically < 10)
CAPACITY_RTOL = 5e-4  # capacity bracket hi/lo − 1
QUANTILE_ITERATIONS = 24  # Illinois steps, safeguarded inside the component-quantile bracket
QUANTILE_RTOL = 1e-5
POISSON_K_MAX = 60  # largest count of prompts per step resolved (the Poisson tail folds into it)
MAX_EXPLICIT_CHUNKS = 4  # longer prefills: the rest at the 4th chunk's per-token cost
GRID_BLOCK_ELEMENTS = 1 << 15  # row-wise grids are evaluated by blocks of rows this large (256 KB arrays)
_LIMITS = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class LoadResult:
    """Latency percentiles (ms) and state of each configuration at one request rate (arrays (N,)).

    ``saturated`` configurations have no steady state (their latencies are ``inf``);
    ``kv_fits`` is False when the p99 KV occupancy exceeds the cache (requests would queue
    for memory or be preempted, which the percentiles here do not include).
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
    kv_capacity_tokens: np.ndarray
    kv_fits: np.ndarray
    output_tokens_per_s: np.ndarray  # λ·E[O]


@dataclass(frozen=True)
class Capacity:
    """Largest request rate per configuration at which every given p99 SLO holds and KV fits.

    ``limited_by[i]`` is ``'ttft'``, ``'tpot'``, ``'e2e'`` or ``'memory'`` (the limit that
    binds just above ``max_qps``), or ``'unservable'`` when even λ → 0 misses the SLO (then
    ``why[i]`` says which bound and by how much, and the p99 arrays hold the best
    achievable values). ``e2e_p99_ms`` (and ``at_capacity``'s E2E percentiles) are NaN
    unless E2E is one of the SLOs; ``serve_at_rate`` at ``max_qps`` gives them all. ``max_qps`` is 0 for unservable or unrunnable configurations.
    """

    max_qps: np.ndarray
    output_tokens_per_s: np.ndarray
    limited_by: list[str]
    why: list[str | None]
    ttft_p99_ms: np.ndarray
    tpot_p99_ms: np.ndarray
    e2e_p99_ms: np.ndarray
    at_capacity: LoadResult | None = field(default=None, repr=False)

    @classmethod
    def at(cls, at_cap: LoadResult, max_qps: np.ndarray, output_tokens_per_s: np.ndarray, limited_by: list[str],
           why: list[str | None]) -> Capacity:
        """A capacity whose p99s are those of ``at_cap``, the evaluation at ``max_qps``."""
        return cls(max_qps, output_tokens_per_s, limited_by, why, at_cap.ttft_p99_ms, at_cap.tpot_p99_ms,
                   at_cap.e2e_p99_ms, at_cap)


# ---------------------------------------------------------------------------------------
# Distributions as quadrature


@dataclass(frozen=True)
class _Lengths:
    l_nodes: np.ndarray  # prompt tokens, (QL,)
    l_w: np.ndarray
    o_nodes: np.ndarray  # output tokens, (QO,)
    o_w: np.ndarray
    l_var: np.ndarray  # variance of the prompt length inside each node's stratum, (QL,)
    o_var: np.ndarray  # same for the output length, (QO,)
    mean_l: float
    var_l: float  # Var(L) over the nodes, Σ w·(L − E[L])²
    mean_o1: float  # E[O − 1]
    mean_o: float
    ctx: float  # time-weighted mean context of a decoding sequence
    kv_tok_steps: float  # E[Σ_{j=1}^{O−1} (L + j)]
    kv_tok2_steps: float  # E[Σ_{j=1}^{O−1} (L + j)²]
    prompt_grids: dict[tuple[int, int], _PromptTokens] = field(default_factory=dict, repr=False,
                                                               compare=False)  # ``_prompt_tokens`` by (k_max, C)


def _lengths(prompt: LengthDist, output: LengthDist) -> _Lengths:
    ln, lw, lv = quadrature_spread(prompt, QUAD_NODES)
    on, ow, ov = quadrature_spread(output, QUAD_NODES)
    ln = np.maximum(ln, 1.0)
    on = np.maximum(on, 1.0)
    el = float(lw @ ln)
    n = np.maximum(on - 1.0, 0.0)  # decode steps per request
    eo1 = float(ow @ n)
    sum_j = n * (n + 1) / 2.0  # Σ j
    sum_j2 = n * (n + 1) * (2 * n + 1) / 6.0  # Σ j²
    el2 = float(lw @ ln**2)
    kv1 = float(ow @ (n * el + sum_j))
    kv2 = float(ow @ (n * el2 + 2 * el * sum_j + sum_j2))
    ctx = el + (float(ow @ (n * (n + 1))) / (2.0 * eo1) if eo1 > 0 else 0.0)
    var_l = float(lw @ (ln - el) ** 2)
    return _Lengths(ln, lw, on, ow, lv, ov, el, var_l, eo1, float(ow @ on), ctx, kv1, kv2)


# ---------------------------------------------------------------------------------------
# Step-time pieces


@dataclass(frozen=True)
class _PromptTokens:
    """The prefill tokens n a step can carry, as J columns: one prompt of each node length L
    (QL columns), then K = 2..k_max prompts of E[L] tokens; with what ``_steps`` and
    ``_chunked_extra_s`` need of them that does not depend on the configuration. Shapes (1, J)
    unless noted."""

    n_one: int  # QL: the first columns are one prompt each
    rest: np.ndarray  # tokens of the chunk that carries the remainder (more than C only in the last explicit one)
    n_step: np.ndarray  # its step size, min(rest, C)
    rest_span: np.ndarray  # its attention span
    # the distinct (n_step, rest_span) steps (1, U) and each column's among them (J,): long
    # prompts and large K all end in a full chunk at the same span, one step time for all
    step_tokens: np.ndarray
    step_span: np.ndarray
    step_of_column: np.ndarray
    full_span: np.ndarray  # (1, MAX_EXPLICIT_CHUNKS): full chunk j < last of one prompt, then of several
    before: np.ndarray  # (J,) column of the full chunks before the remainder, in ``_chunked_extra_s``'s table
    sd_tokens: np.ndarray  # (1, K − 1) √(K·Var(L))
    k_tokens: np.ndarray  # (1, K − 1) max(K·E[L], 1)


def _prompt_tokens(lens: _Lengths, k_max: int, chunk: int) -> _PromptTokens:
    """The :class:`_PromptTokens` for K up to ``k_max`` and chunks of C = ``chunk`` tokens (cached on ``lens``).

    Chunk j of one prompt attends to ``j·C + n_j/2`` tokens on average; chunks of several
    prompts to E[L]/2. The chunk carrying the remainder is ``min(⌊n/C⌋, MAX_EXPLICIT_CHUNKS − 1)``.
    """
    key = (k_max, chunk)
    if key not in lens.prompt_grids:
        last = MAX_EXPLICIT_CHUNKS - 1
        ks = np.arange(2, k_max + 1, dtype=float)
        n_tokens = np.concatenate([lens.l_nodes, ks * lens.mean_l])[None, :]
        single = np.arange(n_tokens.shape[1]) < len(lens.l_nodes)
        j_rest = np.clip(np.floor(n_tokens / chunk), 0.0, last)
        rest = n_tokens - j_rest * chunk
        n_step = np.minimum(rest, chunk)
        rest_span = np.where(single, j_rest * chunk + n_step / 2.0, lens.mean_l / 2.0)
        steps, step_of_column = np.unique(np.stack([n_step[0], rest_span[0]]), axis=1, return_inverse=True)
        lens.prompt_grids[key] = _PromptTokens(
            n_one=len(lens.l_nodes), rest=rest, n_step=n_step, rest_span=rest_span,
            step_tokens=steps[:1], step_span=steps[1:], step_of_column=step_of_column.ravel(),
            full_span=np.append(np.arange(last) * chunk + chunk / 2.0, lens.mean_l / 2.0)[None, :],
            before=j_rest[0].astype(np.int64) + np.where(single, 0, last + 1),
            sd_tokens=np.sqrt(ks * lens.var_l)[None, :], k_tokens=np.maximum(ks * lens.mean_l, 1.0)[None, :],
        )
    return lens.prompt_grids[key]


def _chunk_extra_s(t: np.ndarray, d: np.ndarray, n: np.ndarray, n_step: np.ndarray) -> np.ndarray:
    """(t − D)·n/n_step: the extra time of a step of n_step prefill tokens, charged for n tokens (0 if n <= 0)."""
    return np.where(n > 0, (t - d) * n / np.maximum(n_step, 1e-300), 0.0)


def _chunked_extra_s(c: Configs, b: np.ndarray, ctx: float, n: _PromptTokens, chunk: int,
                     d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """g(n) = Σ_chunks [t(b, c̄, n_j, span_j) − D(b)]: extra step time of the prefill tokens of
    each column of ``n`` (spans there); returns (N, QL) for one prompt, (N, K − 1) for several.

    The tokens go through ``ceil(n/C)`` steps of at most C tokens; beyond MAX_EXPLICIT_CHUNKS
    chunks the rest is charged at the last explicit chunk's per-token cost. Full chunks cost
    the same whatever n, so they are evaluated once per configuration, and only the chunk that
    carries the remainder once per distinct (size, span). Shapes: b, d (N, 1).
    """
    last = MAX_EXPLICIT_CHUNKS - 1
    full = _chunk_extra_s(perf.decode_step_s(c, b, ctx, float(chunk), n.full_span), d, float(chunk), float(chunk))
    zero = np.zeros((len(full), 1))
    before = np.concatenate([zero, np.cumsum(full[:, :last], axis=1),  # the full chunks before chunk j
                             zero, np.cumsum(np.repeat(full[:, last:], last, axis=1), axis=1)], axis=1)
    t_rest = perf.decode_step_s(c, b, ctx, n.step_tokens, n.step_span)[:, n.step_of_column]
    g = before[:, n.before] + _chunk_extra_s(t_rest, d, n.rest, n.n_step)
    return g[:, :n.n_one], g[:, n.n_one:]


_LOG_FACTORIAL = np.array([math.lgamma(k + 1.0) for k in range(POISSON_K_MAX + 1)])  # ln k!


def _poisson_pmf(m: np.ndarray, k_max: int) -> np.ndarray:
    """P(K = k), k = 0..k_max (<= POISSON_K_MAX), for K ~ Poisson(m) (N,) → (N, k_max + 1); the tail folds into k_max."""
    k = np.arange(k_max + 1, dtype=float)
    lg = _LOG_FACTORIAL[:k_max + 1]
    mm = np.maximum(m, 1e-300)[:, None]
    p = np.exp(-mm + k[None, :] * np.log(mm) - lg[None, :])
    p = np.where(m[:, None] > 0, p, (k[None, :] == 0).astype(float))
    p[:, -1] += np.clip(1.0 - p.sum(axis=1), 0.0, 1.0)
    return p


def _k_max(m: np.ndarray) -> int:
    top = float(np.max(np.where(np.isfinite(m), m, 0.0), initial=0.0))
    return int(min(POISSON_K_MAX, math.ceil(top + 6.0 * math.sqrt(top) + 4.0)))


def _int_power(x: np.ndarray, r: int) -> np.ndarray:
    """x^r for an integer r >= 1 by repeated products (numpy's ``**`` calls pow() beyond r = 2, several times slower)."""
    out = x
    for _ in range(r - 1):
        out = out * x
    return out


@dataclass
class _Steps:
    """Distribution of one step's duration ``T = D(b) + g(K prompts)``, K ~ Poisson(m): as a
    table of values (N, J) with probabilities (N, J), built on first use (the mean needs none)."""

    d: np.ndarray  # decode-only step D(b), (N,)
    pk: np.ndarray  # P(K = k), (N, k_max + 1)
    l_w: np.ndarray  # (QL,) weights of the prompt-length nodes
    g1: np.ndarray  # (N, QL) extra of one prompt of each node length, alone
    gk: np.ndarray  # (N, k_max − 1) extra of K = 2..k_max prompts: the mean of two points, gk_lo and 2·g_K − gk_lo
    gk_lo: np.ndarray
    _moments: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @cached_property
    def values(self) -> np.ndarray:
        d = self.d[:, None]
        return np.concatenate([d, d + self.g1, d + self.gk_lo, d + (self.gk + (self.gk - self.gk_lo))], axis=1)

    @cached_property
    def probs(self) -> np.ndarray:
        half = self.pk[:, 2:] / 2.0
        return np.concatenate([self.pk[:, :1], self.pk[:, 1:2] * self.l_w[None, :], half, half], axis=1)

    def moment(self, r: int) -> np.ndarray:
        """E[T^r] (N,), computed once per r; E[T] = D + P(K=1)·E[g1] + Σ_K P(K)·g_K without the table."""
        if r not in self._moments:
            if r == 1:
                self._moments[r] = (self.d + self.pk[:, 1] * (self.g1 @ self.l_w)
                                    + np.sum(self.pk[:, 2:] * self.gk, axis=1))
            else:
                self._moments[r] = np.sum(self.probs * _int_power(self.values, r), axis=1)
        return self._moments[r]


def _steps(c: Configs, b: np.ndarray, m: np.ndarray, lens: _Lengths, chunk: int) -> _Steps:
    """Step durations when K ~ Poisson(m) prompts (those that arrived during the previous
    step) ride in it: ``T = D(b) + g(K prompts)``; K = 1 resolves the prompt length by
    quadrature, K >= 2 uses K·E[L] tokens."""
    bb = b[:, None]
    d = perf.decode_step_s(c, bb, lens.ctx)
    k_max = max(_k_max(m), 1)
    pk = _poisson_pmf(m, k_max)
    n = _prompt_tokens(lens, k_max, chunk)
    g1, gk = _chunked_extra_s(c, bb, lens.ctx, n, chunk, d)
    # K >= 2: the sum of K prompts has variance K·Var(L); spread it over two points ±sd
    # (at the local per-token cost g_K / (K·E[L])) so the step variance keeps it.
    spread = n.sd_tokens * gk / n.k_tokens
    return _Steps(d[:, 0], pk, lens.l_w, g1, gk, np.maximum(gk - spread, 0.0))


@dataclass
class _State:
    b: np.ndarray  # mean running batch (N,)
    step_s: np.ndarray  # t̄ = E[T]
    steps: _Steps
    slope_s: np.ndarray  # dD/db
    eps_s: np.ndarray  # mean extra step time per prompt, (E[T] − D)/m
    rho1: np.ndarray  # lag-1 correlation of step durations, λ·dE[T]/dm
    t_full_s: np.ndarray  # t(b, C) a full prefill step
    saturated: np.ndarray


def _solve_state(c: Configs, lam: np.ndarray, lens: _Lengths, chunk: int, t0: np.ndarray | None = None) -> _State:
    """Smallest root of h(t) = E[T | b = λ·E[O−1]·t, m = λ·t] − t by Newton's method from below.

    h(D(0)) > 0 and h is near-convex, so Newton from the left approaches the stable
    (smaller) root (an overshoot is corrected by a step back); no root (h' >= 0 while h > 0)
    or a batch over the scheduler cap means saturated.
    """
    n = len(c)
    cap = float(c.max_batch_sequences)
    zero = np.zeros(n)
    t = perf.decode_step_s(c, zero, lens.ctx) if t0 is None else np.asarray(t0, dtype=float).copy()
    t = np.where(np.isfinite(t), t, perf.decode_step_s(c, zero, lens.ctx))
    saturated = ~np.isfinite(t)

    def h(cs, lv, tv):
        b = np.minimum(lv * lens.mean_o1 * tv, cap)
        return _steps(cs, b, lv * tv, lens, chunk).moment(1) - tv

    done = saturated.copy()
    for _ in range(NEWTON_ITERATIONS):  # only the rows still moving
        rows = np.flatnonzero(~done)
        if not len(rows):
            break
        cs = c if len(rows) == n else c.take(rows)
        lv, tv = lam[rows], t[rows]
        hv = h(cs, lv, tv)
        dt = np.maximum(1e-9, 1e-4 * tv)
        dh = (h(cs, lv, tv + dt) - hv) / dt
        sat = ((dh >= 0) & (hv > 1e-12 * tv)) | ~np.isfinite(hv)
        # h is not convex everywhere (the max() in the step time): a step past the root
        # comes back with the next (negative) move
        move = np.where(sat, 0.0, -hv / np.where(dh < 0, dh, -1.0))
        t[rows] = np.maximum(tv + move, 0.5 * tv)
        sat |= lv * lens.mean_o1 * t[rows] > cap
        saturated[rows] |= sat
        done[rows] = sat | (np.abs(move) <= 1e-7 * tv)
    b = np.minimum(lam * lens.mean_o1 * t, cap)
    m = lam * t
    st = _steps(c, b, m, lens, chunk)
    mean_t = st.moment(1)
    dm = np.maximum(1e-3, 0.01 * m)
    slope_m = (_steps(c, b, m + dm, lens, chunk).moment(1) - mean_t) / dm
    rho1 = np.clip(lam * slope_m, 0.0, 0.95)
    eps = np.where(m > 0, (mean_t - st.d) / np.maximum(m, 1e-300), st.g1 @ lens.l_w)
    slope = perf.decode_step_s(c, b + 1.0, lens.ctx) - st.d
    t_full = perf.decode_step_s(c, b, lens.ctx, float(chunk), chunk / 2.0)
    t = np.where(saturated, np.inf, mean_t)
    return _State(b, t, st, slope, eps, rho1, t_full, saturated)


# ---------------------------------------------------------------------------------------
# Shifted-gamma tails and mixture quantiles


def _std_normal_sf(z: np.ndarray) -> np.ndarray:
    """1 − Φ(z) (Abramowitz–Stegun 7.1.26 erfc, |error| < 1.5e-7)."""
    x = np.minimum(np.abs(z), 60.0) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erfc = poly * np.exp(-x * x)
    return np.where(z >= 0, 0.5 * erfc, 1.0 - 0.5 * erfc)


@dataclass(frozen=True)
class _Shape:
    """Per-component constants of the shifted gamma (or normal) fitted to (mean, var, κ3)."""

    mean: np.ndarray
    sd: np.ndarray
    skewed: np.ndarray
    scale: np.ndarray  # k·θ, k = 4/γ² the gamma shape
    shift: np.ndarray  # mean − k·θ
    inv_9k: np.ndarray  # 1/(9k) and √k, of the Wilson–Hilferty transform
    sqrt_k: np.ndarray

    @property
    def all_skewed(self) -> bool:
        return bool(self.skewed.all())

    def take(self, rows: np.ndarray) -> _Shape:
        return _Shape(*(getattr(self, f.name)[rows] for f in fields(self)))


def _shape(mean: np.ndarray, var: np.ndarray, k3: np.ndarray) -> _Shape:
    """Shifted gamma with shape k = 4/γ², scale θ = κ3/(2·var), shift mean − kθ (γ = κ3/sd³);
    normal when the skewness is ~0 (γ <= 1e-3)."""
    sd = np.sqrt(np.maximum(var, 0.0))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        gamma = np.where(sd > 0, k3 / np.maximum(sd, 1e-300) ** 3, 0.0)
    gamma = np.nan_to_num(gamma, nan=0.0, posinf=0.0)
    skewed = gamma > 1e-3
    g = np.where(skewed, gamma, 1.0)
    k = 4.0 / (g * g)
    scale = np.maximum(k * sd * g / 2.0, 1e-300)
    return _Shape(mean, sd, skewed, scale, mean - k * sd * g / 2.0, 1.0 / (9.0 * k), np.sqrt(k))


def _shape_sf(x: np.ndarray, sh: _Shape) -> np.ndarray:
    """P(X > x): Wilson–Hilferty ``1 − Φ(((y/kθ)^{1/3} − 1 + 1/(9k))·3√k)``, y = x − shift
    (1 for y <= 0); normal ``1 − Φ((x − mean)/sd)`` where unskewed."""
    y = (x - sh.shift) / sh.scale
    z_gamma = (np.cbrt(np.maximum(y, 0.0)) - 1.0 + sh.inv_9k) * 3.0 * sh.sqrt_k
    if sh.all_skewed:
        return np.where(y <= 0, 1.0, _std_normal_sf(z_gamma))
    z_norm = (x - sh.mean) / np.maximum(sh.sd, 1e-300)
    p = _std_normal_sf(np.where(sh.skewed, z_gamma, z_norm))
    p_gamma = np.where(y <= 0, 1.0, p)
    p_norm = np.where(sh.sd > 0, p, (x < sh.mean).astype(float))
    return np.where(sh.skewed, p_gamma, p_norm)


def _shape_quantile(q: float, sh: _Shape) -> np.ndarray:
    """Inverse of ``_shape_sf`` at 1 − q: ``shift + kθ·(z_q/(3√k) + 1 − 1/(9k))³`` or ``mean + z_q·sd``."""
    z = float(normal_ppf(q))
    base = z / (3.0 * sh.sqrt_k) + 1.0 - sh.inv_9k
    x_gamma = sh.shift + sh.scale * _int_power(np.maximum(base, 0.0), 3)
    return np.where(sh.skewed, x_gamma, sh.mean + z * sh.sd)


def _tail(x: np.ndarray, mean: np.ndarray, var: np.ndarray, k3: np.ndarray) -> np.ndarray:
    """P(X > x) for X with the given mean, variance and third cumulant (see ``_shape``)."""
    return _shape_sf(x, _shape(mean, var, k3))


def _mixture_quantile(q: float, weights: np.ndarray, mean, var, k3) -> np.ndarray:
    """x with Σ_j w_j·P(X_j > x) = 1 − q; components on the last axis of (N, J) arrays.

    The root lies between the smallest and largest component quantile (components with
    weight > 0). It is found there by the Illinois variant of regula falsi on
    ``ln P(X > x) − ln(1 − q)`` (near-linear in x for gamma-like tails), row by row until
    the bracket is within QUANTILE_RTOL of the value or the tail within 0.1 % of 1 − q.
    """
    mean, var, k3 = np.broadcast_arrays(mean, var, k3)
    finite = np.all(np.isfinite(mean), axis=-1)
    ok = np.isfinite(mean)
    sh = _shape(np.where(ok, mean, 0.0), np.where(ok, var, 0.0), np.where(ok, k3, 0.0))
    xq = _shape_quantile(q, sh)
    used = np.broadcast_to(np.asarray(weights) > 0, xq.shape)
    lo = np.min(np.where(used, xq, np.inf), axis=-1)
    hi = np.max(np.where(used, xq, -np.inf), axis=-1)
    log_target = math.log(1.0 - q)

    def f(x, rows):  # decreasing in x
        sub = sh if len(rows) == len(lo) else sh.take(rows)
        return np.log(np.maximum(_shape_sf(x[:, None], sub) @ weights, 1e-300)) - log_target

    every = np.arange(len(lo))
    # the bracket is exact only up to rounding of the inverse: widen where it left the root out
    span = np.maximum(hi - lo, 1e-9 * np.maximum(np.abs(hi), 1e-12))
    lo, hi = lo - 1e-6 * span, hi + 1e-6 * span
    f_lo, f_hi = f(lo, every), f(hi, every)
    lo, f_lo = np.where(f_lo < 0, lo - span, lo), np.where(f_lo < 0, f(lo - span, every), f_lo)
    hi, f_hi = np.where(f_hi > 0, hi + span, hi), np.where(f_hi > 0, f(hi + span, every), f_hi)
    side = np.zeros(lo.shape)
    for _ in range(QUANTILE_ITERATIONS):
        width = hi - lo
        done = ((width <= QUANTILE_RTOL * np.maximum(np.abs(hi), 1e-12))
                | (np.minimum(-f_hi, f_lo) <= 1e-3) | ~finite)
        rows = np.flatnonzero(~done)
        if not len(rows):
            break
        a, b, fa, fb = lo[rows], hi[rows], f_lo[rows], f_hi[rows]
        denom = fa - fb
        x = np.where(denom > 0, a + (b - a) * fa / np.where(denom > 0, denom, 1.0), 0.5 * (a + b))
        x = np.clip(x, a + 1e-4 * (b - a), b - 1e-4 * (b - a))
        fx = f(x, rows)
        right = fx > 0  # root above x
        s_ = side[rows]
        lo[rows] = np.where(right, x, a)
        hi[rows] = np.where(right, b, x)
        # Illinois: halve the stale end's value when the same end is kept twice
        f_hi[rows] = np.where(right, np.where(s_ > 0, fb / 2.0, fb), fx)
        f_lo[rows] = np.where(right, fx, np.where(s_ < 0, fa / 2.0, fa))
        side[rows] = np.where(right, 1.0, -1.0)
    x = np.where(np.abs(f_lo) < np.abs(f_hi), lo, hi)
    return np.where(finite, x, np.inf)


# ---------------------------------------------------------------------------------------
# Public API


def _check_rate(qps) -> np.ndarray:
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
) -> LoadResult:
    """Latencies and state of every configuration at ``qps`` requests/s (scalar or (N,)).

    See the module docstring for the formulas. ``params`` is accepted for symmetry with
    the perf model (its factors are already folded into ``c``).
    """
    lam = np.broadcast_to(_check_rate(qps), (len(c),)).astype(float)
    lens = _lengths(prompt, output)
    return _evaluate(c, lam, lens, prefill_chunk_tokens, need=set(_LIMITS) if percentiles else set())


def _take_state(s: _State, rows: np.ndarray) -> _State:
    """The state of the configurations at ``rows``."""
    st = s.steps
    steps = _Steps(st.d[rows], st.pk[rows], st.l_w, st.g1[rows], st.gk[rows], st.gk_lo[rows])
    return _State(s.b[rows], s.step_s[rows], steps, s.slope_s[rows], s.eps_s[rows], s.rho1[rows],
                  s.t_full_s[rows], s.saturated[rows])


def _evaluate(c: Configs, lam: np.ndarray, lens: _Lengths, chunk: int, need: set[str],
              t0: np.ndarray | None = None, p50: bool = True, state: _State | None = None) -> LoadResult:
    runnable = np.asarray(c.supported, dtype=bool)
    s = _solve_state(c, lam, lens, chunk, t0) if state is None else state
    sat = s.saturated | ~runnable
    tbar = np.where(sat, np.nan, s.step_s)
    o1 = np.maximum(lens.o_nodes - 1.0, 0.0)  # (QO,) decode steps of a request

    # ---- TPOT | O = mean of O−1 step durations + batch drift over W, with load feedback
    m1, m2, m3 = (s.steps.moment(r) for r in (1, 2, 3))
    var_t = np.maximum(m2 - m1**2, 0.0)
    k3_t = m3 - 3 * m1 * m2 + 2 * m1**3
    d_tag = perf.decode_step_s(c, s.b + 1.0, lens.ctx)
    fb = _feedback(lam, s, lens)
    # request-weighted mean step E[b·T]/E[b] = t̄ + Cov(b, T)/b̄, Little's law shift included
    mean_tpot = m1 + np.where(sat, 0.0, fb.bias_s)
    steps_n = np.maximum(o1, 1.0)[None, :]
    window = o1[None, :] * tbar[:, None]  # (N, QO)
    var_b = _batch_average_var(lam, tbar, window, o1, lens.o_w)
    var_pref = (var_t * fb.prefill_factor)[:, None] / steps_n + fb.cross_var_s2[:, None]
    # prefill share Y = TPOT − D(b+1) is a per-step average in [0, e_full]: Var ≤ Ȳ·(e_full − Ȳ)
    y_bar = np.maximum(mean_tpot - d_tag, 0.0)
    bound = y_bar * np.maximum(s.t_full_s - s.steps.d - y_bar, 0.0)
    shrink = np.minimum(1.0, bound[:, None] / np.maximum(var_pref, 1e-300))
    var_tpot = var_pref * shrink + (s.slope_s[:, None] ** 2) * var_b * fb.batch_factor[:, None]
    k3_tpot = (k3_t * fb.prefill_factor**1.5)[:, None] / steps_n**2 * shrink**1.5
    has_tpot = o1 >= 0.5
    w_tpot = np.where(has_tpot, lens.o_w, 0.0)
    w_tpot = w_tpot / w_tpot.sum() if w_tpot.sum() > 0 else w_tpot
    mt = np.broadcast_to(mean_tpot[:, None], var_tpot.shape)

    # ---- TTFT | L
    ttft_m, ttft_v, ttft_k3 = _ttft_moments(c, lam, lens, s, chunk)

    nan = np.full(len(c), np.nan)
    out = {k: nan.copy() for k in ("tpot_p50", "tpot_p99", "ttft_p50", "ttft_p99", "e2e_p50", "e2e_p99")}
    if "tpot" in need and w_tpot.sum() > 0:
        out["tpot_p99"] = _mixture_quantile(0.99, w_tpot, mt, var_tpot, k3_tpot)
        if p50:
            out["tpot_p50"] = _mixture_quantile(0.50, w_tpot, mt, var_tpot, k3_tpot)
    if "ttft" in need:
        out["ttft_p99"] = _mixture_quantile(0.99, lens.l_w, ttft_m, ttft_v, ttft_k3)
        if p50:
            out["ttft_p50"] = _mixture_quantile(0.50, lens.l_w, ttft_m, ttft_v, ttft_k3)
    if "e2e" in need:
        # components (L node, O node): TTFT(L) + (O−1)·TPOT(O), independent
        ql, qo = len(lens.l_w), len(lens.o_w)
        m = ttft_m[:, :, None] + o1[None, None, :] * mt[:, None, :]
        v = (ttft_v[:, :, None] + (o1**2)[None, None, :] * var_tpot[:, None, :]
             + (mt**2 * lens.o_var[None, :])[:, None, :])  # output length spread inside a stratum
        k3 = ttft_k3[:, :, None] + (o1**3)[None, None, :] * k3_tpot[:, None, :]
        w = (lens.l_w[:, None] * lens.o_w[None, :]).reshape(ql * qo)
        n = len(c)
        out["e2e_p99"] = _mixture_quantile(0.99, w, m.reshape(n, -1), v.reshape(n, -1), k3.reshape(n, -1))
        if p50:
            out["e2e_p50"] = _mixture_quantile(0.50, w, m.reshape(n, -1), v.reshape(n, -1), k3.reshape(n, -1))
    ttft_mean = ttft_m @ lens.l_w
    e2e_mean = ttft_mean + lens.mean_o1 * mean_tpot

    # ---- KV occupancy (M/G/∞ shot noise, over-dispersed by load feedback) and utilisation
    life = tbar + np.where(sat, 0.0, fb.bias_s)  # request-weighted step: a sequence's time per decode step
    kv_mean = lam * life * lens.kv_tok_steps + lam * ttft_mean * lens.mean_l
    kv_sd = np.sqrt(lam * tbar * lens.kv_tok2_steps * fb.occupancy_factor)
    kv_p99 = kv_mean + Z99 * kv_sd
    b_p99 = s.b + Z99 * np.sqrt(s.b * fb.occupancy_factor)
    kv_cap = np.asarray(c.kv_capacity_tokens, dtype=float)
    kv_fits = (kv_p99 <= kv_cap) & (b_p99 <= c.max_batch_sequences) & ~sat
    util = lam * (s.eps_s + lens.mean_o1 * s.slope_s)
    util = np.where(sat, np.maximum(util, 1.0), util)

    def ms(x):
        return np.where(sat, np.inf, x * 1e3)

    return LoadResult(
        qps=lam,
        ttft_mean_ms=ms(ttft_mean), ttft_p50_ms=ms(out["ttft_p50"]), ttft_p99_ms=ms(out["ttft_p99"]),
        tpot_mean_ms=ms(mean_tpot), tpot_p50_ms=ms(out["tpot_p50"]), tpot_p99_ms=ms(out["tpot_p99"]),
        e2e_mean_ms=ms(e2e_mean), e2e_p50_ms=ms(out["e2e_p50"]), e2e_p99_ms=ms(out["e2e_p99"]),
        utilization=util, saturated=sat, running_batch=s.b, step_ms=ms(tbar),
        kv_p99_tokens=np.where(sat, np.inf, kv_p99), kv_capacity_tokens=kv_cap, kv_fits=kv_fits,
        output_tokens_per_s=np.where(sat, np.nan, lam * lens.mean_o),
    )


# Window integrals of the linear load-feedback model (see ``_feedback``), as functions of the
# decode gain v: I_a(v) = (1/2π)∫ K(θ)²/|1 − v·K₁(θ)|² dθ, I_b(v) = (1/2π)∫ K(θ)·Re K₁(θ)/|1 − v·K₁(θ)|² dθ
# with K₁(θ) = (1 − e^{−iθ})/(iθ) (a boxcar of one lifetime, θ = ω·steps) and K = |K₁|². Both are
# tabulated as 1/(1 − v) − Δ(v) (I_c(v) = (1/2π)∫ K/|1 − vK₁|² = 1/(1 − v) exactly), Δ by
# quadrature on θ ∈ [0, 6000] with dθ = 1e-3 (tests/test_serving.py re-checks three points).
# Exact ends: I_a(0) = 2/3, I_b(0) = 1/2.
_FEEDBACK_V = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98])
_DELTA_A = np.array([1 / 3, 0.3417, 0.3505, 0.3598, 0.3694, 0.3794, 0.3899, 0.4008, 0.4064, 0.4122,
                     0.4180, 0.4240, 0.4302, 0.4340])
_DELTA_B = np.array([0.5, 0.5170, 0.5349, 0.5539, 0.5738, 0.5947, 0.6169, 0.6402, 0.6523, 0.6648,
                     0.6776, 0.6908, 0.7043, 0.7126])
_MAX_GAIN = 0.98


def feedback_integrals(v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(I_a, I_b, I_c) of the load-feedback model at decode gain ``v`` in [0, 0.98] (see the table above)."""
    v = np.clip(np.asarray(v, dtype=float), 0.0, _MAX_GAIN)
    ic = 1.0 / (1.0 - v)
    return ic - np.interp(v, _FEEDBACK_V, _DELTA_A), ic - np.interp(v, _FEEDBACK_V, _DELTA_B), ic


@dataclass(frozen=True)
class _Feedback:
    """Load-feedback factors of the TPOT moments (arrays (N,))."""

    bias_s: np.ndarray  # request-weighted mean TPOT − t̄
    prefill_factor: np.ndarray  # long-window variance factor of the per-step prefill noise
    batch_factor: np.ndarray  # factor on the M/G/∞ batch-average variance
    cross_var_s2: np.ndarray  # covariance of prefill noise and batch drift (s²)
    occupancy_factor: np.ndarray  # Var / Poisson variance of the instantaneous batch and KV occupancy


def _feedback(lam: np.ndarray, s: _State, lens: _Lengths) -> _Feedback:
    """Load feedback: a longer step admits more arrivals, which make later steps longer.

    Linearised in the step clock, arrivals per step are ``a_k = ξ_k + λ·δT_k`` (ξ Poisson,
    variance λ·t̄) and the step time is ``δT_k = s·δb_k + ε·a_{k−1}`` with the batch
    ``δb_k = Σ_{m=1..n} a_{k−m}`` (n = E[O−1] steps of decoding, s = dD/db, ε = ∂E[T]/∂m the
    marginal prefill cost of one prompt). That is a self-exciting (Hawkes) process with
    branching ratio ``u_p + u_d``, ``u_p = λ·ε`` (``rho1``) and ``u_d = λ·n·s``: each request's
    own prefill and decode time lets ``u_p + u_d`` further requests in, which do the same.
    In the frequency domain (θ = ω·n) the gain is ``u_p + u_d·K₁(θ)``, so fluctuations slower
    than one lifetime are amplified by ``1/|1 − u_p − u_d·K₁|²``. Averaging over a request's
    n steps (window |K₁|² = K) gives, with ``v = u_d/(1 − u_p)`` and ``A = 1/(1 − u_p)²``:

    - batch drift: M/G/∞ variance × ``A·I_a(v)/I_a(0)``;
    - prefill noise: ``Var(T)/n × A·I_c(v)`` (was the lag-1 factor (1 + ρ₁)/(1 − ρ₁));
    - cross term (the same arrivals are prefilled in and then decode during the window):
      ``2·λ·t̄·s·ε·A·I_b(v)``;
    - mean: requests see steps weighted by the batch, ``E[bT]/E[b] = t̄ + Cov(b, T)/b̄`` with
      ``Cov(b, T)/b̄ = A·(s·I_c(v) + ε/n·(I_c(v) − 1/2)) − ε/(2n)``; the larger batch this
      implies lengthens t̄ itself by ``u_d/(1 − g)`` of it (linear response of the fixed
      point, g = u_p + u_d), so the shift is ``bias·(1 − u_p)/(1 − g)``.

    - instantaneous batch and KV occupancy (a boxcar of one lifetime, unaveraged): variance
      × ``A·I_c(v) = 1/((1 − u_p)(1 − g))`` (``occupancy_factor``). Against the simulator
      (scripts/agreement.py) this matches the batch variance to ~15 % up to 70 % load; at
      90 % with a large prefill share (u_p > 0.5) it overstates it up to 2× (the linear
      response ignores that the prefill queue and the chunk budget cap a step's extra), so
      the KV p99 there errs high (conservative).

    At u_p = u_d = 0 this is the old model plus the cross term and ``s`` (the tagged request
    in its own batch). g is capped at 0.98.
    """
    n = max(lens.mean_o1, 1.0)
    up = np.clip(s.rho1, 0.0, 0.95)
    slope = np.maximum(s.slope_s, 0.0)
    eps = np.maximum(s.eps_s, 0.0)
    ud = lam * lens.mean_o1 * slope
    g = np.minimum(up + ud, _MAX_GAIN)
    ia, ib, ic = feedback_integrals(ud / (1.0 - up))
    amp = 1.0 / (1.0 - up) ** 2
    cov = amp * (slope * ic + eps / n * (ic - 0.5)) - eps / (2.0 * n)
    tbar = np.where(np.isfinite(s.step_s), s.step_s, 0.0)
    return _Feedback(
        bias_s=cov * (1.0 - up) / (1.0 - g),
        prefill_factor=amp * ic,
        batch_factor=amp * ia / (2.0 / 3.0),
        cross_var_s2=2.0 * lam * tbar * slope * eps * amp * ib,
        occupancy_factor=amp * ic,
    )


def _batch_average_var(lam, tbar, window, o1, o_w) -> np.ndarray:
    """Variance of the M/G/∞ population averaged over a window W (per config, per O node).

    ``(2λ/W²)·Σ_q w_q·I(s_q, W)`` with service ``s_q = (O_q−1)·t̄`` and
    ``I = W²s/2 − W³/6`` (s >= W) or ``W·s²/2 − s³/6`` (s < W).
    """
    s = o1[None, None, :] * tbar[:, None, None]  # (N, 1, QO') others' service
    w = window[:, :, None]  # (N, QO, 1)
    big = w * w * s / 2.0 - w * w * w / 6.0
    small = w * s * s / 2.0 - s * s * s / 6.0
    integral = np.where(s >= w, big, small) @ o_w  # (N, QO)
    with np.errstate(invalid="ignore", divide="ignore"):
        v = 2.0 * lam[:, None] * integral / np.maximum(window, 1e-300) ** 2
    return np.where(window > 0, v, 0.0)


def _prompt_chunks_extra_s(c: Configs, b: np.ndarray, ctx: float, n_tok: np.ndarray, prompt_tokens: np.ndarray,
                           chunk: int, d: np.ndarray) -> np.ndarray:
    """Σ_chunks [t(b, c̄, n_j, min(j·C + n_j/2, L)) − D(b)] for ``n_tok`` tokens cut into chunks of C.

    ``n_tok = K·C + r``: K full chunks and a partial one of r tokens. Full chunk k attends to
    ``min(k·C + C/2, L)``, which is L from ``k_L = ceil((L − C/2)/C)`` on, so the K full
    chunks cost a cumulative sum over k < k_max (k_max = max k_L) plus (K − k_max)⁺ times
    the chunk at span L: two step-time evaluations instead of one per chunk.
    Shapes: b, d (N, 1, 1); n_tok (1, QL, J); prompt_tokens (1, QL, 1).
    """
    full = np.floor(n_tok / chunk)
    rem = n_tok - full * chunk
    k_max = max(int(math.ceil(float(np.max(prompt_tokens - chunk / 2.0)) / chunk)), 0)
    k = np.arange(k_max + 1, dtype=float)[None, None, :]
    per_chunk = perf.decode_step_s(c, b, ctx, float(chunk), np.minimum(k * chunk + chunk / 2.0, prompt_tokens)) - d
    cum = np.concatenate([np.zeros(per_chunk.shape[:-1] + (1,)), np.cumsum(per_chunk, axis=-1)], axis=-1)
    idx = np.minimum(full, k_max + 1).astype(np.int64)
    idx = np.broadcast_to(idx, np.broadcast_shapes(idx.shape, cum.shape[:-1] + (1,)))
    cum = np.broadcast_to(cum, idx.shape[:-1] + cum.shape[-1:])
    total = np.take_along_axis(cum, idx, axis=-1) + np.maximum(full - k_max - 1, 0.0) * per_chunk[..., -1:]
    partial = perf.decode_step_s(c, b, ctx, rem, np.minimum(full * chunk + rem / 2.0, prompt_tokens)) - d
    return total + np.where(rem > 0, partial, 0.0)


def _row_blocks(n: int, elements_per_row: int):
    """Slices of the rows of an (n, ...) array, each of at most GRID_BLOCK_ELEMENTS elements
    (at least one row). Row-wise computations on large grids go by blocks: the temporaries
    stay in cache and out of fresh memory pages, and the result is that of one pass."""
    step = max(1, GRID_BLOCK_ELEMENTS // max(elements_per_row, 1))
    for start in range(0, n, step):
        yield slice(start, min(start + step, n))


def _carrying_step_sums(c: Configs, s: _State, lens: _Lengths, chunk: int, mj: np.ndarray):
    """E[own], E[own²], E[own³] and E[own·(J − m_J)] (each (N, QL)) of the time ``own`` of the
    step(s) that carry a prompt of each node length L with J ~ Poisson(m_J) others:
    ``own = ceil(n/C)·D(b) + g(n)``, n = L + J·E[L] (``_prompt_chunks_extra_s``).

    The (N, QL, J) grid is the largest array of the serving model; it is evaluated by
    ``_row_blocks`` of the rows in order of m_J, each block with J up to its own ``_k_max``
    (the Poisson tail beyond folds into it, as for all the rows at once).
    """
    n = len(c)
    order = np.argsort(mj, kind="stable")
    sums = np.empty((4, n, len(lens.l_nodes)))
    for block in _row_blocks(n, len(lens.l_nodes) * (_k_max(mj) + 1)):
        rows = order[block]
        m = mj[rows]
        j_max = _k_max(m)
        pj3 = _poisson_pmf(m, j_max)[:, None, :]  # (rows, 1, J)
        j = np.arange(j_max + 1)
        n_tok = lens.l_nodes[None, :, None] + j[None, None, :] * lens.mean_l  # (1, QL, J)
        b3 = s.b[rows, None, None]
        d3 = s.steps.d[rows, None, None]
        g = _prompt_chunks_extra_s(c.take(rows), b3, lens.ctx, n_tok, lens.l_nodes[None, :, None], chunk, d3)
        own = np.ceil(n_tok / chunk) * d3 + g  # (rows, QL, J)
        p_own = pj3 * own
        sums[0, rows] = np.sum(p_own, axis=2)
        own2 = own * own
        sums[1, rows] = np.sum(pj3 * own2, axis=2)
        sums[2, rows] = np.sum(pj3 * own2 * own, axis=2)
        sums[3, rows] = np.sum(p_own * (j[None, None, :] - m[:, None, None]), axis=2)
    return sums[0], sums[1], sums[2], sums[3]


def _ttft_moments(c: Configs, lam: np.ndarray, lens: _Lengths, s: _State, chunk: int):
    """Mean, variance, third cumulant of TTFT for each prompt node (N, QL).

    TTFT = R + T_next + W_q: the residual R of the step in progress (length-biased, uniform
    inside the step; 0 when the replica is idle), the step(s) that carry the prompt with
    J ~ Poisson(λ·E[T²]/E[T]) other prompts that arrived during the same step, and the
    M/G/1 queue of prompt work beyond one step at the full-chunk rate.
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
    o1, o2, o3, o_j = _carrying_step_sums(c, s, lens, chunk, mj)
    var_o = np.maximum(o2 - o1**2, 0.0)
    k3_o = o3 - 3 * o1 * o2 + 2 * o1**3
    # R and J grow together with the length of the step in progress: Cov(R, own) ≈ λ/2·Var_lb(T)·ε_J
    var_lb = mom[2] / mom[0] - lb_mean**2
    eps_j = o_j / np.maximum(mj, 1e-12)[:, None]
    cov = busy[:, None] * lam[:, None] / 2.0 * var_lb[:, None] * np.where(mj[:, None] > 0, eps_j, 0.0)
    # queue of prompt work beyond one step: M/G/1 at the full-chunk rate, excess over one residual
    sec_per_token = s.t_full_s / chunk
    u = lam * lens.mean_l * sec_per_token
    es2 = float(lens.l_w @ lens.l_nodes**2) * sec_per_token**2
    stable = u < 1
    wq_mean = np.where(stable, lam * es2 / 2.0 * u / np.where(stable, 1.0 - u, 1.0), 0.0)
    p_w = np.clip(u * u, 1e-12, 1.0)
    theta = wq_mean / p_w
    w1 = p_w * theta
    w2 = 2 * p_w * theta**2 - w1**2
    w3 = 6 * p_w * theta**3 - 6 * p_w * theta**2 * w1 + 2 * w1**3
    mean = o1 + (r1 + w1)[:, None] + c.request_overhead_s  # + the per-request front-end time
    # the prompt length spread inside each stratum, at the full-chunk cost per token
    var = var_o + (var_r + w2)[:, None] + 2.0 * cov + (sec_per_token**2)[:, None] * lens.l_var[None, :]
    k3 = k3_o + (k3_r + w3)[:, None]
    unstable = ~stable[:, None] | s.saturated[:, None]
    return np.where(unstable, np.inf, mean), np.where(unstable, 0.0, var), np.where(unstable, 0.0, k3)


def _slo_targets(slo: SLO) -> dict[str, float]:
    return {k: getattr(slo, f"{k}_p99_ms") for k in _LIMITS if getattr(slo, f"{k}_p99_ms") is not None}


def capacity_at_slo(
    c: Configs,
    prompt: LengthDist,
    output: LengthDist,
    slo: SLO,
    params: CalibrationParams | None = None,
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
) -> Capacity:
    """Max request rate (req/s) per configuration with every p99 in ``slo`` met and KV at p99 fitting.

    Feasible(λ) = not saturated ∧ KV fits ∧ every given p99 ≤ its target, assumed monotone
    in λ; its margin ``max(ln(p99/target), ln(kv_p99/kv_capacity), ln(b_p99/max_batch))``
    (∞ when saturated) is continuous, so the root is found by regula falsi (Illinois) in
    ln λ, with a geometric bisection step whenever the upper end is saturated or the
    previous step did not halve the bracket, until the bracket is within CAPACITY_RTOL. Unservable = infeasible at λ_lo = 1e-6·(scheduler-cap
    rate). Bracket top: ``_feasible_qps_bound``. Each step evaluates only the
    configurations still bracketing (``Configs.take``), p99s only; configurations with the
    same figures (e.g. bf16 and fp16 where a device runs both alike) are searched once.
    """
    runnable_idx = np.flatnonzero(np.asarray(c.supported, dtype=bool) & np.asarray(c.runnable, dtype=bool))
    if len(runnable_idx) < len(c):
        return _scatter_capacity(c, runnable_idx, capacity_at_slo(
            c.take(runnable_idx), prompt, output, slo, params, prefill_chunk_tokens) if len(runnable_idx) else None)
    targets = _slo_targets(slo)
    first, inverse = _distinct_rows(c)
    if len(first) < len(c):
        return _expand_capacity(c, inverse, capacity_at_slo(
            c.take(first), prompt, output, slo, params, prefill_chunk_tokens), targets)
    n = len(c)
    lens = _lengths(prompt, output)
    chunk = prefill_chunk_tokens
    need = set(targets)
    runnable = np.asarray(c.supported, dtype=bool)
    lam_cap = _scheduler_cap_qps(c, lens)
    lam_lo = lam_cap * 1e-6
    lam_hi = np.minimum(lam_cap, _feasible_qps_bound(c, lens))

    def margin(rows, lam, t0=None):
        """max over the limits of ln(value / limit) (> 0: infeasible; inf: saturated).

        Returns (margin, step time in s, index of the binding limit in ``names``, −1 when
        saturated); the tails are computed only where not saturated."""
        cs = c.take(rows)
        st = _solve_state(cs, lam, lens, chunk, t0)
        f = np.full(len(rows), np.inf)
        step_s = np.full(len(rows), np.inf)
        bind = np.full(len(rows), -1)
        live = np.flatnonzero(~st.saturated)
        if not len(live):
            return f, step_s, bind
        if len(live) < len(rows):
            cs, lam, st = cs.take(live), lam[live], _take_state(st, live)
        r = _evaluate(cs, lam, lens, chunk, need, p50=False, state=st)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = [np.log(r.kv_p99_tokens / np.maximum(r.kv_capacity_tokens, 1e-300)),
                     np.log(np.maximum(r.running_batch + Z99 * np.sqrt(r.running_batch), 1e-300)
                            / c.max_batch_sequences)]
            terms += [np.log(getattr(r, f"{k}_p99_ms") / t) for k, t in targets.items()]
        terms = np.nan_to_num(np.array(terms), nan=np.inf)
        f_live = np.max(terms, axis=0)
        bind[live] = np.where(r.saturated, -1, np.where(r.kv_fits, np.argmax(terms, axis=0), 0))
        f[live] = np.where(r.saturated | ~r.kv_fits & (f_live <= 0), np.inf, f_live)  # kv_fits is the authority
        step_s[live] = r.step_ms / 1e3
        return f, step_s, bind

    names = ["memory", "memory", *targets]  # the terms of the margin, in order

    every = np.arange(n)
    f_lo, t_lo, _ = margin(every, lam_lo)
    bind_hi = np.full(n, -1)  # binding limit at the lowest infeasible probe
    t_lo = np.where(np.isfinite(t_lo), t_lo, np.nan)  # Newton warm start (from below)
    ok_lo = f_lo <= 0
    f_hi = np.full(n, np.inf)  # the bound is infeasible by construction (checked below if never probed)
    ok_hi = np.zeros(n, dtype=bool)
    lo = np.where(ok_lo, lam_lo, 0.0)
    hi = lam_hi.copy()
    fl, fh = f_lo.copy(), f_hi.copy()
    side = np.zeros(n)
    stalls = np.zeros(n)  # consecutive steps that kept the same end
    active = ok_lo & ~ok_hi
    for _ in range(BISECTION_ITERATIONS):
        rows = np.flatnonzero(active & (hi > lo * (1.0 + CAPACITY_RTOL)))
        if not len(rows):
            break
        a_lam, b_lam = lo[rows], hi[rows]
        # slack g = e^{−margin} − 1 = limit/value − 1 (−1 when saturated): ~linear in λ where
        # a p99 grows like 1/(1 − λ/λ_sat), so regula falsi on it converges fast
        ga, gb = np.expm1(-fl[rows]), np.expm1(-fh[rows])
        t = np.clip(np.where(ga > gb, ga / np.where(ga > gb, ga - gb, 1.0), 0.5), 0.02, 0.98)
        mid = a_lam + t * (b_lam - a_lam)
        # a saturated top has no slack to interpolate: bisect (top/3 while the bottom is
        # still under top/16, geometric while the bracket spans more than 4×, else linear);
        # every third step that keeps the same end, too
        bisect = np.where(b_lam > 4.0 * a_lam, np.sqrt(a_lam * b_lam), 0.5 * (a_lam + b_lam))
        bisect = np.where(a_lam < b_lam / 16.0, b_lam / 3.0, bisect)  # far below: descend by 3× steps
        bisecting = ~np.isfinite(fh[rows]) | (stalls[rows] >= 2)
        mid = np.where(bisecting, bisect, mid)
        f_mid, t_mid, b_mid = margin(rows, mid, t_lo[rows])
        ok = f_mid <= 0
        bind_hi[rows] = np.where(ok, bind_hi[rows], b_mid)
        t_lo[rows] = np.where(ok, t_mid, t_lo[rows])
        s_ = side[rows]
        lo[rows] = np.where(ok, mid, lo[rows])
        hi[rows] = np.where(ok, hi[rows], mid)
        # Illinois: halve the stale end's slack when the same end is kept twice
        fl[rows] = np.where(ok, f_mid, np.where(s_ < 0, -np.log1p(ga / 2.0), fl[rows]))
        fh[rows] = np.where(ok, np.where(s_ > 0, -np.log1p(gb / 2.0), fh[rows]), f_mid)
        new_side = np.where(ok, 1.0, -1.0)
        stalls[rows] = np.where((new_side == s_) & ~bisecting, stalls[rows] + 1, 0.0)
        side[rows] = new_side
    # every probe feasible: check the bound itself; feasible there too → the scheduler cap binds
    untested = np.flatnonzero(ok_lo & (hi == lam_hi))
    if len(untested):
        f_b, _, _ = margin(untested, lam_hi[untested])
        at_bound = untested[f_b <= 0]
        lo[at_bound] = lam_hi[at_bound]
        if len(at_bound):
            f_cap, _, _ = margin(at_bound, lam_cap[at_bound])
            ok_hi[at_bound] = f_cap <= 0
            lam_hi[at_bound] = np.where(f_cap <= 0, lam_cap[at_bound], lam_hi[at_bound])
    max_qps = np.where(ok_hi, lam_hi, lo)
    max_qps = np.where(ok_lo & runnable, max_qps, 0.0)
    # at capacity: TTFT and TPOT percentiles always, E2E (a costly L × O mixture) when it is an SLO
    # (Newton from the step time of the highest feasible probe, below both)
    at_cap = _evaluate(c, np.where(max_qps > 0, max_qps, lam_lo), lens, chunk, need | {"ttft", "tpot"}, t0=t_lo)
    # the binding limit: from the probe just above capacity, or (saturated there) 2 % above
    unknown = np.flatnonzero(ok_lo & ~ok_hi & (bind_hi < 0))
    above = (_evaluate(c.take(unknown), np.minimum(hi, max_qps * 1.02)[unknown], lens, chunk, need, p50=False)
             if len(unknown) else None)
    where_unknown = {int(i): j for j, i in enumerate(unknown)}
    limited_by: list[str] = []
    why: list[str | None] = []
    for i in range(n):
        if not runnable[i]:
            limited_by.append("unservable")
            why.append(c.reason[i] or "cannot run")
            continue
        if not ok_lo[i]:
            limited_by.append("unservable")
            why.append(_unservable_why(at_cap, i, targets, c))
            continue
        if ok_hi[i]:
            limited_by.append("memory")
            why.append(f"scheduler cap of {c.max_batch_sequences} running sequences")
            continue
        limited_by.append(names[bind_hi[i]] if bind_hi[i] >= 0
                          else _binding(above, where_unknown[i], targets))  # type: ignore[arg-type]
        why.append(None)
    # unservable rows: at_cap is at λ_lo, the best they reach
    return Capacity.at(at_cap, max_qps, max_qps * lens.mean_o, limited_by, why)


def _scheduler_cap_qps(c: Configs, lens: _Lengths) -> np.ndarray:
    """max_batch / (E[O−1]·D(1)) req/s: no replica holds more decoding sequences than its cap."""
    d1 = np.where(np.asarray(c.supported, dtype=bool), perf.decode_step_s(c, 1.0, lens.ctx), 1.0)
    return float(c.max_batch_sequences) / (max(lens.mean_o1, 0.5) * d1)


def _feasible_qps_bound(c: Configs, lens: _Lengths) -> np.ndarray:
    """An upper bound on the feasible request rate (req/s), from two rooflines.

    - Decode: the batch is ``b = λ·E[O−1]·t̄`` with ``t̄ >= D(b)``, and feasibility needs
      ``b <= b_max = min(max_batch, kv_capacity / c̄)`` (mean KV ``b·c̄`` under the p99);
      b/D(b) grows with b, so ``λ <= b_max / (E[O−1]·D(b_max))`` (only when E[O−1] > 0).
    - Compute: every request needs ``E[L] + E[O−1]`` token passes at no more than
      ``compute_bound_tokens_s``, so ``λ <= compute_bound_tokens_s / (E[L] + E[O−1])``.
    """
    bound = np.full(len(c), np.inf)
    if lens.mean_o1 > 0:
        b_max = np.maximum(np.minimum(float(c.max_batch_sequences), c.kv_capacity_tokens / max(lens.ctx, 1.0)), 1.0)
        bound = b_max / (lens.mean_o1 * perf.decode_step_s(c, b_max, lens.ctx))
    roof = perf.compute_bound_tokens_s(c) / max(lens.mean_l + lens.mean_o1, 1.0)
    out = np.fmin(bound, roof) * (1.0 + 1e-6)
    return np.where(np.isfinite(out) & (out > 0), out, np.inf)


def _scatter_capacity(c: Configs, idx: np.ndarray, sub: Capacity | None) -> Capacity:
    """A Capacity over all of ``c`` from one over the runnable subset ``idx``; the rest unservable."""
    n = len(c)

    def full(values, fill=np.nan):
        out = np.full(n, fill, dtype=float)
        if sub is not None:
            out[idx] = values
        return out

    limited_by = ["unservable"] * n
    why: list[str | None] = [c.reason[i] or "cannot run" for i in range(n)]
    if sub is not None:
        for j, i in enumerate(idx):
            limited_by[i] = sub.limited_by[j]
            why[i] = sub.why[j]
    return Capacity(
        max_qps=full(sub.max_qps if sub else None, 0.0),
        output_tokens_per_s=full(sub.output_tokens_per_s if sub else None, 0.0),
        limited_by=limited_by,
        why=why,
        ttft_p99_ms=full(sub.ttft_p99_ms if sub else None),
        tpot_p99_ms=full(sub.tpot_p99_ms if sub else None),
        e2e_p99_ms=full(sub.e2e_p99_ms if sub else None),
        at_capacity=None,
    )


def _distinct_rows(c: Configs) -> tuple[np.ndarray, np.ndarray]:
    """(first, inverse): the first row of each distinct configuration by every array figure
    (keys, devices and precisions aside), in order, and for every row the index of its own in
    ``first``. Rows with the same figures have the same serving behaviour."""
    figures = np.stack([np.asarray(getattr(c, f.name), dtype=float) for f in fields(c)
                        if isinstance(getattr(c, f.name), np.ndarray)], axis=1)
    _, first, inverse = np.unique(figures, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.ravel()]


def _expand_capacity(c: Configs, inverse: np.ndarray, sub: Capacity, targets: dict[str, float]) -> Capacity:
    """A Capacity over all of ``c`` from one over its distinct rows (row i is row ``inverse[i]``
    of ``sub``); an unservable row's ``why`` names its own key."""
    at_cap = LoadResult(*(getattr(sub.at_capacity, f.name)[inverse] for f in fields(LoadResult)))
    limited_by = [sub.limited_by[j] for j in inverse]
    why = [_unservable_why(at_cap, i, targets, c) if limited_by[i] == "unservable" else sub.why[j]
           for i, j in enumerate(inverse)]
    return Capacity.at(at_cap, sub.max_qps[inverse], sub.output_tokens_per_s[inverse], limited_by, why)


def _binding(r: LoadResult, i: int, targets: dict[str, float]) -> str:
    """The limit violated (or closest to it) just above capacity: memory first, then the worst SLO ratio."""
    if r.saturated[i] and not targets:
        return "memory"
    if not r.kv_fits[i] and not r.saturated[i]:
        return "memory"
    ratios = {k: float(getattr(r, f"{k}_p99_ms")[i]) / t for k, t in targets.items()}
    if not ratios:
        return "memory"
    return max(ratios, key=lambda k: ratios[k])


def _unservable_why(r: LoadResult, i: int, targets: dict[str, float], c: Configs) -> str:
    parts = []
    for k, t in targets.items():
        best = float(getattr(r, f"{k}_p99_ms")[i])
        if not best <= t:
            parts.append(f"{k}_p99_ms {t:g} is below the best this configuration reaches at λ → 0, "
                         f"{best:.1f} ms (short by {best - t:.1f} ms)")
    if not r.kv_fits[i]:
        parts.append(f"the KV cache ({r.kv_capacity_tokens[i]:,.0f} tokens) cannot hold even one request's p99 context")
    return f"{c.keys[i]}: " + "; ".join(parts) if parts else f"{c.keys[i]}: cannot meet the SLO"


def check_slo_floor(c: Configs, slo: SLO) -> None:
    """Raise ModelError when an SLO is below a configuration's physical floor.

    TPOT cannot beat ``tpot_bound_ms`` (weights / peak bandwidth at batch 1); TTFT cannot
    beat one prefill step. Only configuration 0 is checked (the CLI's single config).
    """
    if slo.tpot_p99_ms is not None:
        floor = float(perf.tpot_bound_ms(c)[0])
        if slo.tpot_p99_ms < floor:
            raise ModelError(
                f"tpot_p99_ms {slo.tpot_p99_ms:g} is below the physical floor of {c.keys[0]}: "
                f"{floor:.2f} ms per token (weights / peak memory bandwidth at batch 1), short by "
                f"{floor - slo.tpot_p99_ms:.2f} ms; relax the SLO, raise tp or use a smaller precision")


def batch_throughput(
    c: Configs,
    prompt: LengthDist,
    output: LengthDist,
    params: CalibrationParams | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(output tokens/s, requests/s) per configuration for a batch workload at full load.

    The replica runs the memory-limited batch continuously (``perf.offline_throughput_tokens_s``
    at the mean prompt and output lengths: batch = min(scheduler cap, sequences whose KV
    fits), each step decodes the batch and prefills its amortised prompts).
    requests/s = tokens/s / E[O]. Zero where not even one sequence fits.
    """
    el, eo = prompt.mean_tokens, output.mean_tokens
    _, tok_s = perf.offline_throughput_tokens_s(c, el, eo)
    tok_s = np.where(np.asarray(c.supported, dtype=bool), np.nan_to_num(tok_s, nan=0.0), 0.0)
    return tok_s, tok_s / eo


def slo_floor_ms(c: Configs, prompt: LengthDist, output: LengthDist) -> dict[str, np.ndarray]:
    """Physical lower bounds (ms) on each p99 per configuration, whatever the load.

    - ``tpot``: ``tpot_bound_ms`` (weights / peak memory bandwidth at batch 1);
    - ``ttft``: one prefill of the p99 prompt plus the front-end time,
      ``prefill_s(L_p99) + request_overhead_s`` (1 % of the prompts are at least that long,
      and no schedule prefills them faster);
    - ``e2e``: ``(O_p99 − 1)·tpot_bound_ms`` (1 % of the requests decode at least O_p99 − 1
      tokens, each no faster than the TPOT bound).
    """
    l99 = float(quantile_tokens(prompt, 0.99))
    o99 = float(quantile_tokens(output, 0.99))
    tpot = perf.tpot_bound_ms(c)
    return {"tpot": tpot, "ttft": (perf.prefill_s(c, l99) + c.request_overhead_s) * 1e3,
            "e2e": max(o99 - 1.0, 0.0) * tpot}


def check_slo_floors(c: Configs, slo: SLO, prompt: LengthDist, output: LengthDist) -> None:
    """Raise ModelError naming the bound and the gap when an SLO is below configuration 0's floor.

    The floors are ``slo_floor_ms``; the CLI checks its single configuration with this.
    """
    floors = slo_floor_ms(c, prompt, output)
    why = {"tpot": "weights / peak memory bandwidth at batch 1",
           "ttft": f"one prefill of the p99 prompt, {float(quantile_tokens(prompt, 0.99)):,.0f} tokens"
                   + (f", plus {c.request_overhead_s * 1e3:.1f} ms front-end time" if c.request_overhead_s else ""),
           "e2e": f"(p99 output {float(quantile_tokens(output, 0.99)):,.0f} − 1) tokens at the TPOT bound"}
    for k, target in _slo_targets(slo).items():
        floor = float(floors[k][0])
        if np.isfinite(floor) and target < floor:
            raise ModelError(
                f"{k}_p99_ms {target:g} is below the physical floor of {c.keys[0]}: {floor:.2f} ms "
                f"({why[k]}), short by {floor - target:.2f} ms; relax the SLO, raise tp or use a smaller precision")




def estimate_serving(
    c: Configs,
    prompt: LengthDist,
    output: LengthDist,
    qps: float | None = None,
    slo: SLO | None = None,
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
) -> dict:
    """JSON-ready serving figures of configuration 0 (what `gpuplan estimate --qps/--*-p99-ms` adds).

    With ``qps`` (req/s, > 0): ``ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, tpot_p99_ms,
    e2e_p99_ms, utilization, saturated, kv_fits`` from ``serve_at_rate`` (``kv_fits`` False:
    the p99 KV occupancy exceeds the cache, so requests would queue for memory or be
    preempted, which the percentiles do not include). With a non-empty ``slo``:
    ``max_qps_at_slo`` (req/s), ``output_tokens_per_s_at_slo`` (= max_qps·E[O]) and
    ``limited_by`` from ``capacity_at_slo`` (plus ``why`` when unservable). An SLO below
    the physical floor (``slo_floor_ms``) raises ModelError. A configuration that cannot
    run gets the same keys with null values (``limited_by`` 'unservable').
    """
    out: dict = {}
    runs = bool(c.runnable[0])
    if qps is not None:
        lam = float(_check_rate(qps))
        keys = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_p99_ms", "utilization", "saturated",
                "kv_fits")
        if runs:
            r = serve_at_rate(c, lam, prompt, output, prefill_chunk_tokens=prefill_chunk_tokens)
            for k in keys[:5]:
                out[k] = perf.finite_round(getattr(r, k)[0], 3)
            out["utilization"] = perf.finite_round(r.utilization[0], 4)
            out["saturated"] = bool(r.saturated[0])
            out["kv_fits"] = bool(r.kv_fits[0])
        else:
            out.update(dict.fromkeys(keys))
    if slo is not None and not slo.is_empty:
        if runs:
            check_slo_floors(c, slo, prompt, output)
            cap = capacity_at_slo(c, prompt, output, slo, prefill_chunk_tokens=prefill_chunk_tokens)
            out["max_qps_at_slo"] = perf.finite_round(cap.max_qps[0], 4)
            out["output_tokens_per_s_at_slo"] = perf.finite_round(cap.output_tokens_per_s[0], 2)
            out["limited_by"] = cap.limited_by[0]
            if cap.why[0]:
                out["why"] = cap.why[0]
        else:
            out.update({"max_qps_at_slo": None, "output_tokens_per_s_at_slo": None, "limited_by": "unservable"})
    return out
