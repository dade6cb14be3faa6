"""Deployments, Workloads and Candidates: what runs where, against which SLO, and why.

A deployment's share of the fleet cost is its GPUs' share of its device's cost over the
horizon (purchase or rental, power, maintenance, and their share of server overhead);
a workload's cost per million output tokens is the sum of its deployments' shares over
its own output tokens (docs/plan-json.md).
"""

from __future__ import annotations

from openpyxl.formatting.rule import FormulaRule
from openpyxl.utils import get_column_letter

from reports import styles
from reports.context import FIRST_ROW, HEADER_ROW, Ctx, title
from reports.xl import Formula, ref

DEPLOYMENT_COLUMNS: list[tuple[str, str, str]] = [
    ("workload", "Workload", ""),
    ("device", "Device", ""),
    ("precision", "Precision", ""),
    ("tp", "Tensor parallel", styles.INT),
    ("pp", "Pipeline parallel", styles.INT),
    ("ep", "Expert parallel", styles.INT),
    ("engine", "Engine", ""),
    ("replicas", "Replicas", styles.THOUSANDS),
    ("placement", "Placement (n+1-node)", ""),
    ("gpus", "GPUs", styles.THOUSANDS),
    ("qps", "Load routed (req/s)", styles.DEC2),
    ("capacity", "Capacity at SLO (req/s)", styles.DEC2),
    ("load", "Load / capacity", styles.PCT),
    ("ttft", "TTFT p99 (ms)", styles.MS),
    ("slo_ttft", "TTFT SLO (ms)", styles.MS),
    ("tpot", "TPOT p99 (ms)", styles.MS),
    ("slo_tpot", "TPOT SLO (ms)", styles.MS),
    ("e2e", "E2E p99 (ms)", styles.MS),
    ("slo_e2e", "E2E SLO (ms)", styles.MS),
    ("cost", "Share of cost over horizon ($)", styles.USD),
    ("stage", "Serving (colocated, prefill or decode pool)", ""),
    ("technique", "Technique", ""),
    ("kv_link", "KV link load (Gb/s)", styles.DEC2),
    ("pair_link", "KV pairing link (Gb/s; a prefill pool feeds decode pools at or above it)", styles.DEC2),
    ("key", "Configuration key", ""),
    ("fidelity", "Fidelity class", ""),
    ("band_low", "Capacity band low (× predicted)", styles.RATIO),
    ("band_high", "Capacity band high (× predicted)", styles.RATIO),
    ("fidelity_basis", "Fidelity basis", ""),
    ("sim_metric", "Simulated p99 of", ""),
    ("sim_p99", "Simulated p99 (ms)", styles.MS),
    ("sim_low", "Simulated p99 95 % CI low (ms)", styles.MS),
    ("sim_high", "Simulated p99 95 % CI high (ms)", styles.MS),
    ("sim_check", "Simulator check", ""),
]
TECHNIQUE_COLUMNS = ("stage", "technique", "kv_link", "pair_link")  # shown only when some deployment uses one
# The deployment's own fidelity (its device, engine and ep): shown when some deployment carries one.
FIDELITY_COLUMNS = ("fidelity", "band_low", "band_high", "fidelity_basis")
# The discrete-event simulator's re-check of each online deployment: shown when some deployment was simulated.
SIMULATION_COLUMNS = ("sim_metric", "sim_p99", "sim_low", "sim_high", "sim_check")
SIMULATOR_CHECK = {"met": "met", "at_slo": "at the SLO, within the simulation's noise (not re-sized)",
                   "missed": "MISSED beyond the simulation's noise"}
BASIS_WIDTH_CHARS = 60  # the basis is wrapped at this width, so it never widens the page

