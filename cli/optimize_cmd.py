"""`gpuplan optimize PLAN.yaml`: the cheapest fleet that serves the plan's workloads within their SLOs.

Parses, calls ``optimizer.optimize.optimize_plan`` and renders: the fleet, the
per-workload deployments with predicted p99s against the SLOs, and the costs.
``--json OUT.json`` writes the result (docs/plan-json.md) atomically (``--json -``
prints it to stdout instead of the tables); ``--out REPORT.xlsx`` writes the finance
workbook. An infeasible plan prints its diagnostics and exits with code 1, after writing
the JSON if asked.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from catalog.constants import HOURS_PER_YEAR
from catalog.errors import WorkloadError
from catalog.outputs import Output, plan_outputs
from cli.common import (
    CatalogOpt,
    LazyConsole,
    ModelConfigOpt,
    NoCacheOpt,
    ParamsOpt,
    TimeLimitAliasOpt,
    TimeLimitOpt,
    aliased,
    cache_off,
    error_line,
    fmt,
    load,
    load_calibration,
    plural,
    safe_console,
    stdout,
    table,
    without_gc,
)
from cli.provenance_render import render_provenance, render_sensitivity
from optimizer.planning.solver_options import DEFAULT_N_BUCKETS, SolverOptions
from optimizer.results.latency_text import ms_text

stderr = LazyConsole(lambda: safe_console(stderr=True, width=None if sys.stderr.isatty() else 240))


def optimize(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.yaml", help="The plan file (workloads, money, limits).")],
    json_path: Annotated[str | None, typer.Option(
        "--json", help="Write the result as JSON to this file (docs/plan-json.md); '-' prints it instead of tables.")] = None,
    capacity_table: Annotated[Path | None, typer.Option(
        "--capacity-table", help="Measured capacities (CSV, Mélange-style) to use instead of the models.")] = None,
    time_limit_s: TimeLimitOpt = None,
    gap: Annotated[float, typer.Option("--gap", min=0.0, help="Relative MIP gap to stop at, in [0, 1) (0.001 = 0.1 %).")] = SolverOptions().gap,
    n_buckets: Annotated[int | None, typer.Option(
        "--n-buckets", min=1, max=16, show_default=False,
        help=f"Request-size buckets per workload (used where splitting lowers its cost; otherwise one; "
             f"default {DEFAULT_N_BUCKETS}).")] = None,
    out: Annotated[str | None, typer.Option("--out", help="Also write the finance workbook (.xlsx).")] = None,
    sensitivity: Annotated[bool, typer.Option(
        "--sensitivity/--no-sensitivity", help="Runner-up, break-even prices and capacity factors, tornado swings "
        "(re-solves of the MILP on the same candidates, a dozen on the shipped chat fleet; --no-sensitivity skips "
        "them; skipped with a warning when the "
        "plan is not proven optimal).")] = True,
    verify: Annotated[bool | None, typer.Option(
        "--verify/--no-verify", help="Re-check online deployments by simulation and re-size misses "
        "(default: on up to 48 online deployments).", show_default=False)] = None,
    confidence: Annotated[float | None, typer.Option(
        "--confidence", min=0.5, max=0.99, help="Size for SLOs met with this probability under the performance "
        "model's error band (plan field confidence); default: the point estimate.")] = None,
    params: ParamsOpt = None,
    catalog: CatalogOpt = None,
    model_config: ModelConfigOpt = None,
    no_cache: NoCacheOpt = False,
    time_limit: TimeLimitAliasOpt = None,
    buckets: Annotated[int | None, typer.Option("--buckets", min=1, max=16, hidden=True,
                                                help="Old name of --n-buckets.")] = None,
) -> None:
    """Find the cheapest fleet (devices, precision, sharding, replicas) that meets every workload's SLOs."""
    # the optimizer (numpy, pulp, pydantic) loads when the command runs, not at `gpuplan --help`
    with without_gc():
        from catalog.files import read_bytes
        from optimizer.results.plan_result import Provenance
        from workloads.load import load_plan, resolve_catalog

    cache_off(no_cache)
    options = SolverOptions(time_limit_s=aliased(time_limit_s, time_limit, SolverOptions().time_limit_s,
                                                 "--time-limit-s", "--time-limit"), gap=gap)
    if capacity_table is not None and (model_only := [flag for flag, given in (
            ("--params", params is not None), ("--n-buckets", n_buckets is not None or buckets is not None),
            ("--verify", verify is True), ("--confidence", confidence is not None)) if given]):
        raise WorkloadError(f"{' and '.join(model_only)} {'tunes' if len(model_only) == 1 else 'tune'} the performance "
                            "model, which --capacity-table replaces (its rows give the buckets and the capacities at "
                            f"the SLO): drop {'it' if len(model_only) == 1 else 'them'}, or plan without the table")
    n_buckets = aliased(n_buckets, buckets, DEFAULT_N_BUCKETS, "--n-buckets", "--buckets")
    inputs = (plan_path, capacity_table, params, catalog, model_config)
    outputs = plan_outputs([Output("--json", json_path, (".json",), stdout_ok=True),
                            Output("--out", out, (".xlsx",))], inputs)
    cat = load(catalog, model_config)
    plan = load_plan(plan_path)
    cat = resolve_catalog(plan, cat, str(plan_path))
    if confidence is not None:
        plan = plan.model_copy(update={"confidence": confidence})
    calibration = load_calibration(params, cat) if capacity_table is None else None
    digest = hashlib.sha256(read_bytes(plan_path, "plan", WorkloadError)).hexdigest()
    result = cached_optimize(plan, cat, calibration, options, Provenance(str(plan_path), digest), capacity_table,
                             n_buckets, sensitivity, verify)
    data = result.to_json()
    payloads: dict[str, str | bytes] = {}
    if json_path is not None:
        payloads["--json"] = json.dumps(data, indent=2, allow_nan=False) + "\n"
    if out is not None and result.status.has_plan:
        from reports.workbook import workbook_bytes

        payloads["--out"] = workbook_bytes(data, tuple(p for p in inputs if p is not None))
    written = outputs.write(payloads)
    if not outputs.to_stdout("--json"):
        render(data)
        for shown in written:
            stdout.print(f"wrote {shown}", markup=False)
    if not result.status.has_plan:
        # One line (the CLI's error contract), naming the plan file and why (the binding limit and its fix)
        error_line(f"{plan_path}: no fleet found ({data['status']}): {result.no_fleet_reason()}")
        raise typer.Exit(code=1)


