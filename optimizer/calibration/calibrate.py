"""The one library call behind ``gpuplan calibrate``: fit, then (optionally) leave-out bands.

``calibrate(rows, cat, ...)`` = ``fit_params`` on every row, the data's sha256 and coverage
recorded in the result, and — with ``bands`` — one refit per held-out source group, device and
generation (``optimizer.calibration.bands``), whose residuals give each fidelity class its
error band. Every refit starts from the built-in defaults, neither from the full fit's result nor
from its start (``--params``: an earlier fit, whose per-class factors saw the held-out rows and
which ``fit_params`` resumes); only the start's model-structure choices
(``STRUCTURE_FIELDS``: ``offline_whole_prompts`` and its ``offline_prefill_chunk_tokens``,
``ep_allgather``, the fit's ``class_shrinkage``, ``fit_rounds``, ``fit_loss`` and ``fit_loss_scale_log``, the bound
of an unmeasured GEMM dtype ``unmeasured_dtype_speedup_cap``), which no fit moves, are kept, and each refit has the
full fit's ``online_weight``, so the refits fit the same model the same way (each refit records its own
``measured_compute_dtypes``: a held-out generation can take a dtype's rows with it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from catalog.load import Catalog
from optimizer.calibration.bands import coverage, error_bands, leave_out, leave_out_summary
from optimizer.calibration.fit import fit_params, online_fit_rows
from optimizer.calibration.measurements import Measurement
from optimizer.models.params import FACTOR_FIELDS, CalibrationParams

LEAVE_OUT_GROUPINGS = ("source_group", "device", "generation")
STRUCTURE_FIELDS = ("offline_whole_prompts", "offline_prefill_chunk_tokens", "ep_allgather", "class_shrinkage",
                    "fit_rounds", "fit_loss", "fit_loss_scale_log", "unmeasured_dtype_speedup_cap")


def structure_of(start: CalibrationParams | None) -> CalibrationParams | None:
    """The built-in defaults with ``start``'s structural fields (``STRUCTURE_FIELDS``); None without a start."""
    if start is None:
        return None
    return CalibrationParams(**{k: getattr(start, k) for k in STRUCTURE_FIELDS})


def calibrate(rows: Sequence[Measurement], cat: Catalog, *, start: CalibrationParams | None, data_file: str,
              data_sha256: str, online_weight: float, bands: bool, where: str = "") -> CalibrationParams:
    """Fitted parameters for ``rows``, with the fit record, coverage and (``bands``) error bands; ``where`` names
    the data in errors (``fit_params``)."""
    fitted = fit_params(rows, cat, start=start, data_file=data_file, online_weight=online_weight, where=where)
    fitted = fitted.model_copy(update={"fit": fitted.fit.model_copy(update={"data_sha256": data_sha256}),
                                       "coverage": coverage(rows, cat)})
    if not bands:
        return fitted
    structure = structure_of(start)
    held = [leave_out(rows, cat, structure, by, online_weight=online_weight) for by in LEAVE_OUT_GROUPINGS]
    bands_by_class = error_bands(*held)
    summary = {by: leave_out_summary(h, bands_by_class) for by, h in zip(LEAVE_OUT_GROUPINGS, held, strict=True)}
    return fitted.model_copy(update={"error_bands": bands_by_class,
                                      "fit": fitted.fit.model_copy(update={"leave_out": summary})})


def unused_rows_note(rows_by_file: Sequence[tuple[str, Sequence[Measurement]]]) -> str | None:
    """One line naming the rows no fit can use because a name or the sharding is unknown to the catalog
    (``Measurement.unresolved``), or None: a typo such as gpu_key ``H100-SMX`` drops its row, which the
    fit's row count alone never said (``gpuplan validate`` lists every row it does not predict)."""
    bad = [(name, m) for name, rows in rows_by_file for m in rows if m.unresolved]
    if not bad:
        return None
    shown = "; ".join(f"{name} line {m.line}: {m.unresolved}" for name, m in bad[:3])
    more = f"; and {len(bad) - 3} more (`gpuplan validate` lists them)" if len(bad) > 3 else ""
    return (f"{len(bad)} row{'s' if len(bad) > 1 else ''} not used in the fit: {shown}{more}; "
            "fix the name or the sharding, or drop the row")


