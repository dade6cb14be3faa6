"""Why a plan is infeasible, and what the cheapest one-device fleet would cost.

- :func:`unservable`: a workload bucket that no candidate serves — every candidate pruned
  (memory, precision support, devices not allowed or missing a price) or none meets the
  SLO at any load; it names the best p99 any candidate reaches and by which config.
- :func:`binding_limits`: a plan that the capex budget, annual budget, power cap or an
  inventory makes infeasible. Each limit L is dropped in turn and the MILP re-solved
  *minimising L's own figure* with every other limit kept: if that is feasible, L binds
  and the minimum is the smallest value of L that makes the plan feasible.
- :func:`single_device_best`: the cheapest fleet using one device type only (same limits),
  for "why not all H100?".
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from optimizer.planning import disk_cache
from optimizer.planning.candidate_set import CandidateSet, WorkloadCandidates
from optimizer.planning.milp.problem import (
    MAX_BUCKET_LOAD,
    FleetProblem,
    FleetSolution,
    Limits,
    Minimise,
    uncovered_buckets,
)
from optimizer.planning.milp.resolve import cached_solve
from optimizer.planning.milp.solve import solve_fleet
from optimizer.results.latency_text import ms_text
from optimizer.results.plan_result import BindingNote, Diagnostic, SingleDeviceBest, SolveStatus
from optimizer.results.provenance import fleet_text

METRIC_LABEL = {"ttft_p99_ms": "TTFT p99", "tpot_p99_ms": "TPOT p99", "e2e_p99_ms": "E2E p99"}


def unservable(cset: CandidateSet) -> list[Diagnostic]:
    """One error per workload bucket (with load) that no kept candidate has capacity for; buckets of one workload
    failing for the same reason share one error, naming them all (a plan excluding every device said the same
    reason once per bucket, four times in one line)."""
    out = []
    for wc in cset.workloads:
        why: dict[str, list] = {}  # reason (without the bucket) -> its buckets, in bucket order
        for b in wc.buckets:
            served = {c.stage for c in wc.kept if _carries(b.qps, c.capacity_qps[b.index])}
            if b.qps <= 0 or "colocated" in served or {"prefill", "decode"} <= served:
                continue
            why.setdefault(_why_unservable(wc, b.index) + _pool_note(wc, served), []).append(b)
        for reason, buckets in why.items():
            out.append(Diagnostic("error", "workload_unservable", f"{_where(wc, buckets)}: {reason}"))
    return out


def _carries(bucket_qps: float, capacity_qps: float) -> bool:
    """Whether the MILP routes a bucket of ``bucket_qps`` to a replica of ``capacity_qps``: capacity above 0 and
    at most MAX_BUCKET_LOAD replicas' worth of load (``bucketing.carried_capacity``)."""
    return capacity_qps > 0 and bucket_qps / capacity_qps <= MAX_BUCKET_LOAD


def _where(wc: WorkloadCandidates, buckets: list) -> str:
    """"workload 'chat' (llama-3.1-8b)", with the buckets and their share of requests when it has several."""
    where = f"workload '{wc.workload.name}' ({wc.model})"
    if len(wc.buckets) > 1:
        labels = ", ".join(str(b.label or b.index) for b in buckets)
        where += (f", bucket{'s' if len(buckets) > 1 else ''} {labels} "
                  f"({sum(b.fraction for b in buckets):.0%} of requests)")
    return where


def _pool_note(wc: WorkloadCandidates, served: set[str]) -> str:
    """Which pool binds when the workload may be disaggregated: the one no candidate serves, with the best reason."""
    if wc.workload.disaggregation != "allowed" or wc.workload.is_batch:
        return ""
    missing = [s for s in ("prefill", "decode") if s not in served]
    whys = []
    for stage in missing:
        pool = [c for c in wc.candidates if c.stage == stage]
        reason = (max(pool, key=lambda c: (c.gpus, c.key)).pruned_reason if pool
                  else "no device with a scaleout_nic_gbps_per_gpu figure")
        whys.append(f"no {stage} pool meets its share of the SLO ({reason})" if pool else f"no {stage} pool: {reason}")
    return "; disaggregated: " + "; ".join(whys) if whys else ""


