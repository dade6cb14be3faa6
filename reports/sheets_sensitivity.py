"""The Sensitivity sheet (runner-up, break-evens, tornado chart) and the Summary's warnings.

The runner-up, break-even and tornado figures are optimizer outputs: each is a re-solve of
the fleet MILP with one input changed, written as values and labelled so. Today's prices
are live formulas over the Assumptions sheet's named cells, so a quote entered there shows
at once how far it is from the break-even price.
"""

from __future__ import annotations

from openpyxl.chart import BarChart, Reference

from optimizer.models.fidelity import GENERATION_UNMEASURED_MARK
from optimizer.results.provenance import fleet_text
from reports import styles
from reports.context import HEADER_ROW, Ctx, title
from reports.xl import Formula

OUTPUT_NOTE = ("Optimizer outputs (values): each figure re-solves the fleet on the same candidates with one input "
               "changed. They do not recalculate when Assumptions change; run gpuplan again.")


def build_summary_warnings(ctx: Ctx) -> None:
    """Row 3 of Summary: a plain-language warning when the answer rests on an estimate: an estimated price, a
    datasheet-only or same-generation performance figure (the fidelity classes below measured)."""
    r = ctx.result
    notes = []
    for f in r.fleet:
        if f.price_basis == "estimated":
            what = "hourly price" if r.objective == "cloud" else "price"
            notes.append(f"The recommended {f.device.upper()} {what} is an estimate; enter your quote in Assumptions.")
    datasheet = [d for d in r.deployments if d.fidelity is not None and d.fidelity.class_ == "datasheet-only"]
    weak = sorted({d.device for d in datasheet if GENERATION_UNMEASURED_MARK in d.fidelity.basis})
    other = sorted({(d.device, d.engine or "") for d in datasheet if GENERATION_UNMEASURED_MARK not in d.fidelity.basis})
    if weak:
        notes.append(f"Performance of {', '.join(x.upper() for x in weak)} is extrapolated from datasheets "
                     "(no measurement of its generation); see Sensitivity.")
    if other:
        notes.append(f"Performance of {', '.join(f'{x.upper()} served by {e}' for x, e in other)} rests on "
                     "measurements of other configurations (this engine, model type or precision never measured there); see Risks.")
    same_gen = [d for d in r.deployments if d.fidelity is not None and d.fidelity.class_ == "same-generation"]
    if same_gen:
        low = min(d.fidelity.low_factor for d in same_gen)
        high = max(d.fidelity.high_factor for d in same_gen)
        notes.append(f"Performance of {', '.join(sorted({d.device.upper() for d in same_gen}))} is inferred from "
                     f"measurements of its generation, not of the device itself (80 % capacity band ×{low:.2f}–"
                     f"{high:.2f}); see Deployments.")
    if r.headroom is not None:
        notes.append(f"Sized for the {r.headroom.sized_for}{_sizing_extras(r.headroom)}.")
    if notes:
        ctx.sheets["Summary"].put(3, 1, "  ".join(notes), font=styles.BAD_FONT, size=False)


