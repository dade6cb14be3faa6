"""The Summary sheet: the answer in words first, then the key figures (named cells), two charts.

The first lines say, in sentences a finance reader can act on, what to buy (product names),
what it costs (capex, TCO, per month), how much of the budget it uses, how it compares with
the best one-device fleet and with a hosted API, and the risks — each line with the cell that drives it.
Every money figure in those sentences is a formula (``TEXT(capex_usd, ...)``), so an edit on
Assumptions rewrites them; counts (GPUs, servers) are the optimizer's and stay.

The best one-device fleet is costed on the Fleet sheet by the same formulas as the plan
(``one_device_usd``); the Sensitivity sheet's runner-up (a re-solve without the main device) is
a different figure.
"""

from __future__ import annotations

import textwrap

from openpyxl.chart import BarChart, LineChart, Reference
from openpyxl.utils import get_column_letter

from optimizer.planning.safeguards import TABLE_FIDELITY
from reports import styles
from reports.context import FIRST_ROW, HEADER_ROW, Ctx, title
from reports.result import FleetRow
from reports.xl import Formula, define_name, ref

_BASIS = {"tco": "buy and run", "capex": "buy (capex objective)", "cloud": "rent by the GPU-hour"}
MONEY = '"$#,##0"'  # TEXT() format of money inside sentences
PCT_TEXT = '"0.0%"'
# Columns A..D (44 + value + unit + 58 character widths) hold a sentence before the "Driven by" column cuts it:
# a longer one continues on the next row (no merged cells, so the sheet still sorts and copies as a grid).
WORDS_WIDTH_CHARS = 125


def _word_rows(text: str) -> list[str]:
    """A sentence of the answer in words as the rows it fills, broken between words."""
    return textwrap.wrap(text, WORDS_WIDTH_CHARS, break_long_words=False) or [""]


def _n(count: int, noun: str) -> str:
    """``1 year``, ``3 years``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _money(x: float | None) -> str:
    return f"${x:,.0f}" if x is not None else "$0"


def order_text(fleet: list[FleetRow], rent: bool = False) -> str:
    """``2 × NVIDIA HGX H100/H200 8-GPU server with 16 × NVIDIA H100 SXM5 80GB (h100-sxm)`` for each device."""
    parts = []
    for f in fleet:
        product = f.platform_name or f"server of {f.gpus_per_node} GPUs"
        device = f"{f.device_name} ({f.device})" if f.device_name else f.device
        idle = f", {f.idle_gpus} of them idle" if f.idle_gpus > 0 else ""
        if rent and f.gpus_per_instance > 1 and not f.fixed_size:
            parts.append(f"{f.installed:,} × {device} in cloud instances of {f.gpus_per_instance} GPUs{idle}")
        else:
            parts.append(f"{f.nodes:,} × {product} with {f.installed:,} × {device}{idle}")
    verb = "Rent" if rent else "Buy"
    return f"{verb} " + "; ".join(parts) + "." if parts else "Nothing to buy: the plan has no fleet."


def _simulator_check(r) -> tuple[str, str, None, str]:
    """(value, unit, format, note) of the Summary's simulator line: how many simulated deployments met their
    SLO, sat at it within the simulation's noise, or missed it beyond that noise."""
    outcomes = [d.verification.outcome for d in r.deployments if d.verification is not None]
    if not outcomes and r.deployments and all(d.fidelity is not None and d.fidelity.basis == TABLE_FIDELITY.basis
                                              for d in r.deployments):
        return ("not simulated", "", None, "capacities from the user's capacity table (--capacity-table), "
                "taken as measured at the SLO: no p99 is predicted or simulated")
    if not outcomes:
        return ("not simulated", "", None, "the p99s are the analytic model's alone (batch or speculative "
                "deployments, or --no-verify / more deployments than the default check covers)")
    n = _n(len(outcomes), "deployment")
    at_slo, missed = outcomes.count("at_slo"), outcomes.count("missed")
    value = (f"{missed} of {n} missed" if missed else f"{at_slo} of {n} at the SLO" if at_slo
             else f"every SLO met ({n})")
    note = ("the discrete-event simulator's p99 at each deployment's routed load (see Deployments)"
            + (f"; {at_slo} over the SLO within the simulation's noise, not re-sized" if at_slo else "")
            + (f"; {missed} over it beyond that noise" if missed else ""))
    return value, "", None, note


