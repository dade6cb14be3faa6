"""A whole ``optimize`` result on disk: a repeated ``gpuplan optimize`` of the same inputs reads it
back before the planning stack (models, MILP, simulator, solver) is even imported.

The key is every input of ``optimize_plan`` as the CLI calls it — the plan, the resolved catalog
(devices, models, precisions, platforms, aliases), the calibration, the solver options, the
plan file's name and sha256, the capacity table's sha256, the bucket count and the sensitivity
and verification switches — plus the disk cache's code fingerprint and gpuplan's version
(:mod:`optimizer.planning.disk_cache`). A result is stored only when it is reproducible: a plan
proven optimal, and no solve of the run stopped by its time limit (``CacheState.unsettled``:
a time-limited incumbent depends on the machine's speed). What varies between runs is
restamped on a hit: ``created_utc``, ``timings_s`` (0 but the total), ``solve_seconds`` and the
``seconds`` of the sensitivity and the verification (0: nothing was computed), ``cache``.
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import replace

from catalog.load import Catalog
from optimizer.planning import disk_cache
from optimizer.results.plan_result import PlanResult, Provenance, SolveStatus
from workloads.spec import Plan

# diagnostics of a plan that a longer time limit could change
UNSETTLED_CODES = frozenset({"time_limit_fallback", "not_proven_optimal"})


def catalog_key(cat: Catalog) -> tuple:
    """The catalog as plain data: every entry's JSON, in key order (~1 ms for the shipped one)."""
    tables = (cat.devices, cat.models, cat.precisions, cat.platforms)
    return (tuple(tuple((k, v.model_dump_json()) for k, v in sorted(t.items())) for t in tables),
            tuple(sorted(cat.model_aliases.items())), cat.override_file)


def result_key(plan: Plan, cat: Catalog, params_json: str | None, *, options: object, source: Provenance,
               capacity_table_sha256: str | None, n_buckets: int, sensitivity: bool, verify: bool | None) -> tuple:
    """Every input of the run (module doc); ``params_json``: the calibration's JSON (None: a capacity table)."""
    return (disk_cache.package_version("gpuplan"), plan.model_dump_json(), catalog_key(cat), params_json, repr(options), repr(source),
            capacity_table_sha256, n_buckets, sensitivity, verify)


def cached_result(key: tuple) -> PlanResult | None:
    """The stored result for ``key``, restamped (module doc), or None."""
    start = time.perf_counter()
    hit = disk_cache.get("result", key)
    if not isinstance(hit, PlanResult):
        return None
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    timings = {k: 0.0 for k in hit.timings_s}
    timings["total"] = time.perf_counter() - start
    stats = disk_cache.stats()
    return replace(hit, created_utc=stamp, timings_s=timings, solve_seconds=0.0,
                   sensitivity=replace(hit.sensitivity, seconds=0.0) if hit.sensitivity else None,
                   verification=replace(hit.verification, seconds=0.0) if hit.verification else None,
                   cache={"dir": stats["dir"], "hits": 1, "misses": 0})


def reproducible(result: PlanResult, unsettled_before: int) -> bool:
    """Proven optimal, with no time-limited solve since ``unsettled_before`` (module doc)."""
    return (result.status == SolveStatus.OPTIMAL and disk_cache.state().unsettled == unsettled_before
            and not any(d.code in UNSETTLED_CODES for d in result.diagnostics))


def store_result(key: tuple, result: PlanResult, unsettled_before: int) -> None:
    """Keep ``result`` for ``key`` when it is reproducible."""
    if reproducible(result, unsettled_before):
        disk_cache.put("result", key, result)
