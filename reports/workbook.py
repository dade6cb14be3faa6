"""The finance workbook: a plan result (docs/plan-json.md) as an .xlsx with live formulas.

``write_workbook(result, path, inputs)`` builds the whole workbook in memory, then writes
it atomically (temporary file + rename), so a failure leaves any earlier report as it
was; it refuses to write over any of ``inputs``.

Sheets, in order: Summary, Sensitivity, Fleet, Deployments, Workloads, Costs by year, Assumptions,
Candidates, Method. Inputs live on Assumptions as workbook-level defined names
(``horizon_years``, ``pue``, ``purchase_usd_<device>``, ...); every money figure on
Summary, Fleet, Costs by year and Workloads is a formula over them and the Fleet
quantities; Summary's totals are named too (``tco_usd``, ``capex_usd``, ...).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from openpyxl import Workbook
from openpyxl.workbook.properties import CalcProperties

from catalog.outputs import Output, plan_outputs
from reports.context import Ctx
from reports.result import PlanResult, parse_result
from reports.sheets_inputs import build_assumptions
from reports.sheets_method import build_method
from reports.sheets_money import build_costs, build_fleet
from reports.sheets_plan import build_candidates, build_deployments, build_workloads
from reports.sheets_sensitivity import build_sensitivity, build_summary_warnings
from reports.sheets_summary import build_summary
from reports.xl import Sheet, safe_text

SHEETS = ("Summary", "Sensitivity", "Fleet", "Deployments", "Workloads", "Costs by year", "Assumptions", "Candidates", "Method")


def build_workbook(result: dict[str, Any] | PlanResult, inputs: tuple = (), where: str = "plan result",
                   notes: list[str] | None = None) -> Workbook:
    """The workbook for a plan result, in memory. Raises PlanResultError on a bad result.

    ``notes``, when given, receives the workbook's warnings (also on its Method sheet), e.g. a total the result
    states that its fleet rows do not give."""
    checked = result if isinstance(result, PlanResult) else parse_result(result, where)
    wb = Workbook()
    wb.remove(wb.active)
    ctx = Ctx(wb=wb, result=checked)
    for name in SHEETS:
        ctx.sheets[name] = Sheet(wb.create_sheet(name))
    # Dependency order: names first, then the sheets that refer to them.
    build_assumptions(ctx)
    build_fleet(ctx)
    build_costs(ctx)
    build_deployments(ctx)
    build_workloads(ctx)
    build_summary(ctx)
    build_summary_warnings(ctx)
    build_sensitivity(ctx)
    build_candidates(ctx)
    build_method(ctx, inputs)
    if notes is not None:
        notes.extend(ctx.notes)
    wb.active = 0
    # openpyxl stores no computed values: ask every application to calculate on open.
    wb.calculation = CalcProperties(fullCalcOnLoad=True)
    props = wb.properties
    props.title = safe_text(f"gpuplan: {checked.plan_name or 'plan'}")[:250]
    props.creator = "gpuplan"
    props.description = safe_text(f"gpuplan {checked.gpuplan_version}; input {checked.input_file}")[:250]
    return wb


def workbook_bytes(result: dict[str, Any] | PlanResult, inputs: tuple = (), where: str = "plan result",
                   notes: list[str] | None = None) -> bytes:
    """The .xlsx file's bytes (``notes``: as :func:`build_workbook`)."""
    buffer = io.BytesIO()
    build_workbook(result, inputs, where, notes).save(buffer)
    return buffer.getvalue()


def write_workbook(result: dict[str, Any], path: Path | str, inputs: tuple = ()) -> Path:
    """Write the finance workbook for ``result`` to ``path`` atomically; refuse to overwrite ``inputs``.

    The path is checked (catalog.outputs.plan_outputs) before the workbook is built.
    Raises PlanResultError (a bad result), OutputError (a bad output path).
    """
    outputs = plan_outputs([Output("--out", path, (".xlsx",))], inputs)
    outputs.write({"--out": workbook_bytes(result, inputs)})
    return Path(path)
