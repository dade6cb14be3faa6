"""What-if scenarios: solve many variants of a plan, in parallel, in a stable order, on typed results.

Each scenario is solved independently (a pure function of the scenario, the plan its
candidates are computed from, the catalog override file and the calibration file), so results
are the same whatever the backend (``local`` process pool or ``ray``) and the number of
workers; they come back in the order of the scenario list as :class:`ScenarioResult`\\ s, each
holding its :class:`~optimizer.results.plan_result.PlanResult`.

Modes:
- ``min_cost``: the cheapest fleet that serves the scenario's demand (``optimize_plan``), simulated
  and re-sized as `gpuplan optimize` does (a fleet its simulator finds over an SLO is not reported as
  meeting it: a RAG plan at twice its rate came out $793,853 "ok" unsimulated, where optimize re-sized
  it to $942,396 after simulating a 74 ms TPOT p99 against a 50 ms SLO); Monte Carlo draws are not
  simulated (a ``scenario_not_simulated`` warning each).
- ``max_demand``: the largest common demand multiplier s that the scenario's limits can
  serve within SLOs — one MILP (:mod:`optimizer.whatif_demand`) — and the cheapest fleet at s,
  on the analytic model's capacities alone (not simulated: ``scenario_not_simulated``).

Shared candidates. Capacities at the SLOs do not depend on rates, budgets, power caps or
inventory, so scenarios that differ only in those share one candidate set
(:func:`candidate_key`): computed once per process — before the local workers fork, so a
budget sweep computes it once in all — and rebased onto each scenario's rates and limits.
One choice in a candidate set does depend on rates: whether a workload is split into
request-size buckets or planned whole (``optimizer.planning.bucketing``, decided on the
rates the set was computed from). Every scenario therefore gets its set from the *first*
scenario of the list with the same key (:func:`candidate_sources`; the base for a budget or
demand sweep), in every process and on every backend, so the answers do not depend on which
worker saw which scenario first. A scenario at other rates (a demand level, a max-demand
answer) keeps the base rates' split-or-whole choice, where a plain ``gpuplan optimize`` of
its plan would decide again at its own rates (the ``planned_whole`` note says which it is).

:func:`run_whatif` is the one call of ``gpuplan whatif``: scenarios, Monte Carlo draws
(:mod:`optimizer.whatif_uncertainty`), solves, the uncertainty summary.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from catalog.errors import GpuplanError
from catalog.load import Catalog, load_catalog
from optimizer.models.params import CalibrationParams, load_params
from optimizer.optimize import optimize_plan
from optimizer.planning.candidate_set import CandidateSet, fleet_problem, split_everywhere
from optimizer.planning.candidates import model_candidates
from optimizer.planning.diagnose import unservable
from optimizer.planning.milp.problem import FleetSolution
from optimizer.planning.milp.solve import solve_fleet
from optimizer.planning.solver_options import DEFAULT_N_BUCKETS, SolverOptions
from optimizer.results.plan_result import Diagnostic, PlanResult, record_json
from optimizer.whatif_demand import (
    MIN_DEMAND_MULTIPLIER,
    max_demand_multiplier,
    scaled,
    sized_candidates,
)
from optimizer.whatif_uncertainty import (
    UncertaintySummary,
    summarise_uncertainty,
    uncertainty_scenarios,
)
from optimizer.workers import capped_workers, run_pool
from workloads.load import resolve_catalog
from workloads.scenarios import Scenario, Uncertainty
from workloads.spec import Plan


@dataclass(frozen=True)
class ScenarioOptions:
    """What every scenario is solved with: the catalog and calibration files (None = shipped) and the solver."""

    catalog_path: str | None = None
    params_path: str | None = None
    solver: SolverOptions = SolverOptions()


@dataclass(frozen=True)
class ScenarioResult:
    """One scenario solved: its result at ``scale`` × the scenario plan's rates (1 but for max-demand)."""

    scenario: Scenario
    result: PlanResult
    scale: float = 1.0

    @property
    def demand_multiplier(self) -> float:
        """Served demand relative to the base file's: ``scale`` × the sweep's or draw's demand multiplier."""
        return self.scale * float(self.scenario.overrides.get("demand_multiplier", 1.0))

    @property
    def served_qps(self) -> float:
        """Σ of the workloads' rates at ``scale`` (0 without a plan)."""
        if not self.result.status.has_plan:
            return 0.0
        return sum(w.request_rate_qps for w in self.scenario.plan.workloads) * self.scale

    def to_json(self, *, with_plan: bool = True) -> dict[str, Any]:
        """One row of the comparison (``scenarios[]`` of the what-if JSON): cost, fleet by device,
        served demand, p99s vs SLOs, power; ``plan`` = the full plan result (``docs/plan-json.md``)."""
        s, r = self.scenario, self.result
        row: dict[str, Any] = {
            "name": s.name, "group": s.group, "mode": s.mode, "level": s.level, "overrides": s.overrides,
            "status": str(r.status),
            **record_json(r, ("status_detail", "objective", "objective_usd", "capex_usd", "annual_opex_usd",
                              "tco_usd", "power_kw", "gpus_total")),
            "fleet": {f.device: f.gpus for f in r.fleet},
            "demand_multiplier": self.demand_multiplier,
            "served_qps": self.served_qps,
            "simulated": r.verification is not None,
            # the simulator's verdict on the fleet (``Verification.verdict``): "missed" where a re-size could not
            # clear a miss (a budget or inventory bound, or the rounds spent), which the workloads' analytic met hides
            "simulation_verdict": r.verification.verdict if r.verification is not None else None,
            "workloads": [record_json(w, _ROW_WORKLOAD_KEYS) for w in r.workloads],
            "no_fleet_reason": r.no_fleet_reason(),
            # the scenario's power cap (null: none, or objective cloud, where it is not applied): a budget level that
            # leaves capex unspent is often held by it (planner review 26: $2.4 M bought what $2.0 M did at 87 of 90 kW)
            "max_power_kw": (r.assumptions.max_power_kw if r.assumptions is not None and r.objective != "cloud"
                             else None),
        }
        if with_plan:
            row["plan"] = r.to_json()
        return row


