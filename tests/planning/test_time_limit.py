"""A time limit is a limit: large MILPs solve in a child process killed at the deadline.

HiGHS 1.16 ignored its 120 s limit for ~565 s in the root node of a 500-workload MILP; the
solve now runs in a forked child (``optimizer.planning.milp.deadline``) killed at the limit
plus a grace, keeping the last incumbent it reported. These tests use the synthetic instance
of ``tests/properties/test_solver_trouble`` (built in milliseconds) and force the child path (``in_child``).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from catalog import load_catalog
from optimizer import optimize as optimize_mod
from optimizer.optimize import optimize_plan
from optimizer.planning.milp import solve as solve_mod
from optimizer.planning.milp.deadline import run_with_deadline
from optimizer.planning.milp.restrict import restricted_problem, solve_restricted
from optimizer.planning.milp.solve import solve_fleet
from optimizer.results.plan_result import SolveStatus
from optimizer.workers import run_pool
from tests.conftest import EXAMPLES, REPO
from tests.properties.test_solver_trouble import hard_problem
from workloads import load_plan, resolve_catalog


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _report_then_hang(report):
    report(("pid", os.getpid()))
    report(("incumbent", 1))
    time.sleep(3600)


def test_a_hanging_child_is_killed_at_its_deadline_and_its_reports_kept():
    start = time.perf_counter()
    out = run_with_deadline(_report_then_hang, 1.0)
    wall = time.perf_counter() - start
    assert out.timed_out and not out.finished
    assert 1.0 <= wall < 3.0
    assert out.reports[1] == ("incumbent", 1)
    assert not _alive(out.reports[0][1])


def test_a_child_that_returns_gives_its_value():
    out = run_with_deadline(lambda report: (report(7), 42)[1], 30.0)
    assert out.finished and out.value == 42 and out.reports == [7] and not out.timed_out


def test_a_child_that_raises_is_an_error_not_a_hang():
    def boom(report):
        raise ValueError("broken model")

    out = run_with_deadline(boom, 30.0)
    assert not out.finished and not out.timed_out
    assert "ValueError: broken model" in out.error


def test_the_child_dies_with_its_parent(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from optimizer.planning.milp.deadline import run_with_deadline

        def hang(report):
            open({str(pid_file)!r}, "w").write(str(__import__("os").getpid()))
            time.sleep(3600)

        run_with_deadline(hang, 3600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        for _ in range(200):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)  # no finally runs in the parent: only PR_SET_PDEATHSIG helps
        parent.wait(10)
        for _ in range(100):
            if not _alive(child):
                break
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        parent.kill()
        parent.wait(10)


def test_child_solve_gives_the_in_process_answer():
    problem = hard_problem(2, n_devices=3, n_buckets=2, seed=3)
    here = solve_fleet(problem, time_limit_s=30, gap=1e-9, in_child=False)
    there = solve_fleet(problem, time_limit_s=30, gap=1e-9, in_child=True)
    assert here.status == there.status == SolveStatus.OPTIMAL
    assert there.objective_usd == pytest.approx(here.objective_usd, rel=1e-9)
    assert there.replicas == here.replicas


def test_a_child_killed_before_the_solver_stops_returns_its_last_incumbent(monkeypatch):
    # HiGHS is given 20 s but the child is killed after 20 + grace = 2 s: what HiGHS does when
    # it overruns its limit. The plan is the last improving solution the child reported.
    monkeypatch.setattr(solve_mod, "DEADLINE_GRACE_S", -18.0)
    problem = hard_problem(10)
    start = time.perf_counter()
    sol = solve_fleet(problem, time_limit_s=20.0, gap=1e-9, bounds=False, in_child=True)
    assert time.perf_counter() - start < 4.0
    assert sol.status == SolveStatus.FEASIBLE, sol.detail
    assert sol.detail.startswith("time limit (20 s) reached; the solver was stopped; best plan found so far")
    assert sol.objective_usd is not None and sol.bound_usd is not None and sol.bound_usd <= sol.objective_usd
    for dem in problem.demands:  # a real plan: every bucket routed, within capacity
        for b, lam in enumerate(dem.bucket_qps):
            routed = sum(q for (w, bb, _), q in sol.routed_qps.items() if w == dem.workload and bb == b)
            assert routed == pytest.approx(lam, rel=1e-6)
    for o in problem.options:
        load = sum(q / o.capacity_qps[b] for (w, b, k), q in sol.routed_qps.items() if (w, k) == (o.workload, o.key))
        assert load <= sol.replicas.get((o.workload, o.key), 0) + 1e-6


def test_no_incumbent_before_the_kill_is_an_error_with_the_limit(monkeypatch):
    monkeypatch.setattr(solve_mod, "DEADLINE_GRACE_S", -19.9)
    sol = solve_fleet(hard_problem(60), time_limit_s=20.0, gap=1e-9, bounds=False, in_child=True)
    assert sol.status == SolveStatus.ERROR
    assert sol.detail == "no solution found in 20 s (the time limit); raise --time-limit-s"
    assert sol.replicas == {}


def test_a_first_incumbent_is_never_beaten_by_a_worse_answer():
    problem = hard_problem(10)
    first = solve_fleet(problem, time_limit_s=5, gap=0.05, bounds=False)
    assert first.status.has_plan
    again = solve_fleet(problem, time_limit_s=0.3, gap=1e-9, bounds=False, start=first)
    assert again.status.has_plan
    assert again.objective_usd <= first.objective_usd * (1 + 1e-9)


def test_plan_json_reports_stage_timings():
    plan = load_plan(EXAMPLES / "melange-example.yaml")
    result = optimize_plan(plan, resolve_catalog(plan, load_catalog(), "melange"),
                           capacity_table=EXAMPLES / "melange-example.csv")
    t = result.to_json()["timings_s"]
    assert set(t) == {"candidates", "solve", "verification", "sensitivity", "total"}
    assert all(v >= 0 for v in t.values())
    assert t["sensitivity"] == 0.0  # not asked
    assert t["total"] == pytest.approx(t["candidates"] + t["solve"] + t["verification"] + t["sensitivity"], abs=0.05)


def test_restricted_milp_gives_a_plan_of_the_full_problem_with_its_gap():
    problem = hard_problem(10)
    start = solve_fleet(problem, time_limit_s=5, gap=0.2, bounds=False)
    keep = frozenset(k for k, n in start.replicas.items() if n > 0)
    sub = restricted_problem(problem, keep, per_bucket=2, cheapest=1)
    assert len(sub.options) < len(problem.options)
    assert keep <= {(o.workload, o.key) for o in sub.options}
    sol = solve_restricted(problem, time_limit_s=10, gap=1e-3, start=start)
    assert sol.status == (SolveStatus.OPTIMAL if sol.gap <= 1e-3 else SolveStatus.FEASIBLE), sol.detail
    assert "neighbourhood" in sol.detail and "against the proven lower bound" in sol.detail
    assert sol.objective_usd <= start.objective_usd * (1 + 1e-9)
    full = solve_fleet(problem, time_limit_s=30, gap=1e-9, bounds=False)
    # Σ_w L[w] bounds the full optimum from below, so the reported gap is an honest one
    assert sol.bound_usd <= full.objective_usd * (1 + 1e-9)
    assert sol.gap == pytest.approx((sol.objective_usd - sol.bound_usd) / sol.objective_usd)


def test_a_plan_stopped_at_its_time_limit_gets_no_sensitivity_but_a_warning(monkeypatch):
    """Break-evens against a base plan within 5 % of its bound would be solver noise, and at 500
    workloads its ~20 re-solves each ran to the limit (~20 × --time-limit): skipped, said."""
    real = optimize_mod.solve_stage

    def stopped(*args, **kwargs):
        sol, single, notes = real(*args, **kwargs)
        return replace(sol, status=SolveStatus.FEASIBLE, gap=0.05), single, notes

    def never(*args, **kwargs):
        raise AssertionError("sensitivity ran on a plan that is not proven optimal")

    monkeypatch.setattr(optimize_mod, "solve_stage", stopped)
    monkeypatch.setattr(optimize_mod, "analyse", never)
    plan = load_plan(EXAMPLES / "melange-example.yaml")
    result = optimize_plan(plan, resolve_catalog(plan, load_catalog(), "melange"),
                           capacity_table=EXAMPLES / "melange-example.csv", sensitivity=True)
    assert result.status is SolveStatus.FEASIBLE and result.sensitivity is None
    [warning] = [d for d in result.diagnostics if d.code == "sensitivity_skipped"]
    assert warning.level == "warning" and "gap 5.0 %" in warning.message
    assert "--time-limit-s" in warning.message  # the flag --help shows, not its hidden old name


def _pid_or_hang(path: Path, x: int) -> int:
    """Item 0: this worker's pid; item 1: write it to ``path`` and hang."""
    if x == 1:
        path.write_text(str(os.getpid()))
        time.sleep(3600)
    return os.getpid()


def test_a_pool_past_its_deadline_keeps_what_is_done_and_kills_its_workers(tmp_path):
    hang_pid = tmp_path / "hang.pid"
    out = run_pool(functools.partial(_pid_or_hang, hang_pid), range(2), 2, deadline=time.monotonic() + 2.0, late="late")
    assert isinstance(out[0], int) and out[1] == "late"
    assert not _alive(int(hang_pid.read_text())) and not _alive(out[0])
