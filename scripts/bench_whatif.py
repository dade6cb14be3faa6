#!/usr/bin/env python3
"""Benchmark: a 200-scenario capex-budget sweep of the chat fleet, by backend and worker count.

    python scripts/bench_whatif.py [--scenarios 200] [--backends local1,local2,ray] [--save FILE]

Each scenario is a budget level: one max-demand MILP (``optimizer.whatif_demand``) and the
cheapest fleet at the demand found, warm-started from the max-demand fleet, all on the one
candidate set of the sweep (computed once, in the parent before the workers fork). Prints wall
and CPU time per run, the load average, and whether every run returns the same results (apart
from solve timings) in the same order. Measured figures: ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from catalog import load_catalog  # noqa: E402
from optimizer.whatif import ScenarioOptions, run_scenarios  # noqa: E402
from workloads.scenarios import load_scenarios  # noqa: E402

# Timed runs compute everything: the disk cache (README "Cache") is off unless GPUPLAN_CACHE_DIR is set.
os.environ.setdefault("GPUPLAN_CACHE_DIR", "")


def _strip(results):
    out = json.loads(json.dumps([r.to_json() for r in results]))
    for r in out:
        for d in (r, r.get("plan", {})):
            d.pop("solve_seconds", None)
            d.pop("created_utc", None)
            d.pop("timings_s", None)
    return out


def _cpu_s() -> float:
    """User + system CPU seconds of this process and of its children that have ended."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", type=int, default=200)
    ap.add_argument("--backends", default="local1,local2,ray")
    ap.add_argument("--save", type=Path, default=None, help="write the results (without timings) as JSON here")
    args = ap.parse_args()
    spec = {"base": str(REPO / "examples" / "chat-fleet.yaml"),
            "sweeps": [{"name": "budget", "kind": "budget", "from": 100000, "to": 2000000,
                        "steps": args.scenarios - 1}]}
    path = Path(tempfile.mkdtemp()) / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    _, _, scenarios = load_scenarios(path, load_catalog())
    print(f"{len(scenarios)} scenarios (base + {args.scenarios - 1} budget levels)")
    reference = None
    for backend in args.backends.split(","):
        kind = "ray" if backend == "ray" else "local"
        workers = None if kind == "ray" else int(backend.removeprefix("local") or 1)
        if kind == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                print("ray: not installed (pip install -e '.[ray]'); skipped")
                continue
        start, cpu0 = time.perf_counter(), _cpu_s()
        rows = run_scenarios(scenarios, ScenarioOptions(), workers=workers, backend=kind)
        wall, cpu = time.perf_counter() - start, _cpu_s() - cpu0
        same = "reference" if reference is None else ("same results" if _strip(rows) == reference else "DIFFERENT")
        reference = reference or _strip(rows)
        load = os.getloadavg()[0]
        print(f"{backend:8s} wall {wall:7.1f} s  ({wall / len(scenarios):.2f} s/scenario), CPU {cpu:7.1f} s "
              f"(this process and its finished workers), load average {load:.1f} after  {same}")
        if args.save is not None:
            args.save.write_text(json.dumps(_strip(rows), indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
