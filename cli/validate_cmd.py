"""`gpuplan validate MEASUREMENTS.csv`: predicted vs measured, with the error."""

from __future__ import annotations

import math
import os
from pathlib import Path

from catalog.errors import GpuplanError
from cli.common import fmt, load, load_calibration, print_json, stdout, table
from optimizer.calibration.measurements import load_measurements
from optimizer.calibration.report import validate
from optimizer.calibration.shipped import SHIPPED_MEASUREMENT_FILES, shipped_measurements
from optimizer.models.fidelity import fidelity_of
from optimizer.models.params import MIN_CONFIGURATION_ROWS, configuration_of


def resolve_measurement_paths(paths: list[Path], shipped: bool, plan_ok: bool = True) -> list[Path]:
    """``paths``, plus the shipped measurement CSVs with ``--shipped``; an error when there are none (``plan_ok``:
    the command also takes a plan, as validate does and calibrate does not)."""
    out = list(paths) + ([shipped_measurements(n) for n in SHIPPED_MEASUREMENT_FILES] if shipped else [])
    if not out:
        raise GpuplanError(f"give {'a plan .yaml file or ' if plan_ok else ''}measurements .csv files, or --shipped "
                           "for the shipped calibration data")
    if plan_ok and len(out) > 1 and not all(p.suffix.lower() == ".csv" for p in out):
        raise GpuplanError("validate takes one plan .yaml file, or one or more measurements .csv files")
    seen: dict[Path, Path] = {}
    for p in out:  # the same file twice (or a link to it) would count, and weigh in a fit, every row twice
        real = Path(os.path.realpath(p))
        if real in seen:
            also = " (one of the --shipped files)" if shipped and p in out[len(paths):] else ""
            raise GpuplanError(f"{p}{also}: is the same file as {seen[real]}; give each measurements file once")
        seen[real] = p
    return out


def missed_configurations(by_configuration: dict, cat, params) -> list[list]:
    """[key, n, ratio, band] of the configurations with at least MIN_CONFIGURATION_ROWS offline rows whose median
    measured / predicted (``by_configuration``: key → {n, median_measured_over_predicted}) lies outside the band
    of their class under ``params`` (``fidelity_of``: device, engine, ep), worst first."""
    out = []
    for key, rec in by_configuration.items():
        device, engine, _, _, _, ep = configuration_of(key)
        r = rec["median_measured_over_predicted"]
        if rec["n"] < MIN_CONFIGURATION_ROWS or device not in cat.devices:
            continue
        band = fidelity_of(cat.devices[device], params, cat.devices, engine=engine, ep=ep)
        if not band.low_factor <= r <= band.high_factor:
            out.append((abs(math.log(r)), [key, rec["n"], f"x{r:.3f}",
                                           f"{band.class_} x{band.low_factor:.2f}-{band.high_factor:.2f}"]))
    return [row for _, row in sorted(out, key=lambda t: -t[0])]


def parallelism_label(tp: int, pp: int, ep: int) -> str:
    """The table's parallelism cell: tp always, pp and ep when above 1 (a DEP2 row is 'tp1 ep2', not 'tp1')."""
    return " ".join([f"tp{tp}"] + [f"{name}{n}" for name, n in (("pp", pp), ("ep", ep)) if n > 1])


def load_all(paths: list[Path], cat) -> list:
    """The rows of every measurements file, in order."""
    return [m for p in paths for m in load_measurements(p, cat)]


def validate_measurements(paths: list[Path], catalog: Path | None, params: Path | None, json_out: bool,
                          model_config: Path | None = None) -> None:
    """Predict every row of ``paths`` it can and print the errors (see ``optimizer.calibration.report``); a
    ``--model-config`` model is known to the rows as a catalog model is (it was read by nothing before)."""
    cat = load(catalog, model_config)
    p = load_calibration(params, cat)
    result = validate(load_all(paths, cat), cat, p)
    path = ", ".join(str(p) for p in paths)
    if json_out:
        print_json(result)
        return
    rows = [[r["device"], r["model"], r["precision"], parallelism_label(r["tp"], r["pp"], r["ep"]),
             f"{fmt(r['input_tokens'])}/{fmt(r['output_tokens'])}", r["source_group"], r["metric"],
             fmt(r["measured"]), fmt(r["predicted"]), f"{r['pct_error']:+.1f}%"] for r in result["rows"]]
    stdout.print(table(f"{path}: predicted vs measured", ["device", "model", "prec", "par", "in/out", "source",
                                                          "metric", "measured", "predicted", "error"],
                       rows, right={"measured", "predicted", "error"}))

    def summary_rows(groups: dict) -> list[list]:
        return [[k, v["n"], fmt(v["median_abs_pct_error"], 1), fmt(v["p90_abs_pct_error"], 1)]
                for k, v in groups.items()]

    cols = ["", "n", "median |err| %", "p90 |err| %"]
    right = {"n", "median |err| %", "p90 |err| %"}
    stdout.print(table("by device", cols, summary_rows(result["by_device"]), right))
    stdout.print(table("by device and engine", cols, summary_rows(result["by_device_engine"]), right))
    stdout.print(table("by source group", cols, summary_rows(result["by_source_group"]), right))
    stdout.print(table("by metric", cols, summary_rows(result["by_metric"]), right))
    stdout.print(table("offline / online", cols, summary_rows(result["by_kind"]), right))
    stdout.print(table("overall", cols, summary_rows({"all predicted rows": result["overall"]}), right))
    if missed := missed_configurations(result["by_configuration"], cat, p):
        stdout.print(table(f"configurations (>= {MIN_CONFIGURATION_ROWS} offline rows) whose median lies outside the "
                           "80 % band of their fidelity class", ["configuration", "n", "measured / predicted", "band"],
                           missed, right={"n", "measured / predicted"}))
    if result["skipped"]:
        stdout.print(table(f"{len(result['skipped'])} rows not predicted", ["line", "row", "why"],
                           [[s["line"], s["row"], s["reason"]] for s in result["skipped"]]))
