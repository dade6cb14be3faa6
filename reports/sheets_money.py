"""The Fleet (bill of materials) and Costs-by-year sheets: money as live formulas.

Per device d (docs/plan-json.md):
    GPU extended price  = GPUs × purchase_usd_d                     (0 when renting)
    server overhead     = servers × server_overhead_usd             (0 when renting)
    capex               = GPU extended price + server overhead
    IT power (kW)       = (GPUs × tdp_w_d + servers × server_power_w) / 1000
    power per year      = kW × power_utilization × pue × hours_per_year × electricity_usd_per_kwh
    maintenance / year  = capex × maintenance_fraction_per_year
    cloud rental / year = GPUs × cloud_usd_per_gpu_hour_d × hours_per_year   (renting only)
"""

from __future__ import annotations

from openpyxl.utils import get_column_letter

from reports import styles
from reports.context import FIRST_ROW, HEADER_ROW, Ctx, title
from reports.xl import Formula

FLEET_COLUMNS: list[tuple[str, str, str]] = [
    # key, header, number format
    ("device", "Device", ""),
    ("gpus", "GPUs", styles.THOUSANDS),
    ("gpus_per_node", "GPUs per server", styles.THOUSANDS),
    ("nodes", "Servers", styles.THOUSANDS),
    ("unit", "Unit price ($ per GPU)", styles.USD),
    ("extended", "GPU extended price ($)", styles.USD),
    ("overhead", "Server overhead ($)", styles.USD),
    ("capex", "Capex ($)", styles.USD),
    ("kw", "IT power (kW)", styles.DEC1),
    ("power", "Power per year ($)", styles.USD),
    ("maint", "Maintenance per year ($)", styles.USD),
    ("rate", "Cloud price ($ per GPU-hour)", styles.USD_RATE),
    ("cloud", "Cloud rental per year ($)", styles.USD),
    ("opex", "Opex per year ($)", styles.USD),
    ("opex_h", "Opex over horizon ($)", styles.USD),
    ("total", "Cost over horizon ($)", styles.USD),
]
_SUMMED = ("gpus", "nodes", "extended", "overhead", "capex", "kw", "power", "maint", "cloud",
           "opex", "opex_h", "total")


