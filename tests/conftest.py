"""Shared test helpers: run the CLI in-process and capture exit code, stdout and stderr."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from optimizer.calibration.shipped import shipped_measurements

# Property and fuzz tests draw the same examples on every run (a red CI must mean a change
# broke something, not that a new random example turned up); HYPOTHESIS_PROFILE=explore
# draws fresh ones to hunt for bugs (it found the carriage-return CSV case).
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

# No test reads or writes the user's cache (~/.cache/gpuplan): off for the suite and its
# subprocesses; tests of the cache point GPUPLAN_CACHE_DIR at their tmp_path.
os.environ["GPUPLAN_CACHE_DIR"] = ""
# A bug in a command raises in the test (in-process) or prints its traceback (subprocesses) instead
# of the CLI's one-line internal-error report and exit 70 (cli.app): no test can mistake a bug for a
# handled error. Tests of that report take GPUPLAN_DEBUG out of their environment.
os.environ["GPUPLAN_DEBUG"] = "1"

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "tests" / "data" / "reference"  # gpus.csv, models.csv: what the catalog was built from
MELANGE = REPO / "tests" / "data" / "melange"  # Mélange's published example inputs
CALIBRATION_CSV = shipped_measurements("calibration.csv")  # the copy shipped in optimizer/calibration/data
MEASUREMENTS_2026_CSV = shipped_measurements("measurements-2026.csv")
EXAMPLES = REPO / "examples"

# A small plan (one device, one precision: the optimizer's quick path) whose optimum exists.
SMALL_PLAN = """name: small
allowed_devices: [l4]
workloads:
  - name: chat
    model: llama-3.1-8b
    qps: 2
    prompt_tokens: 256
    output_tokens: 64
    precisions: [fp8]
    slo: {ttft_p99_ms: 3000}
"""
CORPUS = REPO / "tests" / "corpus"
TEST_DATA = REPO / "tests" / "data"


# The CLI's line for a bug (cli.app.INTERNAL_ERROR), not for bad input.
INTERNAL_ERROR = "internal error (a bug, not your input)"


def assert_no_traceback(stderr: str) -> None:
    """A CLI run's stderr shows neither a traceback nor the catch-all's internal-error line: either
    means a bug, which the one-line report (exit 70, traceback saved to a file) must not hide from a
    test that expects a handled error."""
    assert "Traceback" not in stderr, stderr
    assert INTERNAL_ERROR not in stderr, stderr


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """Call ``cli.app.main`` as the console script would, return (code, stdout, stderr)."""
    from cli.app import main

    def run(*args: str) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["gpuplan", *map(str, args)])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run
