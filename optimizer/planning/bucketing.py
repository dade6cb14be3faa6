"""Split a workload into request-size buckets, or plan it whole: whichever costs less.

A split workload's candidates have a capacity per bucket, each bucket meeting the SLO's
p99s on its own. That is sufficient for the workload — its tail is the mixture
P(X > T) = Σ_b f_b·P(X_b > T) ≤ Σ_b f_b·1 % = 1 % — but stricter than the SLO asks: with
4 equal buckets the longest bucket alone must meet the p99 of its own lengths, about the
workload's p99.75 length. Where routing short requests to cheap devices saves less than
that costs (long prompts under a tight TTFT), the split plan is dearer than serving the
whole length distribution on every replica (measured figures: ``docs/benchmarks.md``), and a
workload whose longest bucket no device can serve is still servable whole.

So every online workload with more than one bucket is planned both ways on its own
(:func:`optimizer.planning.milp.solve_alone`: integer replicas, servers amortised per GPU, budgets
dropped) and split only where that is cheaper by more than ``SPLIT_TIE_RTOL``; on a tie it
is served whole, which needs no size-aware routing in front of the replicas and gives the
fleet MILP a smaller problem (``docs/benchmarks.md`` compares it with the exact formulation
that lets the MILP route every bucket split, whole or both). A workload neither way can
serve stays split, so its diagnostics name the bucket that fails.
"""

from __future__ import annotations

import numpy as np

from optimizer.planning.milp.problem import (
    MAX_BUCKET_LOAD,
    Demand,
    FleetProblem,
    FleetSolution,
    Option,
    UnitTerms,
    amortised_units,
    spare_replicas,
)
from optimizer.planning.milp.resolve import cached_solve
from optimizer.planning.milp.solve import solve_alone
from optimizer.results.plan_result import Diagnostic, SolveStatus

# Split must be cheaper than whole by more than this fraction to be kept.
SPLIT_TIE_RTOL = 1e-4
# Each of the two small solves per workload stops here (they take milliseconds).
ALONE_TIME_LIMIT_S = 5.0
# Relative MIP gap of that solve; also part of its disk-cache key (``cached_solve`` settings), so one figure.
ALONE_GAP = 1e-6


def problem_parts(wc) -> tuple[Demand, tuple[Option, ...]]:
    """The MILP demand of a :class:`~optimizer.planning.candidates.WorkloadCandidates` and its options
    (kept candidates with capacity in some bucket)."""
    w = wc.workload
    demand = Demand(w.name, tuple(b.qps for b in wc.buckets), w.min_replicas, w.redundancy != "none",
                    per_server=w.redundancy == "n+1-node")
    options = []
    for c in wc.kept:
        caps = carried_capacity(demand.bucket_qps, c.capacity_qps)
        if any(mu > 0 for mu in caps):
            options.append(Option(w.name, c.key, c.device, c.gpus, caps, c.stage, c.pair_link_bytes_s))
    return demand, tuple(options)


def carried_capacity(bucket_qps: tuple[float, ...], capacity_qps: tuple[float, ...]) -> tuple[float, ...]:
    """A candidate's capacity μ[b] per bucket as the MILP takes it: 0 (does not carry b) where λ[b]/μ[b] > MAX_BUCKET_LOAD.

    The capacity row Σ_b (λ/μ)·x[b] ≤ n holds to HiGHS's tolerance (1e-6) on the share x: above λ/μ = 1e6 that
    tolerance is a whole replica's load, so the row no longer counts replicas (a capacity-table rate of 1e-9 req/s,
    λ/μ = 6e9, made HiGHS call a plan with a cheaper fleet infeasible and answer a dearer one "optimal"). Carrying
    such a bucket alone would take more than a million replicas of the candidate."""
    return tuple(0.0 if mu > 0 and lam / mu > MAX_BUCKET_LOAD else mu
                 for lam, mu in zip(bucket_qps, capacity_qps, strict=True))


