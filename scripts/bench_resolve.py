#!/usr/bin/env python3
"""HiGHS settings of the sensitivity re-solves, compared on the re-solves a plan really makes.

    python scripts/bench_resolve.py [PLAN.yaml] [--pairs 3]

Runs ``optimize_plan(..., sensitivity=True)`` once (one worker, no disk cache) and keeps every
re-solve it makes (its MILP data and first incumbent), then solves each again under the settings
before speedpost (``PREVIOUS``: solve-v8's) and the shipped ones (``RESOLVE_HIGHS_OPTIONS``), the two
interleaved pair by pair: prints the CPU seconds of each pass (the HiGHS runs only, model building
excluded) and every re-solve whose fleet or objective differs from its captured answer.
Figures: docs/benchmarks.md (solve-v8; Session 11).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("GPUPLAN_CACHE_DIR", "")
os.environ.setdefault("GPUPLAN_WORKERS", "1")

from catalog import load_catalog  # noqa: E402 - after the environment it reads
from optimizer.optimize import optimize_plan  # noqa: E402
from optimizer.planning import sensitivity  # noqa: E402
from optimizer.planning.milp.build import build_model  # noqa: E402
from optimizer.planning.milp.resolve import RESOLVE_HIGHS_OPTIONS  # noqa: E402
from optimizer.planning.milp.solve import (  # noqa: E402
    HiGHSWithHooks,
    classify_run,
    extract,
    start_values,
    stdout_silenced,
)
from optimizer.planning.solver_options import SolverOptions  # noqa: E402
from workloads import load_plan, resolve_catalog  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# RESOLVE_HIGHS_OPTIONS before speedpost (session 11: RENS and RINS off): solve-v8's settings. Before solve-v8
# they were {"user_objective_scale": -3, "mip_lp_age_limit": 5}.
PREVIOUS = {"user_objective_scale": -3, "mip_lp_age_limit": 2, "mip_pool_soft_limit": 50, "mip_heuristic_effort": 0.0,
            "mip_heuristic_run_feasibility_jump": False, "mip_detect_symmetry": False}
DEFAULTS = SolverOptions()  # the time limit and gap the sensitivity re-solves run at by default


def capture(name: str) -> list:
    """(problem, start, answer) of every re-solve of the plan's sensitivity analysis."""
    plan = load_plan(ROOT / name)
    cat = resolve_catalog(plan, load_catalog(), name)
    seen = []
    real = sensitivity.resolve_fleet

    def keep(problem, *, start, **kwargs):
        sol = real(problem, start=start, **kwargs)
        seen.append((problem, start, sol))
        return sol

    sensitivity.resolve_fleet = keep
    try:
        optimize_plan(plan, cat, sensitivity=True)
    finally:
        sensitivity.resolve_fleet = real
    return seen


def replay(seen: list, settings: dict) -> tuple[float, list[int]]:
    """CPU seconds of HiGHS over the re-solves under ``settings``, and those whose answer moved."""
    cpu, moved = 0.0, []
    for i, (problem, start, answer) in enumerate(seen):
        model = build_model(problem)
        first = start_values(model, start) if start is not None and start.status.has_plan else None
        highs = HiGHSWithHooks(msg=False, timeLimit=DEFAULTS.time_limit_s, gapRel=DEFAULTS.gap, threads=1, start=first, presolve="off",
                               **settings)
        c0 = time.process_time()
        with stdout_silenced():
            model.prob.solve(highs)
        seconds = time.process_time() - c0
        cpu += seconds
        sol = extract(model, classify_run(model, "highs", seconds, DEFAULTS.time_limit_s), 0.0)
        same_usd = (sol.objective_usd is None) == (answer.objective_usd is None) and (
            sol.objective_usd is None or abs(sol.objective_usd - answer.objective_usd) <= 1e-6 * answer.objective_usd)
        if sol.gpus != answer.gpus or not same_usd:
            moved.append(i)
    return cpu, moved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", nargs="?", default="examples/chat-fleet.yaml")
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    seen = capture(args.plan)
    print(f"{args.plan}: {len(seen)} re-solves captured")
    runs: dict[str, list[float]] = {"previous": [], "shipped": []}
    for _ in range(args.pairs):
        for label, settings in (("previous", PREVIOUS), ("shipped", RESOLVE_HIGHS_OPTIONS)):
            cpu, moved = replay(seen, settings)
            runs[label].append(cpu)
            print(f"  {label:8s} {cpu:6.2f} s CPU; answers moved: {moved or 'none'}", flush=True)
    for label, values in runs.items():
        print(f"{label:8s} median {statistics.median(values):.2f} s CPU ({', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
