"""Model building: variables, one builder per constraint family, the objective.

Each ``define_*`` documents its maths; :func:`build_model` reads like the table of contents.
The problem data and its formulation are described in :mod:`optimizer.planning.milp.problem`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulp

from optimizer.planning.milp.problem import (
    Demand,
    FleetProblem,
    Minimise,
    Option,
    amortised_usd_per_replica,
    options_by_workload,
    pairing_rows,
    spare_replicas,
    spread_packings,
    unique_slugs,
)

# ---------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------


@dataclass
class FleetModel:
    """The PuLP problem with its variables indexed by domain keys."""

    problem: FleetProblem
    prob: pulp.LpProblem
    w_name: dict[str, str]
    d_name: dict[str, str]
    k_name: dict[tuple[str, str], str] = field(default_factory=dict)
    demands: dict[str, Demand] = field(default_factory=dict)
    n: dict[tuple[str, str], pulp.LpVariable] = field(default_factory=dict)
    x: dict[tuple[str, int, str], pulp.LpVariable] = field(default_factory=dict)
    m: dict[str, pulp.LpVariable] = field(default_factory=dict)
    r: dict[str, pulp.LpVariable] = field(default_factory=dict)  # cloud instances (gpus_per_instance > 1)
    u: dict[tuple[str, str], pulp.LpVariable] = field(default_factory=dict)
    s: dict[tuple[str, int], pulp.LpVariable] = field(default_factory=dict)  # share served by the pools
    gpus: dict[str, pulp.LpAffineExpression] = field(default_factory=dict)
    z: dict[tuple[str, str, int], pulp.LpVariable] = field(default_factory=dict)  # spread q (n+1-node)
    y: dict[tuple[str, str, int], pulp.LpVariable] = field(default_factory=dict)  # its servers of its own
    a: dict[tuple[str, str], pulp.LpVariable] = field(default_factory=dict)  # replicas on shared servers
    ub: dict[tuple[str, str], int] = field(default_factory=dict)  # upper bound of n
    packings: dict[tuple[str, str], tuple[int, ...]] = field(default_factory=dict)  # spread q of an option
    growth: dict[str, pulp.LpVariable] = field(default_factory=dict)  # α[w]: x routes α·λ (define_growth)
    growth_cap: float = 1.0  # A: α[w] ≤ A (1: the fleet MILP itself, x routes λ)

    def total(self, which: str) -> pulp.LpAffineExpression:
        """Σ_d terms[d].per_gpu·rented[d] + terms[d].per_node·m[d] for a UnitTerms field (rented: :func:`gpus_rented`;
        on a fixed-size platform per_gpu is 0, its GPUs are in per_node)."""
        units = self.problem.units
        return pulp.lpSum(
            getattr(units[d], which).per_gpu * gpus_rented(self, d) + getattr(units[d], which).per_node * self.m[d]
            for d in self.m
        )


def replica_upper_bound(demand: Demand, option: Option, gpus_per_node: int = 1) -> int:
    """Most replicas of k that an optimal plan can need.

    max(min_replicas, ⌈Σ_b λ[b]/μ[b,k]⌉) + spare (N+1: see :func:`spare_replicas`): one
    replica more than carrying all the load k can carry, or than the replica minimum, is
    never cheaper, so the bound cuts off no optimum and tightens the relaxation.
    """
    load = sum(lam / mu for lam, mu in zip(demand.bucket_qps, option.capacity_qps, strict=True)
               if lam > 0 and mu > 0)
    return max(demand.min_replicas, math.ceil(load - 1e-9)) + spare_replicas(demand, option, gpus_per_node)


def define_variables(problem: FleetProblem) -> FleetModel:
    """n[w,k] integer, x[w,b,k] ∈ [0,1] where μ[w,b,k] > 0 and λ[w,b] > 0, m[d] integer, u[w,k] binary (N+1);
    for n+1-node options with spread placements (:func:`~optimizer.planning.milp.problem.spread_packings`)
    z[w,k,q] binary, y[w,k,q] integer ≤ ⌈ub/q⌉ and a[w,k] ∈ [0, ub] (:func:`define_spread`).
    m[d] ≤ ⌈Σ_k g[k]·ub[k] / G⌉, a spreadable option counted at max(g·ub, G·(ub − ⌊G/g⌋ + 1)): spread 1 per
    server it needs up to ub − ⌊G/g⌋ + 1 servers of its own (more replicas than it needs never lower the
    cost), and the servers' bound must not rule the spread out."""
    prob = pulp.LpProblem("gpuplan_fleet", pulp.LpMinimize)
    devices = sorted({o.device for o in problem.options})
    model = FleetModel(problem, prob, unique_slugs([d.workload for d in problem.demands]), unique_slugs(devices))
    model.demands = {d.workload: d for d in problem.demands}
    by_workload = options_by_workload(problem)
    for w in model.demands:
        keys = unique_slugs([o.key for o in by_workload.get(w, ())])
        model.k_name.update({(w, key): s for key, s in keys.items()})
    gpu_terms: dict[str, list[tuple[int, pulp.LpVariable]]] = {d: [] for d in devices}
    gpu_ub: dict[str, int] = dict.fromkeys(devices, 0)
    for o in problem.options:
        idx, dem = (o.workload, o.key), model.demands[o.workload]
        name = f"{model.w_name[o.workload]}__{model.k_name[idx]}"
        unit = problem.units[o.device]
        ub = replica_upper_bound(dem, o, unit.gpus_per_node)
        if unit.full_servers_only:  # room to fill the last server with replicas of this option
            ub += math.ceil((unit.gpus_per_node - 1) / o.gpus)
        model.n[idx] = prob.add_variable(f"n__{name}", 0, ub, cat=pulp.LpInteger)
        model.ub[idx] = ub
        gpu_terms[o.device].append((o.gpus, model.n[idx]))
        gpu_ub[o.device] += o.gpus * ub
        for b, (lam, mu) in enumerate(zip(dem.bucket_qps, o.capacity_qps, strict=True)):
            if lam > 0 and mu > 0:
                model.x[(o.workload, b, o.key)] = prob.add_variable(
                    f"x__{model.w_name[o.workload]}__b{b}__{model.k_name[idx]}", 0, 1)
        if dem.n_plus_one:
            model.u[idx] = prob.add_variable(f"u__{name}", 0, 1, cat=pulp.LpInteger)
        packings = spread_packings(dem, o, unit)
        for q in packings:
            model.z[(*idx, q)] = prob.add_variable(f"z__{name}__q{q}", 0, 1, cat=pulp.LpInteger)
            model.y[(*idx, q)] = prob.add_variable(f"y__{name}__q{q}", 0, math.ceil(ub / q), cat=pulp.LpInteger)
        if packings:
            model.a[idx] = prob.add_variable(f"a__{name}", 0, ub)
            model.packings[idx] = packings
            # spread q: at most ⌈(ub − ⌊G/g⌋ + q)/q⌉ ≤ ub − ⌊G/g⌋ + 1 servers of its own (the replicas it needs,
            # with q spare instead of ⌊G/g⌋), G GPU slots each in the servers row, instead of g·ub shared
            spread_servers = ub - unit.gpus_per_node // o.gpus + 1
            gpu_ub[o.device] += max(unit.gpus_per_node * spread_servers - o.gpus * ub, 0)
    for d in devices:
        per_node = problem.units[d].gpus_per_node
        model.m[d] = prob.add_variable(f"m__{model.d_name[d]}", 0, math.ceil(gpu_ub[d] / per_node),
                                       cat=pulp.LpInteger)
        model.gpus[d] = pulp.LpAffineExpression([(v, g) for g, v in gpu_terms[d]])
        if (c := problem.units[d].gpus_per_instance) > 1:
            model.r[d] = prob.add_variable(f"r__{model.d_name[d]}", 0, math.ceil(gpu_ub[d] / c), cat=pulp.LpInteger)
    return model


