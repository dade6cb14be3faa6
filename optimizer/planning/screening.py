"""Screening before the serving model: a configuration whose best-case capacity a smaller one already covers is
marked dominated without being evaluated.

Dominance pruning (``candidates.prune_dominated``) drops a candidate a when m = ⌊g_a/g_b⌋ copies of a
candidate b of the same device (and stage) carry at least a's capacity in every bucket. Where
``serving.capacity_upper_bound_sets`` (UB, ≥ the capacity at the SLO whatever the SLO) already gives
``m·cap_b ≥ UB_a ≥ cap_a`` in every bucket for an evaluated b, a is dominated whatever its search would
find, so it is not searched. The evaluation runs in two rounds over a whole batch of workloads (each
round costs the per-call overhead of one search per family, ``evaluate.evaluate_buckets``):

1. every configuration of the device's smallest GPU count (per workload and colocated variant: plain
   or with its speculative decoding), every configuration of the variants not screened (batch
   workloads, disaggregated pools);
2. the others, but those dominated by a round-1 configuration of their device and variant in the
   split buckets and in the whole-workload bucket (``_Sets``) alike.

Same kept set as without screening. A screened a has a dominator b with ``dominated_by(b, a) = 0``
(b has fewer GPUs, or more than UB_a ≥ cap_a in some bucket); ``prune_dominated`` marks every
candidate that has such a dominator among the evaluated ones (b, or transitively whoever marks b:
the marking is transitive and its chain ends at an unmarked one), and every candidate a dominated
dominates is dominated by b too, so leaving a out changes no other mark. b is taken with capacity in
every bucket, so no bucket's "unservable" diagnosis (which reads the candidates' floors) depends on
a, and from the same variant, so the plain colocated set the technique note plans
(``technique_savings``) still holds a's dominator. A screened candidate keeps capacity 0 with
``limited_by`` ``'not evaluated'`` and its reason says it was not evaluated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from optimizer.models import serving
from optimizer.models.params import CalibrationParams
from optimizer.planning.evaluate import BucketEvaluation, BucketJob, evaluate_buckets, variant_job
from workloads.spec import Workload

NOT_EVALUATED = "not evaluated"


def dominated_reason(m: int, key: str, gpus: int, screened: bool = False) -> str:
    """The pruning reason of a candidate dominated by ``m`` × candidate ``key`` of ``gpus`` GPUs."""
    tail = "; capacity not evaluated: its upper bound is within theirs" if screened else ""
    return f"dominated by {m} × {key} ({m * gpus} GPUs, at least its capacity in every bucket{tail})"


@dataclass(frozen=True)
class _Sets:
    """One workload's variant as evaluated: its prepared split (and whole, when split) forms."""

    workload: Workload
    preps: tuple  # candidates._Prepared, split first (duck-typed: candidates imports this module)
    index: int  # of the variant in each prep's ``variants``

    @property
    def variant(self):
        return self.preps[0].variants[self.index]

    @property
    def screenable(self) -> bool:
        return not self.workload.is_batch and self.variant.stage == "colocated" and len(self.variant.rows) > 1

    def jobs(self, sub, params: CalibrationParams) -> list[BucketJob]:
        """The jobs of ``sub`` (the variant or a subset of its rows) on every bucket of every prep."""
        return [variant_job(p.chosen, sub, b, self.workload, params) for p in self.preps for b in p.buckets]

    def upper_bounds(self) -> list[np.ndarray]:
        """Per prep, the (rows × buckets) upper bounds of the variant's capacities (``serving.bounds``)."""
        v = self.variant
        return [np.stack(serving.capacity_upper_bound_sets(v.configs, [(b.prompt, b.output) for b in p.buckets],
                                                           self.workload.slo, v.technique), axis=1)
                for p in self.preps]

    def gpus(self) -> np.ndarray:
        return np.array([self.preps[0].chosen[i].gpus for i in self.variant.rows])

    def devices(self) -> list[str]:
        return [self.preps[0].chosen[i].device.key for i in self.variant.rows]


