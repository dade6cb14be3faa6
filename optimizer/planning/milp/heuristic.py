"""A feasible fleet without the fleet MILP, and the lower bound that measures it (no solver here:
:mod:`optimizer.planning.milp.decompose` runs the one-workload MILPs and the improvement).

Decomposition of the fleet MILP (:mod:`optimizer.planning.milp.problem`): the only rows that
tie workloads together are the servers (gpus[d] ≤ G[d]·m[d], integer m), the budgets, the
power cap and the inventories. With servers amortised per GPU (c_gpu + c_node/G) and those
shared rows dropped, the problem splits into one small MILP per workload:

- its optimum (or proven dual bound) L[w] bounds w's share of any fleet's cost, so
  Σ_w L[w] ≤ the optimum (:func:`pooled_bound`; valid because c_node·m[d] ≥ c_node·gpus[d]/G[d]);
- its replicas, pooled over the workloads on shared servers (m[d] = ⌈gpus[d]/G[d]⌉), are a
  fleet that meets every per-workload row; it costs at most Σ_w L[w] + Σ_d (one partly
  filled server of d), and is a plan of the full problem when the shared rows (budgets,
  power, inventory, whole servers only) hold — :func:`fleet_violations` checks them.

A workload whose one-workload MILP does not fit in the time given gets its cheapest
single-option plan instead (:func:`single_option_plan`: one candidate carries every bucket,
n = max(min_replicas, ⌈Σ_b λ_b/μ_b⌉ + spare)), and the analytic bound
(:func:`analytic_lower_bounds`).

The pooled plans are then consolidated (:func:`consolidate`: one-workload plans scatter over
near-identical devices, each paying a partly used server), and :func:`restricted_problem`
gives the neighbourhood of the fleet that the decomposition's MILP searches.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from optimizer.planning.milp.problem import (
    Demand,
    FleetProblem,
    FleetSolution,
    Option,
    UnitTerms,
    amortised_usd_per_replica,
    fleet_servers,
    options_by_workload,
    spare_replicas,
)
from optimizer.results.plan_result import SolveStatus


@dataclass(frozen=True)
class WorkloadPlan:
    """One workload's replicas and routing in a pooled fleet, with its proven amortised bound."""

    workload: str
    replicas: dict[tuple[str, str], int]
    routed_qps: dict[tuple[str, int, str], float]
    bound_usd: float | None  # proven lower bound of its amortised cost (None: not proven)
    replicas_per_server: dict[tuple[str, str], int] = field(default_factory=dict)  # spread n+1-node options


def single_option_plan(demand: Demand, options: tuple[Option, ...], units: Mapping[str, UnitTerms]
                       ) -> WorkloadPlan | None:
    """The cheapest plan where one colocated candidate k carries every bucket of the workload.

    n[k] = max(min_replicas, ⌈Σ_b λ_b/μ_b[k]⌉ + s[k]) (s: N+1 spares, :func:`spare_replicas`),
    cost a[k]·n[k] at amortised server prices; k must serve every bucket with load and its
    device be allowed. None when no such candidate exists (e.g. only pools cover a bucket).
    """
    loaded = [b for b, lam in enumerate(demand.bucket_qps) if lam > 0]
    best: tuple[float, str, int, Option] | None = None
    for o in options:
        unit = units[o.device]
        if o.stage != "colocated" or not unit.allowed or any(o.capacity_qps[b] <= 0 for b in loaded):
            continue
        load = sum(demand.bucket_qps[b] / o.capacity_qps[b] for b in loaded)
        n = max(demand.min_replicas, math.ceil(load - 1e-9) + spare_replicas(demand, o, unit.gpus_per_node), 1)
        per_gpu = unit.objective_usd.per_gpu + unit.objective_usd.per_node / unit.gpus_per_node
        cost = n * o.gpus * per_gpu
        if best is None or (cost, o.key) < best[:2]:
            best = (cost, o.key, n, o)
    if best is None:
        return None
    _, key, n, _ = best
    w = demand.workload
    routed = {(w, b, key): demand.bucket_qps[b] for b in loaded}
    return WorkloadPlan(w, {(w, key): n}, routed, None)


def pooled_fleet(problem: FleetProblem, plans: Mapping[str, WorkloadPlan], detail: str = "pooled") -> FleetSolution:
    """The workloads' plans on shared servers: gpus[d] = Σ g[k]·n[w,k], m[d] = ⌈gpus[d]/G[d]⌉ (spread
    n+1-node options: ⌈n/q⌉ servers of their own, ``problem.fleet_servers``), objective
    Σ_d c_gpu[d]·gpus[d] + c_node[d]·m[d] (status feasible; check :func:`fleet_violations`)."""
    replicas: dict[tuple[str, str], int] = {}
    routed: dict[tuple[str, int, str], float] = {}
    spread: dict[tuple[str, str], int] = {}
    for p in plans.values():
        replicas.update(p.replicas)
        routed.update(p.routed_qps)
        spread.update(p.replicas_per_server)
    gpus, nodes = fleet_servers(problem, replicas, spread)
    objective = float(sum(problem.units[d].figure("objective_usd", g, nodes[d]) for d, g in gpus.items()))
    return FleetSolution(SolveStatus.FEASIBLE, detail, objective, None, 0.0, 0.0, "heuristic",
                         replicas, routed, gpus, nodes, replicas_per_server=spread)