def duplicate_rows_note(rows_by_file: Sequence[tuple[str, Sequence[Measurement]]]) -> str | None:
    """One line naming rows that repeat an earlier one in every column but ``row_id`` (a measurement pasted twice,
    or the shipped file given again beside ``--shipped``), or None: the fit weighs each copy as a measurement of
    its own, so a repeated row counts twice without a word."""
    first: dict[tuple, tuple[str, int]] = {}
    repeats = []
    for name, rows in rows_by_file:
        for m in rows:
            fields = dataclasses.asdict(m)
            fields.pop("row_id")
            fields.pop("line")
            key = tuple(sorted((k, repr(v)) for k, v in fields.items()))
            if key in first:
                repeats.append(((name, m.line), first[key]))
            else:
                first[key] = (name, m.line)
    if not repeats:
        return None
    shown = "; ".join(f"{n} line {line} repeats {n0} line {line0}" for (n, line), (n0, line0) in repeats[:3])
    more = f"; and {len(repeats) - 3} more" if len(repeats) > 3 else ""
    return (f"{len(repeats)} row{'s' if len(repeats) > 1 else ''} repeat{'' if len(repeats) > 1 else 's'} another "
            f"in every column, so the fit counts it twice: {shown}{more}; drop the copies (the shipped measurements "
            "are in the fit already with --shipped)")


def online_rows_used(rows: Sequence[Measurement], online_weight: float) -> int:
    """How many online-serving rows the fit used (none at weight 0)."""
    return len(online_fit_rows(rows)) if online_weight > 0 else 0


# what each class's leave-out refit needs in the data (optimizer.calibration.bands.error_bands)
BAND_NEEDS = {"a": "rows of a device/engine from two or more source groups",
              "b": "two or more devices of one generation",
              "c": "two or more generations"}


def missing_bands_note(params: CalibrationParams) -> str | None:
    """One line naming the fidelity classes the leave-out refits gave no band (the data held nothing to hold
    out for them) and what each needs, or None when every class has one. Without its band a class is rated by
    the residual constants of ``optimizer.models.fidelity`` (a measured device by the fit's in-sample p90)."""
    missing = [k for k in "abc" if k not in params.error_bands]
    if not missing:
        return None
    needs = "; ".join(f"{k} needs {BAND_NEEDS[k]}" for k in missing)
    insample = " (a measured device: by the fit's own in-sample error)" if "a" in missing else ""
    return (f"no leave-out band for fidelity class {', '.join(missing)} ({needs}): --params rates "
            f"{'those classes' if len(missing) > 1 else 'that class'} by the built-in residual bands{insample}; "
            "add rows from another source group, device or generation (or calibrate with --shipped) for bands "
            "from held-out data")



# Rows (offline + online) per fitted value below which `gpuplan calibrate` warns that the fit says little beyond
# its rows: the shipped fit moves 36 values on 635 offline rows (17.6 per value); examples/measurements-example.csv
# moves 22 on 4 offline and 2 online rows and matches them to 0.0 %.
ROWS_PER_FITTED_VALUE = 3.0


def fitted_value_count(params: CalibrationParams) -> int:
    """Values the fit moved: top-level numeric fields away from their defaults, plus every factor a class
    override sets."""
    default = CalibrationParams()
    top = sum(1 for k, v in params.model_dump(exclude={"overrides", "fit", "error_bands", "coverage"}).items()
              if isinstance(v, (int, float)) and not isinstance(v, bool) and v != getattr(default, k))
    return top + sum(1 for o in params.overrides for k in FACTOR_FIELDS if getattr(o, k, None) is not None)


def few_rows_note(params: CalibrationParams, online_rows: int = 0) -> str | None:
    """One line when the fit moved more values than its rows can pin down (fewer than ROWS_PER_FITTED_VALUE rows
    per value), or None: such a fit matches its rows closely whatever the truth, and every device a plan may
    buy — the ones the rows never measured too — takes its values."""
    if params.fit is None:
        return None
    rows, values = params.fit.rows_used + online_rows, fitted_value_count(params)
    if not values or rows >= ROWS_PER_FITTED_VALUE * values:
        return None
    return (f"the fit moved {values} values on {rows} rows (fewer than {ROWS_PER_FITTED_VALUE:g} rows a value): its "
            f"{params.fit.median_abs_pct_error:g} % median error on them says little beyond them, and every device "
            "a plan may buy takes these values, the unmeasured ones too; to add your rows to the shipped "
            "measurements instead: `gpuplan calibrate --shipped YOURS.csv --out FILE` (the shipped fit's start and "
            "loss; --no-bands skips the slow leave-out refits)")
