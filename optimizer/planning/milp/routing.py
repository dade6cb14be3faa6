"""A fixed fleet's routing as a linear program: how far a device's capacity may fall before the
fleet's own replicas can no longer carry the load, whatever the routing, and the routing that spreads the
load by capacity.

With the replicas n[w,k] of a plan held fixed, what is left of the fleet MILP
(:mod:`optimizer.planning.milp.build`) is the routing x, continuous. Scaling the capacities of
device d's options by f turns their capacity rows Σ_b λ[w,b]·x[w,b,k] / (f·μ[w,b,k]) ≤ n − spare
into Σ_b λ·x / μ ≤ f·(n − spare): linear in (x, f). The least such f is one LP::

    minimise f  s.t.  every bucket fully routed (pools: colocated + s = 1, prefill = decode = s,
                      and the pairing rows of ``problem.pairing_rows``),
                      Σ_b λ·x / μ ≤ f·(n[k] − spare[k])   for the replicas on d,
                      Σ_b λ·x / μ ≤ n[k] − spare[k]       for the others,   0 ≤ f ≤ 1, 0 ≤ x ≤ 1.

Every other row of the MILP (servers, replica minimums, budgets, power, inventories) depends
on the replicas only, so the plan stays feasible at every factor in [f*, 1]: used by the
sensitivity analysis to skip re-solves whose answer is that plan
(:func:`optimizer.planning.sensitivity.break_even_capacity`).

The same LP with a factor f_w on every option of each workload w, minimising Σ_w f_w, routes a solved
plan's load by capacity (:func:`balanced_routing`, at the end of every solve stage and re-size): each workload's busiest
deployment as idle as its replicas allow.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import replace

import pulp

from optimizer.planning.milp.problem import (
    FleetProblem,
    FleetSolution,
    Option,
    pairing_rows,
    spare_replicas,
)
from optimizer.planning.milp.solve import routed_loads, solve_lp

# The factor is rounded up to this grid, after adding FACTOR_SLACK.
FACTOR_GRID = 1e-6
FACTOR_SLACK = 1e-7  # HiGHS's primal feasibility tolerance: the LP's f may be this far below the exact one


def lowest_capacity_factor(problem: FleetProblem, sol: FleetSolution, device: str) -> float | None:
    """The least factor f on ``device``'s capacities at which ``sol``'s replicas (any routing)
    still meet every row of ``problem`` (module doc), rounded up to FACTOR_GRID; None when they do
    not meet them even at f = 1, or when the LP cannot be solved."""
    solved = _least_factor(problem, sol, lambda o: "f" if o.device == device else None)
    if solved is None:
        return None
    f, _ = solved
    return min(1.0, round(math.ceil((f + FACTOR_SLACK) / FACTOR_GRID) * FACTOR_GRID, 9))


def balanced_routing(problem: FleetProblem, sol: FleetSolution) -> FleetSolution:
    """``sol`` with each workload's load routed so that its busiest deployment is as idle as its
    replicas allow: the LP of the module doc with a factor f_w on every option of workload w,
    minimise Σ_w f_w (the workloads' replicas are their own, so each f_w is the least largest share
    Σ_b λ·x/μ / (n − spare) of one of w's deployments). The fleet MILP's cost depends on the replicas
    only, so its routing is any vertex of equal cost, one that may fill some replicas to their
    capacity at the SLO while others idle; a load balancer spreads by capacity, and so does this.
    ``sol`` unchanged when it has no plan or the LP cannot be solved."""
    if not sol.status.has_plan or not sol.replicas:
        return sol
    solved = _least_factor(problem, sol, lambda o: o.workload)
    if solved is None:
        return sol
    _, shares = solved
    return replace(sol, routed_qps=routed_loads(problem, sol.replicas, shares,
                                                {d.workload: d.bucket_qps for d in problem.demands}))


def _least_factor(problem: FleetProblem, sol: FleetSolution, factor: Callable[[Option], str | None]
                  ) -> tuple[float, dict[tuple[str, int, str], float]] | None:
    """The LP of the module doc with each option's capacity scaled by the factor ``factor`` names for
    it (None: not scaled), minimising the sum of the factors: (that sum, the routing share x of each
    (workload, bucket, option key) there); None when infeasible at factors 1 or unsolved."""
    options = {(o.workload, o.key): o for o in problem.options}
    reps = {idx: n for idx, n in sol.replicas.items() if n > 0}
    if any(idx not in options for idx in reps):
        return None
    prob = pulp.LpProblem("least_capacity_factor", pulp.LpMinimize)
    names = itertools.count(1)  # unique names (prob.variables() only counts variables already in a row)
    factors: dict[str, pulp.LpVariable] = {}
    by_workload: dict[str, list[tuple[str, int]]] = {}  # each workload's replicas, in sol's order
    for (w, k), n in reps.items():
        by_workload.setdefault(w, []).append((k, n))
    shares: dict[tuple[str, int, str], list[pulp.LpVariable]] = {}
    linked: dict[tuple[str, int, str], list[tuple[float | None, pulp.LpVariable]]] = {}  # pairing_rows
    routes: dict[tuple[str, int, str], pulp.LpVariable] = {}
    for dem in problem.demands:
        w = dem.workload
        for k, n in by_workload.get(w, []):
            o = options[(w, k)]
            load = []
            for b, (lam, mu) in enumerate(zip(dem.bucket_qps, o.capacity_qps, strict=True)):
                if lam > 0 and mu > 0:
                    x = prob.add_variable(f"x_{next(names)}", 0, 1)
                    shares.setdefault((w, b, o.stage), []).append(x)
                    linked.setdefault((w, b, o.stage), []).append((o.pair_link_bytes_s, x))
                    load.append((x, lam / mu))
                    routes[(w, b, k)] = x
            room = n - spare_replicas(dem, o, problem.units[o.device].gpus_per_node,
                                      sol.replicas_per_server.get((w, k)))
            name = factor(o)
            if name is not None and name not in factors:
                factors[name] = prob.add_variable(f"f_{next(names)}", 0, 1)
            prob += pulp.LpAffineExpression(load) <= (room * factors[name] if name is not None else room)
    for dem in problem.demands:
        for b, lam in enumerate(dem.bucket_qps):
            if lam <= 0:
                continue
            together = pulp.lpSum(shares.get((dem.workload, b, "colocated"), []))
            pre, dec = shares.get((dem.workload, b, "prefill")), shares.get((dem.workload, b, "decode"))
            if pre and dec:
                s = prob.add_variable(f"s_{next(names)}", 0, 1)
                prob += together + s == 1
                prob += pulp.lpSum(pre) == s
                prob += pulp.lpSum(dec) == s
                for _, lhs, rhs in pairing_rows(linked[(dem.workload, b, "prefill")],
                                                linked[(dem.workload, b, "decode")]):
                    prob += pulp.lpSum(lhs) <= pulp.lpSum(rhs)
            else:
                prob += together == 1
    prob += pulp.lpSum(factors.values())
    if not solve_lp(prob):
        return None
    if prob.status != pulp.LpStatusOptimal or any(f.value() is None for f in factors.values()):
        return None
    return sum(float(f.value()) for f in factors.values()), {idx: x.value() or 0.0 for idx, x in routes.items()}