WORKLOAD_COLUMNS: list[tuple[str, str, str]] = [
    ("name", "Workload", ""),
    ("model", "Model", ""),
    ("kind", "Kind", ""),
    ("qps", "Requests per second", styles.DEC2),
    ("out", "Output tokens per year", styles.THOUSANDS),
    ("in", "Input tokens per year", styles.THOUSANDS),
    ("ttft", "TTFT p99 (ms)", styles.MS),
    ("slo_ttft", "TTFT SLO (ms)", styles.MS),
    ("tpot", "TPOT p99 (ms)", styles.MS),
    ("slo_tpot", "TPOT SLO (ms)", styles.MS),
    ("e2e", "E2E p99 (ms)", styles.MS),
    ("slo_e2e", "E2E SLO (ms)", styles.MS),
    ("met", "SLOs met", ""),
    ("gpus", "GPUs", styles.THOUSANDS),
    ("cost", "Cost over horizon ($)", styles.USD),
    ("per_m", "Cost per million output tokens ($)", styles.USD_CENTS),
]

CANDIDATE_COLUMNS: list[tuple[str, str]] = [
    ("Workload", ""), ("Bucket", ""), ("Configuration key", ""), ("Device", ""), ("Precision", ""),
    ("Tensor parallel", styles.INT), ("Pipeline parallel", styles.INT), ("Expert parallel", styles.INT),
    ("Engine", ""), ("GPUs per replica", styles.INT),
    ("Capacity at SLO (req/s)", styles.DEC2), ("Cost per replica ($)", styles.USD),
    ("Cost per req/s ($)", styles.USD), ("Limited by", ""), ("Chosen", ""), ("Pruned because", ""),
]


def _unused_metrics(ctx: Ctx) -> set[str]:
    """Latency metrics (ttft/tpot/e2e) with no SLO and no prediction anywhere: their columns are left out."""
    unused = set()
    for m in ("ttft", "tpot", "e2e"):
        field = f"{m}_p99_ms"
        used = any(getattr(w, field) is not None or getattr(w, f"slo_{field}") is not None
                   for w in ctx.result.workloads)
        used = used or any(getattr(d, field) is not None for d in ctx.result.deployments)
        if not used:
            unused |= {m, f"slo_{m}"}
    return unused


def _slo_rules(ws, pairs: list[tuple[int, int]], first: int, last: int) -> None:
    """Green where a predicted p99 meets its SLO, red where it misses (same-sheet formulas)."""
    for p99_col, slo_col in pairs:
        p, s = get_column_letter(p99_col), get_column_letter(slo_col)
        area = f"{p}{first}:{p}{last}"
        both = f"ISNUMBER({p}{first}),ISNUMBER({s}{first})"
        ws.conditional_formatting.add(area, FormulaRule(
            formula=[f"AND({both},{p}{first}>{s}{first})"], fill=styles.BAD_FILL, font=styles.BAD_FONT))
        ws.conditional_formatting.add(area, FormulaRule(
            formula=[f"AND({both},{p}{first}<={s}{first})"], fill=styles.GOOD_FILL, font=styles.GOOD_FONT))


def _simulated_cells(v) -> dict:
    """The simulator's figures of one deployment (blank when not simulated: batch, speculative, or skipped)."""
    if v is None:
        return dict.fromkeys(SIMULATION_COLUMNS)
    low, high = (list(v.simulated_ci95_ms) + [None, None])[:2]
    return {"sim_metric": v.metric.removesuffix("_p99_ms").upper(), "sim_p99": v.simulated_ms, "sim_low": low,
            "sim_high": high, "sim_check": SIMULATOR_CHECK[v.outcome]}