def _why_unservable(wc: WorkloadCandidates, bucket: int) -> str:
    """Why no candidate serves ``bucket`` of ``wc`` (the message after its "workload ..., bucket ...: ")."""
    w = wc.workload
    if not wc.candidates:
        return "no candidate at all; allow more devices or precisions"
    trickle = [c for c in wc.kept if c.capacity_qps[bucket] > 0]
    if trickle:  # capacity, but too little to count: more than MAX_BUCKET_LOAD replicas (carried_capacity)
        best = max(trickle, key=lambda c: (c.capacity_qps[bucket], c.key))
        lam = wc.buckets[bucket].qps
        return (f"the most any candidate carries is {best.capacity_qps[bucket]:.3g} req/s per replica ({best.key}) "
                f"against {lam:g} req/s, more than {MAX_BUCKET_LOAD:,.0f} replicas; check the capacity figures "
                f"or lower the request rate")
    slo_limited = [c for c in wc.candidates
                   if c.pruned_reason is None or c.pruned_reason.startswith("no capacity at the SLO")]
    if not slo_limited:
        # Prefer what the models say (memory, precision) over plan exclusions (allowed, prices).
        excluded = [c for c in wc.candidates if _excluded_by_plan(c.pruned_reason or "")]
        informative = [c for c in wc.candidates if c not in excluded]
        if not informative:
            return f"every candidate is excluded by the plan: {_exclusions(excluded)}"
        example = max(informative, key=lambda c: (c.gpus, c.key))
        note = f"; {len(excluded)} more excluded by the plan (allowed_devices, inventory, prices)" if excluded else ""
        return (f"every candidate is pruned; the largest, {example.key}: {example.pruned_reason}{note}")
    # Best p99 any candidate reaches (at near-zero load) against each SLO.
    parts = []
    for metric, label in METRIC_LABEL.items():
        slo = getattr(w.slo, metric)
        if slo is None:
            continue
        best = None
        for c in slo_limited:
            if c.floor_p99_ms is None:
                continue
            v = c.floor_p99_ms[bucket].get(metric)
            if v is not None and (best is None or v < best[0]):
                best = (v, c.key)
        if best is not None and best[0] > slo:
            parts.append(f"the best {label} any candidate reaches is {ms_text(best[0])} ms ({best[1]}) "
                         f"against the SLO of {ms_text(slo)} ms")
    binding = sorted({c.limited_by[bucket] for c in slo_limited if c.limited_by[bucket]})
    if not parts:
        parts.append("no candidate meets the SLO at any load"
                     + (f" (limited by {', '.join(binding)})" if binding else ""))
    return "; ".join(parts) + "; relax the SLO, allow faster devices or lower precisions"


def _exclusions(excluded: list) -> str:
    """The plan's exclusions by device, the devices the plan allows first (an inventory of 0 or
    a missing price is what to fix there); devices outside ``allowed_devices`` counted, not named."""
    by_device: dict[str, str] = {}
    for c in sorted(excluded, key=lambda c: c.device):
        by_device.setdefault(c.device, c.pruned_reason or "")
    outside = sorted(d for d, r in by_device.items() if "allowed_devices" in r)
    inside = [r for d, r in sorted(by_device.items()) if d not in outside]
    parts = inside[:3] + ([f"{len(inside) - 3} more devices likewise"] if len(inside) > 3 else [])
    if outside:
        others = "other " if inside else ""
        parts.append(f"{len(outside)} {others}device{'s' if len(outside) > 1 else ''} not in allowed_devices"
                     if len(outside) > 1 else by_device[outside[0]])
    return "; ".join(parts) + "; raise the inventory, give the missing figures or allow more devices"


def _excluded_by_plan(reason: str) -> bool:
    return any(t in reason for t in ("allowed_devices", "inventory of", "add it with --catalog"))


# ---------------------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------------------


def _resource(problem: FleetProblem, sol: FleetSolution, what: Minimise) -> float:
    """The minimised figure of a solution, recomputed at whole servers (a device's GPUs: those bought, idle GPUs
    of a fixed-size server included, as its inventory counts them)."""
    if isinstance(what, tuple):
        d = what[1]
        return float(problem.units[d].installed_gpus(sol.gpus.get(d, 0), sol.nodes.get(d, 0)))
    field_name = {"objective": "objective_usd", "capex": "capex_usd", "annual_opex": "annual_opex_usd",
                  "power": "power_kw"}[what]
    return sum(problem.units[d].figure(field_name, g, sol.nodes[d]) for d, g in sol.gpus.items())


