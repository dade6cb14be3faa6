"""What-if scenarios: solve many variants of a plan, in parallel, in a stable order.

Each scenario is solved independently (a pure function of the scenario, the catalog
override file and the calibration file), so results are the same whatever the backend
(``local`` process pool or ``ray``) and the number of workers; they come back in the
order of the scenario list.

Modes:
- ``min_cost``: the cheapest fleet that serves the scenario's demand (``optimize_plan``).
- ``max_demand``: the largest common demand multiplier s that the scenario's budget can
  serve within SLOs. Cost is non-decreasing in demand, so feasibility is monotone in s and
  s is found by bracketing and bisection to ``DEMAND_TOLERANCE`` relative.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from catalog.load import Catalog, load_catalog
from optimizer.planning.solver_options import SolverOptions
from workloads.load import resolve_catalog
from workloads.scenarios import Scenario, Uncertainty
from workloads.spec import Plan

DEMAND_TOLERANCE = 0.02
MAX_DEMAND_MULTIPLIER = 1024.0


@dataclass(frozen=True)
class ScenarioOptions:
    """What every scenario is solved with: the catalog and calibration files (None = shipped) and the solver."""

    catalog_path: str | None = None
    params_path: str | None = None
    solver: SolverOptions = SolverOptions()


@lru_cache(maxsize=4)
def _catalog(path: str | None) -> Catalog:
    return load_catalog(path)


@lru_cache(maxsize=4)
def _params(path: str | None):
    from optimizer.models.params import load_params

    return load_params(path)


def _scaled(plan: Plan, multiplier: float) -> Plan:
    data = plan.model_dump(mode="python", by_alias=True)
    for w in data["workloads"]:
        if w.get("qps") is not None:
            w["qps"] = w["qps"] * multiplier
        if w.get("tokens_per_day") is not None:
            w["tokens_per_day"] = w["tokens_per_day"] * multiplier
    return Plan.model_validate(data)


def _solve(plan: Plan, options: ScenarioOptions, *, full: bool, candidates=None):
    """optimize_plan on a scenario's plan; ``full=False`` skips the diagnostics a probe does not need.

    The one-device-type comparison (27 extra solves) is left to `gpuplan optimize`.
    """
    from optimizer.optimize import optimize_plan

    catalog = resolve_catalog(plan, _catalog(options.catalog_path), plan.name)
    return optimize_plan(plan, catalog, _params(options.params_path), options=options.solver,
                         compare_single_device=False, diagnose=full, candidates=candidates)


def _optimize(plan: Plan, options: ScenarioOptions) -> dict[str, Any]:
    return _solve(plan, options, full=True, candidates=_candidates(plan, options)).to_json()


# Plan fields that rebase_candidates takes from the plan itself: they never change capacities.
_REBASED_PLAN_FIELDS = ("name", "budget", "max_power_kw", "inventory")
_REBASED_WORKLOAD_FIELDS = ("qps", "tokens_per_day", "min_replicas", "redundancy")


def _candidate_key(plan: Plan) -> str:
    data = plan.model_dump(mode="json", exclude=set(_REBASED_PLAN_FIELDS))
    for w in data["workloads"]:
        for field in _REBASED_WORKLOAD_FIELDS:
            w.pop(field, None)
    return json.dumps(data, sort_keys=True)


_CANDIDATE_CACHE: dict[tuple[str, ScenarioOptions], Any] = {}
_CANDIDATE_CACHE_SIZE = 16


def _candidates(plan: Plan, options: ScenarioOptions):
    """The plan's candidate set, shared by plans that differ only in rates and limits.

    Capacities at the SLOs do not depend on rates, budgets or inventory, so a demand
    bisection or a budget sweep computes them once per worker process and
    ``optimize_plan`` rebases them onto each plan's rates and limits.
    """
    from optimizer.optimize import DEFAULT_N_BUCKETS
    from optimizer.planning.candidates import model_candidates

    key = (_candidate_key(plan), options)
    if key not in _CANDIDATE_CACHE:
        if len(_CANDIDATE_CACHE) >= _CANDIDATE_CACHE_SIZE:
            _CANDIDATE_CACHE.pop(next(iter(_CANDIDATE_CACHE)))
        catalog = resolve_catalog(plan, _catalog(options.catalog_path), plan.name)
        _CANDIDATE_CACHE[key] = model_candidates(plan, catalog, _params(options.params_path),
                                                 n_buckets=DEFAULT_N_BUCKETS)
    return _CANDIDATE_CACHE[key]


def max_demand(plan: Plan, options: ScenarioOptions) -> tuple[float, dict[str, Any]]:
    """Largest multiplier s of every workload's rate whose cheapest fleet fits the plan's limits.

    Bracket by doubling (or halving) from s = 1, then bisect until the bracket is within
    DEMAND_TOLERANCE. Probes reuse one candidate set and skip diagnostics; the answer is
    solved once more in full. Returns (s, full result at s); s = 0 (with the result at
    1/256) when nothing fits.
    """
    cset = _candidates(plan, options)

    def feasible(s: float) -> bool:
        return _solve(_scaled(plan, s), options, full=False, candidates=cset).status.has_plan

    def answer(s: float) -> dict[str, Any]:
        return _solve(_scaled(plan, s), options, full=True, candidates=cset).to_json()

    lo, hi = 0.0, 1.0
    if feasible(1.0):
        lo = 1.0
        while hi < MAX_DEMAND_MULTIPLIER:
            hi *= 2.0
            if not feasible(hi):
                break
            lo = hi
        else:
            return lo, answer(lo)
    else:
        probe = 1.0
        while probe > 1.0 / 256 and lo == 0.0:
            probe /= 2.0
            if feasible(probe):
                lo, hi = probe, probe * 2.0
        if lo == 0.0:
            return 0.0, answer(probe)
    while (hi - lo) / hi > DEMAND_TOLERANCE:
        mid = 0.5 * (lo + hi)
        if feasible(mid):
            lo = mid
        else:
            hi = mid
    return lo, answer(lo)


def summarise(scenario: Scenario, result: dict[str, Any], scale: float = 1.0) -> dict[str, Any]:
    """One row of the comparison: cost, fleet by device, served demand, p99s vs SLOs, power.

    ``scale`` multiplies the scenario plan's rates (the answer of a max-demand search);
    ``demand_multiplier`` is the served demand relative to the base file's: ``scale`` for
    a budget level, the level of a demand sweep or Monte Carlo draw, else 1.
    """
    plan_qps = sum(w.request_rate_qps for w in scenario.plan.workloads)
    multiplier = scale * float(scenario.overrides.get("demand_multiplier", 1.0))
    return {
        "name": scenario.name,
        "group": scenario.group,
        "mode": scenario.mode,
        "level": scenario.level,
        "overrides": scenario.overrides,
        "status": result["status"],
        "status_detail": result.get("status_detail", ""),
        "objective": result.get("objective"),
        "objective_usd": result.get("objective_usd"),
        "capex_usd": result.get("capex_usd"),
        "annual_opex_usd": result.get("annual_opex_usd"),
        "tco_usd": result.get("tco_usd"),
        "power_kw": result.get("power_kw"),
        "gpus_total": result.get("gpus_total"),
        "fleet": {row["device"]: row["gpus"] for row in result.get("fleet", [])},
        "demand_multiplier": multiplier,
        "served_qps": plan_qps * scale if result["status"] in ("optimal", "feasible") else 0.0,
        "workloads": [
            {k: w.get(k) for k in ("name", "qps", "met", "ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms",
                                   "slo_ttft_p99_ms", "slo_tpot_p99_ms", "slo_e2e_p99_ms")}
            for w in result.get("workloads", [])
        ],
        "plan": result,
    }


def run_scenario(scenario: Scenario, options: ScenarioOptions) -> dict[str, Any]:
    """Solve one scenario in its mode and summarise it (runs in a worker process)."""
    if scenario.mode == "max_demand":
        multiplier, result = max_demand(scenario.plan, options)
        return summarise(scenario, result, multiplier)
    return summarise(scenario, _optimize(scenario.plan, options))


def _run_local(scenarios: Sequence[Scenario], options: ScenarioOptions, workers: int,
               progress: Callable[[int], None] | None) -> list[dict[str, Any]]:
    if workers <= 1 or len(scenarios) <= 1:
        out = []
        for s in scenarios:
            out.append(run_scenario(s, options))
            if progress:
                progress(1)
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("fork") if hasattr(os, "fork") else None
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [pool.submit(run_scenario, s, options) for s in scenarios]
        out = []
        for f in futures:  # in submission order: results keep the scenario order
            out.append(f.result())
            if progress:
                progress(1)
        return out


def _run_ray(scenarios: Sequence[Scenario], options: ScenarioOptions, address: str | None,
             progress: Callable[[int], None] | None) -> list[dict[str, Any]]:
    from catalog.errors import GpuplanError

    try:
        import ray
    except ImportError:
        raise GpuplanError("--backend ray needs ray: pip install 'gpuplan[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     logging_level="ERROR", configure_logging=False)
        except Exception as exc:  # ray raises several types for a bad address
            raise GpuplanError(f"--address {address}: cannot connect to a Ray cluster ({exc}); "
                               "start one with `ray start --head` or use --address auto") from None
    try:
        remote = ray.remote(run_scenario)
        refs = [remote.remote(s, options) for s in scenarios]
        out = []
        for ref in refs:  # in submission order
            out.append(ray.get(ref))
            if progress:
                progress(1)
        return out
    finally:
        if started_here and address is None:
            ray.shutdown()


def run_scenarios(scenarios: Sequence[Scenario], options: ScenarioOptions, *, workers: int | None = None,
                  backend: str = "local", address: str | None = None,
                  progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Solve every scenario; results in the order given, identical for every backend and worker count."""
    if backend == "ray":
        return _run_ray(scenarios, options, address, progress)
    workers = workers or os.cpu_count() or 1
    return _run_local(scenarios, options, workers, progress)


