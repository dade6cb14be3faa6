"""`gpuplan whatif SCENARIOS.yaml`: compare variants, sweep budgets and demand, sample uncertainty."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from catalog.errors import GpuplanError
from catalog.outputs import Output, plan_outputs
from cli.common import (
    CatalogOpt,
    NoCacheOpt,
    ParamsOpt,
    TimeLimitAliasOpt,
    TimeLimitOpt,
    aliased,
    cache_off,
    error_line,
    fmt,
    load,
    load_calibration,
    stdout,
    table,
)
from optimizer.planning.solver_options import SolverOptions


def _progress_bar(total: int):
    """A rich progress bar on a terminal; nothing when output is piped (CI, files)."""
    if not sys.stderr.isatty():
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("solving scenarios"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    transient=True)


def _no_fleet_why(row: dict[str, Any]) -> str:
    """Why a scenario row has no fleet: its ``no_fleet_reason``, else its status detail or status."""
    return str(row.get("no_fleet_reason") or row.get("status_detail") or row["status"])


def _slo_text(row: dict[str, Any]) -> str:
    from reports.whatif_workbook import has_plan  # openpyxl: loaded by the command already

    if not has_plan(row):
        # no fleet: its workloads' met = false is no SLO missed; say why instead (the limit that binds)
        return f"no fleet: {_no_fleet_why(row)}"
    parts = []
    for w in row["workloads"]:
        if w.get("met") is None:
            continue
        mark = "ok" if w["met"] else "MISSED"
        p = []
        for field, slo in (("ttft_p99_ms", "slo_ttft_p99_ms"), ("tpot_p99_ms", "slo_tpot_p99_ms"),
                           ("e2e_p99_ms", "slo_e2e_p99_ms")):
            if w.get(slo) is not None and w.get(field) is not None:
                p.append(f"{field.split('_')[0]} {w[field]:,.0f}/{w[slo]:,.0f}")
        parts.append(f"{w['name']} {mark} ({', '.join(p)})" if p else f"{w['name']} {mark}")
    return "; ".join(parts)


def whatif(
    path: Annotated[Path, typer.Argument(help="Scenario file: a base plan, variants, sweeps.")],
    out: Annotated[str | None, typer.Option("--out", help="Write the comparison workbook (.xlsx).")] = None,
    json_path: Annotated[str | None, typer.Option(
        "--json", help="Write every scenario's result as JSON (docs/plan-json.md 'What-if JSON'); '-' prints it "
        "instead of the table.")] = None,
    plot: Annotated[str | None, typer.Option("--plot", help="Write the two frontiers as a PNG.")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="Worker processes (default: cores).")] = None,
    backend: Annotated[str, typer.Option(help="local (process pool) or ray.")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray address: auto or ray://host:port.")] = None,
    samples: Annotated[int, typer.Option(min=0, max=100000, help="Monte Carlo draws of demand/prices from the file's uncertainty section.")] = 0,
    seed: Annotated[int, typer.Option(min=0, help="Seed for --samples.")] = 0,
    time_limit_s: TimeLimitOpt = None,
    time_limit: TimeLimitAliasOpt = None,
    catalog: CatalogOpt = None,
    params: ParamsOpt = None,
    no_cache: NoCacheOpt = False,
) -> None:
    """Solve every scenario of a what-if file and compare them."""
    # the optimizer (numpy, pulp, pydantic) loads when the command runs, not at `gpuplan --help`
    from optimizer.whatif import ScenarioOptions, check_backend, run_whatif
    from reports.whatif_workbook import frontier_plot_bytes, has_plan, whatif_workbook_bytes
    from workloads.scenarios import load_scenarios, read_scenario_file, scenario_inputs

    check_backend(backend)
    if address is not None and backend != "ray":
        raise GpuplanError(f"--address {address} is the address of a Ray cluster; add --backend ray, or drop --address")
    cache_off(no_cache)
    specs = [Output("--json", json_path, (".json",), stdout_ok=True), Output("--out", out, (".xlsx",)),
             Output("--plot", plot, (".png",))]
    # checked before anything else is read, against every input (the base plan the file names too)
    outputs = plan_outputs(specs, (path, *scenario_inputs(read_scenario_file(path), path), catalog, params))
    cat = load(catalog)
    spec, _base_data, scenarios = load_scenarios(path, cat)
    if params is not None:
        load_calibration(params, cat)  # its errors and its warning now, before any scenario runs
    options = ScenarioOptions(catalog_path=str(catalog) if catalog else None,
                              params_path=str(params) if params else None,
                              solver=SolverOptions(time_limit_s=aliased(
                                  time_limit_s, time_limit, SolverOptions().time_limit_s, "--time-limit-s", "--time-limit")))
    bar = _progress_bar(len(scenarios) + samples)
    with bar or contextlib.nullcontext():
        task = bar.add_task("scenarios", total=len(scenarios) + samples) if bar else None
        study = run_whatif(str(path), scenarios, options, uncertainty=spec.uncertainty, samples=samples, seed=seed,
                           catalog=cat, workers=workers, backend=backend, address=address,
                           progress=(lambda n: bar.advance(task, n)) if bar else None)

    rows = [r.to_json(with_plan=False) for r in study.results]
    uncertainty = study.uncertainty.to_json() if study.uncertainty else None
    payloads: dict[str, str | bytes] = {}
    if json_path is not None:
        payloads["--json"] = json.dumps(study.to_json(), indent=2, allow_nan=False) + "\n"
    if out is not None:
        payloads["--out"] = whatif_workbook_bytes(rows, uncertainty=uncertainty)
    if plot is not None:
        payloads["--plot"] = frontier_plot_bytes(rows)
    if not outputs.to_stdout("--json"):
        _render(rows, uncertainty)
    outputs.write(payloads)
    compared = [r for r in rows if r["group"] != "samples"]  # the file's scenarios; Monte Carlo draws are no plan
    if not any(has_plan(r) for r in compared):
        # nothing to compare: a script must not read success. The files are written: their rows say why.
        base = compared[0]
        error_line(f"{path}: no scenario has a fleet (all {len(compared)}, the base included, are infeasible or "
                   f"failed); {base['name']}: {_no_fleet_why(base)}")
        raise typer.Exit(code=1)


def _render(rows: list[dict[str, Any]], u: dict[str, Any] | None) -> None:
    from reports.whatif_workbook import (  # openpyxl: loaded by the command already
        has_plan,
        served_known,
    )

    t_rows = []
    for r in rows:
        if r["group"] == "samples":
            continue
        fleet = ", ".join(f"{g}×{d}" for d, g in sorted(r["fleet"].items()))
        # no fleet: its zeros are not a $0 plan (nor, for a min-cost scenario, one serving nothing at 1.00×)
        served = f"{r['demand_multiplier']:.2f}× ({r['served_qps']:,.1f} req/s)" if served_known(r) else "—"
        money = [fmt(r["objective_usd"]), fmt(r["capex_usd"])] if has_plan(r) else ["—", "—"]
        cap = r.get("max_power_kw")  # the power cap beside the power: what holds a budget level that buys no more
        power = fmt(r["power_kw"], 1) + (f" / {fmt(cap, 1)}" if cap is not None else "") if has_plan(r) else "—"
        t_rows.append([r["name"], r["status"], *money, fleet, served, _slo_text(r), power])
    stdout.print(table("What-if scenarios", ["scenario", "status", "objective $", "capex $", "fleet (GPUs in use)",
                                             "served demand", "p99 vs SLO (ms)", "power kW (/ cap)"], t_rows,
                       right={"objective $", "capex $", "power kW (/ cap)"}))
    unsimulated = [r["name"] for r in rows if has_plan(r) and not r.get("simulated", True) and r["group"] != "samples"]
    if unsimulated:
        stdout.print(f"not simulated (p99s of the analytic model alone; `gpuplan optimize` on the scenario's plan "
                     f"simulates it and re-sizes misses): {', '.join(unsimulated)}")
    over = [r["name"] for r in rows if has_plan(r) and r.get("simulation_verdict") == "missed"]
    if over:
        stdout.print("simulated over an SLO beyond the simulation's noise (the p99s above are the analytic model's; "
                     "the re-size could not clear it: see the scenario's simulation_misses_slo warning): "
                     f"{', '.join(over)}")
    if u is not None:
        stdout.print(f"Uncertainty over {u['samples']} samples (seed {u['seed']}; their fleets not simulated): cost p50 "
                     f"{fmt(u['cost_p50_usd'])} $, "
                     f"p90 {fmt(u['cost_p90_usd'])} $; the base fleet meets every SLO in "
                     f"{u['base_fleet_meets_slo_probability']:.0%} of samples with model error by fidelity class "
                     f"({u['base_fleet_meets_slo_probability_without_model_error']:.0%} on the point model).")


def register(app: typer.Typer) -> None:
    app.command("whatif")(whatif)
