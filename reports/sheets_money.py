"""The Fleet (bill of materials) and Costs-by-year sheets: money as live formulas.

Per device d on platform p (docs/plan-json.md); "bought" GPUs are the installed (or rented) ones, bought
in units of u GPUs ("GPUs per purchase"): on a fixed-size platform (HGX/OAM board, NVL72 rack), or a cloud
instance of a whole server, u = GPUs per server and GPUs bought = servers × u, idle ones included; otherwise
u = the cloud instance (cloud_gpus_per_instance, objective cloud) or 1 (cards one by one) and
GPUs bought = ROUNDUP(GPUs in use / u) × u:
    GPU extended price  = GPUs bought × purchase_usd_d                              (0 when renting)
    servers and network = servers × (server_usd_p + network_usd_per_server)         (0 when renting)
    capex               = GPU extended price + servers and network
    IT power (kW)       = (GPUs bought × tdp_w_d + servers × server_power_w_p) / 1000
    power per year      = kW × power_utilization × pue × hours_per_year × electricity_usd_per_kwh
    maintenance / year  = capex × maintenance_fraction_per_year
    colocation / year   = 12 × (colocation_usd_per_kw_month × kW
                                + colocation_usd_per_rack_month × servers × rack_units_p / rack_units_per_rack)
    cloud rental / year = GPUs bought × cloud_usd_per_gpu_hour_d × hours_per_year   (renting only)

Below the plan's fleet, the best single-device fleet (Summary's comparison) is costed by the
same formulas: its counts are values, its money follows every price on Assumptions.
"""

from __future__ import annotations

import math

from openpyxl.utils import get_column_letter

from catalog.errors import figure
from reports import styles
from reports.context import FIRST_ROW, HEADER_ROW, Ctx, title
from reports.result import FleetRow
from reports.xl import Formula

FLEET_COLUMNS: list[tuple[str, str, str]] = [
    # key, header, number format
    ("device", "Device", ""),
    ("product", "Product (server)", ""),
    ("gpus", "GPUs in use", styles.THOUSANDS),
    ("installed", "GPUs bought", styles.THOUSANDS),
    ("gpus_per_node", "GPUs per server", styles.THOUSANDS),
    ("unit_gpus", "GPUs per purchase (server or instance)", styles.THOUSANDS),
    ("nodes", "Servers", styles.THOUSANDS),
    ("idle", "Idle GPUs", ""),
    ("unit", "Unit price ($ per GPU)", styles.USD),
    ("extended", "GPU extended price ($)", styles.USD),
    ("server", "Server price ($ each)", styles.USD),
    ("overhead", "Servers and network ($)", styles.USD),
    ("capex", "Capex ($)", styles.USD),
    ("kw", "IT power (kW)", styles.DEC1),
    ("power", "Power per year ($)", styles.USD),
    ("maint", "Maintenance per year ($)", styles.USD),
    ("facility", "Colocation per year ($)", styles.USD),
    ("rate", "Cloud price ($ per GPU-hour)", styles.USD_RATE),
    ("cloud", "Cloud rental per year ($)", styles.USD),
    ("opex", "Opex per year ($)", styles.USD),
    ("opex_h", "Opex over horizon ($)", styles.USD),
    ("total", "Cost over horizon ($)", styles.USD),
]
_SUMMED = ("gpus", "installed", "nodes", "extended", "overhead", "capex", "kw", "power", "maint", "facility",
           "cloud", "opex", "opex_h", "total")


def idle_text(f: FleetRow) -> str:
    """``2 of 16 GPUs idle`` (paid for: a board is bought whole), or ``none``."""
    return f"{f.idle_gpus:,} of {f.installed:,} GPUs idle" if f.idle_gpus > 0 else "none"


