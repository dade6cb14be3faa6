"""The bad-input corpus (tests/corpus/cases.yaml): exit 1, one line naming file and field, nothing written.

Every output a command could write is pre-created with sentinel bytes; a failing case must
leave each one byte-identical and create nothing else (no temp files either). Plans that
load but cannot be planned (``kind: infeasible``) write their JSON result with status
``infeasible`` — complete, never half-written — and leave the workbook untouched.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import CORPUS, EXAMPLES

CASES = yaml.safe_load((CORPUS / "cases.yaml").read_text())
SENTINEL = b"earlier output, must survive\n"
OUTPUTS = ("out.json", "out.xlsx", "params.yaml")


def _commands(kind: str, path: Path, out_dir: Path) -> list[list[str]]:
    """The command lines that read a corpus file of ``kind`` (each must fail the same way)."""
    json_out, xlsx_out, params_out = (str(out_dir / name) for name in OUTPUTS)
    if kind == "plan":
        return [["validate", str(path)], ["optimize", str(path), "--json", json_out, "--out", xlsx_out]]
    if kind == "catalog":
        return [["catalog", "devices", "--catalog", str(path)]]
    if kind == "scenario":
        return [["whatif", str(path), "--json", json_out, "--out", xlsx_out]]
    if kind == "capacity-table":
        return [["optimize", str(EXAMPLES / "melange-example.yaml"), "--capacity-table", str(path),
                 "--json", json_out, "--out", xlsx_out]]
    if kind == "measurements":
        return [["validate", str(path)], ["calibrate", str(path), "--out", params_out]]
    if kind == "infeasible":
        return [["optimize", str(path), "--json", json_out, "--out", xlsx_out, "--time-limit", "5"]]
    raise AssertionError(kind)


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_case(run_cli, tmp_path, name):
    case = CASES[name]
    path = CORPUS / name
    before = path.read_bytes()
    for out in OUTPUTS:
        (tmp_path / out).write_bytes(SENTINEL)
    for args in _commands(case["kind"], path, tmp_path):
        r = run_cli(*args)
        assert r.code == 1, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert name in lines[0], lines[0]
        assert re.search(case["pattern"], lines[0]), lines[0]
        assert path.read_bytes() == before
        after = _snapshot(tmp_path)
        assert sorted(after) == sorted(OUTPUTS), after.keys()  # nothing created, no temp files left
        if case["kind"] == "infeasible":
            result = json.loads(after.pop("out.json"))
            assert result["status"] == "infeasible" and result["fleet"] == []
        assert all(data == SENTINEL for data in after.values()), args


def test_every_corpus_file_has_a_case():
    files = {p.name for p in CORPUS.iterdir() if p.name != "cases.yaml"}
    assert files == set(CASES)
