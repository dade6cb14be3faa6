#!/usr/bin/env python3
"""Benchmark CLI start-up and the shipped example end to end: median wall and CPU time of N runs.

    python scripts/bench_startup.py [--runs 7] [--only help|chat] [--cold|--warm] [--compare OTHER_CHECKOUT] [-- ARGS...]
    python scripts/bench_startup.py --stages [--runs 3] [--cold|--warm] [--compare OTHER_CHECKOUT]

Runs ``gpuplan --help`` and ``gpuplan optimize examples/chat-fleet.yaml`` as separate
processes (what a user waits for) and reports, for each, the median wall time and the median
CPU time (user + system of the child, from ``os.wait4``) — CPU time is what to compare on a
shared machine, where wall time also counts the other engineers' jobs. Targets (issue 13, a
2-core machine): ``--help`` < 0.3 s, the chat fleet < 1.0 s. ``--compare DIR`` also runs the same
commands from another checkout (``python -m cli.app`` with that tree first on the path), the two
interleaved run by run so that both see the same load; extra ``ARGS`` go to ``optimize``.

``--stages``: where the chat fleet's CPU time goes, in a fresh process per run with one worker
(``GPUPLAN_WORKERS=1``, so every stage's work is in that process): imports, catalog + plan +
calibration load, then ``optimize_plan``'s own ``timings_s`` stages measured in CPU seconds
(its clock reads ``time.process_time`` here) and the rendering of the result (JSON + tables);
medians over the runs.

The disk cache (optimizer/planning/disk_cache.py, README "Cache"): ``--cold`` (the default, as
the figures before the cache) gives every run a fresh empty ``GPUPLAN_CACHE_DIR`` (a first run:
everything computed); ``--warm`` fills one temporary folder with an untimed run, then times runs
that read it (a repeated run of the same plan). The user's own cache is never read or written.
The trees' bytecode is compiled first (``compileall``), as an installed package has it, so that a
``PYTHONDONTWRITEBYTECODE=1`` environment does not time the compiler on every run.

Figures: docs/benchmarks.md (start-up, issue 13; disk cache).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], cwd: Path = REPO, env: dict | None = None) -> tuple[float, float, int]:
    """(wall s, CPU s of the child, exit code) of one run, output discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


STAGES_CHILD = r"""
import io, json, sys, time
from contextlib import redirect_stdout
c0 = time.process_time()
import optimizer.optimize as oo
from cli.optimize_cmd import render
from catalog.load import load_catalog
from optimizer.models.params import load_params
from workloads.load import load_plan, resolve_catalog
c1 = time.process_time()
plan = load_plan("examples/chat-fleet.yaml")
cat = resolve_catalog(plan, load_catalog(), "examples/chat-fleet.yaml")
params = load_params(None)
c2 = time.process_time()
class _Cpu:  # optimize_plan's stage clock in CPU seconds (one worker: all of the work is here)
    perf_counter = staticmethod(time.process_time)
oo.time = _Cpu
result = oo.optimize_plan(plan, cat, params, sensitivity=True, verify=True)
c3 = time.process_time()
with redirect_stdout(io.StringIO()):
    data = result.to_json()
    json.dumps(data, indent=2, allow_nan=False)
    render(data)
c4 = time.process_time()
out = {"imports": c1 - c0, "catalog + plan + params": c2 - c1}
out.update({k: v for k, v in result.timings_s.items() if k != "total"})
out.update({"optimize_plan total": c3 - c2, "JSON + tables": c4 - c3, "sensitivity re-solves": result.sensitivity.solves})
print(json.dumps(out))
"""


PACKAGES = ("catalog", "workloads", "optimizer", "reports", "cli")


