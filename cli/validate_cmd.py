"""`gpuplan validate MEASUREMENTS.csv`: predicted vs measured, with the error."""

from __future__ import annotations

from pathlib import Path

from cli.common import fmt, load, print_json, stdout, table
from optimizer.calibration.measurements import load_measurements
from optimizer.calibration.report import validate
from optimizer.models.params import load_params


def validate_measurements(path: Path, catalog: Path | None, params: Path | None, json_out: bool) -> None:
    """Predict every row of ``path`` it can and print the errors (see ``optimizer.calibration.report``)."""
    cat = load(catalog)
    result = validate(load_measurements(path, cat), cat, load_params(params))
    if json_out:
        print_json(result)
        return
    rows = [[r["device"], r["model"], r["precision"], f"tp{r['tp']}" + (f"pp{r['pp']}" if r["pp"] > 1 else ""),
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
    stdout.print(table("by source group", cols, summary_rows(result["by_source_group"]), right))
    stdout.print(table("by metric", cols, summary_rows(result["by_metric"]), right))
    stdout.print(table("overall", cols, summary_rows({"all predicted rows": result["overall"]}), right))
    if result["skipped"]:
        stdout.print(table(f"{len(result['skipped'])} rows not predicted", ["line", "row", "why"],
                           [[s["line"], s["row"], s["reason"]] for s in result["skipped"]]))
