"""The optimizer's front door: plan in, :class:`~optimizer.results.plan_result.PlanResult` out.

``optimize_plan`` reads like its pipeline: request lengths cut to each model's context window
(:mod:`optimizer.planning.context_window`) → candidates (from the performance and serving
models, or from a measured capacity table) → headroom (capacities at the plan's confidence
level and utilisation cap, rates at its demand quantile) → MILP data → solve → the
simulator's check, re-sizing missed deployments → diagnostics (why infeasible; the best
one-device fleet) → the typed result (:mod:`optimizer.assemble`) with its provenance and,
when asked, its sensitivity (:mod:`optimizer.planning.safeguards`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from catalog.errors import SolverError
from catalog.load import Catalog
from optimizer.assemble import assemble
from optimizer.models.params import CalibrationParams, load_params
from optimizer.planning import disk_cache
from optimizer.planning.bucketing import SPLIT_TIE_RTOL, names_text
from optimizer.planning.candidate_set import (
    CandidateSet,
    fleet_problem,
    rebase_candidates,
    split_everywhere,
)
from optimizer.planning.candidates import model_candidates
from optimizer.planning.capacity_table import CapacityTable, load_capacity_table, table_candidates
from optimizer.planning.context_window import fit_plan_windows
from optimizer.planning.diagnose import (
    binding_limits,
    lower_binding_notes,
    single_device_note,
    single_device_solution,
    unservable,
)
from optimizer.planning.headroom import (
    candidate_capacity_factors,
    capacity_factors,
    demand_factor,
    policy_of,
    sized,
)
from optimizer.planning.known_limits import (
    cross_stack_notes,
    long_prompt_tpot_notes,
    measured_configuration_notes,
    pipeline_notes,
    size_routing_notes,
    unmeasured_engine_notes,
    unmeasured_kernel_notes,
)
from optimizer.planning.milp.decompose import decomposes, solve_decomposed
from optimizer.planning.milp.problem import FleetProblem, FleetSolution
from optimizer.planning.milp.resolve import cached_solve
from optimizer.planning.milp.restrict import RESTRICT_MIN_OPTIONS, solve_restricted
from optimizer.planning.milp.routing import balanced_routing
from optimizer.planning.milp.solve import solve_fleet
from optimizer.planning.milp.tiebreak import fewest_configurations
from optimizer.planning.safeguards import (
    annotate,
    candidate_fidelity,
    device_fidelity,
    fidelity_map,
    verify_and_resize,
    verify_by_default,
)
from optimizer.planning.sensitivity import analyse
from optimizer.planning.shortlist import single_device_shortlist
from optimizer.planning.solver_options import DEFAULT_N_BUCKETS, SolverOptions
from optimizer.planning.verify import MAX_VERIFIED_DEPLOYMENTS, online_deployments
from optimizer.results.plan_result import (
    Diagnostic,
    PlanResult,
    Provenance,
    SingleDeviceBest,
    SolveStatus,
)
from workloads.spec import Plan


def optimize_plan(
    plan: Plan,
    catalog: Catalog,
    params: CalibrationParams | None = None,
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
    start: FleetSolution | None = None,
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
    ``start``: a fleet known to satisfy every constraint of this plan (a what-if's max-demand
    fleet), the main solve's first incumbent.
    """
    if n_buckets < 1:
        raise SolverError(f"n_buckets must be >= 1 (got {n_buckets}); e.g. --n-buckets 4")
    clock = StageClock()
    plan, window_notes = fit_plan_windows(plan, catalog)
    raw = plan_candidates(plan, catalog, params, capacity_table, n_buckets, candidates)
    model_params = None if capacity_table is not None else (params if params is not None else load_params(None))
    cset, fidelity, widened = sized_set(plan, raw, model_params, catalog)
    clock.lap("candidates")
    problem = fleet_problem(cset, plan)
    diagnostics = window_notes + list(cset.diagnostics)
    if missing := unservable(cset):
        sol = FleetSolution(SolveStatus.INFEASIBLE, "; ".join(d.message for d in missing), solver=options.solver)
        clock.lap("solve")
        return clock.stamp(assemble(plan, cset, sol, diagnostics + missing, None, source))
    one_device: list[FleetSolution] = []  # every one-device plan solved: known plans of the sensitivity re-solves
    solve_started = time.perf_counter()
    sol, single, notes = solve_stage(problem, options, compare_single_device=compare_single_device,
                                     diagnose=diagnose, start=start, found=one_device)
    split = split_everywhere(raw) if sol.status in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE) else None
    if split is not None and (split_options := time_left(options, solve_started)) is None:
        notes.append(split_skipped(split[1], options))
        split = None
    if split is not None:
        # whole or split was chosen per workload alone; the fleet's whole servers can make split cheaper
        # without the one-device comparison (what-if scenarios) only a cheaper fleet matters: a cutoff prunes the rest
        cutoff = (sol.objective_usd * (1 - SPLIT_TIE_RTOL) if not compare_single_device and sol.status.has_plan
                  and sol.objective_usd is not None else None)
        tried = split_stage(plan, split[0], model_params, catalog, split_options, compare_single_device, diagnose,
                            cutoff)
        if tried is not None and split_is_cheaper(sol, tried.sol):
            # a workload the split fleet serves from one configuration needs no size-aware routing: whole again
            one = frozenset(n for n in split[1] if len({k for (w, k), r in tried.sol.replicas.items()
                                                         if w == n and r > 0}) == 1)
            if (one and len(one) < len(split[1]) and (fewer := split_everywhere(raw, frozenset(split[1]) - one))
                    and (revert_options := time_left(options, solve_started)) is not None):
                mixed = split_stage(plan, fewer[0], model_params, catalog, revert_options, compare_single_device,
                                    diagnose)
                if mixed is not None and not split_is_cheaper(mixed.sol, tried.sol):
                    tried, split = mixed, fewer
            tried.notes.append(split_note(split[1], tried.sol, sol))
            cset, fidelity, widened, problem, one_device = tried.cset, tried.fidelity, tried.widened, tried.problem, \
                tried.found
            sol, single, notes = tried.sol, tried.single, tried.notes
            diagnostics = window_notes + list(cset.diagnostics)
        elif tried is not None and sol.status == SolveStatus.INFEASIBLE and tried.sol.status == SolveStatus.INFEASIBLE:
            notes = lower_binding_notes(notes, tried.notes)  # the smaller value of a limit either way bucketed
        elif tried is not None and sol.status.has_plan and cheaper_single(tried.single, single):
            single = tried.single
            notes = [n for n in notes if n.code != "single_device_best"]
            notes.append(single_device_note(single, sol.objective_usd or 0.0))
    clock.lap("solve")
    verification = None
    if sol.status.has_plan and model_params is not None and (verify or (verify is None and verify_by_default(cset, sol))):
        resolved: list[tuple[FleetSolution, Diagnostic | None]] = []  # each re-size solve's plan and tie-break note
        cset, resized, sol, verification = verify_and_resize(plan, cset, sol, catalog, model_params,
                                                             lambda p: resize_solve(p, options, resolved))
        if resized is not None:  # the one-device comparison was made on the fleet before re-sizing
            problem = resized
            sol, single, notes = solve_stage(problem, options, compare_single_device=compare_single_device,
                                             diagnose=diagnose, solved=sol, found=one_device)
            notes += [note for plan_sol, note in resolved if plan_sol is sol and note is not None]
    elif sol.status.has_plan and model_params is not None and verify is None:
        notes = [*notes, verification_skipped(online_deployments(cset, sol))]
    diagnostics += notes
    result = annotate(assemble(plan, cset, sol, diagnostics, single, source, problem), plan, cset, fidelity,
                      verification, model_params, catalog, widened)
    result = replace(result, headroom=policy_of(plan), verification=verification)
    if known := [*long_prompt_tpot_notes(plan, result.deployments),
                 *measured_configuration_notes(plan, result.deployments, model_params, catalog, fidelity),
                 *unmeasured_engine_notes(result.deployments, model_params, catalog, plan.confidence),
                 *unmeasured_kernel_notes(plan, result.deployments, model_params, catalog),
                 *pipeline_notes(result.deployments, model_params, plan.confidence),
                 *cross_stack_notes(result.deployments, catalog),
                 *size_routing_notes(result.buckets, result.routing)]:
        result = replace(result, diagnostics=(*result.diagnostics, *known))
    clock.lap("verification")
    if sensitivity and sol.status is SolveStatus.OPTIMAL:
        result = replace(result, sensitivity=analyse(plan, cset, problem, sol, device_fidelity(fidelity, widened, cset), options,
                                                      known=one_device))
        clock.lap("sensitivity")
    elif sensitivity and sol.status.has_plan:
        result = replace(result, diagnostics=(*result.diagnostics, sensitivity_skipped(sol)))
    return clock.stamp(result)


