"""Large fleets: a restricted MILP over each workload's few best options, with a gap against
the full problem.

At 500 workloads × 200 devices the full MILP has ~300,000 columns and HiGHS spends any
time limit in its root node, so only the one-device fleet came back. Every option most
plans use is among a workload's cheapest per req/s in one of its buckets, or among its
cheapest replicas (small workloads held at ``min_replicas``), so the restricted problem
keeps, for every workload w:

- the OPTIONS_PER_BUCKET options with the lowest amortised cost per req/s
  a[k] / μ[w,b,k] in each bucket b with load (``amortised_usd_per_replica``);
- the CHEAPEST_REPLICAS options with the lowest amortised cost per replica a[k];
- the options of a given feasible plan (the one-device fleet), so that plan stays feasible
  and is the first incumbent.

A plan of the restricted problem uses a subset of the options and meets every constraint,
so it is a plan of the full problem; it is reported ``feasible`` (never proven optimal) with
its gap against the full problem's lower bound Σ_w L[w] (``workload_lower_bounds``: each
workload alone at amortised server prices, as many as fit in BOUNDS_SHARE of the time limit,
which also enter the restricted MILP as cuts; :func:`analytic_lower_bounds` for the others).
"""

from __future__ import annotations

import time
from dataclasses import replace

from optimizer.planning.milp.problem import (
    FleetProblem,
    FleetSolution,
    Minimise,
    amortised_usd_per_replica,
    options_by_workload,
)
from optimizer.planning.milp.solve import solve_fleet, workload_lower_bounds
from optimizer.results.plan_result import SolveStatus

# Problems with at least this many options are solved restricted (the 20-workload benchmark
# has ~600 after pruning and is solved whole; the 500-workload one ~300,000).
RESTRICT_MIN_OPTIONS = 50_000
OPTIONS_PER_BUCKET = 6
CHEAPEST_REPLICAS = 3
# Share of the time limit for the full problem's workload bounds (its gap and the cuts).
BOUNDS_SHARE = 0.2


def restricted_problem(problem: FleetProblem, keep: frozenset[tuple[str, str]] = frozenset(),
                       per_bucket: int = OPTIONS_PER_BUCKET, cheapest: int = CHEAPEST_REPLICAS) -> FleetProblem:
    """``problem`` with each workload's best options only (module doc); ``keep``: (workload, key) kept too."""
    demands = {d.workload: d for d in problem.demands}
    chosen: set[tuple[str, str]] = set(keep)
    for w, opts in options_by_workload(problem).items():
        cost = {o.key: amortised_usd_per_replica(problem, o) for o in opts}
        for b, lam in enumerate(demands[w].bucket_qps):
            if lam <= 0:
                continue
            ranked = sorted((o for o in opts if o.capacity_qps[b] > 0),
                            key=lambda o, b=b: (cost[o.key] / o.capacity_qps[b], o.key))
            chosen.update((w, o.key) for o in ranked[:per_bucket])
        chosen.update((w, o.key) for o in sorted(opts, key=lambda o: (cost[o.key], o.key))[:cheapest])
    options = tuple(o for o in problem.options if (o.workload, o.key) in chosen)
    used = {o.device for o in options}
    return replace(problem, options=options, units={d: u for d, u in problem.units.items() if d in used})


def analytic_lower_bounds(problem: FleetProblem) -> dict[str, float]:
    """L[w] = max(min_replicas · min_k a[k], Σ_b λ_b · min_k a[k]/μ_b[k]) for every workload, in one pass.

    Valid: w's replicas cost at least Σ_k a[k]·n[w,k] at amortised server prices, and
    n[w,k] ≥ Σ_b λ_b·x[w,b,k]/μ_b[k] with Σ_k x[w,b,k] = 1, and Σ_k n[w,k] ≥ min_replicas.
    The fallback for workloads whose one-workload MILP did not fit in the time given.
    """
    demands = {d.workload: d for d in problem.demands}
    out = {}
    for w, opts in options_by_workload(problem).items():
        dem = demands[w]
        cost = {o.key: amortised_usd_per_replica(problem, o) for o in opts}
        load = sum(lam * min((cost[o.key] / o.capacity_qps[b] for o in opts if o.capacity_qps[b] > 0), default=0.0)
                   for b, lam in enumerate(dem.bucket_qps) if lam > 0)
        out[w] = max(dem.min_replicas * min(cost.values()), load)
    return out


def solve_restricted(problem: FleetProblem, *, time_limit_s: float, gap: float, solver: str = "highs",
                     minimise: Minimise = "objective", start: FleetSolution | None = None) -> FleetSolution:
    """The restricted MILP of ``problem`` in ``time_limit_s`` (bounds first, then the MILP in
    the rest), as a feasible plan of ``problem`` with its gap against Σ_w L[w]."""
    t0 = time.perf_counter()
    bounds = workload_lower_bounds(problem, time_limit_s=BOUNDS_SHARE * time_limit_s, gap=gap, solver=solver)
    analytic = analytic_lower_bounds(problem)
    lower = sum(max(bounds.get(w, 0.0), a) for w, a in analytic.items())
    keep = frozenset(k for k, n in start.replicas.items() if n > 0) if start is not None and start.status.has_plan \
        else frozenset()
    sub = restricted_problem(problem, keep)
    left = max(time_limit_s - (time.perf_counter() - t0), 0.05 * time_limit_s)
    sol = solve_fleet(sub, time_limit_s=left, gap=gap, solver=solver, minimise=minimise, start=start, cuts=bounds)
    if not sol.status.has_plan:
        return replace(sol, detail=f"restricted MILP ({len(sub.options):,} of {len(problem.options):,} options): "
                       + sol.detail, solve_seconds=time.perf_counter() - t0)
    full_gap = (sol.objective_usd - lower) / sol.objective_usd if lower is not None and sol.objective_usd else None
    detail = (f"restricted MILP over each workload's best options ({len(sub.options):,} of "
              f"{len(problem.options):,}; {sol.detail})"
              + (f"; gap {full_gap * 100:.3g} % against the full problem's workload bounds" if full_gap is not None
                 else "; gap unknown"))
    return replace(sol, status=SolveStatus.FEASIBLE, detail=detail, gap=full_gap, bound_usd=lower,
                   solve_seconds=time.perf_counter() - t0 - sol.build_seconds)