def define_growth(model: FleetModel, cap: float) -> None:
    """The fleet MILP with every workload's load grown by α[w] ∈ [1, A] (A = ``cap``), for the headroom tie-break
    (:mod:`~optimizer.planning.milp.tiebreak`). The routing rows carry α[w]·λ instead of λ: in every row below
    x[w,b,k] (and s[w,b]) stands for α[w]·x' and α[w]·s', x' the shares of the load itself::

        Σ_k x[w,b,k] (+ s[w,b]) = α[w]            (define_demand; the pool rows are homogeneous in x, s)
        Σ_b λ[w,b]·x[w,b,k] / μ[w,b,k] + spare ≤ n[w,k]      (define_capacity, unchanged)
        Σ_b x[w,b,k] ≤ B[k]·A·n[w,k],   x[w,b,k] ≤ A·u[w,k],   0 ≤ x, s ≤ A

    Linear in (x, α, n): the largest α[w] is 1 / (w's least busiest share), the share Σ_b λ·x'/μ / (n − spare)
    of w's busiest deployment under the best routing (what ``milp.routing.balanced_routing`` minimises).
    x' = x/α[w] meets every row of the fleet MILP: the demand rows sum to 1, the capacity rows hold since
    α ≥ 1 and n − spare ≥ 0, the others are homogeneous or looser; and any plan of the fleet MILP is a plan
    here at α = 1. Named ``growth__{workload}``, one per workload with load."""
    model.growth_cap = cap
    for (w, _, _), x in model.x.items():
        if w not in model.growth:
            model.growth[w] = model.prob.add_variable(f"growth__{model.w_name[w]}", 1, cap)
        x.upBound = cap