def build_deployments(ctx: Ctx) -> None:
    """One row per (workload, configuration): replicas, load, capacity, p99s next to the SLOs."""
    sheet = ctx.sheets["Deployments"]
    title(sheet, "Deployments",
          "Each workload's chosen configurations. Predicted p99 latencies are green where they meet the "
          "SLO and red where they miss it; the cost share is the GPUs' share of their device's cost. The fidelity "
          "is that of the deployment's own device, engine and expert-parallel degree: the true capacity is "
          "predicted × a factor between the band's ends about 8 times in 10. The simulator re-checks each online "
          "deployment at its routed load: its p99 and 95 % interval, and whether it meets the SLO.")
    unused = _unused_metrics(ctx)
    if all(d.stage == "colocated" and not d.technique for d in ctx.result.deployments):
        unused |= set(TECHNIQUE_COLUMNS)
    if all(d.ep == 1 for d in ctx.result.deployments):  # shown only when some deployment is expert-parallel
        unused.add("ep")
    if not any(d.replicas_per_server for d in ctx.result.deployments):  # shown only when some deployment is spread
        unused.add("placement")
    if not any(d.engine for d in ctx.result.deployments):  # a capacity table, or a result written before engines
        unused.add("engine")
    if all(d.fidelity is None for d in ctx.result.deployments):
        unused |= set(FIDELITY_COLUMNS)
    if all(d.verification is None for d in ctx.result.deployments):
        unused |= set(SIMULATION_COLUMNS)
    columns = [c for c in DEPLOYMENT_COLUMNS if c[0] not in unused]
    col = {key: i for i, (key, _, _) in enumerate(columns, start=1)}
    ctx.deployment_cols = col
    L = {k: get_column_letter(c) for k, c in col.items()}  # noqa: N806 - column letters
    sheet.header(HEADER_ROW, 1, [h for _, h, _ in columns])
    slos = {w.name: w for w in ctx.result.workloads}
    fleet = ctx.sheets["Fleet"].ws
    fcol = ctx.fleet_cols
    fleet_by_device = {f.device: f for f in ctx.result.fleet}
    row = FIRST_ROW
    for d in ctx.result.deployments:
        r = str(row)
        w = slos.get(d.workload)
        gpus = d.gpus
        ep_factor = f"*{L['ep']}{r}" if "ep" in L else ""
        cells = {
            "workload": d.workload, "device": d.device, "precision": d.precision or "",
            "tp": d.tp, "pp": d.pp, "ep": d.ep, "replicas": d.replicas,
            "placement": (f"at most {d.replicas_per_server} per server, on {d.dedicated_servers} servers of their own"
                          if d.replicas_per_server else ""),
            "gpus": Formula(f"={L['replicas']}{r}*{L['tp']}{r}*{L['pp']}{r}{ep_factor}", gpus),
            "qps": d.qps, "capacity": d.capacity_qps,
            "load": (Formula(f"=IF({L['capacity']}{r}>0,{L['qps']}{r}/{L['capacity']}{r},0)",
                             d.qps / d.capacity_qps) if d.capacity_qps else None),
            "ttft": d.ttft_p99_ms, "tpot": d.tpot_p99_ms, "e2e": d.e2e_p99_ms,
            "slo_ttft": w.slo_ttft_p99_ms if w else None,
            "slo_tpot": w.slo_tpot_p99_ms if w else None,
            "slo_e2e": w.slo_e2e_p99_ms if w else None,
            "cost": None, "key": d.key,
            "stage": d.stage, "technique": d.technique or "", "kv_link": d.kv_link_gb_s,
            "pair_link": d.pair_link_gb_s, "engine": d.engine,
            "fidelity": d.fidelity.class_ if d.fidelity else "",
            "band_low": d.fidelity.low_factor if d.fidelity else None,
            "band_high": d.fidelity.high_factor if d.fidelity else None,
            "fidelity_basis": d.fidelity.basis if d.fidelity else "",
            **_simulated_cells(d.verification),
        }
        frow = ctx.fleet_row.get(d.device)
        if frow is not None:
            fgpus = ref(fleet, frow, fcol["gpus"])
            ftotal = ref(fleet, frow, fcol["total"])
            share = gpus / max(fleet_by_device[d.device].gpus, 1) * ctx.fleet_cost_usd[d.device]
            cells["cost"] = Formula(f"=IF({fgpus}>0,{L['gpus']}{r}/{fgpus}*{ftotal},0)", share)
            ctx.deployment_cost_usd.append(share)
        else:
            ctx.deployment_cost_usd.append(0.0)
            ctx.notes.append(f"deployment {d.workload}/{d.key}: device {d.device} is not in the fleet; "
                             "its cost share is left blank")
        for key, _, fmt in columns:
            missed = key == "sim_check" and d.verification is not None and d.verification.outcome == "missed"
            sheet.put(row, col[key], cells[key], fmt or None, align="left" if key == "key" else None,
                      wrap=key == "fidelity_basis" and bool(cells[key]),
                      font=styles.BAD_FONT if missed else None, fill=styles.BAD_FILL if missed else None)
        ctx.deployment_rows.append(row)
        row += 1
    last = row - 1
    if sheet.table("DeploymentsTable", HEADER_ROW, 1, last, len(columns)) is not None:
        _slo_rules(sheet.ws, [(col[m], col[f"slo_{m}"]) for m in ("ttft", "tpot", "e2e") if m in col],
                   FIRST_ROW, last)
    else:
        sheet.put(FIRST_ROW, 1, f"No deployments: plan status is {ctx.result.status}.", font=styles.NOTE_FONT)
    if "fidelity_basis" in col:
        sheet.width(col["fidelity_basis"], BASIS_WIDTH_CHARS, cap=True)
    sheet.ws.freeze_panes = sheet.ws.cell(row=FIRST_ROW, column=2)
    sheet.finish(title_rows=f"{HEADER_ROW}:{HEADER_ROW}")


