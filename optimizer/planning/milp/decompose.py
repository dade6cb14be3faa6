"""The fleet MILP of many workloads by decomposition: each workload alone, pooled, consolidated,
a MILP over that fleet's neighbourhood, then the whole MILP started from the best fleet.

1. Each workload's one-workload MILP (``solve_alone``; servers amortised per GPU, no shared
   rows; at most ALONE_MAX_NODES nodes): its plan and its proven bound L[w]
   (:func:`workload_plans`; past the guard a workload gets its cheapest single-option plan and
   the analytic bound). Σ_w L[w] is a lower bound on the fleet's optimum (``heuristic.pooled_bound``).
   The MILPs are independent: on a large problem they run on forked workers, with the same answers.
2. The plans pooled on shared servers and consolidated without a solver
   (``heuristic.consolidate``, CONSOLIDATE_MAX_ROUNDS rounds); dropped if the fleet breaks a shared row
   (``heuristic.fleet_violations``). The cheaper of it and the given start is the incumbent.
3. The MILP restricted to the incumbent's options plus each workload's NEIGHBOURHOOD_PER_BUCKET
   best options per bucket and its cheapest one (``heuristic.restricted_problem``;
   NEIGHBOURHOOD_MAX_NODES nodes), started from the incumbent, the L[w] as cuts
   (``define_workload_bounds``): its plans are plans of the full problem.
4. ``polish``: the full MILP from the best fleet for POLISH_MAX_NODES node(s) (its root: cuts and
   heuristics); its dual bound, when higher, replaces Σ_w L[w].

Every step ends on work done (HiGHS's node limit, HiGHS single-threaded; a round count), so the
same problem gives the same fleet however busy the machine is. The time limit is a guard: step 1
within PLANS_SHARE of it (each MILP ALONE_MAX_S), step 2 within CONSOLIDATE_SHARE, step 3 within
what is left but POLISH_SHARE, step 4 within what is left; a step the guard ended is named in the
detail with GUARD_NOTE, and the solution's ``time_limited`` is set.

Each step starts from the previous fleet, so the answer is never dearer than the start; it
is ``optimal`` when within ``gap`` of the bound, else ``feasible`` with that gap. A step is
skipped once the fleet is within the gap.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace

from optimizer.planning.evaluate import parallel_workers
from optimizer.planning.milp.heuristic import (
    WorkloadPlan,
    consolidate,
    fleet_violations,
    pooled_bound,
    pooled_fleet,
    restricted_problem,
    single_option_plan,
)
from optimizer.planning.milp.problem import (
    BOUNDS_MIN_OPTIONS,
    Demand,
    FleetProblem,
    FleetSolution,
    Minimise,
    Option,
    UnitTerms,
    options_by_workload,
)
from optimizer.planning.milp.solve import (
    CHILD_MIN_OPTIONS,
    DEADLINE_GRACE_S,
    bound_of,
    solve_alone,
    solve_fleet,
)
from optimizer.results.plan_result import SolveStatus
from optimizer.workers import run_pool

# Every step ends on work done, not wall time, so the same plan gives the same fleet on a busy
# machine (docs/benchmarks.md, "Session 11: reproducible decomposition (detsolve)"): HiGHS's node
# limit (``mip_max_nodes``; HiGHS runs single-threaded) and the consolidation's round count.
# A one-workload MILP: a few hundred columns, ≤ 7 nodes and 0.15 s on the 20-workload benchmark.
ALONE_MAX_NODES = 1_000
# The neighbourhood MILP: on the 20-workload benchmark (82 of 824 options; proven in 683 nodes, 2 s)
# 30, 50, 100 and 200 nodes all led to the same final fleet, $20,968,665 (300: $20,989,101; 683: $20,978,929).
NEIGHBOURHOOD_MAX_NODES = 100
# The polish: the whole MILP's root node (presolve, cuts, root heuristics: 3.7 s CPU on the 20-workload
# benchmark, where its plan was the same from 1 to 200 nodes, 3.7 to 7.1 s CPU).
POLISH_MAX_NODES = 1
# Rounds of ``heuristic.consolidate`` (each re-places every workload and tries to empty every device).
CONSOLIDATE_MAX_ROUNDS = 20
# Wall-clock guards, which only end a step on a machine far slower than the work limits assume
# (the result then says so: ``GUARD_NOTE``): a one-workload MILP (s), and shares of the time limit:
# the one-workload MILPs, the consolidation, the polish's reserve (the neighbourhood MILP gets the rest).
ALONE_MAX_S = 2.0
# Seconds past step 1's guard before a worker still in a one-workload MILP is killed (HiGHS stops on
# its own time limit before that, unless it overruns it in the root's cut rounds).
ALONE_KILL_GRACE_S = 1.0
PLANS_SHARE = 0.25
CONSOLIDATE_SHARE = 0.1
POLISH_SHARE = 0.2
GUARD_NOTE = "stopped by the time limit: a rerun may differ"
# Step 1 runs on forked workers (``evaluate.parallel_workers``) from this many options on: ~1 s of serial
# MILPs, 30× the pool's start-up (20-30 ms); the 20-workload plan (780 options, 0.4 s, one MILP of 0.15 s)
# gained nothing on it (docs/benchmarks.md, "Session 13: parallel one-workload MILPs").
PARALLEL_MIN_OPTIONS = 2_000
# The neighbourhood of a fleet: its options, and each workload's best per bucket and cheapest per replica.
NEIGHBOURHOOD_PER_BUCKET = 2
NEIGHBOURHOOD_CHEAPEST = 1


def alone_plan(demand: Demand, options: tuple[Option, ...], units: Mapping[str, UnitTerms], *,
               time_limit_s: float, gap: float, solver: str = "highs", guarded: list[str] | None = None
               ) -> WorkloadPlan | None:
    """The workload's one-workload MILP (``solve_alone``: amortised servers, no shared rows; at
    most ALONE_MAX_NODES nodes): its plan and its proven bound; None when it found no plan.
    ``guarded`` gets the workload's name when ``time_limit_s`` (the guard) ended the solve."""
    sol = solve_alone(demand, options, units, time_limit_s=time_limit_s, gap=gap, solver=solver,
                      max_nodes=ALONE_MAX_NODES)
    if sol is not None and sol.time_limited and guarded is not None:
        guarded.append(f"the one-workload MILP of {demand.workload}")
    if sol is None or not sol.status.has_plan:
        return None
    return WorkloadPlan(demand.workload, dict(sol.replicas), dict(sol.routed_qps), bound_of(sol),
                        dict(sol.replicas_per_server))


