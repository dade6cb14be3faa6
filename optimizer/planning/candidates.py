"""Candidates: every way to serve each workload, with its capacity per bucket, cost and power.

A candidate k of workload w is (device, precision, tp, pp), keyed deterministically
(``h100_sxm__fp8__tp4__pp1``, the key of the MILP variable and of the workbook row).
Enumeration: every allowed device × every allowed precision the device runs × tp in
{1, 2, 4, 8} dividing gpus_per_node × pp in {1, 2, 4, 8} where needed to fit (the smallest
pp that fits at that tp, and none beyond). Each gets its capacity at the workload's SLO
(req/s per replica) in every request-size bucket — ``capacity_at_slo`` of the serving
model; for a batch workload the SLO-free throughput ``batch_throughput`` — its cost per
replica under the plan's objective and its power. An online workload is evaluated both
split into buckets and whole, and split only where that costs less alone
(:mod:`optimizer.planning.bucketing`: a split bucket must meet the p99s on its own).

Pruned candidates keep their reason (``pruned_reason``):

- device not allowed by the plan, or missing a figure the objective or a limit needs
  (``Device.unusable_for``);
- precision not run natively, model does not fit (the perf model's reason);
- no capacity at the SLO in any bucket (``limited_by`` says which p99 binds);
- dominated: within one device, m = ⌊g_a/g_b⌋ ≥ 1 copies of another candidate b use no
  more GPUs than a and give at least a's capacity in every bucket. Such an a is never
  needed: replacing each replica of a by m replicas of b keeps every constraint (GPUs,
  servers, power, inventory, min_replicas, N+1) and the cost.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from catalog.load import Catalog
from catalog.schema import Device
from optimizer.planning.bucketing import choose_bucketing, fold_notes, problem_parts
from optimizer.planning.milp import FleetProblem, Limits, UnitTerms
from optimizer.results.money import (
    MoneyAssumptions,
    UnitPrice,
    annual_opex_terms,
    capex_terms,
    objective_terms,
    power_kw_terms,
)
from optimizer.results.plan_result import Diagnostic
from optimizer.workers import capped_workers, run_pool, usable_cpus
from workloads.spec import LengthDist, Plan, Workload

TP_DEGREES = (1, 2, 4, 8)
PP_DEGREES = (1, 2, 4, 8)

# p99s (ttft, tpot, e2e) in ms of a candidate serving one bucket at a rate per replica.
Predictor = Callable[[str, int, float], tuple[float | None, float | None, float | None]]


@dataclass(frozen=True)
class BucketSpec:
    """One request-size bucket of a workload: its share of requests and its rate (req/s)."""

    index: int
    fraction: float
    qps: float
    label: str = ""
    prompt_tokens_mean: float | None = None
    output_tokens_mean: float | None = None
    prompt: LengthDist | None = None
    output: LengthDist | None = None


@dataclass(frozen=True)
class Candidate:
    """One way to serve a workload, with its capacity (req/s per replica) in every bucket."""

    workload: str
    key: str
    device: str
    precision: str
    tp: int
    pp: int
    gpus: int
    capacity_qps: tuple[float, ...]
    limited_by: tuple[str | None, ...]
    cost_per_replica_usd: float | None = None
    pruned_reason: str | None = None
    # Best p99 (ms) the candidate reaches at (near) zero load per bucket, where the serving
    # model gives it: {metric: value} — used to explain a workload no candidate can serve.
    floor_p99_ms: tuple[dict[str, float], ...] | None = None

    @property
    def kept(self) -> bool:
        return self.pruned_reason is None


@dataclass(frozen=True)
class UnitSpec:
    """A device (or capacity-table unit) with the figures money and the MILP need."""

    key: str
    gpus_per_node: int
    price: UnitPrice
    inventory_gpus: int | None = None
    allowed: bool = True
    device: Device | None = None


@dataclass(frozen=True)
class WorkloadCandidates:
    workload: Workload
    model: str
    buckets: tuple[BucketSpec, ...]
    candidates: tuple[Candidate, ...]
    predictor: Predictor | None = None

    @property
    def kind(self) -> str:
        return "batch" if self.workload.is_batch else "online"

    @property
    def kept(self) -> list[Candidate]:
        return [c for c in self.candidates if c.kept]


@dataclass(frozen=True)
class CandidateSet:
    workloads: tuple[WorkloadCandidates, ...]
    units: dict[str, UnitSpec]
    diagnostics: tuple[Diagnostic, ...] = field(default=())
    objective: str = ""  # the plan objective the set was computed for ("" = any)
    allowed_devices: tuple[str, ...] | None = None

    def workload(self, name: str) -> WorkloadCandidates:
        return next(wc for wc in self.workloads if wc.workload.name == name)


# ---------------------------------------------------------------------------------------
# Devices and money
# ---------------------------------------------------------------------------------------


def missing_figures(device: Device, plan: Plan) -> list[str]:
    """Figures this plan needs that ``device`` lacks, each with the field to add."""
    need = []
    if plan.objective in ("tco", "capex") and device.purchase_usd is None:
        need.append(f"purchase_usd (objective {plan.objective})")
    if plan.objective == "cloud" and device.cloud_usd_per_gpu_hour is None:
        need.append("cloud_usd_per_gpu_hour (objective cloud)")
    if device.tdp_w is None:
        if plan.objective == "tco":
            need.append("tdp_w (tco power cost)")
        elif plan.max_power_kw is not None:
            need.append("tdp_w (max_power_kw)")
    return need


def catalog_units(plan: Plan, catalog: Catalog) -> dict[str, UnitSpec]:
    """Every catalog device as a unit, with the plan's inventory and allowed-devices list.

    Without an ``allowed_devices`` list every datacenter device is allowed; consumer cards
    (``Device.consumer``, e.g. GeForce, whose licence restricts datacenter use) only when listed.
    """
    if plan.allowed_devices is not None:
        allowed = {catalog.device(d).key for d in plan.allowed_devices}
    else:
        allowed = {k for k, d in catalog.devices.items() if not d.consumer}
    inventory = {catalog.device(d).key: n for d, n in plan.inventory.items()}
    units = {}
    for key, dev in sorted(catalog.devices.items()):
        units[key] = UnitSpec(
            key=key, gpus_per_node=dev.gpus_per_node,
            price=UnitPrice(dev.purchase_usd, dev.cloud_usd_per_gpu_hour, dev.tdp_w),
            inventory_gpus=inventory.get(key), allowed=key in allowed, device=dev,
        )
    return units


def cost_per_replica_usd(unit: UnitSpec, gpus: int, a: MoneyAssumptions) -> float:
    """Objective $ of one replica: gpus · (per-GPU cost + per-server cost / gpus_per_node)."""
    t = objective_terms(unit.price, a)
    return gpus * (t.per_gpu + t.per_node / unit.gpus_per_node)


# ---------------------------------------------------------------------------------------
# Pruning
# ---------------------------------------------------------------------------------------


def dominated_by(a: Candidate, b: Candidate) -> int:
    """m ≥ 1 when m = ⌊g_a/g_b⌋ copies of b give at least a's capacity in every bucket, else 0."""
    if a.device != b.device or a.key == b.key or b.gpus > a.gpus:
        return 0
    m = a.gpus // b.gpus
    if all(m * cb >= ca for ca, cb in zip(a.capacity_qps, b.capacity_qps, strict=True)):
        return m
    return 0


