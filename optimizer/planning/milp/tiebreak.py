"""The tie-break among optimal fleets: of the plans that cost what the optimum costs, the one with the
fewest configurations (deployments: options with replicas), then the one whose configurations sort first.

A fleet MILP is highly degenerate: options that differ in something the objective does not price (a
prefill pool's receive tier, tp4 against tp8 on the same servers) often make fleets of the same GPUs and
servers, and the solver stops at whichever split it met first (the RAG example: 20 H100 tp8 prefill
replicas over three receive tiers + 1 tp4, six configurations where two do). A second, lexicographic
solve holds the cost and minimises the configurations::

    C* − τ ≤ Σ_d c_gpu[d]·gpus[d] + c_node[d]·m[d] ≤ C* + τ        ``tie_break_cost_low`` / ``_high``
    n[k] ≤ ub[k]·v[k],  v[k] ∈ {0,1}                               v[k] = 1 where k has replicas
    minimise Σ_k (1 + r[k] / K²)·v[k]                              fewest configurations, then the first keys

C* is the first solve's objective (recomputed from its fleet), τ = TIE_BREAK_TOLERANCE_USD (one cent:
fleets of the same GPUs and servers per device cost the same to the cent, and HiGHS meets the band's rows
to 1e-7), r[k] the rank of option k in sorted (workload, key) order and K the number of options:
Σ_k r[k]/K² < 1, so the order only chooses among plans with the fewest configurations. Every constraint of
the first solve is kept, so the second plan is as feasible as the first; it starts from the first plan
(HiGHS's first incumbent), so it never returns more configurations. It is checked again after the solve
(``resolve.is_feasible``, cost within τ of C*); a plan that fails is dropped and the first kept.

Only a proven-optimal plan is tie-broken (a time-limited one has no optimum to hold the cost to), and only
in what is left of the solve stage's time limit; a tie-break stopped by it keeps the best plan it found
(fewer configurations, same cost), or the first plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pulp

from optimizer.planning.milp.build import FleetModel, build_model
from optimizer.planning.milp.deadline import fork_available, run_with_deadline
from optimizer.planning.milp.problem import PRESOLVE_MIN_OPTIONS, FleetProblem, FleetSolution
from optimizer.planning.milp.resolve import RESOLVE_HIGHS_OPTIONS, cached_solve, is_feasible
from optimizer.planning.milp.solve import (
    CHILD_MIN_OPTIONS,
    DEADLINE_GRACE_S,
    SolveRun,
    extract,
    solve_model,
    solve_tuned_highs,
    start_values,
)
from optimizer.results.plan_result import Diagnostic, SolveStatus

# τ: a plan within one cent of the optimum's cost counts as equally cheap.
TIE_BREAK_TOLERANCE_USD = 0.01
# HiGHS settings of the tie-break: those of the re-solves that start from a known plan (``resolve``), without
# their cost scaling (this objective counts configurations). The power-cap example's tie-break (97 options, 5
# configurations proven the fewest), 4 interleaved runs: 1.15-1.41 s CPU with HiGHS's defaults, 0.84-1.07 s with these.
TIE_BREAK_HIGHS_OPTIONS = {k: v for k, v in RESOLVE_HIGHS_OPTIONS.items() if k != "user_objective_scale"}
# Below this many seconds left of the solve stage the tie-break is skipped (the first plan kept).
TIE_BREAK_MIN_S = 0.05


@dataclass(frozen=True)
class TieBreak:
    """The plan after the tie-break and what it did (an info note; a warning when it was skipped)."""

    solution: FleetSolution
    note: Diagnostic | None


def configurations(sol: FleetSolution) -> int:
    """Configurations in use: the (workload, option) pairs with at least one replica."""
    return sum(1 for n in sol.replicas.values() if n > 0)


def define_configuration_indicators(model: FleetModel) -> dict[tuple[str, str], pulp.LpVariable]:
    """v[k] ∈ {0,1} with n[k] ≤ ub[k]·v[k] for every option k. Named ``used__{workload}__{candidate}``."""
    used = {}
    for idx, n in model.n.items():
        name = f"{model.w_name[idx[0]]}__{model.k_name[idx]}"
        v = used[idx] = model.prob.add_variable(f"v__{name}", 0, 1, cat=pulp.LpInteger)
        model.prob += n <= model.ub[idx] * v, f"used__{name}"
    return used


def define_cost_band(model: FleetModel, optimum_usd: float, tolerance_usd: float) -> None:
    """C* − τ ≤ Σ_d c_gpu[d]·gpus[d] + c_node[d]·m[d] ≤ C* + τ. Named ``tie_break_cost_low``/``_high``."""
    cost = model.total("objective_usd")
    model.prob += cost <= optimum_usd + tolerance_usd, "tie_break_cost_high"
    model.prob += cost >= optimum_usd - tolerance_usd, "tie_break_cost_low"


def configuration_objective(used: dict[tuple[str, str], pulp.LpVariable]) -> pulp.LpAffineExpression:
    """Σ_k (1 + r[k]/K²)·v[k], r[k] the rank of k in sorted (workload, key) order, K = len(used)."""
    k = max(len(used), 1)
    return pulp.LpAffineExpression([(used[idx], 1 + rank / k**2) for rank, idx in enumerate(sorted(used))])


def build_tie_break(problem: FleetProblem, optimum_usd: float,
                    tolerance_usd: float = TIE_BREAK_TOLERANCE_USD) -> tuple[FleetModel, dict]:
    """The fleet MILP (every constraint, no objective) with the cost band and the configuration objective."""
    model = build_model(problem, minimise="feasible")
    used = define_configuration_indicators(model)
    define_cost_band(model, optimum_usd, tolerance_usd)
    model.prob.setObjective(configuration_objective(used))
    return model, used


def solve_tie_break(problem: FleetProblem, first: FleetSolution, *, time_limit_s: float, solver: str = "highs",
                    report: Callable[[FleetSolution], None] | None = None) -> FleetSolution:
    """The lexicographic second solve in this process, from ``first`` (a proven-optimal plan of ``problem``).

    Returns the plan it found (status of the tie-break's own solve: optimal when the fewest configurations
    are proven); ``report`` receives every improving incumbent (the child process's messages)."""
    t0 = time.perf_counter()
    model, used = build_tie_break(problem, first.objective_usd or 0.0)
    start = start_values(model, first)
    start.update({v: 1.0 if first.replicas.get(idx, 0) > 0 else 0.0 for idx, v in used.items()})
    build_seconds = time.perf_counter() - t0
    on_incumbent = None
    if report is not None:
        def on_incumbent(values: Any, objective: float, bound: float) -> None:
            run = SolveRun(SolveStatus.FEASIBLE, "incumbent", None, time.perf_counter() - t0, solver)
            report(extract(model, run, build_seconds, values))
    left_s = max(time_limit_s - build_seconds, TIE_BREAK_MIN_S)
    presolve = len(problem.options) >= PRESOLVE_MIN_OPTIONS
    run = solve_tuned_highs(model, time_limit_s=left_s, gap=0.0, options=TIE_BREAK_HIGHS_OPTIONS, start=start,
                            presolve=presolve, on_incumbent=on_incumbent,
                            reported_limit_s=time_limit_s) if solver == "highs" else None
    if run is None:  # HiGHS with its defaults, then CBC
        run = solve_model(model, time_limit_s=left_s, gap=0.0, solver=solver, reported_limit_s=time_limit_s,
                          presolve=presolve, on_incumbent=on_incumbent, start=start)
    return extract(model, run, build_seconds)


def tie_broken_solve(problem: FleetProblem, first: FleetSolution, *, time_limit_s: float,
                     solver: str = "highs") -> FleetSolution:
    """:func:`solve_tie_break`, in a child process with a hard deadline from CHILD_MIN_OPTIONS options on
    (as ``solve.solve_fleet``): killed at the limit, it gives its last incumbent (or ``first``)."""
    if len(problem.options) < CHILD_MIN_OPTIONS or solver != "highs" or not fork_available():
        return solve_tie_break(problem, first, time_limit_s=time_limit_s, solver=solver)
    out = run_with_deadline(lambda report: solve_tie_break(problem, first, time_limit_s=time_limit_s,
                                                           solver=solver, report=report),
                            time_limit_s + DEADLINE_GRACE_S)
    if out.finished:
        return out.value
    last = out.reports[-1] if out.reports else first
    return replace(last, status=SolveStatus.FEASIBLE, detail="time limit reached", time_limited=True,
                   solve_seconds=out.wall_seconds)


def fewest_configurations(problem: FleetProblem, first: FleetSolution, *, time_limit_s: float,
                          solver: str = "highs") -> TieBreak:
    """``first`` (the main solve's plan) replaced by the equally cheap plan with the fewest configurations.

    Skipped, ``first`` kept, when ``first`` is not proven optimal (an info note says so) or less than
    TIE_BREAK_MIN_S seconds are left (a warning). The tie-break's plan is kept only if it satisfies every constraint of
    ``problem`` and costs within TIE_BREAK_TOLERANCE_USD of ``first``; it then carries ``first``'s status,
    gap and bound (the same optimum), with the tie-break's seconds added to the solve's.
    """
    if not first.status.has_plan or first.objective_usd is None:
        return TieBreak(first, None)
    before = configurations(first)
    if first.status != SolveStatus.OPTIMAL:
        return TieBreak(first, Diagnostic("info", "tie_break_skipped",
                                          f"no tie-break to the fewest configurations: the plan is not proven optimal, "
                                          f"so there is no optimum to hold its cost to ({before} configurations)"))
    if before <= 1:
        return TieBreak(first, None)
    if time_limit_s < TIE_BREAK_MIN_S:
        return TieBreak(first, _skipped(before, f"no time was left of the solve stage's limit ({time_limit_s:.2f} s)"))
    t0 = time.perf_counter()
    second = cached_solve("tie_break", problem,
                          lambda: tie_broken_solve(problem, first, time_limit_s=time_limit_s, solver=solver),
                          start=first, solver=solver, tolerance_usd=TIE_BREAK_TOLERANCE_USD)
    seconds = time.perf_counter() - t0
    if not second.status.has_plan:
        return TieBreak(replace(first, solve_seconds=first.solve_seconds + seconds),
                        _skipped(before, f"its solve found no plan ({second.detail})"))
    cost = second.objective_usd or 0.0
    if abs(cost - first.objective_usd) > TIE_BREAK_TOLERANCE_USD or not is_feasible(problem, second):
        return TieBreak(replace(first, solve_seconds=first.solve_seconds + seconds),
                        _skipped(before, f"its plan (${cost:,.2f}) failed the re-check"))
    after = configurations(second)
    if after > before or (after == before and second.status != SolveStatus.OPTIMAL):
        # none fewer found before the time limit (more: solver tolerances only): the first plan is kept
        why = None if second.status == SolveStatus.OPTIMAL else _skipped(
            before, f"its time limit stopped it before it found fewer ({second.detail})")
        return TieBreak(replace(first, solve_seconds=first.solve_seconds + seconds,
                                time_limited=first.time_limited or second.time_limited), why)
    kept = replace(second, status=first.status, detail=first.detail, gap=first.gap, bound_usd=first.bound_usd,
                   time_limited=first.time_limited or second.time_limited,
                   solve_seconds=first.solve_seconds + seconds, build_seconds=first.build_seconds,
                   n_variables=first.n_variables, n_integer_variables=first.n_integer_variables,
                   n_constraints=first.n_constraints)
    if after == before:  # proven: no plan as cheap has fewer; the first keys among them
        return TieBreak(kept, None)
    proven = "" if second.status == SolveStatus.OPTIMAL else "; its time limit stopped it before the fewest was proven"
    return TieBreak(kept, Diagnostic("info", "tie_break",
                                     f"{before} configurations at the optimum's cost became {after} "
                                     f"(the equally cheap plan with the fewest, ±${TIE_BREAK_TOLERANCE_USD:g}){proven}"))


def _skipped(before: int, why: str) -> Diagnostic:
    return Diagnostic("warning", "tie_break_skipped",
                      f"the tie-break to the fewest configurations was skipped ({why}); the first optimal plan "
                      f"is kept, with {before} configurations; a longer --time-limit-s leaves it room")