def workload_plans(problem: FleetProblem, *, time_limit_s: float, gap: float, solver: str = "highs",
                   guarded: list[str] | None = None) -> dict[str, WorkloadPlan] | None:
    """Every workload's plan: its one-workload MILP (started in plan order; ``time_limit_s``, a guard,
    past which the others get none), the cheapest single-option plan where the MILP found none.
    None when some workload has neither. ``guarded`` gets the steps the guard ended.

    The MILPs are independent and end on their node limit, so from PARALLEL_MIN_OPTIONS options on
    they run on forked workers (``parallel_workers``) with the same answers; a MILP still running
    ALONE_KILL_GRACE_S past the guard is killed (ended)."""
    global _ALONE_TASKS
    deadline = time.monotonic() + time_limit_s  # monotonic: the clock the forked workers share
    by_workload = options_by_workload(problem)
    tasks = [(dem, by_workload.get(dem.workload, ()), problem.units, deadline, min(gap, 1e-6), solver)
             for dem in problem.demands]
    workers = min(parallel_workers(), len(tasks)) if len(problem.options) >= PARALLEL_MIN_OPTIONS else 1
    if workers < 2:
        outcomes = [_alone_outcome(*task) for task in tasks]
    else:
        _ALONE_TASKS = tasks
        try:
            outcomes = run_pool(_alone_task, range(len(tasks)), workers, deadline=deadline + ALONE_KILL_GRACE_S,
                                late=(None, "ended"))
        finally:
            _ALONE_TASKS = []
    out: dict[str, WorkloadPlan] = {}
    for (dem, opts, *_), (plan, _) in zip(tasks, outcomes, strict=True):
        plan = plan or single_option_plan(dem, opts, problem.units)
        if plan is None:
            return None
        out[dem.workload] = plan
    ended = sum(how == "ended" for _, how in outcomes)
    skipped = sum(how == "skipped" for _, how in outcomes)
    if (ended or skipped) and guarded is not None:
        guarded.append(f"the one-workload MILPs ({ended} ended, {skipped} of {len(problem.demands)} not run)")
    return out