def build_summary(ctx: Ctx) -> None:
    """The answer in words, key figures (named cells), status, comparisons, finance, charts."""
    sheet = ctx.sheets["Summary"]
    r = ctx.result
    a = r.assumptions
    name = r.plan_name or "plan"
    title(sheet, f"{name}: what to buy and what it costs",
          f"Status {r.status}. Fleet priced to {_BASIS[r.objective]} over {_n(a.horizon_years, 'year')}. "
          "Every money figure is a live formula over the Assumptions sheet.")
    words_first = HEADER_ROW
    n_words = _word_lines_count(ctx)
    figures_header = words_first + n_words + 3
    _figures(ctx, figures_header)
    _words(ctx, words_first)
    sheet.width(1, 44)
    sheet.width(4, 58)
    sheet.width(5, 34)
    sheet.ws.freeze_panes = sheet.ws.cell(row=HEADER_ROW + 1, column=1)
    sheet.finish()  # no repeated header: page 2 continues the key figures


# ----------------------------------------------------------------------------- words


def _risks(ctx: Ctx) -> list[tuple[str, str]]:
    """(sentence, driving cell) for each risk: errors (an infeasible plan's reasons: the workload no configuration
    serves, the binding limit and its smallest feasible value), estimated prices, idle GPUs, least headroom,
    warnings."""
    r = ctx.result
    out: list[tuple[str, str]] = [(f"Error: {diag.message}", "Method") for diag in r.diagnostics
                                  if diag.level == "error"][:8]
    wanted = "purchase_usd" if ctx.buy else "cloud_usd_per_gpu_hour"
    fleet_devices = [f.device for f in r.fleet]
    estimated = sorted({s.device for s in r.sources if s.estimated and s.field == wanted and s.device in fleet_devices})
    if estimated:
        cells = ", ".join(ctx.cells.get(f"purchase_usd:{d}", "Assumptions") for d in estimated)
        out.append((f"Estimated price, not a quote: {', '.join(estimated)}. Ask for quotes before ordering.", cells))
    platform_of = {f.device: f.platform for f in r.fleet if f.platform and f.server_usd is not None}
    est_servers = sorted({platform_of[s.device] for s in r.sources
                          if s.estimated and s.field == "server_usd" and s.device in platform_of})
    if ctx.buy and est_servers:
        cells = ", ".join(ctx.cells.get(f"server_usd:{p}", "Assumptions") for p in est_servers)
        out.append((f"Server prices (everything but the GPUs) are estimates, vendors publish none: "
                    f"{', '.join(est_servers)}.", cells))
    for f in r.fleet:
        if f.idle_gpus > 0:
            row = ctx.fleet_row.get(f.device)
            why = ("boards are sold whole" if f.fixed_size
                   else f"the cloud rents instances of {f.gpus_per_instance} GPUs")
            idle = get_column_letter(ctx.fleet_cols["idle"])
            out.append((f"{f.idle_gpus} of {f.installed} {f.device} GPUs idle: {why}, so they are "
                        "paid for (spare capacity).", f"Fleet!{idle}{row}" if row else "Fleet"))
    loads = [(d.qps / d.capacity_qps, i, d) for i, d in enumerate(r.deployments) if d.capacity_qps]
    if loads:
        share, i, d = max(loads, key=lambda t: (t[0], -t[1]))
        col = ctx.deployment_cols.get("load")
        cell = f"Deployments!{get_column_letter(col)}{ctx.deployment_rows[i]}" if col and i < len(ctx.deployment_rows) else "Deployments"
        derated = r.headroom is not None and (r.headroom.confidence is not None or r.headroom.target_utilization < 1)
        out.append((f"Least headroom: {d.workload} on {d.device} runs at {share:.0%} of its SLO-safe capacity"
                    + (" as sized (already derated by the sizing policy in row 3)" if derated else "")
                    + "; growth beyond it needs more replicas.", cell))
    for diag in r.diagnostics:
        # an estimated price of the fleet has its own line above ("Estimated price, not a quote")
        if diag.level == "warning" and diag.code != "price_estimated" and len(out) < 8:
            out.append((f"Warning: {diag.message}", "Method"))
    if not out:
        out.append(("No errors, estimated prices, idle GPUs or warnings in this plan.", ""))
    return out