def build_fleet(ctx: Ctx) -> None:
    """One row per device with its money as formulas over Assumptions; a total row."""
    sheet = ctx.sheets["Fleet"]
    a = ctx.result.assumptions
    basis = "bought and run" if ctx.buy else "rented by the GPU-hour"
    title(sheet, "Fleet: bill of materials",
          f"Quantities are the optimizer's plan; prices and rates are formulas over Assumptions "
          f"(fleet {basis}, {a.horizon_years}-year horizon).")
    col = {key: i for i, (key, _, _) in enumerate(FLEET_COLUMNS, start=1)}
    ctx.fleet_cols = col
    sheet.header(HEADER_ROW, 1, [h for _, h, _ in FLEET_COLUMNS])
    L = {k: get_column_letter(c) for k, c in col.items()}  # noqa: N806 - column letters
    row = FIRST_ROW
    for f in ctx.result.fleet:
        s = ctx.device_slug[f.device]
        r = str(row)
        buy = ctx.buy
        purchase = f.purchase_usd or 0.0
        rate = f.cloud_usd_per_gpu_hour or 0.0
        ext = f.gpus * purchase if buy else 0.0
        ovh = f.nodes * a.server_overhead_usd if buy else 0.0
        capex = ext + ovh
        kw = (f.gpus * (f.tdp_w or 0.0) + f.nodes * a.server_power_w) / 1000
        power = kw * a.power_utilization * a.pue * a.hours_per_year * a.electricity_usd_per_kwh if buy else 0.0
        maint = capex * a.maintenance_fraction_per_year
        cloud = 0.0 if buy else f.gpus * rate * a.hours_per_year
        opex = power + maint + cloud
        cells = {
            "device": f.device,
            "gpus": f.gpus,
            "gpus_per_node": f.gpus_per_node,
            "nodes": f.nodes,
            "unit": Formula(f"=purchase_usd_{s}", purchase),
            "extended": Formula(f'=IF(objective="cloud",0,{L["gpus"]}{r}*{L["unit"]}{r})', ext),
            "overhead": Formula(f'=IF(objective="cloud",0,{L["nodes"]}{r}*server_overhead_usd)', ovh),
            "capex": Formula(f"={L['extended']}{r}+{L['overhead']}{r}", capex),
            "kw": Formula(f"=({L['gpus']}{r}*tdp_w_{s}+{L['nodes']}{r}*server_power_w)/1000", kw),
            "power": Formula(f'=IF(objective="cloud",0,{L["kw"]}{r}*power_utilization*pue*hours_per_year'
                             f"*electricity_usd_per_kwh)", power),
            "maint": Formula(f"={L['capex']}{r}*maintenance_fraction_per_year", maint),
            "rate": Formula(f"=cloud_usd_per_gpu_hour_{s}", rate),
            "cloud": Formula(f'=IF(objective="cloud",{L["gpus"]}{r}*{L["rate"]}{r}*hours_per_year,0)', cloud),
            "opex": Formula(f"={L['power']}{r}+{L['maint']}{r}+{L['cloud']}{r}", opex),
            "opex_h": Formula(f"={L['opex']}{r}*horizon_years", opex * a.horizon_years),
            "total": Formula(f"={L['capex']}{r}+{L['opex_h']}{r}", capex + opex * a.horizon_years),
        }
        for key, _header, fmt in FLEET_COLUMNS:
            sheet.put(row, col[key], cells[key], fmt or None)
        ctx.fleet_row[f.device] = row
        ctx.fleet_cost_usd[f.device] = capex + opex * a.horizon_years
        row += 1
    last = row - 1
    sheet.table("FleetTable", HEADER_ROW, 1, last, len(FLEET_COLUMNS))
    ctx.fleet_total_row = row
    sheet.put(row, 1, "Total", font=styles.BOLD, fill=styles.TOTAL_FILL)
    for key, _, fmt in FLEET_COLUMNS[1:]:
        c = col[key]
        value = Formula(f"=SUM({L[key]}{FIRST_ROW}:{L[key]}{max(last, FIRST_ROW)})") if key in _SUMMED else None
        sheet.put(row, c, value, fmt or None, font=styles.BOLD, fill=styles.TOTAL_FILL)
    if not ctx.result.fleet:
        sheet.put(FIRST_ROW, 2, f"No fleet: plan status is {ctx.result.status}.", font=styles.NOTE_FONT)
    sheet.ws.freeze_panes = sheet.ws.cell(row=FIRST_ROW, column=2)
    sheet.finish(title_rows=f"{HEADER_ROW}:{HEADER_ROW}")


COST_COLUMNS: list[tuple[str, str]] = [
    ("Year", styles.INT),
    ("Capex ($)", styles.USD),
    ("Power ($)", styles.USD),
    ("Maintenance ($)", styles.USD),
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
          "Year 0 is the purchase; each later year pays power, maintenance or rental. The last cumulative "
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
            parts = [Formula("=capex_usd", capex), 0, 0, 0]
            total = capex
        else:
            parts = [0,
                     Formula("=" + within.format("annual_power_usd"), r.annual_power_usd),
                     Formula("=" + within.format("annual_maintenance_usd"), r.annual_maintenance_usd),
                     Formula("=" + within.format("annual_cloud_usd"), r.annual_cloud_usd)]
            total = opex
        factor = 1 / (1 + a.discount_rate) ** year
        cum += total
        cum_pv += total * factor
        values = [year, *parts,
                  Formula(f"=SUM(B{row}:E{row})", total),
                  Formula(f"=F{row}" if year == 0 else f"=G{row - 1}+F{row}", cum),
                  Formula(f"=1/(1+discount_rate)^{y}", factor),
                  Formula(f"=F{row}*H{row}", total * factor),
                  Formula(f"=I{row}" if year == 0 else f"=J{row - 1}+I{row}", cum_pv)]
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
