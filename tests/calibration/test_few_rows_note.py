"""`gpuplan calibrate` warns when its rows are too few for the values it moves (``few_rows_note``)."""

from __future__ import annotations

from optimizer.calibration.calibrate import ROWS_PER_FITTED_VALUE, few_rows_note, fitted_value_count
from optimizer.models.params import CalibrationParams, load_params

SHIPPED = load_params(None)


def _with_rows(rows: int) -> CalibrationParams:
    return SHIPPED.model_copy(update={"fit": SHIPPED.fit.model_copy(update={"rows_used": rows})})


def test_the_shipped_fit_moves_36_values_on_enough_rows():
    # 18 top-level values away from their defaults + 18 factors set by class overrides, on 635 offline rows
    assert fitted_value_count(SHIPPED) == 36
    assert SHIPPED.fit.rows_used == 635 and few_rows_note(SHIPPED) is None


def test_fewer_than_three_rows_a_value_is_warned():
    assert ROWS_PER_FITTED_VALUE == 3.0
    assert few_rows_note(_with_rows(108)) is None  # 3 × 36
    note = few_rows_note(_with_rows(105), online_rows=2)  # 107 rows
    assert note is not None and "moved 36 values on 107 rows" in note and "calibrate --shipped" in note
    # the advice reproduces the shipped fit: without --params the fit starts from the defaults, whose loss is the
    # shipped fit's (`gpuplan calibrate --shipped` reproduced optimizer/models/data/calibration.yaml bit for bit)
    assert "calibrate --shipped YOURS.csv --out FILE" in note and "--params" not in note
    defaults = CalibrationParams()
    assert (defaults.fit_loss, defaults.fit_loss_scale_log) == (SHIPPED.fit_loss, SHIPPED.fit_loss_scale_log)


def test_defaults_move_nothing():
    assert fitted_value_count(CalibrationParams()) == 0