_ROW_WORKLOAD_KEYS = ("name", "qps", "met", "ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms",
                      "slo_ttft_p99_ms", "slo_tpot_p99_ms", "slo_e2e_p99_ms")


@dataclass(frozen=True)
class ScenarioJob:
    """A scenario and the plan its candidate set is computed from (:func:`candidate_sources`)."""

    scenario: Scenario
    candidates_from: Plan


@lru_cache(maxsize=4)
def _catalog(path: str | None) -> Catalog:
    return load_catalog(path)


@lru_cache(maxsize=4)
def _params(path: str | None) -> CalibrationParams:
    return load_params(path)


def _resolved(plan: Plan, options: ScenarioOptions) -> Catalog:
    return resolve_catalog(plan, _catalog(options.catalog_path), plan.name)


def _solve(plan: Plan, options: ScenarioOptions, cset: CandidateSet, start: FleetSolution | None = None, *,
           verify: bool = True) -> PlanResult:
    """optimize_plan on a scenario's plan with a shared candidate set (``start``: a feasible fleet).

    ``verify``: the fleet is simulated and its misses re-sized as `gpuplan optimize` does by default
    (``verify=None``: up to MAX_VERIFIED_DEPLOYMENTS online deployments), so a scenario's fleet is the one
    `gpuplan optimize` plans for the scenario's plan on the same candidates; without, the result carries a
    ``scenario_not_simulated`` warning (its p99s are the analytic model's alone).
    The one-device-type comparison (27 extra solves) is left to `gpuplan optimize`.
    """
    result = optimize_plan(plan, _resolved(plan, options), _params(options.params_path), options=options.solver,
                           compare_single_device=False, diagnose=True, candidates=cset, start=start,
                           verify=None if verify else False)
    if verify or not result.status.has_plan:
        return result
    note = Diagnostic("warning", "scenario_not_simulated",
                      "this scenario's fleet was not simulated (a budget level's most served demand, or a Monte Carlo "
                      "draw): its p99s are the analytic model's alone, where `gpuplan optimize` re-sizes the "
                      "deployments its simulator finds over their SLO; optimize the scenario's plan to check it")
    return replace(result, diagnostics=(*result.diagnostics, note))


