"""The tie-break among optimal fleets: of the plans that cost what the optimum costs, the one with the
fewest configurations (deployments: options with replicas), then the one with the most headroom, then the one
whose configurations sort first.

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

A third solve, from the second plan (V* its configurations), takes the plan with the most headroom among those
of equal cost and configuration count, then the first keys. The headroom of workload w is 1 − f[w], f[w] the
share of its SLO-safe capacity its busiest deployment runs at under the best routing::

    f[w] = min over routings of max_{k of w, n[k] > 0} (Σ_b λ[w,b]·x[w,b,k] / μ[w,b,k]) / (n[k] − spare[k])

(what ``milp.routing.balanced_routing`` minimises and reports, and the workbook's "Least headroom"). Its
reciprocal α[w] = 1/f[w] is the growth of w's whole load (every bucket × α) that w's replicas carry within
the SLO, and α is linear in the MILP (``build.define_growth``: the routing rows carry α[w]·λ), where f is
not (f·n is bilinear). Counted in steps of 1/S (S = HEADROOM_STEPS, 0.1 % of the load) up to A =
HEADROOM_CAP (a workload that could grow tenfold has all the headroom a planner asks of it)::

    every row of the fleet MILP with the load grown by α[w] ∈ [1, A]      ``build.define_growth``
    the cost band above,  Σ_k v[k] ≤ V*                                 ``tie_break_configurations``
    h[w] ≤ S·α[w],  h[w] ∈ Z                                            ``headroom__{workload}``
    minimise Σ_k (r[k] / K²)·v[k] − Σ_w h[w]                            most headroom, then the first keys

Lexicographic: Σ_w h[w] is an integer and Σ_k r[k]/K² < 1, so one step more of headroom outweighs any key
order. The headroom is summed over the workloads (each α[w] is its own load's growth, so the sum is in units
of "one workload's load"); a workload's replicas are its own and share only servers, budgets and the cost
band with the others, so a trade between workloads happens only through those. A plan with the same
replicas as the second is the second plan (the routing is ``balanced_routing``'s in either case); a new one
is kept only if it passes the same re-check, has at most V* configurations and no less headroom (f[w]
measured again by ``balanced_routing``).

Only a proven-optimal plan is tie-broken (a time-limited one has no optimum to hold the cost to), and only
in what is left of the solve stage's time limit; a tie-break stopped by it keeps the best plan it found
(fewer configurations or more headroom, same cost), or the plan before it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pulp

from optimizer.planning.milp.build import FleetModel, build_model
from optimizer.planning.milp.deadline import fork_available, run_with_deadline
from optimizer.planning.milp.problem import (
    PRESOLVE_MIN_OPTIONS,
    FleetProblem,
    FleetSolution,
    spare_replicas,
)
from optimizer.planning.milp.resolve import RESOLVE_HIGHS_OPTIONS, cached_solve, is_feasible
from optimizer.planning.milp.routing import balanced_routing
from optimizer.planning.milp.solve import (
    CHILD_MIN_OPTIONS,
    DEADLINE_GRACE_S,
    SolveRun,
    extract,
    routed_loads,
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
# S: headroom counted in steps of 1/S of a workload's load (0.1 %); A: no credit for growth past A × the load.
HEADROOM_STEPS = 1000
HEADROOM_CAP = 10.0
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


def build_headroom(problem: FleetProblem, optimum_usd: float, most_configurations: int,
                   tolerance_usd: float = TIE_BREAK_TOLERANCE_USD) -> tuple[FleetModel, dict, dict]:
    """The fleet MILP with the load grown by α[w] (``build.define_growth``), the cost band, Σ_k v[k] ≤
    ``most_configurations``, h[w] ≤ S·α[w] and the objective Σ_k (r[k]/K²)·v[k] − Σ_w h[w] (module doc).
    Returns (model, v by option, h by workload)."""
    model = build_model(problem, minimise="feasible", growth_cap=HEADROOM_CAP)
    used = define_configuration_indicators(model)
    define_cost_band(model, optimum_usd, tolerance_usd)
    model.prob += pulp.lpSum(used.values()) <= most_configurations, "tie_break_configurations"
    steps = {}
    for w, alpha in model.growth.items():
        h = steps[w] = model.prob.add_variable(f"h__{model.w_name[w]}", HEADROOM_STEPS,
                                               HEADROOM_STEPS * HEADROOM_CAP, cat=pulp.LpInteger)
        model.prob += h <= HEADROOM_STEPS * alpha, f"headroom__{model.w_name[w]}"
    k = max(len(used), 1)
    model.prob.setObjective(pulp.LpAffineExpression(
        [(used[idx], rank / k**2) for rank, idx in enumerate(sorted(used))] + [(h, -1) for h in steps.values()]))
    return model, used, steps


def extract_headroom(model: FleetModel, run: SolveRun, build_seconds: float, values: Any = None) -> FleetSolution:
    """:func:`~optimizer.planning.milp.solve.extract` of a :func:`build_headroom` model, with the routing of the
    load itself: shares x/α[w] (x routes α[w]·λ)."""
    sol = extract(model, run, build_seconds, values)
    if not sol.status.has_plan:
        return sol
    value = (lambda v: v.value() or 0.0) if values is None else (lambda v: float(values[v.index]))
    shares = {(w, b, key): value(x) / max(value(model.growth[w]), 1.0) for (w, b, key), x in model.x.items()}
    return replace(sol, routed_qps=routed_loads(model.problem, sol.replicas, shares,
                                                {w: d.bucket_qps for w, d in model.demands.items()}))


def solve_tie_break(problem: FleetProblem, first: FleetSolution, *, time_limit_s: float, solver: str = "highs",
                    report: Callable[[FleetSolution], None] | None = None,
                    most_configurations: int | None = None) -> FleetSolution:
    """The lexicographic second solve in this process, from ``first`` (a proven-optimal plan of ``problem``);
    with ``most_configurations``, the third (most headroom with at most that many configurations).

    Returns the plan it found (status of the tie-break's own solve: optimal when the fewest configurations
    or the most headroom are proven); ``report`` receives every improving incumbent (the child process's
    messages)."""
    t0 = time.perf_counter()
    steps: dict = {}
    if most_configurations is None:
        model, used = build_tie_break(problem, first.objective_usd or 0.0)
        read = extract
    else:
        model, used, steps = build_headroom(problem, first.objective_usd or 0.0, most_configurations)
        read = extract_headroom
    start = start_values(model, first)
    start.update({v: 1.0 if first.replicas.get(idx, 0) > 0 else 0.0 for idx, v in used.items()})
    start.update({alpha: 1.0 for alpha in model.growth.values()})  # the load itself: h = S
    start.update({h: float(HEADROOM_STEPS) for h in steps.values()})
    build_seconds = time.perf_counter() - t0
    on_incumbent = None
    if report is not None:
        def on_incumbent(values: Any, objective: float, bound: float) -> None:
            run = SolveRun(SolveStatus.FEASIBLE, "incumbent", None, time.perf_counter() - t0, solver)
            report(read(model, run, build_seconds, values))
    left_s = max(time_limit_s - build_seconds, TIE_BREAK_MIN_S)
    presolve = len(problem.options) >= PRESOLVE_MIN_OPTIONS
    run = solve_tuned_highs(model, time_limit_s=left_s, gap=0.0, options=TIE_BREAK_HIGHS_OPTIONS, start=start,
                            presolve=presolve, on_incumbent=on_incumbent,
                            reported_limit_s=time_limit_s) if solver == "highs" else None
    if run is None:  # HiGHS with its defaults, then CBC
        run = solve_model(model, time_limit_s=left_s, gap=0.0, solver=solver, reported_limit_s=time_limit_s,
                          presolve=presolve, on_incumbent=on_incumbent, start=start)
    return read(model, run, build_seconds)


def tie_broken_solve(problem: FleetProblem, first: FleetSolution, *, time_limit_s: float,
                     solver: str = "highs", most_configurations: int | None = None) -> FleetSolution:
    """:func:`solve_tie_break`, in a child process with a hard deadline from CHILD_MIN_OPTIONS options on
    (as ``solve.solve_fleet``): killed at the limit, it gives its last incumbent (or ``first``)."""
    if len(problem.options) < CHILD_MIN_OPTIONS or solver != "highs" or not fork_available():
        return solve_tie_break(problem, first, time_limit_s=time_limit_s, solver=solver,
                               most_configurations=most_configurations)
    out = run_with_deadline(lambda report: solve_tie_break(problem, first, time_limit_s=time_limit_s,
                                                           solver=solver, report=report,
                                                           most_configurations=most_configurations),
                            time_limit_s + DEADLINE_GRACE_S)
    if out.finished:
        return out.value
    last = out.reports[-1] if out.reports else first
    return replace(last, status=SolveStatus.FEASIBLE, detail="time limit reached", time_limited=True,
                   solve_seconds=out.wall_seconds)


def fewest_configurations(problem: FleetProblem, first: FleetSolution, *, time_limit_s: float,
                          solver: str = "highs") -> TieBreak:
    """``first`` (the main solve's plan) replaced by the equally cheap plan with the fewest configurations, then
    by the one of those with the most headroom (module doc; the first keys last).

    Skipped, ``first`` kept, when ``first`` is not proven optimal (an info note says so) or less than
    TIE_BREAK_MIN_S seconds are left (a warning). Each level's plan is kept only if it satisfies every constraint of
    ``problem`` and costs within TIE_BREAK_TOLERANCE_USD of ``first`` (the headroom level's also: no more
    configurations, no less headroom); it then carries ``first``'s status, gap and bound (the same optimum), with
    the tie-break's seconds added to the solve's. The two levels' notes are one diagnostic.
    """
    if not first.status.has_plan or first.objective_usd is None:
        return TieBreak(first, None)
    before = configurations(first)
    if first.status != SolveStatus.OPTIMAL:
        return TieBreak(first, Diagnostic("info", "tie_break_skipped",
                                          f"no tie-break to the fewest configurations and the most headroom: the plan "
                                          f"is not proven optimal, "
                                          f"so there is no optimum to hold its cost to ({before} configurations)"))
    if before == 0:
        return TieBreak(first, None)
    if time_limit_s < TIE_BREAK_MIN_S:
        why = f"no time was left of the solve stage's limit ({max(time_limit_s, 0.0):.2f} s)"
        return TieBreak(first, _skipped(before, why) if before > 1 else _headroom_skipped(before, why))
    deadline = time.perf_counter() + time_limit_s
    tie = _fewest(problem, first, time_limit_s=time_limit_s, solver=solver) if before > 1 else TieBreak(first, None)
    room = most_headroom(problem, tie.solution, time_limit_s=deadline - time.perf_counter(), solver=solver)
    notes = [n for n in (tie.note, room.note) if n is not None]
    if len(notes) < 2:
        return TieBreak(room.solution, notes[0] if notes else None)
    warned = any(n.level == "warning" for n in notes)
    return TieBreak(room.solution, Diagnostic("warning" if warned else "info",
                                              "tie_break_skipped" if warned else "tie_break",
                                              "; ".join(n.message for n in notes)))


def _fewest(problem: FleetProblem, first: FleetSolution, *, time_limit_s: float, solver: str) -> TieBreak:
    """The second level: the equally cheap plan with the fewest configurations (``first`` optimal, with 2 or more)."""
    before = configurations(first)
    t0 = time.perf_counter()
    second = cached_solve("tie_break", problem,
                          lambda: tie_broken_solve(problem, first, time_limit_s=time_limit_s, solver=solver),
                          start=first, solver=solver, tolerance_usd=TIE_BREAK_TOLERANCE_USD)
    seconds = time.perf_counter() - t0
    if not second.status.has_plan:
        return TieBreak(replace(first, solve_seconds=first.solve_seconds + seconds),
                        _skipped(before, f"its solve found no plan ({second.detail})"))
    cost = second.objective_usd or 0.0
    if abs(cost - (first.objective_usd or 0.0)) > TIE_BREAK_TOLERANCE_USD or not is_feasible(problem, second):
        return TieBreak(replace(first, solve_seconds=first.solve_seconds + seconds),
                        _skipped(before, f"its plan (${cost:,.2f}) failed the re-check"))
    after = configurations(second)
    if after > before or (after == before and second.status != SolveStatus.OPTIMAL):
        # none fewer found before the time limit (more: solver tolerances only): the first plan is kept
        why = None if second.status == SolveStatus.OPTIMAL else _skipped(
            before, f"its time limit stopped it before it found fewer ({second.detail})")
        return TieBreak(replace(first, solve_seconds=first.solve_seconds + seconds,
                                time_limited=first.time_limited or second.time_limited), why)
    kept = _as_first(second, first, seconds)
    if after == before:  # proven: no plan as cheap has fewer; the first keys among them
        return TieBreak(kept, None)
    proven = "" if second.status == SolveStatus.OPTIMAL else "; its time limit stopped it before the fewest was proven"
    return TieBreak(kept, Diagnostic("info", "tie_break",
                                     f"{before} configurations at the optimum's cost became {after} "
                                     f"(the equally cheap plan with the fewest, ±${TIE_BREAK_TOLERANCE_USD:g}){proven}"))


def most_headroom(problem: FleetProblem, plan: FleetSolution, *, time_limit_s: float,
                  solver: str = "highs") -> TieBreak:
    """The third level: ``plan`` (proven optimal, or the second level's plan from it) replaced by the plan of the
    same cost (±τ) and at most as many configurations with the most headroom, then the first keys (module doc).

    ``plan`` kept when the solve finds the same replicas, or a plan that fails the re-check (every constraint,
    cost, configurations, Σ_w ⌊S·min(1/f[w], A)⌋ not below ``plan``'s, f by ``balanced_routing``); a warning when
    no time is left or the time limit stopped the solve before it found more."""
    count = configurations(plan)
    if time_limit_s < TIE_BREAK_MIN_S:
        return TieBreak(plan, _headroom_skipped(count, f"no time was left of the solve stage's limit "
                                                       f"({max(time_limit_s, 0.0):.2f} s)"))
    t0 = time.perf_counter()
    third = cached_solve("tie_break_headroom", problem,
                         lambda: tie_broken_solve(problem, plan, time_limit_s=time_limit_s, solver=solver,
                                                  most_configurations=count),
                         start=plan, solver=solver, tolerance_usd=TIE_BREAK_TOLERANCE_USD,
                         most_configurations=count, headroom=(HEADROOM_STEPS, HEADROOM_CAP))
    seconds = time.perf_counter() - t0
    timed = replace(plan, solve_seconds=plan.solve_seconds + seconds,
                    time_limited=plan.time_limited or third.time_limited)
    if not third.status.has_plan:
        return TieBreak(timed, _headroom_skipped(count, f"its solve found no plan ({third.detail})"))
    proven = third.status == SolveStatus.OPTIMAL
    if third.replicas == plan.replicas and third.replicas_per_server == plan.replicas_per_server:
        return TieBreak(timed, None if proven else _headroom_skipped(
            count, f"its time limit stopped it before it found more ({third.detail})"))
    cost = third.objective_usd or 0.0
    old, new = busiest_shares(problem, balanced_routing(problem, plan)), \
        busiest_shares(problem, balanced_routing(problem, third))
    if (abs(cost - (plan.objective_usd or 0.0)) > TIE_BREAK_TOLERANCE_USD or not is_feasible(problem, third)
            or configurations(third) > count or headroom_steps(new) < headroom_steps(old)):
        return TieBreak(timed, _headroom_skipped(count, f"its plan (${cost:,.2f}) failed the re-check"))
    moved = [f"{w}'s busiest deployment at {old[w]:.1%} of its SLO-safe capacity → {new[w]:.1%}"
             for w in sorted(new) if round(old.get(w, 0.0), 3) != round(new[w], 3)]
    how = f": {', '.join(moved[:3])}{' …' if len(moved) > 3 else ''}" if moved else ""
    unproven = "" if proven else "; its time limit stopped it before the most was proven"
    return TieBreak(_as_first(third, plan, seconds),
                    Diagnostic("info", "tie_break", f"of the equally cheap plans with {_count(configurations(third))}, "
                                                    f"the one with the most headroom{how}{unproven}"))


def busiest_shares(problem: FleetProblem, sol: FleetSolution) -> dict[str, float]:
    """f[w] of ``sol``'s routing: max over w's deployments of Σ_b routed[b,k]/μ[b,k] / (n[k] − spare[k]) (0 for a
    workload whose deployments carry nothing; 1 or more where n − spare leaves no room)."""
    options = {(o.workload, o.key): o for o in problem.options}
    demands = {d.workload: d for d in problem.demands}
    load: dict[tuple[str, str], float] = {}
    for (w, b, k), q in sol.routed_qps.items():
        if q > 0:
            load[(w, k)] = load.get((w, k), 0.0) + q / options[(w, k)].capacity_qps[b]
    out: dict[str, float] = {}
    for idx, n in sol.replicas.items():
        o = options[idx]
        room = n - spare_replicas(demands[idx[0]], o, problem.units[o.device].gpus_per_node,
                                  sol.replicas_per_server.get(idx))
        share = load.get(idx, 0.0) / room if room > 0 else (1.0 if load.get(idx, 0.0) > 0 else 0.0)
        out[idx[0]] = max(out.get(idx[0], 0.0), share)
    return out


def headroom_steps(shares: dict[str, float]) -> int:
    """Σ_w ⌊S·min(1/f[w], A)⌋ (+1e-4 of a step for rounding): the headroom the third level maximises."""
    return sum(math.floor(HEADROOM_STEPS * (min(1 / f, HEADROOM_CAP) if f > 0 else HEADROOM_CAP) + 1e-4)
               for f in shares.values())


def _as_first(sol: FleetSolution, first: FleetSolution, seconds: float) -> FleetSolution:
    """A tie-break's plan with ``first``'s status, gap, bound and model size (the same optimum), its seconds added."""
    return replace(sol, status=first.status, detail=first.detail, gap=first.gap, bound_usd=first.bound_usd,
                   time_limited=first.time_limited or sol.time_limited,
                   solve_seconds=first.solve_seconds + seconds, build_seconds=first.build_seconds,
                   n_variables=first.n_variables, n_integer_variables=first.n_integer_variables,
                   n_constraints=first.n_constraints)


def _skipped(before: int, why: str) -> Diagnostic:
    return Diagnostic("warning", "tie_break_skipped",
                      f"the tie-break to the fewest configurations was skipped ({why}); the first optimal plan "
                      f"is kept, with {before} configurations; a longer --time-limit-s leaves it room")


def _headroom_skipped(count: int, why: str) -> Diagnostic:
    return Diagnostic("warning", "tie_break_skipped",
                      f"the tie-break to the most headroom was skipped ({why}); the plan with {_count(count)} "
                      f"is kept as it was; a longer --time-limit-s leaves it room")


def _count(n: int) -> str:
    return f"{n} configuration{'' if n == 1 else 's'}"
