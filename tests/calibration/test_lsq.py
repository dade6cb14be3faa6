"""The fit objective as a residual vector and its least-squares polish (fit-v9, issue 14)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import numpy as np
import pytest

from catalog import load_catalog
from optimizer.calibration.fit import (
    _field_knob,
    _override_knob,
    class_overrides,
    fit_params,
    online_fit_rows,
    prior_residuals,
    shrinkage_penalty,
)
from optimizer.calibration.lsq import (
    polish,
    residual_fn,
    robust_loss,
    robust_residuals,
    source_group_weights,
)
from optimizer.calibration.measurements import load_measurements
from optimizer.calibration.predict import (
    is_latency_row,
    latency_predictor,
    offline_skip_reason,
    online_predictor,
    predict_offline_throughput,
)
from optimizer.models.params import CalibrationParams, FactorOverride, load_params
from tests.conftest import CALIBRATION_CSV, EXAMPLES, MEASUREMENTS_2026_CSV, REPO

CAT = load_catalog()
METRICS = ("tpot_mean_ms", "ttft_mean_ms")


def reference_loss(usable, latency, online, metrics, online_weight, cat):
    """The fit's loss as written before the residual form (fit.py at 1ec80eb), kept as the reference."""
    measured = np.array([m.throughput_tok_s for m in usable], dtype=float)
    w = source_group_weights(usable)
    lat_measured = np.array([m.e2e_latency_s for m in latency], dtype=float)
    lat_w = source_group_weights(latency) if latency else np.zeros(0)

    def loss(p):
        pred = predict_offline_throughput(usable, cat, p).predicted
        err = np.log(np.where(np.isfinite(pred) & (pred > 0), pred, 1e-3) / measured)
        total = float(np.sum(w * err**2))
        if latency:
            found, _ = latency_predictor(latency, cat, p)
            lat = np.array([found[i][0].predicted if i in found else 1e3 for i in range(len(latency))])
            total += float(np.sum(lat_w * np.log(lat / lat_measured) ** 2))
        if online:
            found, _ = online_predictor(online, cat, p)
            for metric in metrics:
                err = [math.log(r.predicted / r.measured) for ps in found.values() for r in ps
                       if r.metric == metric and r.predicted > 0]
                total += online_weight * (float(np.mean(np.square(err))) if err else 25.0)
        return total

    return loss


@pytest.fixture(scope="module")
def small_rows():
    """60 offline max-throughput rows, 20 one-batch latency rows (MI300X vLLM) and the 30 online rows."""
    rows = load_measurements(CALIBRATION_CSV, CAT) + load_measurements(MEASUREMENTS_2026_CSV, CAT)
    usable = [m for m in rows if offline_skip_reason(m) is None][::10][:60]
    latency = [m for m in rows if is_latency_row(m)][::8][:20]
    online = online_fit_rows(rows)
    assert len(usable) == 60 and len(latency) == 20 and len(online) == 30
    return usable, latency, online


SHIPPED_SQUARED = load_params().model_copy(update={"fit_loss": "squared"})  # the shipped factors, the fit-v9 loss


@pytest.mark.parametrize("params", [SHIPPED_SQUARED, CalibrationParams(fit_loss="squared")], ids=["shipped", "defaults"])
def test_residuals_square_to_the_loss(small_rows, params):
    usable, latency, online = small_rows
    for weight in (0.0, 1.0, 2.5):
        on = online if weight > 0 else []
        want = reference_loss(usable, latency, on, METRICS, weight, CAT)(params)
        r = residual_fn(usable, latency, on, METRICS, weight, CAT)(params)
        assert float(np.sum(r**2)) == pytest.approx(want, rel=1e-12)
        assert want > 0


def test_an_online_metric_nobody_predicts_costs_25_times_its_weight(small_rows):
    """At a million requests/s every online row saturates, so neither metric has a prediction: 2 · w · 25."""
    usable, latency, online = small_rows
    flooded = [dataclasses.replace(m, request_rate_qps=1e6) for m in online]
    p = SHIPPED_SQUARED
    r = residual_fn(usable, latency, flooded, METRICS, 1.5, CAT)(p)
    offline_only = residual_fn(usable, latency, [], METRICS, 0.0, CAT)(p)
    assert float(np.sum(r**2)) == pytest.approx(float(np.sum(offline_only**2)) + 2 * 1.5 * 25.0, rel=1e-12)
    assert float(np.sum(r**2)) == pytest.approx(reference_loss(usable, latency, flooded, METRICS, 1.5, CAT)(p),
                                                rel=1e-12)


