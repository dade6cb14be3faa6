"""Simulator speed: one configuration's simulations, or a plan's whole verification stage.

    python scripts/bench_simulator.py [--requests 20000] [--load 0.7] [--repeat 5]
    python scripts/bench_simulator.py --verification PLAN.yaml|N [--runs 5] [--compare OTHER_CHECKOUT]

Default: 20,000 requests on llama-3.1-8b / H100 bf16 at low load (0.2 req/s: many idle steps) and at
70 % of its analytic capacity; median CPU seconds of ``--repeat`` runs of each (one process).

``--verification``: the simulator check of a plan (``verify_and_resize``, as ``gpuplan optimize``
runs it), each run in a fresh process: candidates and solve come from a disk cache kept for the
benchmark (one folder per checkout, filled by the first run, so every run checks the same fleet), the
simulations are computed (the cache is switched off for them). ``N`` = scripts/bench_optimizer.py's
N-workload plan. Printed: median wall and CPU seconds (this process and its workers; ``GPUPLAN_WORKERS``
as set) of ``verify_and_resize`` and of the ``verification`` stage (which also assembles the result),
the deployments checked and whether the verification is identical to the other checkout's.
``--compare DIR`` runs the same child from another checkout (that tree first on the path), interleaved
run by run. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from catalog import load_catalog  # noqa: E402
from optimizer.models import serving  # noqa: E402
from optimizer.models.configs import build_configs  # noqa: E402
from optimizer.models.params import load_params  # noqa: E402
from optimizer.models.simulate import simulate  # noqa: E402
from workloads.spec import SLO, LengthDist  # noqa: E402

VERIFY_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, SCRIPTS)
import optimizer.optimize as oo
from catalog import load_catalog
from optimizer.planning import disk_cache
from optimizer.planning.verify import VERIFY_REQUESTS
from workloads import load_plan, resolve_catalog
def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
cat = load_catalog()
if PLAN.endswith(".yaml"):
    plan = load_plan(PLAN)
else:
    from bench_optimizer import big_plan
    plan = big_plan(int(PLAN), cat)
cat = resolve_catalog(plan, cat, PLAN)
real, box = oo.verify_and_resize, {}
def timed(*args, **kwargs):
    disk_cache.disable()  # the simulations are computed; candidates and solve came from the cache
    t0, c0 = time.perf_counter(), cpu()
    out = real(*args, **kwargs)
    box.update(wall=time.perf_counter() - t0, cpu=cpu() - c0)
    return out
oo.verify_and_resize = timed
result = oo.optimize_plan(plan, cat, verify=True)
v = result.verification
print(json.dumps({"verify_wall_s": box["wall"], "verify_cpu_s": box["cpu"],
                  "stage_wall_s": result.timings_s["verification"], "rounds": v.rounds,
                  "deployments": len(v.deployments), "runs": sum(d.requests for d in v.deployments) // VERIFY_REQUESTS,
                  "verification": [[d.workload, d.key, d.metric, d.simulated_ms, d.simulated_ci_low_ms,
                                    d.simulated_ci_high_ms, d.requests, d.met, d.derate_factor] for d in v.deployments],
                  "objective_usd": result.objective_usd}))
"""


def verification(plan: str, runs: int, other: Path | None) -> None:
    """Median wall/CPU of the verification stage over ``runs`` fresh processes per checkout (module doc)."""
    trees = {"this": REPO.resolve()}
    if other is not None:
        trees["other"] = other.resolve()
    top = tempfile.TemporaryDirectory(prefix="gpuplan-bench-verify-")
    got: dict[str, list[dict]] = {t: [] for t in trees}
    child = VERIFY_CHILD.replace("SCRIPTS", repr(str(REPO / "scripts"))).replace("PLAN", repr(plan))
    for i in range(runs + 1):  # run 0 fills each checkout's cache (untimed)
        for t, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": str(tree), "GPUPLAN_CACHE_DIR": str(Path(top.name) / t)}
            done = subprocess.run([sys.executable, "-c", child], cwd=tree, env=env, capture_output=True, text=True,
                                  check=True)
            if i:
                got[t].append(json.loads(done.stdout.strip().splitlines()[-1]))
    for t, rows in got.items():
        print(f"[{t} {trees[t]}] {rows[0]['deployments']} deployments checked ({rows[0]['runs']} runs of their worst "
              f"buckets), {rows[0]['rounds']} re-size rounds, ${rows[0]['objective_usd']:,.0f}")
        for key in ("verify_wall_s", "verify_cpu_s", "stage_wall_s"):
            values = [r[key] for r in rows]
            print(f"  {key:14s} median {statistics.median(values):7.2f}  (runs: {', '.join(f'{v:.2f}' for v in values)})")
    if other is not None:
        same = all(r["verification"] == got["this"][0]["verification"] for t in got for r in got[t])
        print(f"verification identical in every run of both checkouts: {same}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def one_config(requests: int, load: float, repeat: int) -> None:
    cat, params = load_catalog(None), load_params()
    c = build_configs(cat.model("llama-3.1-8b"), [(cat.device("h100-sxm"), cat.precision("bf16"), 1, 1)], params)
    p, o = LengthDist(mean=1000, p99=4000), LengthDist(mean=256, p99=1024)
    qps = float(serving.capacity_at_slo(c, p, o, SLO(), offline_ceiling=None).max_qps[0]) * load
    for label in ("low load (0.2 req/s: many idle steps)", f"{load:.0%} of capacity ({qps:.1f} req/s)"):
        q = 0.2 if label.startswith("low") else qps
        cpu = []
        for _ in range(repeat):
            t0 = time.process_time()
            r = simulate(c, 0, q, p, o, requests=requests, seed=0)
            cpu.append(time.process_time() - t0)
        dt = statistics.median(cpu)
        print(f"{label}: {requests} requests, {r.steps:,} steps, CPU median {dt:.3f} s of {repeat} "
              f"({', '.join(f'{x:.3f}' for x in cpu)}; {r.steps / dt:,.0f} steps/s); p99 TTFT {r.ttft[99.0].value_ms:.1f} ms, "
              f"p99 TPOT {r.tpot[99.0].value_ms:.2f} ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--load", type=float, default=0.7, help="fraction of the analytic capacity")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each simulation (median CPU)")
    ap.add_argument("--verification", metavar="PLAN", help="a plan file, or N for bench_optimizer's N-workload plan")
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per checkout (--verification)")
    ap.add_argument("--compare", type=Path, help="another checkout, interleaved run by run (--verification)")
    args = ap.parse_args(argv)
    if args.verification:
        verification(args.verification, args.runs, args.compare)
    else:
        one_config(args.requests, args.load, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
