"""The Summary sheet: the answer on one page, every money figure a formula, two charts."""

from __future__ import annotations

from openpyxl.chart import BarChart, LineChart, Reference

from reports import styles
from reports.context import FIRST_ROW, HEADER_ROW, Ctx, title
from reports.xl import Formula, define_name, ref

_BASIS = {"tco": "buy and run", "capex": "buy (capex objective)", "cloud": "rent by the GPU-hour"}


def _n(count: int, noun: str) -> str:
    """``1 year``, ``3 years``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def build_summary(ctx: Ctx) -> None:
    """Key figures (named cells), status, single-device and API comparisons, charts."""
    sheet = ctx.sheets["Summary"]
    r = ctx.result
    a = r.assumptions
    fleet = ctx.sheets["Fleet"].ws
    fc, ft = ctx.fleet_cols, ctx.fleet_total_row
    wl = ctx.sheets["Workloads"].ws
    wc, wt = ctx.workload_cols, ctx.workload_total_row
    name = r.plan_name or "plan"
    title(sheet, f"{name}: fleet plan",
          f"Status {r.status}. Fleet priced to {_BASIS[r.objective]} over {_n(a.horizon_years, 'year')}. "
          "Every money figure is a live formula over the Assumptions sheet.")
    sheet.header(HEADER_ROW, 1, ["Figure", "Value", "Unit", "How it is computed"])
    row = FIRST_ROW

    def line(label: str, value, unit: str, fmt: str | None, note: str = "", name: str | None = None,
             bold: bool = False) -> int:
        nonlocal row
        font = styles.BOLD if bold else None
        sheet.put(row, 1, label, font=font)
        sheet.put(row, 2, value, fmt, font=font, align="right")
        sheet.put(row, 3, unit, align="left")
        sheet.put(row, 4, note, font=styles.NOTE_FONT, size=False)
        if name:
            define_name(ctx.wb, name, sheet.ws, row, 2)
        row += 1
        return row - 1

    line("Total cost of ownership", Formula("=capex_usd+horizon_years*annual_opex_usd", r.tco_usd),
         "$ over horizon", styles.USD, "capex + horizon × annual opex", "tco_usd", bold=True)
    line("Net present value of costs",
         Formula("=capex_usd+IF(discount_rate=0,horizon_years*annual_opex_usd,"
                 "annual_opex_usd*(1-(1+discount_rate)^(-horizon_years))/discount_rate)", r.npv_usd),
         "$ over horizon", styles.USD, "capex + each year's opex discounted at the discount rate", "npv_usd")
    line("Capex", Formula(f"={ref(fleet, ft, fc['capex'])}", r.capex_usd), "$", styles.USD,
         "GPUs × purchase price + servers × server overhead (Fleet)", "capex_usd")
    line("Annual opex", Formula("=annual_power_usd+annual_maintenance_usd+annual_cloud_usd", r.annual_opex_usd),
         "$ per year", styles.USD, "power + maintenance + cloud rental", "annual_opex_usd")
    line("   Power", Formula(f"={ref(fleet, ft, fc['power'])}", r.annual_power_usd), "$ per year", styles.USD,
         "IT kW × average draw × PUE × hours × electricity price", "annual_power_usd")
    line("   Maintenance", Formula(f"={ref(fleet, ft, fc['maint'])}", r.annual_maintenance_usd), "$ per year",
         styles.USD, "capex × maintenance fraction", "annual_maintenance_usd")
    line("   Cloud rental", Formula(f"={ref(fleet, ft, fc['cloud'])}", r.annual_cloud_usd), "$ per year",
         styles.USD, "GPUs × $ per GPU-hour × hours (only when renting)", "annual_cloud_usd")
    line(f"Objective ({r.objective})",
         Formula('=IF(objective="capex",capex_usd,IF(objective="cloud",horizon_years*annual_cloud_usd,tco_usd))',
                 r.objective_usd), "$", styles.USD, "what the optimizer minimised", "objective_usd")
    line("Output tokens", Formula(f"={ref(wl, wt, wc['out'])}", r.output_tokens_per_year), "per year",
         styles.THOUSANDS, "sum over workloads", "output_tokens_per_year")
    line("Input tokens", Formula(f"={ref(wl, wt, wc['in'])}", sum(w.input_tokens_per_year for w in r.workloads)), "per year",
         styles.THOUSANDS, "sum over workloads", "input_tokens_per_year")
    line("Cost per million output tokens",
         Formula("=IF(output_tokens_per_year>0,tco_usd/(horizon_years*output_tokens_per_year/1000000),0)",
                 r.cost_per_million_output_tokens_usd),
         "$", styles.USD_CENTS, "TCO / output tokens over the horizon", "cost_per_million_output_tokens_usd",
         bold=True)
    line("GPUs", Formula(f"={ref(fleet, ft, fc['gpus'])}", r.gpus_total), "GPUs", styles.THOUSANDS,
         "see Fleet", "gpus_total")
    line("Servers", Formula(f"={ref(fleet, ft, fc['nodes'])}", r.nodes_total), "servers", styles.THOUSANDS,
         "see Fleet", "nodes_total")
    line("IT power", Formula(f"={ref(fleet, ft, fc['kw'])}", r.power_kw), "kW", styles.DEC1,
         "nameplate: GPUs' TDP + server power", "power_kw")
    line("Status", r.status, "", None, r.status_detail)
    met = sum(1 for w in r.workloads if w.met)
    missed = [w.name for w in r.workloads if w.met is False]
    line("SLOs met", f"{met} of {_n(len(r.workloads), 'workload')}", "", None,
         ("missed: " + ", ".join(missed)) if missed else "see Deployments and Workloads")

    best = r.single_device_best
    if best is not None:
        best_row = line(f"Best single-device fleet: all {best.device}, {best.gpus:,} GPUs", best.objective_usd,
                        "$", styles.USD, f"the optimizer's objective ({r.objective}) for that fleet at catalog prices")
        saving = line("Saving from mixing device types", Formula(f"=B{best_row}-objective_usd"), "$", styles.USD,
                      "best single-device fleet − this plan")
        line("Saving from mixing device types (%)", Formula(f"=IF(B{best_row}<>0,B{saving}/B{best_row},0)"),
             "%", styles.PCT, "of the best single-device fleet's objective")
    else:
        line("Best single-device fleet", "none", "", None, "no single device type can serve every workload")

    if ctx.has_api:
        row += 1
        sheet.put(row, 1, "Buy or rent vs. a hosted API", font=styles.SECTION_FONT, size=False)
        row += 1
        line("API price", Formula("=api_usd_per_million_output_tokens"), "$ per million output tokens",
             styles.USD_CENTS, "Assumptions (input tokens at api_usd_per_million_input_tokens)")
        line("Same volume through the API",
             Formula("=horizon_years*(output_tokens_per_year*api_usd_per_million_output_tokens"
                     "+input_tokens_per_year*api_usd_per_million_input_tokens)/1000000"),
             "$ over horizon", styles.USD, "horizon × (output + input tokens per year) × API prices",
             "api_cost_usd")
        line("Saving of this fleet vs. the API", Formula("=api_cost_usd-tco_usd"), "$ over horizon", styles.USD,
             "negative: the API is cheaper at this volume", bold=True)
        be = line("Break-even volume", Formula("=IF(api_cost_usd>0,tco_usd/api_cost_usd*output_tokens_per_year,0)"),
                  "output tokens per year", styles.THOUSANDS,
                  "below this volume the API costs less than this fleet (fleet cost held fixed)",
                  "break_even_output_tokens_per_year")
        line("Break-even as share of planned volume",
             Formula(f"=IF(output_tokens_per_year>0,B{be}/output_tokens_per_year,0)"), "%", styles.PCT,
             "break-even volume / planned output tokens")
    last = row - 1
    sheet.width(1, 44)
    sheet.width(4, 58)
    sheet.ws.freeze_panes = sheet.ws.cell(row=FIRST_ROW, column=1)
    _charts(ctx, last)
    sheet.finish(title_rows=f"{HEADER_ROW}:{HEADER_ROW}")


def _charts(ctx: Ctx, last_row: int) -> None:
    """Cost by device (stacked capex + opex over the horizon) and cumulative cost by year."""
    ws = ctx.sheets["Summary"].ws
    fleet = ctx.sheets["Fleet"].ws
    fc = ctx.fleet_cols
    n = len(ctx.result.fleet)
    anchor_row = last_row + 3
    if n:
        bar = BarChart()
        bar.type = "col"
        bar.grouping = "stacked"
        bar.overlap = 100
        bar.title = "Cost over the horizon by device"
        bar.y_axis.title = "$"
        bar.y_axis.numFmt = styles.USD
        bar.y_axis.majorGridlines = None
        first, last = FIRST_ROW, FIRST_ROW + n - 1
        for key in ("capex", "opex_h"):
            data = Reference(fleet, min_col=fc[key], min_row=first - 1, max_row=last)
            bar.add_data(data, titles_from_data=True)
        bar.set_categories(Reference(fleet, min_col=fc["device"], min_row=first, max_row=last))
        bar.height, bar.width = 7.5, 13
        bar.y_axis.delete = False
        bar.x_axis.delete = False
        ws.add_chart(bar, f"A{anchor_row}")
    costs = ctx.sheets["Costs by year"].ws
    first, last = ctx.years_rows
    linec = LineChart()
    linec.title = "Cumulative cost by year"
    linec.y_axis.title = "$"
    linec.x_axis.title = "Year"
    linec.y_axis.numFmt = styles.USD
    for col in (7, 10):  # cumulative cost, cumulative present value
        linec.add_data(Reference(costs, min_col=col, min_row=first - 1, max_row=last), titles_from_data=True)
    linec.set_categories(Reference(costs, min_col=1, min_row=first, max_row=last))
    linec.height, linec.width = 7.5, 13
    linec.y_axis.delete = False
    linec.x_axis.delete = False
    ws.add_chart(linec, f"{'C' if n else 'A'}{anchor_row}")