def _word_lines_count(ctx: Ctx) -> int:
    """Rows of the answer in words: seven fixed lines (the fleet one may continue), the API line, the risks."""
    order = len(_word_rows(order_text(list(ctx.result.fleet), rent=not ctx.buy)))
    risks = sum(len(_word_rows(text)) for text, _ in _risks(ctx))
    return 6 + order + (1 if ctx.has_api else 0) + risks


def _words(ctx: Ctx, header: int) -> None:
    """The recommendation in sentences (rows header+1 ..), each with the cell that drives it (column E)."""
    sheet = ctx.sheets["Summary"]
    r = ctx.result
    a = r.assumptions
    sheet.header(header, 1, ["The answer in words", "", "", "", "Driven by (cell)"])
    row = header + 1

    def say(text: str | Formula, driven: str, bold: bool = False) -> None:
        nonlocal row
        sheet.put(row, 5, driven, font=styles.NOTE_FONT, size=False)
        for line in _word_rows(text) if isinstance(text, str) else [text]:
            sheet.put(row, 1, line, font=styles.BOLD if bold else None, size=False)
            row += 1

    nodes = get_column_letter(ctx.fleet_cols["nodes"])
    fleet_cells = f"Fleet!A{FIRST_ROW}:{nodes}{max(ctx.fleet_total_row - 1, FIRST_ROW)}"
    say(order_text(list(r.fleet), rent=not ctx.buy), fleet_cells, bold=True)
    horizon = '&horizon_years&" years"'
    cost_expect = (f"It costs {_money(r.capex_usd)} up front (capex) and {_money(r.tco_usd)} over "
                   f"{_n(a.horizon_years, 'year')} (TCO), {_money((r.tco_usd or 0) / (a.horizon_years * 12))} per month.")
    say(Formula(f'="It costs "&TEXT(capex_usd,{MONEY})&" up front (capex) and "&TEXT(tco_usd,{MONEY})&" over "'
                f'{horizon}&" (TCO), "&TEXT(tco_usd/(horizon_years*12),{MONEY})&" per month."', cost_expect),
        f"{ctx.cells['capex_usd']}, {ctx.cells['tco_usd']}")
    if a.capex_budget_usd:
        used = (r.capex_usd or 0) / a.capex_budget_usd
        expect = (f"That uses {used:.1%} of the {_money(a.capex_budget_usd)} capex budget; "
                  f"{_money(a.capex_budget_usd - (r.capex_usd or 0))} is left.")
        say(Formula(f'="That uses "&TEXT(capex_usd/capex_budget_usd,{PCT_TEXT})&" of the "&TEXT(capex_budget_usd,'
                    f'{MONEY})&" capex budget; "&TEXT(capex_budget_usd-capex_usd,{MONEY})&" is left."', expect),
            f"{ctx.cells['capex_budget_usd']}, {ctx.cells['capex_usd']}")
    elif a.annual_budget_usd:
        used = (r.annual_opex_usd or 0) / a.annual_budget_usd
        expect = f"That uses {used:.1%} of the {_money(a.annual_budget_usd)} annual budget."
        say(Formula(f'="That uses "&TEXT(annual_opex_usd/annual_budget_usd,{PCT_TEXT})&" of the "&TEXT('
                    f'annual_budget_usd,{MONEY})&" annual budget; "&TEXT(annual_budget_usd-annual_opex_usd,{MONEY})'
                    '&" per year is left."', expect),
            f"{ctx.cells['annual_budget_usd']}, {ctx.cells['annual_opex_usd']}")
    else:
        say("No budget was set (plan field budget.capex_usd or budget.annual_usd): nothing to compare with.", "")
    best = r.single_device_best
    if best is not None and ctx.single_total_row:
        diff = best.objective_usd - (r.objective_usd or 0)
        label = ctx.cells["one_device_label"]  # a text cell: names never enter a formula
        expect = (f"Best one-device fleet: all {best.device} ({best.gpus_installed or best.gpus:,} GPUs) costs "
                  f"{_money(best.objective_usd)}, "
                  f"{_money(abs(diff))} {'more' if diff >= 0 else 'less'} than this plan.")
        say(Formula(f'={label}&" costs "&TEXT(one_device_usd,{MONEY})'
                    f'&", "&TEXT(ABS(one_device_usd-objective_usd),{MONEY})&IF(one_device_usd>=objective_usd,'
                    '" more"," less")&" than this plan ("&TEXT(ABS(one_device_usd-objective_usd)/one_device_usd,'
                    f'{PCT_TEXT})&")."', expect), ctx.cells["one_device_usd"])
    else:
        say("Best one-device fleet: none - no single device type can serve every workload alone.", "")
    if ctx.has_api:
        saving = ctx.api_saving_usd
        expect = (f"Against the hosted API the fleet {'saves' if saving >= 0 else 'costs'} {_money(abs(saving))} "
                  f"over {_n(a.horizon_years, 'year')}.")
        say(Formula(f'="Against the hosted API the fleet "&IF(api_saving_usd>=0,"saves ","costs ")&TEXT('
                    f'ABS(api_saving_usd),{MONEY})&IF(api_saving_usd>=0,""," more")&" over "{horizon}&"."', expect),
            ctx.cells["api_saving_usd"])
    tokens_note = ("each workload's rate divided by its peak-to-average ratio, see Workloads"
                   if any(w.peak_to_average_ratio != 1 for w in r.workloads)
                   else "the peak rate sustained all year: peak-to-average ratio 1")
    cpm = r.cost_per_million_output_tokens_usd or 0.0
    say(Formula(f'="Cost per million output tokens: "&TEXT(cost_per_million_output_tokens_usd,"$#,##0.00")'
                f'&" on average volume ({tokens_note})."',
                f"Cost per million output tokens: ${cpm:,.2f} on average volume ({tokens_note})."),
        ctx.cells["cost_per_million_output_tokens_usd"])
    say(Formula('="Financing: straight-line depreciation "&TEXT(annual_depreciation_usd,' + MONEY + ')&" per year over "'
                '&depreciation_years&" years, book value at the horizon "&TEXT(residual_value_usd,' + MONEY + ')'
                '&"; a lease at "&TEXT(lease_interest_rate,"0.0%")&" costs "&TEXT(annual_lease_payment_usd,'
                + MONEY + ')&" per year."',
                f"Financing: depreciation {_money(r.annual_depreciation_usd)} per year, book value at the horizon "
                f"{_money(r.residual_value_usd)}; lease {_money(r.annual_lease_payment_usd)} per year."),
        f"{ctx.cells['depreciation_years']}, {ctx.cells['lease_interest_rate']}")
    sheet.put(row, 1, "Risks", font=styles.SECTION_FONT, size=False)
    row += 1
    for text, cell in _risks(ctx):
        say(text, cell)