def compile_tree(tree: Path) -> None:
    """Write the bytecode of ``tree``'s packages (module doc)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL)


class CacheDirs:
    """The GPUPLAN_CACHE_DIR of each run (module doc): ``cold`` a fresh folder per run, ``warm`` one
    folder per tree filled by an untimed run."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.top = tempfile.TemporaryDirectory(prefix="gpuplan-bench-cache-")
        self.warm: dict[str, str] = {}
        self.count = 0

    def env(self, tree: str, base: dict | None, prime: list[str] | None = None, cwd: Path = REPO) -> dict | None:
        """The environment of the next run of ``tree`` (``prime``: the command that fills a warm folder)."""
        env = dict(base if base is not None else os.environ)
        if self.mode == "cold":
            self.count += 1
            env["GPUPLAN_CACHE_DIR"] = str(Path(self.top.name) / f"cold-{self.count}")
        else:
            if tree not in self.warm:
                self.warm[tree] = env["GPUPLAN_CACHE_DIR"] = str(Path(self.top.name) / f"warm-{tree}")
                if prime is not None:
                    subprocess.run(prime, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            env["GPUPLAN_CACHE_DIR"] = self.warm[tree]
        return env

    def label(self) -> str:
        return {"cold": "cold cache", "warm": "warm cache"}[self.mode]


def stages(runs: int, other: Path | None = None, mode: str = "cold") -> None:
    """Median CPU seconds of each stage of the chat fleet over ``runs`` fresh processes (module
    doc); with ``other`` (another checkout, its tree first on the path) the two interleaved."""
    trees = {"this": (REPO, {**os.environ, "GPUPLAN_WORKERS": "1"})}
    if other is not None:
        trees["other"] = (other.resolve(), {**os.environ, "GPUPLAN_WORKERS": "1", "PYTHONPATH": str(other.resolve())})
    got: dict[str, list[dict]] = {t: [] for t in trees}
    caches = CacheDirs(mode)
    for _ in range(runs):
        for t, (cwd, env) in trees.items():
            env = caches.env(t, env, [sys.executable, "-c", STAGES_CHILD], cwd)
            done = subprocess.run([sys.executable, "-c", STAGES_CHILD], cwd=cwd, env=env, capture_output=True,
                                  text=True, check=True)
            got[t].append(json.loads(done.stdout.strip().splitlines()[-1]))
    for t, rows in got.items():
        print(f"[{t} {trees[t][0]}, {caches.label()}]")
        for key in rows[0]:
            values = [g.get(key, 0.0) for g in rows]
            print(f"  {key:28s} median {statistics.median(values):8.3f}  (runs: {', '.join(f'{v:.3f}' for v in values)})")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--only", choices=["help", "chat"], default=None)
    ap.add_argument("--compare", type=Path, default=None, help="another checkout, run interleaved")
    ap.add_argument("--stages", action="store_true", help="CPU seconds by stage of the chat fleet, in-process")
    cache = ap.add_mutually_exclusive_group()
    cache.add_argument("--cold", action="store_const", const="cold", dest="cache", default="cold",
                       help="a fresh cache folder per run (default)")
    cache.add_argument("--warm", action="store_const", const="warm", dest="cache", help="a cache filled by a first run")
    ap.add_argument("args", nargs="*", help="extra arguments of optimize (after --)")
    args = ap.parse_args()
    for tree in [REPO] + ([args.compare.resolve()] if args.compare is not None else []):
        compile_tree(tree)
    if args.stages:
        stages(args.runs, args.compare, args.cache)
        return 0
    gpuplan = shutil.which("gpuplan") or str(Path(sys.executable).with_name("gpuplan"))
    # this tree first on the path: the console script imports the installed (editable) package otherwise,
    # which in a git worktree is another checkout
    trees = {"this": ([gpuplan], REPO, {**os.environ, "PYTHONPATH": str(REPO)})}
    if args.compare is not None:
        other = args.compare.resolve()
        trees["other"] = ([sys.executable, "-m", "cli.app"], other, {**os.environ, "PYTHONPATH": str(other)})
    cases = {"help": ["--help"], "chat": ["optimize", "examples/chat-fleet.yaml", *args.args]}
    targets = {"help": 0.3, "chat": 1.0}
    for name, tail in cases.items():
        if args.only and name != args.only:
            continue
        runs: dict[str, list] = {t: [] for t in trees}
        caches = CacheDirs(args.cache)
        for _ in range(args.runs):
            for t, (head, cwd, env) in trees.items():
                runs[t].append(timed(head + tail, cwd, caches.env(t, env, head + tail, cwd)))
        for t, got in runs.items():
            bad = [rc for _, _, rc in got if rc != 0]
            wall = statistics.median(r[0] for r in got)
            cpu = statistics.median(r[1] for r in got)
            where = "" if len(trees) == 1 else f"[{t} {trees[t][1]}] "
            print(f"{where}{' '.join(['gpuplan'] + tail):45s} wall median {wall:.3f} s (min {min(r[0] for r in got):.3f}), "
                  f"CPU median {cpu:.3f} s, target {targets[name]} s over {args.runs} runs"
                  + (f" ({caches.label()})" if name == "chat" else "")
                  + (f"; {len(bad)} runs FAILED (exit {bad[0]})" if bad else ""))
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
