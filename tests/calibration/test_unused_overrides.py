"""A class override's value that no measured row takes is not kept (``fit.unused_override_fields``).

A lookup takes each factor from the last matching override that sets it (``CalibrationParams.factors_for``), so a
memory-type override whose every device also has a generation override setting the same factor is never seen by the
fit: its value is whatever the search left (fit-v11's GDDR bandwidth 0.30 sat at its knob's lower bound) and it would
reach only devices the data never held (the T4, a Turing GDDR6 card, at 0.30 instead of a fitted value).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from catalog import load_catalog
from optimizer.calibration.fit import unused_override_fields
from optimizer.calibration.measurements import load_measurements
from optimizer.calibration.shipped import SHIPPED_MEASUREMENT_FILES, shipped_measurements
from optimizer.models.params import CalibrationParams, FactorOverride, load_params

BW = "memory_bandwidth_efficiency"


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


@pytest.fixture(scope="module")
def rows(cat):
    return [m for name in SHIPPED_MEASUREMENT_FILES for m in load_measurements(shipped_measurements(name), cat)]


def _gddr_then_ada() -> CalibrationParams:
    return CalibrationParams(overrides=[FactorOverride(memory_type="gddr", memory_bandwidth_efficiency=0.3),
                                        FactorOverride(generation="ada", memory_bandwidth_efficiency=0.667)])


def test_a_value_every_row_takes_from_a_later_override_is_unused(cat, rows):
    l40s = [m for m in rows if m.device_key == "l40s"]
    assert l40s
    assert unused_override_fields(_gddr_then_ada(), l40s, cat) == [(0, BW)]
    # the order decides: with the generation first, the memory type's value is the one L40S takes
    flipped = CalibrationParams(overrides=list(reversed(_gddr_then_ada().overrides)))
    assert unused_override_fields(flipped, l40s, cat) == [(0, BW)]


def test_a_row_of_a_class_only_the_first_override_covers_makes_it_used(cat, rows):
    l40s = [m for m in rows if m.device_key == "l40s"]
    t4 = replace(l40s[0], device_key="t4")  # a GDDR device of a generation without an override of its own
    assert cat.devices["t4"].memory_type == "gddr" and cat.devices["t4"].generation != "ada"
    assert unused_override_fields(_gddr_then_ada(), [*l40s, t4], cat) == []


def test_the_shipped_parameters_hold_no_value_their_rows_never_take(cat, rows):
    """The shipped fit (``gpuplan calibrate --shipped``) drops such values, so the T4 gets the fitted global
    bandwidth efficiency, not the GDDR override's unfitted one."""
    params = load_params(None, cat)
    assert unused_override_fields(params, rows, cat) == []
    assert params.factors_for(cat.devices["t4"]).memory_bandwidth_efficiency == pytest.approx(
        params.memory_bandwidth_efficiency, rel=1e-12)
    # the devices the fit measured keep the values their rows were fitted with
    assert params.factors_for(cat.devices["l40s"]).memory_bandwidth_efficiency == pytest.approx(0.66663, abs=5e-5)


def test_the_global_bandwidth_is_the_median_of_the_generation_values_that_remain(cat):
    """Unused values are dropped before the typical-generation defaults (``fit._typical_generation_defaults``), so
    the global bandwidth efficiency a new generation gets is the median of the four generation overrides the rows
    take (Ada 0.66663, Ampere 0.65061, Blackwell 0.55298, Hopper 0.65016: (0.65016 + 0.65061)/2 = 0.65038), not of
    five with CDNA 3's unfitted 0.479 (median 0.65016, the order before)."""
    params = load_params(None, cat)
    gens = sorted(o.generation for o in params.overrides
                  if o.generation is not None and o.memory_bandwidth_efficiency is not None)
    assert gens == ["ada", "ampere", "blackwell", "hopper"]
    assert params.memory_bandwidth_efficiency == pytest.approx((0.65016 + 0.65061) / 2, abs=5e-5)
