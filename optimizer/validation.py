"""Predict measured rows and report the error: per row, per device, per source group, overall.

Predictors are functions ``(rows, catalog, params) -> (predictions, reasons)`` where
``predictions`` maps a row index to the metrics predicted for it and ``reasons`` maps a
row index to why the predictor cannot predict it. ``PREDICTORS`` holds the offline
max-throughput predictor; the serving model adds a latency-under-load predictor by
appending to it (or by passing ``predictors=``). A row no predictor handles is listed
under ``skipped`` with every predictor's reason.

Error of one prediction = 100 · |predicted / measured − 1| (absolute % error).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from catalog.load import Catalog
from optimizer.calibrate import predict_offline_throughput
from optimizer.measurements import Measurement
from optimizer.params import CalibrationParams


@dataclass(frozen=True)
class RowPrediction:
    metric: str  # e.g. "output_tokens_per_s", "ttft_mean_ms"
    measured: float
    predicted: float
    detail: dict[str, float | int | str | None]

    @property
    def abs_pct_error(self) -> float:
        return abs(self.predicted / self.measured - 1.0) * 100.0


Predictor = Callable[[Sequence[Measurement], Catalog, CalibrationParams],
                     tuple[dict[int, list[RowPrediction]], dict[int, str]]]


def offline_predictor(rows: Sequence[Measurement], cat: Catalog,
                      params: CalibrationParams) -> tuple[dict[int, list[RowPrediction]], dict[int, str]]:
    """Output tokens/s of offline max-throughput rows (``optimizer.calibrate``)."""
    pred = predict_offline_throughput(rows, cat, params)
    out: dict[int, list[RowPrediction]] = {}
    reasons: dict[int, str] = {}
    for i, m in enumerate(rows):
        if np.isfinite(pred.predicted[i]):
            out[i] = [RowPrediction("output_tokens_per_s", float(m.throughput_tok_s),  # type: ignore[arg-type]
                                    float(pred.predicted[i]), {"batch": int(pred.batch[i])})]
        else:
            reasons[i] = pred.skipped[i] or "not predictable"
    return out, reasons


PREDICTORS: list[Predictor] = [offline_predictor]


def _summary(errors: Sequence[float]) -> dict[str, float | int]:
    e = np.asarray(errors, dtype=float)
    if not e.size:
        return {"n": 0, "median_abs_pct_error": None, "p90_abs_pct_error": None}  # type: ignore[dict-item]
    return {"n": int(e.size), "median_abs_pct_error": round(float(np.median(e)), 2),
            "p90_abs_pct_error": round(float(np.percentile(e, 90)), 2)}


def validate(rows: Sequence[Measurement], cat: Catalog, params: CalibrationParams,
             predictors: Sequence[Predictor] | None = None) -> dict:
    """``{rows, by_device, by_source_group, overall, skipped}`` for every predictable row.

    ``overall``/``by_device`` hold n, median and p90 of the absolute % error.
    """
    predictors = PREDICTORS if predictors is None else predictors
    found: dict[int, list[RowPrediction]] = defaultdict(list)
    why: dict[int, list[str]] = defaultdict(list)
    for predictor in predictors:
        preds, reasons = predictor(rows, cat, params)
        for i, ps in preds.items():
            found[i].extend(ps)
        for i, r in reasons.items():
            why[i].append(r)
    out_rows: list[dict] = []
    by_device: dict[str, list[float]] = defaultdict(list)
    by_group: dict[str, list[float]] = defaultdict(list)
    by_metric: dict[str, list[float]] = defaultdict(list)
    skipped: list[dict] = []
    for i, m in enumerate(rows):
        if i not in found:
            skipped.append({"row_id": m.row_id, "line": m.line, "row": m.label,
                            "reason": "; ".join(dict.fromkeys(why.get(i, ["no predictor for this row"])))})
            continue
        for p in found[i]:
            err = p.abs_pct_error
            device = m.device_key or m.gpu_name
            by_device[device].append(err)
            by_group[m.source_group].append(err)
            by_metric[p.metric].append(err)
            out_rows.append({
                "row_id": m.row_id, "line": m.line, "source_group": m.source_group, "device": device,
                "model": m.model_key, "precision": m.precision_key, "tp": m.tp, "pp": m.pp,
                "input_tokens": m.input_tokens, "output_tokens": m.output_tokens, "metric": p.metric,
                "measured": round(p.measured, 3), "predicted": round(p.predicted, 3),
                "pct_error": round((p.predicted / p.measured - 1.0) * 100.0, 2), **p.detail,
            })
    all_err = [e for errs in by_device.values() for e in errs]
    return {
        "rows": out_rows,
        "by_device": {k: _summary(v) for k, v in sorted(by_device.items())},
        "by_source_group": {k: _summary(v) for k, v in sorted(by_group.items())},
        "by_metric": {k: _summary(v) for k, v in sorted(by_metric.items())},
        "overall": _summary(all_err),
        "skipped": skipped,
    }