def cached_optimize(plan, cat, calibration, options: SolverOptions, source, capacity_table: Path | None,
                    n_buckets: int, sensitivity: bool, verify: bool | None):
    """``optimize_plan``, or the result a run of the same inputs stored (``result_cache``, README
    "Cache"): on a hit the planning stack is not imported. A capacity table that cannot be read
    skips the cache (``optimize_plan`` then names what is wrong with it)."""
    from catalog.errors import GpuplanError
    from catalog.files import read_bytes
    from optimizer.planning import disk_cache
    from optimizer.planning.result_cache import cached_result, result_key, store_result

    key = None
    try:
        table_sha = (hashlib.sha256(read_bytes(capacity_table, "capacity table", WorkloadError)).hexdigest()
                     if capacity_table is not None else None)
        key = result_key(plan, cat, calibration.model_dump_json() if calibration is not None else None,
                         options=options, source=source, capacity_table_sha256=table_sha, n_buckets=n_buckets,
                         sensitivity=sensitivity, verify=verify)
    except GpuplanError:
        pass
    if key is not None and (hit := cached_result(key)) is not None:
        return hit
    with without_gc():
        from optimizer.optimize import optimize_plan

    unsettled = disk_cache.state().unsettled
    busy = stderr.status("optimizing…") if sys.stderr.isatty() else nullcontext()
    with busy:
        result = optimize_plan(plan, cat, calibration, options=options, source=source, capacity_table=capacity_table,
                               n_buckets=n_buckets, sensitivity=sensitivity, verify=verify)
    if key is not None:
        store_result(key, result, unsettled)
    return result


def _ms(value: float | None, slo: float | None) -> str:
    if value is None:
        return "—" if slo is None else f"— / {ms_text(slo)}"
    return ms_text(value) if slo is None else f"{ms_text(value)} / {ms_text(slo)}"