def build_sensitivity(ctx: Ctx) -> None:
    """Runner-up, per-device break-evens and the tornado table with its bar chart."""
    sheet = ctx.sheets["Sensitivity"]
    s = ctx.result.sensitivity
    title(sheet, "Sensitivity of the decision", OUTPUT_NOTE)
    if s is None:
        skipped = next((d.message for d in ctx.result.diagnostics if d.code == "sensitivity_skipped"), None)
        sheet.put(HEADER_ROW, 1, f"No sensitivity analysis in this result: {skipped}." if skipped else
                  "No sensitivity analysis in this result (gpuplan optimize --no-sensitivity, or no plan).")
        sheet.finish()
        return
    cloud = ctx.result.objective == "cloud"
    row = HEADER_ROW
    sheet.put(row, 1, "Runner-up", font=styles.SECTION_FONT, size=False)
    row += 1
    sheet.header(row, 1, ["Figure", "Value", "Note"])
    row += 1
    sheet.put(row, 1, "This plan's objective (optimizer output)")
    sheet.put(row, 2, s.base_objective_usd, styles.USD)
    base_cell = f"$B${row}"
    row += 1
    ru = s.runner_up
    if ru is not None:
        fleet = fleet_text((f.device, f.gpus, f.gpus_installed) for f in ru.fleet) or "none"
        sheet.put(row, 1, f"Cheapest fleet without {ru.excluded_device}")
        sheet.put(row, 2, fleet)
        row += 1
        sheet.put(row, 1, "Its objective (optimizer output)")
        sheet.put(row, 2, ru.objective_usd, styles.USD)
        sheet.put(row, 3, "no fleet without this device meets the plan" if ru.objective_usd is None else "",
                  font=styles.NOTE_FONT)
        row += 1
        if ru.objective_usd is not None:
            sheet.put(row, 1, "Difference")
            sheet.put(row, 2, Formula(f"=B{row - 1}-{base_cell}", ru.difference_usd), styles.USD)
            sheet.put(row, 3, "runner-up − this plan", font=styles.NOTE_FONT)
            row += 1

    row += 1
    sheet.put(row, 1, "Break-even per chosen device", font=styles.SECTION_FONT, size=False)
    row += 1
    unit = "$ per GPU-hour" if cloud else "$ per GPU"
    sheet.header(row, 1, ["Device", f"Today's price ({unit}, Assumptions)", "Break-even price (optimizer output)",
                          "Room to break-even", "Break-even capacity factor (optimizer output)", "Note"])
    head = row
    row += 1
    fmt = styles.USD_RATE if cloud else styles.USD
    prefix = "cloud_usd_per_gpu_hour" if cloud else "purchase_usd"
    for d in s.devices:
        be = d.break_even_cloud_usd_per_gpu_hour if cloud else d.break_even_purchase_usd
        today = d.cloud_usd_per_gpu_hour if cloud else d.purchase_usd
        sheet.put(row, 1, d.device)
        name = ctx.device_slug.get(d.device)
        sheet.put(row, 2, Formula(f"={prefix}_{name}", today) if name else today, fmt)
        sheet.put(row, 3, be if be is not None else "never", fmt)
        sheet.put(row, 4, Formula(f"=IF(B{row}>0,C{row}/B{row}-1,0)", (be / today - 1) if be and today else None)
                  if be is not None else "—", styles.PCT)
        sheet.put(row, 5, d.break_even_capacity_factor if d.break_even_capacity_factor is not None else "< 0.05",
                  styles.RATIO)
        sheet.put(row, 6, "; ".join(x for x in (d.price_note, d.capacity_note) if x), font=styles.NOTE_FONT)
        row += 1
    sheet.table("BreakEvenTable", head, 1, row - 1, 6)
    sheet.put(row, 1, f"Above the break-even price, or below the capacity factor (share of the predicted capacity "
              f"the device delivers), the cheapest fleet is a different one. Tolerance ±{100 * s.price_tolerance:.1f} % "
              f"of the price, ±{s.capacity_tolerance:.3f} on the factor.", font=styles.NOTE_FONT, size=False)
    row += 2

    sheet.put(row, 1, "Tornado: the optimal objective with one input at each end", font=styles.SECTION_FONT, size=False)
    row += 1
    sheet.header(row, 1, ["Input", "Low end", "Objective at low end ($, optimizer output)", "High end",
                          "Objective at high end ($, optimizer output)", "Change at low end ($)",
                          "Change at high end ($)"])
    head = row
    row += 1
    first = row
    for t in s.tornado:
        sheet.put(row, 1, t.input)
        sheet.put(row, 2, t.low_label)
        sheet.put(row, 3, t.low_usd if t.low_usd is not None else "infeasible", styles.USD)
        sheet.put(row, 4, t.high_label)
        sheet.put(row, 5, t.high_usd if t.high_usd is not None else "infeasible", styles.USD)
        for col, v in ((6, t.low_usd), (7, t.high_usd)):
            src = "C" if col == 6 else "E"
            sheet.put(row, col, Formula(f"=IF(ISNUMBER({src}{row}),{src}{row}-{base_cell},0)",
                                        (v - s.base_objective_usd) if v is not None else 0.0), styles.USD)
        row += 1
    last = row - 1
    sheet.table("TornadoTable", head, 1, last, 7)
    sheet.put(row, 1, f"{s.solves} re-solves in {s.seconds:.1f} s.", font=styles.NOTE_FONT, size=False)
    if s.tornado:
        _tornado_chart(sheet, head, first, last, row + 2)
    sheet.width(1, 46)
    sheet.finish()


def _tornado_chart(sheet, head: int, first: int, last: int, anchor_row: int) -> None:
    """Horizontal bars of the change at each end, overlapping on one axis (largest swing on top)."""
    chart = BarChart()
    chart.type = "bar"
    chart.grouping = "clustered"
    chart.overlap = 100
    chart.title = "Change in the optimal objective ($, optimizer outputs)"
    chart.x_axis.scaling.orientation = "maxMin"  # first row (largest swing) on top
    chart.x_axis.tickLblPos = "low"  # input names left of the bars, not on the zero line
    chart.y_axis.numFmt = styles.USD
    chart.y_axis.majorGridlines = None
    for col in (6, 7):
        chart.add_data(Reference(sheet.ws, min_col=col, min_row=head, max_row=last), titles_from_data=True)
    chart.set_categories(Reference(sheet.ws, min_col=1, min_row=first, max_row=last))
    chart.height, chart.width = 9, 26
    chart.x_axis.delete = False
    chart.y_axis.delete = False
    sheet.ws.add_chart(chart, f"A{anchor_row}")


def _sizing_extras(h) -> str:
    """The sizing policy beyond the performance band, as the terminal's ``sized for:`` line states it: a
    target_utilization below 1 (every capacity × it) and a demand quantile other than the median (rates × factor)."""
    extras = []
    if h.target_utilization != 1:
        extras.append(f"target_utilization {h.target_utilization:g} (every capacity × {h.target_utilization:g})")
    if h.demand_factor != 1:
        extras.append(f"demand_quantile {h.demand_quantile:g} (every rate × {h.demand_factor:.3f})")
    return "; " + "; ".join(extras) if extras else ""
