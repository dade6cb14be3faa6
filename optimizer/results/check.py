"""An independent check of a plan result: recompute everything from the plan alone.

:func:`check_plan` uses only the :class:`~optimizer.results.plan_result.PlanResult` (its buckets, routing,
candidate capacities, deployments, fleet and assumptions) — no solver, no model, and its
own arithmetic rather than :mod:`optimizer.results.money` — and returns the violations it finds:

- demand: every bucket's routed load adds up to its rate (colocated + prefill pools = colocated +
  decode pools = rate: a request served by disaggregated pools passes through one of each);
- pairing: a prefill pool budgets the KV transfer at its receive tier (``pair_link_gb_s``), so per
  bucket and tier r the load through prefill pools of tier ≥ r is at most the load through decode
  pools receiving at ≥ r (with equal totals, these are exactly the conditions for every request's
  prefill load to be matched by decode load at least as fast: Hall's theorem on nested sets);
- capacity: Σ_b routed[w,b,k] / μ[w,b,k] ≤ replicas (− 1 for N+1 when loaded); nothing is
  routed where μ = 0; each deployment's capacity_qps covers its qps;
- N+1 per server (redundancy n+1-node): the placement fits the servers (spread deployments on
  ⌈replicas / replicas_per_server⌉ servers of their own, the others on the rest), and losing any one
  server — a spread deployment's server holds ⌊R/y⌋ or ⌈R/y⌉ of its replicas, a shared one at most
  min(replicas, ⌊G/g⌋) of each deployment, wherever they are placed — leaves every deployment
  enough replicas for its routed load;
- SLOs: every loaded deployment's predicted p99s are within its workload's SLOs, and the
  ``met`` flags agree; min_replicas holds (for each phase); a disaggregated workload end to end:
  load on both kinds of pool, TTFT predicted on the prefill pools, TPOT on the decode pools;
- servers: the fleet's GPUs per device equal the deployments' replicas · tp · pp and fit in
  nodes · gpus_per_node, with tp ≤ gpus_per_node; a fixed-size platform installs
  nodes · gpus_per_node GPUs, any other c·⌈gpus / c⌉ in instances of c = gpus_per_instance (a cloud
  instance smaller than the server; 1: the GPUs in use); no server is partly used when the plan forbids it;
- budgets and power: capex ≤ capex budget, opex ≤ annual budget, power ≤ max_power_kw,
  and (given the plan) GPUs ≤ inventory and only allowed devices;
- money: every total of ``docs/plan-json.md`` recomputed from the fleet and assumptions,
  and the workloads' cost shares adding up to tco_usd.
"""

from __future__ import annotations

import math

from optimizer.results.plan_result import PlanResult

REL_TOL = 1e-6


def _close(a: float | None, b: float | None, tol: float = REL_TOL) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


def _le(a: float, b: float, tol: float = REL_TOL) -> bool:
    return a <= b + tol * max(1.0, abs(b))


def check_plan(result: PlanResult, plan=None) -> list[str]:
    """Violations of the plan's constraints and money formulas; [] for a sound plan.

    Results without a plan (infeasible, error) are checked only for being empty.
    """
    if not result.status.has_plan:
        return [] if not result.fleet and not result.deployments else ["a result without a plan lists a fleet"]
    out: list[str] = []
    out += _check_demand(result)
    out += _check_pairing(result)
    out += _check_capacity(result)
    out += _check_server_loss(result)
    out += _check_slos(result)
    out += _check_servers(result)
    out += _check_limits(result, plan)
    out += _check_money(result)
    return out


def _check_demand(r: PlanResult) -> list[str]:
    out = []
    routed: dict[tuple[str, int, str], float] = {}
    for route in r.routing:
        if route.qps < 0:
            out.append(f"routing {route.workload}/b{route.bucket}/{route.key}: negative load {route.qps}")
        at = (route.workload, route.bucket, route.stage)
        routed[at] = routed.get(at, 0.0) + route.qps
    for b in r.buckets:
        together = routed.get((b.workload, b.bucket, "colocated"), 0.0)
        pre, dec = (routed.get((b.workload, b.bucket, s), 0.0) for s in ("prefill", "decode"))
        if not _close(together + pre, b.qps):
            out.append(f"demand {b.workload}/b{b.bucket}: routed {together + pre:.6g} req/s, needs {b.qps:.6g}")
        if not _close(pre, dec):  # a request served by the pools passes through both
            out.append(f"demand {b.workload}/b{b.bucket}: {pre:.6g} req/s through prefill pools but "
                       f"{dec:.6g} through decode pools")
    for w in r.workloads:
        total = sum(b.qps for b in r.buckets if b.workload == w.name)
        if not _close(total, w.qps):
            out.append(f"workload {w.name}: buckets add up to {total:.6g} req/s, not {w.qps:.6g}")
    return out