def _cache_text(cache: dict[str, Any] | None) -> str:
    """'; read from the cache DIR' when the whole result was (README "Cache"), else ''."""
    if not cache or not cache.get("dir") or cache.get("misses") or not cache.get("hits"):
        return ""
    return f"; read from the cache {cache['dir']} (--no-cache recomputes)"


def render(data: dict[str, Any]) -> None:
    """The fleet, the deployments with p99s against the SLOs, the workloads and the money."""
    stdout.print(f"plan '{data['plan_name']}': {data['status']} ({data['status_detail']}), "
                 f"objective {data['objective']}, solved in {data['solve_seconds']:.2f} s by {data['solver']}"
                 + _cache_text(data.get("cache")), markup=False, highlight=False)
    if data["status"] not in ("optimal", "feasible"):
        return
    fleet_rows = []
    cloud = data["objective"] == "cloud"
    bought_col = "GPUs rented" if cloud else "GPUs bought"
    for f in data["fleet"]:
        bought = f.get("gpus_installed", f["gpus"])
        idle = f"{bought - f['gpus']} of {bought} idle" if bought > f["gpus"] else "none"
        server = f.get("platform_name") or "server"
        if cloud and not f.get("fixed_size"):
            per = f.get("gpus_per_instance", 1)
            server += " (rented by the GPU)" if per == 1 else f" (rented in {per}-GPU instances)"
        fleet_rows.append([f["device"], server, f["gpus"], bought, idle, f["nodes"],
                           fmt(f["capex_usd"]), fmt(f["power_kw"], 1)])
    cols = ["device", "server", "GPUs in use", bought_col, "idle GPUs", "servers", "capex $", "power kW"]
    stdout.print(table("Fleet", cols, fleet_rows, right={"GPUs in use", bought_col, "servers", "capex $",
                                                          "power kW"}))
    slo = {w["name"]: w for w in data["workloads"]}
    techniques = any(d.get("stage", "colocated") != "colocated" or d.get("technique") for d in data["deployments"])
    dep_rows = []
    for d in data["deployments"]:
        w = slo[d["workload"]]
        row = [
            d["workload"], d["device"], d["precision"] or "—", f"tp{d['tp']} pp{d['pp']}" + (f" ep{d['ep']}" if d.get("ep", 1) > 1 else ""),
            d["replicas"] if not d.get("replicas_per_server") else
            f"{d['replicas']} (≤ {d['replicas_per_server']} per server, {d['dedicated_servers']} servers of their own)",
            fmt(d["qps"], 2), fmt(d["capacity_qps"], 2),
            _ms(d["ttft_p99_ms"], w["slo_ttft_p99_ms"]), _ms(d["tpot_p99_ms"], w["slo_tpot_p99_ms"]),
            _ms(d["e2e_p99_ms"], w["slo_e2e_p99_ms"]),
        ]
        if techniques:
            pool = {"prefill": "prefill pool", "decode": "decode pool"}.get(d.get("stage"), "colocated")
            row[1:1] = [pool + (f", {d['technique']}" if d.get("technique") else "")]
            row.append(fmt(d.get("kv_link_gb_s"), 1) if d.get("kv_link_gb_s") is not None else "—")
            row.append(fmt(d.get("pair_link_gb_s")))
        dep_rows.append(row)
    cols = ["workload", "device", "precision", "sharding", "replicas", "req/s", "capacity req/s",
            "TTFT p99 / SLO ms", "TPOT p99 / SLO ms", "E2E p99 / SLO ms"]
    if techniques:
        cols[1:1] = ["serving"]
        cols.append("KV link load Gb/s")  # the KV traffic (workbook: "KV link load"), not the link's speed
        cols.append("KV pairing link Gb/s")  # a prefill pool's receive tier, a decode pool's link (workbook alike)
    stdout.print(table("Deployments", cols, dep_rows, right=set(cols[5 if techniques else 4:])))
    if routes := split_routing_rows(data):
        stdout.print(table("Request-size routing of the workloads split into buckets (a size-aware router sends "
                           "each size to these deployments)",
                           ["workload", "bucket", "tokens (prompt + output)", "share of requests", "deployment",
                            "req/s"], routes, right={"share of requests", "req/s"}))
    w_rows = [[w["name"], w["model"], w["kind"], fmt(w["qps"], 2), "yes" if w["met"] else "NO",
               fmt(w["cost_per_million_output_tokens_usd"], 3)] for w in data["workloads"]]
    stdout.print(table("Workloads", ["workload", "model", "kind", "req/s", "SLOs met", "$ / M output tokens"],
                       w_rows, right={"req/s", "$ / M output tokens"}))
    money = [
        ["objective (" + data["objective"] + ")", fmt(data["objective_usd"])],
        ["capex", fmt(data["capex_usd"])],
        ["opex per year", fmt(data["annual_opex_usd"])],
        ["  power per year", fmt(data["annual_power_usd"])],
        ["  maintenance per year", fmt(data["annual_maintenance_usd"])],
        ["  colocation per year", fmt(data.get("annual_facility_usd", 0.0))],
        ["  cloud rental per year", fmt(data["annual_cloud_usd"])
         + (f" ({data['annual_cloud_usd'] / HOURS_PER_YEAR:,.2f} / h)" if cloud else "")],
        [f"TCO over {plural(data['assumptions']['horizon_years'], 'year')}", fmt(data["tco_usd"])],
        ["NPV of costs", fmt(data["npv_usd"])],
        ["power (nameplate" + (", information only)" if cloud else ")"), fmt(data["power_kw"], 1) + " kW"],
        [f"GPUs in use / {'rented' if cloud else 'bought'} / servers",
         f"{data['gpus_total']} / {sum(f['gpus_installed'] for f in data['fleet'])} / {data['nodes_total']}"],
        ["$ per million output tokens (average volume)", fmt(data["cost_per_million_output_tokens_usd"], 3)],
        ["depreciation per year", fmt(data.get("annual_depreciation_usd"))],
        ["book value at the horizon", fmt(data.get("residual_value_usd"))],
        ["lease payment per year", fmt(data.get("annual_lease_payment_usd"))],
    ]
    stdout.print(table("Costs (USD)", ["", "value"], money, right={"value"}))
    render_provenance(data)
    render_sensitivity(data)
    for d in data["diagnostics"]:
        stdout.print(f"{d['level']}: {d['message']}", markup=False, highlight=False)


