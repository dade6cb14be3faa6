"""Screening before the serving model: a configuration whose best-case capacity a smaller one already covers is
marked dominated without being evaluated.

Dominance pruning (``candidates.prune_dominated``) drops a candidate a when m = ⌊g_a/g_b⌋ copies of a
candidate b of the same device (and stage) carry at least a's capacity in every bucket. Where
``serving.capacity_upper_bound_sets`` (UB, ≥ the capacity at the SLO whatever the SLO) already gives
``m·cap_b ≥ UB_a ≥ cap_a`` in every bucket for an evaluated b, a is dominated whatever its search would
find, so it is not searched. The evaluation runs in three rounds over a whole batch of workloads (each
round costs the per-call overhead of one search per family, ``evaluate.evaluate_buckets``):

1. per device, its configuration of the smallest GPU count with the largest bound (per workload and
   colocated variant: plain or with its speculative decoding), every configuration of the variants not
   screened (batch workloads, disaggregated pools);
2. per (device, GPU count), the configuration with the largest bound of those a round-1 configuration
   does not screen (``second_round``): the likeliest dominator of its own size (another precision or
   sharding of the same GPUs); only when enough rows are open (``SECOND_ROUND_MIN_OPEN_ROWS``);
3. the others, but those dominated by a configuration of rounds 1-2 of their device and variant in the
   split buckets and in the whole-workload bucket (``_Sets``) alike.

Round 2 costs one more call and evaluates about a fifth fewer rows in all (20-workload benchmark,
``scripts/bench_candidates.py 20``: 4,694 → 3,687 of 9,039 screenable rows; docs/benchmarks.md).

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
from optimizer.models.serving.capacity import figure_classes
from optimizer.planning.evaluate import BucketEvaluation, BucketJob, evaluate_buckets, variant_job
from workloads.spec import Workload

NOT_EVALUATED = "not evaluated"
# Round 2 runs when at least this many rows are open after round 1 (over the batch): a round costs about one
# search's probe calls per family, ~4 ms each, a row ~0.15 ms a probe. Measured (`scripts/bench_candidates.py`,
# CPU): chat fleet, 108 open, 0.78 → 0.87 s with it; 5 workloads, 918 open, 5.2 → 4.4 s; 20, 4,214 open, 24.1 → 20.6 s.
SECOND_ROUND_MIN_OPEN_ROWS = 300


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


def with_twins(rows: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """``rows`` and every row of the same figure class (``capacity.figure_classes``): twins are searched
    in one call, which gives them the same capacity bit for bit, so dominance ties between them are
    broken by key order as in an unscreened evaluation, not by a search's last bracket."""
    return rows | np.isin(classes, classes[rows])