def undominated_options(demand: Demand, options: tuple[Option, ...], units: dict[str, UnitTerms]) -> tuple[Option, ...]:
    """``options`` without those the workload's problem alone never needs: k is left out when an option j
    of the same stage costs no more per replica (a = g·(c_gpu + c_node/G), the amortised $ ``solve_alone``
    minimises), carries at least k's capacity in every bucket, keeps no more N+1 spares and pairs as widely
    (pools: ``candidates.pairs_as_widely``), both on
    devices with no server, inventory or allowed-device rule (only their GPUs count, linearly). Moving
    k's replicas and load to j then keeps every constraint (load/μ_j ≤ load/μ_k, the replica counts, the
    spares) at no more cost, so the optimum is the same; of equal options the first is kept.
    """
    if len(options) < 2:
        return options

    def free(d: str) -> bool:
        u = units[d]
        return u.allowed and u.inventory_gpus is None and not u.full_servers_only

    per_gpu = amortised_units({o.device: units[o.device] for o in options})
    cost = np.array([o.gpus * per_gpu[o.device].objective_usd.per_gpu for o in options])
    mu = np.array([o.capacity_qps for o in options], dtype=float)
    spare = np.array([spare_replicas(demand, o, units[o.device].gpus_per_node) for o in options])
    stage = np.array([o.stage for o in options])
    ok = np.array([free(o.device) for o in options])
    link = np.array([o.pair_link_bytes_s or 0.0 for o in options])
    # pairing (milp.problem.pairing_rows): j pairs as widely as k — a prefill j of a tier no faster, a decode j
    # receiving no slower
    pairs = np.where((stage == "prefill")[:, None], link[None, :] <= link[:, None],
                     np.where((stage == "decode")[:, None], link[None, :] >= link[:, None], True))
    # [k, j]: j dominates k weakly
    weak = ((cost[None, :] <= cost[:, None]) & np.all(mu[None, :, :] >= mu[:, None, :], axis=2)
            & (spare[None, :] <= spare[:, None]) & (stage[None, :] == stage[:, None]) & ok[None, :] & ok[:, None]
            & pairs)
    equal = ((cost[None, :] == cost[:, None]) & np.all(mu[None, :, :] == mu[:, None, :], axis=2)
             & (spare[None, :] == spare[:, None]) & (link[None, :] == link[:, None]))
    n = len(options)
    earlier = np.arange(n)[None, :] < np.arange(n)[:, None]
    beaten = weak & (~equal | earlier)
    np.fill_diagonal(beaten, False)
    return tuple(o for o, out in zip(options, beaten.any(axis=1), strict=True) if not out)


def alone_usd(wc, units: dict[str, UnitTerms]) -> float | None:
    """The workload's cheapest deployment on its own (amortised objective $), None if it has none."""
    demand, options = problem_parts(wc)
    options = undominated_options(demand, options, units)
    used = FleetProblem((demand,), options, {o.device: units[o.device] for o in options})  # the key of its data
    sol: FleetSolution | None = cached_solve("alone", used, lambda: solve_alone(
        demand, options, units, time_limit_s=ALONE_TIME_LIMIT_S, gap=ALONE_GAP) or FleetSolution(SolveStatus.INFEASIBLE, ""),
        gap=ALONE_GAP)
    return sol.objective_usd if sol is not None and sol.status.has_plan else None


def choose_bucketing(split, whole, units: dict[str, UnitTerms]) -> tuple[object, Diagnostic | None, bool]:
    """``split`` when it is cheaper alone than ``whole`` (the workload as one bucket) by more than
    ``SPLIT_TIE_RTOL``, or the only one that can serve it; else ``whole``.

    Returns the chosen WorkloadCandidates; when whole wins by more than the tolerance or
    split cannot serve the workload at all, an info diagnostic with both costs; and whether split
    serves the workload alone (``CandidateSet.split_alternatives`` keeps it for the fleet's second solve).
    """
    split_usd, whole_usd = alone_usd(split, units), alone_usd(whole, units)
    if whole_usd is None or (split_usd is not None and split_usd < whole_usd * (1 - SPLIT_TIE_RTOL)):
        return split, None, split_usd is not None
    if split_usd is not None and whole_usd >= split_usd * (1 - SPLIT_TIE_RTOL):
        return whole, None, True  # a tie: splitting saves nothing
    name, n = split.workload.name, len(split.buckets)
    if split_usd is None:
        why = f"split into {n} request-size buckets no candidate serves every bucket"
    else:
        why = (f"alone it costs ${whole_usd:,.0f} whole vs ${split_usd:,.0f} split into {n} request-size "
               "buckets, where each bucket must meet the p99s on its own")
    return whole, Diagnostic("info", "planned_whole", f"{name} is planned as one bucket: {why}"), split_usd is not None


# More notes than this are folded into one (a 500-workload plan would print hundreds).
MAX_NOTES = 5


def names_text(names: tuple[str, ...] | list[str], most: int = 10) -> str:
    """Workload names for a note: the first ``most`` and "and N more" ("a, b and 3 more")."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def fold_notes(notes: list[Diagnostic]) -> list[Diagnostic]:
    """The ``planned_whole`` notes as they are, or one note naming the workloads when there are many."""
    if len(notes) <= MAX_NOTES:
        return notes
    names = [n.message.split(" is planned as one bucket", 1)[0] for n in notes]
    shown = names_text(names)
    return [Diagnostic("info", "planned_whole",
                       f"{len(notes)} workloads are planned as one bucket because splitting them into request-size "
                       f"buckets costs more alone (each bucket must meet the p99s on its own) or cannot be "
                       f"served: {shown}")]