def _without_inventory(problem: FleetProblem, device: str | None = None) -> FleetProblem:
    units = {k: (replace(u, inventory_gpus=None) if device is None or k == device else u)
             for k, u in problem.units.items()}
    return replace(problem, units=units)


def binding_limits(problem: FleetProblem, *, time_limit_s: float, gap: float, solver: str = "highs",
                   total_s: float | None = None) -> list[Diagnostic]:
    """Name the limits that make ``problem`` infeasible and the smallest feasible value of each.

    ``total_s`` bounds the wall time of all its solves together (each gets what is left, at
    most ``time_limit_s``).
    """
    lim = problem.limits
    free = _without_inventory(replace(problem, limits=Limits()))
    deadline = time.perf_counter() + total_s if total_s is not None else math.inf

    def within(p: FleetProblem, **kwargs) -> FleetSolution:  # noqa: ANN003 - solve_fleet's keywords
        """solve_fleet with at most what is left of ``total_s``."""
        left = deadline - time.perf_counter()
        if left <= 0.01:
            return FleetSolution(SolveStatus.ERROR, "the time limit is spent", solver=solver)
        return solve_fleet(p, **{**kwargs, "time_limit_s": min(kwargs["time_limit_s"], left)})

    sol_free = within(free, time_limit_s=time_limit_s, gap=gap, solver=solver)
    if not sol_free.status.has_plan:
        return [Diagnostic("error", "infeasible_without_limits",
                           "the plan is infeasible even without budgets, power cap and inventory "
                           f"({sol_free.detail}); check min_replicas, redundancy and allowed_devices")]
    checks: list[tuple[str, str, Minimise, FleetProblem, float, str]] = []
    if lim.capex_usd is not None:
        checks.append(("capex_budget", "budget.capex_usd", "capex", replace(problem, limits=replace(lim, capex_usd=None)),
                       lim.capex_usd, "$"))
    if lim.annual_opex_usd is not None:
        checks.append(("annual_budget", "budget.annual_usd", "annual_opex",
                       replace(problem, limits=replace(lim, annual_opex_usd=None)), lim.annual_opex_usd, "$"))
    if lim.power_kw is not None:
        checks.append(("max_power_kw", "max_power_kw", "power", replace(problem, limits=replace(lim, power_kw=None)),
                       lim.power_kw, "kW"))
    for d, u in sorted(problem.units.items()):
        if u.inventory_gpus is not None:
            checks.append((f"inventory__{d}", f"inventory.{d}", ("gpus", d), _without_inventory(problem, d),
                           float(u.inventory_gpus), "GPUs"))
    out = []
    for code, field_name, what, relaxed, value, unit in checks:
        sol = within(relaxed, time_limit_s=time_limit_s, gap=gap, solver=solver, minimise=what)
        if sol.status.has_plan:
            need = _resource(relaxed, sol, what)
            out.append(BindingNote("error", f"binding_{code}",
                                   f"{field_name} = {_fmt(value, unit)} binds: the smallest value that makes the plan "
                                   f"feasible (other limits kept) is {_fmt(need, unit)}", need))
    if not out:
        # Each limit's own minimum with every limit dropped: what each needs at least.
        parts = []
        for _code, field_name, what, _, value, unit in checks:
            sol = within(free, time_limit_s=time_limit_s, gap=gap, solver=solver, minimise=what)
            if sol.status.has_plan:
                parts.append(f"{field_name} >= {_fmt(_resource(free, sol, what), unit)} (now {_fmt(value, unit)})")
        out.append(Diagnostic(
            "error", "binding_combination",
            "no single limit is the cause; the limits are too tight together. Each alone needs "
            + "; ".join(parts) + f". The cheapest plan without limits costs ${sol_free.objective_usd or 0:,.0f}"
            + _gpu_text(sol_free) + "; raise several limits together"))
    return out


def binding_need(d: Diagnostic) -> float | None:
    """The smallest feasible value a ``binding_<limit>`` note of :func:`binding_limits` names, None for any other
    diagnostic."""
    return d.needed if isinstance(d, BindingNote) else None


