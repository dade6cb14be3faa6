"""The Assumptions sheet: every input finance may change, each a workbook-level name."""

from __future__ import annotations

from openpyxl.worksheet.datavalidation import DataValidation

from reports import styles
from reports.context import FIRST_ROW, HEADER_ROW, Ctx, title
from reports.xl import define_name

# name -> (label, unit, number format, note)
_SCALARS: dict[str, tuple[str, str, str | None, str]] = {
    "objective": ("Pricing basis", "tco | capex | cloud", None,
                  "tco or capex: the fleet is bought and run; cloud: rented by the GPU-hour. "
                  "The optimizer chose the fleet under the plan's objective."),
    "horizon_years": ("Horizon", "years", styles.INT,
                      "Years the hardware is used; opex is counted for each."),
    "discount_rate": ("Discount rate", "per year", styles.PCT, "For the net present value (NPV)."),
    "electricity_usd_per_kwh": ("Electricity price", "$ per kWh", styles.USD_RATE,
                                "Blended facility price."),
    "pue": ("Power usage effectiveness (PUE)", "ratio", styles.RATIO,
            "Facility power / IT power."),
    "power_utilization": ("Average power draw", "fraction of nameplate", styles.PCT,
                          "Average draw of GPUs and servers as a share of their nameplate power."),
    "maintenance_fraction_per_year": ("Maintenance", "fraction of capex per year", styles.PCT,
                                      "Support contracts and spares."),
    "server_overhead_usd": ("Server price, no platform", "$ per server", styles.USD,
                            "Chassis, CPUs, memory, NICs of a device with no platform below (the plan's "
                            "server_overhead_usd, which then also replaces every platform's price)."),
    "server_power_w": ("Server power, no platform", "W per server", styles.THOUSANDS,
                       "On top of the GPUs' nameplate power, for a device with no platform below."),
    "hours_per_year": ("Hours per year", "hours", styles.THOUSANDS, "Operating hours."),
    "network_usd_per_server": ("Network per server", "$ per server", styles.USD,
                               "Switch ports, optics and cables bought with every server (capex)."),
    "colocation_usd_per_kw_month": ("Colocation by power", "$ per kW-month", styles.USD_CENTS,
                                    "Per kW of nameplate IT power, every month (0 = own facility)."),
    "colocation_usd_per_rack_month": ("Colocation by space", "$ per rack-month", styles.USD,
                                      "Per rack, every month; racks = servers × rack units / rack size."),
    "rack_units_per_rack": ("Rack size", "rack units", styles.INT, "Usable height of one rack."),
    "depreciation_years": ("Depreciation life", "years", styles.INT,
                           "Straight-line life of the hardware (default: the horizon)."),
    "lease_interest_rate": ("Lease interest rate", "per year", styles.PCT,
                            "Rate of a lease or loan repaying the capex in equal yearly payments."),
    "lease_years": ("Lease term", "years", styles.INT, "Years of lease payments (default: the horizon)."),
    "capex_budget_usd": ("Capex budget", "$", styles.USD, "The plan's cap on capex."),
    "annual_budget_usd": ("Annual budget", "$ per year", styles.USD, "The plan's cap on yearly opex or rental."),
    "api_usd_per_million_output_tokens": ("Hosted API price, output", "$ per million output tokens",
                                          styles.USD_CENTS, "For the buy-vs-API comparison on Summary."),
    "api_usd_per_million_input_tokens": ("Hosted API price, input", "$ per million input tokens",
                                         styles.USD_CENTS, "0 when the plan gives no input price."),
}


