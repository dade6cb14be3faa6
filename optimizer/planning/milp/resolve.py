"""Re-solves of a fleet MILP whose data changed a little (sensitivity analysis): a known plan as
the first incumbent.

A re-solve (a price, a capacity factor, a demand factor changed) is proven by the same
branch-and-bound; what a good first incumbent saves is the search for it. On the chat fleet's
MILP (95 options) HiGHS spends ~0.26 s of its ~0.40 s finding the optimum and ~0.14 s proving
it (docs/benchmarks.md). :func:`transplant` carries a plan solved for one problem onto another
problem with the same workloads and buckets (replicas kept, each bucket's shares kept, so its
routed load scales with the bucket's rate) and :func:`is_feasible` checks it against every
constraint of the new problem, so that only plans that satisfy it are given to the solver.
A carried plan that no longer fits is :func:`topped_up` (its overflow on idle server GPUs, then on
the option of least marginal cost), one with replicas to spare is :func:`trimmed`; the cheapest
feasible of all is the start (``optimizer.planning.sensitivity._Solver.start``), and HiGHS then
mostly proves it (docs/benchmarks.md, Session 11).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace

import pulp

from optimizer.planning import disk_cache
from optimizer.planning.milp.build import build_model
from optimizer.planning.milp.heuristic import fleet_violations, placed_in_fleet
from optimizer.planning.milp.problem import (
    BOUNDS_MIN_OPTIONS,
    PRESOLVE_MIN_OPTIONS,
    FleetProblem,
    FleetSolution,
    fleet_servers,
    options_by_workload,
    pairing_rows,
    spare_replicas,
    spread_packings,
    uncovered_buckets,
)
from optimizer.planning.milp.solve import (
    CHILD_MIN_OPTIONS,
    extract,
    solve_fleet,
    solve_tuned_highs,
    start_values,
)
from optimizer.results.plan_result import SolveStatus

# HiGHS settings of the small re-solves (docs/benchmarks.md, solve-v8): costs scaled by 2⁻³ (HiGHS's
# own advice for this model's cost range, $1e-4 tie-break terms to $4e6 racks); the root's cut loop,
# most of a proof, kept short (cuts leave the LP after 2 rounds unused, the pool ages faster past 50
# rows); no sub-MIP heuristics nor feasibility jump (a re-solve starts from the best known plan),
# no symmetry detection. Interleaved replays of the captured re-solves, the same fleets and
# objectives as before on all three: power cap 11.8 → 8.9 s CPU (3 pairs), chat fleet 1.55 → 1.40 s
# (5 pairs), rag-disaggregated 1.21 → 0.66 s. The root reduced-cost heuristic stays on: without it
# too, one rag-disaggregated tornado end stopped at another plan within the gap (+0.03 %).
# speedpost (session 11): RENS and RINS off as well (HiGHS 1.16 still runs their sub-MIPs at
# mip_heuristic_effort 0: 17 sub-MIP calls in one power-cap re-solve); with the topped-up starts the
# re-solves are proofs. Captured re-solves replayed (scripts in docs/benchmarks.md "Session 11"), every
# answer the same: power cap 17 re-solves 3.30 → 2.41 s CPU, chat fleet 12: 0.242 → 0.224 s,
# rag-disaggregated 15: 0.243 → 0.205 s.
RESOLVE_HIGHS_OPTIONS = {"user_objective_scale": -3, "mip_lp_age_limit": 2, "mip_pool_soft_limit": 50,
                         "mip_heuristic_effort": 0.0, "mip_heuristic_run_feasibility_jump": False,
                         "mip_heuristic_run_rens": False, "mip_heuristic_run_rins": False,
                         "mip_detect_symmetry": False}
# Relative slack of the capacity and budget rows (HiGHS's primal feasibility tolerance is 1e-7
# absolute; a plan at its rows' limits, as every optimal plan is, must still count as feasible).
FEASIBILITY_TOLERANCE = 1e-7


def transplant(sol: FleetSolution, source: FleetProblem, target: FleetProblem) -> FleetSolution | None:
    """``sol`` (a plan of ``source``) as a plan of ``target``: the same replicas and routing shares.

    Routed load of bucket b on k = share[b,k] · λ_target[b], share = routed / λ_source. None when
    the workloads or their bucket counts differ (not the same plan structure).
    """
    src = {d.workload: d.bucket_qps for d in source.demands}
    dst = {d.workload: d.bucket_qps for d in target.demands}
    if src.keys() != dst.keys() or any(len(src[w]) != len(dst[w]) for w in src):
        return None
    routed = {}
    for (w, b, k), q in sol.routed_qps.items():
        lam = src[w][b]
        routed[(w, b, k)] = q / lam * dst[w][b] if lam > 0 else 0.0
    return replace(sol, routed_qps=routed)


def topped_up(problem: FleetProblem, sol: FleetSolution, fill_idle: bool = True) -> FleetSolution | None:
    """``sol`` (a plan carried onto ``problem`` by :func:`transplant`, whose replicas may no longer
    carry their routed load: a higher rate, a lower capacity) made to carry it, as a first incumbent.

    A deployment k of workload w that no longer carries its load (load_k = Σ_b routed[b,k] / μ[b,k]
    > n_k − s_k, s_k its N+1 spares) first gets (``fill_idle``) more replicas on the idle GPUs of its
    device's servers (m_d·G_d − gpus_d, the servers bought already), up to ⌈load_k − (n_k − s_k)⌉; it then keeps the
    share α_k = min(1, (n_k − s_k) / load_k) of its routed load (with its new n_k); the
    overflow of w, Σ_k (1 − α_k)·routed[b,k] in each bucket b, goes to the one colocated option of w
    with the lowest marginal cost beside the rest of the fleet
    (:func:`~optimizer.planning.milp.heuristic.placed_in_fleet`: GPUs of partly used servers are
    paid already), with ⌈Σ_b overflow_b / μ_b⌉ + spares replicas (added to its own when it is
    already deployed). Servers are ⌈gpus / gpus_per_node⌉. None when nothing overflows (``sol``
    as it is), when an overflowing workload runs disaggregated pools (a share moved off a pool
    would unbalance its other stage) or no option can take the overflow; the result is not
    checked against the shared rows (:func:`is_feasible` does).
    """
    options = {(o.workload, o.key): o for o in problem.options}
    demands = {d.workload: d for d in problem.demands}
    if any(idx not in options for idx in sol.replicas):
        return None
    load, unservable = _replica_loads(options, sol)
    if unservable:
        return None
    keep: dict[tuple[str, str], float] = {}
    replicas = dict(sol.replicas)
    gpus = {d: g for d, g in sol.gpus.items()}  # the fleet beside which the overflow is placed
    for idx, n in sol.replicas.items():
        o = options[idx]
        size = problem.units[o.device].gpus_per_node
        carried = n - spare_replicas(demands[idx[0]], o, size, sol.replicas_per_server.get(idx))
        need = load.get(idx, 0.0)
        if fill_idle and idx not in sol.replicas_per_server and \
                need > carried * (1 + FEASIBILITY_TOLERANCE) + FEASIBILITY_TOLERANCE:
            # first the idle GPUs of the servers it has: more replicas of k at no server cost
            idle = sol.nodes.get(o.device, 0) * size - gpus.get(o.device, 0)
            extra = min(math.ceil(need - carried - 1e-9), max(idle, 0) // o.gpus)
            if extra > 0:
                replicas[idx] = n + extra
                gpus[o.device] = gpus.get(o.device, 0) + extra * o.gpus
                carried += extra
        if need > carried * (1 + FEASIBILITY_TOLERANCE) + FEASIBILITY_TOLERANCE:
            keep[idx] = max(carried, 0) / need
    if replicas == sol.replicas and not keep:
        return None
    routed = dict(sol.routed_qps)
    by_workload = options_by_workload(problem)
    for w in sorted({w for w, _ in keep}, key=lambda w: list(demands).index(w)):
        if any(options[idx].stage != "colocated" for idx in sol.replicas if idx[0] == w):
            return None
        dem = demands[w]
        overflow = [0.0] * len(dem.bucket_qps)
        for (w2, b, k), q in sol.routed_qps.items():
            if w2 == w and (w, k) in keep:
                routed[(w, b, k)] = q * keep[(w, k)]
                overflow[b] += q * (1.0 - keep[(w, k)])
        new = placed_in_fleet(replace(dem, bucket_qps=tuple(overflow), min_replicas=0), by_workload.get(w, ()),
                              problem.units, gpus)
        if new is None:
            return None
        for idx, n in new.replicas.items():
            replicas[idx] = replicas.get(idx, 0) + n
            d = options[idx].device
            gpus[d] = gpus.get(d, 0) + n * options[idx].gpus
        for idx, q in new.routed_qps.items():
            routed[idx] = routed.get(idx, 0.0) + q
    return replace(_with_replicas(problem, sol, replicas, "topped up"), routed_qps=routed)


def trimmed(problem: FleetProblem, sol: FleetSolution) -> FleetSolution | None:
    """``sol`` (a plan carried onto ``problem`` by :func:`transplant`) with each loaded deployment
    cut to the replicas its routed load needs, n_k' = min(n_k, ⌈load_k⌉ + s_k) (load_k = Σ_b
    routed[b,k] / μ[b,k], s_k its N+1 spares), and servers ⌈gpus / gpus_per_node⌉: a first incumbent
    at a lower rate or a higher capacity. None when no deployment has a replica to spare; the
    replica minimums and shared rows are left to :func:`is_feasible`."""
    options = {(o.workload, o.key): o for o in problem.options}
    demands = {d.workload: d for d in problem.demands}
    if any(idx not in options for idx in sol.replicas):
        return None
    load, _ = _replica_loads(options, sol)  # load on a zero capacity: left to is_feasible
    replicas = dict(sol.replicas)
    for idx, n in sol.replicas.items():
        if load.get(idx, 0.0) <= 0:
            continue
        o = options[idx]
        need = math.ceil(load[idx] - 1e-9) + spare_replicas(demands[idx[0]], o, problem.units[o.device].gpus_per_node,
                                                            sol.replicas_per_server.get(idx))
        replicas[idx] = min(n, max(need, 1))
    if replicas == sol.replicas:
        return None
    return _with_replicas(problem, sol, replicas, "trimmed")


def _replica_loads(options: dict, sol: FleetSolution) -> tuple[dict[tuple[str, str], float], bool]:
    """Each deployment's load in replicas, load_k = Σ_b routed[b,k] / μ[b,k], over the buckets
    with capacity; and whether any routed load falls on a zero capacity (μ ≤ 0 or no option)."""
    load: dict[tuple[str, str], float] = {}
    unservable = False
    for (w, b, k), q in sol.routed_qps.items():
        if q <= 0:
            continue
        mu = options[(w, k)].capacity_qps[b] if (w, k) in options else 0.0
        if mu <= 0:
            unservable = True
            continue
        load[(w, k)] = load.get((w, k), 0.0) + q / mu
    return load, unservable


def _with_replicas(problem: FleetProblem, sol: FleetSolution, replicas: dict[tuple[str, str], int],
                   detail: str) -> FleetSolution:
    """``sol`` with ``replicas``: GPUs Σ g·n per device, servers ⌈gpus / gpus_per_node⌉ (spread
    n+1-node options: ⌈n/q⌉ of their own, ``problem.fleet_servers``), the objective."""
    spread = {idx: q for idx, q in sol.replicas_per_server.items() if replicas.get(idx, 0) > 0}
    gpus, nodes = fleet_servers(problem, replicas, spread)
    objective = float(sum(problem.units[d].figure("objective_usd", g, nodes[d]) for d, g in gpus.items()))
    return replace(sol, status=SolveStatus.FEASIBLE, detail=detail, objective_usd=objective,
                   replicas={idx: n for idx, n in replicas.items() if n > 0}, gpus=gpus, nodes=nodes,
                   replicas_per_server=spread)


def is_feasible(problem: FleetProblem, sol: FleetSolution) -> bool:
    """``sol`` satisfies every constraint of ``problem``'s MILP (:mod:`~optimizer.planning.milp.build`).

    Checked: every replica and routed share belongs to an option of ``problem`` with capacity in
    that bucket; each bucket fully routed (shares sum to 1, pools: colocated + prefill and
    colocated + decode, the pairing rows of ``problem.pairing_rows``); capacity Σ_b routed[b,k] / μ[b,k] ≤ n[k] − spare (N+1, with u = 1 wherever
    n > 0, the start :func:`~optimizer.planning.milp.solve.start_values` gives); replica
    minimums; servers ⌈gpus / gpus_per_node⌉ (full servers where required); allowed devices,
    inventories, capex / annual / power limits.
    """
    options = {(o.workload, o.key): o for o in problem.options}
    demands = {d.workload: d for d in problem.demands}
    if any(idx not in options for idx in sol.replicas):
        return False
    load: dict[tuple[str, str], float] = {}
    routed_sum: dict[tuple[str, int, str], float] = {}
    linked: dict[tuple[str, int, str], list[tuple[float | None, float]]] = {}
    for (w, b, k), q in sol.routed_qps.items():
        o = options.get((w, k))
        if o is None or (q > 0 and (o.capacity_qps[b] <= 0 or sol.replicas.get((w, k), 0) <= 0)):
            return False
        if q > 0:
            load[(w, k)] = load.get((w, k), 0.0) + q / o.capacity_qps[b]
            stage = o.stage
            routed_sum[(w, b, stage)] = routed_sum.get((w, b, stage), 0.0) + q
            linked.setdefault((w, b, stage), []).append((o.pair_link_bytes_s, q))
    for dem in problem.demands:
        for b, lam in enumerate(dem.bucket_qps):
            if lam <= 0:
                continue
            together = routed_sum.get((dem.workload, b, "colocated"), 0.0)
            pools = [routed_sum.get((dem.workload, b, s), 0.0) for s in ("prefill", "decode")]
            if not all(math.isclose(together + p, lam, rel_tol=1e-6) for p in pools):
                return False
            pairs = pairing_rows(linked.get((dem.workload, b, "prefill"), []), linked.get((dem.workload, b, "decode"), []))
            if any(sum(lhs) > sum(rhs) + 1e-6 * lam for _, lhs, rhs in pairs):
                return False
    for idx, n in sol.replicas.items():
        o, dem = options[idx], demands[idx[0]]
        # u = 1 wherever there are replicas, as the start gives it (start_values): spares kept by all of them
        q = sol.replicas_per_server.get(idx)
        if q and q not in spread_packings(dem, o, problem.units[o.device]):
            return False
        spare = spare_replicas(dem, o, problem.units[o.device].gpus_per_node, q) if n > 0 else 0
        if load.get(idx, 0.0) > (n - spare) * (1 + FEASIBILITY_TOLERANCE) + FEASIBILITY_TOLERANCE:
            return False
    if any(sol.nodes.get(d, 0) < m for d, m in fleet_servers(problem, sol.replicas, sol.replicas_per_server)[1].items()):
        return False  # spread options need their servers of their own
    return _replica_minimums_met(problem, sol) and not fleet_violations(problem, sol, FEASIBILITY_TOLERANCE)


def _replica_minimums_met(problem: FleetProblem, sol: FleetSolution) -> bool:
    """Σ colocated + decode (and colocated + prefill, with a prefill pool) replicas ≥ min_replicas."""
    stage = {(o.workload, o.key): o.stage for o in problem.options}
    count: dict[tuple[str, str], int] = {}
    for idx, n in sol.replicas.items():
        count[(idx[0], stage[idx])] = count.get((idx[0], stage[idx]), 0) + n
    has_prefill = {w for (w, _), s in stage.items() if s == "prefill"}
    for dem in problem.demands:
        w = dem.workload
        together = count.get((w, "colocated"), 0)
        if together + count.get((w, "decode"), 0) < dem.min_replicas:
            return False
        if w in has_prefill and together + count.get((w, "prefill"), 0) < dem.min_replicas:
            return False
    return True


def plan_key(sol: FleetSolution | None) -> tuple | None:
    """What a warm start gives the solver (its plan, not its timings), as plain data."""
    if sol is None:
        return None
    return (str(sol.status), sol.objective_usd, sorted(sol.replicas.items()), sorted(sol.routed_qps.items()),
            sorted(sol.gpus.items()), sorted(sol.nodes.items()), sorted(sol.replicas_per_server.items()))


def solve_key(problem: FleetProblem, start_key: object, **settings: object) -> tuple:
    """The disk cache key of a solve: the MILP data, what names its first incumbent, the settings."""
    return (repr(problem), start_key, sorted((k, repr(v)) for k, v in settings.items()))


def cached_solve(kind: str, problem: FleetProblem, compute: Callable[[], FleetSolution], *,
                 start: FleetSolution | None = None, **settings: object) -> FleetSolution:
    """``compute()`` (a solve of ``problem`` from ``start`` with ``settings``: gap, solver, ...)
    through the disk cache (:mod:`optimizer.planning.disk_cache`), kept only when proven optimal.

    HiGHS runs single-threaded and deterministically, so the same MILP data, first incumbent and
    gap give the same plan; the time limit is not in the key since only a solve that finished
    (``optimal``) is stored, and it finishes the same way under any longer limit. A hit reports
    0 solve and build seconds (what it cost now)."""
    key = solve_key(problem, plan_key(start), **settings)
    hit = disk_cache.get(kind, key)
    if isinstance(hit, FleetSolution):
        return replace(hit, solve_seconds=0.0, build_seconds=0.0)
    sol = compute()
    keep_solve(kind, key, sol)
    return sol


def keep_solve(kind: str, key: tuple, sol: FleetSolution) -> None:
    """Store ``sol`` under (``kind``, ``key``) when proven optimal; a solve stopped by its time
    limit (neither optimal nor infeasible) marks this run as not reproducible instead
    (``disk_cache.note_unsettled``)."""
    if sol.status == SolveStatus.OPTIMAL:
        disk_cache.put(kind, key, sol)
    elif sol.status != SolveStatus.INFEASIBLE:
        disk_cache.note_unsettled()


def resolve_fleet(problem: FleetProblem, *, start: FleetSolution | None, time_limit_s: float, gap: float,
                  solver: str = "highs") -> FleetSolution:
    """:func:`~optimizer.planning.milp.solve.solve_fleet` for a re-solve: ``start`` (feasible in
    ``problem``, or None) as the first incumbent, and RESOLVE_HIGHS_OPTIONS on a small problem
    (fewer options than the thresholds of the bound cuts, presolve and the child process, which
    ``solve_fleet`` keeps for the others, as it does the CBC fallback)."""
    small = len(problem.options) < min(BOUNDS_MIN_OPTIONS, PRESOLVE_MIN_OPTIONS, CHILD_MIN_OPTIONS)
    if solver != "highs" or not small or uncovered_buckets(problem) or not pulp.HiGHS(msg=False).available():
        return solve_fleet(problem, time_limit_s=time_limit_s, gap=gap, solver=solver, start=start)
    t0 = time.perf_counter()
    model = build_model(problem)
    build_seconds = time.perf_counter() - t0
    first = start_values(model, start) if start is not None and start.status.has_plan else None
    run = solve_tuned_highs(model, time_limit_s=max(time_limit_s - build_seconds, 0.1 * time_limit_s), gap=gap,
                            options=RESOLVE_HIGHS_OPTIONS, start=first, reported_limit_s=time_limit_s)
    if run is None:
        return solve_fleet(problem, time_limit_s=time_limit_s, gap=gap, solver=solver, start=start)
    return extract(model, run, build_seconds)
