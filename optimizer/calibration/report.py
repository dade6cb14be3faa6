"""Predict measured rows and report the error: per row, per device, per source group, overall.

The predictors are in ``optimizer.calibration.predict`` (``PREDICTORS``; others can be
passed as ``predictors=``). A row no predictor handles is listed under ``skipped`` with
every predictor's reason.

Error of one prediction = 100 · |predicted / measured − 1| (absolute % error).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from catalog.load import Catalog
from optimizer.calibration.measurements import Measurement
from optimizer.calibration.predict import PREDICTORS, Predictor, RowPrediction, is_online
from optimizer.models.params import CalibrationParams, configuration_key, default_engine


def _summary(errors: Sequence[float]) -> dict[str, float | int]:
    e = np.asarray(errors, dtype=float)
    if not e.size:
        return {"n": 0, "median_abs_pct_error": None, "p90_abs_pct_error": None}  # type: ignore[dict-item]
    return {"n": int(e.size), "median_abs_pct_error": round(float(np.median(e)), 2),
            "p90_abs_pct_error": round(float(np.percentile(e, 90)), 2)}


def validate(rows: Sequence[Measurement], cat: Catalog, params: CalibrationParams,
             predictors: Sequence[Predictor] | None = None) -> dict:
    """``{rows, by_device, by_device_engine, by_source_group, by_metric, by_kind, overall, by_configuration,
    skipped}`` for every predictable row.

    Every summary holds n, median and p90 of the absolute % error. ``by_device_engine`` keys are
    ``device/engine`` (the row's engine, else the device's default); ``by_kind`` splits
    ``offline`` (max-throughput and one-batch latency runs) from ``online`` (serving at a rate or
    a concurrency: TTFT, ITL, throughput). ``by_configuration`` (``configuration_key``: device/engine/
    model/precision/tpT/epE): n and the median measured / predicted output tokens/s of the offline
    max-throughput rows, as ``FitRecord.by_configuration`` records it for a fit.
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
    by_dev_engine: dict[str, list[float]] = defaultdict(list)
    by_kind: dict[str, list[float]] = defaultdict(list)
    by_config: dict[str, list[float]] = defaultdict(list)
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
            engine = m.engine or (default_engine(cat.devices[m.device_key]) if m.device_key else "?")
            kind = "online" if is_online(m) else "offline"
            by_dev_engine[f"{device}/{engine}"].append(err)
            by_kind[kind].append(err)
            if kind == "offline" and p.metric == "output_tokens_per_s" and m.model_key and m.precision_key:
                by_config[configuration_key(device, engine, m.model_key, m.precision_key, m.tp, m.ep)].append(
                    p.measured / p.predicted)
            out_rows.append({
                "row_id": m.row_id, "line": m.line, "source_group": m.source_group, "device": device,
                "engine": engine, "kind": kind,
                "model": m.model_key, "precision": m.precision_key, "tp": m.tp, "pp": m.pp, "ep": m.ep,
                "input_tokens": m.input_tokens, "output_tokens": m.output_tokens, "metric": p.metric,
                "measured": round(p.measured, 3), "predicted": round(p.predicted, 3),
                "pct_error": round((p.predicted / p.measured - 1.0) * 100.0, 2), **p.detail,
            })
    all_err = [e for errs in by_device.values() for e in errs]
    return {
        "rows": out_rows,
        "by_device": {k: _summary(v) for k, v in sorted(by_device.items())},
        "by_device_engine": {k: _summary(v) for k, v in sorted(by_dev_engine.items())},
        "by_source_group": {k: _summary(v) for k, v in sorted(by_group.items())},
        "by_kind": {k: _summary(v) for k, v in sorted(by_kind.items())},
        "by_metric": {k: _summary(v) for k, v in sorted(by_metric.items())},
        "overall": _summary(all_err),
        "by_configuration": {k: {"n": len(v), "median_measured_over_predicted": round(float(np.median(v)), 4)}
                             for k, v in sorted(by_config.items())},
        "skipped": skipped,
    }