# ----------------------------------------------------------------------------- figures


def _figures(ctx: Ctx, header: int) -> None:
    """The key figures (named), then comparisons and finance."""
    sheet = ctx.sheets["Summary"]
    r = ctx.result
    a = r.assumptions
    fleet = ctx.sheets["Fleet"].ws
    fc, ft = ctx.fleet_cols, ctx.fleet_total_row
    wl = ctx.sheets["Workloads"].ws
    wc, wt = ctx.workload_cols, ctx.workload_total_row
    sheet.put(header - 1, 1, "Key figures", font=styles.SECTION_FONT, size=False)
    sheet.header(header, 1, ["Figure", "Value", "Unit", "How it is computed"])
    row = header + 1

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
            ctx.cells[name] = f"Summary!B{row}"
        row += 1
        return row - 1

    years = _n(a.horizon_years, "year")
    line("Total cost of ownership", Formula("=capex_usd+horizon_years*annual_opex_usd", r.tco_usd),
         f"$ over {years}", styles.USD, "capex + horizon × annual opex", "tco_usd", bold=True)
    line("   per month", Formula("=tco_usd/(horizon_years*12)", (r.tco_usd or 0) / (12 * a.horizon_years)),
         "$ per month", styles.USD, "TCO / months of the horizon", "tco_per_month_usd")
    line("Net present value of costs",
         Formula("=capex_usd+IF(discount_rate=0,horizon_years*annual_opex_usd,"
                 "annual_opex_usd*(1-(1+discount_rate)^(-horizon_years))/discount_rate)", r.npv_usd),
         f"$ over {years}", styles.USD, "capex + each year's opex discounted at the discount rate", "npv_usd")
    line("Capex", Formula(f"={ref(fleet, ft, fc['capex'])}", r.capex_usd), "$", styles.USD,
         "GPUs bought × purchase price + servers × (server price + network) (Fleet)", "capex_usd", bold=True)
    line("Annual opex", Formula("=annual_power_usd+annual_maintenance_usd+annual_facility_usd+annual_cloud_usd",
                                r.annual_opex_usd),
         "$ per year", styles.USD, "power + maintenance + colocation + cloud rental", "annual_opex_usd")
    line("   Power", Formula(f"={ref(fleet, ft, fc['power'])}", r.annual_power_usd), "$ per year", styles.USD,
         "IT kW × average draw × PUE × hours × electricity price", "annual_power_usd")
    line("   Maintenance", Formula(f"={ref(fleet, ft, fc['maint'])}", r.annual_maintenance_usd), "$ per year",
         styles.USD, "capex × maintenance fraction", "annual_maintenance_usd")
    line("   Colocation", Formula(f"={ref(fleet, ft, fc['facility'])}", r.annual_facility_usd), "$ per year",
         styles.USD, "12 × ($ per kW-month × kW + $ per rack-month × racks)", "annual_facility_usd")
    line("   Cloud rental", Formula(f"={ref(fleet, ft, fc['cloud'])}", r.annual_cloud_usd), "$ per year",
         styles.USD, "GPUs × $ per GPU-hour × hours (only when renting)", "annual_cloud_usd")
    line(f"Objective ({r.objective})",
         Formula('=IF(objective="capex",capex_usd,IF(objective="cloud",horizon_years*annual_cloud_usd,tco_usd))',
                 r.objective_usd), "$", styles.USD, "what the optimizer minimised", "objective_usd")
    line("Output tokens (average)", Formula(f"={ref(wl, wt, wc['out'])}", r.output_tokens_per_year), "per year",
         styles.THOUSANDS, "sum over workloads of rate / peak-to-average ratio", "output_tokens_per_year")
    line("Input tokens (average)", Formula(f"={ref(wl, wt, wc['in'])}",
                                           sum(w.input_tokens_per_year for w in r.workloads)), "per year",
         styles.THOUSANDS, "sum over workloads", "input_tokens_per_year")
    line("Cost per million output tokens",
         Formula("=IF(output_tokens_per_year>0,tco_usd/(horizon_years*output_tokens_per_year/1000000),0)",
                 r.cost_per_million_output_tokens_usd),
         "$", styles.USD_CENTS, "TCO / average output tokens over the horizon", "cost_per_million_output_tokens_usd",
         bold=True)
    line("GPUs bought", Formula(f"={ref(fleet, ft, fc['installed'])}", sum(f.installed for f in r.fleet)), "GPUs",
         styles.THOUSANDS, "see Fleet (whole servers or cloud instances: idle GPUs included)", "gpus_bought")
    line("GPUs in use", Formula(f"={ref(fleet, ft, fc['gpus'])}", r.gpus_total), "GPUs",
         styles.THOUSANDS, "see Fleet (the plan's gpus_total)", "gpus_total")
    line("Servers", Formula(f"={ref(fleet, ft, fc['nodes'])}", r.nodes_total), "servers", styles.THOUSANDS,
         "see Fleet", "nodes_total")
    line("IT power", Formula(f"={ref(fleet, ft, fc['kw'])}", r.power_kw), "kW", styles.DEC1,
         "nameplate: GPUs' TDP + server power" + (", each host server whole; information only under objective "
                                                  "cloud (no power cost, no power cap)" if r.objective == "cloud" else ""),
         "power_kw")
    line("Status", r.status, "", None, r.status_detail)
    met = sum(1 for w in r.workloads if w.met)
    missed = [w.name for w in r.workloads if w.met is False]
    line("SLOs met", f"{met} of {_n(len(r.workloads), 'workload')}", "", None,
         ("missed: " + ", ".join(missed)) if missed else "see Deployments and Workloads")
    if r.status in ("optimal", "feasible"):
        line("Simulator check", *_simulator_check(r))

    row += 1
    sheet.put(row, 1, "Best one-device fleet", font=styles.SECTION_FONT, size=False)
    row += 1
    best = r.single_device_best
    if best is not None and ctx.single_total_row:
        st = ctx.single_total_row
        obj = (f'=IF(objective="capex",{ref(fleet, st, fc["capex"])},IF(objective="cloud",'
               f'horizon_years*{ref(fleet, st, fc["cloud"])},{ref(fleet, st, fc["total"])}))')
        ctx.cells["one_device_label"] = f"A{row}"
        line(f"Best one-device fleet: all {best.device} ({best.gpus_installed or best.gpus:,} GPUs)",
             Formula(obj, best.objective_usd), "$", styles.USD,
             f"the best single-device fleet: its objective ({r.objective}) by the Fleet sheet's formulas",
             "one_device_usd")
        saving = line("Saving from mixing device types", Formula("=one_device_usd-objective_usd",
                                                                 best.objective_usd - (r.objective_usd or 0)),
                      "$", styles.USD, "one-device fleet − this plan (positive = this plan is cheaper)",
                      "mixing_saving_usd", bold=True)
        line("Saving from mixing device types (%)", Formula(f"=IF(one_device_usd<>0,B{saving}/one_device_usd,0)"),
             "%", styles.PCT, "of the one-device fleet's objective", "mixing_saving_fraction")
    elif best is not None:
        line(f"Best one-device fleet: all {best.device} ({best.gpus:,} GPUs)", best.objective_usd,
             "$", styles.USD, "at catalog prices (a result without its bill of materials: not live)", "one_device_usd")
    else:
        line("Best one-device fleet", "none", "", None, "no single device type can serve every workload alone")

    row += 1
    sheet.put(row, 1, "Finance", font=styles.SECTION_FONT, size=False)
    row += 1
    line("Depreciation (straight line)", Formula("=capex_usd/depreciation_years", r.annual_depreciation_usd),
         "$ per year", styles.USD, "capex / depreciation life", "annual_depreciation_usd")
    line("Book value at the horizon", Formula("=capex_usd*MAX(0,1-horizon_years/depreciation_years)",
                                              r.residual_value_usd),
         "$", styles.USD, "capex × max(0, 1 − horizon / life): residual value", "residual_value_usd")
    line("Lease payment", Formula("=IF(1+lease_interest_rate=1,capex_usd/lease_years,capex_usd*lease_interest_rate"
                                  "/(1-(1+lease_interest_rate)^(-lease_years)))", r.annual_lease_payment_usd),
         "$ per year", styles.USD, "annuity: capex × r / (1 − (1 + r)^−term)", "annual_lease_payment_usd")
    line("Lease payments in total", Formula("=lease_years*annual_lease_payment_usd", r.lease_total_usd),
         "$", styles.USD, "term × payment", "lease_total_usd")
    lease_pv = (r.annual_lease_payment_usd or 0) * (
        sum(1 / (1 + a.discount_rate) ** y for y in range(1, (a.lease_years or a.horizon_years) + 1)))
    line("Buying instead of leasing saves (present value)",
         Formula("=IF(discount_rate=0,lease_total_usd,annual_lease_payment_usd*(1-(1+discount_rate)^(-lease_years))"
                 "/discount_rate)-capex_usd", lease_pv - (r.capex_usd or 0)),
         "$", styles.USD, "lease payments discounted at the discount rate − capex (positive = buying is cheaper)",
         "buy_vs_lease_saving_usd")

    ctx.api_saving_usd = 0.0
    if ctx.has_api:
        row += 1
        sheet.put(row, 1, "Buy or rent vs. a hosted API", font=styles.SECTION_FONT, size=False)
        row += 1
        line("API price", Formula("=api_usd_per_million_output_tokens"), "$ per million output tokens",
             styles.USD_CENTS, "Assumptions (input tokens at api_usd_per_million_input_tokens)")
        api_cost = a.horizon_years * ((r.output_tokens_per_year or 0) * (a.api_usd_per_million_output_tokens or 0)
                                      + sum(w.input_tokens_per_year for w in r.workloads)
                                      * (a.api_usd_per_million_input_tokens or 0)) / 1e6
        line("Same volume through the API",
             Formula("=horizon_years*(output_tokens_per_year*api_usd_per_million_output_tokens"
                     "+input_tokens_per_year*api_usd_per_million_input_tokens)/1000000", api_cost),
             f"$ over {years}", styles.USD, "horizon × (output + input tokens per year) × API prices",
             "api_cost_usd")
        ctx.api_saving_usd = api_cost - (r.tco_usd or 0)
        line("The fleet saves vs. the API", Formula("=api_cost_usd-tco_usd", ctx.api_saving_usd),
             f"$ over {years}", styles.USD, "API cost − fleet TCO: positive = the fleet saves money, "
             "negative = the API is cheaper", "api_saving_usd", bold=True)
        be = line("Break-even volume", Formula("=IF(api_cost_usd>0,tco_usd/api_cost_usd*output_tokens_per_year,0)"),
                  "output tokens per year", styles.THOUSANDS,
                  "below this volume the API costs less than this fleet (fleet cost held fixed)",
                  "break_even_output_tokens_per_year")
        line("Break-even as share of planned volume",
             Formula(f"=IF(output_tokens_per_year>0,B{be}/output_tokens_per_year,0)"), "%", styles.PCT,
             "break-even volume / planned output tokens")
    _charts(ctx, row - 1)


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
    for col in (8, 11):  # cumulative cost, cumulative present value
        linec.add_data(Reference(costs, min_col=col, min_row=first - 1, max_row=last), titles_from_data=True)
    linec.set_categories(Reference(costs, min_col=1, min_row=first, max_row=last))
    linec.height, linec.width = 7.5, 13
    linec.y_axis.delete = False
    linec.x_axis.delete = False
    ws.add_chart(linec, f"{'C' if n else 'A'}{anchor_row}")