def _subset(v, idx: Sequence[int]):
    """The variant restricted to its rows ``idx`` (the variant itself when that is all of them)."""
    if len(idx) == len(v.rows):
        return v
    nic = tuple(v.nic_gbps_per_gpu[i] for i in idx) if v.nic_gbps_per_gpu is not None else None
    return replace(v, rows=tuple(v.rows[i] for i in idx), configs=v.configs.take(list(idx)), nic_gbps_per_gpu=nic)


def first_round(devices: Sequence[str], gpus: np.ndarray, upper_qps: np.ndarray) -> np.ndarray:
    """Rows evaluated first: per device, the row of its smallest GPU count with the largest upper
    bound summed over the buckets (the likeliest dominator; the first such row on a tie)."""
    best: dict[str, int] = {}
    for i, (d, g) in enumerate(zip(devices, gpus, strict=True)):
        j = best.get(d)
        if j is None or (g, -upper_qps[i].sum()) < (gpus[j], -upper_qps[j].sum()):
            best[d] = i
    out = np.zeros(len(devices), dtype=bool)
    out[list(best.values())] = True
    return out


def screen_rows(keys: Sequence[str], devices: Sequence[str], gpus: np.ndarray, evaluated: np.ndarray,
                capacity_qps: np.ndarray, upper_qps: np.ndarray) -> list[str | None]:
    """For every row not ``evaluated``, the dominance reason when an evaluated row b of its device with
    capacity in every bucket covers its upper bound (``m·cap_b ≥ UB_a`` in every bucket, m = ⌊g_a/g_b⌋,
    and b not dominated by a: fewer GPUs, or more than UB_a in some bucket), else None.

    ``capacity_qps`` and ``upper_qps`` are (rows × buckets); b is the first by (GPUs, key)."""
    order = sorted((i for i in np.flatnonzero(evaluated) if np.all(capacity_qps[i] > 0)),
                   key=lambda i: (int(gpus[i]), keys[i]))
    out: list[str | None] = [None] * len(keys)
    for a in np.flatnonzero(~evaluated):
        for b in order:
            if devices[b] != devices[a] or gpus[b] > gpus[a]:
                continue
            m = int(gpus[a]) // int(gpus[b])
            if np.all(m * capacity_qps[b] >= upper_qps[a]) and (gpus[b] < gpus[a]
                                                                or np.any(capacity_qps[b] > upper_qps[a])):
                out[a] = dominated_reason(m, keys[b], int(gpus[b]), screened=True)
                break
    return out


@dataclass(frozen=True)
class Screened:
    """Evaluations by the full variant's job ``cache_key`` (rows not evaluated: capacity 0, limited_by
    ``NOT_EVALUATED``) and the reasons of the screened candidates by (workload, buckets, candidate key)."""

    evaluations: dict[tuple, BucketEvaluation]
    reasons: dict[tuple[str, int, str], str]