def fleet_violations(problem: FleetProblem, sol: FleetSolution, tolerance: float = 1e-9) -> list[str]:
    """The shared rows a fleet can break ([] when it meets them all): a device outside the problem
    or not allowed, fewer servers than ⌈gpus / gpus_per_node⌉, whole servers only, inventory,
    capex and annual budgets, power cap (each limit met within ``tolerance``, relative and absolute)."""
    out = []
    units = problem.units
    bought = {d: g for d, g in sol.gpus.items() if g > 0}
    for d, g in bought.items():
        u, m = units.get(d), sol.nodes.get(d, 0)
        if u is None or not u.allowed:
            out.append(f"{d}: not allowed")
            continue
        if m < math.ceil(g / u.gpus_per_node):
            out.append(f"{d}: {g} GPUs need more than {m} servers")
        if u.full_servers_only and g != u.gpus_per_node * m:
            out.append(f"{d}: {g} GPUs do not fill {m} whole servers")
        if u.inventory_gpus is not None and u.installed_gpus(g, m) > u.inventory_gpus:
            out.append(f"{d}: {u.installed_gpus(g, m)} GPUs > inventory {u.inventory_gpus}")
    if out:
        return out
    caps = (("capex_usd", problem.limits.capex_usd), ("annual_opex_usd", problem.limits.annual_opex_usd),
            ("power_kw", problem.limits.power_kw))
    for name, cap in caps:
        total = sum(units[d].figure(name, g, sol.nodes[d]) for d, g in bought.items())
        if cap is not None and total > cap * (1 + tolerance) + tolerance:
            out.append(f"{name} {total:,.2f} > {cap:,.2f}")
    return out


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


def pooled_bound(problem: FleetProblem, plans: Mapping[str, WorkloadPlan]) -> float:
    """Σ_w L[w]: the proven bound of each workload alone, or the analytic one where none
    (``analytic_lower_bounds``); a lower bound on the fleet's optimum (module doc)."""
    analytic = analytic_lower_bounds(problem)
    return sum(max(a, (plans[w].bound_usd or 0.0) if w in plans else 0.0) for w, a in analytic.items())


def restricted_problem(problem: FleetProblem, keep: frozenset[tuple[str, str]] = frozenset(),
                       per_bucket: int = 2, cheapest: int = 1) -> FleetProblem:
    """``problem`` with each workload's best options only; ``keep``: (workload, key) kept too.

    For every workload w: the ``per_bucket`` options with the lowest amortised cost per req/s
    a[k]/μ[w,b,k] in each bucket b with load, and the ``cheapest`` options with the lowest
    amortised cost per replica a[k] (small workloads held at min_replicas). A plan of the
    restricted problem uses a subset of the options and meets every constraint, so it is a
    plan of ``problem``.
    """
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


def fleet_cost_usd(units: Mapping[str, UnitTerms], gpus: Mapping[str, int]) -> float:
    """Σ_d c_gpu[d]·gpus[d] + c_node[d]·⌈gpus[d]/G[d]⌉: the objective of a fleet on whole servers."""
    return sum(units[d].figure("objective_usd", g, math.ceil(g / units[d].gpus_per_node)) for d, g in gpus.items() if g)


def placed_in_fleet(demand: Demand, options: tuple[Option, ...], units: Mapping[str, UnitTerms],
                    others_gpus: Mapping[str, int], banned: frozenset[str] = frozenset()) -> WorkloadPlan | None:
    """The single-option plan (:func:`single_option_plan`'s replica count) whose marginal cost beside
    a fleet using ``others_gpus`` is lowest: c_gpu·n·g + c_node·(⌈(o + n·g)/G⌉ − ⌈o/G⌉), the GPUs of
    partly used servers being paid already. Devices in ``banned``, not allowed, whole-servers-only
    (the MILP's work) or out of inventory are skipped. None when no option fits."""
    loaded = [b for b, lam in enumerate(demand.bucket_qps) if lam > 0]
    best: tuple[float, str, int] | None = None
    for o in options:
        u = units[o.device]
        if (o.stage != "colocated" or o.device in banned or not u.allowed or u.full_servers_only
                or any(o.capacity_qps[b] <= 0 for b in loaded)):
            continue
        load = sum(demand.bucket_qps[b] / o.capacity_qps[b] for b in loaded)
        n = max(demand.min_replicas, math.ceil(load - 1e-9) + spare_replicas(demand, o, u.gpus_per_node), 1)
        before = others_gpus.get(o.device, 0)
        after = before + n * o.gpus
        nodes_after = math.ceil(after / u.gpus_per_node)
        if u.inventory_gpus is not None and u.installed_gpus(after, nodes_after) > u.inventory_gpus:
            continue
        cost = u.objective_usd.per_gpu * n * o.gpus + u.objective_usd.per_node * (
            nodes_after - math.ceil(before / u.gpus_per_node))
        if best is None or (cost, o.key) < best[:2]:
            best = (cost, o.key, n)
    if best is None:
        return None
    _, key, n = best
    w = demand.workload
    return WorkloadPlan(w, {(w, key): n}, {(w, b, key): demand.bucket_qps[b] for b in loaded}, None)