def _feasible(plan: Plan, options: ScenarioOptions, cset: CandidateSet) -> bool:
    """Whether some fleet serves ``plan`` within its limits: the MILP with objective 0, which stops at
    the first fleet meeting every constraint (the bisection's probe, when the max-demand MILP cannot run)."""
    sized = sized_candidates(plan, cset, _resolved(plan, options), _params(options.params_path))
    if unservable(sized):
        return False
    return solve_fleet(fleet_problem(sized, plan), **options.solver.solve_kwargs, minimise="feasible").status.has_plan


# Plan fields that rebase_candidates takes from the plan itself: they never change capacities.
_REBASED_PLAN_FIELDS = ("name", "budget", "max_power_kw", "inventory")
_REBASED_WORKLOAD_FIELDS = ("qps", "tokens_per_day", "min_replicas", "redundancy")


def candidate_key(plan: Plan) -> str:
    """The plan without the fields a candidate set is rebased onto (rates, replica rules, limits)."""
    data = plan.model_dump(mode="json", exclude=set(_REBASED_PLAN_FIELDS))
    for w in data["workloads"]:
        for field in _REBASED_WORKLOAD_FIELDS:
            w.pop(field, None)
    return json.dumps(data, sort_keys=True)


def candidate_sources(scenarios: Sequence[Scenario]) -> list[ScenarioJob]:
    """Each scenario with the plan of the first scenario that has its :func:`candidate_key`."""
    first: dict[str, Plan] = {}
    return [ScenarioJob(s, first.setdefault(candidate_key(s.plan), s.plan)) for s in scenarios]


_CANDIDATE_CACHE: dict[tuple[str, ScenarioOptions], CandidateSet] = {}
_CANDIDATE_CACHE_SIZE = 16


def _candidates(source: Plan, options: ScenarioOptions) -> CandidateSet:
    """The candidate set computed from ``source``, once per process for each :func:`candidate_key`."""
    key = (candidate_key(source), options)
    if key not in _CANDIDATE_CACHE:
        if len(_CANDIDATE_CACHE) >= _CANDIDATE_CACHE_SIZE:
            _CANDIDATE_CACHE.pop(next(iter(_CANDIDATE_CACHE)))
        _CANDIDATE_CACHE[key] = model_candidates(source, _resolved(source, options), _params(options.params_path),
                                                 n_buckets=DEFAULT_N_BUCKETS)
    return _CANDIDATE_CACHE[key]


def share_candidates(jobs: Sequence[ScenarioJob], options: ScenarioOptions) -> None:
    """Compute the jobs' candidate sets here, once each, before the workers fork: they inherit
    ``_CANDIDATE_CACHE`` instead of each computing the same sets (a budget sweep shares one).
    Only as many distinct sets as the cache holds; the workers compute the rest."""
    for source in list({candidate_key(j.candidates_from): j.candidates_from for j in jobs}.values())[
            :_CANDIDATE_CACHE_SIZE]:
        _candidates(source, options)


def run_scenario(job: ScenarioJob, options: ScenarioOptions) -> ScenarioResult:
    """Solve one scenario in its mode (runs in a worker process)."""
    plan, cset = job.scenario.plan, _candidates(job.candidates_from, options)
    if job.scenario.mode != "max_demand":
        return ScenarioResult(job.scenario, _solve(plan, options, cset, verify=job.scenario.group != "samples"))
    s, fleet = max_demand_multiplier(plan, cset, _resolved(plan, options), _params(options.params_path),
                                     options.solver, lambda m: _feasible(scaled(plan, m), options, cset))
    if (split := split_everywhere(cset)) is not None:
        # the workloads planned whole alone, split, as optimize_plan's second solve tries them: a level serves the
        # larger demand (planner review 26: $770,000 served 0.97× where the base's split fleet, $750,000, serves 1×)
        s_split, _ = max_demand_multiplier(plan, split[0], _resolved(plan, options), _params(options.params_path),
                                           options.solver, lambda m: _feasible(scaled(plan, m), options, split[0]))
        if s_split > s:
            s, fleet = s_split, None  # that fleet is no incumbent of the whole-bucketed solve; optimize_plan finds it
    return ScenarioResult(job.scenario, _solve(scaled(plan, s or MIN_DEMAND_MULTIPLIER), options, cset, fleet,
                                               verify=False), s)


