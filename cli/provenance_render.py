"""Terminal rendering of what a plan rests on: price basis, fidelity, simulation, sensitivity.

Reads only the plan-result JSON (docs/plan-json.md), like the rest of the rendering.
"""

from __future__ import annotations

from typing import Any

from cli.common import fmt, stdout, table
from optimizer.results.latency_text import ms_text
from optimizer.results.provenance import fleet_text


def _band(f: dict[str, Any] | None, bases: list[str]) -> str:
    """``class ×low–high [n]``, n numbering the basis in ``bases`` (appended when new)."""
    if not f:
        return "—"
    if f["basis"] not in bases:
        bases.append(f["basis"])
    return f"{f['class']} ×{f['low_factor']:.2f}–{f['high_factor']:.2f} [{bases.index(f['basis']) + 1}]"


def render_provenance(data: dict[str, Any]) -> None:
    """Sizing policy, price basis per device, fidelity and simulated p99 per deployment."""
    h = data.get("headroom")
    if h:
        stdout.print(f"sized for: {h['sized_for']}; target_utilization {h['target_utilization']:g}; "
                     f"demand_quantile {h['demand_quantile']:g} (rates × {h['demand_factor']:.3f}, "
                     f"demand_sigma {h['demand_sigma']:g})", markup=False, highlight=False)
    rows = [[f["device"], f.get("price_basis") or "—", fmt(f["purchase_usd"]),
             fmt(f["cloud_usd_per_gpu_hour"], 2), f.get("price_basis_detail") or ""] for f in data["fleet"]]
    if rows:
        stdout.print(table("Where the prices come from", ["device", "price basis", "purchase $", "cloud $/h", "basis"],
                           rows, right={"purchase $", "cloud $/h"}))
    dep_rows = []
    bases: list[str] = []  # each deployment's fidelity basis, once, numbered below the table
    for d in data["deployments"]:
        v = d.get("verification")
        sim = "—" if not v else (f"{v['metric'].removesuffix('_p99_ms')} {ms_text(v['simulated_ms'])} "
                                 f"({ms_text(v['simulated_ci95_ms'][0])}–{ms_text(v['simulated_ci95_ms'][1])}) / "
                                 f"{ms_text(v['slo_ms'])}" + _VERDICT_SUFFIX[_verdict(v)])
        dep_rows.append([d["workload"], d["key"], _band(d.get("fidelity"), bases), sim])
    if dep_rows:
        stdout.print(table("Performance fidelity of each deployment's device, engine and ep (capacity band, "
                           "measured/predicted) and simulated p99 (95 % CI) / SLO ms",
                           ["workload", "deployment", "fidelity band", "simulated p99 / SLO"], dep_rows))
        for i, basis in enumerate(bases, start=1):
            stdout.print(f"[{i}] {basis}", markup=False, highlight=False)
    ver = data.get("verification")
    if ver:
        # no deployment simulated (each one speculative, say): all_met is then vacuous, not a check that passed
        verdicts = [_verdict(v) for v in ver.get("deployments", ())]
        at_slo, missed = verdicts.count("at_slo"), verdicts.count("missed")
        verdict = ("no deployment simulated" if not verdicts and ver["all_met"]
                   else "every SLO met" if ver["all_met"]
                   else f"SLO MISSED by {missed} of {len(verdicts)} deployment(s) beyond the simulation's noise"
                   + (f", {at_slo} more at the SLO within it" if at_slo else "") if missed
                   else f"{at_slo} of {len(verdicts)} deployment(s) at the SLO (simulated over it, within the "
                        "simulation's noise: not re-sized, see the simulation_at_slo warning)")
        stdout.print(f"simulation: {verdict}; {ver['rounds']} "
                     f"re-size round(s), {ver['seconds']:.1f} s" + (f"; {ver['note']}" if ver["note"] else ""),
                     markup=False, highlight=False)


_VERDICT_SUFFIX = {"met": "", "at_slo": " AT SLO (within noise)", "missed": " MISSED"}


def _verdict(v: dict[str, Any]) -> str:
    """A verified deployment's verdict (met, at_slo, missed); a result written before verdicts: from its figures."""
    if v.get("verdict"):
        return v["verdict"]
    if v.get("met"):
        return "met"
    from optimizer.results.provenance import simulated_verdict
    low = (v.get("simulated_ci95_ms") or [None])[0]
    return simulated_verdict(False, v["slo_ms"], v.get("predicted_ms"), v["simulated_ms"], low)


def render_sensitivity(data: dict[str, Any]) -> None:
    """Runner-up, break-even price and capacity factor per device, tornado swings."""
    s = data.get("sensitivity")
    if not s:
        skipped = any(d.get("code") == "sensitivity_skipped" for d in data.get("diagnostics", ()))
        if data.get("status") in ("optimal", "feasible") and not skipped:  # a skipped one has its warning
            stdout.print("sensitivity: not computed (--no-sensitivity; without it the runner-up, break-evens "
                         "and tornado are shown)", markup=False, highlight=False)
        return
    base = s["base_objective_usd"]
    ru = s["runner_up"]
    if ru and ru["objective_usd"] is not None:
        fleet = fleet_text((f["device"], f["gpus"], f.get("gpus_installed")) for f in ru["fleet"])
        stdout.print(f"runner-up without {ru['excluded_device']}: {fleet} at ${ru['objective_usd']:,.0f} "
                     f"(+${ru['difference_usd']:,.0f}, {100 * ru['difference_usd'] / base:+.1f} %)",
                     markup=False, highlight=False)
    elif ru:
        stdout.print(f"runner-up: no fleet without {ru['excluded_device']} meets the plan", markup=False)
    rows = []
    for d in s["devices"]:
        cloud = d["price_field"] == "cloud_usd_per_gpu_hour"
        price = d.get("cloud_usd_per_gpu_hour") if cloud else d.get("purchase_usd")
        be = d.get("break_even_cloud_usd_per_gpu_hour") if cloud else d.get("break_even_purchase_usd")
        digits = 2 if cloud else 0
        rows.append([d["device"], d["price_field"], fmt(price, digits), fmt(be, digits, none="never"),
                     f"{100 * (be / price - 1):+.1f} %" if be is not None and price else "—",
                     fmt(d["break_even_capacity_factor"], 3, none="< 0.05"),
                     "; ".join(x for x in (d["price_note"], d["capacity_note"]) if x)])
    stdout.print(table(f"Break-even (the fleet changes above this price / below this capacity factor; "
                       f"±{100 * s['price_tolerance']:.1f} % / ±{s['capacity_tolerance']:.3f})",
                       ["device", "price", "today", "break-even", "room", "capacity factor", "note"], rows,
                       right={"today", "break-even", "room", "capacity factor"}))
    t_rows = [[t["input"], t["low_label"], fmt(t["low_usd"], none="infeasible"), t["high_label"],
               fmt(t["high_usd"], none="infeasible"),
               fmt(max(v for v in (t["low_usd"], t["high_usd"], base) if v is not None)
                   - min(v for v in (t["low_usd"], t["high_usd"], base) if v is not None))]
              for t in s["tornado"]]
    stdout.print(table(f"Tornado: optimal {data['objective']} $ with one input at each end (base ${base:,.0f})",
                       ["input", "low end", "$ at low", "high end", "$ at high", "swing $"], t_rows,
                       right={"$ at low", "$ at high", "swing $"}))
    stdout.print(f"sensitivity: {s['solves']} re-solves in {s['seconds']:.1f} s ({s['method']})",
                 markup=False, highlight=False)