def prune_dominated(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Mark kept candidates dominated by another kept one of the same device (see module doc).

    Ties (each dominates the other: same GPUs, same capacities) keep the first by
    (gpus, key), so exactly one of a group of equals survives.
    """
    kept = sorted((c for c in candidates if c.kept), key=lambda c: (c.device, c.gpus, c.key))
    by_device: dict[str, list[Candidate]] = {}
    for c in kept:
        by_device.setdefault(c.device, []).append(c)
    reasons: dict[str, str] = {}
    for group in by_device.values():
        for i, a in enumerate(group):
            for j, b in enumerate(group):
                if i == j or b.key in reasons:
                    continue
                m = dominated_by(a, b)
                if m and not (dominated_by(b, a) and j > i):
                    reasons[a.key] = (f"dominated by {m} × {b.key} ({m * b.gpus} GPUs, "
                                      f"at least its capacity in every bucket)")
                    break
    return [replace(c, pruned_reason=reasons[c.key]) if c.key in reasons else c for c in candidates]


# ---------------------------------------------------------------------------------------
# The MILP problem
# ---------------------------------------------------------------------------------------


def unit_terms(unit: UnitSpec, a: MoneyAssumptions) -> UnitTerms:
    return UnitTerms(
        device=unit.key, gpus_per_node=unit.gpus_per_node,
        objective_usd=objective_terms(unit.price, a), capex_usd=capex_terms(unit.price, a),
        annual_opex_usd=annual_opex_terms(unit.price, a), power_kw=power_kw_terms(unit.price, a),
        inventory_gpus=unit.inventory_gpus, allowed=unit.allowed,
    )


def fleet_problem(cset: CandidateSet, plan: Plan) -> FleetProblem:
    """The MILP data: demands per bucket, kept candidates with capacity, unit terms, limits."""
    a = MoneyAssumptions.from_plan(plan)
    demands, options = [], []
    for wc in cset.workloads:
        demand, opts = problem_parts(wc)
        demands.append(demand)
        options += opts
    used = {o.device for o in options}
    units = {k: unit_terms(u, a) for k, u in cset.units.items() if k in used}
    limits = Limits(plan.budget.capex_usd, plan.budget.annual_usd, plan.max_power_kw)
    return FleetProblem(tuple(demands), tuple(options), units, limits)


# ---------------------------------------------------------------------------------------
# Model-based candidates
# ---------------------------------------------------------------------------------------


def tp_degrees(device: Device) -> list[int]:
    """Tensor-parallel degrees within one server: {1, 2, 4, 8} dividing gpus_per_node."""
    return [t for t in TP_DEGREES if t <= device.gpus_per_node and device.gpus_per_node % t == 0]


def finite_or_zero(x: float) -> float:
    return float(x) if math.isfinite(x) and x > 0 else 0.0


def _bucket_specs(w: Workload, n_buckets: int) -> tuple[BucketSpec, ...]:
    """Request-size buckets: online workloads split by size (``split_buckets``); batch ones whole."""
    from optimizer.models.lengths import split_buckets

    rate = w.request_rate_qps
    parts = split_buckets(w.prompt_tokens, w.output_tokens, 1 if w.is_batch else n_buckets)
    return tuple(
        BucketSpec(i, b.fraction, b.fraction * rate, b.label, b.prompt.mean_tokens, b.output.mean_tokens,
                   b.prompt, b.output)
        for i, b in enumerate(parts)
    )


def _combos(w: Workload, catalog: Catalog, units: dict[str, UnitSpec], plan: Plan, n_buckets: int
            ) -> tuple[list[tuple], list[Candidate]]:
    """(device, precision, tp) triples to evaluate, and candidates pruned before any model runs."""
    from optimizer.models.perf import config_key

    todo, pruned = [], []
    zeros, nones = (0.0,) * n_buckets, (None,) * n_buckets
    for key, unit in units.items():
        dev = unit.device
        if dev is None:
            continue
        why = None
        if not unit.allowed:
            why = (f"{key} is a consumer card (licence restricts datacenter use); list it in allowed_devices to plan it"
                   if plan.allowed_devices is None else f"{key} is not in the plan's allowed_devices")
        elif unit.inventory_gpus == 0:
            why = f"inventory of {key} is 0"
        elif missing := missing_figures(dev, plan):
            why = f"{key} has no {', '.join(missing)}; add it with --catalog or the plan's devices section"
        for q_name in w.precisions:
            q = catalog.precision(q_name)
            q_why = why or q.unsupported_reason(dev)
            for t in tp_degrees(dev):
                if q_why is not None:
                    pruned.append(Candidate(w.name, config_key(dev, q, t, 1), key, q.key, t, 1, t, zeros, nones,
                                            pruned_reason=q_why))
                else:
                    todo.append((dev, q, t))
    return todo, pruned


@dataclass(frozen=True)
class _Prepared:
    """A workload before the serving model runs: its buckets, the configs to evaluate, early prunes."""

    model: object
    buckets: tuple[BucketSpec, ...]
    pruned: list[Candidate]
    chosen: list[tuple]
    configs: object | None

    def jobs(self, w: Workload, params) -> list[tuple]:
        """(configs, chosen, bucket, workload, params) of every bucket to evaluate."""
        return [(self.configs, self.chosen, b, w, params) for b in self.buckets] if self.chosen else []


def _prepare(w: Workload, plan: Plan, catalog: Catalog, units: dict[str, UnitSpec], params,
             n_buckets: int) -> _Prepared:
    """Enumerate, fit in memory (smallest pp that fits) and build the configs of one workload."""
    from optimizer.models.perf import build_configs

    model = catalog.model(w.model)
    buckets = _bucket_specs(w, n_buckets)
    todo, pruned = _combos(w, catalog, units, plan, len(buckets))

    # pp: the smallest degree that fits; pp = 1 is kept (pruned, with the memory reason) when it does not.
    grid = [(d, q, t, p) for d, q, t in todo for p in PP_DEGREES]
    fit = build_configs(model, grid, params) if grid else None
    chosen: list[tuple] = []
    for j, (d, q, t) in enumerate(todo):
        rows = range(j * len(PP_DEGREES), (j + 1) * len(PP_DEGREES))
        first = next((i for i in rows if fit.runnable[i]), None)
        if first is None or grid[first][3] > 1:
            # Record the pp = 1 config (pp was needed), or the largest pp tried when nothing fits.
            i = rows[0] if first is not None else rows[-1]
            p = grid[i][3]
            pruned.append(Candidate(w.name, fit.keys[i], d.key, q.key, t, p, t * p, tuple(0.0 for _ in buckets),
                                    tuple("memory" for _ in buckets),
                                    pruned_reason=fit.reason[i] or "does not fit in memory"))
        if first is not None:
            chosen.append(grid[first])
    configs = build_configs(model, chosen, params) if chosen else None
    return _Prepared(model, buckets, pruned, chosen, configs)


def _as_whole(w: Workload, prep: _Prepared) -> _Prepared | None:
    """The same configs with the workload as one bucket, when ``prep`` splits it (else None)."""
    if len(prep.buckets) < 2:
        return None
    pruned = [replace(c, capacity_qps=c.capacity_qps[:1], limited_by=c.limited_by[:1]) for c in prep.pruned]
    return replace(prep, buckets=_bucket_specs(w, 1), pruned=pruned)


def _finish(w: Workload, prep: _Prepared, units: dict[str, UnitSpec], params, a: MoneyAssumptions,
            prune: bool, evaluated: dict[tuple, BucketEvaluation] | None = None) -> WorkloadCandidates:
    """Capacities per bucket (``evaluated`` first, else ``bucket_capacity``), costs, pruning."""
    buckets, chosen, configs = prep.buckets, prep.chosen, prep.configs
    nb = len(buckets)
    kept: list[Candidate] = []
    if chosen:
        caps = np.zeros((len(chosen), nb))
        limited = [["" for _ in range(nb)] for _ in chosen]
        floors: list[list[dict[str, float]]] = [[{} for _ in range(nb)] for _ in chosen]
        whys: list[str | None] = [None] * len(chosen)
        for b in buckets:
            ev = evaluated.get(_cache_key(configs, chosen, b, w, params)) if evaluated else None
            if ev is None:
                ev = bucket_capacity(configs, chosen, b, w, params)
            caps[:, b.index] = ev.capacity_qps
            for i in range(len(chosen)):
                limited[i][b.index] = ev.limited_by[i]
                floors[i][b.index] = ev.floor_p99_ms[i]
                whys[i] = whys[i] or ev.why[i]
        for i, (d, q, t, p) in enumerate(chosen):
            capacity = tuple(finite_or_zero(x) for x in caps[i])
            reason = None
            if not any(capacity):
                reason = "no capacity at the SLO in any bucket" + (f": {whys[i]}" if whys[i] else "")
            kept.append(Candidate(
                w.name, configs.keys[i], d.key, q.key, t, p, t * p, capacity, tuple(limited[i]),
                cost_per_replica_usd(units[d.key], t * p, a), pruned_reason=reason, floor_p99_ms=tuple(floors[i]),
            ))
        if prune:
            kept = prune_dominated(kept)
    predictor = _predictor(prep.model, {c.key: c for c in kept}, chosen, buckets, params) if chosen else None
    return WorkloadCandidates(w, prep.model.key, buckets, tuple(kept + prep.pruned), predictor)


def workload_candidates(
    w: Workload, plan: Plan, catalog: Catalog, units: dict[str, UnitSpec], params, a: MoneyAssumptions,
    n_buckets: int, prune: bool = True,
) -> WorkloadCandidates:
    """Every candidate of one workload, evaluated in every bucket, pruned with reasons."""
    return _finish(w, _prepare(w, plan, catalog, units, params, n_buckets), units, params, a, prune)


@dataclass(frozen=True)
class BucketEvaluation:
    """Capacity (req/s per replica) of N configs on one bucket, what limits it, best p99s when 0."""

    capacity_qps: np.ndarray
    limited_by: list[str]
    floor_p99_ms: list[dict[str, float]]
    why: list[str | None]


_CAPACITY_CACHE: dict[tuple, BucketEvaluation] = {}
_CAPACITY_CACHE_MAX = 512


def _cache_key(configs, chosen: list[tuple], b: BucketSpec, w: Workload, params) -> tuple:
    """Everything a bucket's capacities depend on, as a compact digest (keys stay small when
    thousands of evaluations are held at once)."""
    import hashlib

    devices = tuple(sorted({_json(d) for d, _, _, _ in chosen}))
    combos = tuple((d.key, q.key, t, p) for d, q, t, p in chosen)
    full = (configs.model.model_dump_json(), devices, combos, b.prompt.model_dump_json(),
            b.output.model_dump_json(), w.slo.model_dump_json(), w.is_batch,
            params.model_dump_json() if hasattr(params, "model_dump_json") else repr(params))
    return (len(chosen), hashlib.blake2b(repr(full).encode(), digest_size=20).hexdigest())


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


def bucket_capacity(configs, chosen: list[tuple], b: BucketSpec, w: Workload, params) -> BucketEvaluation:
    """Capacity at the SLO of every config on one bucket (``capacity_at_slo``), or for a batch
    workload its SLO-free throughput (``batch_throughput``, req/s). Memoised per process:
    capacity does not depend on the rate, so what-if sweeps and repeated solves reuse it.

    NaN/inf from the serving model (saturated or unrunnable configs) count as 0 capacity.
    """
    key = _cache_key(configs, chosen, b, w, params)
    hit = _CAPACITY_CACHE.get(key)
    if hit is not None:
        return hit
    ev = _evaluate_bucket(configs, chosen, b, w, params)
    _remember(key, ev)
    return ev


def _remember(key: tuple, ev: BucketEvaluation) -> None:
    if len(_CAPACITY_CACHE) >= _CAPACITY_CACHE_MAX:
        _CAPACITY_CACHE.clear()
    _CAPACITY_CACHE[key] = ev


def _evaluate_bucket(configs, chosen: list[tuple], b: BucketSpec, w: Workload, params) -> BucketEvaluation:
    """``bucket_capacity`` without the memo."""
    from optimizer.models import serving

    n = len(chosen)
    with np.errstate(all="ignore"):
        if w.is_batch:
            _, req_s = serving.batch_throughput(configs, b.prompt, b.output, params)
            ev = BucketEvaluation(np.array([finite_or_zero(x) for x in req_s]), ["throughput"] * n,
                                  [{} for _ in range(n)], [None] * n)
        else:
            cap = serving.capacity_at_slo(configs, b.prompt, b.output, w.slo, params)
            floors: list[dict[str, float]] = []
            for i in range(n):
                floor = {}
                if cap.limited_by[i] == "unservable":
                    for m in ("ttft", "tpot", "e2e"):
                        v = float(getattr(cap, f"{m}_p99_ms")[i])
                        if math.isfinite(v):
                            floor[f"{m}_p99_ms"] = v
                floors.append(floor)
            ev = BucketEvaluation(np.array([finite_or_zero(x) for x in cap.max_qps]), list(cap.limited_by),
                                  floors, [cap.why[i] if cap.limited_by[i] == "unservable" else None
                                           for i in range(n)])
    return ev


# Below this many bucket evaluations a worker pool costs more than it saves.
PARALLEL_MIN_JOBS = 4
# Workloads whose configs are built and evaluated together (memory stays bounded for large plans).
WORKLOADS_PER_BATCH = 32
_POOL_JOBS: list[tuple] = []  # the jobs of the pool being run (inherited by its forked workers)


def parallel_workers() -> int:
    """Worker processes for bucket evaluations: ``GPUPLAN_WORKERS`` if set, else the usable CPUs
    (capped by them either way; 1 = serial; parallel only where ``fork`` exists, so workers
    inherit the jobs without pickling, and never inside a worker process — what-if scenarios
    already run one per CPU)."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods() or multiprocessing.parent_process() is not None:
        return 1
    env = os.environ.get("GPUPLAN_WORKERS", "").strip()
    try:
        requested = max(1, int(env)) if env else None
    except ValueError:
        requested = 1
    return capped_workers(requested, usable_cpus())


