"""A repeated `gpuplan optimize` reads its whole result back (optimizer/planning/result_cache.py):
the same JSON bytes, no planning stack imported, and only results that a longer time limit could
not change are kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from optimizer.planning import disk_cache, result_cache
from optimizer.results.plan_result import Diagnostic, PlanResult, SolveStatus
from tests.conftest import EXAMPLES, REPO
from tests.planning.test_disk_cache import VARYING

CHAT = EXAMPLES / "chat-fleet.yaml"


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", str(root))
    monkeypatch.setattr(disk_cache, "_STATE", None)
    return root


def test_a_repeated_optimize_is_read_back_byte_identical(run_cli, tmp_path, cache_env):
    first = run_cli("optimize", CHAT, "--json", tmp_path / "a.json")
    assert first.code == 0, first.stderr
    second = run_cli("optimize", CHAT, "--json", tmp_path / "b.json")
    assert second.code == 0, second.stderr
    a, b = ((tmp_path / n).read_text() for n in ("a.json", "b.json"))
    assert VARYING.sub("null", a) == VARYING.sub("null", b)
    assert json.loads(a)["cache"]["hits"] == 0
    assert json.loads(b)["cache"] == {"dir": str(cache_env), "hits": 1, "misses": 0}
    assert "read from the cache" in second.stdout and "read from the cache" not in first.stdout
    assert run_cli("optimize", CHAT, "--no-sensitivity", "--json", tmp_path / "c.json").code == 0  # ~1 s
    other = json.loads((tmp_path / "c.json").read_text())
    # another input, so not that result; but every capacity, solve and simulation of it is read back
    assert other["sensitivity"] is None and other["cache"]["misses"] == 0 and other["cache"]["hits"] > 1


def test_a_hit_imports_no_solver(tmp_path, cache_env):
    env = {**os.environ, "GPUPLAN_CACHE_DIR": str(cache_env)}
    cmd = [sys.executable, "-m", "cli.app", "optimize", str(CHAT), "--no-sensitivity", "--no-verify"]
    subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True)
    probe = ("import runpy, sys\n"
             f"sys.argv = ['gpuplan', 'optimize', {str(CHAT)!r}, '--no-sensitivity', '--no-verify']\n"
             "try:\n    runpy.run_module('cli.app', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print(sorted(m for m in ('numpy', 'pulp', 'highspy', 'optimizer.optimize', 'optimizer.models.serving') "
             "if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, check=True, capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(("change", "kept"), [
    ({}, True),
    ({"status": SolveStatus.FEASIBLE}, False),
    ({"diagnostics": (Diagnostic("warning", "time_limit_fallback", "…"),)}, False),
    ({"diagnostics": (Diagnostic("warning", "not_proven_optimal", "…"),)}, False),
])
def test_only_reproducible_results_are_kept(change, kept, monkeypatch, tmp_path):
    monkeypatch.setattr(disk_cache, "_STATE", disk_cache.CacheState(tmp_path))
    result = replace(PlanResult(status=SolveStatus.OPTIMAL, status_detail="", objective="tco"), **change)
    assert result_cache.reproducible(result, 0) is kept


def test_a_time_limited_solve_in_the_run_keeps_it_out(monkeypatch, tmp_path):
    monkeypatch.setattr(disk_cache, "_STATE", disk_cache.CacheState(tmp_path))
    result = PlanResult(status=SolveStatus.OPTIMAL, status_detail="", objective="tco")
    before = disk_cache.state().unsettled
    disk_cache.note_unsettled()  # e.g. a sensitivity re-solve stopped at --time-limit-s
    assert not result_cache.reproducible(result, before)
    result_cache.store_result(("k",), result, before)
    assert result_cache.cached_result(("k",)) is None
