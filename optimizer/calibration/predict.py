"""Predictors: what the models say about each measured row (shared by the fit and the report).

Predictors are functions ``(rows, catalog, params) -> (predictions, reasons)`` where
``predictions`` maps a row index to the metrics predicted for it and ``reasons`` maps a
row index to why the predictor cannot predict it. ``PREDICTORS`` holds:

- ``offline_predictor``: offline max-throughput rows (all requests at once): output tokens/s
  of ``optimizer.models.perf.offline_throughput_tokens_s``, the batch limited by the KV cache,
  the engine's scheduler cap or the cap the run states (``max_batch``);
- ``latency_predictor``: offline latency rows (vLLM ``benchmark_latency``: one fixed batch of
  b prompts, prefilled together, then every output token): ``e2e_latency_s`` =
  prefill_s(L, b) + (O − 1) · decode_step(b, L + O/2) (decode attention is linear in the
  context, so the mean context gives the sum exactly for a model without a sliding window);
- ``online_predictor``: online rows at a fixed request rate (the serving model);
- ``concurrency_predictor``: online rows at a fixed concurrency C (closed loop: a user sends
  the next request when the last one finished): C sequences decode, the other users' prompts
  (C − 1)·L/O tokens per step share the steps; ITL = that step, TTFT = the front-end time + one
  step that prefills the whole prompt beside C − 1 decodes; throughput = C·O / (TTFT + (O − 1)·ITL).

Every predictor builds its configurations with the engine, expert-parallel degree and batch
cap the row states (``row_configs``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from catalog.load import Catalog
from optimizer.calibration.measurements import Measurement
from optimizer.models import serving
from optimizer.models.configs import build_configs
from optimizer.models.params import CalibrationParams
from optimizer.models.perf import decode_step_s, offline_throughput_tokens_s, prefill_s
from workloads.spec import LengthDist


@dataclass(frozen=True)
class Prediction:
    """Predicted value of each row (NaN where unpredictable) and why not."""

    predicted: np.ndarray
    batch: np.ndarray
    skipped: list[str | None]


def offline_skip_reason(m: Measurement) -> str | None:
    """Why an offline row cannot be predicted, or None."""
    if m.unresolved:
        return m.unresolved
    if not m.is_offline:
        return "not an offline max-throughput row (latency-under-load rows need the serving model)"
    if m.input_tokens is None or m.output_tokens is None or m.input_tokens < 1 or m.output_tokens < 1:
        return "input_len/output_len missing"
    if m.throughput_tok_s is None or m.throughput_tok_s <= 0:
        return "throughput_tok_s missing"
    if "speculative" in m.scenario.lower():
        return "speculative decoding (MTP) is not modelled: a draft step accepts several tokens"
    return None


def row_configs(rows: Sequence[Measurement], idx: Sequence[int], cat: Catalog, params: CalibrationParams):
    """The :class:`optimizer.models.configs.Configs` of rows ``idx`` (one model): device, precision, tp, pp,
    and the engine, expert-parallel degree and batch cap the run stated."""
    model = cat.models[rows[idx[0]].model_key]  # type: ignore[index]
    combos = [(cat.devices[rows[i].device_key], cat.precisions[rows[i].precision_key],  # type: ignore[index]
               rows[i].tp, rows[i].pp) for i in idx]
    return build_configs(model, combos, params, engines=[rows[i].engine for i in idx],
                         ep=[rows[i].ep for i in idx], max_batch=[rows[i].max_batch for i in idx])


def predict_offline_throughput(rows: Sequence[Measurement], cat: Catalog,
                               params: CalibrationParams) -> Prediction:
    """Output tokens/s of the replica for each offline row (vectorised per model)."""
    n = len(rows)
    pred = np.full(n, np.nan)
    batch = np.full(n, np.nan)
    skipped: list[str | None] = [offline_skip_reason(m) for m in rows]
    by_model: dict[str, list[int]] = defaultdict(list)
    for i, m in enumerate(rows):
        if skipped[i] is None:
            by_model[m.model_key].append(i)  # type: ignore[index]
    for idx in by_model.values():
        c = row_configs(rows, idx, cat, params)
        inp = np.array([rows[i].input_tokens for i in idx], dtype=float)
        out = np.array([rows[i].output_tokens for i in idx], dtype=float)
        b, tput = offline_throughput_tokens_s(c, inp, out)
        for j, i in enumerate(idx):
            if not c.supported[j]:
                skipped[i] = c.reason[j]
            elif b[j] < 1:
                skipped[i] = c.reason[j] or "model predicts not even one sequence fits in memory"
            else:
                pred[i] = tput[j]
                batch[i] = b[j]
    return Prediction(pred, batch, skipped)


@dataclass(frozen=True)
class RowPrediction:
    metric: str  # e.g. "output_tokens_per_s", "ttft_mean_ms"
    measured: float
    predicted: float
    detail: dict[str, float | int | bool | str | None]

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


def is_online(m: Measurement) -> bool:
    """A row measured under online serving (the scenario or the source group says 'online')."""
    return "online" in m.scenario.lower() or "online" in m.source_group.lower()


def is_fixed_concurrency(m: Measurement) -> bool:
    """An online row driven at a fixed number of concurrent users, not at a request rate."""
    return is_online(m) and "concurrency" in m.scenario.lower() and not m.request_rate_qps


def is_online_rate(m: Measurement) -> bool:
    """An online row at a fixed request rate (what the serving model predicts)."""
    return is_online(m) and not is_fixed_concurrency(m)


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
    out: dict[int, list[RowPrediction]] = {}
    reasons: dict[int, str] = {}
    groups: dict[tuple, list[int]] = defaultdict(list)  # one vectorised evaluation per (model, lengths)
    for i, m in enumerate(rows):
        lam = m.request_rate_qps
        if not is_online_rate(m):
            reasons[i] = "not an online-serving row at a fixed request rate"
        elif m.unresolved or m.model_key is None or m.device_key is None or m.precision_key is None:
            reasons[i] = m.unresolved or "unresolved names"
        elif lam is None or not np.isfinite(lam) or lam <= 0:
            reasons[i] = "online row without a finite request rate (INF = all requests at once)"
        elif not m.input_tokens or not m.output_tokens:
            reasons[i] = "online row without input/output lengths"
        else:
            groups[(m.model_key, m.input_tokens, m.output_tokens)].append(i)
    for (_, n_in, n_out), idx in groups.items():
        c = row_configs(rows, idx, cat, params)
        prompt, output = LengthDist(mean=n_in), LengthDist(mean=n_out)
        lam = np.array([rows[i].request_rate_qps for i in idx], dtype=float)
        ok = np.asarray(c.runnable, dtype=bool)
        r = serving.serve_at_rate(c, np.where(ok, lam, 1.0), prompt, output, params, percentiles=False)
        tok_sat = serving.batch_throughput(c, prompt, output, params)[0] if bool(np.any(r.saturated)) else None
        for j, i in enumerate(idx):
            m = rows[i]
            if not ok[j]:
                reasons[i] = c.reason[j] or "cannot run"
                continue
            sat = bool(r.saturated[j])
            detail: dict[str, float | int | bool | str | None] = {
                "qps": float(lam[j]), "utilization": round(float(r.utilization[j]), 3), "saturated": sat,
                "running_batch": round(float(r.running_batch[j]), 1)}
            preds = []
            if sat:
                tput = float(tok_sat[j])  # type: ignore[index]
            else:
                tput = float(r.output_tokens_per_s[j])
                if m.ttft_mean_ms:
                    preds.append(RowPrediction("ttft_mean_ms", m.ttft_mean_ms, float(r.ttft_mean_ms[j]), detail))
                if m.tpot_mean_ms:
                    preds.append(RowPrediction("tpot_mean_ms", m.tpot_mean_ms, float(r.tpot_mean_ms[j]), detail))
            if m.throughput_tok_s:
                preds.append(RowPrediction("output_tokens_per_s", m.throughput_tok_s, tput, detail))
            if preds:
                out[i] = preds
            else:
                reasons[i] = "saturated at this rate and no throughput measured"
    return out, reasons


def is_latency_row(m: Measurement) -> bool:
    """An offline latency row the latency predictor can take (names resolved, batch, lengths, e2e)."""
    return (not m.unresolved and m.is_offline and "latency" in m.scenario.lower() and bool(m.e2e_latency_s)
            and bool(m.concurrency) and bool(m.input_tokens) and bool(m.output_tokens))


def latency_predictor(rows: Sequence[Measurement], cat: Catalog,
                      params: CalibrationParams) -> tuple[dict[int, list[RowPrediction]], dict[int, str]]:
    """``e2e_latency_s`` of offline latency rows: one batch of b = ``concurrency`` prompts of L
    tokens prefilled together, then O − 1 decode steps of the b sequences (module docstring)."""
    out: dict[int, list[RowPrediction]] = {}
    reasons: dict[int, str] = {}
    by_model: dict[str, list[int]] = defaultdict(list)
    for i, m in enumerate(rows):
        if m.unresolved:
            reasons[i] = m.unresolved
        elif not is_latency_row(m):
            reasons[i] = "not an offline latency row (one batch: e2e_latency_s, batch, input/output lengths)"
        else:
            by_model[m.model_key].append(i)  # type: ignore[index]
    for idx in by_model.values():
        c = row_configs(rows, idx, cat, params)
        b = np.array([rows[i].concurrency for i in idx], dtype=float)
        inp = np.array([rows[i].input_tokens for i in idx], dtype=float)
        outp = np.array([rows[i].output_tokens for i in idx], dtype=float)
        e2e = prefill_s(c, inp, b) + (outp - 1.0) * decode_step_s(c, b, inp + outp / 2.0)
        for j, i in enumerate(idx):
            if not c.runnable[j]:
                reasons[i] = c.reason[j] or "cannot run"
            elif b[j] * (inp[j] + outp[j]) > c.kv_capacity_tokens[j]:
                reasons[i] = f"batch {b[j]:g} of {inp[j] + outp[j]:g} tokens does not fit in the KV cache"
            else:
                out[i] = [RowPrediction("e2e_latency_s", float(rows[i].e2e_latency_s), float(e2e[j]),  # type: ignore[arg-type]
                                        {"batch": int(b[j])})]
    return out, reasons


def concurrency_predictor(rows: Sequence[Measurement], cat: Catalog,
                          params: CalibrationParams) -> tuple[dict[int, list[RowPrediction]], dict[int, str]]:
    """Mean TTFT, mean ITL and output tokens/s of online rows at a fixed concurrency (module docstring)."""
    out: dict[int, list[RowPrediction]] = {}
    reasons: dict[int, str] = {}
    for i, m in enumerate(rows):
        if not is_fixed_concurrency(m):
            reasons[i] = "not an online row at a fixed concurrency"
            continue
        if m.unresolved or not (m.concurrency and m.input_tokens and m.output_tokens):
            reasons[i] = m.unresolved or "fixed-concurrency row without concurrency or lengths"
            continue
        c = row_configs(rows, [i], cat, params)
        if not c.runnable[0]:
            reasons[i] = c.reason[0] or "cannot run"
            continue
        users, n_in, n_out = float(m.concurrency), float(m.input_tokens), float(m.output_tokens)
        ctx = n_in + n_out / 2.0
        itl = float(decode_step_s(c, users, ctx, (users - 1.0) * n_in / n_out, n_in / 2.0)[0])
        ttft = c.request_overhead_s + float(decode_step_s(c, users - 1.0, ctx, n_in, n_in / 2.0)[0])
        detail: dict[str, float | int | str | None] = {"concurrency": int(users)}
        preds = []
        if m.tpot_mean_ms:
            preds.append(RowPrediction("tpot_mean_ms", m.tpot_mean_ms, itl * 1e3, detail))
        if m.ttft_mean_ms:
            preds.append(RowPrediction("ttft_mean_ms", m.ttft_mean_ms, ttft * 1e3, detail))
        if m.throughput_tok_s:
            preds.append(RowPrediction("output_tokens_per_s", m.throughput_tok_s,
                                       users * n_out / (ttft + (n_out - 1.0) * itl), detail))
        out[i] = preds
    return out, reasons


PREDICTORS: list[Predictor] = [offline_predictor, latency_predictor, online_predictor, concurrency_predictor]


