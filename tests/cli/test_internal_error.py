"""A bug (an exception that is not bad input) is one line naming the saved traceback, exit 70 (EX_SOFTWARE);
GPUPLAN_DEBUG=1 or --debug shows the traceback instead; bad input keeps exit 1 and its own message.
The suite itself runs with GPUPLAN_DEBUG=1 (tests/conftest.py): these tests take it out."""

from __future__ import annotations

import os
import re
import stat
import tempfile

import pytest

from cli import app as cli_app
from tests.conftest import INTERNAL_ERROR, assert_no_traceback

LINE = re.compile(r"gpuplan: internal error \(a bug, not your input\): ZeroDivisionError: division by zero; "
                  r"full traceback in (?P<path>\S+\.txt); please report it to the gpuplan maintainers with that file "
                  r"\(GPUPLAN_DEBUG=1 shows the traceback here\)\n")


def _schema_with_a_bug():
    return 1 / 0


@pytest.fixture
def buggy_schema(monkeypatch):
    monkeypatch.delenv("GPUPLAN_DEBUG", raising=False)
    monkeypatch.setattr(cli_app.plan_cmd, "plan_schema", _schema_with_a_bug)


def test_a_bug_is_one_line_exit_70_and_the_traceback_in_the_cache_folder(run_cli, buggy_schema, monkeypatch,
                                                                          tmp_path):
    cache = tmp_path / "cache"
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", str(cache))
    r = run_cli("schema")
    assert r.code == 70, r.stderr
    match = LINE.fullmatch(r.stderr)
    assert match, r.stderr
    saved = cache / "internal-errors" / os.path.basename(match["path"])
    assert match["path"] == str(saved)
    text = saved.read_text()
    assert "command: gpuplan schema" in text
    assert "Traceback (most recent call last)" in text and "in _schema_with_a_bug" in text
    assert text.rstrip().endswith("ZeroDivisionError: division by zero")
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600  # it holds the paths of the user's files
    assert os.listdir(saved.parent) == [saved.name]  # written through a temp file, which is gone


def test_with_the_cache_off_the_traceback_goes_to_the_temp_folder(run_cli, buggy_schema, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", "")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    r = run_cli("schema")
    assert r.code == 70
    match = LINE.fullmatch(r.stderr)
    assert match and os.path.dirname(match["path"]) == str(tmp_path), r.stderr
    assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(match["path"])]


@pytest.mark.parametrize("how", ["GPUPLAN_DEBUG=1", "--debug"])
def test_debugging_shows_the_traceback(run_cli, buggy_schema, monkeypatch, how):
    if how == "--debug":
        args = ("--debug", "schema")
    else:
        monkeypatch.setenv("GPUPLAN_DEBUG", "1")
        args = ("schema",)
    with pytest.raises(ZeroDivisionError):
        run_cli(*args)


def test_bad_input_keeps_exit_1_and_its_message(run_cli, monkeypatch, tmp_path):
    monkeypatch.delenv("GPUPLAN_DEBUG", raising=False)
    r = run_cli("validate", tmp_path / "nope.yaml")
    assert r.code == 1 and "nope.yaml" in r.stderr and len(r.stderr.splitlines()) == 1
    assert_no_traceback(r.stderr)


def test_the_no_traceback_helper_also_fails_on_the_internal_error_line():
    """So the catch-all cannot turn a bug into a pass in a test that only checked for 'Traceback'."""
    assert_no_traceback("error: plan.yaml: workloads.0.qps: input should be greater than 0 (got 0)\n")
    with pytest.raises(AssertionError):
        assert_no_traceback(f"gpuplan: {INTERNAL_ERROR}: KeyError: 'x'; full traceback in /tmp/x.txt\n")
    with pytest.raises(AssertionError):
        assert_no_traceback("Traceback (most recent call last):\n")
    assert INTERNAL_ERROR == cli_app.INTERNAL_ERROR