def consolidate(problem: FleetProblem, plans: Mapping[str, WorkloadPlan], *, time_limit_s: float,
                max_rounds: int | None = None, guarded: list[str] | None = None) -> dict[str, WorkloadPlan]:
    """Local search on the fleet's true cost (:func:`fleet_cost_usd`) from the pooled plans, two moves:

    - re-place: a workload's plan replaced by its cheapest single option beside the others
      (:func:`placed_in_fleet`), largest workloads first;
    - empty a device: every workload on device d re-placed without d, largest first, the
      devices with the most $ of idle server GPUs first (one-workload plans scatter over
      near-identical devices, each paying a partly used server).

    A move is kept when the fleet gets cheaper and breaks no shared row (:func:`fleet_violations`);
    rounds repeat until one keeps none, after ``max_rounds`` (a work limit: the same answer on any
    machine) or when ``time_limit_s`` is spent (a guard: ``guarded`` then gets "consolidate").
    No solver: O(options) a move.
    """
    deadline = time.perf_counter() + time_limit_s
    units, out = problem.units, dict(plans)
    by_key = {(o.workload, o.key): o for o in problem.options}
    by_workload = options_by_workload(problem)
    order = sorted(problem.demands, key=lambda d: (-sum(d.bucket_qps), d.workload))

    def gpus_of(p: WorkloadPlan) -> dict[str, int]:
        g: dict[str, int] = {}
        for idx, n in p.replicas.items():
            g[by_key[idx].device] = g.get(by_key[idx].device, 0) + n * by_key[idx].gpus
        return g

    def add(a: Mapping[str, int], b: Mapping[str, int], sign: int = 1) -> dict[str, int]:
        return {d: a.get(d, 0) + sign * b.get(d, 0) for d in set(a) | set(b)}

    fleet = {d: g for d, g in pooled_fleet(problem, out).gpus.items()}
    cost = fleet_cost_usd(units, fleet)

    def keep(trial: dict[str, WorkloadPlan], gpus: dict[str, int]) -> bool:
        nonlocal out, fleet, cost
        c = fleet_cost_usd(units, gpus)
        if c < cost * (1 - 1e-9) and not fleet_violations(problem, pooled_fleet(problem, trial)):
            out, fleet, cost = trial, gpus, c
            return True
        return False

    improved, rounds = True, 0
    while improved and (max_rounds is None or rounds < max_rounds):
        if time.perf_counter() >= deadline:
            if guarded is not None:
                guarded.append("consolidate")
            break
        improved, rounds = False, rounds + 1
        for dem in order:
            w = dem.workload
            others = add(fleet, gpus_of(out[w]), -1)
            new = placed_in_fleet(dem, by_workload.get(w, ()), units, others)
            if new is not None and keep({**out, w: replace(new, bound_usd=out[w].bound_usd)}, add(others, gpus_of(new))):
                improved = True
        waste = {d: units[d].objective_usd.per_node * (-g % units[d].gpus_per_node) / units[d].gpus_per_node
                 for d, g in fleet.items() if g}
        for d in sorted((d for d in waste if waste[d] > 0), key=lambda d: (-waste[d], d)):
            if time.perf_counter() >= deadline:
                if guarded is not None:
                    guarded.append("consolidate")
                break
            users = [dem for dem in order if d in gpus_of(out[dem.workload])]
            trial, gpus = dict(out), dict(fleet)
            for dem in users:
                gpus = add(gpus, gpus_of(out[dem.workload]), -1)
            for dem in users:
                new = placed_in_fleet(dem, by_workload.get(dem.workload, ()), units, gpus, frozenset({d}))
                if new is None:
                    break
                trial[dem.workload] = replace(new, bound_usd=out[dem.workload].bound_usd)
                gpus = add(gpus, gpus_of(new))
            else:
                improved = keep(trial, gpus) or improved
    return out
