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
from openpyxl.styles import PatternFill

from catalog.outputs import write_atomic
from reports.xl import Sheet

DIFF_FILL = PatternFill("solid", fgColor="FFF2CC")
MONEY = '"$"#,##0'


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
    sheet = Sheet(wb.create_sheet(title))
    sheet.header(1, 1, [x_label, y_label])
    for i, (x, y) in enumerate(points):
        sheet.put(i + 2, 1, x, x_fmt)
        sheet.put(i + 2, 2, y, y_fmt)
    sheet.ws.freeze_panes = "A2"
    if points:
        chart = LineChart()
        chart.title = f"{y_label} vs {x_label}"
        chart.x_axis.title = x_label
        chart.y_axis.title = y_label
        chart.add_data(Reference(sheet.ws, min_col=2, min_row=1, max_row=len(points) + 1), titles_from_data=True)
        chart.set_categories(Reference(sheet.ws, min_col=1, min_row=2, max_row=len(points) + 1))
        chart.width, chart.height = 18, 9
        sheet.ws.add_chart(chart, "D2")
    sheet.finish("1:1")


def budget_frontier(rows: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    return [(r["level"], r["demand_multiplier"]) for r in rows if r["mode"] == "max_demand"]


def demand_frontier(rows: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    pts = [(r["level"], r["objective_usd"]) for r in rows
           if r["group"] not in ("base", "variant", "samples") and r["mode"] == "min_cost"
           and "demand_multiplier" in r["overrides"] and r["objective_usd"] is not None
           and r["status"] in ("optimal", "feasible")]
    return sorted(pts)


def whatif_workbook_bytes(rows: Sequence[dict[str, Any]]) -> bytes:
    """The comparison workbook's .xlsx bytes.

    Every user string goes through ``Sheet.put``: text stays text, never a formula.
    """
    wb = Workbook()
    sheet = Sheet(wb.active)
    sheet.ws.title = "Scenarios"
    sheet.header(1, 1, ["scenario", *[str(r["name"]) for r in rows]])
    row = 1
    for label, values, fmt in _scenario_columns(rows):
        row += 1
        sheet.put(row, 1, label)
        for j, v in enumerate(values):
            value = v if isinstance(v, str | int | float | bool) or v is None else str(v)
            fill = DIFF_FILL if j > 0 and v != values[0] else None
            sheet.put(row, j + 2, value, fmt if isinstance(v, int | float) else None, fill=fill)
    sheet.put(row + 2, 1, "Highlighted cells differ from the base scenario (first column).")
    sheet.width(1, 34)
    sheet.ws.freeze_panes = "B2"
    sheet.finish("1:1")
    _frontier_sheet(wb, "Budget frontier", "capex budget ($)", "demand multiplier served",
                    budget_frontier(rows), MONEY, "0.00")
    _frontier_sheet(wb, "Demand frontier", "demand multiplier", "cheapest cost ($)",
                    demand_frontier(rows), "0.00", MONEY)
    used = {s.title.lower() for s in wb.worksheets}
    for r in rows:
        fleet = Sheet(wb.create_sheet(_sheet_title("Fleet " + r["name"], used)))
        fleet.header(1, 1, ["device", "GPUs"])
        n = 1
        for device, gpus in sorted(r["fleet"].items()):
            n += 1
            fleet.put(n, 1, str(device))
            fleet.put(n, 2, gpus, "#,##0")
        fleet.put(n + 2, 1, "status")
        fleet.put(n + 2, 2, str(r["status"]))
        fleet.put(n + 3, 1, "objective ($)")
        fleet.put(n + 3, 2, r["objective_usd"], MONEY)
        fleet.finish("1:1")
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def write_whatif_workbook(rows: Sequence[dict[str, Any]], path: Path | str, inputs: tuple = ()) -> Path:
    """Write the comparison workbook atomically (never over an input file)."""
    return write_atomic(path, whatif_workbook_bytes(rows), inputs=inputs, option="--out")


def frontier_plot_bytes(rows: Sequence[dict[str, Any]]) -> bytes:
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
    return buf.getvalue()


def write_frontier_plot(rows: Sequence[dict[str, Any]], path: Path | str, inputs: tuple = ()) -> Path:
    """Write the frontier PNG atomically (never over an input file)."""
    return write_atomic(path, frontier_plot_bytes(rows), inputs=inputs, option="--plot")
