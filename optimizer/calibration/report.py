"""Predict measured rows and report the error: per row, per device, per source group, overall.

Predictors are functions ``(rows, catalog, params) -> (predictions, reasons)`` where
``predictions`` maps a row index to the metrics predicted for it and ``reasons`` maps a
row index to why the predictor cannot predict it. ``PREDICTORS`` holds the offline
max-throughput predictor and the online-serving predictor (latency and throughput at a
fixed request rate, from the serving model); more can be appended (or passed as
``predictors=``). A row no predictor handles is listed
under ``skipped`` with every predictor's reason.

Error of one prediction = 100 · |predicted / measured − 1| (absolute % error).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from catalog.load import Catalog
from optimizer.calibration.fit import predict_offline_throughput
from optimizer.calibration.measurements import Measurement
from optimizer.models.params import CalibrationParams


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
    """Output tokens/s of offline max-throughput rows (``optimizer.calibration.fit``)."""
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


def _is_online(m: Measurement) -> bool:
    return "online" in m.scenario.lower() or "online" in m.source_group.lower()


def online_predictor(rows: Sequence[Measurement], cat: Catalog,
                     params: CalibrationParams) -> tuple[dict[int, list[RowPrediction]], dict[int, str]]:
    """Online-serving rows at a fixed request rate (``optimizer.models.serving.serve_at_rate``).

    Poisson arrivals at ``request_rate_qps`` (the sources do not state the arrival process),
    fixed input/output lengths. Predicts ``ttft_mean_ms``, ``tpot_mean_ms`` (mean time per
    output token after the first; the TensorRT-LLM rows give mean inter-token latency, the
    same quantity for fixed lengths) and ``output_tokens_per_s`` (= λ·O while the replica
    keeps up; at saturation the offline max throughput). Rows at an unlimited rate (INF)
    are an offline run and are left to the offline predictor.
    """
    from optimizer.models import serving
    from optimizer.models.perf import build_configs
    from workloads.spec import LengthDist

    out: dict[int, list[RowPrediction]] = {}
    reasons: dict[int, str] = {}
    for i, m in enumerate(rows):
        if not _is_online(m):
            reasons[i] = "not an online-serving row"
            continue
        lam = m.request_rate_qps
        if m.unresolved or m.model_key is None or m.device_key is None or m.precision_key is None:
            reasons[i] = m.unresolved or "unresolved names"
            continue
        if lam is None or not np.isfinite(lam) or lam <= 0:
            reasons[i] = "online row without a finite request rate (INF = all requests at once)"
            continue
        if not m.input_tokens or not m.output_tokens:
            reasons[i] = "online row without input/output lengths"
            continue
        c = build_configs(cat.models[m.model_key], [(cat.devices[m.device_key], cat.precisions[m.precision_key],
                                                     m.tp, m.pp)], params)
        if not c.runnable[0]:
            reasons[i] = c.reason[0] or "cannot run"
            continue
        prompt, output = LengthDist(mean=m.input_tokens), LengthDist(mean=m.output_tokens)
        r = serving.serve_at_rate(c, lam, prompt, output, params)
        sat = bool(r.saturated[0])
        detail: dict[str, float | int | str | None] = {
            "qps": lam, "utilization": round(float(r.utilization[0]), 3), "saturated": str(sat),
            "running_batch": round(float(r.running_batch[0]), 1)}
        preds = []
        if sat:
            tok_s, _ = serving.batch_throughput(c, prompt, output, params)
            tput = float(tok_s[0])
        else:
            tput = float(r.output_tokens_per_s[0])
            if m.ttft_mean_ms:
                preds.append(RowPrediction("ttft_mean_ms", m.ttft_mean_ms, float(r.ttft_mean_ms[0]), detail))
            if m.tpot_mean_ms:
                preds.append(RowPrediction("tpot_mean_ms", m.tpot_mean_ms, float(r.tpot_mean_ms[0]), detail))
        if m.throughput_tok_s:
            preds.append(RowPrediction("output_tokens_per_s", m.throughput_tok_s, tput, detail))
        if preds:
            out[i] = preds
        else:
            reasons[i] = "saturated at this rate and no throughput measured"
    return out, reasons


PREDICTORS: list[Predictor] = [offline_predictor, online_predictor]


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