def _run_local(jobs: Sequence[ScenarioJob], options: ScenarioOptions, workers: int,
               progress: Callable[[int], None] | None) -> list[ScenarioResult]:
    """Serially, or on ``workers`` worker processes (optimizer.workers: they die with this
    process, ignore Ctrl-C, and are killed when it is interrupted)."""
    if workers <= 1:
        out = []
        for j in jobs:
            out.append(run_scenario(j, options))
            if progress:
                progress(1)
        return out
    if "fork" in multiprocessing.get_all_start_methods():
        share_candidates(jobs, options)  # the workers (forked) inherit the candidate sets
    return run_pool(functools.partial(run_scenario, options=options), jobs, workers, progress)


def _run_ray(jobs: Sequence[ScenarioJob], options: ScenarioOptions, address: str | None,
             progress: Callable[[int], None] | None) -> list[ScenarioResult]:
    try:
        import ray  # optional dependency: loaded only for --backend ray
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
        refs = [remote.remote(j, options) for j in jobs]
        out = []
        for ref in refs:  # in submission order
            out.append(ray.get(ref))
            if progress:
                progress(1)
        return out
    finally:
        if started_here and address is None:
            ray.shutdown()


BACKENDS = ("local", "ray")


def check_backend(backend: str) -> str:
    """``backend`` if it is one of BACKENDS, else a one-line error naming them."""
    if backend not in BACKENDS:
        raise GpuplanError(f"--backend: unknown backend '{backend}'; use {' or '.join(BACKENDS)}")
    return backend


def run_scenarios(scenarios: Sequence[Scenario], options: ScenarioOptions, *, workers: int | None = None,
                  backend: str = "local", address: str | None = None,
                  progress: Callable[[int], None] | None = None) -> list[ScenarioResult]:
    """Solve every scenario; results in the order given, identical for every backend and worker count."""
    check_backend(backend)
    jobs = candidate_sources(scenarios)
    if backend == "ray":
        return _run_ray(jobs, options, address, progress)
    return _run_local(jobs, options, capped_workers(workers, len(jobs)), progress)


@dataclass(frozen=True)
class WhatifStudy:
    """Every scenario's result, in file order (Monte Carlo draws last), and the draws' summary."""

    file: str
    results: tuple[ScenarioResult, ...]
    uncertainty: UncertaintySummary | None = None

    @property
    def samples(self) -> tuple[ScenarioResult, ...]:
        return tuple(r for r in self.results if r.scenario.group == "samples")

    def to_json(self, *, with_plans: bool = True) -> dict[str, Any]:
        """The what-if JSON: ``{file, scenarios: [row…], uncertainty?}`` (rows: :meth:`ScenarioResult.to_json`)."""
        out: dict[str, Any] = {"file": self.file, "scenarios": [r.to_json(with_plan=with_plans) for r in self.results]}
        if self.uncertainty is not None:
            out["uncertainty"] = self.uncertainty.to_json()
        return out


def run_whatif(file: str, scenarios: Sequence[Scenario], options: ScenarioOptions, *,
               uncertainty: Uncertainty | None = None, samples: int = 0, seed: int = 0,
               catalog: Catalog | None = None, workers: int | None = None, backend: str = "local",
               address: str | None = None, progress: Callable[[int], None] | None = None) -> WhatifStudy:
    """``gpuplan whatif``: the file's scenarios, plus ``samples`` Monte Carlo draws of its
    ``uncertainty`` section (seeded by ``seed``), solved; with draws, their summary
    (:func:`~optimizer.whatif_uncertainty.summarise_uncertainty` against the base scenario's fleet)."""
    if samples and not (uncertainty and (uncertainty.demand or uncertainty.prices)):
        raise GpuplanError(f"{file}: --samples needs an uncertainty section (demand: {{sigma}} and/or prices)")
    scenarios = list(scenarios)
    if samples:
        scenarios += uncertainty_scenarios(scenarios[0].plan, uncertainty, samples, seed,  # type: ignore[arg-type]
                                           catalog or _catalog(options.catalog_path))
    results = tuple(run_scenarios(scenarios, options, workers=workers, backend=backend, address=address,
                                  progress=progress))
    draws = [(r.scenario.level or 1.0, r.result) for r in results if r.scenario.group == "samples"]
    summary = summarise_uncertainty(results[0].result, draws, seed) if draws else None
    return WhatifStudy(file, results, summary)
