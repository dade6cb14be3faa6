"""Mean state of a replica under load: length quadrature, per-step prompt work (the fixed point of the
running batch and step time: ``fixed_point``).

Formulas: see :mod:`optimizer.models.serving` (the mean-behaviour part of its docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from optimizer.models import perf
from optimizer.models.configs import Configs
from optimizer.models.lengths import quadrature_spread, stratum_deviations
from optimizer.models.serving.rows import RowLengths
from optimizer.models.techniques import (
    ServingTechnique,
    cached_prefix_tokens,
    uncached_prompt_tokens,
)
from workloads.spec import LengthDist

QUAD_NODES = 12
NEWTON_ITERATIONS = 40
BISECTION_ITERATIONS = 40  # safeguarded regula falsi steps on ln λ (typically < 10)
CAPACITY_RTOL = 5e-4  # capacity bracket hi/lo − 1
QUANTILE_ITERATIONS = 24  # Illinois steps, safeguarded inside the component-quantile bracket
QUANTILE_RTOL = 1e-5
POISSON_K_MAX = 60  # largest count of prompts per step resolved (the Poisson tail folds into it)
MAX_EXPLICIT_CHUNKS = 4  # longer prefills: the rest in the 4th chunk's step size, at the rest's mean span
GRID_BLOCK_ELEMENTS = 1 << 15  # row-wise grids are evaluated by blocks of rows this large (256 KB arrays)


# ---------------------------------------------------------------------------------------
# Distributions as quadrature


@dataclass(frozen=True)
class Lengths:
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
    kv_prompt_tokens: float = 0.0  # E[prompt tokens whose KV a waiting/prefilling request holds]
    span_offset: float = 0.0  # cached tokens a prefill chunk attends to before its own (prefix caching)
    tokens_per_step: float = 1.0  # tokens a decoding sequence emits per step (speculative decoding)
    kv_tok3_steps: float = 0.0  # E[Σ_{j=1}^{O−1} (L + j)³] (the skew of the KV occupancy)
    # Σ_j m(j)², m(j) = (E[L] + j)·P(O − 1 >= j) the mean KV profile of a request j steps into its decode:
    # E[Σ_{j=1}^{min(O, O')−1} (E[L] + j)²] over independent O, O' (what evenly spaced arrivals take off the
    # occupancy's variance, ``latency.kv_per_rank``)
    kv_mean2_steps: float = 0.0
    mean_min_steps: float = 0.0  # E[min(S, S')] of two independent requests' decode steps (``latency.batch_per_rank``)
    # Var(L) of the prompt context a decoding sequence reads, across sequences: Σ w·((L − E[L])² + stratum variance)
    # (the whole prompt, cached or not; ``latency._tpot_moments``' context drift)
    ctx_var_tokens2: float = 0.0
    # E[(L − node)^j | stratum], j = 1..8, the prompt censored at the queue-tail quantile (``lengths.stratum_deviations``),
    # (QL, 8): what the prefill queue's E[S^k] of a service quadratic in L needs (``latency.service_moments``)
    l_dev: np.ndarray | None = None


def lengths_for(prompt: LengthDist, output: LengthDist, technique: ServingTechnique | None = None) -> Lengths:
    """The quadrature of the request lengths, with what a serving technique changes in them
    (``optimizer.models.techniques``; none or an inactive one: the plain lengths)."""
    ln, lw, lv = quadrature_spread(prompt, QUAD_NODES)
    on, ow, ov = quadrature_spread(output, QUAD_NODES)
    ln = np.maximum(ln, 1.0)
    on = np.maximum(on, 1.0)
    dev = stratum_deviations(prompt, QUAD_NODES)
    if technique is not None and technique.active:
        return _technique_lengths(ln, lw, lv, on, ow, ov, technique, dev)
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
    kv3 = _sum_cubes(float(lw @ ln), el2, float(lw @ ln**3), n, 1.0, ow)
    return Lengths(ln, lw, on, ow, lv, ov, el, var_l, eo1, float(ow @ on), ctx, kv1, kv2, kv_prompt_tokens=el,
                   kv_tok3_steps=kv3, l_dev=dev, kv_mean2_steps=_sum_mean_squares(el, n, 1.0, ow),
                   mean_min_steps=float(ow @ np.minimum.outer(n, n) @ ow), ctx_var_tokens2=var_l + float(lw @ lv))


def _sum_mean_squares(ek: float, steps: np.ndarray, a: float, o_w: np.ndarray) -> float:
    """Σ_j m(j)² of the mean KV profile m(j) = (E[K] + a·j)·P(S >= j) over the step nodes S (weights ``o_w``):
    P(S >= j)² is the probability that two independent requests both still decode at step j, so the sum is
    E[g(min(S, S'))], g(s) = Σ_{j=1}^{s} (E[K] + a·j)² = s·E[K]² + 2a·E[K]·Σj + a²·Σj²."""
    s = np.minimum.outer(steps, steps)
    g = s * ek * ek + 2 * a * ek * s * (s + 1) / 2.0 + a * a * s * (s + 1) * (2 * s + 1) / 6.0
    return float(o_w @ g @ o_w)


def _sum_cubes(e1: float, e2: float, e3: float, steps: np.ndarray, a: float, o_w: np.ndarray) -> float:
    """E[Σ_{j=1}^{S} (K + a·j)³] for K independent of S, from E[K], E[K²], E[K³] and the step nodes S:
    ``S·K³ + 3a·K²·Σj + 3a²·K·Σj² + a³·Σj³`` with Σj³ = (S(S + 1)/2)²."""
    sj = steps * (steps + 1) / 2.0
    sj2 = steps * (steps + 1) * (2 * steps + 1) / 6.0
    return float(o_w @ (steps * e3 + 3 * a * e2 * sj + 3 * a * a * e1 * sj2 + a**3 * sj * sj))


def _technique_lengths(ln, lw, lv, on, ow, ov, t: ServingTechnique, dev: np.ndarray) -> Lengths:
    """Lengths under prefix caching and speculative decoding (formulas: ``optimizer.models.techniques``).

    Prompt nodes become the uncached tokens P = max(L·(1 − h) − N', 1), N' = min(N, L − 1)
    (stratum variance ×(1 − h)², deviations ×(1 − h)^j); a sequence holds K = L − N' prompt tokens of KV and reads L
    of context; S = (O − 1)/A decode steps, in which the context grows by A tokens a step:
    E[Σ_{j=1}^{S} (K + A·j)] and E[Σ (K + A·j)²]; mean context of a decoding sequence
    L̄ + A·E[S(S + 1)]/(2·E[S]).
    """
    h, a = t.prefix_hit_fraction, t.tokens_per_step
    shared = cached_prefix_tokens(ln, t.shared_prefix_tokens)
    pre = uncached_prompt_tokens(ln, h, t.shared_prefix_tokens)
    held = ln - shared
    el_full = float(lw @ ln)
    el = float(lw @ pre)
    ek, ek2 = float(lw @ held), float(lw @ held**2)
    steps = np.maximum(on - 1.0, 0.0) / a
    es = float(ow @ steps)
    sum_j = steps * (steps + 1) / 2.0
    sum_j2 = steps * (steps + 1) * (2 * steps + 1) / 6.0
    kv1 = float(ow @ (steps * ek + a * sum_j))
    kv2 = float(ow @ (steps * ek2 + 2 * ek * a * sum_j + a * a * sum_j2))
    ctx = el_full + (a * float(ow @ (steps * (steps + 1))) / (2.0 * es) if es > 0 else 0.0)
    var_l = float(lw @ (pre - el) ** 2)
    kv3 = _sum_cubes(ek, ek2, float(lw @ held**3), steps, a, ow)
    return Lengths(pre, lw, 1.0 + steps, ow, lv * (1.0 - h) ** 2, ov / (a * a), el, var_l, es, float(ow @ on), ctx,
                   kv1, kv2, kv_prompt_tokens=ek, span_offset=el_full - el, tokens_per_step=a, kv_tok3_steps=kv3,
                   l_dev=dev * (1.0 - h) ** np.arange(1, dev.shape[1] + 1),
                   kv_mean2_steps=_sum_mean_squares(ek, steps, a, ow),
                   mean_min_steps=float(ow @ np.minimum.outer(steps, steps) @ ow),
                   ctx_var_tokens2=float(lw @ ((ln - el_full) ** 2 + lv)))


# ---------------------------------------------------------------------------------------
# Step-time pieces


@dataclass(frozen=True)
class _PromptTokens:
    """The prefill tokens n a step can carry, as J columns: one prompt of each node length L
    (QL columns), then K = 2..k_max prompts of E[L] tokens; with what ``_steps`` and
    ``_chunked_extra_s`` need of them that does not depend on the configuration. One row per
    length set (``RowLengths.base``): shapes (G, J) unless noted."""

    n_one: int  # QL: the first columns are one prompt each
    rest: np.ndarray  # tokens of the chunk that carries the remainder (more than C only in the last explicit one)
    n_step: np.ndarray  # its step size, min(rest, C)
    # each column's step among the distinct (n_step, rest_span) steps of its set (G, J): long prompts
    # and large K all end in a full chunk at the same span, one step time for all
    step_of_column: np.ndarray
    before: np.ndarray  # (G, J) column of the full chunks before the remainder, in ``_chunked_extra_s``'s table
    sd_tokens: np.ndarray  # (G, K − 1) √(K·Var(L))
    k_tokens: np.ndarray  # (G, K − 1) max(K·E[L], 1)
    # the steps ``_chunked_extra_s`` times, (G, 1 + MAX_EXPLICIT_CHUNKS + U): none (D), the full chunks, then
    # the U distinct remainder steps (a set with fewer repeats its last)
    step_grid_tokens: np.ndarray
    step_grid_span: np.ndarray


def _prompt_tokens(lens: RowLengths, k_max: int, chunk: int) -> _PromptTokens:
    """The :class:`_PromptTokens` of every length set for K up to ``k_max`` and chunks of C = ``chunk``
    tokens (cached on ``lens.grids``, which its ``take`` shares).

    Chunk j of one prompt attends to ``j·C + n_j/2`` tokens on average; chunks of several
    prompts to E[L]/2. The chunk carrying the remainder is j = ``min(⌊n/C⌋, MAX_EXPLICIT_CHUNKS − 1)``, at span
    j·C + rest/2: beyond the last explicit chunk the rest stands for ⌈rest/C⌉ chunks whose tokens attend to that
    on average (at chunk j's span j·C + C/2, a 24,000-token prompt's last 17,856 tokens were charged the attention
    of a 7,168-token span instead of 15,072: its TPOT p99 came out 23 % under the simulator's).
    """
    key = (k_max, chunk)
    if key in lens.grids:
        return lens.grids[key]
    base = lens.base
    last = MAX_EXPLICIT_CHUNKS - 1
    ks = np.arange(2, k_max + 1, dtype=float)[None, :]
    mean_l, offset = base.mean_l[:, None], base.span_offset[:, None]
    q_l = base.l_nodes.shape[1]
    n_tokens = np.concatenate([base.l_nodes, ks * mean_l], axis=1)
    single = np.arange(n_tokens.shape[1]) < q_l
    j_rest = np.clip(np.floor(n_tokens / chunk), 0.0, last)
    rest = n_tokens - j_rest * chunk
    n_step = np.minimum(rest, chunk)
    # the remainder's tokens attend to j·C + rest/2 on average: one chunk's midpoint, or beyond the last explicit
    # chunk the midpoint of all the chunks it stands for (a step's time is linear in its span)
    rest_span = np.where(single, j_rest * chunk + rest / 2.0, mean_l / 2.0) + offset
    steps, step_of_column = _distinct_steps(n_step, rest_span)
    full = np.broadcast_to(np.arange(last) * chunk + chunk / 2.0, (len(base), last))
    full_span = np.concatenate([full, mean_l / 2.0], axis=1) + offset  # full chunk j < last of one prompt, then of several
    zero = np.zeros((len(base), 1))
    lens.grids[key] = _PromptTokens(
        n_one=q_l, rest=rest, n_step=n_step,
        step_of_column=step_of_column,
        step_grid_tokens=np.concatenate([zero, np.full((len(base), last + 1), float(chunk)), steps[0]], axis=1),
        step_grid_span=np.concatenate([zero, full_span, steps[1]], axis=1),
        before=j_rest.astype(np.int64) + np.where(single, 0, last + 1),
        sd_tokens=np.sqrt(ks * base.var_l[:, None]), k_tokens=np.maximum(ks * mean_l, 1.0),
    )
    return lens.grids[key]


def _distinct_steps(n_step: np.ndarray, span: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (tokens, span) steps of each row of ``n_step``, ``span`` (G, J), in ascending order
    (tokens, then span), and each column's index among its row's: ((2, G, U) — a row with fewer repeats
    its last —, (G, J)). What ``np.unique(..., axis=1, return_inverse=True)`` gives row by row, for every
    row in one sort."""
    n_rows, n_cols = n_step.shape
    row = np.repeat(np.arange(n_rows), n_cols)
    tokens, spans = n_step.ravel(), span.ravel()
    order = np.lexsort((spans, tokens, row))
    r, t, sp = row[order], tokens[order], spans[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (r[1:] != r[:-1]) | (t[1:] != t[:-1]) | (sp[1:] != sp[:-1])
    rank = np.cumsum(new) - 1  # index among all the distinct steps
    first = rank[np.searchsorted(r, np.arange(n_rows))]  # of each row's first
    count = np.bincount(r[new], minlength=n_rows)
    inverse = np.empty(len(order), dtype=np.int64)
    inverse[order] = rank - first[r]
    width = int(count.max(initial=1))
    pick = first[:, None] + np.minimum(np.arange(width)[None, :], count[:, None] - 1)  # (G, U), the last repeated
    distinct = np.stack([t[new], sp[new]])  # (2, all distinct)
    return distinct[:, pick], inverse.reshape(n_rows, n_cols)


def _chunk_extra_s(t: np.ndarray, d: np.ndarray, n: np.ndarray, n_step: np.ndarray) -> np.ndarray:
    """(t − D)·n/n_step: the extra time of a step of n_step prefill tokens, charged for n tokens (0 if n <= 0)."""
    return np.where(n > 0, (t - d) * n / np.maximum(n_step, 1e-300), 0.0)


def _chunked_extra_s(c: Configs, b: np.ndarray, ctx: np.ndarray, n: _PromptTokens, group: np.ndarray, chunk: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """g(n) = Σ_chunks [t(b, c̄, n_j, span_j) − D(b)]: extra step time of the prefill tokens of
    each column of ``n`` (spans there); returns (D(b) (N, 1), (N, QL) for one prompt, (N, K − 1) for several).

    The tokens go through ``ceil(n/C)`` steps of at most C tokens; beyond MAX_EXPLICIT_CHUNKS
    chunks the rest is charged at the last explicit chunk's step size and the rest's mean span. Full chunks cost
    the same whatever n, so they are evaluated once per configuration, and only the chunk that
    carries the remainder once per distinct (size, span) of its length set (row ``group`` of ``n``),
    D(b) with them: one step-time evaluation. Shapes: b, ctx (N, 1).
    """
    last = MAX_EXPLICIT_CHUNKS - 1
    t = perf.decode_step_s(c, b, ctx, n.step_grid_tokens[group], n.step_grid_span[group])
    d = t[:, :1]
    full = _chunk_extra_s(t[:, 1:last + 2], d, float(chunk), float(chunk))
    zero = np.zeros((len(full), 1))
    before = np.concatenate([zero, np.cumsum(full[:, :last], axis=1),  # the full chunks before chunk j
                             zero, np.cumsum(np.repeat(full[:, last:], last, axis=1), axis=1)], axis=1)
    rows = np.arange(len(group))[:, None]
    t_rest = t[:, last + 2:][rows, n.step_of_column[group]]
    g = before[rows, n.before[group]] + _chunk_extra_s(t_rest, d, n.rest[group], n.n_step[group])
    return d, g[:, :n.n_one], g[:, n.n_one:]


_LOG_FACTORIAL = np.array([math.lgamma(k + 1.0) for k in range(POISSON_K_MAX + 1)])  # ln k!


def poisson_pmf(m: np.ndarray, k_max: int, k_rows: np.ndarray | None = None) -> np.ndarray:
    """P(K = k), k = 0..k_max (<= POISSON_K_MAX), for K ~ Poisson(m) (N,) → (N, k_max + 1); the tail folds into k_max
    (into ``k_rows[i]`` <= k_max for row i when given, 0 beyond: ``fold_tail``)."""
    k = np.arange(k_max + 1, dtype=float)
    lg = _LOG_FACTORIAL[:k_max + 1]
    mm = np.maximum(m, 1e-300)[:, None]
    p = np.exp(-mm + k[None, :] * np.log(mm) - lg[None, :])
    p = np.where(m[:, None] > 0, p, (k[None, :] == 0).astype(float))
    return fold_tail(p, k_rows)


def fold_tail(p: np.ndarray, k_rows: np.ndarray | None) -> np.ndarray:
    """``p`` (N, k_max + 1) with the mass beyond each row's last count added to it: the last column
    (``k_rows`` None), else column ``k_rows[i]``, the columns after it set to 0."""
    if k_rows is None:
        p[:, -1] += np.clip(1.0 - p.sum(axis=1), 0.0, 1.0)
        return p
    p = np.where(np.arange(p.shape[1])[None, :] <= k_rows[:, None], p, 0.0)
    p[np.arange(len(p)), k_rows] += np.clip(1.0 - p.sum(axis=1), 0.0, 1.0)
    return p


def group_k_max(m: np.ndarray, lens: RowLengths) -> np.ndarray:
    """Per row, ``prompts_k_max`` of the rows of its own group (ints (N,)): the count a call on
    that group's rows alone would resolve, ``min(POISSON_K_MAX, ⌈top + 6√top + 4⌉)``."""
    return _group_k_max(m, lens.group, lens.n_groups)


def _group_k_max(m: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    mf = np.where(np.isfinite(m), m, 0.0)
    if n_groups == 1:
        top = np.full(len(m), float(np.max(mf, initial=0.0)))
    else:
        tops = np.zeros(n_groups)
        np.maximum.at(tops, group, mf)
        top = tops[group]
    return np.minimum(POISSON_K_MAX, np.ceil(top + 6.0 * np.sqrt(top) + 4.0)).astype(np.int64)


def prompts_k_max(m: np.ndarray) -> int:
    top = float(np.max(np.where(np.isfinite(m), m, 0.0), initial=0.0))
    return int(min(POISSON_K_MAX, math.ceil(top + 6.0 * math.sqrt(top) + 4.0)))


def int_power(x: np.ndarray, r: int) -> np.ndarray:
    """x^r for an integer r >= 1 by repeated products (numpy's ``**`` calls pow() beyond r = 2, several times slower)."""
    out = x
    for _ in range(r - 1):
        out = out * x
    return out


@dataclass
class Steps:
    """Distribution of one step's duration ``T = D(b) + g(K prompts)``, K ~ Poisson(m): as a
    table of values (N, J) with probabilities (N, J), built on first use (the mean needs none)."""

    d: np.ndarray  # decode-only step D(b), (N,)
    pk: np.ndarray  # P(K = k), (N, k_max + 1)
    l_w: np.ndarray  # (N, QL) weights of the prompt-length nodes
    g1: np.ndarray  # (N, QL) extra of one prompt of each node length, alone
    gk: np.ndarray  # (N, k_max − 1) extra of K = 2..k_max prompts: the mean of two points, gk_lo and 2·g_K − gk_lo
    gk_lo: np.ndarray
    g1_mean: np.ndarray | None = None  # Σ_L w_L·g1(L) (N,), computed once for the tables that share g1
    _moments: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    _powers: dict[int, np.ndarray] = field(default_factory=dict, repr=False)  # values^r

    @cached_property
    def values(self) -> np.ndarray:
        d = self.d[:, None]
        return np.concatenate([d, d + self.g1, d + self.gk_lo, d + (self.gk + (self.gk - self.gk_lo))], axis=1)

    @cached_property
    def probs(self) -> np.ndarray:
        half = self.pk[:, 2:] / 2.0
        return np.concatenate([self.pk[:, :1], self.pk[:, 1:2] * self.l_w, half, half], axis=1)

    def take(self, rows: slice | np.ndarray) -> Steps:
        """The table of the rows at ``rows`` (no moment carried over)."""
        return Steps(self.d[rows], self.pk[rows], self.l_w[rows], self.g1[rows], self.gk[rows], self.gk_lo[rows],
                     None if self.g1_mean is None else self.g1_mean[rows])

    def rows(self, rows: slice, mean: np.ndarray) -> Steps:
        """The table of the rows at ``rows``, with ``mean`` (every row's E[T]) sliced alike."""
        out = self.take(rows)
        out._moments[1] = mean[rows]
        return out

    def one_prompt_mean(self) -> np.ndarray:
        """E[g1] = Σ_L w_L·g1(L) (N,): a step's mean extra for one prompt, computed once."""
        if self.g1_mean is None:
            self.g1_mean = np.sum(self.g1 * self.l_w, axis=1)
        return self.g1_mean

    def moment(self, r: int) -> np.ndarray:
        """E[T^r] (N,), computed once per r; E[T] = D + P(K=1)·E[g1] + Σ_K P(K)·g_K without the table."""
        if r not in self._moments:
            if r == 1:
                self._moments[r] = (self.d + self.pk[:, 1] * self.one_prompt_mean()
                                    + np.sum(self.pk[:, 2:] * self.gk, axis=1))
            else:
                self._moments[r] = np.sum(self.probs * self._power(r), axis=1)
        return self._moments[r]

    def _power(self, r: int) -> np.ndarray:
        """values^r as ``int_power`` computes it (the same products in the same order), from values^(r−1)
        when that is already there."""
        if r not in self._powers:
            self._powers[r] = self._power(r - 1) * self.values if r > 1 else self.values
        return self._powers[r]


def mixed_poisson_pmf(m: np.ndarray, dispersion: np.ndarray, k_max: int,
                      poisson: np.ndarray | None = None, k_rows: np.ndarray | None = None) -> np.ndarray:
    """P(K = k), k = 0..k_max, for K with mean m and variance ``dispersion·m`` (>= m): a negative
    binomial of shape r = m/(dispersion − 1), ``p₀ = (r/(r+m))^r``, ``p_{k+1} = p_k·(k + r)/(k + 1)·m/(r + m)``;
    Poisson where the dispersion is 1 (``poisson``: that pmf if already computed). (N,) → (N, k_max + 1);
    the tail folds into k_max (or each row's ``k_rows``, ``fold_tail``)."""
    over = dispersion > 1.0 + 1e-9
    if poisson is None:
        poisson = poisson_pmf(m, k_max, k_rows)
    if not np.any(over & (m > 0)):
        return poisson
    mm = np.maximum(m, 1e-300)
    r = np.where(over, mm / np.maximum(dispersion - 1.0, 1e-9), 1.0)[:, None]
    q = (mm[:, None] / (r + mm[:, None]))
    k = np.arange(k_max, dtype=float)[None, :]
    p = np.exp(r * np.log1p(-q)) * np.concatenate([np.ones((len(m), 1)), np.cumprod((k + r) / (k + 1.0) * q, axis=1)],
                                                    axis=1)
    p = fold_tail(p, k_rows)
    return np.where(over[:, None] & (m[:, None] > 0), p, poisson)


def _steps(c: Configs, b: np.ndarray, m: np.ndarray, lens: RowLengths, chunk: int,
           k_rows: np.ndarray | None = None) -> Steps:
    """Step durations when K prompts (those that arrived during the previous step) ride in it:
    ``T = D(b) + g(K prompts)``; K = 1 resolves the prompt length by quadrature, K >= 2 uses K·E[L] tokens.

    K is Poisson(λ·T_prev) given the previous step's length, and T_prev itself grows with the
    prompts it carried, so K is a mixed Poisson: mean m = λ·t̄, variance ``m + λ²·Var(T)``; with
    ``Var(T) ≈ ε²·Var(K)`` (ε the mean extra of one prompt) that is ``Var(K) = m/(1 − (λε)²)``
    (λε capped at 0.95), a negative binomial (``mixed_poisson_pmf``). The over-dispersion matters
    because g is convex (prefill tokens hide under the memory-bound decode step up to a point):
    with Poisson K the mean prefill extra per prompt near saturation was 8 % under the
    simulator's (llama-3.1-8b fp8 on rtx-pro-6000, 62 req/s: 7.7 vs 8.4 ms).
    """
    bb, ctx = b[:, None], lens.ctx[:, None]
    if k_rows is None:
        k_rows = step_k_rows(m, lens.group, lens.n_groups)
    k_max = int(np.max(k_rows, initial=1))
    n = _prompt_tokens(lens, k_max, chunk)
    d, g1, gk = _chunked_extra_s(c, bb, ctx, n, lens.group, chunk)
    # K >= 2: the sum of K prompts has variance K·Var(L); spread it over two points ±sd
    # (at the local per-token cost g_K / (K·E[L])) so the step variance keeps it.
    spread = n.sd_tokens[lens.group] * gk / n.k_tokens[lens.group]
    gk_lo = np.maximum(gk - spread, 0.0)
    poisson = Steps(d[:, 0], poisson_pmf(m, k_max, k_rows), lens.l_w, g1, gk, gk_lo)
    mean_t = poisson.moment(1)
    lam_eps = np.clip(np.where(m > 0, (mean_t - poisson.d) / np.maximum(mean_t, 1e-300), 0.0),
                      0.0, 0.95)  # λ·ε = λ·(E[T] − D)/m = (E[T] − D)/t̄ at m = λ·t̄
    return Steps(d[:, 0], mixed_poisson_pmf(m, 1.0 / (1.0 - lam_eps**2), k_max, poisson.pk, k_rows), lens.l_w, g1, gk,
                 gk_lo, poisson.one_prompt_mean())


def step_k_rows(m: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """The prompt count each row's step table resolves at ``m`` prompts per step (``_steps``; rows of
    length sets ``group``): K up to 6 sd of a dispersion-2 count (the tail beyond folds into it), per
    group of rows (``group_k_max``)."""
    return np.maximum(_group_k_max(2.0 * m, group, n_groups), 1)
