"""The fit objective as a residual vector, and a bounded least-squares polish of it (issue 14, fit-v9).

The loss of ``optimizer.calibration.fit`` is a weighted sum of squared log errors, so it is
``‖r(p)‖²`` of one residual vector ``r`` with the weights folded in (``residual_fn``):

- offline max-throughput rows: ``sqrt(w_i)·log(pred_i/meas_i)``, ``w_i`` = 1/(rows of its source group)
  (a row the model cannot predict counts as pred = 1e-3 tok/s);
- one-batch latency rows: ``sqrt(w_i)·log(pred_i/meas_i)`` with their own source-group weights
  (unpredictable: 1000 s);
- online rows, per metric (mean ITL, mean TTFT) over the n (row, metric) slots the serving model
  predicts unsaturated: ``sqrt(w_on/n)·log(pred/meas)``, the other slots 0, so their squares sum to
  ``w_on·mean(err²)``; one more residual ``sqrt(25·w_on)`` when no slot is predicted (the old 25 penalty);
- the class prior: ``sqrt(λ)·log(override/parent)`` per shrunk knob (``fit.shrinkage_penalty``).

With a robust ``CalibrationParams.fit_loss`` (fit-v10) every row's ``sqrt(w)·e`` above (e = the log
error) becomes ``sqrt(w)·sign(e)·C·sqrt(ρ((e/C)²))`` (``robust_residuals``), so ``‖r‖²`` is
``Σ w·C²·ρ((e/C)²)`` + the prior: the coordinate search and the polish minimise the same sum, and the
row weights multiply the loss, not its scale (scipy's own ``loss=`` would put C on ``sqrt(w)·e``, a
scale that changes with each source group's size). The prior and the no-prediction penalty stay squared.

``polish`` minimises ``‖r‖²`` with ``scipy.optimize.least_squares`` (trust-region reflective, the
knobs' bounds) over ``u = log(knob)``: a Gauss-Newton step on every knob at once, where the coordinate
search moves one knob at a time on a grid (``fit.coordinate_search``). The objective is piecewise
smooth (``floor`` of the batch, ``max`` of the rooflines), so the Jacobian is a forward difference of
``DIFF_STEP_LOG`` in log (a 1 % change of the knob): wider than the kinks of a batch floor at
batches of ~100, narrow enough for the curvature. Integer knobs (``max_batch_sequences``) are not
polished. scipy is imported here only, when a fit runs (``gpuplan --help`` never imports it).
Deterministic: the same rows and start give the same parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from catalog.load import Catalog
from optimizer.calibration.measurements import Measurement
from optimizer.calibration.predict import (
    latency_predictor,
    online_predictor,
    predict_offline_throughput,
)
from optimizer.models.params import CalibrationParams

DIFF_STEP_LOG = 0.01  # forward-difference step of the Jacobian in log(knob): a 1 % change
NONFINITE_RESIDUAL = 1e3  # stands for a residual the model makes infinite or NaN (squared: far above any loss)
MAX_ITERATIONS = 50  # trust-region iterations of a polish (each: one Jacobian = one evaluation per knob)
NO_ONLINE_PREDICTION_LOSS = 25.0  # loss per online metric whose rows the serving model predicts none of


def source_group_weights(rows: Sequence[Measurement]) -> np.ndarray:
    """1 / (rows of the same source group): equal total weight per source group."""
    counts: dict[str, int] = {}
    for m in rows:
        counts[m.source_group] = counts.get(m.source_group, 0) + 1
    return np.array([1.0 / counts[m.source_group] for m in rows])


def robust_loss(z: np.ndarray, loss: str) -> np.ndarray:
    """ρ(z) of ``CalibrationParams.fit_loss`` at z = (e/C)² (scipy.optimize.least_squares' convention):
    squared z; soft_l1 2(√(1+z) − 1); huber z if z ≤ 1 else 2√z − 1; cauchy ln(1 + z). Each is z + O(z²)
    at 0 (ρ(0) = 0, ρ'(0) = 1), so C²·ρ((e/C)²) → e² for |e| ≪ C; for |e| ≫ C it grows as 2C|e| (soft_l1,
    huber) or 2C²·ln(|e|/C) (cauchy)."""
    if loss == "squared":
        return z
    if loss == "soft_l1":
        return 2.0 * (np.sqrt(1.0 + z) - 1.0)
    if loss == "huber":
        return np.where(z <= 1.0, z, 2.0 * np.sqrt(np.maximum(z, 1.0)) - 1.0)
    if loss == "cauchy":
        return np.log1p(z)
    raise ValueError(f"unknown fit loss {loss!r}; known: squared, soft_l1, huber, cauchy")


def robust_residuals(err: np.ndarray, sqrt_w: np.ndarray | float, p: CalibrationParams) -> np.ndarray:
    """The residuals whose squares are the rows' weighted losses ``w·C²·ρ((e/C)²)`` (``robust_loss``):
    ``sqrt(w)·sign(e)·C·sqrt(ρ((e/C)²))``, = ``sqrt(w)·e`` for the squared loss (computed as that, so a
    squared fit is bit-identical to the fits before fit-v10). The signed square root is smooth at e = 0
    (it is e + O(e³)), so the polish's Gauss-Newton steps see the same loss as the coordinate search:
    one residual vector, one sum of squares, whatever the loss."""
    if p.fit_loss == "squared":
        return sqrt_w * err
    c = p.fit_loss_scale_log
    with np.errstate(invalid="ignore"):
        return sqrt_w * np.sign(err) * c * np.sqrt(robust_loss((err / c) ** 2, p.fit_loss))


def residual_fn(usable: Sequence[Measurement], latency: Sequence[Measurement], online: Sequence[Measurement],
                metrics: Sequence[str], online_weight: float, cat: Catalog,
                prior: Callable[[CalibrationParams], np.ndarray] | None = None
                ) -> Callable[[CalibrationParams], np.ndarray]:
    """``p → r(p)``, the residual vector whose sum of squares is the fit's loss (module docstring).
    ``prior``: ``p → sqrt(λ)·log(override/parent)`` of the shrunk knobs, appended (None: none)."""
    sqrt_w = np.sqrt(source_group_weights(usable))
    log_meas = np.log(np.array([m.throughput_tok_s for m in usable], dtype=float))
    lat_sqrt_w = np.sqrt(source_group_weights(latency)) if latency else np.zeros(0)
    lat_log_meas = np.log(np.array([m.e2e_latency_s for m in latency], dtype=float)) if latency else np.zeros(0)
    slots = {k: [(i, float(getattr(m, k))) for i, m in enumerate(online) if getattr(m, k)] for k in metrics}

    def online_residuals(p: CalibrationParams) -> list[np.ndarray]:
        found, _ = online_predictor(online, cat, p)
        out = []
        for metric in metrics:
            pred = {i: r.predicted for i, ps in found.items() for r in ps if r.metric == metric and r.predicted > 0}
            err = np.array([math.log(pred[i] / meas) if i in pred else 0.0 for i, meas in slots[metric]])
            n = len(pred)
            out.append(robust_residuals(err, math.sqrt(online_weight / n), p) if n else np.zeros(len(slots[metric])))
            out.append(np.array([0.0 if n else math.sqrt(online_weight * NO_ONLINE_PREDICTION_LOSS)]))
        return out

    def residuals(p: CalibrationParams) -> np.ndarray:
        pred = predict_offline_throughput(usable, cat, p).predicted
        parts = [robust_residuals(np.log(np.where(np.isfinite(pred) & (pred > 0), pred, 1e-3)) - log_meas, sqrt_w, p)]
        if latency:
            found, _ = latency_predictor(latency, cat, p)
            lat = np.array([found[i][0].predicted if i in found else 1e3 for i in range(len(latency))])
            parts.append(robust_residuals(np.log(lat) - lat_log_meas, lat_sqrt_w, p))
        if online:
            parts.extend(online_residuals(p))
        if prior is not None:
            parts.append(prior(p))
        return np.concatenate(parts)

    return residuals


def polish(params: CalibrationParams, knobs: Sequence, residuals: Callable[[CalibrationParams], np.ndarray],
           max_iterations: int = MAX_ITERATIONS) -> tuple[CalibrationParams, float]:
    """Minimise ``‖residuals(p)‖²`` over the continuous ``knobs`` (``fit._Knob``: get/set/low/high) from
    ``params`` with ``scipy.optimize.least_squares`` (method "trf", bounds = the knobs' bounds in log,
    ``x_scale`` 1 per log unit, a forward-difference Jacobian of ``DIFF_STEP_LOG`` in log, stepping
    backward at an upper bound), at most ``max_iterations`` steps (each 1 + len(knobs) evaluations).
    Returns the best point evaluated (never worse than ``params``) and its loss. A non-finite residual
    counts as ``NONFINITE_RESIDUAL``; a knob whose start lies outside its bounds is clipped into them."""
    from scipy.optimize import least_squares  # lazy: only a fit needs scipy

    if not knobs:
        return params, float(np.sum(residuals(params) ** 2))
    lo = np.log(np.array([k.low for k in knobs], dtype=float))
    hi = np.log(np.array([k.high for k in knobs], dtype=float))
    u0 = np.clip(np.log(np.array([k.get(params) for k in knobs], dtype=float)), lo, hi)
    best: dict = {"loss": math.inf, "p": params}

    def at(u: np.ndarray) -> CalibrationParams:
        p = params
        for k, x in zip(knobs, np.exp(np.clip(u, lo, hi)), strict=True):
            p = k.set(p, float(x))
        return p

    def evaluate(u: np.ndarray) -> np.ndarray:
        p = at(u)
        r = residuals(p)
        r = np.where(np.isfinite(r), r, NONFINITE_RESIDUAL)  # e.g. an infinite TTFT: a step to reject
        loss = float(np.sum(r**2))
        if loss < best["loss"]:
            best.update(loss=loss, p=p)
        return r

    def fun(u: np.ndarray) -> np.ndarray:  # least_squares asks for r at the point its Jacobian is taken
        key = u.tobytes()
        if key not in cache:
            cache.clear()
            cache[key] = evaluate(u)
        return cache[key]

    def jac(u: np.ndarray) -> np.ndarray:
        r0 = fun(u)
        out = np.empty((r0.size, u.size))
        for j in range(u.size):
            h = DIFF_STEP_LOG if u[j] + DIFF_STEP_LOG <= hi[j] else -DIFF_STEP_LOG
            v = u.copy()
            v[j] += h
            out[:, j] = (evaluate(v) - r0) / h
        return out

    cache: dict[bytes, np.ndarray] = {}
    start_loss = float(np.sum(residuals(params) ** 2))
    least_squares(fun, u0, jac=jac, bounds=(lo, hi), method="trf", x_scale=1.0, max_nfev=max_iterations,
                  xtol=1e-6, ftol=1e-8, gtol=1e-8)
    if best["loss"] < start_loss:
        return best["p"], best["loss"]
    return params, start_loss