def sized_set(plan: Plan, cset: CandidateSet, model_params: CalibrationParams | None, catalog: Catalog
              ) -> tuple[CandidateSet, dict, dict]:
    """``cset`` sized by the plan's policy (capacities × the fidelity band's factor at its confidence and
    target_utilization, rates × the demand quantile's factor), with the fidelity maps it was sized by."""
    fidelity = fidelity_map(cset, model_params, catalog)
    widened = candidate_fidelity(cset, fidelity, model_params, catalog)
    return (sized(cset, capacity_factors(plan, fidelity), demand_factor(plan),
                  candidate_capacity_factors(plan, fidelity, widened, cset)), fidelity, widened)


@dataclass
class SplitStage:
    """The solve stage on a candidate set with some workloads split (``split_everywhere``), and what the plan's
    result is then built from."""

    cset: CandidateSet
    fidelity: dict
    widened: dict
    problem: FleetProblem
    found: list[FleetSolution]
    sol: FleetSolution
    single: SingleDeviceBest | None
    notes: list[Diagnostic]


def split_stage(plan: Plan, raw: CandidateSet, model_params: CalibrationParams | None, catalog: Catalog,
                options: SolverOptions, compare_single_device: bool, diagnose: bool, cutoff: float | None = None
                ) -> SplitStage | None:
    """``solve_stage`` on ``raw`` sized by the plan's policy; None when some workload is unservable there.

    ``cutoff``: only a fleet whose objective is below it is looked for (``Limits.objective_usd``; none found reads
    infeasible, and is not diagnosed); the stage's ``problem`` is the plan's, without it (re-sizing and sensitivity
    re-solve it)."""
    cset, fidelity, widened = sized_set(plan, raw, model_params, catalog)
    if unservable(cset):
        return None
    problem, found = fleet_problem(cset, plan), []
    capped = problem if cutoff is None else replace(problem, limits=replace(problem.limits, objective_usd=cutoff))
    sol, single, notes = solve_stage(capped, options, compare_single_device=compare_single_device,
                                     diagnose=diagnose and cutoff is None, found=found)
    return SplitStage(cset, fidelity, widened, problem, found, sol, single, notes)