def define_demand(model: FleetModel) -> None:
    """Every bucket is fully routed: Σ_k x[w,b,k] = 1 for every bucket with λ[w,b] > 0.

    Named ``demand__{workload}__b{bucket}``. Where the workload has disaggregated pools that
    can serve the bucket, a share s[w,b] ∈ [0,1] of it goes to them and every such request
    passes through both pools::

        Σ_{k colocated} x[w,b,k] + s[w,b] = 1,   Σ_{k prefill} x[w,b,k] = s[w,b],   Σ_{k decode} x[w,b,k] = s[w,b]

    (``demand_prefill__…``, ``demand_decode__…``). Without pools the rule is the first one with s = 0.
    A prefill option budgets the KV transfer at its receive tier, so its load may go only to decode
    replicas receiving at least that fast: per prefill tier r (fastest first, ``pairing_rows``, which
    proves them exact), Σ_{prefill i: r_i ≥ r} x[w,b,i] ≤ Σ_{decode k: link_k ≥ r} x[w,b,k]
    (``pairing__{workload}__b{bucket}__t{j}``; none when every decode option receives at ≥ every tier).
    """
    options = {(o.workload, o.key): o for o in model.problem.options}
    stage = {idx: o.stage for idx, o in options.items()}
    shares: dict[tuple[str, int, str], list[pulp.LpVariable]] = {}
    linked: dict[tuple[str, int, str], list[tuple[float | None, pulp.LpVariable]]] = {}
    for (w, b, key), v in model.x.items():
        shares.setdefault((w, b, stage[(w, key)]), []).append(v)
        linked.setdefault((w, b, stage[(w, key)]), []).append((options[(w, key)].pair_link_bytes_s, v))
    for dem in model.problem.demands:
        wn = model.w_name[dem.workload]
        for b, lam in enumerate(dem.bucket_qps):
            if lam <= 0:
                continue
            pre, dec = shares.get((dem.workload, b, "prefill")), shares.get((dem.workload, b, "decode"))
            together = pulp.lpSum(shares.get((dem.workload, b, "colocated"), []))
            whole = model.growth.get(dem.workload, 1)  # 1, or α[w] (define_growth)
            if pre and dec:
                s = model.s[(dem.workload, b)] = model.prob.add_variable(f"s__{wn}__b{b}", 0, model.growth_cap)
                model.prob += together + s == whole, f"demand__{wn}__b{b}"
                model.prob += pulp.lpSum(pre) == s, f"demand_prefill__{wn}__b{b}"
                model.prob += pulp.lpSum(dec) == s, f"demand_decode__{wn}__b{b}"
                rows = pairing_rows(linked[(dem.workload, b, "prefill")], linked[(dem.workload, b, "decode")])
                for j, (_, lhs, rhs) in enumerate(rows):
                    model.prob += pulp.lpSum(lhs) <= pulp.lpSum(rhs), f"pairing__{wn}__b{b}__t{j}"
            else:
                model.prob += together == whole, f"demand__{wn}__b{b}"


# λ/μ below which the capacity row cannot keep a candidate without replicas from carrying a bucket (HiGHS meets
# rows to 1e-6): such options get the routed row of define_capacity. 100× the tolerance.
ROUTED_ROW_BELOW = 1e-4