def _check_pairing(r: PlanResult) -> list[str]:
    """Every bucket's prefill load can be paired with decode load receiving at least its tier's link."""
    link = {(d.workload, d.key): d.pair_link_gb_s for d in r.deployments if d.stage in ("prefill", "decode")}
    loads: dict[tuple[str, int], dict[str, list[tuple[float, float]]]] = {}
    for x in r.routing:
        if x.stage in ("prefill", "decode") and x.qps > 0:
            at = loads.setdefault((x.workload, x.bucket), {"prefill": [], "decode": []})
            at[x.stage].append((link.get((x.workload, x.key)) or 0.0, x.qps))
    out = []
    for (w, b), at in sorted(loads.items()):
        for tier in sorted({t for t, _ in at["prefill"]}, reverse=True):
            need = sum(q for t, q in at["prefill"] if t >= tier * (1 - REL_TOL))
            have = sum(q for t, q in at["decode"] if t >= tier * (1 - REL_TOL))
            if not _le(need, have):
                out.append(f"pairing {w}/b{b}: {need:.6g} req/s through prefill pools of receive tier >= "
                           f"{tier:.6g} Gb/s but only {have:.6g} through decode pools receiving that fast")
    return out


def _check_capacity(r: PlanResult) -> list[str]:
    out = []
    mu = {(c.workload, c.bucket, c.key): c.capacity_qps for c in r.candidates}
    n_plus_one = {w.name for w in r.workloads if w.redundancy == "n+1"}  # n+1-node: _check_server_loss
    for d in r.deployments:
        routes = [x for x in r.routing if x.workload == d.workload and x.key == d.key]
        load = 0.0
        for x in routes:
            cap = mu.get((d.workload, x.bucket, d.key), 0.0)
            if cap <= 0:
                if x.qps > 1e-9:
                    out.append(f"capacity {d.workload}/{d.key}: {x.qps:.6g} req/s of bucket {x.bucket} routed "
                               "to a candidate with no capacity there")
                continue
            load += x.qps / cap
        spare = 1 if d.workload in n_plus_one and load > 1e-9 else 0
        if not _le(load, d.replicas - spare):
            out.append(f"capacity {d.workload}/{d.key}: load {load:.6g} replicas' worth on {d.replicas} replicas"
                       + (" (N+1 keeps one spare)" if spare else ""))
        if not _close(sum(x.qps for x in routes), d.qps):
            out.append(f"deployment {d.workload}/{d.key}: qps {d.qps:.6g} is not its routed load")
        if not _le(d.qps, d.capacity_qps):
            out.append(f"deployment {d.workload}/{d.key}: qps {d.qps:.6g} exceeds capacity_qps {d.capacity_qps:.6g}")
    keys = {(d.workload, d.key) for d in r.deployments}
    for x in r.routing:
        if (x.workload, x.key) not in keys and x.qps > 1e-9:
            out.append(f"routing {x.workload}/{x.key}: load routed to a candidate with no replicas")
    return out


