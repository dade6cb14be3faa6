"""Hierarchical shrinkage of the class overrides and restarted search rounds (model-v8, issue 14)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from catalog import load_catalog
from optimizer.calibration.fit import (
    _override_knob,
    class_overrides,
    fit_params,
    shrinkage_penalty,
)
from optimizer.calibration.lsq import residual_fn
from optimizer.calibration.measurements import load_measurements
from optimizer.calibration.predict import offline_skip_reason
from optimizer.calibration.shipped import SHIPPED_MEASUREMENT_FILES, shipped_measurements
from optimizer.models.params import CalibrationParams, FactorOverride
from tests.conftest import EXAMPLES


def test_penalty_is_lambda_times_squared_log_deviation_from_the_parent():
    """λ 0.5, a generation bandwidth share 0.5 under a global 0.8: 0.5·ln(0.625)² = 0.5·0.220903 = 0.110452;
    a Hopper all-to-all time of 200 µs over an all-reduce latency of 25 µs adds λ·ln(8)² = 0.5·4.324077 = 2.162039;
    an override left at None sits at its parent and costs nothing."""
    p = CalibrationParams(memory_bandwidth_efficiency=0.8, allreduce_latency_us=25.0, class_shrinkage=0.5,
                          overrides=[FactorOverride(generation="hopper", memory_bandwidth_efficiency=0.5,
                                                    alltoall_latency_us=200.0),
                                     FactorOverride(generation="ada")])
    knobs = [_override_knob(0, "memory_bandwidth_efficiency", 0.3, 1.0), _override_knob(0, "alltoall_latency_us", 1, 200),
             _override_knob(1, "memory_bandwidth_efficiency", 0.3, 1.0)]
    assert shrinkage_penalty(p, knobs[:1]) == pytest.approx(0.110452, rel=1e-5)
    assert shrinkage_penalty(p, knobs) == pytest.approx(0.110452 + 2.16204, rel=1e-5)
    assert shrinkage_penalty(p.model_copy(update={"class_shrinkage": 0.0}), knobs) == 0.0
    assert math.log(0.625) ** 2 == pytest.approx(0.220903, rel=1e-5)


def test_a_strong_prior_keeps_every_class_at_its_parent():
    """On the example's rows (two generations), λ = 1e8 makes any deviation cost more than the whole
    data term, so each fitted class factor ends where its parent (global) value ends; λ = 0 lets them move.
    The deviation left falls as 1/λ once the prior dominates (measured with the MoE glue knob fitted on the
    example's gpt-oss rows: 1.7e-9 at λ 1e6, 5e-11 at 1e7, 7.7e-12 at 1e8; λ 1e6 held 1e-9 before that knob)."""
    cat = load_catalog()
    rows = load_measurements(EXAMPLES / "measurements-example.csv", cat)
    free = fit_params(rows, cat, start=CalibrationParams(), sweeps=2)
    tied = fit_params(rows, cat, start=CalibrationParams(class_shrinkage=1e8), sweeps=2)
    gens = [o for o in tied.overrides if o.generation is not None]
    assert gens
    for o in gens:
        assert (o.memory_bandwidth_efficiency or tied.memory_bandwidth_efficiency) == pytest.approx(
            tied.memory_bandwidth_efficiency, rel=1e-9)
    assert any(o.memory_bandwidth_efficiency not in (None, free.memory_bandwidth_efficiency)
               for o in free.overrides if o.generation is not None)


def test_a_second_round_never_fits_worse():
    """fit_rounds 2 restarts the search from where round 1 ended (a search never accepts a worse point),
    so its objective is not above one round's; on the example's 4 offline rows it is below (2.9e-5 -> 4.0e-6
    at this commit), so a second round that is not run, or restarts from the start, fails here. The coordinate
    search alone: with the polish (the default) one round already reaches the minimum of these 4 rows."""
    cat = load_catalog()
    rows = load_measurements(EXAMPLES / "measurements-example.csv", cat)
    usable = [m for m in rows if offline_skip_reason(m) is None]
    residuals = residual_fn(usable, [], [], [], 0.0, cat)

    def loss(p: CalibrationParams) -> float:
        return float(np.sum(residuals(p) ** 2))
    one = fit_params(rows, cat, start=CalibrationParams(), sweeps=2, optimizer="coordinate")
    two = fit_params(rows, cat, start=CalibrationParams(fit_rounds=2), sweeps=2, optimizer="coordinate")
    assert loss(two) <= loss(one) + 1e-12
    assert loss(two) < 0.5 * loss(one)


def test_only_the_device_classes_are_shrunk():
    """On the shipped rows, the generation and memory-type knobs have a parent; the dtype, weight-only and
    engine knobs do not (the global compute efficiency is the 16-bit GEMMs' own value, not a parent)."""
    cat = load_catalog()
    rows = [m for name in SHIPPED_MEASUREMENT_FILES for m in load_measurements(shipped_measurements(name), cat)]
    usable = [m for m in rows if offline_skip_reason(m) is None]
    devices = [cat.devices[k] for k in sorted({m.device_key for m in usable})]
    overrides, knobs = class_overrides(usable, cat, devices, True, True, a2a_start_us=8.0)
    for k in knobs:
        o = overrides[int(k.name[len("overrides["):k.name.index("]")])]
        assert (k.parent is not None) == (o.generation is not None or o.memory_type is not None), k.name
    assert any(k.parent is None for k in knobs) and any(k.parent is not None for k in knobs)
