"""The console script ``gpuplan`` is ``cli.app:run``: ``main()`` then an exit without the last full
garbage collection (docs/benchmarks.md "Session 14"). It must keep ``main``'s exit codes and messages."""

from __future__ import annotations

import os
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


def test_a_stdout_that_cannot_encode_the_tables_gets_escapes_not_a_traceback():
    """PYTHONIOENCODING=ascii (or LC_ALL=C PYTHONUTF8=0): the em dashes and x signs of the tables were a
    UnicodeEncodeError traceback and exit 1 — for `optimize`, after its --json had been written."""
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    proc = subprocess.run([sys.executable, "-c", RUN, "catalog", "show", "h100-sxm"], cwd=REPO, env=env,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert proc.stderr == b""
    assert proc.stdout.isascii() and b"\\u" in proc.stdout


def test_a_closed_stdout_is_the_null_device_not_a_traceback():
    """`gpuplan ... >&-`: Python's sys.stdout is None; the console's sys.stdout.isatty() was an
    AttributeError traceback. Now the tables go nowhere, as print() sends them, and the exit code is 0."""
    proc = subprocess.run(["sh", "-c", 'exec "$0" -c "$1" catalog show h100-sxm >&-', sys.executable, RUN],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_json_to_a_closed_stdout_is_refused_up_front(tmp_path):
    """`--json -` with stdout closed: the JSON went to the null device with exit 0; now a one-line error."""
    proc = subprocess.run(["sh", "-c", 'exec "$0" -c "$1" optimize "$2" --json - >&-', sys.executable, RUN,
                           str(tmp_path / "missing.yaml")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "error: --json -: stdout is closed; give a file name or open stdout\n"
