"""A proven lower bound on the cheapest fleet that buys a given device, from one LP.

The fleet MILP's own relaxation is weak where servers are bought whole (an 8-GPU board or a
72-GPU rack at a fraction of its price: the chat fleet's LP bound is $226 k against its $444 k
optimum). Two valid rows tighten it for the question "can a fleet that buys device d beat B?":

- m[d] ≥ 1 (a fleet that buys d has at least one of its servers);
- Σ_{k on d'} x[w,b,k] ≤ m[d'] for every bucket and device d' (a bucket routed to d' at all
  needs a replica of d', hence a server of d'; the shares of a bucket add up to at most 1).

Both hold at every integer point of the MILP with gpus[d] > 0, so the LP optimum of the
model with them, without the tie-break term (:func:`~optimizer.planning.milp.build.tie_break`),
bounds the objective of every such fleet from below. Used by the sensitivity tornado: the low
price end of a device the fleet does not buy leaves the optimum at B's cost when this bound is
at least B's cost (:func:`optimizer.planning.sensitivity.tornado_rows`).
"""

from __future__ import annotations

import math

import pulp

from optimizer.planning.milp.build import build_model
from optimizer.planning.milp.problem import FleetProblem
from optimizer.planning.milp.solve import solve_lp


def cheapest_with_device_bound(problem: FleetProblem, device: str) -> float | None:
    """A lower bound ($, the plan's objective) on every fleet of ``problem`` that buys ``device``
    (module doc): math.inf when the LP is infeasible (no fleet can buy it), None when the solver
    failed or ``device`` has no option."""
    if device not in {o.device for o in problem.options}:
        return None
    model = build_model(problem)
    stage_device = {(o.workload, o.key): o.device for o in problem.options}
    routed: dict[tuple[str, int, str], list[pulp.LpVariable]] = {}
    for (w, b, k), x in model.x.items():
        routed.setdefault((w, b, stage_device[(w, k)]), []).append(x)
    for (w, b, d), xs in routed.items():
        model.prob += pulp.lpSum(xs) <= model.m[d], f"routed_needs_server__{model.w_name[w]}__b{b}__{model.d_name[d]}"
    model.prob += model.m[device] >= 1, "buys_device"
    model.prob.setObjective(model.total("objective_usd"))
    for v in model.prob.variables():
        v.cat = pulp.LpContinuous
    if not solve_lp(model.prob):
        return None
    if model.prob.status == pulp.LpStatusInfeasible:
        return math.inf  # no fleet buys the device (a power cap or a budget it cannot fit in)
    if model.prob.status != pulp.LpStatusOptimal:
        return None
    return pulp.value(model.prob.objective)