def test_prior_residuals_square_to_the_shrinkage_penalty():
    """The case of test_shrinkage's penalty (λ 0.5: 0.110452 + 2.162039), as residuals."""
    p = CalibrationParams(memory_bandwidth_efficiency=0.8, allreduce_latency_us=25.0, class_shrinkage=0.5,
                          overrides=[FactorOverride(generation="hopper", memory_bandwidth_efficiency=0.5,
                                                    alltoall_latency_us=200.0)])
    knobs = [_override_knob(0, "memory_bandwidth_efficiency", 0.3, 1.0), _override_knob(0, "alltoall_latency_us", 1, 200),
             _override_knob(0, "compute_efficiency", 0.05, 1.0, shrunk=False)]
    r = prior_residuals(knobs)(p)
    assert r.size == 2
    assert float(np.sum(r**2)) == pytest.approx(shrinkage_penalty(p, knobs), rel=1e-12)
    assert float(np.sum(r**2)) == pytest.approx(0.110452 + 2.162039, rel=1e-5)


def test_the_polish_recovers_the_parameters_that_made_the_rows():
    """Rows whose 'measured' throughput is the model's own prediction at known factors (bandwidth share
    0.55, compute share 0.45, 2.5 ms per step): from the defaults (0.8, 0.6, 1.0 ms) the polish alone
    finds them to 0.1 % (the loss there is exactly 0)."""
    rows = [m for m in load_measurements(CALIBRATION_CSV, CAT) if offline_skip_reason(m) is None
            and CAT.devices[m.device_key].generation in ("hopper", "ampere")
            and not CAT.models[m.model_key].is_moe]
    truth = CalibrationParams(memory_bandwidth_efficiency=0.55, compute_efficiency=0.45, step_overhead_ms=2.5)
    made = predict_offline_throughput(rows, CAT, truth).predicted
    assert np.all(np.isfinite(made)) and len(rows) >= 50
    synthetic = [dataclasses.replace(m, throughput_tok_s=float(t)) for m, t in zip(rows, made, strict=True)]
    knobs = [_field_knob("memory_bandwidth_efficiency", 0.3, 1.0), _field_knob("compute_efficiency", 0.1, 1.0),
             _field_knob("step_overhead_ms", 0.02, 30.0)]
    residuals = residual_fn(synthetic, [], [], [], 0.0, CAT)
    start = CalibrationParams()
    assert float(np.sum(residuals(start) ** 2)) > 1e-2
    fitted, loss = polish(start, knobs, residuals)
    assert fitted.memory_bandwidth_efficiency == pytest.approx(0.55, rel=1e-3)
    assert fitted.compute_efficiency == pytest.approx(0.45, rel=1e-3)
    assert fitted.step_overhead_ms == pytest.approx(2.5, rel=1e-3)
    assert loss < 1e-8


def test_the_polished_fit_is_no_worse_than_the_search_and_deterministic():
    """On the example's rows the polish starts where the coordinate search ends and keeps the best point,
    so its loss is not above the search's; the same rows and start give the same parameters."""
    rows = load_measurements(EXAMPLES / "measurements-example.csv", CAT)
    usable = [m for m in rows if offline_skip_reason(m) is None]
    devices = [CAT.devices[k] for k in sorted({m.device_key for m in usable})]
    _, knobs = class_overrides(usable, CAT, devices, True, True, a2a_start_us=8.0)
    residuals = residual_fn(usable, [], [], [], 0.0, CAT, prior_residuals(knobs))
    searched = fit_params(rows, CAT, start=CalibrationParams(), sweeps=2, optimizer="coordinate")
    polished = fit_params(rows, CAT, start=CalibrationParams(), sweeps=2)
    again = fit_params(rows, CAT, start=CalibrationParams(), sweeps=2)
    assert float(np.sum(residuals(polished) ** 2)) <= float(np.sum(residuals(searched) ** 2)) + 1e-15
    assert polished.model_dump(exclude={"fit"}) == again.model_dump(exclude={"fit"})


def test_an_unknown_optimizer_is_an_error():
    rows = load_measurements(EXAMPLES / "measurements-example.csv", CAT)
    with pytest.raises(ValueError, match="unknown fit optimizer 'newton'"):
        fit_params(rows, CAT, optimizer="newton")