# The split solves run in what is left of the solve stage's time limit (--time-limit-s bounds the stage, not each
# of its solves); with less than this share of it left they are not tried
SPLIT_MIN_TIME_SHARE = 0.1


def time_left(options: SolverOptions, started: float) -> SolverOptions | None:
    """``options`` with the time limit cut to what is left of it since ``started`` (a perf_counter reading),
    or None when less than ``SPLIT_MIN_TIME_SHARE`` of it is left."""
    left = options.time_limit_s - (time.perf_counter() - started)
    return replace(options, time_limit_s=left) if left >= SPLIT_MIN_TIME_SHARE * options.time_limit_s else None


def split_skipped(names: tuple[str, ...], options: SolverOptions) -> Diagnostic:
    shown = names_text(names)
    return Diagnostic("info", "split_skipped",
                      f"{shown} (planned whole) not tried split into request-size buckets across the fleet: the first "
                      f"solve used more than {1 - SPLIT_MIN_TIME_SHARE:.0%} of the {options.time_limit_s:g} s limit; "
                      "raise --time-limit-s to try it (a split fleet can cost less where whole servers have idle GPUs)")


def split_is_cheaper(whole: FleetSolution, split: FleetSolution) -> bool:
    """The fleet with the alternatives split (``split_everywhere``) is kept when it has a plan and ``whole`` has
    none, or when it costs less by more than bucketing's ``SPLIT_TIE_RTOL`` (a tie stays whole, as alone)."""
    if not split.status.has_plan or split.objective_usd is None:
        return False
    if not whole.status.has_plan or whole.objective_usd is None:
        return True
    return split.objective_usd < whole.objective_usd * (1 - SPLIT_TIE_RTOL)


