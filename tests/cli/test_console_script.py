"""The console script ``gpuplan`` is ``cli.app:run``: ``main()`` then an exit without the last full
garbage collection (docs/benchmarks.md "Session 14"). It must keep ``main``'s exit codes and messages."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN = "import sys; from cli.app import run; sys.argv = ['gpuplan', *sys.argv[1:]]; run()"


def test_console_script_is_run():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"gpuplan": "cli.app:run"}


def test_run_keeps_the_exit_code_and_the_error(tmp_path):
    missing = tmp_path / "no-such-plan.yaml"
    proc = subprocess.run([sys.executable, "-c", RUN, "optimize", str(missing)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "no-such-plan.yaml" in proc.stderr


def test_run_exits_zero_on_help():
    proc = subprocess.run([sys.executable, "-c", RUN, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "optimize" in proc.stdout
