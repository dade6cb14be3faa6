"""docs/cli-json.md lists exactly the keys that `gpuplan validate`, `calibrate` and `catalog ... --json` print:
a key printed but not documented, or documented but no longer printed, fails here (scripts read these keys).

Each test runs the command, reads the doc's key block for it (``tests.doc_keys.parse_key_block``) and compares
them path by path. A mapping keyed by data rather than by name (validate's ``by_device``: device → summary; a
device's ``sources``: figure → source) is read as the list of its values, whose keys the doc lists."""

from __future__ import annotations

import json

import pytest

from tests.conftest import EXAMPLES, REPO
from tests.doc_keys import block_starting, json_keys, parse_key_block

DOC = (REPO / "docs" / "cli-json.md").read_text(encoding="utf-8")
SUMMARIES = {"by_device", "by_device_engine", "by_source_group", "by_metric", "by_kind", "by_configuration"}
FIGURE_MAPPINGS = {"sources", "ranges", "estimated"}  # keyed by a catalog figure (purchase_usd, specs, ...)


def documented(first_word: str) -> dict[str, set[str]]:
    return parse_key_block(block_starting(DOC, first_word))


def written(data, keyed_by_data: set[str]) -> dict[str, set[str]]:
    """{path: keys} of ``data`` (a mapping or a list of them), its ``keyed_by_data`` mappings read as lists."""
    rows = data if isinstance(data, list) else [data]
    rows = [{k: list(v.values()) if k in keyed_by_data and isinstance(v, dict) else v for k, v in row.items()}
            for row in rows]
    return {path: keys for path, keys in json_keys(rows).items() if keys}


def _json(run_cli, *args: str):
    r = run_cli(*args)
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)


def test_validate_plan_keys_are_the_documented_ones(run_cli):
    data = _json(run_cli, "validate", str(EXAMPLES / "chat-fleet.yaml"), "--json")
    assert written(data, set()) == documented("file")
    assert set(documented("file")) == {"", "workloads"}  # the parser read the block's rows (it can fail)


def test_validate_measurements_keys_are_the_documented_ones(run_cli):
    """The shipped data holds every kind of row: offline (batch), at a rate (qps ...) and at a concurrency."""
    data = _json(run_cli, "validate", "--shipped", "--json")
    doc = documented("rows[]")
    assert written(data, SUMMARIES) == doc
    assert {"batch", "qps", "running_batch", "concurrency"} <= doc["rows"]
    saturated = [r["saturated"] for r in data["rows"] if "saturated" in r]
    assert saturated and all(type(s) is bool for s in saturated)  # a JSON boolean, as documented


def test_calibrate_keys_are_the_documented_ones(run_cli, tmp_path):
    """The top level as documented; ``params`` is the --params file (CalibrationParams' fields, nulls left out)."""
    from optimizer.models.params import CalibrationParams

    data = _json(run_cli, "calibrate", str(EXAMPLES / "measurements-example.csv"), "--out", str(tmp_path / "p.yaml"),
                 "--no-bands", "--json")
    assert set(data) == documented("out")[""]
    assert data["out"] == str(tmp_path / "p.yaml") and data["missing_bands"] is None  # --no-bands: no band notes
    assert {"compute_efficiency", "memory_bandwidth_efficiency", "fit"} <= set(data["params"]) <= set(
        CalibrationParams.model_fields)


@pytest.mark.parametrize(("args", "first_word", "keyed", "not_shown"), [
    (("devices", "--model", "llama-3.1-70b"), "key, name", FIGURE_MAPPINGS, set()),
    (("show", "h100-sxm"), "key, name", FIGURE_MAPPINGS, {"bound_tokens_per_s", "model_fits_one_gpu"}),
    (("models",), "key, hf_id", set(), set()),
    (("show", "llama-3.1-70b"), "key, hf_id", set(), set()),
    (("precisions",), "key, description", FIGURE_MAPPINGS, set()),
    (("show", "fp8"), "key, description", FIGURE_MAPPINGS, {"devices"}),
])
def test_catalog_keys_are_the_documented_ones(run_cli, args, first_word, keyed, not_shown):
    """Every listing as documented; ``show`` prints one entry, without the keys the doc marks as the listing's."""
    data = _json(run_cli, "catalog", *args, "--json")
    doc = documented(first_word)
    doc[""] -= not_shown
    assert written(data, keyed) == doc