def sample_uncertainty(base: Plan, uncertainty: Uncertainty, samples: int, seed: int) -> list[tuple[float, dict[str, float]]]:
    """K draws of (demand multiplier, {device: price multiplier}); seeded, deterministic.

    Demand: lognormal with median 1 and the given σ. Prices: uniform in [low, high].
    """
    rng = np.random.default_rng(seed)
    draws = []
    sigma = uncertainty.demand.sigma if uncertainty.demand else 0.0
    for _ in range(samples):
        demand = float(math.exp(rng.normal(0.0, sigma))) if sigma > 0 else 1.0
        prices = {k: float(rng.uniform(v.low, v.high)) for k, v in sorted(uncertainty.prices.items())}
        draws.append((demand, prices))
    return draws


def uncertainty_scenarios(base: Plan, uncertainty: Uncertainty, samples: int, seed: int,
                          catalog: Catalog) -> list[Scenario]:
    """One min-cost scenario per draw (demand scaled, device prices multiplied)."""
    out = []
    for i, (demand, prices) in enumerate(sample_uncertainty(base, uncertainty, samples, seed)):
        plan = _scaled(base, demand)
        if prices:
            data = plan.model_dump(mode="python", by_alias=True)
            devices = copy.deepcopy(data.get("devices") or {})
            for key, mult in prices.items():
                dev = catalog.device(key)
                fields = devices.setdefault(dev.key, {})
                for field in ("purchase_usd", "cloud_usd_per_gpu_hour"):
                    base_value = fields.get(field, getattr(dev, field))
                    if base_value is not None:
                        fields[field] = float(base_value) * mult
            data["devices"] = devices
            plan = Plan.model_validate(data)
        out.append(Scenario(name=f"sample-{i + 1}", group="samples", level=demand, plan=plan,
                            overrides={"demand_multiplier": demand, **{f"price:{k}": v for k, v in prices.items()}}))
    return out


