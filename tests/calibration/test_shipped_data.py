"""The measurements ship inside the package (optimizer/calibration/data) with their sources,
and the example measurements CSV is a few of those rows, validated through the CLI."""

from __future__ import annotations

import csv
import json

import pytest

from catalog import load_catalog
from catalog.errors import GpuplanError
from optimizer.calibration.measurements import REQUIRED_COLUMNS, load_measurements
from optimizer.calibration.shipped import (
    SHIPPED_MEASUREMENT_FILES,
    shipped_data_dir,
    shipped_measurements,
)
from tests.conftest import EXAMPLES, REPO

CAT = load_catalog()
EXAMPLE_CSV = EXAMPLES / "measurements-example.csv"


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("name,count", [("calibration.csv", 462), ("measurements-2026.csv", 383)])
def test_shipped_measurements_load_and_resolve(name, count):
    """Row counts as collected (reference README: 462 and 383 rows); every device, model and
    precision name resolves against the catalog (the 2026 models are in it)."""
    path = shipped_measurements(name)
    assert path.parent == shipped_data_dir() and path.is_relative_to(REPO)
    rows = load_measurements(path, CAT)
    assert len(rows) == count
    assert [m.label for m in rows if m.unresolved] == []


def test_sources_md_names_every_source_group_with_its_url():
    """SOURCES.md has a table row for each source_group, carrying the URL of that group's rows."""
    text = (shipped_data_dir() / "SOURCES.md").read_text(encoding="utf-8")
    for name in SHIPPED_MEASUREMENT_FILES:
        for row in _rows(shipped_measurements(name)):
            group = row["source_group"]
            assert f"| `{group}` |" in text, group
            url = next(w for w in row["source"].split() if w.startswith("http") or w.startswith("NVIDIA/"))
            line = next(li for li in text.splitlines() if li.startswith(f"| `{group}` |"))
            host = url.split("/")[2] if url.startswith("http") else "github.com/NVIDIA/TensorRT-LLM"
            assert host in line, (group, host)


def test_unknown_shipped_file_suggests():
    with pytest.raises(GpuplanError, match="did you mean 'calibration.csv'"):
        shipped_measurements("calibraton.csv")


def test_example_csv_rows_are_shipped_rows():
    """The example's rows are verbatim copies of shipped rows (same row_id, same cells, sources kept)."""
    shipped = {r["row_id"]: r for name in SHIPPED_MEASUREMENT_FILES for r in _rows(shipped_measurements(name))}
    rows = _rows(EXAMPLE_CSV)
    assert len(rows) == 6
    assert set(REQUIRED_COLUMNS) <= set(rows[0])
    for row in rows:
        assert row == shipped[row["row_id"]]
        assert row["source"].startswith("http") and row["source_date"]


def test_example_csv_validates(run_cli):
    """`gpuplan validate examples/measurements-example.csv --json`: every row predicted, measured
    values as in the file (2 offline H100 rows, 2 online H100 rows, 2 offline B200 FP4 rows)."""
    r = run_cli("validate", str(EXAMPLE_CSV), "--json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["skipped"] == []
    assert {row["row_id"] for row in out["rows"]} == {row["row_id"] for row in _rows(EXAMPLE_CSV)}
    measured = {(row["row_id"], row["metric"]): row["measured"] for row in out["rows"]}
    assert measured[("146", "output_tokens_per_s")] == 7430.99
    assert measured[("1020", "output_tokens_per_s")] == 58122
    assert measured[("802", "ttft_mean_ms")] == 68.0
    assert {row["device"] for row in out["rows"]} == {"h100-sxm", "b200"}
