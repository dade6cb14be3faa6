"""Outputs get the permissions of any new file (0o666 & ~umask), not mkstemp's 0600 (issue 16)."""

from __future__ import annotations

import os
import stat

import pytest

from catalog.files import write_atomic


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_outputs_honour_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        path = write_atomic(tmp_path / "plan.json", "{}\n")
        replaced = write_atomic(tmp_path / "plan.json", "{}\n")  # over an existing file too
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode  # ls -l: -rw-r--r-- under umask 022
    assert stat.S_IMODE(replaced.stat().st_mode) == mode