def lower_binding_notes(a: list[Diagnostic], b: list[Diagnostic]) -> list[Diagnostic]:
    """The notes of two infeasible solves of one plan (its workloads bucketed two ways), ``a``'s with each
    ``binding_<limit>`` note that ``b`` also has replaced by the one naming the smaller feasible value, and ``b``'s
    own single-limit notes added, in place of ``a``'s combination note when ``a`` has no single-limit note: the
    smallest value of a limit that makes the plan feasible is the smaller of the two bucketings'."""
    theirs = {d.code: d for d in b if binding_need(d) is not None}
    out = []
    for d in a:
        other = theirs.pop(d.code, None)
        need, other_need = binding_need(d), binding_need(other) if other is not None else None
        out.append(other if need is not None and other_need is not None and other_need < need else d)
    if theirs:
        out = [d for d in out if d.code != "binding_combination"] + list(theirs.values())
    return out


def _gpu_text(sol: FleetSolution) -> str:
    if not sol.gpus:
        return ""
    return " (" + ", ".join(f"{g} × {d}" for d, g in sorted(sol.gpus.items())) + ")"


def _fmt(value: float, unit: str) -> str:
    if unit == "$":
        return f"${value:,.0f}"
    if unit == "kW":
        return f"{value:,.2f} kW"
    return f"{value:,.0f} {unit}"


# ---------------------------------------------------------------------------------------
# Single-device comparison
# ---------------------------------------------------------------------------------------


def single_device_solution(
    problem: FleetProblem, *, time_limit_s: float, gap: float, solver: str = "highs", total_s: float | None = None,
    found: list[FleetSolution] | None = None,
) -> tuple[SingleDeviceBest | None, FleetSolution | None]:
    """The cheapest fleet of one device type that serves every workload under the same
    limits, and its solution (a feasible solution of ``problem`` itself).

    ``total_s`` bounds the wall time of all the one-device solves together (each gets what is
    left, at most ``time_limit_s``); devices not reached in it are not compared. ``found``
    receives every one-device plan solved (the sensitivity analysis's first known plans).
    """
    best: SingleDeviceBest | None = None
    best_sol: FleetSolution | None = None
    deadline = time.perf_counter() + total_s if total_s is not None else math.inf
    for d in sorted({o.device for o in problem.options}):
        sub = replace(problem, options=tuple(o for o in problem.options if o.device == d),
                      units={d: problem.units[d]})
        if uncovered_buckets(sub) or not problem.units[d].allowed:
            continue
        left = deadline - time.perf_counter()
        if left <= 0.01:
            disk_cache.note_unsettled()  # devices left out by the clock: this run is not reproducible
            break
        sol = cached_solve("solve", sub, lambda sub=sub, left=left: solve_fleet(
            sub, time_limit_s=min(time_limit_s, left), gap=gap, solver=solver), gap=gap, solver=solver)
        if found is not None and sol.status.has_plan:
            found.append(sol)
        if sol.status.has_plan and sol.objective_usd is not None and (best is None or sol.objective_usd < best.objective_usd):
            unit = problem.units[d]
            gpus, nodes = sum(sol.gpus.values()), sum(sol.nodes.values())
            best = SingleDeviceBest(d, sol.objective_usd, gpus, nodes, unit.installed_gpus(gpus, nodes))
            best_sol = sol
    return best, best_sol


def single_device_best(
    problem: FleetProblem, *, time_limit_s: float, gap: float, solver: str = "highs"
) -> SingleDeviceBest | None:
    """The cheapest fleet of one device type that serves every workload under the same limits."""
    return single_device_solution(problem, time_limit_s=time_limit_s, gap=gap, solver=solver)[0]


def single_device_note(best: SingleDeviceBest | None, objective_usd: float) -> Diagnostic:
    if best is None:
        return Diagnostic("info", "single_device_best", "no single device type can serve every workload alone")
    extra = best.objective_usd - objective_usd
    pct = 100.0 * extra / objective_usd if objective_usd > 0 else 0.0
    # the GPUs bought (what its cost pays for and what one orders), not those in use
    return Diagnostic("info", "single_device_best",
                      f"the cheapest one-device fleet is {fleet_text([(best.device, best.gpus, best.installed)])} at "
                      f"${best.objective_usd:,.0f}, {pct:+.1f} % vs this plan")