def define_capacity(model: FleetModel) -> None:
    """Routed load fits the replicas at their SLO-safe rate.

    Σ_b λ[w,b]·x[w,b,k] / μ[w,b,k] ≤ n[w,k] − s[w,k]·u[w,k]: the load, in replicas' worth of
    capacity, summed over the buckets k carries (a replica serving a mix of buckets has
    capacity 1 = Σ_b its utilisation by bucket b). u is 0 except for N+1 workloads, where
    s[w,k] spare replicas of every candidate that carries load are kept: 1 (n+1), or the
    replicas one server holds (n+1-node; :func:`~optimizer.planning.milp.problem.spare_replicas`;
    see :func:`define_n_plus_one`), ⌊G/g⌋ on shared servers or q spread (:func:`define_spread`):
    spare = ⌊G/g⌋·u − Σ_q (⌊G/g⌋ − q)·z[w,k,q]. Named ``capacity__{workload}__{candidate}``.

    And Σ_b x[w,b,k] ≤ B[k]·n[w,k] (B[k]: the buckets k may carry), named ``routed__{workload}__{candidate}``:
    a candidate without replicas carries nothing. The capacity row alone cannot say so when λ/μ is
    below the solver's feasibility tolerance (1e-6): a workload of 1e-6 req/s, or a capacity-table
    rate of 1e7 req/s, was routed to n = 0 and planned at $0 with every SLO "met". The row is added
    only where some bucket's λ/μ is below ROUTED_ROW_BELOW (elsewhere the capacity row says it, and a
    row per option would grow every model).
    """
    for o in model.problem.options:
        idx = (o.workload, o.key)
        dem = model.demands[o.workload]
        load = pulp.lpSum(
            (lam / mu) * model.x[(o.workload, b, o.key)]
            for b, (lam, mu) in enumerate(zip(dem.bucket_qps, o.capacity_qps, strict=True))
            if (o.workload, b, o.key) in model.x
        )
        u = model.u.get(idx)
        spare = 0 if u is None else spare_replicas(dem, o, model.problem.units[o.device].gpus_per_node) * u
        if idx in model.a:  # spread q instead: spare q, not ⌊G/g⌋ (define_spread)
            most = model.problem.units[o.device].gpus_per_node // o.gpus
            spare -= pulp.lpSum((most - q) * z for (w, key, q), z in spread_of(model, idx))
        model.prob += load + spare <= model.n[idx], f"capacity__{model.w_name[o.workload]}__{model.k_name[idx]}"
        shares = [model.x[(o.workload, b, o.key)] for b in range(len(dem.bucket_qps)) if (o.workload, b, o.key) in model.x]
        if shares and min(lam / mu for lam, mu in zip(dem.bucket_qps, o.capacity_qps, strict=True)
                          if mu > 0) < ROUTED_ROW_BELOW:
            model.prob += pulp.lpSum(shares) <= len(shares) * model.growth_cap * model.n[idx], \
                f"routed__{model.w_name[o.workload]}__{model.k_name[idx]}"


def define_servers(model: FleetModel) -> None:
    """Whole servers: gpus[d] ≤ gpus_per_node[d] · m[d] (= when the plan forbids partly used servers).

    Tensor-parallel groups stay within a server (tp divides gpus_per_node), so counting GPUs
    against whole servers is exact: replicas of power-of-two sizes pack without waste.
    A partly used server of a fixed-size platform is paid in full through its per-server
    terms (see the module docstring of :mod:`~optimizer.planning.milp.problem`).
    With spread n+1-node options (:func:`define_spread`) the shared servers hold the GPUs of the
    others and a[w,k] (k's replicas when not spread), the spread ones have servers of their own:
    Σ_{k plain} g·n + Σ_{k spreadable} g·a + G·Σ y ≤ G·m[d] (it implies gpus[d] ≤ G·m[d]).
    Named ``servers__{device}``.
    """
    spread: dict[str, list[tuple[pulp.LpVariable, float]]] = {}
    for o in model.problem.options:
        idx = (o.workload, o.key)
        if idx in model.a:
            size = model.problem.units[o.device].gpus_per_node
            spread.setdefault(o.device, []).append((model.n[idx], -o.gpus))
            spread[o.device].append((model.a[idx], o.gpus))
            spread[o.device] += [(v, size) for _, v in spread_of(model, idx, model.y)]
    for d, m in model.m.items():
        unit = model.problem.units[d]
        used = model.gpus[d] + pulp.LpAffineExpression(spread[d]) if d in spread else model.gpus[d]
        if unit.full_servers_only:
            model.prob += used == unit.gpus_per_node * m, f"servers__{model.d_name[d]}"
        else:
            model.prob += used <= unit.gpus_per_node * m, f"servers__{model.d_name[d]}"


