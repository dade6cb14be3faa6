"""Efficiency factors below MIN_EFFICIENCY are refused at load, and the fit never searches below it."""

from __future__ import annotations

import pytest

from catalog import load_catalog
from catalog.errors import ModelError
from optimizer.calibration.fit import _global_knobs, class_overrides
from optimizer.calibration.measurements import load_measurements
from optimizer.calibration.predict import offline_skip_reason
from optimizer.models.params import MIN_EFFICIENCY, CalibrationParams, load_params
from tests.conftest import CALIBRATION_CSV, MEASUREMENTS_2026_CSV

EFFICIENCIES = ("memory_bandwidth_efficiency", "compute_efficiency", "attention_efficiency",
                "prefill_attention_efficiency", "moe_efficiency", "link_efficiency", "pcie_link_efficiency")


@pytest.mark.parametrize("text,field", [
    ("compute_efficiency: 1.0e-300\n", "compute_efficiency"),
    ("attention_efficiency: 0.005\n", "attention_efficiency"),
    ("pcie_link_efficiency: 0.0099\n", "pcie_link_efficiency"),
    ("overrides:\n- {generation: hopper, moe_efficiency: 0.001}\n", r"overrides\.0\.moe_efficiency"),
])
def test_an_efficiency_below_one_percent_names_the_file_and_field(tmp_path, text, field):
    # compute_efficiency 1e-300 gave a TPOT of 1.2e299 ms and an optimize 'relax the SLO' that never named the file
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ModelError, match=rf"p\.yaml: {field}: \S+ is below 0\.01: an efficiency is the share"):
        load_params(path)


def test_an_efficiency_at_the_bound_is_accepted(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("compute_efficiency: 0.01\nlink_efficiency: 0.01\n")
    assert load_params(path).compute_efficiency == 0.01


def test_the_fit_searches_no_efficiency_below_the_bound():
    # a knob whose lower bound sat under MIN_EFFICIENCY could write parameters that `--params` then refuses
    cat = load_catalog()
    rows = load_measurements(CALIBRATION_CSV, cat) + load_measurements(MEASUREMENTS_2026_CSV, cat)
    usable = [m for m in rows if offline_skip_reason(m) is None]
    devices = [cat.devices[k] for k in sorted({m.device_key for m in usable})]
    _, global_knobs = _global_knobs(CalibrationParams(), usable, cat, fit_request_overhead=True)
    _, class_knobs = class_overrides(usable, cat, devices, True, True, a2a_start_us=8.0)
    knobs = [k for k in global_knobs + class_knobs if k.name.rsplit(".", 1)[-1] in EFFICIENCIES]
    assert {k.name.rsplit(".", 1)[-1] for k in knobs} == set(EFFICIENCIES)  # each one is searched
    assert min(k.low for k in knobs) == 0.02 >= MIN_EFFICIENCY  # decode attention's floor


def test_the_shipped_parameters_stay_inside_the_bound():
    shipped = load_params()
    values = [getattr(shipped, f) for f in EFFICIENCIES] + [
        getattr(o, f) for o in shipped.overrides for f in EFFICIENCIES if getattr(o, f, None) is not None]
    assert min(values) == pytest.approx(0.1098, abs=1e-4)  # attention_efficiency, 11x the bound