def build_workloads(ctx: Ctx) -> None:
    """One row per workload: volume, p99s against SLOs, GPUs, cost and cost per million tokens."""
    sheet = ctx.sheets["Workloads"]
    title(sheet, "Workloads",
          "What must be served, whether the plan meets its SLOs, and what each workload costs over the "
          "horizon (its GPUs' share of the fleet cost).")
    unused = _unused_metrics(ctx)
    columns = [c for c in WORKLOAD_COLUMNS if c[0] not in unused]
    col = {key: i for i, (key, _, _) in enumerate(columns, start=1)}
    ctx.workload_cols = col
    L = {k: get_column_letter(c) for k, c in col.items()}  # noqa: N806 - column letters
    sheet.header(HEADER_ROW, 1, [h for _, h, _ in columns])
    dep_ws = ctx.sheets["Deployments"].ws
    dcol = ctx.deployment_cols
    row = FIRST_ROW
    for w in ctx.result.workloads:
        r = str(row)
        mine = [drow for drow, d in zip(ctx.deployment_rows, ctx.result.deployments, strict=True)
                if d.workload == w.name]
        gpus = sum(d.gpus for d in ctx.result.deployments if d.workload == w.name)
        gpu_refs = "+".join(ref(dep_ws, drow, dcol["gpus"], absolute=False) for drow in mine) or "0"
        cost_refs = "+".join(ref(dep_ws, drow, dcol["cost"], absolute=False) for drow in mine) or "0"
        met = "yes" if w.met else ("no" if w.met is not None else "n/a")
        cells = {
            "name": w.name, "model": w.model, "kind": w.kind, "qps": w.qps,
            "out": w.output_tokens_per_year, "in": w.input_tokens_per_year,
            "ttft": w.ttft_p99_ms, "slo_ttft": w.slo_ttft_p99_ms, "tpot": w.tpot_p99_ms,
            "slo_tpot": w.slo_tpot_p99_ms, "e2e": w.e2e_p99_ms, "slo_e2e": w.slo_e2e_p99_ms,
            "met": met,
            "gpus": Formula(f"={gpu_refs}", gpus),
            "cost": Formula(f"={cost_refs}", sum(c for c, d in zip(ctx.deployment_cost_usd, ctx.result.deployments,
                                                                   strict=True) if d.workload == w.name)),
            "per_m": Formula(f"=IF({L['out']}{r}>0,{L['cost']}{r}/(horizon_years*{L['out']}{r}/1000000),0)",
                             w.cost_per_million_output_tokens_usd),
        }
        for key, _, fmt in columns:
            sheet.put(row, col[key], cells[key], fmt or None)
        row += 1
    last = max(row - 1, FIRST_ROW)
    has_rows = sheet.table("WorkloadsTable", HEADER_ROW, 1, row - 1, len(columns)) is not None
    ctx.workload_total_row = row
    sheet.put(row, 1, "Total", font=styles.BOLD, fill=styles.TOTAL_FILL)
    for key, _, fmt in columns[1:]:
        value = None
        if key in ("out", "in", "gpus", "cost"):
            value = Formula(f"=SUM({L[key]}{FIRST_ROW}:{L[key]}{last})")
        elif key == "per_m":
            value = Formula(f"=IF({L['out']}{row}>0,{L['cost']}{row}/(horizon_years*{L['out']}{row}/1000000),0)",
                            ctx.result.cost_per_million_output_tokens_usd)
        elif key == "met":
            met = sum(1 for w in ctx.result.workloads if w.met)
            value = f"{met} of {len(ctx.result.workloads)}"
        sheet.put(row, col[key], value, fmt or None, font=styles.BOLD, fill=styles.TOTAL_FILL)
    if has_rows:
        _slo_rules(sheet.ws, [(col[m], col[f"slo_{m}"]) for m in ("ttft", "tpot", "e2e") if m in col],
                   FIRST_ROW, row - 1)
        m = f"{L['met']}{FIRST_ROW}"
        area = f"{m}:{L['met']}{row - 1}"
        sheet.ws.conditional_formatting.add(area, FormulaRule(
            formula=[f'{m}="no"'], fill=styles.BAD_FILL, font=styles.BAD_FONT))
        sheet.ws.conditional_formatting.add(area, FormulaRule(
            formula=[f'{m}="yes"'], fill=styles.GOOD_FILL, font=styles.GOOD_FONT))
    sheet.ws.freeze_panes = sheet.ws.cell(row=FIRST_ROW, column=2)
    sheet.finish(title_rows=f"{HEADER_ROW}:{HEADER_ROW}")


