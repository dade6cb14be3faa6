"""The what-if comparison workbook and frontier plot.

Sheets: **Scenarios** (one column per scenario: what it changed, in words; its cost and the
difference from the base in $ and %; cells that differ from the base highlighted; a note
where a scenario's fleet is the base's; the simulator's check of its fleet, or "not simulated"), **Budget frontier** (served demand vs capex budget)
and **Demand frontier** (cheapest cost vs demand multiplier), each with a scatter chart on a
numeric x axis, **Monte Carlo** (with ``--samples``: cost p50/p90, the probability that the
base fleet still meets its SLOs, every draw, a histogram of the cost) and one **fleet sheet
per scenario** (device, GPUs).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from openpyxl import Workbook
from openpyxl.chart import BarChart, Reference, ScatterChart, Series
from openpyxl.styles import PatternFill

from catalog.outputs import write_atomic
from reports import styles
from reports.sheets_plan import SIMULATOR_CHECK
from reports.xl import Sheet
from workloads.scenarios import level_text

DIFF_FILL = PatternFill("solid", fgColor="FFF2CC")
MONEY = '"$"#,##0'
MONEY_DELTA = '"+$"#,##0;"-$"#,##0;"$"0'
PCT_DELTA = "+0.0%;-0.0%;0.0%"
HISTOGRAM_BINS = 10

_FIELD_WORDS = {"purchase_usd": "price", "cloud_usd_per_gpu_hour": "cloud price per GPU-hour",
                "qps": "rate (req/s)", "tokens_per_day": "tokens per day", "min_replicas": "minimum replicas"}


def _sheet_title(name: str, used: set[str]) -> str:
    base = re.sub(r"[\[\]:*?/\\']", "_", name)[:26] or "scenario"
    title, i = base, 2
    while title.lower() in used:
        title = f"{base[:23]}~{i}"
        i += 1
    used.add(title.lower())
    return title


def _value_text(field: str, value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return level_text(field, float(value))
    return str(value)


def describe_overrides(overrides: Mapping[str, Any]) -> str:
    """A scenario's overrides in words: ``h200-sxm price $24,000; chat rate (req/s) 80``."""
    parts = []
    for path, value in overrides.items():
        bits = path.split(".")
        if path == "demand_multiplier":
            parts.append(f"all demand × {float(value):g}")
        elif path == "budget.capex_usd":
            parts.append(f"capex budget {_value_text('usd', value)}")
        elif path.startswith("price:"):
            parts.append(f"{path[6:]} prices × {float(value):.2f}")
        elif len(bits) == 3 and bits[0] in ("devices", "workloads"):
            parts.append(f"{bits[1]} {_FIELD_WORDS.get(bits[2], bits[2])} {_value_text(bits[2], value)}")
        else:
            parts.append(f"{path.replace('_', ' ')} {_value_text(path, value)}")
    return "; ".join(parts) if parts else "nothing (the plan file as written)"


def _other_objective(r: Mapping[str, Any], base: Mapping[str, Any]) -> bool:
    """True when a scenario minimised another objective than the base (a variant ``set: {objective: capex}``):
    its objective $ is another quantity (capex, rental, TCO) and no difference from the base's."""
    return r.get("objective") is not None and base.get("objective") is not None and r["objective"] != base["objective"]


def _same_as_base(r: dict[str, Any], base: dict[str, Any]) -> str:
    """Why a scenario's answer equals the base's, or ''; for another objective, that Δ objective is left empty."""
    if r is not base and has_plan(r) and has_plan(base) and _other_objective(r, base):
        return (f"objective {r['objective']}, the base's {base['objective']}: the objective $ measure different "
                "things, so no Δ; compare TCO, capex and opex")
    if r is base or r["fleet"] != base["fleet"] or r["status"] != base["status"]:
        return ""
    devices = [p.split(".")[1] for p in r["overrides"] if p.startswith("devices.")]
    unused = [d for d in devices if d not in r["fleet"]]
    if unused:
        return (f"same fleet as the base: {', '.join(unused)} is still not chosen at this price "
                "(its break-even price is lower)")
    return "same fleet as the base: the change does not alter the cheapest fleet"