def evaluate_screened(items: Sequence[tuple[Workload, object, object | None]], params: CalibrationParams,
                      screen: bool = True) -> Screened:
    """The capacities of every variant of ``items`` ((workload, split prep, whole prep or None)) in two
    rounds of ``evaluate_buckets`` (module doc); ``screen=False``: one round, everything evaluated."""
    sets = [_Sets(w, (p,) if whole is None else (p, whole), i) for w, p, whole in items for i in range(len(p.variants))]
    upper = {id(s): s.upper_bounds() for s in sets if screen and s.screenable}
    first = {id(s): first_round(s.devices(), s.gpus(), np.hstack(upper[id(s)])) if id(s) in upper
             else np.ones(len(s.variant.rows), dtype=bool) for s in sets}
    subs1 = {id(s): _subset(s.variant, np.flatnonzero(first[id(s)])) for s in sets}
    jobs1 = {id(s): s.jobs(subs1[id(s)], params) for s in sets}  # built once: a job's cache key is a digest
    got = evaluate_buckets([j for s in sets for j in jobs1[id(s)]])
    reasons: dict[tuple[str, int, str], str] = {}
    second: dict[int, np.ndarray] = {}
    for s in sets:
        if id(s) in upper:
            caps = _gather(s, jobs1[id(s)], first[id(s)], got)
            second[id(s)], why = _second_round(s, first[id(s)], caps, upper[id(s)])
            reasons.update(why)
    jobs2 = {id(s): s.jobs(_subset(s.variant, np.flatnonzero(second[id(s)])), params) for s in sets
             if id(s) in second and second[id(s)].any()}
    got.update(evaluate_buckets([j for s in sets if id(s) in jobs2 for j in jobs2[id(s)]]))
    evaluations = {}
    for s in sets:
        v, n = s.variant, len(s.variant.rows)
        parts = [(first[id(s)], jobs1[id(s)])] + ([(second[id(s)], jobs2[id(s)])] if id(s) in jobs2 else [])
        fulls = jobs1[id(s)] if subs1[id(s)] is v else s.jobs(v, params)
        for full, piece in zip(fulls, _merge(parts, got, n), strict=True):
            evaluations[full.cache_key] = piece
    return Screened(evaluations, reasons)


def _gather(s: _Sets, jobs: list[BucketJob], mask: np.ndarray, got: dict[tuple, BucketEvaluation]
            ) -> list[np.ndarray]:
    """Per prep, the (rows × buckets) capacities of the evaluated rows ``mask`` (0 elsewhere), from
    their ``jobs`` (``_Sets.jobs`` of those rows)."""
    out = []
    jobs = iter(jobs)
    idx = np.flatnonzero(mask)
    for p in s.preps:
        caps = np.zeros((len(mask), len(p.buckets)))
        for b in p.buckets:
            caps[idx, b.index] = got[next(jobs).cache_key].capacity_qps
        out.append(caps)
    return out


def _second_round(s: _Sets, first: np.ndarray, caps: list[np.ndarray], upper: list[np.ndarray]
                  ) -> tuple[np.ndarray, dict[tuple[str, int, str], str]]:
    """Rows to evaluate in round 2 (not screened in every prep) and the screened rows' reasons per prep."""
    v = s.variant
    keys = [v.prefix + k + v.suffix for k in v.configs.keys]
    devices, gpus = s.devices(), s.gpus()
    whys = [screen_rows(keys, devices, gpus, first, cap, up) for cap, up in zip(caps, upper, strict=True)]
    screened = np.array([all(w[i] is not None for w in whys) for i in range(len(keys))]) & ~first
    reasons = {(s.workload.name, len(p.buckets), keys[i]): w[i]
               for p, w in zip(s.preps, whys, strict=True) for i in np.flatnonzero(screened)}
    return ~first & ~screened, reasons  # type: ignore[return-value]


def _merge(parts: list[tuple[np.ndarray, list[BucketJob]]], got: dict[tuple, BucketEvaluation], n: int
           ) -> list[BucketEvaluation]:
    """The evaluations of the full variant, job by job, from those of its evaluated pieces ((rows, their
    jobs)); rows not evaluated: capacity 0, ``NOT_EVALUATED``, no floor."""
    if len(parts) == 1 and parts[0][0].all():
        return [got[j.cache_key] for j in parts[0][1]]
    out = []
    for k in range(len(parts[0][1])):
        cap = np.zeros(n)
        limited: list[str] = [NOT_EVALUATED] * n
        floors: list[dict[str, float]] = [{} for _ in range(n)]
        why: list[str | None] = [None] * n
        for mask, part in parts:
            ev = got[part[k].cache_key]
            for j, i in enumerate(np.flatnonzero(mask)):
                cap[i], limited[i], floors[i], why[i] = ev.capacity_qps[j], ev.limited_by[j], ev.floor_p99_ms[j], ev.why[j]
        out.append(BucketEvaluation(cap, limited, floors, why))
    return out