def fixed_fleet_meets(base_result: dict[str, Any], multipliers: Sequence[float],
                      capacity_factors: Sequence[dict[str, float]] | None = None) -> list[bool]:
    """Whether the base plan's fleet still meets every SLO when all demand is scaled by each multiplier
    (and, with ``capacity_factors``, each device's capacity by that sample's model-error factor).

    A workload is met while its scaled rate is within the capacity at SLO of the replicas
    deployed for it (Σ factor[device] · capacity_qps of its deployments; routing is free to rebalance).
    """
    rates = {w["name"]: w["qps"] for w in base_result.get("workloads", [])}
    if not rates or base_result["status"] not in ("optimal", "feasible"):
        return [False for _ in multipliers]
    out = []
    for i, m in enumerate(multipliers):
        factors = capacity_factors[i] if capacity_factors is not None else {}
        capacity: dict[str, float] = {}
        for d in base_result.get("deployments", []):
            capacity[d["workload"]] = capacity.get(d["workload"], 0.0) + d["capacity_qps"] * factors.get(d["device"], 1.0)
        out.append(all(rates[n] * m <= capacity.get(n, 0.0) * (1 + 1e-9) for n in rates))
    return out


def model_error_draws(base_result: dict[str, Any], samples: int, seed: int) -> list[dict[str, float]]:
    """K draws of {device: capacity factor} for the devices of the base plan's deployments.

    Each device's log factor is normal with its fidelity band as 10th/90th percentile
    (``deployments[].fidelity``; ``optimizer.models.fidelity``): μ = (ln low + ln high)/2,
    σ = (ln high − ln low)/(2·1.2816). Devices of one fidelity class share one standard-normal
    draw per sample (a class's error is common to its devices: the same extrapolation).
    Seeded by ``seed + 1``, so the demand and price draws of ``sample_uncertainty`` stay as they were.
    """
    bands: dict[str, dict[str, Any]] = {}
    for d in base_result.get("deployments", []):
        if d.get("fidelity"):
            bands.setdefault(d["device"], d["fidelity"])
    classes = sorted({f["class"] for f in bands.values()})
    rng = np.random.default_rng(seed + 1)
    z90 = 1.2815515655446004
    draws = []
    for _ in range(samples):
        z = {c: float(rng.standard_normal()) for c in classes}
        row = {}
        for device, f in sorted(bands.items()):
            lo, hi = math.log(f["low_factor"]), math.log(f["high_factor"])
            row[device] = math.exp((lo + hi) / 2 + (hi - lo) / (2 * z90) * z[f["class"]])
        draws.append(row)
    return draws


def percentile(values: Sequence[float], q: float) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.percentile(finite, q)) if finite else None
