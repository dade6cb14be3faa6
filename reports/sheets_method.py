"""The Method sheet: formulas in words, provenance, solver, reconciliation, sources."""

from __future__ import annotations

import hashlib
from pathlib import Path

from reports import styles
from reports.context import Ctx, title
from reports.xl import Formula

FORMULAS_IN_WORDS = [
    ("Capex", "Σ devices: GPUs bought × purchase price + servers × (server price of its platform + network "
              "per server) (0 when renting). A board or rack (HGX/OAM, NVL72) is bought with all its GPUs."),
    ("IT power", "Σ devices: (GPUs bought × nameplate W per GPU + servers × server W of its platform) / 1000, "
                 "in kW."),
    ("Power per year", "IT kW × average draw × PUE × hours per year × electricity $/kWh (0 when renting)."),
    ("Maintenance per year", "capex × maintenance fraction per year."),
    ("Colocation per year", "12 × ($ per kW-month × IT kW + $ per rack-month × servers × rack units / rack size) "
                            "(0 when renting)."),
    ("Cloud rental per year", "Σ devices: GPUs × $ per GPU-hour × hours per year (only when renting)."),
    ("Annual opex", "power + maintenance + colocation + cloud rental."),
    ("TCO", "capex + horizon years × annual opex (undiscounted)."),
    ("NPV", "capex + Σ years 1..horizon: annual opex / (1 + discount rate)^year."),
    ("Cost per million output tokens", "TCO / (horizon years × average output tokens per year / 1,000,000); "
                                       "average = rate / peak-to-average ratio."),
    ("Depreciation", "capex / depreciation life per year (straight line); book value at the horizon = "
                     "capex × max(0, 1 − horizon / life)."),
    ("Lease", "yearly payment = capex × r / (1 − (1 + r)^−term) at the lease interest rate r (annuity)."),
    ("Workload cost", "Σ its deployments: GPUs used / GPUs of that device × that device's cost over the "
                      "horizon (server overhead shared per GPU)."),
    ("Capacity at SLO", "the largest request rate a replica carries with every p99 within the SLO "
                        "(analytic serving model on datasheet figures, calibrated efficiencies)."),
    ("Fleet", "the cheapest integer mix of replicas and whole servers covering every workload's load "
              "(mixed-integer program); see Candidates for every configuration considered."),
]

RECONCILED = [
    # label, JSON key, defined name, format
    ("Capex", "capex_usd", "capex_usd", styles.USD),
    ("Annual power", "annual_power_usd", "annual_power_usd", styles.USD),
    ("Annual maintenance", "annual_maintenance_usd", "annual_maintenance_usd", styles.USD),
    ("Annual cloud rental", "annual_cloud_usd", "annual_cloud_usd", styles.USD),
    ("Annual opex", "annual_opex_usd", "annual_opex_usd", styles.USD),
    ("TCO", "tco_usd", "tco_usd", styles.USD),
    ("NPV", "npv_usd", "npv_usd", styles.USD),
    ("Objective", "objective_usd", "objective_usd", styles.USD),
    ("Cost per million output tokens", "cost_per_million_output_tokens_usd",
     "cost_per_million_output_tokens_usd", styles.USD_CENTS),
    ("IT power (kW)", "power_kw", "power_kw", styles.DEC1),
    ("GPUs", "gpus_total", "gpus_total", styles.THOUSANDS),
    ("Servers", "nodes_total", "nodes_total", styles.THOUSANDS),
    ("Output tokens per year", "output_tokens_per_year", "output_tokens_per_year", styles.THOUSANDS),
]


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "(not readable)"