def build_assumptions(ctx: Ctx) -> None:
    """Scalar inputs (rows 5..) and per-device prices below them, all named."""
    sheet = ctx.sheets["Assumptions"]
    a = ctx.result.assumptions
    title(sheet, "Assumptions",
          "Inputs in blue on yellow. Every money figure in this workbook is a formula over these cells; "
          "changing one recalculates the totals but does not re-run the optimizer (the fleet stays).")
    sheet.header(HEADER_ROW, 1, ["Input", "Value", "Unit", "Defined name", "Note"])
    names = list(_SCALARS)
    if not ctx.has_api:
        names = [n for n in names if not n.startswith("api_")]
    names = [n for n in names if not n.endswith("budget_usd") or getattr(a, n) is not None]
    defaults = {"depreciation_years": a.horizon_years, "lease_years": a.horizon_years}
    row = FIRST_ROW
    for name in names:
        label, unit, fmt, note = _SCALARS[name]
        value = getattr(a, name)
        if name == "objective":
            value = ctx.result.objective
        if value is None:
            value = defaults.get(name, 0.0)
        _input_row(ctx, row, label, value, unit, name, note, fmt)
        if name == "objective":
            dv = DataValidation(type="list", formula1='"tco,capex,cloud"', allow_blank=False)
            dv.error, dv.errorTitle = "Choose tco, capex or cloud", "Pricing basis"
            sheet.ws.add_data_validation(dv)
            dv.add(sheet.ws.cell(row=row, column=2))
        row += 1
    sheet.table("AssumptionsTable", HEADER_ROW, 1, row - 1, 5)

    row += 1
    sheet.put(row, 1, "Device prices and power (per GPU)", font=styles.SECTION_FONT, size=False)
    row += 1
    dev_header = row
    sheet.header(row, 1, ["Device", "Purchase price ($ per GPU)", "Cloud price ($ per GPU-hour)",
                          "Nameplate power (W per GPU)", "Price source (as of)"])
    row += 1
    sources = _price_sources(ctx)
    for f in ctx.priced:
        s = ctx.device_slug[f.device]
        sheet.put(row, 1, f.device)
        ctx.cells[f"purchase_usd:{f.device}"] = f"Assumptions!B{row}"
        for col, (prefix, value, fmt) in enumerate(
            [("purchase_usd", f.purchase_usd, styles.USD),
             ("cloud_usd_per_gpu_hour", f.cloud_usd_per_gpu_hour, styles.USD_RATE),
             ("tdp_w", f.tdp_w, styles.THOUSANDS)], start=2):
            sheet.put(row, col, 0.0 if value is None else float(value), fmt,
                      font=styles.INPUT_FONT, fill=styles.INPUT_FILL)
            define_name(ctx.wb, f"{prefix}_{s}", sheet.ws, row, col)
        sheet.put(row, 5, sources.get(f.device, ""), font=styles.NOTE_FONT, wrap=True)
        row += 1
    sheet.table("DevicePricesTable", dev_header, 1, row - 1, 5)
    if ctx.priced:
        example = ctx.device_slug[ctx.priced[0].device]
        sheet.put(row + 1, 1, "Each device's cells are named purchase_usd_<device>, cloud_usd_per_gpu_hour_<device> "
                  f"and tdp_w_<device> (e.g. purchase_usd_{example}); the Fleet sheet refers to them.",
                  font=styles.NOTE_FONT, size=False)
        row += 2
    row = _platform_rows(ctx, row + 1)
    sheet.width(5, 64)
    sheet.ws.freeze_panes = sheet.ws.cell(row=FIRST_ROW, column=1)
    sheet.finish(title_rows=f"{HEADER_ROW}:{HEADER_ROW}")


def _platform_rows(ctx: Ctx, row: int) -> int:
    """Per platform (the server a device is bought in): server price, server power, rack units, all named."""
    sheet = ctx.sheets["Assumptions"]
    rows = {}
    for f in ctx.priced:
        if f.platform and f.server_usd is not None:
            rows.setdefault(f.platform, f)
    if not rows:
        return row
    sheet.put(row, 1, "Servers (per platform): everything but the GPUs", font=styles.SECTION_FONT, size=False)
    row += 1
    head = row
    sheet.header(row, 1, ["Platform", "Server price ($ each)", "Server power (W each)", "Rack units (U each)",
                          "Product, GPUs per server, devices"])
    row += 1
    for key, f in rows.items():
        s = ctx.platform_slug[key]
        sheet.put(row, 1, key)
        ctx.cells[f"server_usd:{key}"] = f"Assumptions!B{row}"
        for col, (prefix, value, fmt) in enumerate(
                [("server_usd", f.server_usd, styles.USD), ("server_power_w", f.server_power_w, styles.THOUSANDS),
                 ("rack_units", f.rack_units, styles.DEC1)], start=2):
            sheet.put(row, col, float(value or 0.0), fmt, font=styles.INPUT_FONT, fill=styles.INPUT_FILL)
            define_name(ctx.wb, f"{prefix}_{s}", sheet.ws, row, col)
        devices = ", ".join(sorted({g.device for g in ctx.priced if g.platform == key}))
        kind = ("bought full" if f.fixed_size else f"rented in instances of {f.gpus_per_instance}"
                if f.gpus_per_instance > 1 else "slots filled as needed")
        sheet.put(row, 5, f"{f.platform_name or key}: {f.gpus_per_node} GPUs per server ({kind}); {devices}",
                  font=styles.NOTE_FONT, wrap=True)
        row += 1
    sheet.table("PlatformsTable", head, 1, row - 1, 5)
    sheet.put(row + 1, 1, "Named server_usd_<platform>, server_power_w_<platform>, rack_units_<platform>; "
              "sources on the Method sheet. A fixed-size server (HGX/OAM board, NVL72 rack) is bought with all "
              "its GPUs, idle ones included.", font=styles.NOTE_FONT, size=False)
    return row + 2


def _input_row(ctx: Ctx, row: int, label: str, value, unit: str, name: str, note: str,
               fmt: str | None) -> None:
    sheet = ctx.sheets["Assumptions"]
    sheet.put(row, 1, label)
    sheet.put(row, 2, value, fmt, font=styles.INPUT_FONT, fill=styles.INPUT_FILL)
    sheet.put(row, 3, unit)
    sheet.put(row, 4, name, font=styles.NOTE_FONT)
    sheet.put(row, 5, note, font=styles.NOTE_FONT, wrap=True)
    define_name(ctx.wb, name, sheet.ws, row, 2)
    ctx.cells[name] = f"Assumptions!B{row}"


def _price_sources(ctx: Ctx) -> dict[str, str]:
    """Device → 'source (as of)' for its purchase (or, under cloud, rental) price."""
    wanted = "purchase_usd" if ctx.buy else "cloud_usd_per_gpu_hour"
    out: dict[str, str] = {}
    for s in ctx.result.sources:
        if s.field == wanted and s.device not in out:
            est = "estimate: " if s.estimated and not s.source.lower().startswith("estimate") else ""
            when = f" (as of {s.as_of})" if s.as_of not in (None, "") else ""
            out[s.device] = f"{est}{s.source}{when}"
    return out