ROWS: list[tuple[str, str, str | None]] = [
    ("status", "status", None),
    ("objective", "objective", None),
    ("objective_usd", "objective ($)", MONEY),
    ("capex_usd", "capex ($)", MONEY),
    ("annual_opex_usd", "annual opex ($)", MONEY),
    ("tco_usd", "TCO ($)", MONEY),
    ("power_kw", "power (kW)", "#,##0.0"),
    ("max_power_kw", "power cap, max_power_kw (kW)", "#,##0.0"),
    ("gpus_total", "GPUs", "#,##0"),
    ("demand_multiplier", "demand multiplier served", "0.00"),
    ("served_qps", "served demand (req/s)", "#,##0.0"),
]


def has_plan(r: Mapping[str, Any]) -> bool:
    """True for a scenario row with a fleet (status optimal or feasible). An infeasible or failed one carries
    zeros in its money, power, GPU and served-demand fields (``docs/plan-json.md``): they are not figures of a
    fleet, so the comparison leaves those cells empty instead of showing a $0 plan that saves 100 %."""
    return r.get("status") in ("optimal", "feasible")


def served_known(r: Mapping[str, Any]) -> bool:
    """True where a row's served demand is a figure: a fleet's, or a budget level's (mode ``max_demand``) that
    buys none, whose answer is "0.00× of the demand"; a min-cost scenario without a fleet serves no known part."""
    return has_plan(r) or r.get("mode") == "max_demand"


# the rows of ROWS that describe a fleet: empty for a scenario without one (``has_plan``; served demand:
# ``served_known``)
_FLEET_ROWS = frozenset({"objective_usd", "capex_usd", "annual_opex_usd", "tco_usd", "power_kw", "gpus_total"})
_SERVED_ROWS = frozenset({"demand_multiplier", "served_qps"})


def _cell(r: Mapping[str, Any], key: str) -> Any:
    if key in _FLEET_ROWS and not has_plan(r) or key in _SERVED_ROWS and not served_known(r):
        return None
    return r.get(key)


def simulator_check(r: Mapping[str, Any]) -> str | None:
    """The simulator's verdict on a scenario's fleet in the plan workbook's words (``SIMULATOR_CHECK``):
    "met", "at the SLO, within the simulation's noise …", "MISSED beyond the simulation's noise", or
    "not simulated" (a budget level, a Monte Carlo draw, or a fleet beyond the default check); None for a
    scenario without a fleet, and for a row of older what-if JSON without the ``simulated`` key."""
    if "simulated" not in r or not has_plan(r):
        return None
    if not r["simulated"]:
        return "not simulated"
    return SIMULATOR_CHECK.get(r.get("simulation_verdict") or "", "simulated")


def _delta(r: dict[str, Any], base: dict[str, Any]) -> tuple[float | None, float | None]:
    """(objective − base objective, that over the base objective); None where either has no fleet or the two
    minimised different objectives (capex against TCO is no saving)."""
    a, b = r.get("objective_usd"), base.get("objective_usd")
    if a is None or b is None or not has_plan(r) or not has_plan(base) or _other_objective(r, base):
        return None, None
    return a - b, ((a - b) / b if b else None)


def _scenario_columns(rows: Sequence[dict[str, Any]]) -> list[tuple[str, list[Any], str | None]]:
    devices = sorted({d for r in rows for d in r["fleet"]})
    workloads = [w["name"] for w in rows[0]["workloads"]] if rows and rows[0]["workloads"] else []
    base = rows[0] if rows else {}
    lines: list[tuple[str, list[Any], str | None]] = [
        ("what it changed", [describe_overrides(r["overrides"]) for r in rows], None),
        ("Δ objective vs base ($)", [_delta(r, base)[0] for r in rows], MONEY_DELTA),
        ("Δ objective vs base (%)", [_delta(r, base)[1] for r in rows], PCT_DELTA),
        ("note", [_same_as_base(r, base) for r in rows], None),
    ]
    for key, label, fmt in ROWS:
        if key == "max_power_kw" and all(r.get(key) is None for r in rows):
            continue  # no scenario has a power cap (or every one rents: cloud applies none)
        lines.append((label, [_cell(r, key) for r in rows], fmt))
    if any(r.get("no_fleet_reason") for r in rows):
        lines.append(("why no fleet", [r.get("no_fleet_reason") for r in rows], None))
    if any("simulated" in r for r in rows):  # what-if JSON written before the simulator check has no such key
        lines.append(("Simulator check", [simulator_check(r) for r in rows], None))
    for d in devices:
        lines.append((f"GPUs in use: {d}", [r["fleet"].get(d, 0) if has_plan(r) else None for r in rows], "#,##0"))
    for name in workloads:
        for field, label in (("met", "SLOs met"), ("ttft_p99_ms", "TTFT p99 ms"), ("tpot_p99_ms", "TPOT p99 ms"),
                             ("e2e_p99_ms", "E2E p99 ms")):
            values = []
            for r in rows:
                w = next((x for x in r["workloads"] if x["name"] == name), None)
                # without a fleet nothing was served: its met = false is no SLO missed (see "why no fleet")
                v = w.get(field) if w and has_plan(r) else None
                values.append(("yes" if v else "no") if field == "met" and v is not None else v)
            if any(v is not None for v in values):
                lines.append((f"{name}: {label}", values, "#,##0" if field != "met" else None))
    return lines


