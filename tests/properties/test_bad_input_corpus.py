"""The bad-input corpus (tests/corpus/cases.yaml): exit 1, one line naming file and field, nothing written.

Every output a command could write is pre-created with sentinel bytes; a failing case must
leave each one byte-identical and create nothing else (no temp files either). Plans that
load but cannot be planned (``kind: infeasible``) write their JSON result with status
``infeasible`` — complete, never half-written — and leave the workbook untouched.

``kind: args`` cases are whole command lines (a YAML file: ``args``, with ``{dir}`` for a
fresh run directory and ``{repo}`` for the repository, and the files to lay out in that
directory first: ``files`` copied from the repository, ``links`` (symlinks), ``hardlinks``,
``fifos`` and ``dirs``). After the run every file of the run directory must be
byte-identical, and nothing created. No case may print a control character to the terminal.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest
import yaml

from tests.conftest import CORPUS, EXAMPLES, REPO, assert_no_traceback

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
    if kind == "report":
        return [["report", str(path), "--out", xlsx_out]]
    if kind == "model-config":
        return [["validate", str(EXAMPLES / "chat-fleet.yaml"), "--model-config", str(path)],
                ["optimize", str(EXAMPLES / "chat-fleet.yaml"), "--model-config", str(path), "--json", json_out]]
    raise AssertionError(kind)


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _lay_out(spec: dict, run: Path) -> list[str]:
    """Create the run directory of an ``args`` case; return its command line."""
    run.mkdir()
    for name, source in (spec.get("files") or {}).items():
        (run / name).write_bytes((REPO / source).read_bytes())
    for name, target in (spec.get("links") or {}).items():
        os.symlink(target.replace("{dir}", str(run)), run / name)
    for name, target in (spec.get("hardlinks") or {}).items():
        os.link(run / target, run / name)
    for name in spec.get("fifos") or []:
        os.mkfifo(run / name)
    for name in spec.get("dirs") or []:
        (run / name).mkdir()
    return [str(a).replace("{dir}", str(run)).replace("{repo}", str(REPO)) for a in spec["args"]]


def _tree(run: Path) -> dict[str, bytes | str]:
    """Every entry of the run directory: regular files by content, the rest by kind and target."""
    out: dict[str, bytes | str] = {}
    for p in run.iterdir():
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            out[p.name] = "link->" + os.readlink(p)
        elif stat.S_ISREG(st.st_mode):
            out[p.name] = p.read_bytes()
        else:
            out[p.name] = f"mode {stat.S_IFMT(st.st_mode):o}"
    return out


@pytest.mark.parametrize("name", sorted(n for n in CASES if CASES[n]["kind"] == "args"))
def test_corpus_command_line(run_cli, tmp_path, name):
    case = CASES[name]
    spec = yaml.safe_load((CORPUS / name).read_text())
    run = tmp_path / "run"
    args = _lay_out(spec, run)
    before = _tree(run)
    null_before = os.stat("/dev/null").st_mode
    r = run_cli(*args)
    assert r.code == 1, (args, r.stdout, r.stderr)
    assert not CONTROL.search(r.stderr), r.stderr
    assert_no_traceback(r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert re.search(case["pattern"], lines[0]), lines[0]
    assert _tree(run) == before  # inputs byte-identical, nothing created, no temp file left
    assert os.stat("/dev/null").st_mode == null_before and stat.S_ISCHR(null_before)


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


@pytest.mark.parametrize("name", sorted(n for n in CASES if CASES[n]["kind"] != "args"))
def test_corpus_case(run_cli, tmp_path, name):
    case = CASES[name]
    path = CORPUS / name
    before = path.read_bytes()
    for out in OUTPUTS:
        (tmp_path / out).write_bytes(SENTINEL)
    for args in _commands(case["kind"], path, tmp_path):
        r = run_cli(*args)
        assert r.code == 1, (args, r.stdout, r.stderr)
        assert not CONTROL.search(r.stderr), r.stderr
        assert_no_traceback(r.stderr)
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
