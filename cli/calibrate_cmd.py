"""`gpuplan calibrate MEASUREMENTS.csv... --out params.yaml`: fit the model's factors to your data."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Annotated

import typer

from catalog.errors import ModelError
from catalog.outputs import Output, plan_outputs
from cli.common import CatalogOpt, JsonOpt, clean, fmt, load, print_json, stdout, table
from optimizer.models.constants import SHIPPED_ONLINE_WEIGHT


def calibrate(
    out: Annotated[str, typer.Option("--out", help="Where to write the fitted parameters (YAML).")],
    measurements: Annotated[list[Path], typer.Argument(
        help="Measurements CSVs with the columns of calibration.csv.", show_default=False)] = None,
    shipped: Annotated[bool, typer.Option(
        "--shipped", help="Fit the measurements shipped in optimizer/calibration/data/ (with any others given).")] = False,
    bands: Annotated[bool, typer.Option(
        "--bands/--no-bands", help="Also refit without each source group, device and generation in turn and "
        "store the error bands of each fidelity class (slow: one refit per group).")] = True,
    params: Annotated[Path | None, typer.Option(
        "--params", help="Start the fit from these parameters instead of the built-in defaults (an earlier fit, "
        "which the fit resumes; its loss and structure fields, e.g. fit_loss, are kept for every refit). Without it "
        "the fit starts where the shipped one did (the defaults, fit_loss: soft_l1 at 0.1): `gpuplan calibrate "
        "--shipped` reproduces optimizer/models/data/calibration.yaml.")] = None,
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
    online_weight: Annotated[float, typer.Option(
        "--online-weight", min=0.0,
        help="Weight of the online-serving rows (fixed request rate, mean TTFT / mean ITL) against the "
             "offline max-throughput rows; 0 fits the offline rows only. Default: what the shipped "
             f"parameters used ({SHIPPED_ONLINE_WEIGHT:g}).")] = SHIPPED_ONLINE_WEIGHT,
) -> None:
    """Fit efficiency factors and overheads to offline max-throughput and latency rows (and, weighted
    by --online-weight, the mean TTFT and mean ITL of online-serving rows); write them for --params,
    with the error band of each fidelity class from leave-out refits."""
    # the fit, numpy and pydantic load only when the command runs, not at `gpuplan --help`
    from catalog.files import read_bytes
    from cli.validate_cmd import load_all, missed_configurations, resolve_measurement_paths
    from optimizer.calibration.calibrate import calibrate as fit_and_band
    from optimizer.calibration.calibrate import (
        duplicate_rows_note,
        few_rows_note,
        missing_bands_note,
        online_rows_used,
        unused_rows_note,
    )
    from optimizer.models.params import load_params, params_to_yaml

    paths = resolve_measurement_paths(measurements or [], shipped, plan_ok=False)
    outputs = plan_outputs([Output("--out", out, (".yaml", ".yml"))], (*paths, params, catalog))
    cat = load(catalog)
    rows_by_file = [(str(p), load_all([p], cat)) for p in paths]  # errors and notes name each path as given
    rows = [m for _, file_rows in rows_by_file for m in file_rows]
    names = ", ".join(p.name for p in paths)  # the fit record's data_file, and the header of --out
    digest = hashlib.sha256(b"".join(read_bytes(p, "measurements", ModelError) for p in paths)).hexdigest()
    unused_note = unused_rows_note(rows_by_file)
    repeated_note = duplicate_rows_note(rows_by_file)
    start = load_params(params, cat) if params is not None else None
    try:
        fitted = fit_and_band(rows, cat, start=start, data_file=names, data_sha256=digest,
                              online_weight=online_weight, bands=bands,
                              where=", ".join(str(p) for p in paths))
    except ModelError as exc:  # no rows left to fit: the unusable rows may be why
        if unused_note is None:
            raise
        raise ModelError(f"{exc}; {unused_note}") from None
    n_online = online_rows_used(rows, online_weight)
    fit = fitted.fit
    header = (f"gpuplan calibration parameters, fitted by `gpuplan calibrate {names}`\n"
              f"fit: {fit.rows_used} offline rows, median |error| {fit.median_abs_pct_error}% , "
              f"p90 {fit.p90_abs_pct_error}%"
              + (f" (+ {n_online} online-serving rows at weight {online_weight:g}, see fit.method)" if n_online else "")
              + "\n"
              "use with --params FILE; see optimizer/models/params.py for the meaning of each field")
    outputs.write({"--out": params_to_yaml(fitted, header)})
    bands_note = missing_bands_note(fitted) if bands else None
    rows_note = few_rows_note(fitted, n_online)
    if json_out:
        print_json({"out": str(out), "params": fitted.model_dump(mode="json", exclude_none=True),
                    "missing_bands": bands_note, "few_rows": rows_note, "unused_rows": unused_note,
                    "duplicate_rows": repeated_note})
        return
    rows_out = [[k, v] for k, v in fitted.model_dump(exclude={"overrides", "fit", "error_bands", "coverage"}).items()]
    rows_out += [[f"override {o.selector}",
                  ", ".join(f"{k}={v:.3g}" for k, v in o.model_dump(
                      exclude={"vendor", "exclude_vendors", "generation", "memory_type", "engine", "compute_dtype",
                               "weight_only", "note"},
                      exclude_none=True).items())]
                 for o in fitted.overrides]
    rows_out += [[f"band class {k}", f"x{b.low_factor:.3f} .. x{b.high_factor:.3f} (n {b.n})"]
                 for k, b in fitted.error_bands.items()]
    # where the fit misses its own rows beyond their class's band (validate lists the same for any data)
    rows_out += [[f"outside its band: {key}", f"measured/predicted {ratio} (n {n}; band {band})"]
                 for key, n, ratio, band in missed_configurations(
                     {k: r.model_dump() for k, r in fit.by_configuration.items()}, cat, fitted)]
    stdout.print(table(f"fitted on {fit.rows_used} rows of {names}", ["parameter", "value"],
                       [[k, f"{v:.4g}" if isinstance(v, float) else str(v)] for k, v in rows_out]))
    stdout.print(f"fit error: median {fmt(fit.median_abs_pct_error, 1)} %, p90 {fmt(fit.p90_abs_pct_error, 1)} %"
                 f" (absolute, on offline output tokens/s)"
                 + (f"; also fitted to {n_online} online-serving rows (weight {online_weight:g})" if n_online else "")
                 + f"; written to {out}", markup=False)
    for note in (unused_note, repeated_note, rows_note, bands_note):  # on stderr, as every command's warnings
        if note:
            sys.stderr.write(clean(f"warning: {note}") + "\n")


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
