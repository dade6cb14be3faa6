"""The repository is self-contained: no file refers to a path outside it (a fresh clone has
nothing beside it), checked by scripts/check_no_outside_paths.py, which CI also runs."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

GUARD = REPO / "scripts" / "check_no_outside_paths.py"


def test_no_path_outside_the_repository():
    """scripts/check_no_outside_paths.py passes on the repository (CI runs it before pytest)."""
    done = subprocess.run([sys.executable, str(GUARD)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_outside_path_guard_finds_offenders(tmp_path):
    """The guard fails on a sibling-folder or workspace path, and allows a '# copied from' comment."""
    sibling, workspace = "../" + "shared/reference/gpus.csv", "/" + "work/main/x.csv"
    (tmp_path / "doc.md").write_text(f"run `gpuplan validate {sibling}`\n")
    (tmp_path / "conf.py").write_text(f"# copied from {sibling} (2026-11)\nPATH = '{workspace}'\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "ignored.py").write_text(f"x = '{sibling}'\n")
    done = subprocess.run([sys.executable, str(GUARD), "--root", str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1
    listed = [line.strip() for line in done.stderr.splitlines()[1:]]
    assert listed == [f"conf.py:2: PATH = '{workspace}'", f"doc.md:1: run `gpuplan validate {sibling}`"]