# The one-workload MILPs of the pool being run: (demand, options, units, deadline, gap, solver) each,
# inherited by its forked workers (only an index is sent).
_ALONE_TASKS: list[tuple] = []


def _alone_task(i: int) -> tuple[WorkloadPlan | None, str]:
    return _alone_outcome(*_ALONE_TASKS[i])


def _alone_outcome(demand: Demand, options: tuple[Option, ...], units: Mapping[str, UnitTerms], deadline: float,
                   gap: float, solver: str) -> tuple[WorkloadPlan | None, str]:
    """(:func:`alone_plan`, how it went: "ran", "ended" by the guard, "skipped": past the guard
    ``deadline`` (``time.monotonic()``) when it would start; its time limit is min(ALONE_MAX_S, what is left))."""
    left = deadline - time.monotonic()
    if left <= 0.05:
        return None, "skipped"
    ended: list[str] = []
    plan = alone_plan(demand, options, units, time_limit_s=min(ALONE_MAX_S, left), gap=gap, solver=solver,
                      guarded=ended)
    return plan, "ended" if ended else "ran"


def decomposes(problem: FleetProblem, minimise: Minimise) -> bool:
    """The decomposition applies: the plan's objective, several workloads, BOUNDS_MIN_OPTIONS options or more
    (below that the whole MILP is solved faster directly: docs/benchmarks.md)."""
    return minimise == "objective" and len(problem.demands) > 1 and len(problem.options) >= BOUNDS_MIN_OPTIONS


def pooled_start(problem: FleetProblem, *, time_limit_s: float, gap: float, solver: str = "highs",
                 consolidate_s: float = 0.0, guarded: list[str] | None = None
                 ) -> tuple[FleetSolution | None, float, dict[str, float]]:
    """Steps 1-2 of the module doc: the one-workload plans (guard ``time_limit_s``), pooled, then
    ``heuristic.consolidate`` for CONSOLIDATE_MAX_ROUNDS rounds (guard ``consolidate_s``; 0: none).
    Returns (the fleet, None when it breaks a shared row or some workload has no plan; Σ_w L[w];
    the cuts L[w] proven by a MILP). ``guarded`` gets the steps a guard ended."""
    plans = workload_plans(problem, time_limit_s=time_limit_s, gap=gap, solver=solver, guarded=guarded)
    if plans is None:
        return None, 0.0, {}
    lower = pooled_bound(problem, plans)
    cuts = {w: p.bound_usd for w, p in plans.items() if p.bound_usd is not None}
    if consolidate_s > 0:
        stopped: list[str] = []
        plans = consolidate(problem, plans, time_limit_s=consolidate_s, max_rounds=CONSOLIDATE_MAX_ROUNDS,
                            guarded=stopped)
        if stopped and guarded is not None:
            guarded.append("the consolidation")
    fleet = pooled_fleet(problem, plans, "pooled one-workload plans")
    return (None if fleet_violations(problem, fleet) else fleet), lower, cuts


def within_gap(sol: FleetSolution | None, lower: float, gap: float) -> bool:
    """``sol`` costs at most ``gap`` (relative) above the proven lower bound ``lower``."""
    return sol is not None and bool(sol.objective_usd) and (sol.objective_usd - lower) <= gap * sol.objective_usd


