"""`optimizer.calibration.calibrate`: the one library call behind `gpuplan calibrate`."""

from __future__ import annotations

import optimizer.calibration.bands as bands_mod
import optimizer.calibration.calibrate as cal
from catalog import load_catalog
from optimizer.calibration.calibrate import calibrate, online_rows_used
from optimizer.calibration.fit import fit_params
from optimizer.calibration.measurements import load_measurements
from optimizer.models.params import CalibrationParams, FactorOverride
from tests.conftest import EXAMPLES


def test_calibrate_is_the_fit_plus_its_record():
    """Without bands it is fit_params on the same rows, with the data digest and coverage recorded;
    the example's 6 rows are offline rows, so no online row is used at any weight."""
    cat = load_catalog()
    rows = load_measurements(EXAMPLES / "measurements-example.csv", cat)
    got = calibrate(rows, cat, start=None, data_file="example", data_sha256="ab" * 32, online_weight=1.0,
                    bands=False)
    plain = fit_params(rows, cat, start=None, data_file="example", online_weight=1.0)
    assert got.fit.data_sha256 == "ab" * 32
    assert got.coverage is not None
    assert got.compute_efficiency == plain.compute_efficiency
    assert got.memory_bandwidth_efficiency == plain.memory_bandwidth_efficiency
    assert got.error_bands == plain.error_bands
    assert online_rows_used(rows, 0.0) == 0


def test_a_fit_resumes_the_per_class_factors_of_its_start():
    """With no sweep (and no polish) the fit changes nothing it searches: a generation override of the start (same
    selectors) keeps its value, where a fresh override would take the global 0.6 (its fields are None)."""
    cat = load_catalog()
    rows = load_measurements(EXAMPLES / "measurements-example.csv", cat)
    gens = sorted({cat.devices[m.device_key].generation for m in rows if m.device_key})
    assert len(gens) > 1  # the example measures two generations, so the fit makes generation overrides
    start = CalibrationParams(memory_bandwidth_efficiency=0.6,
                              overrides=[FactorOverride(generation=gens[0], memory_bandwidth_efficiency=0.71)])
    fitted = fit_params(rows, cat, start=start, sweeps=0, optimizer="coordinate")
    got = {o.selector: o for o in fitted.overrides}
    assert got[f"generation={gens[0]}"].memory_bandwidth_efficiency == 0.71
    assert got[f"generation={gens[1]}"].memory_bandwidth_efficiency is None


def test_leave_out_refits_keep_the_start_model_structure_only(monkeypatch):
    """With bands, every leave-out refit starts from the built-in defaults plus the start's
    offline_whole_prompts (the model it fits), never from the start's fitted factors (0.41 here)."""
    seen = []

    def fake_leave_out(rows, cat, start, by, **kw):
        seen.append(start)
        return []

    monkeypatch.setattr(cal, "leave_out", fake_leave_out)
    cat = load_catalog()
    rows = load_measurements(EXAMPLES / "measurements-example.csv", cat)
    start = CalibrationParams(memory_bandwidth_efficiency=0.41, offline_whole_prompts=True)
    cal.calibrate(rows, cat, start=start, data_file="example", data_sha256="ab" * 32, online_weight=0.0, bands=True)
    assert len(seen) == 3
    assert all(s == CalibrationParams(offline_whole_prompts=True) for s in seen)


def test_leave_out_refits_keep_the_fit_procedure_fields(monkeypatch):
    """class_shrinkage, fit_rounds and the fit loss (how the factors are fitted) travel to every leave-out refit,
    with the model structure, and nothing fitted does."""
    seen = []
    monkeypatch.setattr(cal, "leave_out", lambda rows, cat, start, by, **kw: seen.append(start) or [])
    cat = load_catalog()
    rows = load_measurements(EXAMPLES / "measurements-example.csv", cat)
    start = CalibrationParams(memory_bandwidth_efficiency=0.41, class_shrinkage=0.3, fit_rounds=2, fit_loss="soft_l1",
                              fit_loss_scale_log=0.07)
    cal.calibrate(rows, cat, start=start, data_file="example", data_sha256="ab" * 32, online_weight=0.0, bands=True)
    assert len(seen) == 3
    assert all(s == CalibrationParams(class_shrinkage=0.3, fit_rounds=2, fit_loss="soft_l1", fit_loss_scale_log=0.07)
               for s in seen)


def test_leave_out_refits_fit_at_the_full_fits_online_weight(monkeypatch):
    """Every leave-out refit fits the online rows at the weight the full fit used (the bands measure the procedure
    that ships), and ``bands.leave_out`` hands that weight to each ``fit_params`` call."""
    weights = []
    monkeypatch.setattr(cal, "leave_out", lambda rows, cat, start, by, **kw: weights.append(kw["online_weight"]) or [])
    cat = load_catalog()
    rows = load_measurements(EXAMPLES / "measurements-example.csv", cat)
    cal.calibrate(rows, cat, start=None, data_file="example", data_sha256="ab" * 32, online_weight=0.7, bands=True)
    assert weights == [0.7, 0.7, 0.7]

    fitted_at = []
    monkeypatch.setattr(bands_mod, "fit_params",
                        lambda train, cat, **kw: fitted_at.append(kw["online_weight"]) or CalibrationParams())
    bands_mod.leave_out(rows, cat, None, "device", online_weight=0.7)
    assert fitted_at and set(fitted_at) == {0.7}
