"""Large fleets: the decomposition over a neighbourhood of the pooled one-workload plans,
with a gap against the full problem.

At 500 workloads × 200 devices the full MILP has ~300,000 columns and HiGHS spends any
time limit in its root node, so only the one-device fleet came back. Every option most
plans use is among a workload's cheapest per req/s in one of its buckets, or among its
cheapest replicas (small workloads held at ``min_replicas``), so the MILP is restricted, for
every workload w, to the OPTIONS_PER_BUCKET options with the lowest amortised cost per req/s
in each bucket with load, its cheapest option per replica, and the options of the start
fleets (``heuristic.restricted_problem``). A plan of the restricted problem meets every
constraint of the full one; its gap is against the full problem's lower bound Σ_w L[w]
(each workload alone at amortised server prices while BOUNDS time lasts, the analytic
bound for the others: :mod:`optimizer.planning.milp.decompose`).
"""

from __future__ import annotations

from optimizer.planning.milp.decompose import solve_decomposed
from optimizer.planning.milp.heuristic import restricted_problem  # noqa: F401 (re-exported: its home before)
from optimizer.planning.milp.problem import FleetProblem, FleetSolution, Minimise

# Problems with at least this many options are solved restricted (the 20-workload benchmark
# has ~760 and is decomposed with the fleet MILP's polish; the 500-workload one ~120,000).
RESTRICT_MIN_OPTIONS = 50_000
OPTIONS_PER_BUCKET = 2


def solve_restricted(problem: FleetProblem, *, time_limit_s: float, gap: float, solver: str = "highs",
                     minimise: Minimise = "objective", start: FleetSolution | None = None) -> FleetSolution:
    """The restricted MILP of ``problem`` in ``time_limit_s`` (module doc): ``decompose.solve_decomposed``
    with a neighbourhood of OPTIONS_PER_BUCKET options per bucket and no full-MILP polish (the
    full MILP of this size does not leave its root node in any time limit). The answer is a
    plan of ``problem`` never dearer than ``start`` or the pooled one-workload plans, with its
    gap against Σ_w L[w]."""
    return solve_decomposed(problem, time_limit_s=time_limit_s, gap=gap, solver=solver, minimise=minimise,
                            start=start, per_bucket=OPTIONS_PER_BUCKET, polish=False)