def test_scipy_is_imported_only_when_a_fit_runs():
    """``gpuplan --help`` and importing the calibration package do not import scipy (the polish imports it)."""
    probe = ("import runpy, sys\nsys.argv = ['gpuplan', '--help']\nimport optimizer.calibration.calibrate\n"
             "try:\n    runpy.run_module('cli.app', run_name='__main__')\nexcept SystemExit:\n    pass\n"
             "print('scipy' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, check=True, capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "False"


# --- robust losses (fit-v10) ---------------------------------------------------------------------------


def test_robust_loss_values_on_paper():
    """ρ at z = 3 (soft_l1: 2(√4 − 1) = 2), z = 4 (huber: 2·√4 − 1 = 3; below 1 it is z), z = e − 1
    (cauchy: ln e = 1); every ρ is z to first order at 0 (z = 1e-6: within 1e-6 relative)."""
    assert robust_loss(np.array([3.0]), "soft_l1")[0] == pytest.approx(2.0, rel=1e-12)
    assert robust_loss(np.array([4.0, 0.25]), "huber") == pytest.approx([3.0, 0.25], rel=1e-12)
    assert robust_loss(np.array([math.e - 1.0]), "cauchy")[0] == pytest.approx(1.0, rel=1e-12)
    for loss in ("squared", "soft_l1", "huber", "cauchy"):
        assert robust_loss(np.array([1e-6]), loss)[0] == pytest.approx(1e-6, rel=1e-6)
    with pytest.raises(ValueError, match="unknown fit loss"):
        robust_loss(np.array([1.0]), "l1")


def test_robust_residuals_square_to_the_weighted_robust_loss():
    """sqrt(w)·sign(e)·C·sqrt(ρ((e/C)²)) squares to w·C²·ρ((e/C)²) and keeps the sign of e: for soft_l1 at
    C = 0.1, e = 0.3 (z = 9), w = 0.25: 0.25 · 0.01 · 2(√10 − 1) = 0.0108114; e = −0.3 gives its negative root."""
    p = CalibrationParams(fit_loss="soft_l1", fit_loss_scale_log=0.1)
    r = robust_residuals(np.array([0.3, -0.3, 0.0]), np.array([0.5, 0.5, 0.5]), p)
    assert r[0] ** 2 == pytest.approx(0.25 * 0.01 * 2 * (math.sqrt(10) - 1), rel=1e-12)
    assert r[0] ** 2 == pytest.approx(0.0108114, rel=1e-5)
    assert r[1] == pytest.approx(-r[0], rel=1e-12) and r[2] == 0.0
    # a tiny error is the squared loss's residual to O(e³): sqrt(w)·e
    assert robust_residuals(np.array([1e-4]), 0.5, p)[0] == pytest.approx(0.5e-4, rel=1e-6)
    # squared: exactly sqrt(w)·e whatever the scale
    assert robust_residuals(np.array([0.3]), 0.5, CalibrationParams(fit_loss="squared", fit_loss_scale_log=0.01))[0] == 0.15


@pytest.mark.parametrize("loss", ["soft_l1", "huber", "cauchy"])
def test_a_robust_fit_loss_is_the_rho_sum_of_the_squared_residuals(small_rows, loss):
    """The residual vector of a robust loss squares to Σ w·C²·ρ((e/C)²) over the rows, where sqrt(w)·e are
    the same rows' residuals under the squared loss (offline, latency and online slots; no prior here):
    the coordinate search (Σ r²) and the polish minimise one objective."""
    usable, latency, online = small_rows
    base = SHIPPED_SQUARED
    robust = base.model_copy(update={"fit_loss": loss, "fit_loss_scale_log": 0.08})
    fn = residual_fn(usable, latency, online, METRICS, 1.0, CAT)
    weighted_err = fn(base)
    w = np.concatenate([source_group_weights(usable), source_group_weights(latency)])
    n_rows = len(usable) + len(latency)
    e_rows = weighted_err[:n_rows] / np.sqrt(w)
    want = float(np.sum(w * 0.08**2 * robust_loss((e_rows / 0.08) ** 2, loss)))
    r = fn(robust)
    assert float(np.sum(r[:n_rows] ** 2)) == pytest.approx(want, rel=1e-10)
    assert np.all(np.sign(r) == np.sign(weighted_err))
    # a robust loss is below the squared one on every row with |e| > 0 (ρ(z) < z for z > 0)
    assert float(np.sum(r**2)) < float(np.sum(weighted_err**2))


def test_a_robust_fit_ignores_an_outlier_the_squared_fit_follows():
    """Rows made by the model at a bandwidth share of 0.55 (compute 0.45, 2.5 ms per step), one of them
    'measured' at 1/3 of that (a log error of 1.1 at the truth): the squared fit moves the shares to pull that
    row in, soft_l1 at C = 0.05 stays within 1 % of the truth (its pull on one row is bounded by 2C·|e'|)."""
    rows = [m for m in load_measurements(CALIBRATION_CSV, CAT) if offline_skip_reason(m) is None
            and CAT.devices[m.device_key].generation in ("hopper", "ampere")
            and not CAT.models[m.model_key].is_moe]
    truth = CalibrationParams(memory_bandwidth_efficiency=0.55, compute_efficiency=0.45, step_overhead_ms=2.5)
    made = predict_offline_throughput(rows, CAT, truth).predicted
    made[0] /= 3.0
    synthetic = [dataclasses.replace(m, throughput_tok_s=float(t)) for m, t in zip(rows, made, strict=True)]
    knobs = [_field_knob("memory_bandwidth_efficiency", 0.3, 1.0), _field_knob("compute_efficiency", 0.1, 1.0),
             _field_knob("step_overhead_ms", 0.02, 30.0)]
    residuals = residual_fn(synthetic, [], [], [], 0.0, CAT)
    squared, _ = polish(CalibrationParams(fit_loss="squared"), knobs, residuals)
    robust, _ = polish(CalibrationParams(fit_loss="soft_l1", fit_loss_scale_log=0.05), knobs, residuals)
    err = lambda p: max(abs(p.memory_bandwidth_efficiency / 0.55 - 1), abs(p.compute_efficiency / 0.45 - 1),  # noqa: E731
                        abs(p.step_overhead_ms / 2.5 - 1))
    assert err(robust) < 0.01
    assert err(squared) > 3 * err(robust)
