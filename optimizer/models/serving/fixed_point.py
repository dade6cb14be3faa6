"""The Little's-law fixed point of a replica's mean state: the smallest root of h(t) = E[T](t) − t
(``solve_state``), the state a queue reaches from empty.

Formulas: see :mod:`optimizer.models.serving` (the mean-behaviour part of its docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optimizer.models import perf
from optimizer.models.configs import Configs
from optimizer.models.serving.rows import RowLengths
from optimizer.models.serving.state import NEWTON_ITERATIONS, Steps, _steps, step_k_rows

HUMP_UNTOUCHED = 1e-3  # share of the routed experts a step may leave untouched where ``solve_state`` trusts convexity


@dataclass(frozen=True)
class _Pair:
    """Rows of a solve twice over (``rows`` then ``rows`` again), so that two points of every row — h
    at t and t + δt, the mean step at m and m + δm — are one ``_steps`` evaluation. Every figure of
    ``_steps`` is row by row but the prompt count k_max its tables resolve, the largest of the call:
    the two points share an evaluation when their k_max agree (nearly always, δ being small) and are
    evaluated apart otherwise, so each row gets the bits of a call of its own point.

    ``c``, ``lens``: every row of the solve; ``rows``: the rows of this pair (None: all);
    ``c2``, ``lens2``: those rows twice."""

    c: Configs
    lens: RowLengths
    rows: np.ndarray | None
    c2: Configs
    lens2: RowLengths

    @classmethod
    def of(cls, c: Configs, lens: RowLengths) -> _Pair:
        twice = np.tile(np.arange(len(c)), 2)
        return cls(c, lens, None, c.take(twice), lens.take(twice))

    def take(self, rows: np.ndarray) -> _Pair:
        """The pair of the rows at ``rows`` (indices into every row of the solve)."""
        n = len(self.c)
        twice = np.concatenate([rows, rows + n])
        return _Pair(self.c, self.lens, rows, self.c2.take(twice), self.lens2.take(twice))

    def steps(self, b_a: np.ndarray, m_a: np.ndarray, b_b: np.ndarray, m_b: np.ndarray, chunk: int
              ) -> tuple[Steps, Steps]:
        """``_steps`` of every row of the pair at (b_a, m_a) and at (b_b, m_b)."""
        n = len(b_a)
        group = self.lens2.group[:n]
        k_a, k_b = step_k_rows(m_a, group, self.lens.n_groups), step_k_rows(m_b, group, self.lens.n_groups)
        if int(np.max(k_a, initial=1)) != int(np.max(k_b, initial=1)):
            c, ls = (self.c, self.lens) if self.rows is None else (self.c.take(self.rows), self.lens.take(self.rows))
            return _steps(c, b_a, m_a, ls, chunk, k_a), _steps(c, b_b, m_b, ls, chunk, k_b)
        both = _steps(self.c2, np.concatenate([b_a, b_b]), np.concatenate([m_a, m_b]), self.lens2, chunk,
                      np.concatenate([k_a, k_b]))
        mean = both.moment(1)
        return both.rows(slice(0, n), mean), both.rows(slice(n, 2 * n), mean)


@dataclass
class State:
    b: np.ndarray  # mean running batch (N,)
    step_s: np.ndarray  # t̄ = E[T]
    steps: Steps
    slope_s: np.ndarray  # dD/db
    eps_s: np.ndarray  # mean extra step time per prompt, (E[T] − D)/m
    rho1: np.ndarray  # lag-1 correlation of step durations, λ·dE[T]/dm
    t_full_s: np.ndarray  # t(b, C) a full prefill step
    saturated: np.ndarray
    d_next_s: np.ndarray  # D(b + 1), the step of a tagged request in its own batch


def solve_state(c: Configs, lam: np.ndarray, lens: RowLengths, chunk: int, t0: np.ndarray | None = None) -> State:
    """Smallest root of h(t) = E[T | b = λ·E[O−1]·t, m = λ·t] − t by Newton's method from below
    (``_next_iterate``), from D(0) or ``t0`` (a step time below the root: the state at a lower rate).

    h(D(0)) > 0 and, for a dense model, h is near-convex, so Newton from the left approaches the stable
    (smaller) root (an overshoot is corrected by a step back); no root (h' >= 0 while h > 0)
    or a batch over the scheduler cap means saturated. For an MoE model h is concave below the batch
    at which a step touches every expert (``moe_hump_batch``) and may rise before it falls: a rising h
    there is climbed by fixed-point steps t ← E[T](t), which stay below the smallest root.
    h and its difference quotient at t + δt are one step-table evaluation of the rows twice over (``_Pair``).
    """
    n = len(c)
    cap = np.asarray(c.batch_cap, dtype=float)  # per row: the scheduler's running-sequence cap
    zero = np.zeros(n)
    t = None if t0 is None else np.asarray(t0, dtype=float).copy()
    if t is None or not np.all(np.isfinite(t)):  # from D(0) where no start is given
        d0 = perf.decode_step_s(c, zero, lens.ctx)
        t = d0 if t is None else np.where(np.isfinite(t), t, d0)
    saturated = ~np.isfinite(t)
    pair = _Pair.of(c, lens)

    def h_pair(p: _Pair, mean_o1, lv, tv, tv2, cv):
        st, st2 = p.steps(np.minimum(lv * mean_o1 * tv, cv), lv * tv, np.minimum(lv * mean_o1 * tv2, cv), lv * tv2,
                          chunk)
        return st.moment(1) - tv, st2.moment(1) - tv2

    done = saturated.copy()
    b_hump = moe_hump_batch(c)
    # the last iterates with h > 0 (below the smallest root) and with h <= 0 (past it): a bracket of the root
    lo_t, lo_h, hi_t, hi_h = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    for _ in range(NEWTON_ITERATIONS):  # only the rows still moving
        rows = np.flatnonzero(~done)
        if not len(rows):
            break
        p = pair if len(rows) == n else pair.take(rows)
        lv, tv, mean_o1 = lam[rows], t[rows], lens.mean_o1[rows]
        dt = np.maximum(1e-9, 1e-4 * tv)
        hv, hv2 = h_pair(p, mean_o1, lv, tv, tv + dt, cap[rows])
        above, past = hv > 0, hv <= 0
        lo_t[rows], lo_h[rows] = np.where(above, tv, lo_t[rows]), np.where(above, hv, lo_h[rows])
        hi_t[rows], hi_h[rows] = np.where(past, tv, hi_t[rows]), np.where(past, hv, hi_h[rows])
        t[rows], move, sat = _next_iterate(tv, hv, (hv2 - hv) / dt, lv * mean_o1, cap[rows], b_hump[rows],
                                           (lo_t[rows], lo_h[rows], hi_t[rows], hi_h[rows]))
        saturated[rows] |= sat
        done[rows] = sat | (np.abs(move) <= 1e-7 * tv)
    b = np.minimum(lam * lens.mean_o1 * t, cap)
    m = lam * t
    dm = np.maximum(1e-3, 0.01 * m)
    st, st_dm = pair.steps(b, m, b, m + dm, chunk)
    mean_t = st.moment(1)
    slope_m = (st_dm.moment(1) - _mean_at_k_of(st, c, b, m, m + dm, lens, chunk)) / dm
    rho1 = np.clip(lam * slope_m, 0.0, 0.95)
    eps = np.where(m > 0, (mean_t - st.d) / np.maximum(m, 1e-300), st.one_prompt_mean())
    # D(b + 1) and a full prefill step t(b, C, C/2), one step-time evaluation
    both = perf.decode_step_s(c, np.stack([b + 1.0, b], axis=1), lens.ctx[:, None], _NEXT_AND_FULL[0] * chunk,
                              _NEXT_AND_FULL[1] * chunk)
    d_next = both[:, 0]
    t = np.where(saturated, np.inf, mean_t)
    return State(b, t, st, d_next - st.d, eps, rho1, both[:, 1], saturated, d_next)


def _mean_at_k_of(st: Steps, c: Configs, b: np.ndarray, m: np.ndarray, m_upper: np.ndarray,
                  lens: RowLengths, chunk: int) -> np.ndarray:
    """E[T] at (b, m) (``st``'s mean) resolved to the prompt count of the point m_upper, for the
    difference quotient dE[T]/dm: where m and m + δm straddle a step of the resolved count (``step_k_rows``:
    one more prompt in the table) the two means carry different truncations of the count's tail, and their
    difference (0.07 % of E[T], llama-2-7b fp8 tp8 on gaudi2 at 13.97 req/s) over δm = 1 % of m read as a
    slope 10 % too steep: ρ₁ 0.77 → 0.85, the batch's feedback doubled and the prefill queue at the top batch
    node unstable — a TTFT of ∞ over 0.15 % of λ below the capacity. Those rows are evaluated again at the
    upper point's count; the others keep ``st``'s mean."""
    mean = st.moment(1)
    k_lo, k_up = step_k_rows(m, lens.group, lens.n_groups), step_k_rows(m_upper, lens.group, lens.n_groups)
    rows = np.flatnonzero(k_lo != k_up)
    if not len(rows):
        return mean
    mean = mean.copy()
    mean[rows] = _steps(c.take(rows), b[rows], m[rows], lens.take(rows), chunk, k_up[rows]).moment(1)
    return mean


def _next_iterate(t: np.ndarray, h: np.ndarray, dh: np.ndarray, rate: np.ndarray, cap: np.ndarray, b_hump: np.ndarray,
                  bracket: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step of ``solve_state`` toward the smallest root of h at each row still moving, from h and h' at
    t and the batch b = rate·t: (next t, its move, saturated).

    - h' < 0: Newton, ``t − h/h'`` (at least t/2; h is not convex everywhere, the max() in the step time:
      a step past the root comes back with the next, negative, move);
    - h' >= 0, h <= 0: ``t + h``, back toward the root;
    - h' >= 0, h > 0 below the hump batch (``moe_hump_batch``): the fixed-point step ``t + h = E[T](t)``,
      which climbs the MoE hump without passing the smallest root (E[T] grows with t: t < t* gives
      E[T](t) < E[T](t*) = t*); at or beyond it, no root ahead: saturated;
    - a batch past the scheduler cap is saturated, but for a Newton step from below the hump batch (the
      tangent of the concave h there overshoots the root): that stops at the cap, and saturates only from
      there on;
    - an MoE row whose iterates bracket the root (``bracket`` = the last t with h > 0 and its h, the last
      t with h <= 0 and its h; lo < hi) with h' >= 0: the secant of the bracket instead of the two rules above.
    """
    rising = (dh >= 0) & (h > 1e-12 * t)
    hump = rate * t < b_hump
    climb = rising & hump
    sat = (rising & ~climb) | ~np.isfinite(h)
    move = np.where(sat, 0.0, np.where(climb, h, -h / np.where(dh < 0, dh, -1.0)))
    # an MoE row whose iterates bracket the root (lo_t < hi_t, h(lo) > 0 >= h(hi): a Newton step from
    # below the hump overshot it) and that would walk back by t + h (a fraction of a percent a step) or
    # saturate on a rising h (h wiggles by the tables' prompt counts; a root is known above): the secant
    lo_t, lo_h, hi_t, hi_h = bracket
    known = (b_hump > 0) & (lo_t < hi_t) & np.isfinite(h) & (dh >= 0)
    if np.any(known):
        lo_t, lo_h, hi_t, hi_h = (np.where(known, x, y) for x, y in ((lo_t, 0.0), (lo_h, 1.0), (hi_t, 1.0), (hi_h, 0.0)))
        secant = lo_t - lo_h * (hi_t - lo_t) / (hi_h - lo_h) - t
        move = np.where(known, secant, move)
        sat = sat & ~known
    t_new = np.maximum(t + move, 0.5 * t)
    past = rate * t_new > cap
    if not np.any(past & hump):
        return t_new, move, sat | past
    t_cap = cap / np.where(past, rate, 1.0)
    stop = past & hump & ~climb & (t < t_cap)
    return np.where(stop, t_cap, t_new), np.where(stop, t_cap - t, move), sat | (past & ~stop)


def moe_hump_batch(c: Configs) -> np.ndarray:
    """The running batch (N,) from which a decode step touches all but ``HUMP_UNTOUCHED`` of the routed
    experts, ``b = p·ln(δ)/ln(1 − k/E)`` (E experts, k per token, the ``b/p`` tokens of a pipeline stage's
    micro-batch: ``perf``'s ``E·(1 − (1 − k/E)^T)``); 0 for a dense model.

    Below it the step time is concave in b (each new sequence adds nearly k experts' reads), so
    ``h(t) = E[T](t) − t`` can rise and still turn down to a root; beyond it the step is a dense
    model's, near-convex, where a rising positive h means no root ahead."""
    m = c.model
    if not m.is_moe or m.num_experts <= m.experts_per_token:
        return np.zeros(len(c))
    per_stage = math.log(HUMP_UNTOUCHED) / math.log1p(-m.experts_per_token / m.num_experts)
    return np.asarray(c.pp, dtype=float) * per_stage


# (tokens, span) / C of the two steps ``solve_state`` times besides its tables: none, and a full chunk at C/2
_NEXT_AND_FULL = (np.array([0.0, 1.0]), np.array([0.0, 0.5]))