def spread_of(model: FleetModel, idx: tuple[str, str], family: dict | None = None
              ) -> list[tuple[tuple[str, str, int], pulp.LpVariable]]:
    """The z (or ``family``: y) variables of option ``idx``, by q."""
    family = model.z if family is None else family
    return [((*idx, q), family[(*idx, q)]) for q in model.packings.get(idx, ())]


def define_spread(model: FleetModel) -> None:
    """n+1-node: an option's replicas on the shared servers (spare ⌊G/g⌋), or spread over servers
    of their own at most q on each (spare q; :func:`~optimizer.planning.milp.problem.spread_packings`).

    For each option k with spread placements, ub its replica bound::

        Σ_q z[k,q] ≤ u[k]                        one placement, spread only when k carries load
        n[k] ≤ Σ_q q·y[k,q] + ub·(1 − Σ_q z[k,q])   spread q: the replicas fit q per server of their own
        y[k,q] ≤ ⌈ub/q⌉·z[k,q]                    servers of its own only when spread q
        a[k] ≥ n[k] − ub·Σ_q z[k,q]               not spread: its replicas are on the shared servers

    With the capacity rule (load ≤ n − ⌊G/g⌋·u + Σ_q (⌊G/g⌋ − q)·z, :func:`define_capacity`) and
    the servers rule (:func:`define_servers`) this is exact for an even spread: R replicas on y
    servers of their own lose at most ⌈R/y⌉ with any one server. Named ``spread_one__…``,
    ``spread_fit__…``, ``spread_servers__…__q{q}``, ``spread_shared__…`` (… = workload__candidate).
    """
    for idx, a in model.a.items():
        name = f"{model.w_name[idx[0]]}__{model.k_name[idx]}"
        zs = [z for _, z in spread_of(model, idx)]
        ub = model.ub[idx]
        model.prob += pulp.lpSum(zs) <= model.u[idx], f"spread_one__{name}"
        model.prob += (model.n[idx] <= pulp.lpSum(q * y for (_, _, q), y in spread_of(model, idx, model.y))
                       + ub - ub * pulp.lpSum(zs)), f"spread_fit__{name}"
        for (w, key, q), y in spread_of(model, idx, model.y):
            model.prob += y <= math.ceil(ub / q) * model.z[(w, key, q)], f"spread_servers__{name}__q{q}"
        model.prob += a >= model.n[idx] - ub * pulp.lpSum(zs), f"spread_shared__{name}"


def define_min_replicas(model: FleetModel) -> None:
    """Σ_k n[w,k] ≥ min_replicas[w] over colocated and decode replicas, and over colocated and
    prefill replicas when the workload has a prefill pool (every request needs a copy of each
    phase). Named ``min_replicas__{workload}`` (``min_replicas_prefill__{workload}``)."""
    stage = {(o.workload, o.key): o.stage for o in model.problem.options}
    reps: dict[tuple[str, str], list[pulp.LpVariable]] = {}
    for (w, key), v in model.n.items():
        reps.setdefault((w, stage[(w, key)]), []).append(v)
    for dem in model.problem.demands:
        if dem.min_replicas > 0:
            w, wn = dem.workload, model.w_name[dem.workload]
            together = reps.get((w, "colocated"), [])
            model.prob += pulp.lpSum(together + reps.get((w, "decode"), [])) >= dem.min_replicas, f"min_replicas__{wn}"
            if (w, "prefill") in reps:
                model.prob += pulp.lpSum(together + reps[(w, "prefill")]) >= dem.min_replicas, \
                    f"min_replicas_prefill__{wn}"