def _pool_job(i: int) -> BucketEvaluation:
    return _evaluate_bucket(*_POOL_JOBS[i])


def evaluate_buckets(jobs: Sequence[tuple]) -> dict[tuple, BucketEvaluation]:
    """The capacities of many (configs, chosen, bucket, workload, params) jobs, by cache key.

    Memoised ones come from the cache; the rest run in a pool of forked worker processes
    (``parallel_workers``) when there are at least PARALLEL_MIN_JOBS of them, serially
    otherwise. The serving model is pure, so the results are those of the serial path.
    """
    global _POOL_JOBS
    out: dict[tuple, BucketEvaluation] = {}
    todo: list[tuple] = []
    keys: list[tuple] = []
    seen: set[tuple] = set()
    for job in jobs:
        key = _cache_key(*job)
        if key in seen:
            continue
        seen.add(key)
        hit = _CAPACITY_CACHE.get(key)
        if hit is not None:
            out[key] = hit
        else:
            todo.append(job)
            keys.append(key)
    workers = min(parallel_workers(), len(todo))
    if workers < 2 or len(todo) < PARALLEL_MIN_JOBS:
        results = [_evaluate_bucket(*job) for job in todo]
    else:
        # biggest first (more configs, longer), so the last job does not run alone
        order = sorted(range(len(todo)), key=lambda i: -len(todo[i][1]))
        _POOL_JOBS = [todo[i] for i in order]
        try:  # optimizer.workers: workers die with this process and leave Ctrl-C to it
            done = run_pool(_pool_job, range(len(order)), workers)
        finally:
            _POOL_JOBS = []
        results = [None] * len(todo)  # type: ignore[list-item]
        for j, i in enumerate(order):
            results[i] = done[j]
    for key, ev in zip(keys, results, strict=True):
        out[key] = ev
        _remember(key, ev)
    return out


