"""The most demand a what-if scenario's limits can serve: one MILP, not a bisection of feasibility probes.

The answer is the largest common multiplier s of every workload's rate for which some fleet
meets every constraint of the plan (budgets, power cap, inventory, replica rules, SLOs).
Written over the fleet MILP of the plan at rates S·λ (S = ``MAX_DEMAND_MULTIPLIER``), with
every bucket's routing rule Σ_k x[w,b,k] (+ s[w,b]) = 1 replaced by = t::

    maximise t ∈ [0, 1]   subject to   Σ_{k colocated} x[w,b,k] + s[w,b] = t   for every bucket
                                       (every other row of ``optimizer.planning.milp.build``)

Substituting x = t·x′ shows the equivalence: x′ is a routing of the buckets at rates t·S·λ, and
the capacity rule Σ_b S·λ[w,b]·x[w,b,k]/μ[w,b,k] ≤ n[w,k] is that routing's rule, so a fleet
serves demand s = t·S exactly when it is feasible here (the replica bounds of rate S·λ are at
least what any t ≤ 1 needs; x ≤ u of N+1 is unchanged). One solve replaces the ~10 probes of a
bracketing bisection and is exact, not within 2 %; it is solved to ``DEMAND_GAP``.

s is then rounded down to ``DEMAND_DIGITS`` significant digits — rounding down keeps it feasible,
and a monotone rounding keeps the budget frontier monotone where two budgets buy the same
fleet (their MILP optima then agree to the solver's tolerance only) — and the scenario's full
answer is the cheapest fleet at that demand (``optimize_plan``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import pulp

from catalog.load import Catalog
from optimizer.models.params import CalibrationParams
from optimizer.planning.candidate_set import CandidateSet, fleet_problem, rebase_candidates
from optimizer.planning.context_window import fit_plan_windows
from optimizer.planning.diagnose import unservable
from optimizer.planning.headroom import (
    candidate_capacity_factors,
    capacity_factors,
    demand_factor,
    sized,
)
from optimizer.planning.milp.build import build_model
from optimizer.planning.milp.problem import PRESOLVE_MIN_OPTIONS, FleetProblem, FleetSolution
from optimizer.planning.milp.solve import extract, solve_model
from optimizer.planning.safeguards import candidate_fidelity, fidelity_map
from optimizer.planning.solver_options import SolverOptions
from optimizer.results.plan_result import SolveStatus
from workloads.spec import Plan

MAX_DEMAND_MULTIPLIER = 1024.0
# Below this multiplier a scenario counts as serving nothing (the answer is shown at it).
MIN_DEMAND_MULTIPLIER = 1.0 / 256
DEMAND_GAP = 1e-9
DEMAND_DIGITS = 4
# Relative width of the bisection's final bracket (only when the MILP finds no incumbent in its time limit).
DEMAND_TOLERANCE = 0.02


def scaled(plan: Plan, multiplier: float) -> Plan:
    """``plan`` with every workload's rate (qps, or tokens_per_day of a batch workload) × ``multiplier``."""
    data = plan.model_dump(mode="python", by_alias=True)
    for w in data["workloads"]:
        if w.get("qps") is not None:
            w["qps"] = w["qps"] * multiplier
        if w.get("tokens_per_day") is not None:
            w["tokens_per_day"] = w["tokens_per_day"] * multiplier
    return Plan.model_validate(data)


def round_down(value: float, digits: int = DEMAND_DIGITS) -> float:
    """``value`` > 0 cut (not rounded) to ``digits`` significant digits: 9.4569 → 9.456."""
    step = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    return math.floor(value / step * (1 + 1e-12)) * step


def sized_candidates(plan: Plan, cset: CandidateSet, catalog: Catalog, params: CalibrationParams) -> CandidateSet:
    """``cset`` on ``plan``'s rates and limits, sized by its headroom policy as ``optimize_plan`` sizes it; ``plan``'s
    lengths cut to each model's context window first, as the candidates' were (``model_candidates``)."""
    plan, _ = fit_plan_windows(plan, catalog)
    rebased = rebase_candidates(cset, plan)
    fidelity = fidelity_map(rebased, params, catalog)
    widened = candidate_fidelity(rebased, fidelity, params, catalog)
    return sized(rebased, capacity_factors(plan, fidelity), demand_factor(plan),
                 candidate_capacity_factors(plan, fidelity, widened, rebased))