def cheaper_single(other: SingleDeviceBest | None, single: SingleDeviceBest | None) -> bool:
    """Whether the one-device fleet of the other bucketing is cheaper than ``single`` (the comparison names the
    cheapest one-device fleet the tool finds, whichever way its workloads are bucketed)."""
    if other is None:
        return False
    return single is None or other.objective_usd < single.objective_usd * (1 - SPLIT_TIE_RTOL)


def split_note(names: tuple[str, ...], split: FleetSolution, whole: FleetSolution) -> Diagnostic:
    shown = names_text(names)
    than = (f"${whole.objective_usd:,.0f} with them planned whole" if whole.status.has_plan
            and whole.objective_usd is not None else "no fleet with them planned whole")
    return Diagnostic("info", "planned_split",
                      f"{shown} split into request-size buckets, which alone cost no less than planned whole: the "
                      f"fleet costs ${split.objective_usd:,.0f} against {than} (whole servers bought for other "
                      "workloads carry the buckets)")


def resize_solve(problem: FleetProblem, options: SolverOptions,
                 resolved: list[tuple[FleetSolution, Diagnostic | None]]) -> FleetSolution:
    """A re-size round's solve (``safeguards.verify_and_resize``): the decomposed MILP, the tie-break to the fewest
    configurations, then the most headroom, in what is left of ``options.time_limit_s`` (as the main solve), the load spread by capacity;
    the plan and the tie-break's note are appended to ``resolved``."""
    deadline = time.perf_counter() + options.time_limit_s
    sol = cached_solve("decomposed", problem, lambda: solve_decomposed(problem, **options.solve_kwargs),
                       gap=options.gap, solver=options.solver)
    tie = fewest_configurations(problem, sol, time_limit_s=deadline - time.perf_counter(), solver=options.solver)
    out = balanced_routing(problem, tie.solution)
    resolved.append((out, tie.note))
    return out


def verification_skipped(n_online: int) -> Diagnostic:
    """The warning for a plan too large for the default simulator check (MAX_VERIFIED_DEPLOYMENTS)."""
    return Diagnostic("warning", "verification_skipped",
                      f"the plan's {n_online} online deployments were not simulated (the default check stops at "
                      f"{MAX_VERIFIED_DEPLOYMENTS}): their p99s are the analytic model's alone; --verify simulates "
                      "every one (about 0.25 s each on 2 cores) and re-sizes the misses")


def sensitivity_skipped(sol: FleetSolution) -> Diagnostic:
    """The warning for a plan the solver did not prove optimal: its sensitivity is not computed.

    A break-even or tornado swing is the difference between two optimal objectives; against a base
    plan that is only within ``gap`` of its bound, the difference is solver noise up to that gap, and
    each of its re-solves (12 on the chat fleet: `python scripts/bench_sensitivity.py`) would run to
    the time limit as well.
    """
    gap = f"{100 * sol.gap:.1f} %" if sol.gap is not None else "unknown"
    return Diagnostic("warning", "sensitivity_skipped",
                      f"sensitivity not computed: the plan is not proven optimal (gap {gap} to its lower bound), "
                      "so break-evens and swings would measure solver noise; a longer --time-limit-s may prove it")


