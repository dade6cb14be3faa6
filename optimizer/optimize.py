"""The optimizer's front door: plan in, :class:`~optimizer.results.plan_result.PlanResult` out.

``optimize_plan`` reads like its pipeline: candidates (from the performance and serving
models, or from a measured capacity table) → MILP data → solve → diagnostics (why
infeasible; the best one-device fleet) → the typed result with money by the formulas of
``docs/plan-json.md``.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from catalog.errors import SolverError
from catalog.load import Catalog
from optimizer.planning.candidates import CandidateSet, WorkloadCandidates, fleet_problem
from optimizer.planning.capacity_table import CapacityTable, load_capacity_table, table_candidates
from optimizer.planning.diagnose import (
    binding_limits,
    single_device_note,
    single_device_solution,
    unservable,
)
from optimizer.planning.milp import (
    FleetProblem,
    FleetSolution,
    amortised_usd_per_replica,
    options_by_workload,
    replica_upper_bound,
    solve_fleet,
)
from optimizer.results.money import (
    HOURS_PER_YEAR,
    MoneyAssumptions,
    capex_terms,
    cost_per_million_output_tokens_usd,
    fleet_money,
    power_kw_terms,
    workload_tco_share_usd,
)
from optimizer.results.plan_result import (
    Assumptions,
    BucketRow,
    CandidateRow,
    Deployment,
    Diagnostic,
    FleetRow,
    PlanResult,
    Route,
    SingleDeviceBest,
    SolveStatus,
    SourceRow,
    WorkloadResult,
)
from workloads.spec import Plan

DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_GAP = 1e-3
DEFAULT_N_BUCKETS = 4
SOURCE_FIELDS = ("specs", "purchase_usd", "cloud_usd_per_gpu_hour", "tdp_w")


def optimize_plan(
    plan: Plan,
    catalog: Catalog,
    params=None,
    *,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    gap: float = DEFAULT_GAP,
    capacity_table: CapacityTable | Path | str | None = None,
    n_buckets: int = DEFAULT_N_BUCKETS,
    input_file: str = "",
    input_sha256: str = "",
    compare_single_device: bool = True,
    solver: str = "highs",
    candidates: CandidateSet | None = None,
    diagnose: bool = True,
) -> PlanResult:
    """The cheapest fleet for ``plan`` (catalog already resolved against the plan).

    ``params`` are the performance model's calibration (``optimizer.models.params.load_params``;
    None = shipped). With ``capacity_table`` the measured capacities replace the models.
    Never returns None: infeasible plans come back with status ``infeasible`` and
    diagnostics naming the cause. ``candidates`` reuses a candidate set computed for the
    same workloads (what-if sweeps over limits); budgets, power cap and the rates of its
    buckets then come from ``plan``. ``diagnose=False`` skips the extra solves that explain
    an infeasible plan (feasibility probes in what-if bisections).
    """
    if not time_limit_s > 0:
        raise SolverError(f"time limit must be > 0 seconds (got {time_limit_s}); e.g. --time-limit 10")
    if not 0 <= gap < 1:
        raise SolverError(f"gap must be a fraction in [0, 1) (got {gap}); e.g. --gap 0.001 for 0.1 %")
    if n_buckets < 1:
        raise SolverError(f"n_buckets must be >= 1 (got {n_buckets}); e.g. --buckets 4")
    if candidates is not None:
        cset = rebase_candidates(candidates, plan)
    elif capacity_table is not None:
        table = capacity_table if isinstance(capacity_table, CapacityTable) else load_capacity_table(capacity_table)
        cset = table_candidates(table, plan, catalog)
    else:
        from optimizer.planning.candidates import model_candidates

        cset = model_candidates(plan, catalog, params, n_buckets=n_buckets)
    problem = fleet_problem(cset, plan)
    diagnostics = list(cset.diagnostics)
    solve = dict(time_limit_s=time_limit_s, gap=gap, solver=solver)

    missing = unservable(cset)
    if missing:
        detail = "; ".join(d.message for d in missing)
        sol = FleetSolution(SolveStatus.INFEASIBLE, detail, solver=solver)
        return assemble(plan, cset, sol, diagnostics + missing, None, input_file, input_sha256)
    sol = solve_fleet(problem, **solve)
    single = None
    if sol.status == SolveStatus.INFEASIBLE and diagnose:
        diagnostics += binding_limits(problem, **solve)
    elif sol.status.has_plan and compare_single_device:
        single, single_sol = single_device_solution(single_device_shortlist(problem, gap), **solve)
        if (sol.status == SolveStatus.FEASIBLE and single_sol is not None and single_sol.objective_usd is not None
                and sol.objective_usd is not None and single_sol.objective_usd < sol.objective_usd):
            # A solve stopped by its time limit can hold a worse plan than a one-device fleet
            # (seen at 500 workloads); that fleet satisfies every constraint, so return it.
            diagnostics.append(Diagnostic(
                "warning", "time_limit_fallback",
                f"the solver stopped at its time limit with a ${sol.objective_usd:,.0f} plan; the cheapest one-device "
                f"fleet (${single_sol.objective_usd:,.0f}) is returned instead; raise --time-limit for a mixed fleet"))
            bound = sol.bound_usd
            gap_now = (single_sol.objective_usd - bound) / single_sol.objective_usd if bound is not None else sol.gap
            sol = replace(single_sol, status=SolveStatus.FEASIBLE, gap=gap_now, bound_usd=bound,
                          solve_seconds=sol.solve_seconds + single_sol.solve_seconds,
                          detail=f"time limit reached; one-device fleet; gap {100 * (gap_now or 0):.1f} %")
        diagnostics.append(single_device_note(single, sol.objective_usd or 0.0))
    if sol.status == SolveStatus.FEASIBLE:
        diagnostics.append(Diagnostic("warning", "not_proven_optimal", sol.detail))
    return assemble(plan, cset, sol, diagnostics, single, input_file, input_sha256, problem)


def single_device_shortlist(problem: FleetProblem, gap: float) -> FleetProblem:
    """``problem`` without the devices that cannot be the cheapest one-device fleet.

    For each allowed device d on which every bucket has a candidate, with a[k] the
    amortised $ of a replica (``amortised_usd_per_replica``):

    - upper bound U[d]: a feasible one-device fleet — each workload on the option of d
      that carries all its buckets with the fewest amortised $ at
      r[k] = max(min_replicas, ⌈Σ_b λ_b/μ_b[k]⌉) (+1 for N+1) replicas, then whole servers;
    - lower bound L[d] = Σ_w max(min_replicas · min_k a[k], Σ_b λ_b · min_k a[k]/μ_b[k])
      (servers amortised, replicas fractional, each bucket on its cheapest option).

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
            if not opts or any(not any(o.capacity_qps[b] > 0 for o in opts) for b in live):
                covered = False
                break
            cost = {o.key: amortised_usd_per_replica(problem, o) for o in opts}
            per_bucket = sum(dem.bucket_qps[b] * min(cost[o.key] / o.capacity_qps[b] for o in opts
                                                     if o.capacity_qps[b] > 0) for b in live)
            lo += max(dem.min_replicas * min(cost.values()), per_bucket)
            whole = [o for o in opts if all(o.capacity_qps[b] > 0 for b in live)]
            if not whole:
                gpus = -1  # no single option carries every bucket: no simple upper bound
            elif gpus >= 0:
                best = min(whole, key=lambda o: (cost[o.key] * replica_upper_bound(dem, o), o.key))
                gpus += best.gpus * replica_upper_bound(dem, best)
        if not covered:
            continue
        lower[d] = lo
        if gpus >= 0:
            upper[d] = unit.objective_usd.at(gpus, -(-gpus // unit.gpus_per_node))
    if not upper:
        return problem
    cutoff = min(upper.values()) / (1.0 - gap) * (1.0 + 1e-9)
    keep = {d for d, lo in lower.items() if lo <= cutoff}
    return replace(problem, options=tuple(o for o in problem.options if o.device in keep),
                   units={d: u for d, u in problem.units.items() if d in keep})


def rebase_candidates(cset: CandidateSet, plan: Plan) -> CandidateSet:
    """A candidate set with the workload rates, replica rules and inventory of ``plan``.

    The workloads' models, lengths, SLOs and precisions, the objective and the allowed
    devices must be those the set was computed for (they decide capacities and pruning).
    """
    from dataclasses import replace

    if cset.objective and cset.objective != plan.objective:
        raise ValueError(f"candidates were computed for objective '{cset.objective}', not '{plan.objective}'")
    if cset.allowed_devices != (tuple(plan.allowed_devices) if plan.allowed_devices is not None else None):
        raise ValueError("candidates were computed for other allowed_devices; recompute them")
    inventory = {k.lower(): v for k, v in plan.inventory.items()}
    units = {k: (replace(u, inventory_gpus=inventory.get(k)) if u.device is not None else u)
             for k, u in cset.units.items()}
    workloads = []
    for wc in cset.workloads:
        w = plan.workload(wc.workload.name)
        old = wc.workload
        if (w.model, w.prompt_tokens, w.output_tokens, w.slo, w.precisions) != (
                old.model, old.prompt_tokens, old.output_tokens, old.slo, old.precisions):
            raise ValueError(f"workload '{w.name}' changed its model, lengths, SLO or precisions; "
                             "recompute the candidates")
        rate = w.request_rate_qps
        buckets = tuple(replace(b, qps=b.fraction * rate) for b in wc.buckets)
        workloads.append(replace(wc, workload=w, buckets=buckets))
    return replace(cset, workloads=tuple(workloads), units=units)


# ---------------------------------------------------------------------------------------
# Assembling the result
# ---------------------------------------------------------------------------------------


def _version() -> str:
    try:
        return version("gpuplan")
    except PackageNotFoundError:
        return "0+unknown"


def assumptions_of(plan: Plan) -> Assumptions:
    return Assumptions(
        objective=plan.objective, horizon_years=plan.horizon_years,
        electricity_usd_per_kwh=plan.electricity_usd_per_kwh, pue=plan.pue,
        power_utilization=plan.power_utilization,
        maintenance_fraction_per_year=plan.maintenance_fraction_per_year,
        discount_rate=plan.discount_rate, server_overhead_usd=plan.server_overhead_usd,
        server_power_w=plan.server_power_w, hours_per_year=HOURS_PER_YEAR,
        capex_budget_usd=plan.budget.capex_usd, annual_budget_usd=plan.budget.annual_usd,
        max_power_kw=plan.max_power_kw,
        api_usd_per_million_output_tokens=plan.api_usd_per_million_output_tokens,
        api_usd_per_million_input_tokens=plan.api_usd_per_million_input_tokens,
    )


def assemble(
    plan: Plan,
    cset: CandidateSet,
    sol: FleetSolution,
    diagnostics: list[Diagnostic],
    single: SingleDeviceBest | None,
    input_file: str,
    input_sha256: str,
    problem: FleetProblem | None = None,
) -> PlanResult:
    """The PlanResult of a solution: fleet, deployments, workloads, money, candidates."""
    a = MoneyAssumptions.from_plan(plan)
    common = dict(
        status=sol.status, status_detail=sol.detail, objective=plan.objective,
        solve_seconds=sol.solve_seconds, gap=sol.gap if sol.gap is not None else float("nan"),
        solver=sol.solver, plan_name=plan.name, input_file=input_file, input_sha256=input_sha256,
        gpuplan_version=_version(), created_utc=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        assumptions=assumptions_of(plan), buckets=tuple(bucket_rows(cset)),
    )
    rows, note = bounded_candidate_rows(candidate_rows(cset, a), sol)
    common["candidates"] = tuple(rows)
    if note is not None:
        diagnostics = [*diagnostics, note]
    if not sol.status.has_plan:
        workloads = tuple(workload_row(wc, [], None, a, met=False) for wc in cset.workloads)
        return PlanResult(**common, workloads=workloads, diagnostics=tuple(diagnostics),
                          output_tokens_per_year=sum(w.output_tokens_per_year for w in workloads))

    fleet_figures = {d: (cset.units[d].price, g, sol.nodes[d]) for d, g in sorted(sol.gpus.items())}
    money = fleet_money(fleet_figures.values(), a)
    fleet = tuple(
        FleetRow(device=d, gpus=g, nodes=n, gpus_per_node=cset.units[d].gpus_per_node,
                 purchase_usd=p.purchase_usd, cloud_usd_per_gpu_hour=p.cloud_usd_per_gpu_hour,
                 tdp_w=p.tdp_w or 0.0, capex_usd=capex_terms(p, a).at(g, n), power_kw=power_kw_terms(p, a).at(g, n))
        for d, (p, g, n) in fleet_figures.items()
    )
    deployments = []
    for wc in cset.workloads:
        deployments += deployment_rows(wc, sol)
    workloads = []
    for wc in cset.workloads:
        deps = [d for d in deployments if d.workload == wc.workload.name]
        gpus_by_device: dict[str, int] = {}
        for d in deps:
            gpus_by_device[d.device] = gpus_by_device.get(d.device, 0) + d.gpus
        share = workload_tco_share_usd(gpus_by_device, fleet_figures, a)
        workloads.append(workload_row(wc, deps, share, a))
    tokens = sum(w.output_tokens_per_year for w in workloads)
    routing = tuple(Route(w, b, k, q) for (w, b, k), q in sorted(sol.routed_qps.items()))
    return PlanResult(
        **common,
        objective_usd=money.objective_usd, capex_usd=money.capex_usd, annual_opex_usd=money.annual_opex_usd,
        annual_power_usd=money.annual_power_usd, annual_maintenance_usd=money.annual_maintenance_usd,
        annual_cloud_usd=money.annual_cloud_usd, tco_usd=money.tco_usd, npv_usd=money.npv_usd,
        power_kw=money.power_kw, gpus_total=sum(f.gpus for f in fleet), nodes_total=sum(f.nodes for f in fleet),
        output_tokens_per_year=tokens,
        cost_per_million_output_tokens_usd=cost_per_million_output_tokens_usd(money.tco_usd, tokens, a),
        fleet=fleet, deployments=tuple(deployments), workloads=tuple(workloads), single_device_best=single,
        diagnostics=tuple(diagnostics), sources=tuple(source_rows(cset, fleet)), routing=routing,
    )


def deployment_rows(wc: WorkloadCandidates, sol: FleetSolution) -> list[Deployment]:
    """Each (workload, candidate) with replicas: routed load, capacity for that mix, predicted p99s.

    capacity_qps = replicas / Σ_b (share_b / μ_b) for the routed mix (the workload's own mix
    when nothing is routed). The p99s are the worst over the buckets the replicas carry,
    each predicted at the replicas' utilisation U = Σ_b load_b/μ_b / replicas, i.e. at the
    rate U·μ_b of a replica serving only that bucket equally loaded.
    """
    w = wc.workload.name
    out = []
    for c in wc.kept:
        r = sol.replicas.get((w, c.key), 0)
        if r <= 0:
            continue
        routed = {b.index: sol.routed_qps.get((w, b.index, c.key), 0.0) for b in wc.buckets}
        qps = sum(routed.values())
        weights = routed if qps > 0 else {b.index: b.fraction for b in wc.buckets}
        total = sum(v for b, v in weights.items() if c.capacity_qps[b] > 0)
        per_replica_inv = sum(v / total / c.capacity_qps[b] for b, v in weights.items()
                              if c.capacity_qps[b] > 0) if total > 0 else 0.0
        capacity = r / per_replica_inv if per_replica_inv > 0 else 0.0
        p99 = [None, None, None]
        if qps > 0 and wc.predictor is not None and not wc.workload.is_batch:
            u = sum(q / c.capacity_qps[b] for b, q in routed.items() if q > 0) / r
            for b, q in routed.items():
                if q <= 0:
                    continue
                got = wc.predictor(c.key, b, u * c.capacity_qps[b])
                p99 = [_max(p, g) for p, g in zip(p99, got, strict=True)]
        out.append(Deployment(
            workload=w, key=c.key, device=c.device, precision=c.precision, tp=c.tp, pp=c.pp, replicas=r,
            qps=qps, capacity_qps=capacity, ttft_p99_ms=p99[0], tpot_p99_ms=p99[1], e2e_p99_ms=p99[2],
        ))
    return out


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def workload_row(
    wc: WorkloadCandidates, deps: list[Deployment], tco_share_usd: float | None, a: MoneyAssumptions,
    met: bool | None = None,
) -> WorkloadResult:
    """Per-workload outcome: worst predicted p99 over its loaded deployments, SLO met, cost share."""
    w = wc.workload
    p99 = {m: None for m in ("ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms")}
    ok = True
    for d in deps:
        if d.qps <= 0:
            continue
        for m in p99:
            v = getattr(d, m)
            p99[m] = _max(p99[m], v)
            slo = getattr(w.slo, m)
            if v is not None and slo is not None and v > slo * (1 + 1e-6):
                ok = False
    out_tokens = w.output_tokens_per_year
    requests_per_year = out_tokens / w.output_tokens.mean_tokens
    cpm = None
    if tco_share_usd is not None:
        cpm = cost_per_million_output_tokens_usd(tco_share_usd, out_tokens, a)
    return WorkloadResult(
        name=w.name, model=wc.model, qps=w.request_rate_qps, met=ok if met is None else met, kind=wc.kind,
        ttft_p99_ms=p99["ttft_p99_ms"], tpot_p99_ms=p99["tpot_p99_ms"], e2e_p99_ms=p99["e2e_p99_ms"],
        slo_ttft_p99_ms=w.slo.ttft_p99_ms, slo_tpot_p99_ms=w.slo.tpot_p99_ms, slo_e2e_p99_ms=w.slo.e2e_p99_ms,
        output_tokens_per_year=out_tokens, input_tokens_per_year=requests_per_year * w.prompt_tokens.mean_tokens,
        cost_per_million_output_tokens_usd=cpm, min_replicas=w.min_replicas, redundancy=w.redundancy,
    )


MAX_CANDIDATE_ROWS = 20_000


def bounded_candidate_rows(rows: list[CandidateRow], sol: FleetSolution) -> tuple[list[CandidateRow], Diagnostic | None]:
    """All candidate rows, or — past MAX_CANDIDATE_ROWS (a 500-workload plan has millions) —
    the rows of every chosen candidate plus the cheapest kept ones per (workload, bucket) by
    cost per req/s, with a diagnostic counting what was left out and why."""
    if len(rows) <= MAX_CANDIDATE_ROWS:
        return rows, None
    chosen = {(w, k) for (w, k), n in sol.replicas.items() if n > 0}
    groups: dict[tuple[str, int], list[CandidateRow]] = {}
    for r in rows:
        if r.pruned_reason is None and r.capacity_qps > 0:
            groups.setdefault((r.workload, r.bucket), []).append(r)
    per_group = max(1, MAX_CANDIDATE_ROWS // max(1, len(groups)))
    keep = [r for r in rows if (r.workload, r.key) in chosen]
    seen = {id(r) for r in keep}
    for group in groups.values():
        group.sort(key=lambda r: (r.cost_per_qps_usd if r.cost_per_qps_usd is not None else float("inf"), r.key))
        keep += [r for r in group[:per_group] if id(r) not in seen]
    reasons: dict[str, int] = {}
    for r in rows:
        if r.pruned_reason is not None:
            head = r.pruned_reason.split(";")[0].split(" (")[0]
            reasons[head] = reasons.get(head, 0) + 1
    top = ", ".join(f"{n:,} {why}" for why, n in sorted(reasons.items(), key=lambda x: -x[1])[:3])
    note = Diagnostic("info", "candidates_trimmed",
                      f"{len(rows):,} candidate rows evaluated; listed: the chosen ones and the {per_group} cheapest "
                      f"kept per workload and bucket ({len(keep):,} rows); pruned: {sum(reasons.values()):,}"
                      + (f" (most: {top})" if top else ""))
    return keep, note


def candidate_rows(cset: CandidateSet, a: MoneyAssumptions) -> list[CandidateRow]:
    """Every candidate of every workload in every bucket, kept or pruned."""
    rows = []
    for wc in cset.workloads:
        for c in wc.candidates:
            unit = cset.units.get(c.device)
            power = None
            if unit is not None:
                t = power_kw_terms(unit.price, a)
                power = c.gpus * (t.per_gpu + t.per_node / unit.gpus_per_node)
            for b in wc.buckets:
                mu = c.capacity_qps[b.index]
                cost = c.cost_per_replica_usd
                rows.append(CandidateRow(
                    workload=wc.workload.name, bucket=b.index, key=c.key, device=c.device, precision=c.precision,
                    tp=c.tp, pp=c.pp, gpus=c.gpus, capacity_qps=mu, cost_per_replica_usd=cost,
                    cost_per_qps_usd=cost / mu if cost is not None and mu > 0 else None,
                    limited_by=c.limited_by[b.index], pruned_reason=c.pruned_reason, power_kw=power,
                ))
    return rows


def bucket_rows(cset: CandidateSet) -> list[BucketRow]:
    return [BucketRow(wc.workload.name, b.index, b.fraction, b.qps, b.prompt_tokens_mean, b.output_tokens_mean,
                      b.label) for wc in cset.workloads for b in wc.buckets]


def source_rows(cset: CandidateSet, fleet: tuple[FleetRow, ...]) -> list[SourceRow]:
    """Where the catalog figures of the fleet's devices come from."""
    rows = []
    for f in fleet:
        dev = cset.units[f.device].device
        if dev is None:
            continue
        for name in SOURCE_FIELDS:
            src = dev.sources.get(name)
            if src is not None:
                rows.append(SourceRow(dev.key, name, src.source, src.as_of, name in dev.estimated))
            elif name in dev.estimated:
                rows.append(SourceRow(dev.key, name, dev.estimated[name], "", True))
    return rows