def _row_cells(ctx: Ctx, f: FleetRow, row: int, L: dict[str, str]) -> tuple[dict, float]:  # noqa: N803
    """The Fleet row of one device: values for counts, formulas for money; and its cost over the horizon."""
    a = ctx.result.assumptions
    s = ctx.device_slug[f.device]
    server_usd, server_w, rack_u = ctx.server_names(f)
    r = str(row)
    buy = ctx.buy
    purchase = f.purchase_usd or 0.0
    rate = f.cloud_usd_per_gpu_hour or 0.0
    g = f.installed
    srv = a.server_overhead_usd if f.server_usd is None else f.server_usd
    srv_w = a.server_power_w if f.server_power_w is None else f.server_power_w
    ext = g * purchase if buy else 0.0
    ovh = f.nodes * (srv + a.network_usd_per_server) if buy else 0.0
    capex = ext + ovh
    kw = (g * (f.tdp_w or 0.0) + f.nodes * srv_w) / 1000
    power = kw * a.power_utilization * a.pue * a.hours_per_year * a.electricity_usd_per_kwh if buy else 0.0
    maint = capex * a.maintenance_fraction_per_year
    rack = f.rack_units if f.server_usd is not None else 0.0
    facility = 12 * (a.colocation_usd_per_kw_month * kw
                     + a.colocation_usd_per_rack_month * f.nodes * rack / a.rack_units_per_rack) if buy else 0.0
    cloud = 0.0 if buy else g * rate * a.hours_per_year
    opex = power + maint + facility + cloud
    unit_gpus = f.gpus_per_node if f.fixed_size else f.gpus_per_instance
    installed = (f"={L['nodes']}{r}*{L['unit_gpus']}{r}" if f.fixed_size
                 else f"=ROUNDUP({L['gpus']}{r}/{L['unit_gpus']}{r},0)*{L['unit_gpus']}{r}")
    cells = {
        "device": f.device,
        "product": f.platform_name or f.platform or "server",
        "gpus": f.gpus,
        "installed": Formula(installed, g),
        "gpus_per_node": f.gpus_per_node,
        "unit_gpus": unit_gpus,
        "nodes": f.nodes,
        "idle": idle_text(f),
        "unit": Formula(f"=purchase_usd_{s}", purchase),
        "extended": Formula(f'=IF(objective="cloud",0,{L["installed"]}{r}*{L["unit"]}{r})', ext),
        "server": Formula(f"={server_usd}", srv),
        "overhead": Formula(f'=IF(objective="cloud",0,{L["nodes"]}{r}*({L["server"]}{r}+network_usd_per_server))',
                            ovh),
        "capex": Formula(f"={L['extended']}{r}+{L['overhead']}{r}", capex),
        "kw": Formula(f"=({L['installed']}{r}*tdp_w_{s}+{L['nodes']}{r}*{server_w})/1000", kw),
        "power": Formula(f'=IF(objective="cloud",0,{L["kw"]}{r}*power_utilization*pue*hours_per_year'
                         f"*electricity_usd_per_kwh)", power),
        "maint": Formula(f"={L['capex']}{r}*maintenance_fraction_per_year", maint),
        "facility": Formula(f'=IF(objective="cloud",0,12*(colocation_usd_per_kw_month*{L["kw"]}{r}'
                            f"+colocation_usd_per_rack_month*{L['nodes']}{r}*{rack_u}/rack_units_per_rack))",
                            facility),
        "rate": Formula(f"=cloud_usd_per_gpu_hour_{s}", rate),
        "cloud": Formula(f'=IF(objective="cloud",{L["installed"]}{r}*{L["rate"]}{r}*hours_per_year,0)', cloud),
        "opex": Formula(f"={L['power']}{r}+{L['maint']}{r}+{L['facility']}{r}+{L['cloud']}{r}", opex),
        "opex_h": Formula(f"={L['opex']}{r}*horizon_years", opex * a.horizon_years),
        "total": Formula(f"={L['capex']}{r}+{L['opex_h']}{r}", capex + opex * a.horizon_years),
    }
    return cells, capex + opex * a.horizon_years


def _block(ctx: Ctx, rows: list[FleetRow], first: int, table: str | None) -> int:
    """Rows for ``rows`` from ``first``, then a total row; returns the total row."""
    sheet = ctx.sheets["Fleet"]
    col = ctx.fleet_cols
    L = {k: get_column_letter(c) for k, c in col.items()}  # noqa: N806 - column letters
    row = first
    for f in rows:
        cells, cost = _row_cells(ctx, f, row, L)
        for key, _header, fmt in FLEET_COLUMNS:
            sheet.put(row, col[key], cells[key], fmt or None, wrap=key in ("product", "idle"))
        if table is not None:
            ctx.fleet_row[f.device] = row
            ctx.fleet_cost_usd[f.device] = cost
            ctx.fleet_capex_usd[f.device] = cells["capex"].expect
        row += 1
    last = row - 1
    if table is not None:
        sheet.table(table, first - 1, 1, last, len(FLEET_COLUMNS))
    sheet.put(row, 1, "Total", font=styles.BOLD, fill=styles.TOTAL_FILL)
    for key, _, fmt in FLEET_COLUMNS[1:]:
        value = Formula(f"=SUM({L[key]}{first}:{L[key]}{max(last, first)})") if key in _SUMMED else None
        sheet.put(row, col[key], value, fmt or None, font=styles.BOLD, fill=styles.TOTAL_FILL)
    return row