def _check_server_loss(r: PlanResult) -> list[str]:
    """Every n+1-node workload survives the loss of any one server, server by server.

    The placement the plan states, per device d with G GPUs per server: a spread deployment
    (``replicas_per_server`` q) runs its R replicas on y = ⌈R/q⌉ servers of its own, evenly (server i
    holds ⌊R/y⌋ or ⌈R/y⌉, the first R mod y one more); every other deployment shares the remaining
    servers, which must hold their GPUs: Σ y + ⌈shared GPUs / G⌉ ≤ nodes. Each server is then taken
    away in turn: a spread deployment loses the replicas on it; a deployment on the shared servers,
    placed anywhere, loses at most min(R, ⌊G/g⌋) (at least 1) with any one of them. What is left of
    each loaded deployment of an n+1-node workload must still carry its routed load, Σ_b routed/μ
    replicas' worth."""
    out = []
    per_server = {w.name for w in r.workloads if w.redundancy == "n+1-node"}
    mu = {(c.workload, c.bucket, c.key): c.capacity_qps for c in r.candidates}
    fleet = {f.device: f for f in r.fleet}
    load: dict[tuple[str, str], float] = {}
    for x in r.routing:
        cap = mu.get((x.workload, x.bucket, x.key), 0.0)
        if cap > 0:
            load[(x.workload, x.key)] = load.get((x.workload, x.key), 0.0) + x.qps / cap
    for dev, f in fleet.items():
        deps = [d for d in r.deployments if d.device == dev]
        spread = [d for d in deps if d.replicas_per_server]
        shared_gpus = sum(d.gpus for d in deps if not d.replicas_per_server)
        own = 0
        for d in spread:
            if d.workload not in per_server:
                out.append(f"placement {d.workload}/{d.key}: spread over servers of its own, but the workload is "
                           "not n+1-node")
            if d.replicas_per_server * d.gpus_per_replica > f.gpus_per_node:
                out.append(f"placement {d.workload}/{d.key}: {d.replicas_per_server} replicas of "
                           f"{d.gpus_per_replica} GPUs do not fit a server of {f.gpus_per_node}")
            own += d.dedicated_servers or 0
        shared_servers = -(-shared_gpus // f.gpus_per_node)
        if own + shared_servers > f.nodes:
            out.append(f"placement {dev}: {own} servers of spread deployments + {shared_servers} shared for "
                       f"{shared_gpus} GPUs > {f.nodes} servers")
        for d in deps:
            need = load.get((d.workload, d.key), 0.0)
            if d.workload not in per_server or need <= 1e-9:
                continue
            if d.replicas_per_server:
                y = d.dedicated_servers or 1
                on_server = [d.replicas // y + (1 if i < d.replicas % y else 0) for i in range(y)]
            else:
                on_server = [min(d.replicas, max(1, f.gpus_per_node // d.gpus_per_replica))]
            for i, lost in enumerate(on_server):
                if not _le(need, d.replicas - lost):
                    where = f"its server {i + 1} of {len(on_server)}" if d.replicas_per_server else \
                        f"one shared {dev} server"
                    out.append(f"N+1 per server {d.workload}/{d.key}: losing {where} takes {lost} of "
                               f"{d.replicas} replicas; the rest carry {d.replicas - lost} replicas' worth, "
                               f"load is {need:.6g}")
                    break
    return out


def _check_slos(r: PlanResult) -> list[str]:
    out = []
    for w in r.workloads:
        deps = [d for d in r.deployments if d.workload == w.name]
        for phase in ("decode", "prefill"):  # every request needs a copy of each phase
            n = sum(d.replicas for d in deps if d.stage in ("colocated", phase))
            if n < w.min_replicas and (phase == "decode" or any(d.stage == "prefill" for d in deps)):
                out.append(f"min_replicas {w.name}: {n} < {w.min_replicas}"
                           + (f" ({phase} and colocated replicas)" if any(d.stage != "colocated" for d in deps) else ""))
        out += _check_pools_end_to_end(w, deps)
        ok = True
        for d in deps:
            if d.qps <= 0:
                continue
            for metric in ("ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms"):
                got, slo = getattr(d, metric), getattr(w, f"slo_{metric}")
                if got is not None and slo is not None and not _le(got, slo):
                    ok = False
                    out.append(f"SLO {w.name}/{d.key}: {metric} {got:.6g} > {slo:.6g}")
        if w.met != ok:
            out.append(f"workload {w.name}: met is {w.met} but the deployments say {ok}")
    return out


def _check_pools_end_to_end(w, deps) -> list[str]:
    """A disaggregated workload's p99s end to end: TTFT on the prefill pools (KV transfer included),
    TPOT on the decode pools, and each decode pool's E2E at least the prefill pools' worst TTFT
    (it counts from the request's arrival)."""
    pre = [d for d in deps if d.stage == "prefill" and d.qps > 0]
    dec = [d for d in deps if d.stage == "decode" and d.qps > 0]
    if not pre and not dec:
        return []
    if not pre or not dec:
        return [f"pools {w.name}: load on {'prefill' if pre else 'decode'} pools only; a request needs both"]
    out = []
    if w.slo_ttft_p99_ms is not None and any(d.ttft_p99_ms is None for d in pre):
        out.append(f"pools {w.name}: a prefill pool has no predicted TTFT")
    if w.slo_tpot_p99_ms is not None and any(d.tpot_p99_ms is None for d in dec):
        out.append(f"pools {w.name}: a decode pool has no predicted TPOT")
    worst_ttft = max((d.ttft_p99_ms for d in pre if d.ttft_p99_ms is not None), default=0.0)
    for d in dec:
        if d.e2e_p99_ms is not None and d.e2e_p99_ms < worst_ttft:
            out.append(f"pools {w.name}/{d.key}: e2e_p99_ms {d.e2e_p99_ms:.6g} below the prefill TTFT {worst_ttft:.6g}")
    return out


def _check_servers(r: PlanResult) -> list[str]:
    out = []
    gpus: dict[str, int] = {}
    for d in r.deployments:
        if d.replicas <= 0:
            out.append(f"deployment {d.workload}/{d.key}: {d.replicas} replicas")
        gpus[d.device] = gpus.get(d.device, 0) + d.gpus
    fleet = {f.device: f for f in r.fleet}
    for dev, g in gpus.items():
        f = fleet.get(dev)
        if f is None:
            out.append(f"servers {dev}: deployments use {g} GPUs but the fleet has none")
            continue
        if f.gpus != g:
            out.append(f"servers {dev}: fleet has {f.gpus} GPUs, deployments use {g}")
    full_only = r.assumptions is not None and not r.assumptions.allow_partial_servers
    cloud = r.assumptions is not None and r.assumptions.objective == "cloud"
    for f in r.fleet:
        if f.gpus > f.nodes * f.gpus_per_node:
            out.append(f"servers {f.device}: {f.gpus} GPUs do not fit {f.nodes} × {f.gpus_per_node}")
        if f.fixed_size and f.installed != f.nodes * f.gpus_per_node:
            out.append(f"servers {f.device}: {f.installed} GPUs installed on {f.nodes} fixed-size servers of "
                       f"{f.gpus_per_node}")
        if f.gpus_per_instance > 1 and (not cloud or f.fixed_size or f.gpus_per_node % f.gpus_per_instance):
            out.append(f"servers {f.device}: instances of {f.gpus_per_instance} GPUs, but only a cloud rents "
                       f"instances, each a slice of a server of {f.gpus_per_node}")
        rented = f.gpus_per_instance * -(-f.gpus // f.gpus_per_instance)
        if not f.fixed_size and f.installed != rented:
            out.append(f"servers {f.device}: {f.installed} GPUs installed, {f.gpus} in use in instances of "
                       f"{f.gpus_per_instance} need {rented}")
        if full_only and f.gpus != f.nodes * f.gpus_per_node:
            out.append(f"servers {f.device}: {f.nodes * f.gpus_per_node - f.gpus} of {f.nodes * f.gpus_per_node} "
                       "GPUs idle, but the plan forbids partly used servers")
        if f.device not in gpus:
            out.append(f"servers {f.device}: in the fleet but used by no deployment")
    for d in r.deployments:
        f = fleet.get(d.device)
        if f is not None and d.tp * d.ep > f.gpus_per_node:
            out.append(f"servers {d.device}: tp·ep {d.tp}·{d.ep} spans servers of {f.gpus_per_node} GPUs")
    if r.gpus_total != sum(f.gpus for f in r.fleet):
        out.append(f"gpus_total {r.gpus_total} != Σ fleet gpus {sum(f.gpus for f in r.fleet)}")
    if r.nodes_total != sum(f.nodes for f in r.fleet):
        out.append(f"nodes_total {r.nodes_total} != Σ fleet nodes {sum(f.nodes for f in r.fleet)}")
    return out


def _check_limits(r: PlanResult, plan) -> list[str]:
    out = []
    a = r.assumptions
    if a is None:
        return ["assumptions missing"]
    if a.capex_budget_usd is not None and not _le(r.capex_usd, a.capex_budget_usd):
        out.append(f"capex budget: {r.capex_usd:,.2f} > {a.capex_budget_usd:,.2f}")
    if a.annual_budget_usd is not None and not _le(r.annual_opex_usd, a.annual_budget_usd):
        out.append(f"annual budget: {r.annual_opex_usd:,.2f} > {a.annual_budget_usd:,.2f}")
    if a.max_power_kw is not None and a.objective != "cloud" and not _le(r.power_kw, a.max_power_kw):
        out.append(f"power: {r.power_kw:,.3f} kW > {a.max_power_kw:,.3f} kW")
    if plan is not None:
        inventory = {k.lower(): v for k, v in plan.inventory.items()}
        allowed = {d.lower() for d in plan.allowed_devices} if plan.allowed_devices is not None else None
        for f in r.fleet:
            key = f.device.lower()
            if key in inventory and f.installed > inventory[key]:
                out.append(f"inventory {f.device}: {f.installed} GPUs > {inventory[key]}")
            if allowed is not None and key not in allowed:
                out.append(f"allowed_devices: {f.device} is not allowed")
    return out


def _check_money(r: PlanResult) -> list[str]:
    out = []
    a = r.assumptions
    if a is None:
        return []
    cloud = a.objective == "cloud"
    capex = power_w = rental_per_hour = rack_units = 0.0
    for f in r.fleet:
        server_usd = a.server_overhead_usd if f.server_usd is None else f.server_usd
        server_w = a.server_power_w if f.server_power_w is None else f.server_power_w
        g = f.installed
        f_capex = 0.0 if cloud else g * (f.purchase_usd or 0.0) + f.nodes * (server_usd + a.network_usd_per_server)
        f_power_w = g * (f.tdp_w or 0.0) + f.nodes * server_w
        if not _close(f.capex_usd, f_capex):
            out.append(f"fleet {f.device}: capex_usd {f.capex_usd:,.2f}, recomputed {f_capex:,.2f}")
        if not _close(f.power_kw, f_power_w / 1000.0):
            out.append(f"fleet {f.device}: power_kw {f.power_kw:.6g}, recomputed {f_power_w / 1000.0:.6g}")
        capex += f_capex
        power_w += f_power_w
        rack_units += f.nodes * f.rack_units
        if cloud:
            rental_per_hour += g * (f.cloud_usd_per_gpu_hour or 0.0)
    power_kw = power_w / 1000.0
    annual_power = 0.0 if cloud else power_kw * a.power_utilization * a.pue * a.hours_per_year * a.electricity_usd_per_kwh
    maintenance = capex * a.maintenance_fraction_per_year
    facility = 0.0 if cloud else 12 * (a.colocation_usd_per_kw_month * power_kw
                                       + a.colocation_usd_per_rack_month * rack_units / a.rack_units_per_rack)
    annual_cloud = rental_per_hour * a.hours_per_year
    opex = annual_power + maintenance + facility + annual_cloud
    tco = capex + a.horizon_years * opex
    npv = capex + sum(opex / (1 + a.discount_rate) ** y for y in range(1, a.horizon_years + 1))
    objective = {"tco": tco, "capex": capex, "cloud": a.horizon_years * annual_cloud}[a.objective]
    life = a.depreciation_years or a.horizon_years
    n, rate = a.lease_years or a.horizon_years, a.lease_interest_rate
    payment = capex / n if rate == 0 else capex * (rate / -math.expm1(-n * math.log1p(rate)))  # 1-(1+r)^-n, exact
    expected = {
        "capex_usd": capex, "power_kw": power_kw, "annual_power_usd": annual_power,
        "annual_maintenance_usd": maintenance, "annual_facility_usd": facility, "annual_cloud_usd": annual_cloud,
        "annual_opex_usd": opex, "tco_usd": tco, "npv_usd": npv, "objective_usd": objective,
        "annual_depreciation_usd": capex / life, "residual_value_usd": capex * max(0.0, 1 - a.horizon_years / life),
        "annual_lease_payment_usd": payment, "lease_total_usd": n * payment,
    }
    for name, value in expected.items():
        if not _close(getattr(r, name), value):
            out.append(f"{name}: reported {getattr(r, name):,.6g}, recomputed {value:,.6g}")
    tokens = sum(w.output_tokens_per_year for w in r.workloads)
    if not _close(r.output_tokens_per_year, tokens):
        out.append(f"output_tokens_per_year {r.output_tokens_per_year:.6g} != Σ workloads {tokens:.6g}")
    if tokens > 0 and not _close(r.cost_per_million_output_tokens_usd, tco / (a.horizon_years * tokens / 1e6)):
        out.append("cost_per_million_output_tokens_usd does not match tco_usd / output tokens")
    shares = sum((w.cost_per_million_output_tokens_usd or 0.0) * a.horizon_years * w.output_tokens_per_year / 1e6
                 for w in r.workloads)
    if not _close(shares, tco):
        out.append(f"workload cost shares add up to {shares:,.2f}, not tco_usd {tco:,.2f}")
    return out
