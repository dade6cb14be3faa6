"""The optimizer's front door: plan in, :class:`~optimizer.results.plan_result.PlanResult` out.

``optimize_plan`` reads like its pipeline: candidates (from the performance and serving
models, or from a measured capacity table) → headroom (capacities at the plan's confidence
level and utilisation cap, rates at its demand quantile) → MILP data → solve → the
simulator's check, re-sizing missed deployments → diagnostics (why infeasible; the best
one-device fleet) → the typed result (:mod:`optimizer.assemble`) with its provenance and,
when asked, its sensitivity (:mod:`optimizer.planning.safeguards`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from catalog.errors import SolverError
from catalog.load import Catalog
from optimizer.assemble import assemble
from optimizer.models.params import load_params
from optimizer.planning.candidate_set import CandidateSet, fleet_problem, rebase_candidates
from optimizer.planning.candidates import model_candidates
from optimizer.planning.capacity_table import CapacityTable, load_capacity_table, table_candidates
from optimizer.planning.diagnose import (
    binding_limits,
    single_device_note,
    single_device_solution,
    unservable,
)
from optimizer.planning.headroom import capacity_factors, demand_factor, policy_of, sized
from optimizer.planning.milp import FleetSolution, SolverOptions, solve_fleet
from optimizer.planning.safeguards import (
    annotate,
    fidelity_map,
    verify_and_resize,
    verify_by_default,
)
from optimizer.planning.sensitivity import analyse
from optimizer.planning.shortlist import single_device_shortlist
from optimizer.results.plan_result import Diagnostic, PlanResult, Provenance, SolveStatus
from workloads.spec import Plan

DEFAULT_N_BUCKETS = 4


def optimize_plan(
    plan: Plan,
    catalog: Catalog,
    params=None,
    *,
    options: SolverOptions = SolverOptions(),
    source: Provenance = Provenance(),
    capacity_table: CapacityTable | Path | str | None = None,
    n_buckets: int = DEFAULT_N_BUCKETS,
    compare_single_device: bool = True,
    candidates: CandidateSet | None = None,
    diagnose: bool = True,
    sensitivity: bool = False,
    verify: bool | None = False,
) -> PlanResult:
    """The cheapest fleet for ``plan`` (catalog already resolved against the plan).

    ``params`` are the performance model's calibration (``optimizer.models.params.load_params``;
    None = shipped). With ``capacity_table`` the measured capacities replace the models.
    Never returns None: infeasible plans come back with status ``infeasible`` and
    diagnostics naming the cause. ``candidates`` reuses a candidate set computed for the
    same workloads (what-if sweeps over limits); budgets, power cap and the rates of its
    buckets then come from ``plan``. ``diagnose=False`` skips the extra solves that explain
    an infeasible plan (feasibility probes in what-if bisections).

    ``sensitivity`` adds the runner-up, break-evens and tornado swings (re-solves on the same
    candidates); ``verify`` re-checks online deployments by simulation and re-sizes misses
    (None = when the plan is small enough: ``verify_by_default``; never for a capacity table).
    """
    if n_buckets < 1:
        raise SolverError(f"n_buckets must be >= 1 (got {n_buckets}); e.g. --buckets 4")
    cset = plan_candidates(plan, catalog, params, capacity_table, n_buckets, candidates)
    model_params = None if capacity_table is not None else (params if params is not None else load_params(None))
    fidelity = fidelity_map(cset, model_params, catalog)
    cset = sized(cset, capacity_factors(plan, fidelity), demand_factor(plan))
    problem = fleet_problem(cset, plan)
    diagnostics = list(cset.diagnostics)
    if missing := unservable(cset):
        sol = FleetSolution(SolveStatus.INFEASIBLE, "; ".join(d.message for d in missing), solver=options.solver)
        return assemble(plan, cset, sol, diagnostics + missing, None, source)
    sol = solve_fleet(problem, **options.solve_kwargs)
    verification = None
    if sol.status.has_plan and model_params is not None and (verify or (verify is None and verify_by_default(cset, sol))):
        cset, resized, sol, verification = verify_and_resize(
            plan, cset, sol, catalog, model_params, lambda p: solve_fleet(p, **options.solve_kwargs))
        problem = resized or problem
    single = None
    if sol.status == SolveStatus.INFEASIBLE and diagnose:
        diagnostics += binding_limits(problem, **options.solve_kwargs)
    elif sol.status.has_plan and compare_single_device:
        single, single_sol = single_device_solution(single_device_shortlist(problem, options.gap),
                                                    **options.solve_kwargs)
        sol, fallback = one_device_fallback(sol, single_sol)
        diagnostics += [fallback] if fallback else []
        diagnostics.append(single_device_note(single, sol.objective_usd or 0.0))
    if sol.status == SolveStatus.FEASIBLE:
        diagnostics.append(Diagnostic("warning", "not_proven_optimal", sol.detail))
    result = annotate(assemble(plan, cset, sol, diagnostics, single, source, problem), plan, cset, fidelity,
                      verification)
    result = replace(result, headroom=policy_of(plan), verification=verification)
    if sensitivity and sol.status.has_plan:
        result = replace(result, sensitivity=analyse(plan, cset, problem, sol, fidelity, options))
    return result


def plan_candidates(plan: Plan, catalog: Catalog, params, capacity_table: CapacityTable | Path | str | None,
                    n_buckets: int, candidates: CandidateSet | None) -> CandidateSet:
    """The candidate set: ``candidates`` rebased onto ``plan``, a measured capacity table, or the models."""
    if candidates is not None:
        return rebase_candidates(candidates, plan)
    if capacity_table is not None:
        table = capacity_table if isinstance(capacity_table, CapacityTable) else load_capacity_table(capacity_table)
        return table_candidates(table, plan, catalog)
    return model_candidates(plan, catalog, params, n_buckets=n_buckets)


def one_device_fallback(sol: FleetSolution, single_sol: FleetSolution | None
                        ) -> tuple[FleetSolution, Diagnostic | None]:
    """The one-device fleet instead of a time-limited plan that costs more (seen at 500 workloads).

    That fleet satisfies every constraint, so it is a valid answer; the gap is recomputed
    against the main solve's proven bound.
    """
    if not (sol.status == SolveStatus.FEASIBLE and single_sol is not None and single_sol.objective_usd is not None
            and sol.objective_usd is not None and single_sol.objective_usd < sol.objective_usd):
        return sol, None
    note = Diagnostic(
        "warning", "time_limit_fallback",
        f"the solver stopped at its time limit with a ${sol.objective_usd:,.0f} plan; the cheapest one-device "
        f"fleet (${single_sol.objective_usd:,.0f}) is returned instead; raise --time-limit for a mixed fleet")
    bound = sol.bound_usd
    gap_now = (single_sol.objective_usd - bound) / single_sol.objective_usd if bound is not None else sol.gap
    return replace(single_sol, status=SolveStatus.FEASIBLE, gap=gap_now, bound_usd=bound,
                   solve_seconds=sol.solve_seconds + single_sol.solve_seconds,
                   detail=f"time limit reached; one-device fleet; gap {100 * (gap_now or 0):.1f} %"), note