def _check_totals(ctx: Ctx) -> None:
    """A note (Method sheet, and ``gpuplan report`` prints it) for each of the result's capex_usd and tco_usd that its
    fleet rows and assumptions do not give: every figure of the workbook is a formula over the rows, so a hand-edited
    or inconsistent JSON would otherwise give a workbook whose totals silently differ from the file's."""
    r = ctx.result
    if not r.fleet:
        return
    capex, tco = sum(ctx.fleet_capex_usd.values()), sum(ctx.fleet_cost_usd.values())
    # objective_usd: the capex under objective capex, else the TCO (a cloud fleet's TCO is its rent: no capex, no
    # power of its own); an edited objective_usd of -5 was printed on the Summary without a word
    for key, rows_usd in (("capex_usd", capex), ("tco_usd", tco),
                          ("objective_usd", capex if r.objective == "capex" else tco)):
        stated = getattr(r, key)
        if stated is not None and not math.isclose(stated, rows_usd, rel_tol=1e-6, abs_tol=0.01):
            # figure(): a capex of 1.7e308 was printed as its 309 digits
            ctx.notes.append(f"the plan result's {key} (${figure(stated)}) is not what its fleet rows and assumptions "
                             f"give (${figure(rows_usd)}); this workbook's formulas use the rows (a hand-edited file, or one "
                             "from another gpuplan version?)")


def _check_loads(ctx: Ctx) -> None:
    """A note for each deployment routed more than its capacity_qps or load on no replica, and each workload
    whose deployments do not carry its qps (colocated + decode: every request passes one of them), as
    ``check_plan`` would say of the solver's own result: a hand-edited file showed an overloaded fleet without a word."""
    r = ctx.result
    if r.status not in ("optimal", "feasible"):  # no plan: nothing is routed
        return
    for d in r.deployments:
        if d.qps > 1e-9 and d.replicas == 0:
            ctx.notes.append(f"deployment {d.workload}/{d.key}: {d.qps:.6g} req/s routed to 0 replicas; the fleet "
                             "does not carry it (a hand-edited file?)")
        elif d.capacity_qps is not None and d.qps > d.capacity_qps * (1 + 1e-6):
            ctx.notes.append(f"deployment {d.workload}/{d.key}: {d.qps:.6g} req/s routed to a capacity of "
                             f"{d.capacity_qps:.6g} req/s; the fleet does not carry it (a hand-edited file?)")
    for w in r.workloads:
        served = sum(d.qps for d in r.deployments if d.workload == w.name and d.stage != "prefill")
        if not math.isclose(served, w.qps, rel_tol=1e-6, abs_tol=1e-9):
            ctx.notes.append(f"workload {w.name}: its deployments carry {served:.6g} req/s of its {w.qps:.6g} "
                             "(a hand-edited file?)")


def build_fleet(ctx: Ctx) -> None:
    """One row per device with its money as formulas over Assumptions; a total row; the comparison fleet."""
    sheet = ctx.sheets["Fleet"]
    a = ctx.result.assumptions
    basis = "bought and run" if ctx.buy else "rented by the GPU-hour"
    title(sheet, "Fleet: bill of materials",
          f"Quantities are the optimizer's plan; prices and rates are formulas over Assumptions "
          f"(fleet {basis}, {a.horizon_years}-year horizon). Boards and racks are bought whole, and a cloud "
          f"rents whole instances (GPUs per purchase): idle GPUs are paid for.")
    ctx.fleet_cols = {key: i for i, (key, _, _) in enumerate(FLEET_COLUMNS, start=1)}
    sheet.header(HEADER_ROW, 1, [h for _, h, _ in FLEET_COLUMNS])
    ctx.fleet_total_row = _block(ctx, list(ctx.result.fleet), FIRST_ROW, "FleetTable")
    if not ctx.result.fleet:
        sheet.put(FIRST_ROW, 2, f"No fleet: plan status is {ctx.result.status}.", font=styles.NOTE_FONT)
    _check_totals(ctx)
    _check_loads(ctx)
    best = ctx.result.single_device_best
    if best is not None and best.fleet:
        row = ctx.fleet_total_row + 3
        sheet.put(row, 1, f"For comparison: the best single-device fleet (all {best.device})",
                  font=styles.SECTION_FONT, size=False)
        sheet.put(row + 1, 1, "Counts are the optimizer's; money is the same formulas over the same Assumptions, "
                  "so Summary's saving stays consistent when a price changes.", font=styles.NOTE_FONT, size=False)
        sheet.header(row + 2, 1, [h for _, h, _ in FLEET_COLUMNS])
        ctx.single_total_row = _block(ctx, list(best.fleet), row + 3, None)
    sheet.width(ctx.fleet_cols["product"], 22)
    sheet.width(ctx.fleet_cols["idle"], 12)
    sheet.ws.freeze_panes = sheet.ws.cell(row=FIRST_ROW, column=2)
    sheet.finish(title_rows=f"{HEADER_ROW}:{HEADER_ROW}")


