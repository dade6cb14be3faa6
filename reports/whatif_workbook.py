"""The what-if comparison workbook and frontier plot.

Sheets: **Scenarios** (one column per scenario; cells that differ from the base are
highlighted), **Budget frontier** (served demand vs capex budget) and **Demand frontier**
(cheapest cost vs demand multiplier), each with a line chart, and one **fleet sheet per
scenario** (device, GPUs).
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openpyxl import Workbook
from openpyxl.chart import LineChart, Reference
from openpyxl.styles import Alignment, Font, PatternFill
from openpyxl.utils import get_column_letter

from catalog.files import write_atomic

HEADER_FONT = Font(bold=True)
DIFF_FILL = PatternFill("solid", fgColor="FFF2CC")
MONEY = '"$"#,##0'


def safe_text(value: Any) -> Any:
    """User text never becomes a formula: a leading = + - @ (or tab/CR) gets a quote prefix."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _sheet_title(name: str, used: set[str]) -> str:
    base = re.sub(r"[\[\]:*?/\\']", "_", name)[:26] or "scenario"
    title, i = base, 2
    while title.lower() in used:
        title = f"{base[:23]}~{i}"
        i += 1
    used.add(title.lower())
    return title


ROWS: list[tuple[str, str, str | None]] = [
    ("status", "status", None),
    ("objective", "objective", None),
    ("objective_usd", "objective ($)", MONEY),
    ("capex_usd", "capex ($)", MONEY),
    ("annual_opex_usd", "annual opex ($)", MONEY),
    ("tco_usd", "TCO ($)", MONEY),
    ("power_kw", "power (kW)", "#,##0.0"),
    ("gpus_total", "GPUs", "#,##0"),
    ("demand_multiplier", "demand multiplier served", "0.00"),
    ("served_qps", "served demand (req/s)", "#,##0.0"),
]


def _scenario_columns(rows: Sequence[dict[str, Any]]) -> list[tuple[str, list[Any], str | None]]:
    devices = sorted({d for r in rows for d in r["fleet"]})
    workloads = [w["name"] for w in rows[0]["workloads"]] if rows and rows[0]["workloads"] else []
    lines: list[tuple[str, list[Any], str | None]] = []
    for key, label, fmt in ROWS:
        lines.append((label, [r.get(key) for r in rows], fmt))
    for d in devices:
        lines.append((f"GPUs: {d}", [r["fleet"].get(d, 0) for r in rows], "#,##0"))
    for name in workloads:
        for field, label in (("met", "SLOs met"), ("ttft_p99_ms", "TTFT p99 ms"), ("tpot_p99_ms", "TPOT p99 ms"),
                             ("e2e_p99_ms", "E2E p99 ms")):
            values = []
            for r in rows:
                w = next((x for x in r["workloads"] if x["name"] == name), None)
                v = w.get(field) if w else None
                values.append(("yes" if v else "no") if field == "met" and v is not None else v)
            if any(v is not None for v in values):
                lines.append((f"{name}: {label}", values, "#,##0" if field != "met" else None))
    return lines


def _frontier_sheet(wb: Workbook, title: str, x_label: str, y_label: str, points: list[tuple[float, float]],
                    x_fmt: str, y_fmt: str) -> None:
    ws = wb.create_sheet(title)
    ws.append([x_label, y_label])
    for c in ws[1]:
        c.font = HEADER_FONT
    for x, y in points:
        ws.append([x, y])
    for row in ws.iter_rows(min_row=2):
        row[0].number_format, row[1].number_format = x_fmt, y_fmt
    ws.column_dimensions["A"].width = 24
    ws.column_dimensions["B"].width = 28
    ws.freeze_panes = "A2"
    if points:
        chart = LineChart()
        chart.title = f"{y_label} vs {x_label}"
        chart.x_axis.title = x_label
        chart.y_axis.title = y_label
        chart.add_data(Reference(ws, min_col=2, min_row=1, max_row=len(points) + 1), titles_from_data=True)
        chart.set_categories(Reference(ws, min_col=1, min_row=2, max_row=len(points) + 1))
        chart.width, chart.height = 18, 9
        ws.add_chart(chart, "D2")


