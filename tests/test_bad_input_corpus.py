"""The bad-input corpus (tests/corpus/cases.yaml): exit 1, one line naming file and field, nothing written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

CORPUS = Path(__file__).parent / "corpus"
CASES = yaml.safe_load((CORPUS / "cases.yaml").read_text())


def _command(kind: str, path: Path, out_dir: Path) -> list[str]:
    if kind == "plan":
        return ["validate", str(path)]
    if kind == "catalog":
        return ["catalog", "devices", "--catalog", str(path)]
    if kind == "scenario":
        return ["whatif", str(path), "--json", str(out_dir / "out.json"), "--out", str(out_dir / "out.xlsx")]
    raise AssertionError(kind)


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_case(run_cli, tmp_path, name):
    case = CASES[name]
    path = CORPUS / name
    before = path.read_bytes()
    r = run_cli(*_command(case["kind"], path, tmp_path))
    assert r.code == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert name in lines[0], lines[0]
    assert re.search(case["pattern"], lines[0]), lines[0]
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == []


def test_every_corpus_file_has_a_case():
    files = {p.name for p in CORPUS.iterdir() if p.name != "cases.yaml"}
    assert files == set(CASES)
