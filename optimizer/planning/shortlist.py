"""Which devices can be the cheapest one-device fleet: bounds that spare the comparison most solves."""

from __future__ import annotations

from dataclasses import replace

from optimizer.planning.milp.build import replica_upper_bound
from optimizer.planning.milp.problem import (
    FleetProblem,
    amortised_usd_per_replica,
    options_by_workload,
)


def single_device_shortlist(problem: FleetProblem, gap: float) -> FleetProblem:
    """``problem`` without the devices that cannot be the cheapest one-device fleet.

    For each allowed device d on which every bucket has a candidate, with a[k] the
    amortised $ of a replica (``amortised_usd_per_replica``):

    - upper bound U[d]: a feasible one-device fleet — each workload on the option of d
      that carries all its buckets with the fewest amortised $ at
      r[k] = max(min_replicas, ⌈Σ_b λ_b/μ_b[k]⌉) (+1 for N+1) replicas, then whole servers;
    - lower bound L[d] = Σ_w max(min_replicas · min_k a[k], Σ_b λ_b · min_k a[k]/μ_b[k])
      (servers amortised, replicas fractional, each bucket on its cheapest option — or its
      cheapest prefill plus decode pair of disaggregated pools);
    - only colocated options give U[d] (a pool alone serves no request).

    The solver returns each one-device fleet within ``gap`` of its optimum, so a device with
    L[d] > min_d U[d] / (1 − gap) never beats the best one and is not solved. Only without
    budgets, power cap and inventory (U[d] could break them); otherwise ``problem`` as is.
    Linear in the options.
    """
    lim = problem.limits
    if (lim.capex_usd is not None or lim.annual_opex_usd is not None or lim.power_kw is not None
            or any(u.inventory_gpus is not None for u in problem.units.values())):
        return problem
    by_workload = options_by_workload(problem)
    demands = {dem.workload: dem for dem in problem.demands}
    lower: dict[str, float] = {}
    upper: dict[str, float] = {}
    for d in sorted({o.device for o in problem.options}):
        unit = problem.units[d]
        if not unit.allowed:
            continue
        lo, gpus, covered = 0.0, 0, True
        for w, dem in demands.items():
            opts = [o for o in by_workload.get(w, ()) if o.device == d]
            live = [b for b, lam in enumerate(dem.bucket_qps) if lam > 0]
            if not opts or any(_per_request_usd(problem, opts, b) is None for b in live):
                covered = False
                break
            cost = {o.key: amortised_usd_per_replica(problem, o) for o in opts}
            per_bucket = sum(dem.bucket_qps[b] * _per_request_usd(problem, opts, b) for b in live)
            lo += max(dem.min_replicas * min(cost.values()), per_bucket)
            whole = [o for o in opts if o.stage == "colocated" and all(o.capacity_qps[b] > 0 for b in live)]
            if not whole:
                gpus = -1  # no single option carries every bucket: no simple upper bound
            elif gpus >= 0:
                best = min(whole, key=lambda o: (cost[o.key] * replica_upper_bound(dem, o), o.key))
                gpus += best.gpus * replica_upper_bound(dem, best)
        if not covered:
            continue
        lower[d] = lo
        if gpus >= 0:
            upper[d] = unit.figure("objective_usd", gpus, -(-gpus // unit.gpus_per_node))
    if not upper:
        return problem
    cutoff = min(upper.values()) / (1.0 - gap) * (1.0 + 1e-9)
    keep = {d for d, lo in lower.items() if lo <= cutoff}
    return replace(problem, options=tuple(o for o in problem.options if o.device in keep),
                   units={d: u for d, u in problem.units.items() if d in keep})


def _per_request_usd(problem: FleetProblem, opts, bucket: int) -> float | None:
    """Fewest amortised $ per req/s of ``bucket`` on ``opts``: a colocated option, or the cheapest
    prefill plus the cheapest decode option (a request needs both); None when neither serves it."""
    def best(stage: str) -> float | None:
        rates = [amortised_usd_per_replica(problem, o) / o.capacity_qps[bucket] for o in opts
                 if o.stage == stage and o.capacity_qps[bucket] > 0]
        return min(rates) if rates else None

    together, pre, dec = best("colocated"), best("prefill"), best("decode")
    pools = pre + dec if pre is not None and dec is not None else None
    return min((x for x in (together, pools) if x is not None), default=None)
