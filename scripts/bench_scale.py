"""Scale benchmark: 500 workloads on a catalog of 200 devices, end to end through the CLI.

    python scripts/bench_scale.py [--workloads 500] [--devices 200] [--time-limit 120]
                                    [--dir /tmp/gpuplan-scale] [--no-run]
    python scripts/bench_scale.py --workloads 60 --dump-problem /tmp/p60.pkl   # candidates once, pickled
    python scripts/bench_scale.py --solve-only /tmp/p60.pkl [--time-limit 120]  # the solve stage alone
    python scripts/bench_scale.py --step1 /tmp/p60.pkl [--first 20] [--runs 3] [--time-limit 120]  # step 1, 1 vs N workers

``--dump-problem`` computes the candidates in this process as ``gpuplan optimize`` does (models,
headroom sizing) and pickles the plan and its ``FleetProblem``; ``--bench20`` does it for the
20-workload plan of ``scripts/bench_optimizer.py`` instead. ``--solve-only`` loads such a file
and runs the solve stage (``optimizer.optimize.solve_stage``: one-device fleets, then the main
solve) with ``--time-limit``, printing its wall and CPU time, objective, gap and the
one-device fleet: the way to iterate on the solver without re-evaluating candidates (which
took 2,132 s at 500 workloads under load). ``--step1`` times the decomposition's step 1
(``decompose.workload_plans``, its guard PLANS_SHARE of ``--time-limit``; 1e5: none) serially and on
the worker pool (``GPUPLAN_WORKERS``, default the usable CPUs), interleaved, on the first ``--first``
workloads: wall and CPU seconds (this process and its workers), the guard's note, whether both gave
the same plans.

Writes two inputs into ``--dir``:

- ``catalog-200.yaml``: a ``--catalog`` override adding synthetic devices until the catalog
  has ``--devices`` entries; each is a real datacenter device (with a purchase price)
  perturbed by ±20 % in bandwidth, peaks and price, ±10 % in TDP, keyed ``BASE-sNNN``.
- ``plan-500.yaml``: ``--workloads`` online services drawn from 24 realistic classes (model ×
  traffic shape × SLO tier — the way an organisation's services share models and SLO
  tiers), each with its own rate (1-150 req/s) and replica minimum; precisions bf16/fp8.

Then runs ``gpuplan optimize plan-500.yaml --catalog catalog-200.yaml --json result.json
--time-limit T`` under ``/usr/bin/time -v`` and reports wall time, peak RSS, status, gap
and fleet size. The run must end (optimal, or feasible at the time limit with its gap)
within bounded memory; candidate generation and the per-workload bound solves come before
the solver's time limit and are included in the wall time.

Measured (2 shared cores, other jobs running; --time-limit 120, seed 0):
- first run: exit 0, wall 764 s, peak RSS 13.9 GB; feasible at the time limit with gap 100 %,
  92,480 GPUs on 176 device types, $2.33 B, while its own one-device diagnostic was $306 M;
  3.5 M candidates[] rows made a 1.8 GB JSON.
- after capacities in a worker pool, workloads evaluated 32 at a time, candidates[] bounded
  at 20,000 rows and the time-limit fallback to the cheapest one-device fleet: exit 0, wall
  262 s, peak RSS 3.5 GB; feasible (one-device fleet, gap 16.6 % against the main solve's
  bound), 4,509 GPUs on 564 servers, $219.7 M; 21,712 candidate rows.
- with workloads split into size buckets only where that is cheaper (optimizer/planning/bucketing.py;
  most are served whole): exit 0, wall 711 s, peak RSS 2.2 GB; feasible (one-device fleet, gap
  18.5 %), 4,377 GPUs on 548 servers, $213.3 M; 20,009 candidate rows. Candidates took 166 s
  (the same code before the bucketing change: 284 s wall, solve 86 s), but the main MILP ran
  565 s against a 120 s limit: HiGHS 1.16 stays in its root (cut rounds on 121,337 rows x
  302,322 columns) without checking its time limit, and interrupt callbacks did not stop it
  either (tried: MIP, simplex and IPM interrupts). Not fixed: a hard deadline needs the solve
  in a child process.
- the solve stage alone (``--solve-only``, docs/benchmarks.md "Decomposition of the solve"): at
  60 workloads (15,294 options) the decomposition returns $13.01 M, gap 0.78 %, where the solver
  before held the one-device fleet ($15.48 M) at its deadline; the full 500-workload candidate
  evaluation did not fit this session (~20 % of a core at load 6-8), so 500 workloads were
  measured on 500 copies of the 60 evaluated ones with re-drawn rates (see there).
- with workloads of one shape (all but rate and replica rules) evaluated once and the split-or-whole
  solves on their undominated options (docs/benchmarks.md "one evaluation per workload shape", load
  4.5-6): exit 0, wall 628 s (974 s before), candidates 441 s (771 s), solve 121 s, verification 53 s,
  peak RSS 848 MiB; feasible, $207.4 M at gap 3.66 %, below the one-device fleet ($239.3 M).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml
from bench_optimizer import big_plan  # a sibling script: scripts/ is sys.path[0] when this one runs

from catalog import load_catalog
from optimizer.models.params import load_params
from optimizer.optimize import solve_stage
from optimizer.planning.candidate_set import fleet_problem
from optimizer.planning.candidates import model_candidates
from optimizer.planning.headroom import capacity_factors, demand_factor, sized
from optimizer.planning.safeguards import fidelity_map
from optimizer.planning.solver_options import SolverOptions
from workloads import parse_plan, resolve_catalog

# Timed runs compute everything: the disk cache (README "Cache") is off unless GPUPLAN_CACHE_DIR is set.
os.environ.setdefault("GPUPLAN_CACHE_DIR", "")

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "mistral-7b", "qwen2.5-72b", "mixtral-8x7b", "llama-3.1-405b"]
SHAPES = [  # (prompt mean, p99), (output mean, p99): chat, RAG, completion, summarisation
    ((1024, 4096), (256, 1024)), ((3000, 8000), (300, 1200)), ((512, 2048), (64, 256)), ((2048, 6000), (400, 1000)),
]
SLO_TIERS = [{"ttft_p99_ms": 1000, "tpot_p99_ms": 80}, {"ttft_p99_ms": 3000, "tpot_p99_ms": 150}]
PERTURBED = ("memory_bandwidth_tb_s", "bf16_tflops", "fp16_tflops", "fp8_tflops", "int8_tops", "fp4_tflops",
             "purchase_usd", "cloud_usd_per_gpu_hour")


def synthetic_catalog(n_devices: int, rng: random.Random) -> dict:
    """Override entries that bring the catalog to ``n_devices`` devices."""
    cat = load_catalog()
    bases = [d for d in cat.devices.values() if d.purchase_usd and d.tdp_w and not d.consumer]
    entries = []
    for i in range(max(0, n_devices - len(cat.devices))):
        base = bases[i % len(bases)]
        data = base.model_dump(mode="json", exclude_none=True)
        data["key"] = f"{base.key}-s{i:03d}"
        data["name"] = f"{base.name} (synthetic {i:03d})"
        for name in PERTURBED:
            if name in data:
                data[name] = round(data[name] * rng.uniform(0.8, 1.2), 4)
        data["tdp_w"] = round(data["tdp_w"] * rng.uniform(0.9, 1.1), 1)
        data["ranges"] = {}
        data["estimated"] = {**data.get("estimated", {}), "purchase_usd": "synthetic: base price ±20 %"}
        entries.append(data)
    return {"devices": entries}


def synthetic_plan(n_workloads: int, rng: random.Random) -> dict:
    classes = [(m, s, t) for m in MODELS for s in SHAPES[:2] for t in SLO_TIERS]  # 24 classes
    workloads = []
    for i in range(n_workloads):
        model, (prompt, output), slo = classes[rng.randrange(len(classes))]
        small = model.endswith(("7b", "8b"))
        workloads.append({
            "name": f"svc{i:03d}", "model": model,
            "qps": round(rng.uniform(1, 150 if small else 40), 2),
            "prompt_tokens": {"mean": prompt[0], "p99": prompt[1]},
            "output_tokens": {"mean": output[0], "p99": output[1]},
            "slo": dict(slo), "precisions": ["bf16", "fp8"], "min_replicas": 1 + i % 2,
        })
    return {"name": f"scale-{n_workloads}", "objective": "tco", "workloads": workloads}


def time_v(stderr: str) -> dict[str, str]:
    """Wall time and peak RSS from ``/usr/bin/time -v`` output."""
    out = {}
    for key, pattern in (("wall", r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)"),
                         ("max_rss_kb", r"Maximum resident set size \(kbytes\): (\d+)"),
                         ("exit", r"Exit status: (\d+)")):
        m = re.search(pattern, stderr)
        out[key] = m.group(1) if m else "?"
    return out


def dump_problem(plan, catalog, path: Path) -> None:
    """Candidates as ``optimize_plan`` computes them (models, then headroom sizing), pickled with the plan."""
    t0 = time.perf_counter()
    params = load_params(None)
    cset = model_candidates(plan, catalog, params)
    cset = sized(cset, capacity_factors(plan, fidelity_map(cset, params, catalog)), demand_factor(plan))
    problem = fleet_problem(cset, plan)
    path.write_bytes(pickle.dumps((plan, problem)))
    print(f"{len(problem.demands)} workloads, {len(problem.options):,} options: candidates "
          f"{time.perf_counter() - t0:.1f} s; wrote {path}")


def solve_only(path: Path, time_limit_s: float) -> None:
    """The solve stage on a pickled problem: wall and CPU time, objective, gap, one-device fleet."""
    _, problem = pickle.loads(path.read_bytes())
    t0, c0 = time.perf_counter(), time.process_time()
    sol, single, _ = solve_stage(problem, SolverOptions(time_limit_s=time_limit_s))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gap = "—" if sol.gap is None else f"{sol.gap:.2%}"
    one = f"${single.objective_usd:,.0f} ({single.gpus} × {single.device})" if single else "—"
    print(f"{len(problem.demands)} workloads, {len(problem.options):,} options: solve stage wall {wall:.1f} s, "
          f"CPU {cpu:.1f} s (this process), peak RSS {rss:,.0f} MiB | {sol.status} ${sol.objective_usd or 0:,.0f}, "
          f"gap {gap}, bound ${sol.bound_usd or 0:,.0f}; {sum(sol.gpus.values())} GPUs on {len(sol.gpus)} device "
          f"types | one-device {one}\n  {sol.detail}")


def step1(path: Path, first: int | None, runs: int, time_limit_s: float) -> None:
    """``workload_plans`` of the pickled problem (its first ``first`` workloads), serial then on the pool,
    with the guard ``solve_decomposed`` gives it at ``time_limit_s`` (PLANS_SHARE of it)."""
    from optimizer.planning.milp import decompose
    from optimizer.planning.milp.problem import FleetProblem

    _, problem = pickle.loads(path.read_bytes())
    if first:
        keep = {d.workload for d in problem.demands[:first]}
        problem = FleetProblem(problem.demands[:first], tuple(o for o in problem.options if o.workload in keep),
                               problem.units, problem.limits)
    decompose.PARALLEL_MIN_OPTIONS = 0  # the pool whenever GPUPLAN_WORKERS allows it
    pool_workers = os.environ.get("GPUPLAN_WORKERS", "")
    got = {}
    for run in range(runs):
        for label, workers in (("serial", "1"), ("pool", pool_workers)):
            os.environ["GPUPLAN_WORKERS"] = workers
            t0, c0 = time.perf_counter(), _cpu_s()
            guarded: list[str] = []
            plans = decompose.workload_plans(problem, time_limit_s=decompose.PLANS_SHARE * time_limit_s, gap=1e-3,
                                             guarded=guarded)
            wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
            got[label] = plans
            print(f"run {run + 1} {label:6s} ({decompose.parallel_workers()} workers): {len(problem.demands)} workloads, "
                  f"{len(problem.options):,} options: wall {wall:.2f} s, CPU {cpu:.2f} s{'; ' + guarded[0] if guarded else ''}",
                  flush=True)
    print("same plans and bounds:", got["serial"] == got["pool"])


def _cpu_s() -> float:
    """User + system CPU seconds of this process and its finished workers."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=500)
    ap.add_argument("--devices", type=int, default=200)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/gpuplan-scale"))
    ap.add_argument("--no-run", action="store_true", help="only write the inputs")
    ap.add_argument("--dump-problem", type=Path, help="pickle the plan and its FleetProblem here, then stop")
    ap.add_argument("--bench20", action="store_true", help="with --dump-problem: bench_optimizer.py's 20 workloads")
    ap.add_argument("--solve-only", type=Path, help="run the solve stage on a pickled problem, then stop")
    ap.add_argument("--step1", type=Path, help="time step 1 of the decomposition on a pickled problem, then stop")
    ap.add_argument("--first", type=int, help="with --step1: the first N workloads only")
    ap.add_argument("--runs", type=int, default=3, help="with --step1: interleaved serial/pool pairs")
    args = ap.parse_args()
    if args.step1:
        step1(args.step1, args.first, args.runs, args.time_limit)
        return
    if args.solve_only:
        solve_only(args.solve_only, args.time_limit)
        return
    if args.dump_problem and args.bench20:
        plan = big_plan(20, load_catalog())
        dump_problem(plan, resolve_catalog(plan, load_catalog(), "bench"), args.dump_problem)
        return

    rng = random.Random(args.seed)
    args.dir.mkdir(parents=True, exist_ok=True)
    cat_path = args.dir / f"catalog-{args.devices}.yaml"
    plan_path = args.dir / f"plan-{args.workloads}.yaml"
    cat_path.write_text(yaml.safe_dump(synthetic_catalog(args.devices, rng), sort_keys=False))
    plan_path.write_text(yaml.safe_dump(synthetic_plan(args.workloads, rng), sort_keys=False))
    n_dev = len(load_catalog(cat_path).devices)
    print(f"wrote {cat_path} ({n_dev} devices in the catalog) and {plan_path} ({args.workloads} workloads)")
    if args.dump_problem:
        plan = parse_plan(yaml.safe_load(plan_path.read_text()), str(plan_path))
        dump_problem(plan, resolve_catalog(plan, load_catalog(cat_path), str(plan_path)), args.dump_problem)
        return
    if args.no_run:
        return
    gpuplan = Path(sys.executable).with_name("gpuplan")
    result = args.dir / "result.json"
    cmd = ["/usr/bin/time", "-v", str(gpuplan), "optimize", str(plan_path), "--catalog", str(cat_path),
           "--json", str(result), "--time-limit", str(args.time_limit)]
    print("$ " + " ".join(cmd), flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    t = time_v(proc.stderr)
    print(f"exit {proc.returncode}; wall {t['wall']} ({seconds:.1f} s); peak RSS {int(t['max_rss_kb']) / 1024:.0f} MiB"
          if t["max_rss_kb"] != "?" else f"exit {proc.returncode}; {proc.stderr[-2000:]}")
    if result.exists():
        data = json.loads(result.read_text())
        gap = data.get("gap")
        print(f"status {data['status']} ({data['status_detail']}); gap {gap if gap is None else f'{gap:.4%}'}; "
              f"solve {data['solve_seconds']:.1f} s; {data['gpus_total']} GPUs on {data['nodes_total']} servers, "
              f"{len(data['fleet'])} device types; objective ${data['objective_usd']:,.0f}; "
              f"{len(data['candidates'])} candidate rows")
    if proc.returncode != 0:
        print(proc.stderr.splitlines()[0] if proc.stderr else "", file=sys.stderr)


if __name__ == "__main__":
    main()
