"""An upper bound on the capacity at the SLO that costs no capacity search: for screening candidates.

``capacity_at_slo`` searches λ by regula falsi under a bracket top and caps the result at the
offline ceiling; the figures that bound its result are computed by the same functions the search
calls (``capacity._scheduler_cap_qps``, ``capacity._feasible_qps_bound``, ``capacity._offline_qps``,
which call ``perf``), so the bound follows any change of the performance model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from optimizer.models import perf
from optimizer.models.configs import Configs
from optimizer.models.serving.capacity import (
    SERVER_OFFLINE_CEILING,
    _feasible_qps_bound,
    _offline_qps,
    _scheduler_cap_qps,
    tiled_rows,
)
from optimizer.models.serving.rows import RowLengths
from optimizer.models.techniques import ServingTechnique
from workloads.spec import SLO, LengthDist

# The TPOT bound allows the p99 this much under its mean step (the quantile's own tolerance is 1e-4).
TPOT_BOUND_MARGIN = 0.01
# Bisection steps for the batch at which the decode step reaches the TPOT target (ratio 2^-40 of the bracket).
TPOT_BOUND_STEPS = 40


def capacity_upper_bound_sets(
    c: Configs,
    lengths: Sequence[tuple[LengthDist, LengthDist]],
    slo: SLO | None = None,
    technique: ServingTechnique | None = None,
    offline_ceiling: float | None = SERVER_OFFLINE_CEILING,
) -> list[np.ndarray]:
    """Per (prompt, output) pair of ``lengths``, req/s per configuration that ``capacity_at_slo_sets``
    (same arguments, any SLO) never exceeds:

        bound = min(λ_cap, λ_roof, λ_tpot, ceiling · λ_offline)   (0 where the configuration cannot run)

    - λ_cap = max_batch / (E[O−1]·D(1)) (``_scheduler_cap_qps``): the search's largest probe; its
      result is at most λ_cap in every branch (the bracket ``[λ_lo, min(λ_cap, λ_roof)]`` only
      shrinks, and a bracket top found feasible is replaced by λ_cap itself).
    - λ_roof (``_feasible_qps_bound``): the decode roofline at the memory- or scheduler-limited
      batch b_max, b_max / (E[O−1]·D(b_max)), and the compute roof, compute_bound_tokens_s /
      (E[L] + E[O−1]): no rate above it keeps the running batch within b_max (b/D(b) grows with b
      and the step time is at least D(b)), so the search's feasible probes all lie below it.
    - ceiling · λ_offline (``_offline_qps``, ``SERVER_OFFLINE_CEILING``): the search's result is
      capped there when it is positive (limited_by ``'utilization'``).

    - λ_tpot (``tpot_rate_bound``, when ``slo`` has a TPOT p99): the decode roofline at the batch
      whose decode-only step reaches the TPOT target.

    Other SLO terms only lower the capacity below these (none of the terms depends on the prefill
    chunk, so the bound holds for any ``prefill_chunk_tokens`` of the search). Configurations
    limited by ``'utilization'`` have capacity = bound; SLO-limited ones lie below it (the
    search's margins are ≥ 0 above its root).
    """
    n = len(c)
    tiled, lens = tiled_rows(c, lengths, technique)
    runnable = np.asarray(tiled.supported, dtype=bool) & np.asarray(tiled.runnable, dtype=bool)
    with np.errstate(all="ignore"):
        lam_cap = _scheduler_cap_qps(tiled, lens)
        roof = _feasible_qps_bound(tiled, lens)
        bound = np.fmin(lam_cap, roof)
        if slo is not None and slo.tpot_p99_ms is not None:
            bound = np.fmin(bound, tpot_rate_bound(tiled, lens, slo.tpot_p99_ms))
        if offline_ceiling is not None:
            ceiling = offline_ceiling * _offline_qps(tiled, lens)
            bound = np.where(ceiling > 0, np.fmin(bound, ceiling), bound)
    bound = np.where(runnable & ~np.isnan(bound), bound, 0.0)
    return [bound[g * n:(g + 1) * n] for g in range(len(lengths))]


def tpot_rate_bound(c: Configs, lens: RowLengths, tpot_p99_ms: float) -> np.ndarray:
    """req/s above which the TPOT p99 exceeds ``tpot_p99_ms`` (inf where no request decodes):
    ``λ_tpot = b_T / (E[O−1]·D(b_T))`` with ``D(b_T) = a·T·(1 + TPOT_BOUND_MARGIN)``.

    Why it bounds (the serving model's terms, ``serving.latency``): a request's TPOT is a mean of
    its steps divided by the tokens a step emits, a = ``tokens_per_step``; each step lasts at least
    the decode-only step D(b̄) of the mean running batch b̄ (``T = D(b̄) + g(K)``, g ≥ 0), and the
    request-weighted mean adds Cov(b, T)/b̄ ≥ 0; the p99 of every component of the TPOT mixture is at
    least its mean (normal, or a shifted gamma whose skewness is under 14), so a feasible rate has
    D(b̄) ≤ a·T, i.e. b̄ ≤ b_T (D grows with b). Little's law ``b̄ = λ·E[O−1]·t̄`` with ``t̄ ≥ D(b̄)``
    gives λ ≤ b̄/(E[O−1]·D(b̄)) ≤ b_T/(E[O−1]·D(b_T)) (b/D(b) grows with b). b_T is bracketed in
    [1e-3, max_batch] (the search's batch limit, ``_Search.margin``) and the bracket's top is used.
    """
    decodes = lens.mean_o1 > 0
    target = lens.tokens_per_step * tpot_p99_ms / 1e3 * (1.0 + TPOT_BOUND_MARGIN)
    b_max = np.asarray(c.batch_cap, dtype=float).copy()
    lo, hi = np.full(len(c), 1e-3), b_max.copy()
    meets = perf.decode_step_s(c, hi, lens.ctx) <= target  # the whole batch range meets it: b_T = max_batch
    for _ in range(TPOT_BOUND_STEPS):
        mid = np.sqrt(lo * hi)
        fast = perf.decode_step_s(c, mid, lens.ctx) <= target
        lo, hi = np.where(fast, mid, lo), np.where(fast, hi, mid)
    b_t = np.where(meets, b_max, hi)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = b_t / (np.where(decodes, lens.mean_o1, 1.0) * perf.decode_step_s(c, b_t, lens.ctx))
    return np.where(decodes & ~np.isnan(rate), rate, np.inf)