def _frontier_sheet(wb: Workbook, title: str, x_label: str, y_label: str, points: list[tuple[float, float]],
                    x_fmt: str, y_fmt: str) -> None:
    """The points as a table and a scatter chart (numeric x axis: unevenly spaced levels stay true)."""
    sheet = Sheet(wb.create_sheet(title))
    sheet.header(1, 1, [x_label, y_label])
    for i, (x, y) in enumerate(points):
        sheet.put(i + 2, 1, x, x_fmt)
        sheet.put(i + 2, 2, y, y_fmt)
    sheet.ws.freeze_panes = "A2"
    if points:
        chart = ScatterChart()
        chart.title = f"{y_label} vs {x_label}"
        chart.style = 13
        chart.x_axis.title = x_label
        chart.y_axis.title = y_label
        chart.x_axis.number_format = x_fmt
        chart.y_axis.number_format = y_fmt
        chart.x_axis.delete = False
        chart.y_axis.delete = False
        xs = Reference(sheet.ws, min_col=1, min_row=2, max_row=len(points) + 1)
        ys = Reference(sheet.ws, min_col=2, min_row=1, max_row=len(points) + 1)
        series = Series(ys, xs, title_from_data=True)
        series.marker.symbol = "circle"
        chart.series.append(series)
        chart.legend = None
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


def histogram(values: Sequence[float], bins: int = HISTOGRAM_BINS) -> list[tuple[float, float, int]]:
    """(low, high, count) of ``bins`` equal-width bins over [min, max]; the last bin includes max."""
    if not values:
        return []
    lo, hi = min(values), max(values)
    if hi <= lo:
        return [(lo, hi, len(values))]
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(int((v - lo) / width), bins - 1)] += 1
    return [(lo + i * width, lo + (i + 1) * width, c) for i, c in enumerate(counts)]


