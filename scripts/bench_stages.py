#!/usr/bin/env python3
"""CPU seconds per stage of ``optimize_plan`` on one plan file, in this process (one worker, cache off).

    python scripts/bench_stages.py examples/chat-fleet-power-cap.yaml [--no-sensitivity] [--no-verify]

Runs ``optimize_plan(plan, sensitivity=True, verify=True)`` as ``gpuplan optimize`` does, with its
stage clock reading ``time.process_time`` (``GPUPLAN_WORKERS=1``: every stage's work is in this
process, so its CPU time is the stage's) and the disk cache off, and prints one JSON line: the
stages' CPU seconds (candidates, solve, verification, sensitivity, total), the sensitivity's
re-solves and the objective. Run it from another checkout's folder (``cd OTHER && python
/path/to/bench_stages.py PLAN``: that tree is first on the path) to compare. Figures:
docs/benchmarks.md (Session 11).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ["GPUPLAN_CACHE_DIR"] = ""
os.environ["GPUPLAN_WORKERS"] = "1"
sys.path.insert(0, os.getcwd())

import optimizer.optimize as oo  # noqa: E402 - after the environment it reads
from catalog.load import load_catalog  # noqa: E402
from optimizer.models.params import load_params  # noqa: E402
from workloads.load import load_plan, resolve_catalog  # noqa: E402


class _Cpu:
    """``optimize_plan``'s stage clock in CPU seconds."""

    perf_counter = staticmethod(time.process_time)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan")
    ap.add_argument("--no-sensitivity", action="store_true")
    ap.add_argument("--no-verify", action="store_true")
    args = ap.parse_args()
    plan = load_plan(args.plan)
    cat = resolve_catalog(plan, load_catalog(), args.plan)
    oo.time = _Cpu
    result = oo.optimize_plan(plan, cat, load_params(None), sensitivity=not args.no_sensitivity,
                              verify=not args.no_verify)
    s = result.sensitivity
    print(json.dumps({"plan": args.plan, **{k: round(v, 3) for k, v in result.timings_s.items()},
                      "resolves": s.solves if s else None, "objective_usd": result.objective_usd}))


if __name__ == "__main__":
    main()