def _predictor(model, by_key: dict[str, Candidate], chosen: list[tuple], buckets, params) -> Predictor:
    """p99s (ms) of one candidate on one bucket at a rate per replica, via ``serve_at_rate``."""
    from optimizer.models import serving
    from optimizer.models.perf import build_configs, config_key

    combos = {config_key(d, q, t, p): (d, q, t, p) for d, q, t, p in chosen}
    cache: dict[str, object] = {}

    def predict(key: str, bucket: int, qps: float) -> tuple[float | None, float | None, float | None]:
        if qps <= 0 or key not in combos:
            return (None, None, None)
        if key not in cache:
            cache[key] = build_configs(model, [combos[key]], params)
        b = buckets[bucket]
        with np.errstate(all="ignore"):
            r = serving.serve_at_rate(cache[key], qps, b.prompt, b.output, params)
        return tuple(_finite(getattr(r, f"{m}_p99_ms")[0]) for m in ("ttft", "tpot", "e2e"))  # type: ignore[return-value]

    return predict


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def model_candidates(
    plan: Plan, catalog: Catalog, params=None, *, n_buckets: int = 4, prune: bool = True
) -> CandidateSet:
    """Candidates of every workload from the performance and serving models.

    ``prune=False`` keeps dominated candidates (for measuring what pruning buys).
    """
    from optimizer.models.params import load_params

    params = params if params is not None else load_params(None)
    units = catalog_units(plan, catalog)
    a = MoneyAssumptions.from_plan(plan)
    terms = {k: unit_terms(u, a) for k, u in units.items()}
    done: list[WorkloadCandidates] = []
    notes: list[Diagnostic] = []
    for start in range(0, len(plan.workloads), WORKLOADS_PER_BATCH):  # bounded memory for large plans
        batch = plan.workloads[start:start + WORKLOADS_PER_BATCH]
        prepared = [_prepare(w, plan, catalog, units, params, n_buckets) for w in batch]
        wholes = [_as_whole(w, prep) for w, prep in zip(batch, prepared, strict=True)]
        evaluated = evaluate_buckets([job for w, prep in zip(batch + batch, prepared + wholes, strict=True)
                                      if prep is not None for job in prep.jobs(w, params)])
        for w, prep, whole in zip(batch, prepared, wholes, strict=True):
            wc = _finish(w, prep, units, params, a, prune, evaluated)
            if whole is not None:  # split or whole: optimizer.planning.bucketing
                wc, note = choose_bucketing(wc, _finish(w, whole, units, params, a, prune, evaluated), terms)
                notes += [note] if note else []
            done.append(wc)
    workloads = tuple(done)
    diagnostics = fold_notes(notes)
    lacking = sorted(k for k, u in units.items() if u.device is not None and u.allowed
                     and missing_figures(u.device, plan))
    if lacking:
        diagnostics.append(Diagnostic("info", "devices_missing_figures",
                                      f"{len(lacking)} devices lack a figure this plan needs and were not "
                                      f"considered: {', '.join(lacking)}"))
    allowed = tuple(plan.allowed_devices) if plan.allowed_devices is not None else None
    return CandidateSet(workloads, units, tuple(diagnostics), plan.objective, allowed)