# Share of --time-limit-s the one-device fleets may take before the main solve (they are its
# first incumbent and its fallback); the main solve gets the rest.
SINGLE_DEVICE_SHARE = 0.25


def solve_stage(problem: FleetProblem, options: SolverOptions, *, compare_single_device: bool = True,
                diagnose: bool = True, solved: FleetSolution | None = None, start: FleetSolution | None = None,
                found: list[FleetSolution] | None = None,
                ) -> tuple[FleetSolution, SingleDeviceBest | None, list[Diagnostic]]:
    """The solve stage, within ``options.time_limit_s`` (+ the child's kill grace) at any size.

    1. The cheapest one-device fleets (``single_device_solution`` on the shortlist), in at most
       SINGLE_DEVICE_SHARE of the limit. The best one is the main solve's first incumbent, so that
       solve never returns a dearer plan, and where it is optimal HiGHS only proves its bound (the
       chat fleet: 0.155 → 0.013 s CPU, 7 × B200 either way).
    2. The main MILP in what is left (``solve_fleet``; a child process with a hard deadline
       on large problems; from RESTRICT_MIN_OPTIONS options on, the restricted MILP over each
       workload's best options, ``solve_restricted``, with its gap against the full problem;
       from BOUNDS_MIN_OPTIONS options and two workloads on, ``solve_decomposed``: each
       workload alone, pooled, then the MILP started from that fleet).
    3. A proven-optimal plan gives way to the equally cheap one with the fewest configurations, then the most
       headroom (``milp.tiebreak.fewest_configurations``) in what is left of the limit (skipped, with a
       warning, when nothing is left).
    4. A time-limited plan dearer than the one-device fleet, or none at all, gives way to it
       (:func:`one_device_fallback`); an infeasible plan is explained (``binding_limits``) in
       what is left of the limit.
    5. The plan's load is spread by capacity (``milp.routing.balanced_routing``).

    ``solved``: the main solve's answer already (a fleet re-sized by the simulator's check, its
    load already spread): only the one-device comparison and the notes are made. ``start``: a feasible fleet, the
    main solve's first incumbent (instead of the one-device fleet). ``found`` receives every
    one-device plan solved.
    """
    limit = options.time_limit_s
    deadline = time.perf_counter() + limit
    notes: list[Diagnostic] = []
    single = single_sol = None
    if compare_single_device:
        single, single_sol = single_device_solution(single_device_shortlist(problem, options.gap),
                                                    **options.solve_kwargs, total_s=SINGLE_DEVICE_SHARE * limit,
                                                    found=found)
    if start is None:
        start = single_sol
    main_s = max(deadline - time.perf_counter(), 0.05 * limit)
    if solved is not None:
        sol = solved
    else:
        sol = main_solve(problem, options, main_s, start, single_sol)
        tie = fewest_configurations(problem, sol, time_limit_s=deadline - time.perf_counter(), solver=options.solver)
        sol = tie.solution
        notes += [tie.note] if tie.note else []
    if sol.status == SolveStatus.INFEASIBLE and diagnose:
        notes += binding_limits(problem, **options.solve_kwargs, total_s=max(deadline - time.perf_counter(), 0.0))
    elif compare_single_device and (sol.status.has_plan or single_sol is not None):
        sol, fallback = one_device_fallback(sol, single_sol)
        notes += [fallback] if fallback else []
        if sol.status.has_plan:
            notes.append(single_device_note(single, sol.objective_usd or 0.0))
    if sol.status == SolveStatus.FEASIBLE:
        notes.append(Diagnostic("warning", "not_proven_optimal", sol.detail))
    return (sol if sol is solved else balanced_routing(problem, sol)), single, notes