def solve_decomposed(problem: FleetProblem, *, time_limit_s: float = 10.0, gap: float = 1e-3, solver: str = "highs",
                     minimise: Minimise = "objective", start: FleetSolution | None = None,
                     per_bucket: int = NEIGHBOURHOOD_PER_BUCKET, polish: bool = True) -> FleetSolution:
    """``solve_fleet`` by the decomposition of the module doc where it applies (:func:`decomposes`),
    within ``time_limit_s``; ``start``: a feasible fleet (the one-device fleet) the answer never
    exceeds. ``per_bucket``: the neighbourhood's options per bucket; ``polish``: step 4."""
    if not decomposes(problem, minimise):
        return solve_fleet(problem, time_limit_s=time_limit_s, gap=gap, solver=solver, minimise=minimise, start=start)
    t0 = time.perf_counter()
    deadline = t0 + time_limit_s
    guarded: list[str] = []  # the steps a wall-clock guard ended rather than their work limit
    pooled, lower, cuts = pooled_start(problem, time_limit_s=PLANS_SHARE * time_limit_s, gap=gap, solver=solver,
                                       consolidate_s=CONSOLIDATE_SHARE * time_limit_s, guarded=guarded)
    best = cheaper(pooled, start)
    steps = ["pooled one-workload plans" if best is pooled and best is not None else "the given start"]
    if not within_gap(best, lower, gap):
        keep = frozenset(k for k, n in best.replicas.items() if n > 0) if best is not None else frozenset()
        sub = restricted_problem(problem, keep, per_bucket=per_bucket, cheapest=NEIGHBOURHOOD_CHEAPEST)
        # the guard: with the polish to come, what is left but the polish's share; without, what is left
        # less the child's kill grace
        left = deadline - time.perf_counter() - (POLISH_SHARE * time_limit_s if polish else DEADLINE_GRACE_S)
        near = solve_fleet(sub, time_limit_s=max(left, 0.05 * time_limit_s), gap=gap, solver=solver, start=best,
                           cuts=cuts, max_nodes=NEIGHBOURHOOD_MAX_NODES)
        if near.time_limited:
            guarded.append("the neighbourhood MILP")
        if cheaper(near, best) is near:
            best = near
            steps.append(f"a MILP over their neighbourhood ({len(sub.options):,} of {len(problem.options):,} options: "
                         f"{near.detail})")
    full = None
    if polish and not within_gap(best, lower, gap):
        if best is None or deadline - time.perf_counter() > 0.05 * time_limit_s:
            # the guard: what is left (no plan yet: the fleet MILP may prove infeasibility), less the kill grace
            left = deadline - time.perf_counter() - (DEADLINE_GRACE_S if len(problem.options) >= CHILD_MIN_OPTIONS
                                                    else 0.0)
            full = solve_fleet(problem, time_limit_s=max(left, 0.05 * time_limit_s), gap=gap, solver=solver,
                               start=best, cuts=cuts, max_nodes=POLISH_MAX_NODES if best is not None else None)
            if full.time_limited:
                guarded.append("the fleet MILP")
            lower = max(lower, bound_of(full) or 0.0) if full.status.has_plan else lower  # the full MILP's dual bound
            if cheaper(full, best) is full:
                best = full
                steps.append(f"the fleet MILP ({full.detail})")
        else:
            guarded.append("the fleet MILP (not run)")
    note = f"; {', '.join(guarded)} {GUARD_NOTE}" if guarded else ""
    if best is None:
        if full is not None:
            return replace(full, solve_seconds=time.perf_counter() - t0 - full.build_seconds, time_limited=bool(guarded))
        return FleetSolution(SolveStatus.ERROR, f"no plan found in {time_limit_s:g} s (the time limit); "
                             "raise --time-limit-s", solver=solver, solve_seconds=time.perf_counter() - t0,
                             time_limited=True)
    g = max((best.objective_usd - lower) / best.objective_usd, 0.0) if best.objective_usd else None
    status = SolveStatus.OPTIMAL if g is not None and g <= gap else SolveStatus.FEASIBLE
    detail = ("proven optimal" if status == SolveStatus.OPTIMAL else "best plan of the decomposition") + (
        f"; gap {g * 100:.3g} % against the proven lower bound ${lower:,.0f}" if g is not None else "") + \
        " (" + ", then ".join(steps) + ")" + note
    return replace(best, status=status, detail=detail, gap=g, bound_usd=lower, solver=solver,
                   solve_seconds=time.perf_counter() - t0 - best.build_seconds, time_limited=bool(guarded))


def cheaper(a: FleetSolution | None, b: FleetSolution | None) -> FleetSolution | None:
    """The cheaper of two feasible fleets (None where there is none); ``a`` on a tie."""
    fleets = [s for s in (a, b) if s is not None and s.status.has_plan and s.objective_usd is not None]
    return min(fleets, key=lambda s: s.objective_usd) if fleets else None
