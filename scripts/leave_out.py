"""Leave-one-device-out and leave-one-generation-out errors and error-band coverage (issue 14).

Usage: python scripts/leave_out.py [--sweeps 3] [--params FILE] [--json OUT.json]

For every device (then every generation) of the shipped measurements: refit the factors
without its rows (``optimizer.calibration.bands.leave_out``, starting from the defaults or
--params), predict its offline rows (max-throughput output tokens/s and one-batch e2e
latency), and print the median |error|. Then the coverage of the 80 % bands of the shipped
parameters (``error_bands``: class b for a held-out device, class c for a held-out generation)
on those predictions, with each band's half-width. Targets (issue 14): median <= 15 % per
held-out device, <= 25 % per held-out generation, coverage 70-90 %, median half-width < 25 %.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from catalog import load_catalog  # noqa: E402
from optimizer.calibration.bands import inside, leave_out  # noqa: E402
from optimizer.calibration.measurements import load_measurements  # noqa: E402
from optimizer.calibration.shipped import SHIPPED_MEASUREMENT_FILES, shipped_measurements  # noqa: E402
from optimizer.models.params import CalibrationParams, load_params  # noqa: E402

TARGETS = {"device": 15.0, "generation": 25.0}
BAND_CLASS = {"device": "b", "generation": "c"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=3, help="coordinate-search sweeps per refit")
    ap.add_argument("--params", type=Path, default=None, help="start of every refit (default: built-in defaults)")
    ap.add_argument("--bands-from", type=Path, default=None, help="parameters whose error bands are checked "
                    "(default: the shipped calibration.yaml)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    args = ap.parse_args()
    cat = load_catalog()
    rows = [m for name in SHIPPED_MEASUREMENT_FILES for m in load_measurements(shipped_measurements(name), cat)]
    start = load_params(args.params) if args.params else CalibrationParams()
    bands = load_params(args.bands_from).error_bands if args.bands_from else load_params().error_bands
    report: dict = {}
    ok = True
    for by in ("device", "generation"):
        t0 = time.perf_counter()
        held = leave_out(rows, cat, start, by, sweeps=args.sweeps)
        groups = sorted({h.group for h in held})
        band = bands.get(BAND_CLASS[by])  # type: ignore[call-overload]
        print(f"\nleave-one-{by}-out ({time.perf_counter() - t0:.0f} s; target median <= {TARGETS[by]:g} %; "
              f"band class {BAND_CLASS[by]}"
              + (f" x{band.low_factor:.3f}..x{band.high_factor:.3f})" if band else ": none in the params)"))
        print(f"{'held out':<16}{'n':>5}{'median |err| %':>16}{'p90 |err| %':>13}{'in band %':>11}  target")
        report[by] = {}
        for g in groups:
            hs = [h for h in held if h.group == g]
            err = np.array([h.abs_pct_error for h in hs])
            med = float(np.median(err))
            cov = float(np.mean([inside(h, band) for h in hs]) * 100) if band else float("nan")
            met = med <= TARGETS[by]
            ok &= met
            report[by][g] = {"n": len(hs), "median_abs_pct_error": round(med, 2),
                             "p90_abs_pct_error": round(float(np.percentile(err, 90)), 2),
                             "band_coverage_pct": round(cov, 1), "met": met}
            print(f"{g:<16}{len(hs):>5}{med:>16.1f}{np.percentile(err, 90):>13.1f}{cov:>11.1f}  "
                  f"{'met' if met else 'MISSED'}")
        if band:
            cov = float(np.mean([inside(h, band) for h in held]) * 100)
            half = (band.high_factor - band.low_factor) / 2 * 100
            report[by]["_band"] = {"coverage_pct": round(cov, 1), "half_width_pct": round(half, 1)}
            print(f"{'all':<16}{len(held):>5}{'':>16}{'':>13}{cov:>11.1f}  coverage target 70-90 %; "
                  f"band half-width {half:.1f} % (target < 25 %)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
