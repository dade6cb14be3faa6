"""Capacities of candidate configurations per request-size bucket: typed jobs, a memo, a worker pool.

A :class:`BucketJob` is one workload's configurations on one bucket; its capacities are
``capacity_at_slo`` of the serving model (req/s per replica at the SLO), or for a batch
workload the SLO-free throughput ``batch_throughput``. Results are memoised per process by
the job's digest (capacity does not depend on the rate, so what-if sweeps and repeated solves
reuse it). The colocated jobs that differ only by their bucket (a workload's buckets, split and
whole) run as one ``capacity_at_slo_sets`` search, and these families in a pool of forked worker
processes (optimizer.workers).
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from optimizer.models import disagg, serving
from optimizer.models.configs import Configs
from optimizer.models.params import CalibrationParams
from optimizer.models.techniques import ServingTechnique
from optimizer.planning import disk_cache
from optimizer.planning.candidate_set import BucketSpec, Combo
from optimizer.workers import capped_workers, run_pool, usable_cpus
from workloads.spec import Workload


def finite_or_zero(x: float) -> float:
    return float(x) if math.isfinite(x) and x > 0 else 0.0


@dataclass(frozen=True)
class BucketEvaluation:
    """Capacity (req/s per replica) of N configs on one bucket, what limits it, best p99s when 0."""

    capacity_qps: np.ndarray
    limited_by: list[str]
    floor_p99_ms: list[dict[str, float]]
    why: list[str | None]



@dataclass(frozen=True)
class BucketJob:
    """The configurations ``configs`` (one per ``chosen`` (device, precision, tp, pp[, ep, engine])) of workload
    ``workload`` on bucket ``bucket``, under calibration ``params``."""

    configs: Configs
    chosen: tuple[Combo, ...]
    bucket: BucketSpec
    workload: Workload
    params: CalibrationParams
    # a colocated replica, or one pool of a disaggregated pair ("prefill" | "decode"), with the
    # prefix cache / speculative decoding it uses (None: plain) and, for pools, each config's NIC Gb/s
    stage: str = "colocated"
    technique: ServingTechnique | None = None
    nic_gbps_per_gpu: tuple[float, ...] | None = None
    decode_side: disagg.DecodeSide | None = None  # prefill pools: the decode pools they budget for

    @cached_property
    def cache_key(self) -> tuple:
        """Everything the capacities depend on, as a compact digest (keys stay small when
        thousands of evaluations are held at once)."""
        devices = tuple(sorted({_json(c.device) for c in self.chosen}))
        combos = _combo_keys(self.chosen)
        b, w, params = self.bucket, self.workload, self.params
        full = (_json(self.configs.model), devices, combos, _json(b.prompt), _json(b.output), _json(w.slo),
                w.is_batch, tuple(self.configs.engines), _json(params))
        if self.stage != "colocated" or self.technique is not None:  # plain jobs keep today's keys
            full += (self.stage, repr(self.technique), self.nic_gbps_per_gpu)
        if self.decode_side is not None:
            full += (repr(self.decode_side),)
        return (len(self.chosen), hashlib.blake2b(repr(full).encode(), digest_size=20).hexdigest())

    @cached_property
    def family_key(self) -> tuple | None:
        """What jobs evaluated in one search share (everything but the bucket), or None for a job
        evaluated alone (batch workloads, disaggregated pools)."""
        if self.workload.is_batch or self.stage != "colocated":
            return None
        combos = _combo_keys(self.chosen)
        return (id(self.configs), combos, self.workload.slo.model_dump_json(), id(self.params), repr(self.technique))


def _combo_keys(chosen: Sequence[Combo]) -> tuple:
    """(device, precision, tp, pp) of every combo, with its ep when > 1 (keys of plain combos as before
    expert parallelism: the disk cache stays valid); the engines enter the keys through ``Configs.engines``."""
    return tuple((c.device.key, c.precision.key, c.tp, c.pp) + ((c.ep,) if c.ep > 1 else ()) for c in chosen)


def variant_job(chosen: Sequence[Combo], v, bucket: BucketSpec, workload: Workload,
                params: CalibrationParams) -> BucketJob:
    """The job of variant ``v`` (``candidates._Variant`` or a subset of its rows: configs, ``rows``
    of ``chosen``, stage, technique, NIC figures) on ``bucket``; candidates and screening build
    their jobs here, so that both give the same ``cache_key``."""
    return BucketJob(v.configs, tuple(chosen[i] for i in v.rows), bucket, workload, params, v.stage, v.technique,
                     v.nic_gbps_per_gpu, v.decode_side)


_CAPACITY_CACHE: dict[tuple, BucketEvaluation] = {}
_CAPACITY_CACHE_MAX = 512
_JSON_MEMO: dict[int, tuple[object, str]] = {}



def _json(obj) -> str:
    """``obj.model_dump_json()``, memoised by identity (the same catalog devices recur in every key)."""
    hit = _JSON_MEMO.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    if len(_JSON_MEMO) >= 4096:
        _JSON_MEMO.clear()
    text = obj.model_dump_json()
    _JSON_MEMO[id(obj)] = (obj, text)
    return text


def bucket_capacity(job: BucketJob) -> BucketEvaluation:
    """Capacity at the SLO of every config of ``job`` (memoised per process; see the module doc).

    NaN/inf from the serving model (saturated or unrunnable configs) count as 0 capacity.
    """
    key = ((job.cache_key,), job.cache_key)
    hit = _CAPACITY_CACHE.get(key)
    if hit is not None:
        return hit
    ev = disk_cache.cached("capacity", key[0], lambda: [_evaluate_bucket(job)])[0]
    _remember(key, ev)
    return ev


def _remember(key: tuple, ev: BucketEvaluation) -> None:
    if len(_CAPACITY_CACHE) >= _CAPACITY_CACHE_MAX:
        _CAPACITY_CACHE.clear()
    _CAPACITY_CACHE[key] = ev


def _evaluate_bucket(job: BucketJob) -> BucketEvaluation:
    """``bucket_capacity`` without the memo."""
    configs, b, w, params = job.configs, job.bucket, job.workload, job.params
    n = len(job.chosen)
    with np.errstate(all="ignore"):
        if w.is_batch:
            _, req_s = serving.batch_throughput(configs, b.prompt, b.output, params)
            ev = BucketEvaluation(np.array([finite_or_zero(x) for x in req_s]), ["throughput"] * n,
                                  [{} for _ in range(n)], [None] * n)
        elif job.stage != "colocated":
            ev = _evaluate_pool(job)
        else:
            cap = serving.capacity_at_slo_sets(configs, [(b.prompt, b.output)], w.slo, params, technique=job.technique,
                                               p99s_at_capacity=False)[0]
            ev = _colocated_evaluation(cap, n)
    return ev


def _colocated_evaluation(cap: serving.Capacity, n: int) -> BucketEvaluation:
    """The evaluation of ``n`` configurations from their capacity at the SLO: 0 where not finite,
    and for an unservable one the best p99s it reaches and why (the p99s at capacity are not needed:
    ``p99s_at_capacity=False``)."""
    floors: list[dict[str, float]] = []
    for i in range(n):
        floor = {}
        if cap.limited_by[i] == "unservable":
            for m in ("ttft", "tpot", "e2e"):
                v = float(getattr(cap, f"{m}_p99_ms")[i])
                if math.isfinite(v):
                    floor[f"{m}_p99_ms"] = v
        floors.append(floor)
    return BucketEvaluation(np.array([finite_or_zero(x) for x in cap.max_qps]), list(cap.limited_by),
                            floors, [cap.why[i] if cap.limited_by[i] == "unservable" else None for i in range(n)])


def _evaluate_family(jobs: Sequence[BucketJob]) -> list[BucketEvaluation]:
    """``_evaluate_bucket`` of each of ``jobs`` (one ``family_key``: the same configurations on
    several buckets), in one ``capacity_at_slo_sets`` search when they are colocated jobs."""
    first = jobs[0]
    if len(jobs) == 1 or first.family_key is None:
        return [_evaluate_bucket(job) for job in jobs]
    with np.errstate(all="ignore"):
        caps = serving.capacity_at_slo_sets(first.configs, [(j.bucket.prompt, j.bucket.output) for j in jobs],
                                            first.workload.slo, first.params, technique=first.technique,
                                            p99s_at_capacity=False)
    return [_colocated_evaluation(cap, len(first.chosen)) for cap in caps]


def _evaluate_pool(job: BucketJob) -> BucketEvaluation:
    """Capacity of every config of ``job`` as replicas of a prefill or decode pool (``optimizer.models.disagg``)."""
    b, w = job.bucket, job.workload
    nic = np.array(job.nic_gbps_per_gpu, dtype=float)
    if job.stage == "prefill":
        pool = disagg.prefill_pool_capacity(job.configs, b.prompt, w.slo, nic, job.technique, job.params,
                                            decode=job.decode_side, output=b.output)
    else:
        pool = disagg.decode_pool_capacity(job.configs, b.prompt, b.output, w.slo, nic, job.technique, job.params)
    n = len(job.chosen)
    return BucketEvaluation(np.array([finite_or_zero(x) for x in pool.max_qps]), list(pool.limited_by),
                            [{} for _ in range(n)],
                            [pool.why[i] if pool.limited_by[i] == "unservable" else None for i in range(n)])


# Below this many bucket evaluations a worker pool costs more than it saves.
PARALLEL_MIN_JOBS = 4
_POOL_JOBS: list[list[BucketJob]] = []  # the job families of the pool being run (inherited by its forked workers)


def parallel_workers() -> int:
    """Worker processes for bucket evaluations: ``GPUPLAN_WORKERS`` if set, else the usable CPUs
    (capped by them either way; 1 = serial; parallel only where ``fork`` exists, so workers
    inherit the jobs without pickling, and never inside a worker process — what-if scenarios
    already run one per CPU)."""
    if "fork" not in multiprocessing.get_all_start_methods() or multiprocessing.parent_process() is not None:
        return 1
    env = os.environ.get("GPUPLAN_WORKERS", "").strip()
    try:
        requested = max(1, int(env)) if env else None
    except ValueError:
        requested = 1
    return capped_workers(requested, usable_cpus())


def _pool_job(i: int) -> list[BucketEvaluation]:
    return _evaluate_family(_POOL_JOBS[i])


def evaluate_buckets(jobs: Sequence[BucketJob]) -> dict[tuple, BucketEvaluation]:
    """The capacities of many jobs, by their ``cache_key``.

    Jobs are grouped by ``family_key`` (one search per family, ``_evaluate_family``); a family
    whose members are all memoised (under the family's member keys) comes from the cache, and the
    other families run in a pool of forked worker processes
    (``parallel_workers``) when there are at least PARALLEL_MIN_JOBS jobs and two families,
    serially otherwise. The serving model is pure, so the results are those of the serial path.
    """
    global _POOL_JOBS
    out: dict[tuple, BucketEvaluation] = {}
    unique: dict[tuple, BucketJob] = {}
    for job in jobs:
        unique.setdefault(job.cache_key, job)
    families: dict[object, list[tuple]] = {}
    for i, (key, job) in enumerate(unique.items()):
        families.setdefault(job.family_key if job.family_key is not None else ("alone", i), []).append(key)
    # A family's search gives each member its one-set figures only within rounding (1e-9), so
    # results are cached per family (its members' keys): the same call always yields the same bits,
    # whatever ran before in this process (determinism across backends and worker counts).
    todo: list[BucketJob] = []
    keys: list[tuple] = []
    groups: list[list[int]] = []
    for members in families.values():
        fam = tuple(members)
        hits = [_CAPACITY_CACHE.get((fam, k)) for k in members]
        if not all(h is not None for h in hits):  # then the disk: a family's results, one entry
            hits = disk_cache.get("capacity", fam)
            if hits is not disk_cache.MISSING and len(hits) == len(members):
                for k, ev in zip(members, hits, strict=True):
                    _remember((fam, k), ev)
            else:
                hits = None
        if hits is not None:
            out.update(zip(members, hits, strict=True))
            continue
        groups.append(list(range(len(todo), len(todo) + len(members))))
        todo.extend(unique[k] for k in members)
        keys.extend((fam, k) for k in members)
    workers = min(parallel_workers(), len(groups))
    if workers < 2 or len(todo) < PARALLEL_MIN_JOBS:
        done = [_evaluate_family([todo[i] for i in g]) for g in groups]
    else:
        # biggest first (more configs × buckets, longer), so the last family does not run alone
        groups.sort(key=lambda g: -len(todo[g[0]].chosen) * len(g))
        _POOL_JOBS = [[todo[i] for i in g] for g in groups]
        try:  # optimizer.workers: the workers die with this process and leave Ctrl-C to it
            done = run_pool(_pool_job, range(len(groups)), workers)
        finally:
            _POOL_JOBS = []
    results: list[BucketEvaluation] = [None] * len(todo)  # type: ignore[list-item]
    for g, evs in zip(groups, done, strict=True):
        for i, ev in zip(g, evs, strict=True):
            results[i] = ev
    for key, ev in zip(keys, results, strict=True):
        out[key[1]] = ev
        _remember(key, ev)
    for g in groups:  # on disk, one entry per family (keys[i][0]: the family's member keys)
        disk_cache.put("capacity", keys[g[0]][0], [results[i] for i in g])
    return out