def _allowed(c) -> bool:
    """A candidate of a device the plan allows (pruned for not being allowed = not shown)."""
    return "allowed_devices" not in (c.pruned_reason or "")


def build_candidates(ctx: Ctx) -> None:
    """The configurations the optimizer could choose (allowed devices, not pruned), cheapest first per workload.

    Pruned configurations and those of devices the plan does not allow stay in the JSON
    (``candidates[]``); a line below the table counts them.
    """
    sheet = ctx.sheets["Candidates"]
    title(sheet, "Candidates",
          "The configurations the optimizer could choose for each workload, cheapest per req/s first: capacity "
          "at the SLO and cost at catalog prices under the objective.")
    sheet.header(HEADER_ROW, 1, [h for h, _ in CANDIDATE_COLUMNS])
    chosen = {(d.workload, d.key) for d in ctx.result.deployments}
    order = {w.name: i for i, w in enumerate(ctx.result.workloads)}
    shown = [c for c in ctx.result.candidates if _allowed(c) and not c.pruned_reason]
    shown.sort(key=lambda c: (order.get(c.workload, len(order)), c.workload,
                              c.cost_per_qps_usd if c.cost_per_qps_usd is not None else float("inf"), c.key))
    row = FIRST_ROW
    for c in shown:
        bucket = "" if c.bucket is None else str(c.bucket)
        values = [c.workload, bucket, c.key, c.device, c.precision or "", c.tp, c.pp, c.ep, c.engine,
                  c.gpus if c.gpus is not None else c.tp * c.pp * c.ep, c.capacity_qps,
                  c.cost_per_replica_usd, c.cost_per_qps_usd, c.limited_by or "",
                  "yes" if (c.workload, c.key) in chosen else "", c.pruned_reason or ""]
        for i, ((_, fmt), v) in enumerate(zip(CANDIDATE_COLUMNS, values, strict=True), start=1):
            last_col = i == len(CANDIDATE_COLUMNS)  # the reason: wrapped, so it never widens the page
            sheet.put(row, i, v, fmt or None, wrap=last_col and bool(v))
        row += 1
    if sheet.table("CandidatesTable", HEADER_ROW, 1, row - 1, len(CANDIDATE_COLUMNS)) is None:
        sheet.put(FIRST_ROW, 1, "The plan result lists no candidates the optimizer could choose.",
                  font=styles.NOTE_FONT)
    pruned = sum(1 for c in ctx.result.candidates if _allowed(c) and c.pruned_reason)
    excluded = sum(1 for c in ctx.result.candidates if not _allowed(c))
    sheet.put(row + 1, 1, f"Not shown: {pruned:,} configurations pruned (with the reason) and {excluded:,} of devices "
              "the plan does not allow; all are in the plan JSON under candidates[].", font=styles.NOTE_FONT,
              size=False)
    sheet.width(len(CANDIDATE_COLUMNS), 30, cap=True)
    sheet.ws.freeze_panes = sheet.ws.cell(row=FIRST_ROW, column=2)
    sheet.finish(title_rows=f"{HEADER_ROW}:{HEADER_ROW}")
