"""What sensitivity and verification cost on the shipped examples.

    python scripts/bench_sensitivity.py [PLAN.yaml ...]

Per plan: wall and CPU seconds of the optimize without them (candidates + solve + single-device
comparison), of the MILP solve alone, of the sensitivity analysis (its re-solves) and of the
simulator's verification. CPU seconds (``time.process_time``) are what to compare on a shared
machine; the solver runs in-process.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from catalog import load_catalog
from optimizer.models.params import load_params
from optimizer.optimize import optimize_plan
from optimizer.planning.candidate_set import fleet_problem
from optimizer.planning.candidates import model_candidates
from optimizer.planning.milp.solve import solve_fleet
from optimizer.planning.safeguards import device_fidelity, fidelity_map, verify_and_resize
from optimizer.planning.sensitivity import analyse
from optimizer.planning.solver_options import SolverOptions
from workloads import load_plan, resolve_catalog

# Timed runs compute everything: the disk cache (README "Cache") is off unless GPUPLAN_CACHE_DIR is set.
os.environ.setdefault("GPUPLAN_CACHE_DIR", "")

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ("examples/chat-fleet.yaml", "examples/chat-fleet-power-cap.yaml")


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def measure(name: str) -> str:
    plan = load_plan(ROOT / name if not Path(name).is_absolute() else name)
    cat = resolve_catalog(plan, load_catalog(), name)
    params = load_params(None)
    solve_kwargs = SolverOptions().solve_kwargs
    _, ow, oc = timed(lambda: optimize_plan(plan, cat, params))
    cset = model_candidates(plan, cat, params)
    problem = fleet_problem(cset, plan)
    sol, sw, sc = timed(lambda: solve_fleet(problem, **solve_kwargs))
    fid = device_fidelity(fidelity_map(cset, params, cat))
    s, aw, ac = timed(lambda: analyse(plan, cset, problem, sol, fid))
    _, vw, vc = timed(lambda: verify_and_resize(plan, cset, sol, cat, params, lambda p: solve_fleet(p, **solve_kwargs)))
    return (f"{name}: optimize {ow:.1f} s wall / {oc:.1f} s CPU; MILP solve {sw:.2f} / {sc:.2f}; "
            f"sensitivity {s.solves} re-solves {aw:.1f} / {ac:.1f} (= {ac / oc:.1f}× optimize CPU, "
            f"{ac / sc:.0f}× solve CPU); verification {vw:.1f} / {vc:.1f}")


def main() -> None:
    for name in sys.argv[1:] or DEFAULT:
        print(measure(name), flush=True)


if __name__ == "__main__":
    main()