def define_n_plus_one(model: FleetModel) -> None:
    """N+1: the fleet still carries every bucket within its SLO with any one replica (n+1) or
    any one server (n+1-node) down.

    Formulation: every candidate that carries load of an N+1 workload keeps s spare
    replicas (1, or ⌊G/g⌋ — all the replicas of k one server can hold —, or q when its replicas
    are spread at most q per server of their own: :func:`define_spread`). u[w,k] ∈ {0,1} with
    x[w,b,k] ≤ u[w,k] (load ⇒ u = 1), and the capacity rule becomes load ≤ n − s·u.
    Whichever replica (server) fails, the others of its group carry its routed load without
    re-routing, wherever the replicas are placed; this is exact for a single-candidate
    workload and conservative (spares per group, not per workload) for a mixed one.
    Named ``n_plus_one__{workload}__b{bucket}__{candidate}``.
    """
    for (w, b, key), x in model.x.items():
        u = model.u.get((w, key))
        if u is not None:
            model.prob += x <= model.growth_cap * u, f"n_plus_one__{model.w_name[w]}__b{b}__{model.k_name[(w, key)]}"


def define_capex_budget(model: FleetModel) -> None:
    """Σ_d capex_gpu[d]·gpus[d] + capex_node·m[d] ≤ capex budget. Named ``capex_budget``."""
    cap = model.problem.limits.capex_usd
    if cap is not None:
        model.prob += model.total("capex_usd") <= cap, "capex_budget"


def define_annual_budget(model: FleetModel) -> None:
    """Yearly opex (power + maintenance + rental) ≤ annual budget. Named ``annual_budget``."""
    cap = model.problem.limits.annual_opex_usd
    if cap is not None:
        model.prob += model.total("annual_opex_usd") <= cap, "annual_budget"


def define_power_cap(model: FleetModel) -> None:
    """Σ_d (tdp_w[d]·gpus[d] + server_power_w[d]·m[d]) / 1000 ≤ max_power_kw. Named ``max_power_kw``."""
    cap = model.problem.limits.power_kw
    if cap is not None:
        model.prob += model.total("power_kw") <= cap, "max_power_kw"


def define_objective_cap(model: FleetModel) -> None:
    """Σ_d objective terms ≤ the cutoff (``Limits.objective_usd``): a fleet only counts below it. Named
    ``objective_cap``."""
    cap = model.problem.limits.objective_usd
    if cap is not None:
        model.prob += model.total("objective_usd") <= cap, "objective_cap"


def define_instances(model: FleetModel) -> None:
    """Cloud instances: gpus[d] ≤ c[d]·r[d] for a device rented in instances of c[d] GPUs (1 < c[d] < G[d]);
    its per-GPU money is paid on the c[d]·r[d] GPUs rented (:func:`gpus_rented`). Named ``instances__{device}``."""
    for d, r in model.r.items():
        model.prob += model.gpus[d] <= model.problem.units[d].gpus_per_instance * r, f"instances__{model.d_name[d]}"


def gpus_rented(model: FleetModel, d: str) -> pulp.LpAffineExpression:
    """The GPUs device d's per-GPU terms apply to: c[d]·r[d] when rented in cloud instances, else gpus[d]."""
    r = model.r.get(d)
    return model.problem.units[d].gpus_per_instance * r if r is not None else model.gpus[d]


def gpus_bought(model: FleetModel, d: str) -> pulp.LpAffineExpression:
    """GPUs of device d bought (or rented): gpus_per_node[d]·m[d] on a fixed-size platform (idle GPUs of a
    board are bought too), c[d]·r[d] in cloud instances, else gpus[d]."""
    unit = model.problem.units[d]
    return unit.gpus_per_node * model.m[d] if unit.fixed_size else gpus_rented(model, d)


def define_inventory(model: FleetModel) -> None:
    """GPUs bought ≤ inventory[d] for every device with a stated inventory (:func:`gpus_bought`).
    Named ``inventory__{device}``."""
    for d in model.m:
        unit = model.problem.units[d]
        if unit.inventory_gpus is not None:
            model.prob += gpus_bought(model, d) <= unit.inventory_gpus, f"inventory__{model.d_name[d]}"


def define_allowed_devices(model: FleetModel) -> None:
    """m[d] = 0 (hence gpus[d] = 0) for devices the plan does not allow. Named ``allowed__{device}``."""
    for d, m in model.m.items():
        if not model.problem.units[d].allowed:
            model.prob += m == 0, f"allowed__{model.d_name[d]}"