def max_share(plan: Plan, cset: CandidateSet, catalog: Catalog, params: CalibrationParams,
              options: SolverOptions) -> tuple[SolveStatus, float, FleetSolution | None]:
    """(status, s, fleet): the MILP of the module docstring on ``cset``; s = t·S (0 unless status
    has a plan); the fleet serving s (routed loads at rates S·λ: :func:`fleet_at`)."""
    top = sized_candidates(scaled(plan, MAX_DEMAND_MULTIPLIER), cset, catalog, params)
    if unservable(top):
        return SolveStatus.INFEASIBLE, 0.0, None
    status, t, fleet = solve_max_share(fleet_problem(top, plan), options)
    return status, t * MAX_DEMAND_MULTIPLIER, fleet


def solve_max_share(problem: FleetProblem, options: SolverOptions) -> tuple[SolveStatus, float, FleetSolution | None]:
    """(status, t, fleet): the largest share t ∈ [0, 1] of every bucket's rate in ``problem`` that
    some fleet meeting all its other rows serves (the module docstring's MILP), and that fleet
    (routed loads at the problem's full rates). t = 0 and None unless the status has a plan."""
    model = build_model(problem, "feasible")
    t = model.prob.add_variable("demand_share", 0, 1)
    for row in model.prob.constraints():
        if row.name.startswith("demand__"):  # together + s = 1  →  together + s − t = 0
            row.constant = 0
            row.addInPlace(-t)
    model.prob.sense = pulp.LpMaximize
    model.prob.setObjective(pulp.LpAffineExpression([(t, 1.0)]))
    run = solve_model(model, time_limit_s=options.time_limit_s, gap=DEMAND_GAP, solver=options.solver,
                      presolve=len(problem.options) >= PRESOLVE_MIN_OPTIONS)
    if not run.status.has_plan:
        return run.status, 0.0, None
    return run.status, min(max(float(t.value() or 0.0), 0.0), 1.0), extract(model, run, 0.0)


def fleet_at(fleet: FleetSolution, multiplier: float) -> FleetSolution:
    """The max-share fleet as a solution at ``multiplier`` × the plan's rates (≤ s): the same
    replicas and servers, each bucket routed in the same shares (routed loads × multiplier / S),
    so every capacity row holds with room to spare — a first incumbent for the min-cost solve."""
    f = multiplier / MAX_DEMAND_MULTIPLIER
    return replace(fleet, routed_qps={k: v * f for k, v in fleet.routed_qps.items()})


def max_demand_multiplier(plan: Plan, cset: CandidateSet, catalog: Catalog, params: CalibrationParams,
                          options: SolverOptions, feasible: Callable[[float], bool]
                          ) -> tuple[float, FleetSolution | None]:
    """The largest multiplier of every rate that ``plan``'s limits can serve (0: none ≥
    MIN_DEMAND_MULTIPLIER), and a fleet serving it (None after a bisection).

    The MILP of the module docstring, rounded down to DEMAND_DIGITS; a bisection over
    ``feasible`` only when that MILP stops at its time limit without any incumbent.
    """
    status, s, fleet = max_share(plan, cset, catalog, params, options)
    if status == SolveStatus.ERROR:
        return bisect(feasible), None
    if s < MIN_DEMAND_MULTIPLIER or fleet is None:
        return 0.0, None
    s = round_down(s)
    return s, fleet_at(fleet, s)


def bisect(feasible: Callable[[float], bool]) -> float:
    """Bracket by doubling (or halving) from 1, then bisect to DEMAND_TOLERANCE: feasibility is
    monotone in the multiplier, since cost never falls as demand rises."""
    lo, hi = 0.0, 1.0
    if feasible(1.0):
        lo = 1.0
        while hi < MAX_DEMAND_MULTIPLIER:
            hi *= 2.0
            if not feasible(hi):
                break
            lo = hi
        else:
            return lo
    else:
        probe = 1.0
        while probe > MIN_DEMAND_MULTIPLIER and lo == 0.0:
            probe /= 2.0
            if feasible(probe):
                lo, hi = probe, probe * 2.0
        if lo == 0.0:
            return 0.0
    while (hi - lo) / hi > DEMAND_TOLERANCE:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if feasible(mid) else (lo, mid)
    return lo