def build_method(ctx: Ctx, inputs: tuple) -> None:
    """Sections top to bottom; three small tables (reconciliation, diagnostics, sources)."""
    sheet = ctx.sheets["Method"]
    r = ctx.result
    a = r.assumptions
    title(sheet, "Method and provenance",
          "How every figure was computed, from which inputs, by which tool, and where the catalog figures come from.")
    row = 4

    def section(text: str) -> None:
        nonlocal row
        row += 1
        sheet.put(row, 1, text, font=styles.SECTION_FONT, size=False)
        row += 1

    def pair(label: str, value, fmt: str | None = None) -> None:
        nonlocal row
        sheet.put(row, 1, label, font=styles.BOLD)
        sheet.put(row, 2, value, fmt, size=False)
        row += 1

    section("How the numbers are computed")
    for label, words in FORMULAS_IN_WORDS:
        pair(label, words)

    section("Inputs and tool")
    pair("Plan", r.plan_name)
    pair("Input file", r.input_file)
    pair("Input file SHA-256", r.input_sha256)
    for path in inputs:
        p = Path(path)
        pair("Read to write this workbook", f"{p.name} (SHA-256 {_sha256(p)})")
    pair("gpuplan version", r.gpuplan_version)
    pair("Result created (UTC)", r.created_utc)

    section("Solver")
    pair("Solver", r.solver)
    pair("Status", r.status)
    pair("Detail", r.status_detail)
    pair("Optimality gap", r.gap, styles.PCT2)
    pair("Solve time (s)", r.solve_seconds, styles.DEC2)
    pair("Capex budget ($)", a.capex_budget_usd if a.capex_budget_usd is not None else "none", styles.USD)
    pair("Annual budget ($)", a.annual_budget_usd if a.annual_budget_usd is not None else "none", styles.USD)
    cap = "none" if a.max_power_kw is None else (f"{a.max_power_kw:,g}, not applied (objective cloud: rented GPUs)"
                                                 if a.objective == "cloud" else a.max_power_kw)
    pair("Power cap (kW)", cap, styles.DEC1)

    section("Reconciliation: the optimizer's figures against this workbook's formulas")
    head = row
    sheet.header(row, 1, ["Figure", "Optimizer", "Workbook", "Difference"])
    row += 1
    data = r.model_dump()
    for label, key, name, fmt in RECONCILED:
        value = data.get(key)
        sheet.put(row, 1, label)
        sheet.put(row, 2, value, fmt)
        sheet.put(row, 3, Formula(f"={name}", value), fmt)
        sheet.put(row, 4, Formula(f"=IF(ISNUMBER(B{row}),IF(B{row}<>0,(C{row}-B{row})/B{row},C{row}-B{row}),0)", 0.0),
                  styles.PCT2)
        row += 1
    sheet.table("ReconciliationTable", head, 1, row - 1, 4)
    sheet.put(row, 1, "Difference is relative to the optimizer's figure. It is 0 until an assumption is changed.",
              font=styles.NOTE_FONT, size=False)
    row += 1

    if r.diagnostics or ctx.notes:
        section("Diagnostics")
        head = row
        sheet.header(row, 1, ["Level", "Code", "Message"])
        row += 1
        for d in r.diagnostics:
            sheet.put(row, 1, d.level)
            sheet.put(row, 2, d.code)
            sheet.put(row, 3, d.message, size=False)
            row += 1
        for note in ctx.notes:
            sheet.put(row, 1, "warning")
            sheet.put(row, 2, "workbook")
            sheet.put(row, 3, note, size=False)
            row += 1
        sheet.table("DiagnosticsTable", head, 1, row - 1, 3)

    section("Catalog sources (figures used, with as-of dates)")
    head = row
    sheet.header(row, 1, ["Device", "Field", "As of", "Estimated", "Source"])
    row += 1
    for s in r.sources:
        sheet.put(row, 1, s.device)
        sheet.put(row, 2, s.field)
        sheet.put(row, 3, "" if s.as_of is None else str(s.as_of))
        sheet.put(row, 4, "yes" if s.estimated else "no")
        sheet.put(row, 5, s.source, wrap=True)
        row += 1
    if sheet.table("SourcesTable", head, 1, row - 1, 5) is None:
        sheet.put(row, 1, "The plan result lists no sources.", font=styles.NOTE_FONT)
    sheet.width(1, 30)
    sheet.width(2, 22, cap=False)
    sheet.width(3, 16, cap=False)
    sheet.width(4, 14, cap=False)
    sheet.width(5, 90)
    sheet.finish()