def second_round(devices: Sequence[str], gpus: np.ndarray, upper_qps: np.ndarray, open_rows: np.ndarray) -> np.ndarray:
    """Rows evaluated second: per (device, GPU count), the row of ``open_rows`` (neither evaluated nor
    screened yet) with the largest upper bound summed over the buckets (the first such row on a tie)."""
    best: dict[tuple[str, int], int] = {}
    for i in np.flatnonzero(open_rows):
        key = (devices[i], int(gpus[i]))
        j = best.get(key)
        if j is None or upper_qps[i].sum() > upper_qps[j].sum():
            best[key] = i
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
    """The capacities of every variant of ``items`` ((workload, split prep, whole prep or None)) in three
    rounds of ``evaluate_buckets`` (module doc); ``screen=False``: one round, everything evaluated."""
    sets = [_Sets(w, (p,) if whole is None else (p, whole), i) for w, p, whole in items for i in range(len(p.variants))]
    upper = {id(s): s.upper_bounds() for s in sets if screen and s.screenable}
    twins = {id(s): figure_classes(s.variant.configs) for s in sets if id(s) in upper}
    first = {id(s): with_twins(first_round(s.devices(), s.gpus(), np.hstack(upper[id(s)])), twins[id(s)])
             if id(s) in upper else np.ones(len(s.variant.rows), dtype=bool) for s in sets}
    subs1 = {id(s): _subset(s.variant, np.flatnonzero(first[id(s)])) for s in sets}
    jobs1 = {id(s): s.jobs(subs1[id(s)], params) for s in sets}  # built once: a job's cache key is a digest
    got = evaluate_buckets([j for s in sets for j in jobs1[id(s)]])
    parts: dict[int, list[tuple[np.ndarray, list[BucketJob]]]] = {id(s): [(first[id(s)], jobs1[id(s)])] for s in sets}
    reasons: dict[tuple[str, int, str], str] = {}
    open_rows: dict[int, np.ndarray] = {}  # rows neither evaluated nor screened yet
    for s in sets:
        if id(s) in upper:
            open_rows[id(s)], why = _screen(s, first[id(s)], ~first[id(s)], _gather(s, parts[id(s)], got), upper[id(s)])
            reasons.update(why)
    rounds = (False, True) if sum(int(o.sum()) for o in open_rows.values()) >= SECOND_ROUND_MIN_OPEN_ROWS else (True,)
    for last in rounds:  # round 2: each size's likeliest dominator; round 3: every row still open
        picks, jobs = {}, {}
        for s in sets:
            if id(s) in open_rows and open_rows[id(s)].any():
                picks[id(s)] = (open_rows[id(s)] if last else open_rows[id(s)] & with_twins(
                    second_round(s.devices(), s.gpus(), np.hstack(upper[id(s)]), open_rows[id(s)]), twins[id(s)]))
                jobs[id(s)] = s.jobs(_subset(s.variant, np.flatnonzero(picks[id(s)])), params)
        got.update(evaluate_buckets([j for s in sets if id(s) in jobs for j in jobs[id(s)]]))
        for s in sets:
            if id(s) not in picks:
                continue
            parts[id(s)].append((picks[id(s)], jobs[id(s)]))
            open_rows[id(s)] = open_rows[id(s)] & ~picks[id(s)]
            if not last and open_rows[id(s)].any():
                evaluated = np.logical_or.reduce([mask for mask, _ in parts[id(s)]])
                open_rows[id(s)], why = _screen(s, evaluated, open_rows[id(s)], _gather(s, parts[id(s)], got),
                                                upper[id(s)])
                reasons.update(why)
    evaluations = {}
    for s in sets:
        v, n = s.variant, len(s.variant.rows)
        fulls = jobs1[id(s)] if subs1[id(s)] is v else s.jobs(v, params)
        for full, piece in zip(fulls, _merge(parts[id(s)], got, n), strict=True):
            evaluations[full.cache_key] = piece
    return Screened(evaluations, reasons)


def _gather(s: _Sets, parts: list[tuple[np.ndarray, list[BucketJob]]], got: dict[tuple, BucketEvaluation]
            ) -> list[np.ndarray]:
    """Per prep, the (rows × buckets) capacities of the rows evaluated so far (0 elsewhere), from each
    evaluated piece's (rows, their jobs: ``_Sets.jobs`` of those rows)."""
    out = [np.zeros((len(s.variant.rows), len(p.buckets))) for p in s.preps]
    for mask, jobs in parts:
        jobs_left = iter(jobs)
        idx = np.flatnonzero(mask)
        for caps, p in zip(out, s.preps, strict=True):
            for b in p.buckets:
                caps[idx, b.index] = got[next(jobs_left).cache_key].capacity_qps
    return out


def _screen(s: _Sets, evaluated: np.ndarray, open_rows: np.ndarray, caps: list[np.ndarray], upper: list[np.ndarray]
            ) -> tuple[np.ndarray, dict[tuple[str, int, str], str]]:
    """The ``open_rows`` an ``evaluated`` row does not screen in every prep (still open), and the
    screened rows' reasons per prep."""
    v = s.variant
    keys = [v.prefix + k + v.suffix for k in v.configs.keys]
    devices, gpus = s.devices(), s.gpus()
    whys = [screen_rows(keys, devices, gpus, evaluated, cap, up) for cap, up in zip(caps, upper, strict=True)]
    screened = np.array([all(w[i] is not None for w in whys) for i in range(len(keys))]) & open_rows
    reasons = {(s.workload.name, len(p.buckets), keys[i]): w[i]
               for p, w in zip(s.preps, whys, strict=True) for i in np.flatnonzero(screened)}
    return open_rows & ~screened, reasons  # type: ignore[return-value]


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
