"""The typed result of a solution: :class:`~optimizer.results.plan_result.PlanResult` from (plan, candidates, solution).

Fleet rows, deployments (routed load, capacity for that mix, predicted p99s), workloads
(SLOs met, cost per million tokens), money by the formulas of ``docs/plan-json.md``, the
candidate table, sources.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version

from optimizer.planning.candidate_set import CandidateSet, UnitSpec, WorkloadCandidates
from optimizer.planning.milp.problem import FleetProblem, FleetSolution
from optimizer.results.money import (
    MoneyAssumptions,
    capex_terms,
    cost_per_million_output_tokens_usd,
    finance_figures,
    fleet_money,
    power_kw_terms,
    workload_tco_share_usd,
)
from optimizer.results.plan_result import (
    BucketRow,
    CandidateRow,
    Deployment,
    Diagnostic,
    FleetRow,
    PlanResult,
    Provenance,
    Route,
    SingleDeviceBest,
    SourceRow,
    WorkloadResult,
)
from workloads.spec import Plan

SOURCE_FIELDS = ("specs", "purchase_usd", "cloud_usd_per_gpu_hour", "tdp_w")


def _version() -> str:
    try:
        return version("gpuplan")
    except PackageNotFoundError:
        return "0+unknown"


def fleet_row(device: str, unit: UnitSpec, gpus: int, nodes: int, a: MoneyAssumptions) -> FleetRow:
    """One device of a fleet: GPUs in use and bought, servers, its platform, capex and power."""
    p = unit.price
    installed = p.installed_gpus(gpus, nodes)
    platform = unit.platform
    return FleetRow(
        device=device, gpus=gpus, nodes=nodes, gpus_per_node=unit.gpus_per_node,
        purchase_usd=p.purchase_usd, cloud_usd_per_gpu_hour=p.cloud_usd_per_gpu_hour, tdp_w=p.tdp_w or 0.0,
        capex_usd=capex_terms(p, a).at(installed, nodes), power_kw=power_kw_terms(p, a).at(installed, nodes),
        gpus_installed=installed, device_name=unit.device.name if unit.device is not None else "",
        platform=platform.key if platform else "", platform_name=platform.name if platform else "",
        fixed_size=p.fixed_size, gpus_per_instance=p.gpus_per_instance, server_usd=p.server_usd,
        server_power_w=p.server_power_w,
        rack_units=p.rack_units, nic_gb_s_per_gpu=platform.nic_gb_s_per_gpu if platform else None,
    )


def cloud_host_power_note(fleet: tuple[FleetRow, ...], a: MoneyAssumptions) -> Diagnostic | None:
    """Under objective cloud, where a device is rented in instances smaller than its host server (or cards one by
    one), an info line saying what ``power_kw`` counts: each host server's ``server_power_w`` whole (a 1-GPU H100
    instance counts its 8-GPU host's 4.6 kW), beside the rented share of the hosts,
    Σ_d (gpus_d·tdp_w_d + gpus_d/gpus_per_node_d·server_power_w_d) / 1000; None when every host is rented whole.
    The figure is information only under cloud (no power cost, no ``max_power_kw``), so it is labelled, not changed:
    the JSON, the workbook's formulas and ``report``'s re-check keep one power formula for every objective."""
    if a.objective != "cloud":
        return None
    partial = [f for f in fleet if f.gpus_installed < f.nodes * f.gpus_per_node]
    if not partial:
        return None
    shared_kw = sum((f.gpus_installed * f.tdp_w + f.gpus_installed / f.gpus_per_node
                     * (a.server_power_w if f.server_power_w is None else f.server_power_w)) / 1000 for f in fleet)
    rows = "; ".join(f"{f.device}: {f.gpus_installed} rented GPU{'s' if f.gpus_installed != 1 else ''} on "
                     f"{f.nodes} host{'s' if f.nodes != 1 else ''} of {f.gpus_per_node}" for f in partial)
    return Diagnostic("info", "cloud_power_whole_hosts",
                      f"power {sum(f.power_kw for f in fleet):,.1f} kW (nameplate) counts each host server's power "
                      f"whole, though the instances rent part of it ({rows}); the rented share of the hosts is "
                      f"{shared_kw:,.1f} kW. Under objective cloud this power is shown for information only: it costs "
                      "nothing and max_power_kw is not applied")


def assemble(
    plan: Plan,
    cset: CandidateSet,
    sol: FleetSolution,
    diagnostics: list[Diagnostic],
    single: SingleDeviceBest | None,
    source: Provenance,
    problem: FleetProblem | None = None,
) -> PlanResult:
    """The PlanResult of a solution: fleet, deployments, workloads, money, candidates."""
    a = MoneyAssumptions.from_plan(plan)
    common = dict(
        status=sol.status, status_detail=sol.detail, objective=plan.objective,
        solve_seconds=sol.solve_seconds, gap=sol.gap if sol.gap is not None else float("nan"),
        solver=sol.solver, plan_name=plan.name, input_file=source.input_file, input_sha256=source.input_sha256,
        gpuplan_version=_version(), created_utc=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        assumptions=a, buckets=tuple(bucket_rows(cset)),
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
    money = fleet_money(((p, p.installed_gpus(g, n), n) for p, g, n in fleet_figures.values()), a)
    finance = finance_figures(money.capex_usd, a)
    fleet = tuple(fleet_row(d, cset.units[d], g, n, a) for d, (_, g, n) in fleet_figures.items())
    if single is not None and single.device in cset.units:
        single = replace(single, fleet=(fleet_row(single.device, cset.units[single.device], single.gpus,
                                                  single.nodes, a),))
    deployments = []
    for wc in cset.workloads:
        deployments += end_to_end(deployment_rows(wc, sol))
    workloads = []
    for wc in cset.workloads:
        deps = [d for d in deployments if d.workload == wc.workload.name]
        gpus_by_device: dict[str, int] = {}
        for d in deps:
            gpus_by_device[d.device] = gpus_by_device.get(d.device, 0) + d.gpus
        share = workload_tco_share_usd(gpus_by_device, fleet_figures, a)
        workloads.append(workload_row(wc, deps, share, a))
    tokens = sum(w.output_tokens_per_year for w in workloads)
    if (power_note := cloud_host_power_note(fleet, a)) is not None:
        diagnostics = [*diagnostics, power_note]
    stage = {(wc.workload.name, c.key): c.stage for wc in cset.workloads for c in wc.candidates}
    routing = tuple(Route(w, b, k, q, stage.get((w, k), "colocated")) for (w, b, k), q in sorted(sol.routed_qps.items()))
    return PlanResult(
        **common,
        objective_usd=money.objective_usd, capex_usd=money.capex_usd, annual_opex_usd=money.annual_opex_usd,
        annual_power_usd=money.annual_power_usd, annual_maintenance_usd=money.annual_maintenance_usd,
        annual_cloud_usd=money.annual_cloud_usd, tco_usd=money.tco_usd, npv_usd=money.npv_usd,
        power_kw=money.power_kw, gpus_total=sum(f.gpus for f in fleet), nodes_total=sum(f.nodes for f in fleet),
        annual_facility_usd=money.annual_facility_usd, annual_depreciation_usd=finance.annual_depreciation_usd,
        residual_value_usd=finance.residual_value_usd, annual_lease_payment_usd=finance.annual_lease_payment_usd,
        lease_total_usd=finance.lease_total_usd,
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
            stage=c.stage, technique=c.technique, ep=c.ep, engine=c.engine,
            kv_link_gb_s=qps * c.kv_bytes_per_request * 8.0 / 1e9 if c.kv_bytes_per_request is not None else None,
            pair_link_gb_s=c.pair_link_bytes_s * 8.0 / 1e9 if c.pair_link_bytes_s is not None else None,
            replicas_per_server=sol.replicas_per_server.get((w, c.key)),
        ))
    return out


def end_to_end(deps: list[Deployment]) -> list[Deployment]:
    """Decode pools' E2E from the request's arrival: their own (from the KV's arrival) plus the
    worst TTFT p99 of the workload's prefill pools (a sum of p99s, an upper bound; the wait for a decode
    step is in both, so counted twice: at most one decode step more)."""
    ttft = max((d.ttft_p99_ms for d in deps if d.stage == "prefill" and d.qps > 0 and d.ttft_p99_ms is not None),
               default=None)
    if ttft is None:
        return deps
    return [replace(d, e2e_p99_ms=d.e2e_p99_ms + ttft) if d.stage == "decode" and d.e2e_p99_ms is not None else d
            for d in deps]


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
        peak_to_average_ratio=w.peak_to_average_ratio,
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
                    limited_by=c.limited_by[b.index], pruned_reason=c.pruned_reason, power_kw=power, ep=c.ep,
                    engine=c.engine,
                ))
    return rows


def bucket_rows(cset: CandidateSet) -> list[BucketRow]:
    return [BucketRow(wc.workload.name, b.index, b.fraction, b.qps, b.prompt_tokens_mean, b.output_tokens_mean,
                      b.label) for wc in cset.workloads for b in wc.buckets]


PLATFORM_SOURCE_FIELDS = ("server_usd", "server_power_w")


def source_rows(cset: CandidateSet, fleet: tuple[FleetRow, ...]) -> list[SourceRow]:
    """Where the catalog figures of the fleet's devices and of their platforms' servers come from
    (a server figure the plan overrides with server_overhead_usd / server_power_w is the plan's)."""
    rows = []
    for f in fleet:
        unit = cset.units[f.device]
        dev = unit.device
        if dev is None:
            continue
        for name in SOURCE_FIELDS:
            src = dev.sources.get(name)
            if src is not None:
                rows.append(SourceRow(dev.key, name, src.source, src.as_of, name in dev.estimated))
            elif name in dev.estimated:
                rows.append(SourceRow(dev.key, name, dev.estimated[name], "", True))
        p = unit.platform
        if p is None:
            continue
        for name in PLATFORM_SOURCE_FIELDS:
            if getattr(unit.price, name) != getattr(p, name):
                rows.append(SourceRow(dev.key, name, "the plan's figure (server_overhead_usd / server_power_w)", "",
                                      False))
            elif name in p.estimated:
                rows.append(SourceRow(dev.key, name, f"{p.name}: {p.estimated[name]}", "", True))
            elif (src := p.sources.get(name) or p.sources.get("specs")) is not None:
                rows.append(SourceRow(dev.key, name, f"{p.name}: {src.detail} ({src.url})".replace(":  (", ": ("),
                                      src.as_of, False))
    return rows

