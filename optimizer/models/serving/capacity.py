"""Capacity at the SLO: the largest request rate per configuration with every p99 met and the KV cache fitting."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from optimizer.models import perf
from optimizer.models.configs import Configs
from optimizer.models.constants import DEFAULT_PREFILL_CHUNK_TOKENS
from optimizer.models.lengths import window_pair
from optimizer.models.params import CalibrationParams
from optimizer.models.serving.fixed_point import solve_state
from optimizer.models.serving.latency import (
    SLO_LIMITS,
    Z999,
    LoadResult,
    concave_step,
    evaluate_load,
    take_state,
)
from optimizer.models.serving.rows import RowLengths, row_lengths
from optimizer.models.serving.state import (
    BISECTION_ITERATIONS,
    CAPACITY_RTOL,
    lengths_for,
)
from optimizer.models.techniques import ServingTechnique
from workloads.spec import SLO, LengthDist

# A replica is not planned above this share of its offline throughput (all requests queued, the
# KV-limited batch running continuously: ``perf.offline_throughput_tokens_s``). Basis: measured
# Server/Offline throughput ratios of MLPerf Inference datacenter submissions (Llama-2-70B, whose
# Server scenario holds TTFT p99 <= 2 s and TPOT p99 <= 200 ms) lie between 0.88 and 0.97 (issue 14,
# https://mlcommons.org/benchmarks/inference-datacenter/, v4.1-v5.0 results, 2024-2025; not shipped):
# no measured server sustained its SLO closer to its offline maximum than 0.97, and the lowest is
# taken because beyond ~0.85 of the offline throughput the analytic p99s lose their agreement with
# the simulator (scripts/agreement.py: TTFT p99 −24 % for llama-3.1-8b fp8 on l40s at 0.89; the
# simulated replica of llama-3.1-70b fp8 on h200-sxm under chat lengths fell into a preemption
# cascade in 1 of 5 runs at 0.88, none at 0.83), while the uncapped capacity reached 0.96-0.99.
SERVER_OFFLINE_CEILING = 0.88


@dataclass(frozen=True)
class Capacity:
    """Largest request rate per configuration at which every given p99 SLO holds and KV fits.

    ``limited_by[i]`` is ``'ttft'``, ``'tpot'``, ``'e2e'``, ``'memory'`` (the KV cache) or ``'batch_cap'`` (the
    scheduler's cap on running sequences: ``--max-batch``, an engine's default) — the limit that binds just above
    ``max_qps`` —, ``'utilization'`` (capped at ``SERVER_OFFLINE_CEILING`` of the
    offline throughput), or ``'unservable'`` when even λ → 0 misses the SLO (then
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




def slo_targets(slo: SLO) -> dict[str, float]:
    return {k: getattr(slo, f"{k}_p99_ms") for k in SLO_LIMITS if getattr(slo, f"{k}_p99_ms") is not None}


def capacity_at_slo(
    c: Configs,
    prompt: LengthDist,
    output: LengthDist,
    slo: SLO,
    params: CalibrationParams | None = None,
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
    technique: ServingTechnique | None = None,
    offline_ceiling: float | None = SERVER_OFFLINE_CEILING,
) -> Capacity:
    """Max request rate (req/s) per configuration with every p99 in ``slo`` met and KV at p99.9 fitting.

    The result is at most ``offline_ceiling`` (default ``SERVER_OFFLINE_CEILING``, 0.88; the basis
    is at the constant) × the replica's offline request rate (limited_by ``'utilization'``); None:
    no ceiling (the model's own limits, as scripts/agreement.py loads the replicas).
    Feasible(λ) = not saturated ∧ KV fits ∧ every given p99 ≤ its target, assumed monotone
    in λ; its margin ``max(ln(p99/target), ln(kv_p999/kv_capacity), ln(b_p999/max_batch))`` (the KV and, at ep > 1,
    the running batch of one attention rank against the rank's cache and scheduler cap, ``latency.kv_per_rank``,
    ``latency.batch_per_rank``)
    (∞ when saturated) is continuous, so the root is found by regula falsi (Illinois) in
    ln λ, with a geometric bisection step whenever the upper end is saturated or the
    previous step did not halve the bracket, until the bracket is within CAPACITY_RTOL. Unservable = infeasible at λ_lo = 1e-6·(scheduler-cap
    rate). Bracket top: ``_feasible_qps_bound``, or for a dense model the offline ceiling when one probe there
    finds it infeasible (feasible: the capacity is the ceiling, no search; ``_probe_ceiling``). Each step evaluates only the
    configurations still bracketing (``Configs.take``), p99s only; configurations with the
    same figures (e.g. bf16 and fp16 where a device runs both alike) are searched once.
    ``technique``: prefix caching and speculative decoding (``optimizer.models.techniques``).
    """
    return capacity_at_slo_sets(c, [(prompt, output)], slo, params, prefill_chunk_tokens, technique, offline_ceiling)[0]


def capacity_at_slo_sets(
    c: Configs,
    lengths: Sequence[tuple[LengthDist, LengthDist]],
    slo: SLO,
    params: CalibrationParams | None = None,
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
    technique: ServingTechnique | None = None,
    offline_ceiling: float | None = SERVER_OFFLINE_CEILING,
    p99s_at_capacity: bool = True,
) -> list[Capacity]:
    """``capacity_at_slo`` of every configuration on each (prompt, output) pair of ``lengths`` (a
    workload's buckets), in one search over the G·N rows (``rows.RowLengths``): the capacities are
    those of one call per pair, within rounding, at about the numpy overhead of one.

    ``p99s_at_capacity=False`` skips the evaluation at capacity of the servable configurations
    (their p99s and ``at_capacity`` figures are NaN; capacities, limits and the unservable ones'
    best p99s are unchanged): what a planner that needs only the capacities asks."""
    n, g_sets = len(c), len(lengths)
    cap = _capacity(*tiled_rows(c, lengths, technique), slo, prefill_chunk_tokens, offline_ceiling, p99s_at_capacity)
    return [cap] if g_sets == 1 else [_rows_of(cap, slice(g * n, (g + 1) * n)) for g in range(g_sets)]


def tiled_rows(c: Configs, lengths: Sequence[tuple[LengthDist, LengthDist]],
               technique: ServingTechnique | None = None) -> tuple[Configs, RowLengths]:
    """The G·N rows of ``capacity_at_slo_sets``: the configurations (``technique`` applied) repeated
    once per (prompt, output) pair of ``lengths``, and each row's lengths (set g: rows g·N..(g+1)·N−1), each pair
    cut to the model's context window (``lengths.window_pair``)."""
    active = technique is not None and technique.active
    window = c.model.max_context_tokens  # every pair cut to the context window, as the simulator cuts it
    sets = [lengths_for(*window_pair(p, o, window), technique) if active else lengths_for(*window_pair(p, o, window))
            for p, o in lengths]
    cc = technique.configure(c) if active else c
    n = len(c)
    return (cc if len(sets) == 1 else cc.take(np.tile(np.arange(n), len(sets)))), row_lengths(sets, n)


def _rows_of(cap: Capacity, rows: slice) -> Capacity:
    """The capacity of the configurations at ``rows``."""
    at_cap = (LoadResult(*(getattr(cap.at_capacity, f.name)[rows] for f in fields(LoadResult)))
              if cap.at_capacity is not None else None)
    return Capacity(cap.max_qps[rows], cap.output_tokens_per_s[rows], cap.limited_by[rows], cap.why[rows],
                    cap.ttft_p99_ms[rows], cap.tpot_p99_ms[rows], cap.e2e_p99_ms[rows], at_cap)


def _capacity(c: Configs, lens: RowLengths, slo: SLO, prefill_chunk_tokens: int,
              offline_ceiling: float | None = SERVER_OFFLINE_CEILING, p99s_at_capacity: bool = True) -> Capacity:
    """``capacity_at_slo`` on configurations and per-row lengths with any technique applied."""
    runnable_idx = np.flatnonzero(np.asarray(c.supported, dtype=bool) & np.asarray(c.runnable, dtype=bool))
    if len(runnable_idx) < len(c):
        return _scatter_capacity(c, runnable_idx, _capacity(
            c.take(runnable_idx), lens.take(runnable_idx), slo, prefill_chunk_tokens, offline_ceiling,
            p99s_at_capacity) if len(runnable_idx) else None)
    targets = slo_targets(slo)
    first, inverse = _distinct_rows(c, lens.group)
    if len(first) < len(c):
        return _expand_capacity(c, inverse, _capacity(c.take(first), lens.take(first), slo, prefill_chunk_tokens,
                                                      offline_ceiling, p99s_at_capacity), targets)
    search = _Search(c, lens, prefill_chunk_tokens, targets)
    lam_cap = _scheduler_cap_qps(c, search.lens)
    lam_lo = lam_cap * 1e-6
    lam_hi = np.minimum(lam_cap, _feasible_qps_bound(c, search.lens))
    ceiling = (offline_ceiling * _offline_qps(c, search.lens) if offline_ceiling is not None
               else np.full(len(c), np.inf))
    f_lo, t_lo, _ = search.margin(np.arange(len(c)), lam_lo)
    ok_lo = f_lo <= 0
    t_lo = np.where(np.isfinite(t_lo), t_lo, np.nan)  # Newton warm start (from below)
    lo, hi = np.where(ok_lo, lam_lo, 0.0), lam_hi.copy()
    at_ceiling, f_hi, bind_hi = _probe_ceiling(search, ok_lo, lo, hi, ceiling, t_lo)
    lo, hi, bind_hi, t_lo = _bracket(search, ok_lo & ~at_ceiling, lo, hi, f_lo, t_lo, f_hi, bind_hi)
    # every probe feasible: check the bound itself; feasible there too → the scheduler cap binds
    ok_hi = np.zeros(len(c), dtype=bool)
    untested = np.flatnonzero(ok_lo & ~at_ceiling & (hi == lam_hi))
    if len(untested):
        f_b, _, _ = search.margin(untested, lam_hi[untested])
        at_bound = untested[f_b <= 0]
        lo[at_bound] = lam_hi[at_bound]
        if len(at_bound):
            f_cap, _, _ = search.margin(at_bound, lam_cap[at_bound])
            ok_hi[at_bound] = f_cap <= 0
            lam_hi[at_bound] = np.where(f_cap <= 0, lam_cap[at_bound], lam_hi[at_bound])
    max_qps = np.where(ok_lo & np.asarray(c.supported, dtype=bool), np.where(ok_hi, lam_hi, lo), 0.0)
    capped = (max_qps > ceiling) & (ceiling > 0) | at_ceiling
    max_qps = np.where(capped, ceiling, max_qps)
    # at capacity: TTFT and TPOT percentiles always, E2E (a costly L × O mixture) when it is an SLO
    # (Newton from the step time of the highest feasible probe, below both)
    need = search.need | {"ttft", "tpot"}
    if p99s_at_capacity:
        at_cap = evaluate_load(c, np.where(max_qps > 0, max_qps, lam_lo), search.lens, search.chunk, need, t0=t_lo)
    else:  # only the unservable rows, at λ_lo
        at_cap = _evaluate_rows(search, np.flatnonzero(max_qps <= 0), lam_lo, need, t_lo)
    limited_by, why = _limits(search, at_cap, max_qps, hi, ok_lo, ok_hi | capped, bind_hi)
    for i in np.flatnonzero(capped):
        limited_by[i], why[i] = "utilization", None
    # unservable rows: at_cap is at λ_lo, the best they reach
    return Capacity.at(at_cap, max_qps, max_qps * search.lens.mean_o, limited_by, why)


def _evaluate_rows(search: _Search, rows: np.ndarray, lam: np.ndarray, need: set[str], t0: np.ndarray) -> LoadResult:
    """``evaluate_load`` of ``rows`` at ``lam[rows]`` as a LoadResult over every row (NaN elsewhere; the
    booleans False)."""
    n = len(search.c)
    sub = (evaluate_load(search.c.take(rows), lam[rows], search.lens.take(rows), search.chunk, need, t0=t0[rows])
           if len(rows) else None)
    out = {}
    for f in fields(LoadResult):
        boolean = f.name in ("saturated", "kv_fits")
        full = np.zeros(n, dtype=bool) if boolean else np.full(n, np.nan)
        if sub is not None:
            full[rows] = getattr(sub, f.name)
        out[f.name] = full
    return LoadResult(**out)


@dataclass(frozen=True)
class _Search:
    """What every probe of one capacity search shares: configurations, lengths, chunk, SLO targets."""

    c: Configs
    lens: RowLengths
    chunk: int
    targets: dict[str, float]

    @property
    def need(self) -> set[str]:
        return set(self.targets)

    @property
    def names(self) -> list[str]:
        """The terms of the margin, in order."""
        return ["memory", "batch_cap", *self.targets]

    def margin(self, rows: np.ndarray, lam: np.ndarray, t0: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """max over the limits of ln(value / limit) (> 0: infeasible; inf: saturated) at ``lam`` for ``rows``.

        Returns (margin, step time in s, index of the binding limit in ``names``, −1 when
        saturated); the tails are computed only where not saturated."""
        cs, ls = self.c.take(rows), self.lens.take(rows)
        st = solve_state(cs, lam, ls, self.chunk, t0)
        f = np.full(len(rows), np.inf)
        step_s = np.full(len(rows), np.inf)
        bind = np.full(len(rows), -1)
        live = np.flatnonzero(~st.saturated)
        if not len(live):
            return f, step_s, bind
        if len(live) < len(rows):
            cs, ls, lam, st = cs.take(live), ls.take(live), lam[live], take_state(st, live)
        r = evaluate_load(cs, lam, ls, self.chunk, self.need, p50=False, state=st)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = [np.log(r.kv_rank_p999_tokens / np.maximum(r.kv_rank_capacity_tokens, 1e-300)),
                     np.where(cs.ep == 1, np.log(np.maximum(r.running_batch + Z999 * np.sqrt(r.running_batch), 1e-300)
                                                 / cs.batch_cap),
                              np.log(np.maximum(r.batch_rank_p999, 1e-300) / r.batch_rank_cap))]
            terms += [np.log(getattr(r, f"{k}_p99_ms") / t) for k, t in self.targets.items()]
        terms = np.nan_to_num(np.array(terms), nan=np.inf)
        f_live = np.max(terms, axis=0)
        # not kv_fits: the KV cache (term 0) if it overflows, else the scheduler cap (term 1)
        bind[live] = np.where(r.saturated, -1, np.where(r.kv_fits, np.argmax(terms, axis=0), np.where(terms[0] > 0, 0, 1)))
        f[live] = np.where(r.saturated | ~r.kv_fits & (f_live <= 0), np.inf, f_live)  # kv_fits is the authority
        step_s[live] = r.step_ms / 1e3
        return f, step_s, bind


def _probe_ceiling(search: _Search, ok_lo: np.ndarray, lo: np.ndarray, hi: np.ndarray, ceiling: np.ndarray,
                   t_lo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One probe at the offline ceiling of the rows whose bracket holds it (``lo < ceiling < hi``).

    Feasible there: the margin being monotone in λ, the root is at or above the ceiling, so the
    capacity is the ceiling and the row needs no search (about a quarter of a large plan's rows,
    which the search used to converge above their cap). Infeasible: the ceiling becomes the
    bracket's top, with its margin, so regula falsi starts at once instead of bisecting down from
    the roofline bound. Updates ``lo``, ``hi`` and ``t_lo`` in place; returns (feasible at the
    ceiling, the margin at each top (∞: not probed), the binding limit there (−1: none)).

    Not for MoE models (``latency.concave_step``): their analytic TPOT p99 humped at mid load
    (mixtral-8x7b int8 tp2 on l40s, chat lengths: 54 ms at 0.5 req/s, 48 at 1.4, 50 at 2.4; the
    simulator rises 43.6, 47.5, 50.2), so a top inside the hump ended the search at the lower root
    (0.44 against 2.44 req/s at a 50 ms SLO). The size-biased MoE step (moehump) took that hump away,
    but with the probe two mixtral rows of the 20-workload benchmark still moved by −16 % and +7 %
    (a100-40gb int8 tp1 pp2, a100-80gb int8 tp8): their margins are not monotone everywhere yet, so
    MoE rows keep the bisection from the roofline bound."""
    n = len(lo)
    at_ceiling, f_hi, bind_hi = np.zeros(n, dtype=bool), np.full(n, np.inf), np.full(n, -1)
    rows = np.flatnonzero(ok_lo & (ceiling > lo) & (ceiling < hi)) if not concave_step(search.c) else []
    if not len(rows):
        return at_ceiling, f_hi, bind_hi
    f, t, b = search.margin(rows, ceiling[rows], t_lo[rows])
    ok = f <= 0
    at_ceiling[rows[ok]] = True
    lo[rows[ok]], t_lo[rows[ok]] = ceiling[rows[ok]], t[ok]
    top = rows[~ok]
    hi[top], f_hi[top], bind_hi[top] = ceiling[top], f[~ok], b[~ok]
    return at_ceiling, f_hi, bind_hi


def _bracket(search: _Search, ok_lo: np.ndarray, lo: np.ndarray, hi: np.ndarray, f_lo: np.ndarray,
             t_lo: np.ndarray, f_hi: np.ndarray, bind_hi: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Shrink [lo, hi] around the root of the margin by safeguarded regula falsi (Illinois) in λ,
    from the margins ``f_lo`` and ``f_hi`` at the ends (∞ at an unprobed top: infeasible by
    construction, checked by the caller) and the binding limit ``bind_hi`` at the top.

    Returns (lo, hi, the binding limit at the lowest infeasible probe (−1: none or saturated),
    the step time of the highest feasible probe)."""
    n = len(lo)
    bind_hi = bind_hi.copy()
    fl, fh = f_lo.copy(), f_hi.copy()
    side = np.zeros(n)
    stalls = np.zeros(n)  # consecutive steps that kept the same end
    for _ in range(BISECTION_ITERATIONS):
        rows = np.flatnonzero(ok_lo & (hi > lo * (1.0 + CAPACITY_RTOL)))
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
        f_mid, t_mid, b_mid = search.margin(rows, mid, t_lo[rows])
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
    return lo, hi, bind_hi, t_lo


def _limits(search: _Search, at_cap: LoadResult, max_qps: np.ndarray, hi: np.ndarray, ok_lo: np.ndarray,
            ok_hi: np.ndarray, bind_hi: np.ndarray) -> tuple[list[str], list[str | None]]:
    """The limit that binds just above each capacity (from the probe there, or 2 % above), and why when unservable."""
    c, targets = search.c, search.targets
    runnable = np.asarray(c.supported, dtype=bool)
    unknown = np.flatnonzero(ok_lo & ~ok_hi & (bind_hi < 0))
    above = (evaluate_load(c.take(unknown), np.minimum(hi, max_qps * 1.02)[unknown], search.lens.take(unknown),
                           search.chunk,
                           search.need, p50=False) if len(unknown) else None)
    where_unknown = {int(i): j for j, i in enumerate(unknown)}
    limited_by: list[str] = []
    why: list[str | None] = []
    for i in range(len(c)):
        if not runnable[i]:
            limited_by.append("unservable")
            why.append(c.reason[i] or "cannot run")
        elif not ok_lo[i]:
            limited_by.append("unservable")
            why.append(_unservable_why(at_cap, i, targets, c))
        elif ok_hi[i]:
            limited_by.append("batch_cap")
            per_rank = f" ({c.batch_cap[i] / c.ep[i]:,.0f} per attention rank)" if c.ep[i] > 1 else ""
            why.append(f"scheduler cap of {c.batch_cap[i]:,.0f} running sequences{per_rank}")
        else:
            limited_by.append(search.names[bind_hi[i]] if bind_hi[i] >= 0
                              else _binding(above, where_unknown[i], targets))  # type: ignore[arg-type]
            why.append(None)
    return limited_by, why


def _scheduler_cap_qps(c: Configs, lens: RowLengths) -> np.ndarray:
    """max_batch / (E[O−1]·D(1)) req/s: no replica holds more decoding sequences than its cap."""
    d1 = np.where(np.asarray(c.supported, dtype=bool), perf.decode_step_s(c, 1.0, lens.ctx), 1.0)
    return np.asarray(c.batch_cap, dtype=float) / (np.maximum(lens.mean_o1, 0.5) * d1)


def _offline_qps(c: Configs, lens: RowLengths) -> np.ndarray:
    """Requests/s of the replica when every request is queued (``perf.offline_throughput_tokens_s`` at
    the mean prompt and the mean decode steps + 1; 0 where not one sequence fits)."""
    steps = lens.mean_o1 + 1.0
    _, tput = perf.offline_throughput_tokens_s(c, np.maximum(lens.mean_l, 1.0), steps)
    return np.nan_to_num(tput, nan=0.0) / steps


def _feasible_qps_bound(c: Configs, lens: RowLengths) -> np.ndarray:
    """An upper bound on the feasible request rate (req/s), from two rooflines.

    - Decode: the batch is ``b = λ·E[O−1]·t̄`` with ``t̄ >= D(b)``, and feasibility needs
      ``b <= b_max = min(max_batch, kv_capacity / c̄)`` (mean KV ``b·c̄`` under the p99; over ep > 1 attention
      ranks e·floor(kv_capacity/(e·c̄)), ``_kv_batch``);
      b/D(b) grows with b, so ``λ <= b_max / (E[O−1]·D(b_max))`` (only when E[O−1] > 0).
    - Compute: every request needs ``E[L] + E[O−1]`` token passes at no more than
      ``compute_bound_tokens_s``, so ``λ <= compute_bound_tokens_s / (E[L] + E[O−1])``.
    """
    b_max = np.maximum(np.minimum(np.asarray(c.batch_cap, dtype=float), _kv_batch(c, lens)), 1.0)
    decodes = lens.mean_o1 > 0
    with np.errstate(divide="ignore"):
        bound = np.where(decodes, b_max / (np.where(decodes, lens.mean_o1, 1.0) * perf.decode_step_s(c, b_max, lens.ctx)),
                         np.inf)
    roof = perf.compute_bound_tokens_s(c) / np.maximum(lens.mean_l + lens.mean_o1, 1.0)
    out = np.fmin(bound, roof) * (1.0 + 1e-6)
    return np.where(np.isfinite(out) & (out > 0), out, np.inf)


def _kv_batch(c: Configs, lens: RowLengths) -> np.ndarray:
    """The replica's KV-limited batch: K/c̄ for one attention rank (ep 1, the mean occupancy b·c̄ under the
    p99.9); e·floor(K/(e·c̄)) = ``perf.max_sequences(c, c̄)`` over e > 1 attention ranks, each holding whole
    sequences of its own, which the per-rank p99.9 hold implies (``latency.kv_per_rank``): a rank whose
    budget holds 1.6 mean contexts runs at most 1, so ep4 at most 4 where the pooled K/c̄ said 6.4."""
    pooled = c.kv_capacity_tokens / np.maximum(lens.ctx, 1.0)
    ep = np.asarray(c.ep)
    if np.all(ep == 1):
        return pooled
    return np.where(ep > 1, perf.max_sequences(c, np.maximum(lens.ctx, 1.0)), pooled)


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


def figure_classes(c: Configs) -> np.ndarray:
    """Per configuration, the index of its class of configurations with the same figures (keys, devices
    and precisions aside: bf16 and fp16 where a device runs both alike), which serve alike."""
    return _distinct_rows(c, np.zeros(len(c), dtype=int))[1]


def _distinct_rows(c: Configs, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, inverse): the first row of each distinct configuration by every array figure
    (keys, devices and precisions aside) and length set ``group``, in order, and for every row the
    index of its own in ``first``. Rows with the same figures have the same serving behaviour."""
    figures = np.stack([np.asarray(getattr(c, f.name), dtype=float) for f in fields(c)
                        if isinstance(getattr(c, f.name), np.ndarray)] + [group.astype(float)], axis=1)
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
    """The limit violated (or closest to it) just above capacity: the KV cache ('memory') or the scheduler cap
    ('batch_cap') first, then the worst SLO ratio."""
    if r.saturated[i] and not targets:
        return "memory"
    if not r.kv_fits[i] and not r.saturated[i]:
        return "memory" if r.kv_rank_p999_tokens[i] > r.kv_rank_capacity_tokens[i] else "batch_cap"
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
        rank = (f" ({r.kv_rank_capacity_tokens[i]:,.0f} per attention rank)"
                if r.kv_rank_capacity_tokens[i] < r.kv_capacity_tokens[i] else "")
        parts.append(f"the KV cache ({r.kv_capacity_tokens[i]:,.0f} tokens{rank}) cannot hold even one request's "
                     "p99 context")
    return f"{c.keys[i]}: " + "; ".join(parts) if parts else f"{c.keys[i]}: cannot meet the SLO"