COST_COLUMNS: list[tuple[str, str]] = [
    ("Year", styles.INT),
    ("Capex ($)", styles.USD),
    ("Power ($)", styles.USD),
    ("Maintenance ($)", styles.USD),
    ("Colocation ($)", styles.USD),
    ("Cloud rental ($)", styles.USD),
    ("Total ($)", styles.USD),
    ("Cumulative cost ($)", styles.USD),
    ("Discount factor", "0.0000"),
    ("Present value ($)", styles.USD),
    ("Cumulative present value ($)", styles.USD),
]


def build_costs(ctx: Ctx) -> None:
    """Year 0 = capex; years 1..horizon = opex by formula; cumulative cost and present value."""
    sheet = ctx.sheets["Costs by year"]
    a = ctx.result.assumptions
    r = ctx.result
    title(sheet, "Costs by year",
          "Year 0 is the purchase; each later year pays power, maintenance, colocation or rental. The last cumulative "
          "figures are the TCO and the NPV on Summary.")
    sheet.header(HEADER_ROW, 1, [h for h, _ in COST_COLUMNS])
    horizon = a.horizon_years
    capex = r.capex_usd or 0.0
    opex = r.annual_opex_usd or 0.0
    cum = cum_pv = 0.0
    for year in range(horizon + 1):
        row = FIRST_ROW + year
        y = f"A{row}"
        within = f"IF({y}<=horizon_years,{{}},0)"
        if year == 0:
            parts = [Formula("=capex_usd", capex), 0, 0, 0, 0]
            total = capex
        else:
            parts = [0,
                     Formula("=" + within.format("annual_power_usd"), r.annual_power_usd),
                     Formula("=" + within.format("annual_maintenance_usd"), r.annual_maintenance_usd),
                     Formula("=" + within.format("annual_facility_usd"), r.annual_facility_usd),
                     Formula("=" + within.format("annual_cloud_usd"), r.annual_cloud_usd)]
            total = opex
        factor = 1 / (1 + a.discount_rate) ** year
        cum += total
        cum_pv += total * factor
        values = [year, *parts,
                  Formula(f"=SUM(B{row}:F{row})", total),
                  Formula(f"=G{row}" if year == 0 else f"=H{row - 1}+G{row}", cum),
                  Formula(f"=1/(1+discount_rate)^{y}", factor),
                  Formula(f"=G{row}*I{row}", total * factor),
                  Formula(f"=J{row}" if year == 0 else f"=K{row - 1}+J{row}", cum_pv)]
        for c, ((_, fmt), v) in enumerate(zip(COST_COLUMNS, values, strict=True), start=1):
            sheet.put(row, c, v, fmt)
    last = FIRST_ROW + horizon
    ctx.years_rows = (FIRST_ROW, last)
    sheet.table("CostsByYearTable", HEADER_ROW, 1, last, len(COST_COLUMNS))
    sheet.put(last + 2, 1, f"Rows cover the plan's {horizon}-year horizon. A shorter horizon on Assumptions "
              "zeroes the later years; for a longer one run `gpuplan report` again (Summary's TCO and NPV "
              "follow the horizon either way).", font=styles.NOTE_FONT, size=False)
    sheet.ws.freeze_panes = sheet.ws.cell(row=FIRST_ROW, column=2)
    sheet.finish(title_rows=f"{HEADER_ROW}:{HEADER_ROW}")
