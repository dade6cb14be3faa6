"""A reader that closes stdout early (``gpuplan optimize plan.yaml | head -1``) gets what it read and no more:
no message, and exit code 0 for a command that succeeded — rich and click exited 1 there, silently, the command
cut short. The files a command writes (--json, --out) are still written whole.

Deterministic: the command's stdout is a pipe whose read end is already closed, so its first write finds
the reader gone (EPIPE), whatever the timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, REPO, SMALL_PLAN

PLAN = SMALL_PLAN


def _run_with_reader_gone(*args: str) -> subprocess.CompletedProcess:
    """``python -m cli.app ARGS`` whose stdout is a pipe nobody reads any more."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "cli.app", *args], cwd=REPO, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [
    (), ("--help",), ("--version",), ("schema",), ("catalog", "devices"), ("catalog", "models", "--json"),
    ("catalog", "show", "h100-sxm"), ("validate", str(EXAMPLES / "chat-fleet.yaml")),
    ("estimate", "--model", "llama-3.1-8b", "--device", "l4", "--precision", "fp8", "--input-tokens", "256",
     "--output-tokens", "64", "--batch", "8"),
], ids=lambda a: " ".join(a[:2]) or "no args")
def test_a_reader_that_stopped_reading_is_no_failure(args):
    proc = _run_with_reader_gone(*args)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_optimize_still_writes_its_files_whole(tmp_path):
    """The tables go nowhere; the --json and --out files are those of a normal run."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    out_json, out_xlsx = tmp_path / "r.json", tmp_path / "r.xlsx"
    proc = _run_with_reader_gone("optimize", str(plan), "--json", str(out_json), "--out", str(out_xlsx))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert json.loads(out_json.read_text())["status"] == "optimal"
    assert out_xlsx.read_bytes()[:2] == b"PK"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml", "r.json", "r.xlsx"]


def test_json_to_a_gone_reader_still_writes_the_workbook(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    out_xlsx = tmp_path / "r.xlsx"
    proc = _run_with_reader_gone("optimize", str(plan), "--json", "-", "--out", str(out_xlsx))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert out_xlsx.read_bytes()[:2] == b"PK"


def test_an_error_is_still_an_error(tmp_path):
    """Bad input with the reader gone: exit 1 and the one line on stderr, as ever."""
    proc = _run_with_reader_gone("validate", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 1
    assert "nope.yaml" in proc.stderr and len(proc.stderr.splitlines()) == 1