def main_solve(problem: FleetProblem, options: SolverOptions, time_limit_s: float, start: FleetSolution | None,
               single_sol: FleetSolution | None) -> FleetSolution:
    """The main MILP of ``solve_stage`` (restricted, decomposed or whole, by size), through the
    disk cache of proven-optimal solves (``milp.resolve.cached_solve``)."""
    kwargs = {**options.solve_kwargs, "time_limit_s": time_limit_s}
    settings = {"gap": options.gap, "solver": options.solver}
    if len(problem.options) >= RESTRICT_MIN_OPTIONS:
        return cached_solve("restricted", problem, lambda: solve_restricted(problem, **kwargs, start=single_sol),
                            start=single_sol, **settings)
    if decomposes(problem, "objective"):
        return cached_solve("decomposed", problem, lambda: solve_decomposed(problem, **kwargs, start=start),
                            start=start, **settings)
    return cached_solve("solve", problem, lambda: solve_fleet(problem, **kwargs, start=start), start=start, **settings)


class StageClock:
    """Wall time of the stages of one ``optimize_plan`` call (``PlanResult.timings_s``)."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}
        self.cache_before = disk_cache.stats()

    def lap(self, stage: str) -> None:
        """Add the time since the last lap to ``stage``."""
        now = time.perf_counter()
        self.laps[stage] = self.laps.get(stage, 0.0) + now - self.last
        self.last = now

    def stamp(self, result: PlanResult) -> PlanResult:
        """``result`` with its timings: the stages lapped (candidates, solve, verification: the
        simulator's check and re-sizing when asked, assembling the result and re-predicting each
        deployment's p99s; sensitivity: its re-solves when asked, else 0), anything since the last
        lap counted in verification, and the total; and the disk cache's folder, hits and misses in
        the call (``PlanResult.cache``)."""
        self.lap("verification")
        timings = {k: self.laps.get(k, 0.0) for k in ("candidates", "solve", "verification", "sensitivity")}
        timings["total"] = self.last - self.start
        now = disk_cache.stats()
        cache = {"dir": now["dir"], **{k: now[k] - self.cache_before[k] for k in ("hits", "misses")}}
        return replace(result, timings_s=timings, cache=cache)


def plan_candidates(plan: Plan, catalog: Catalog, params: CalibrationParams | None, capacity_table: CapacityTable | Path | str | None,
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
    """The one-device fleet instead of a time-limited plan that costs more (seen at 500 workloads),
    or instead of no plan at all (a solve stopped at its time limit before any incumbent).

    That fleet satisfies every constraint, so it is a valid answer; the gap is recomputed
    against the main solve's proven bound (unknown without one).
    """
    if single_sol is None or single_sol.objective_usd is None or not single_sol.status.has_plan:
        return sol, None
    if sol.status == SolveStatus.ERROR:
        what = f"the solver found no plan in its time limit ({sol.detail})"
    elif sol.status == SolveStatus.FEASIBLE and sol.objective_usd is not None and single_sol.objective_usd < sol.objective_usd:
        what = f"the solver stopped at its time limit with a ${sol.objective_usd:,.0f} plan"
    else:
        return sol, None
    note = Diagnostic(
        "warning", "time_limit_fallback",
        f"{what}; the cheapest one-device fleet (${single_sol.objective_usd:,.0f}) is returned instead; "
        "raise --time-limit-s for a mixed fleet")
    bound = sol.bound_usd
    gap_now = (single_sol.objective_usd - bound) / single_sol.objective_usd if bound is not None else sol.gap
    return replace(single_sol, status=SolveStatus.FEASIBLE, gap=gap_now, bound_usd=bound,
                   solve_seconds=sol.solve_seconds + single_sol.solve_seconds,
                   detail="time limit reached; one-device fleet"
                          + (f"; gap {100 * gap_now:.1f} %" if gap_now is not None else "; gap unknown")), note