_BUCKET_LABEL = re.compile(r"b\d+_(\d+)_(\d+)tok")


def split_routing_rows(data: dict[str, Any]) -> list[list[Any]]:
    """One row per (bucket, deployment) of each workload served in more than one bucket: the bucket's request sizes
    (its label ``b<k>_<min>_<max>tok``: prompt + output tokens), its share of the workload's requests, the deployment
    it is routed to and the req/s (``buckets[]`` and ``routing[]``); [] when every workload is served whole."""
    buckets = {(b["workload"], b["bucket"]): b for b in data.get("buckets", [])}
    split = {w for (w, _), b in buckets.items() if b.get("label") != "all"}
    deployments = {(d["workload"], d["key"], d.get("stage", "colocated")): d for d in data["deployments"]}
    rows = []
    for r in data.get("routing", []):
        if r["workload"] not in split or r["qps"] <= 0:
            continue
        b = buckets[(r["workload"], r["bucket"])]
        m = _BUCKET_LABEL.fullmatch(b.get("label", ""))
        sizes = f"{int(m[1]):,}–{int(m[2]):,}" if m else b.get("label", "")
        d = deployments.get((r["workload"], r["key"], r.get("stage", "colocated")))
        where = (f"{d['device']} {d['precision'] or ''} tp{d['tp']} pp{d['pp']}"
                 + (f" ep{d['ep']}" if d.get("ep", 1) > 1 else "")
                 + ("" if r.get("stage", "colocated") == "colocated" else f" ({r['stage']} pool)")) if d else r["key"]
        rows.append([r["workload"], r["bucket"], sizes, f"{b['fraction']:.0%}", where, fmt(r["qps"], 2)])
    return rows


def register(app: typer.Typer) -> None:
    app.command("optimize")(optimize)