def define_workload_bounds(model: FleetModel, bounds_usd: Mapping[str, float]) -> None:
    """Valid cuts from the workloads solved one at a time (see :func:`workload_lower_bounds`).

    Σ_k a[k]·n[w,k] ≥ L[w], with a[k] the amortised cost of a replica and L[w] a proven
    lower bound on the cheapest fleet of w alone at amortised prices. Valid because
    c_node·m[d] ≥ c_node·gpus[d]/G[d], so the objective ≥ Σ_w Σ_k a[k]·n[w,k], and w's own
    replicas satisfy every constraint of its one-workload problem. The cuts lift the LP
    bound to about Σ_w L[w], leaving only the sharing of partly filled servers to branch on.
    Named ``workload_bound__{workload}``.
    """
    reps: dict[str, list[tuple[pulp.LpVariable, float]]] = {}
    for o in model.problem.options:
        reps.setdefault(o.workload, []).append((model.n[(o.workload, o.key)],
                                                amortised_usd_per_replica(model.problem, o)))
    for w, bound in bounds_usd.items():
        if bound > 0 and w in reps:
            model.prob += (pulp.LpAffineExpression([(v, a) for v, a in reps[w]]) >= bound,
                           f"workload_bound__{model.w_name[w]}")



# Tie-break weight: the whole term is at most this fraction of the cheapest GPU's cost per GPU.
TIE_BREAK_FRACTION = 1e-6


def tie_break(model: FleetModel) -> pulp.LpAffineExpression:
    """ε·Σ_d r[d]·gpus[d]: among fleets of equal cost, the GPUs go to devices whose keys sort first.

    r[d] is the rank of device key d in sorted order (0 for the first) and
    ε = TIE_BREAK_FRACTION · (cheapest amortised $ per GPU) / (number of devices), so the term
    never outweighs a cost difference of more than a millionth of one GPU's price. The
    reported objective is recomputed from the fleet without it (:func:`extract`).

    Routing is deliberately left out: where replicas have spare capacity the split of a
    bucket among them is open, and a linear tie-break would push the first candidate to
    exactly its SLO capacity. The split is the solver's (the same input gives the same one).
    """
    units = model.problem.units
    per_gpu = [units[d].objective_usd.per_gpu + units[d].objective_usd.per_node / units[d].gpus_per_node
               for d in model.m]
    cheapest = min((c for c in per_gpu if c > 0), default=1.0)
    eps = TIE_BREAK_FRACTION * cheapest / max(len(model.m), 1)
    return pulp.lpSum(eps * rank * model.gpus[d] for rank, d in enumerate(sorted(model.m)) if rank)


def define_objective(model: FleetModel, minimise: Minimise = "objective") -> None:
    """Minimise Σ_d c_gpu[d]·gpus[d] + c_node[d]·m[d] for the plan's objective (USD), plus :func:`tie_break`.

    Diagnostics minimise another figure instead: capex, annual opex, power, or one device's GPUs
    bought (:func:`gpus_bought`, what its inventory limits); ``feasible`` minimises nothing (0), so the
    solver stops at the first fleet that meets every constraint (what-if feasibility probes).
    """
    if isinstance(minimise, tuple):
        model.prob += gpus_bought(model, minimise[1])
    elif minimise == "feasible":
        model.prob += pulp.LpAffineExpression()
    elif minimise == "objective":
        model.prob += model.total("objective_usd") + tie_break(model)
    else:
        field_name = {"capex": "capex_usd", "annual_opex": "annual_opex_usd", "power": "power_kw"}[minimise]
        model.prob += model.total(field_name)


def build_model(problem: FleetProblem, minimise: Minimise = "objective",
                workload_bounds_usd: Mapping[str, float] | None = None, growth_cap: float | None = None) -> FleetModel:
    """The whole MILP: variables, one builder per constraint family, the objective. ``growth_cap``: every
    workload's load grown by α[w] ≤ growth_cap (:func:`define_growth`; the headroom tie-break)."""
    model = define_variables(problem)
    if growth_cap is not None:
        define_growth(model, growth_cap)
    define_demand(model)
    define_capacity(model)
    define_servers(model)
    define_instances(model)
    define_min_replicas(model)
    define_n_plus_one(model)
    define_spread(model)
    define_capex_budget(model)
    define_annual_budget(model)
    define_power_cap(model)
    define_objective_cap(model)
    define_inventory(model)
    define_allowed_devices(model)
    define_workload_bounds(model, workload_bounds_usd or {})
    define_objective(model, minimise)
    return model
