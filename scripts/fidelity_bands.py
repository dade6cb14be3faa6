"""Reproduce the out-of-sample bands of ``optimizer.models.fidelity`` from a measurements CSV.

    python scripts/fidelity_bands.py MEASUREMENTS.csv [--params FILE]

Predicts every output-throughput row it can (``optimizer.calibration.report.validate``) and
prints, per fidelity class of the row's device under the calibration, the rows and the
10th/50th/90th percentile of measured / predicted. Run on the 2026 measurements (B200, B300,
H200, MI300X rows the shipped calibration was not fitted on) it gives the constants
SAME_GENERATION_BAND and DATASHEET_ONLY_BAND.
"""

from __future__ import annotations

import argparse

import numpy as np

from catalog import load_catalog
from optimizer.calibration.measurements import load_measurements
from optimizer.calibration.report import validate
from optimizer.models.fidelity import fidelity_of
from optimizer.models.params import load_params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--params", default=None)
    args = ap.parse_args()
    cat = load_catalog()
    params = load_params(args.params)
    result = validate(load_measurements(args.csv, cat), cat, params)
    ratios: dict[str, list[float]] = {}
    for r in result["rows"]:
        if r["metric"] != "output_tokens_per_s" or r["device"] not in cat.devices:
            continue
        cls = fidelity_of(cat.devices[r["device"]], params, cat.devices).class_
        ratios.setdefault(cls, []).append(r["measured"] / r["predicted"])
    for cls, v in sorted(ratios.items()):
        p10, p50, p90 = np.percentile(v, [10, 50, 90])
        print(f"{cls:16s} rows {len(v):4d}  measured/predicted p10 {p10:.3f}  p50 {p50:.3f}  p90 {p90:.3f}")


if __name__ == "__main__":
    main()
