"""A measurements row whose tp/pp/ep cannot run its model is skipped with the reason, not fatal to the file
(README: rows that cannot be predicted are listed as skipped)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from catalog import load_catalog
from optimizer.calibration.measurements import load_measurements
from optimizer.calibration.predict import offline_skip_reason

CAT = load_catalog()
TWO_ROWS = Path(__file__).resolve().parents[1] / "data" / "measurements-two-rows.csv"


@pytest.mark.parametrize(("column", "value", "why"), [
    ("ep", "3", "ep 3: llama-3.1-8b is a dense model; expert parallelism needs an MoE model"),
    ("tp", "1000000", "tp 1000000: llama-3.1-8b has 32 attention heads, which do not split 1000000 ways; "
                      "use a tp that divides 32 (1, 2, 4, 8, 16, 32)"),
    ("pp", "64", "pp 64: llama-3.1-8b has 32 layers and each pipeline stage holds whole layers; use pp <= 32"),
])
def test_a_row_that_cannot_run_is_skipped_with_its_reason(tmp_path, column, value, why):
    rows = list(csv.reader(io.StringIO(TWO_ROWS.read_text("utf-8"), newline="")))
    header = rows[0] if column in rows[0] else [*rows[0], column]
    bad = list(rows[1]) + ([] if column in rows[0] else [""])
    bad[header.index(column)] = value
    good = list(rows[1]) + ([] if column in rows[0] else [""])
    path = tmp_path / "m.csv"
    with path.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([header, bad, good])
    got = load_measurements(path, CAT)
    assert got[0].model_key == "llama-3.1-8b"  # a dense 8B model with 32 heads and 32 layers
    assert got[0].unresolved == why and offline_skip_reason(got[0]) == why
    assert got[1].unresolved is None


@pytest.mark.parametrize("own", ["ttft_p90_ms", "tpot_p50_ms", "e2e_p99.9_s"])
def test_a_latency_column_of_the_users_own_is_not_a_typo(tmp_path, own):
    """ttft_p90_ms is 0.91 similar to ttft_p99_ms, but it names a statistic of its own: kept, not refused
    (the near-miss check still refuses engnie: tests/corpus/measurements-misspelled-column.csv)."""
    rows = list(csv.reader(io.StringIO(TWO_ROWS.read_text("utf-8"), newline="")))
    path = tmp_path / "m.csv"
    with path.open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([[*rows[0], own], [*rows[1], "12.5"]])
    assert len(load_measurements(path, CAT)) == 1