def _monte_carlo_sheet(wb: Workbook, samples: Sequence[dict[str, Any]], summary: Mapping[str, Any] | None) -> None:
    """Cost p50/p90 and SLO probability, every draw, and a histogram of the cost."""
    sheet = Sheet(wb.create_sheet("Monte Carlo"))
    sheet.put(1, 1, "Monte Carlo: cost and SLOs under uncertain demand and prices", font=styles.TITLE_FONT, size=False)
    row = 3
    u = summary or {}
    for label, value, fmt in (("samples", u.get("samples", len(samples)), "#,##0"), ("seed", u.get("seed"), "0"),
                              ("cost p50 ($)", u.get("cost_p50_usd"), MONEY),
                              ("cost p90 ($)", u.get("cost_p90_usd"), MONEY),
                              ("infeasible samples", u.get("infeasible_samples"), "#,##0"),
                              ("probability the base fleet meets every SLO", u.get("base_fleet_meets_slo_probability"),
                               "0%")):
        sheet.put(row, 1, label)
        sheet.put(row, 2, value, fmt)
        row += 1
    row += 1
    table_head = row
    sheet.header(row, 1, ["sample", "demand multiplier", "status", "cheapest cost ($)", "price changes"])
    for r in samples:
        row += 1
        prices = {k: v for k, v in r["overrides"].items() if k.startswith("price:")}
        sheet.put(row, 1, str(r["name"]))
        sheet.put(row, 2, r.get("demand_multiplier"), "0.00")
        sheet.put(row, 3, str(r["status"]))
        sheet.put(row, 4, r.get("objective_usd") if has_plan(r) else None, MONEY)
        sheet.put(row, 5, describe_overrides(prices) if prices else "")
    costs = [r["objective_usd"] for r in samples
             if r.get("objective_usd") is not None and math.isfinite(r["objective_usd"])
             and r["status"] in ("optimal", "feasible")]
    bins = histogram(costs)
    col = 7
    sheet.header(table_head, col, ["cost from ($)", "cost to ($)", "bin", "samples"])
    for i, (lo, hi, n) in enumerate(bins, start=1):
        sheet.put(table_head + i, col, lo, MONEY)
        sheet.put(table_head + i, col + 1, hi, MONEY)
        sheet.put(table_head + i, col + 2, f"${lo / 1e3:,.0f}k-{hi / 1e3:,.0f}k")
        sheet.put(table_head + i, col + 3, n, "#,##0")
    if bins:
        chart = BarChart()
        chart.type = "col"
        chart.title = "Cheapest cost over the samples"
        chart.x_axis.title = "cost ($)"
        chart.y_axis.title = "samples"
        chart.gapWidth = 10
        chart.add_data(Reference(sheet.ws, min_col=col + 3, min_row=table_head, max_row=table_head + len(bins)),
                       titles_from_data=True)
        chart.set_categories(Reference(sheet.ws, min_col=col + 2, min_row=table_head + 1,
                                       max_row=table_head + len(bins)))
        chart.legend = None
        chart.x_axis.delete = False
        chart.y_axis.delete = False
        chart.width, chart.height = 18, 9
        sheet.ws.add_chart(chart, "A" + str(max(row, table_head + len(bins)) + 3))
    sheet.ws.freeze_panes = sheet.ws.cell(row=table_head + 1, column=1)
    sheet.finish(f"{table_head}:{table_head}")


def whatif_workbook_bytes(rows: Sequence[dict[str, Any]], uncertainty: Mapping[str, Any] | None = None) -> bytes:
    """The comparison workbook's .xlsx bytes.

    ``rows`` may include the Monte Carlo draws (group ``samples``): they go to their own
    sheet with ``uncertainty`` (the CLI's p50/p90 summary), not to the Scenarios columns.
    Every user string goes through ``Sheet.put``: text stays text, never a formula.
    """
    samples = [r for r in rows if r["group"] == "samples"]
    rows = [r for r in rows if r["group"] != "samples"]
    wb = Workbook()
    sheet = Sheet(wb.active)
    sheet.ws.title = "Scenarios"
    sheet.header(1, 1, ["scenario", *[str(r["name"]) for r in rows]])
    row = 1
    for label, values, fmt in _scenario_columns(rows):
        row += 1
        sheet.put(row, 1, label)
        wrap = label in ("what it changed", "note")
        for j, v in enumerate(values):
            value = v if isinstance(v, str | int | float | bool) or v is None else str(v)
            differs = j > 0 and v != values[0] and not label.startswith(("Δ", "what", "note"))
            sheet.put(row, j + 2, value, fmt if isinstance(v, int | float) else None,
                      fill=DIFF_FILL if differs else None, wrap=wrap and bool(value))
    sheet.put(row + 2, 1, "Highlighted cells differ from the base scenario (first column); Δ = scenario − base.")
    sheet.width(1, 30)
    for j in range(len(rows)):
        sheet.width(j + 2, 22)
    sheet.ws.freeze_panes = "B2"
    sheet.finish("1:1")
    _frontier_sheet(wb, "Budget frontier", "capex budget ($)", "demand multiplier served",
                    budget_frontier(rows), MONEY, "0.00")
    _frontier_sheet(wb, "Demand frontier", "demand multiplier", "cheapest cost ($)",
                    demand_frontier(rows), "0.00", MONEY)
    if samples:
        _monte_carlo_sheet(wb, samples, uncertainty)
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
        fleet.put(n + 3, 2, r["objective_usd"] if has_plan(r) else None, MONEY)  # no $0 plan for no fleet
        fleet.finish("1:1")
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def write_whatif_workbook(rows: Sequence[dict[str, Any]], path: Path | str, inputs: tuple = (),
                          uncertainty: Mapping[str, Any] | None = None) -> Path:
    """Write the comparison workbook atomically (never over an input file)."""
    return write_atomic(path, whatif_workbook_bytes(rows, uncertainty), inputs=inputs, option="--out")


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