def budget_frontier(rows: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    return [(r["level"], r["demand_multiplier"]) for r in rows if r["mode"] == "max_demand"]


def demand_frontier(rows: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    pts = [(r["level"], r["objective_usd"]) for r in rows
           if r["group"] not in ("base", "variant", "samples") and r["mode"] == "min_cost"
           and "demand_multiplier" in r["overrides"] and r["objective_usd"] is not None
           and r["status"] in ("optimal", "feasible")]
    return sorted(pts)


def write_whatif_workbook(rows: Sequence[dict[str, Any]], path: Path | str, inputs: tuple = ()) -> Path:
    """Write the comparison workbook atomically (never over an input file)."""
    wb = Workbook()
    ws = wb.active
    ws.title = "Scenarios"
    ws.append(["scenario", *[safe_text(r["name"]) for r in rows]])
    for c in ws[1]:
        c.font = HEADER_FONT
        c.alignment = Alignment(wrap_text=True, horizontal="center")
    for label, values, fmt in _scenario_columns(rows):
        ws.append([label, *[safe_text(v) for v in values]])
        row = ws.max_row
        for j, v in enumerate(values):
            cell = ws.cell(row=row, column=j + 2)
            if fmt and isinstance(v, int | float):
                cell.number_format = fmt
            if j > 0 and v != values[0]:
                cell.fill = DIFF_FILL
    ws.append([])
    ws.append(["Highlighted cells differ from the base scenario (first column)."])
    ws.column_dimensions["A"].width = 34
    for j in range(len(rows)):
        ws.column_dimensions[get_column_letter(j + 2)].width = 18
    ws.freeze_panes = "B2"
    _frontier_sheet(wb, "Budget frontier", "capex budget ($)", "demand multiplier served",
                    budget_frontier(rows), MONEY, "0.00")
    _frontier_sheet(wb, "Demand frontier", "demand multiplier", "cheapest cost ($)",
                    demand_frontier(rows), "0.00", MONEY)
    used = {s.title.lower() for s in wb.worksheets}
    for r in rows:
        fs = wb.create_sheet(_sheet_title("Fleet " + r["name"], used))
        fs.append(["device", "GPUs"])
        for c in fs[1]:
            c.font = HEADER_FONT
        for device, gpus in sorted(r["fleet"].items()):
            fs.append([safe_text(device), gpus])
        fs.append([])
        fs.append(["status", safe_text(r["status"])])
        fs.append(["objective ($)", r["objective_usd"]])
        fs.cell(row=fs.max_row, column=2).number_format = MONEY
        fs.column_dimensions["A"].width = 20
        fs.column_dimensions["B"].width = 16
    buf = io.BytesIO()
    wb.save(buf)
    return write_atomic(path, buf.getvalue(), inputs=inputs)


def write_frontier_plot(rows: Sequence[dict[str, Any]], path: Path | str, inputs: tuple = ()) -> Path:
    """PNG with the two frontiers side by side (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    b = budget_frontier(rows)
    d = demand_frontier(rows)
    ax = axes[0]
    if b:
        ax.plot([x / 1e6 for x, _ in b], [y for _, y in b], marker="o")
    ax.set_xlabel("capex budget ($M)")
    ax.set_ylabel("demand multiplier served")
    ax.set_title("Served demand vs budget")
    ax.grid(alpha=0.3)
    ax = axes[1]
    if d:
        ax.plot([x for x, _ in d], [y / 1e6 for _, y in d], marker="o", color="tab:red")
    ax.set_xlabel("demand multiplier")
    ax.set_ylabel("cheapest cost ($M)")
    ax.set_title("Cost vs demand")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return write_atomic(path, buf.getvalue(), inputs=inputs)
