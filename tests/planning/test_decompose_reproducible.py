"""The decomposition is reproducible: every step ends on a work limit (HiGHS's node limit, the
consolidation's round count), not on wall-clock shares of the time limit, so the same problem
gives the same fleet on a busy machine (optimizer/planning/milp/decompose.py; docs/benchmarks.md,
"Session 11: reproducible decomposition (detsolve)").

The problem is synthetic and seeded: 10 workloads × 4 buckets × 6 devices × 3 replica sizes
(180 options; the decomposition forced on with BOUNDS_MIN_OPTIONS = 0). Its decomposition takes
~1.7 s CPU, of which ~1.0 s is the polish's root node; at an 8 s limit main's polish share
(0.2 × 8 = 1.6 s of wall time) is cut inside that root when CPU hogs halve this process's share
of the CPU, so before this change the two solves below stopped at different places. The test runs at
16 s (``LIMIT_S``): on a machine ~1.5× slower that also ran other jobs (session 14, a CI run beside two
helpers' refits) the fleet MILP's root needed more than its 4.8 s of an 8 s limit, and the guard, not a
work limit, ended it; a work limit ends every step long before 16 s on an idle machine.

Step 1's one-workload MILPs on forked workers (``PARALLEL_MIN_OPTIONS``) give the serial path's plans,
bounds and fleet (docs/benchmarks.md, "Session 13: parallel one-workload MILPs").
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

from optimizer.planning.milp import decompose
from optimizer.planning.milp.decompose import GUARD_NOTE, solve_decomposed, workload_plans
from optimizer.planning.milp.heuristic import consolidate, single_option_plan
from optimizer.planning.milp.problem import Demand, FleetProblem, Limits, Option, UnitTerms
from optimizer.planning.milp.solve import solve_fleet
from optimizer.results.money import LinearTerms
from optimizer.results.plan_result import SolveStatus
from optimizer.workers import run_pool, usable_cpus

ZERO = LinearTerms(0.0, 0.0)


def synthetic_problem(n_workloads: int = 10, n_devices: int = 6, seed: int = 7) -> FleetProblem:
    """Seeded fleet problem: 8-GPU servers at $20-80k with GPUs at $8-30k; each workload's four
    buckets at 1-40 req/s, each device's replicas of 1, 2, 4 GPUs serving speed · g^0.8 · (4 − b)/2
    req/s (±20 %) in bucket b, speed 0.5-2 per (workload, device)."""
    rng = random.Random(seed)
    units = {}
    for d in range(n_devices):
        per_gpu = round(rng.uniform(8e3, 3e4), 2)
        units[f"d{d}"] = UnitTerms(f"d{d}", 8, LinearTerms(per_gpu, round(rng.uniform(2e4, 8e4), 2)), ZERO, ZERO, ZERO)
    demands, options = [], []
    for w in range(n_workloads):
        demands.append(Demand(f"w{w}", tuple(round(rng.uniform(1, 40), 3) for _ in range(4))))
        for d in range(n_devices):
            speed = rng.uniform(0.5, 2.0)
            for gpus in (1, 2, 4):
                cap = tuple(round(speed * gpus ** 0.8 * rng.uniform(0.8, 1.2) * (4 - b) / 2, 4) for b in range(4))
                options.append(Option(f"w{w}", f"d{d}-g{gpus}", f"d{d}", gpus, cap))
    return FleetProblem(tuple(demands), tuple(options), units, Limits())


def _fleet(sol):
    return sol.objective_usd, sorted(sol.replicas.items()), sorted(sol.routed_qps.items()), sorted(sol.gpus.items())


LIMIT_S = 16.0  # wall-clock limit of the two solves (module doc)


def test_decomposed_plan_is_the_same_with_cpu_hogs_beside_it(monkeypatch):
    monkeypatch.setattr(decompose, "BOUNDS_MIN_OPTIONS", 0)
    problem = synthetic_problem()
    quiet = solve_decomposed(problem, time_limit_s=LIMIT_S, gap=1e-3)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        busy = solve_decomposed(problem, time_limit_s=LIMIT_S, gap=1e-3)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    for sol in (quiet, busy):
        # every step ran and ended on its work limit, not on the wall-clock guard
        assert sol.status.has_plan and not sol.time_limited, sol.detail
        assert "neighbourhood" in sol.detail and "the fleet MILP (work limit reached" in sol.detail, sol.detail
        assert GUARD_NOTE not in sol.detail
    assert _fleet(busy) == _fleet(quiet)


def test_the_guard_says_when_it_ended_a_step(monkeypatch):
    # 0.3 s: the one-workload MILPs alone take ~0.2 s of CPU (0.075 s is their share), so the guard ends some
    monkeypatch.setattr(decompose, "BOUNDS_MIN_OPTIONS", 0)
    sol = solve_decomposed(synthetic_problem(), time_limit_s=0.3, gap=1e-3)
    assert sol.status.has_plan and sol.time_limited
    assert sol.detail.endswith(GUARD_NOTE)


def test_node_limit_is_a_work_limit_not_a_time_limit():
    # the whole MILP (180 options) stopped after its root node: a plan, status feasible, named as a work limit
    sol = solve_fleet(synthetic_problem(), time_limit_s=60, gap=1e-9, max_nodes=1, bounds=False)
    assert sol.status == SolveStatus.FEASIBLE and not sol.time_limited
    assert sol.detail.startswith("work limit reached (1 nodes)")
    again = solve_fleet(synthetic_problem(), time_limit_s=60, gap=1e-9, max_nodes=1, bounds=False)
    assert _fleet(again) == _fleet(sol)
    # the time limit still names itself and marks the answer
    short = solve_fleet(synthetic_problem(), time_limit_s=0.05, gap=1e-9, bounds=False)
    assert short.time_limited and "time limit" in short.detail


def test_consolidation_stops_after_its_rounds():
    # 0 rounds: the pooled plans as they are, though a round would have moved some (the guard, 10 s, does not fire)
    p = synthetic_problem(4, 3)
    plans = workload_plans(p, time_limit_s=10, gap=1e-6)
    guarded: list[str] = []
    assert consolidate(p, plans, time_limit_s=10, max_rounds=0, guarded=guarded) == plans and guarded == []
    assert consolidate(p, plans, time_limit_s=10, max_rounds=1) != plans


def _spied_pool(monkeypatch) -> list[int]:
    """The item counts of the pools ``workload_plans`` runs."""
    runs: list[int] = []

    def spy(fn, items, workers, *args, **kwargs):
        items = list(items)
        runs.append(len(items))
        return run_pool(fn, items, workers, *args, **kwargs)

    monkeypatch.setattr(decompose, "run_pool", spy)
    return runs


def test_one_workload_milps_on_workers_give_the_serial_plans_and_fleet(monkeypatch):
    # step 1 forced onto the pool (PARALLEL_MIN_OPTIONS = 0): the same plans, bounds and order as
    # GPUPLAN_WORKERS=1, and the same final fleet; no guard fires at 30 s
    monkeypatch.setattr(decompose, "BOUNDS_MIN_OPTIONS", 0)
    monkeypatch.setattr(decompose, "PARALLEL_MIN_OPTIONS", 0)
    problem = synthetic_problem()
    runs = _spied_pool(monkeypatch)
    got = {}
    for workers in ("1", "2"):
        monkeypatch.setenv("GPUPLAN_WORKERS", workers)
        guarded: list[str] = []
        plans = workload_plans(problem, time_limit_s=30, gap=1e-6, guarded=guarded)
        assert guarded == []
        assert list(plans) == [d.workload for d in problem.demands]
        assert all(p.bound_usd is not None for p in plans.values())  # every MILP ran (no single-option stand-in)
        got[workers] = plans, solve_decomposed(problem, time_limit_s=30, gap=1e-3)
    if usable_cpus() >= 2:
        assert runs == [10, 10]  # with 2 workers only: workload_plans, then solve_decomposed's step 1
    (serial, s_sol), (pooled, p_sol) = got["1"], got["2"]
    assert pooled == serial
    assert not s_sol.time_limited and not p_sol.time_limited
    assert _fleet(p_sol) == _fleet(s_sol) and p_sol.bound_usd == s_sol.bound_usd and p_sol.detail == s_sol.detail


def test_on_workers_past_the_guard_the_milps_are_not_run_and_the_note_counts_them(monkeypatch):
    # a guard of 0 s: no MILP starts, every workload gets its single-option plan (no bound)
    monkeypatch.setattr(decompose, "PARALLEL_MIN_OPTIONS", 0)
    monkeypatch.setenv("GPUPLAN_WORKERS", "2")
    problem = synthetic_problem(4, 3)
    guarded: list[str] = []
    plans = workload_plans(problem, time_limit_s=0.0, gap=1e-6, guarded=guarded)
    assert guarded == ["the one-workload MILPs (0 ended, 4 of 4 not run)"]
    by_workload = {d.workload: tuple(o for o in problem.options if o.workload == d.workload) for d in problem.demands}
    assert plans == {d.workload: single_option_plan(d, by_workload[d.workload], problem.units) for d in problem.demands}
