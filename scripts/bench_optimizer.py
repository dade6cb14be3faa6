"""Benchmark the fleet optimizer: a large generated plan, and the chat fleet end to end.

    python scripts/bench_optimizer.py [--workloads 20] [--buckets 4] [--time-limit 60]
        [--repeat 3] [--no-unpruned] [--end-to-end]

The large plan: N workloads cycling over the catalog's models with varied rates, lengths
and SLOs, every catalog device, every precision, tp 1-8 (pp where needed), 4 length
buckets each. Reported: candidate generation time (performance + serving models), then
how many workloads are served whole rather than split (``optimizer.planning.bucketing``),
the MILP before and after dominance pruning — variables, integers, constraints, build
time, solve time, status and gap (``--repeat`` solves the pruned problem several times
and prints the median: timings on a shared machine are noisy). Candidate generation uses
``GPUPLAN_WORKERS`` processes (default: the usable CPUs; 1 = serial). Target: proven
optimal (gap <= 0.1 %) in < 10 s on a 2-core machine; the chat fleet end to end in < 2 s.
Candidates are screened (``optimizer.planning.screening``: dominated by their capacity bound,
not evaluated) as ``optimize_plan`` runs them; the MILP before pruning evaluates every candidate.
``--end-to-end`` instead runs ``optimize_plan`` on the large plan as ``gpuplan optimize`` does
(verification when small enough, no sensitivity) and prints its stage timings (issue 13: < 10 s).
Both the chat line and ``--end-to-end`` use the CLI's defaults (verification on by default). Each
line gives the CPU seconds (user + system, this process and its finished workers) besides the wall
time: on a shared machine CPU is the figure to compare. The verification stage alone, on the same fleet
every run and against another checkout: ``python scripts/bench_simulator.py --verification 20``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path

from catalog import load_catalog
from optimizer.models.params import load_params
from optimizer.optimize import optimize_plan
from optimizer.planning.candidate_set import fleet_problem
from optimizer.planning.candidates import model_candidates
from optimizer.planning.evaluate import parallel_workers
from optimizer.planning.milp.solve import solve_fleet
from optimizer.planning.screening import NOT_EVALUATED
from workloads import load_plan, parse_plan, resolve_catalog

# Timed runs compute everything: the disk cache (README "Cache") is off unless GPUPLAN_CACHE_DIR is set.
os.environ.setdefault("GPUPLAN_CACHE_DIR", "")

REPO = Path(__file__).resolve().parent.parent
MODELS = ["llama-3.1-8b", "llama-3.1-70b", "mistral-7b", "qwen2.5-72b", "mixtral-8x7b", "llama-2-7b",
          "llama-2-70b", "llama-3.1-405b", "deepseek-v3"]
PRECISIONS = ["bf16", "fp16", "fp8", "int8", "int4", "fp4"]


def big_plan(n_workloads: int, catalog=None):
    """N generated workloads; with ``catalog``, prompts shortened to fit each model's context
    (p99 prompt ≤ context − p99 output, mean ≤ half the p99: llama-2 has 4,096 tokens)."""
    workloads = []
    for i in range(n_workloads):
        model = MODELS[i % len(MODELS)]
        small = model.endswith(("7b", "8b"))
        out_mean, out_p99 = [128, 256, 512, 64][(i // 4) % 4], [512, 1024, 2048, 256][(i // 4) % 4]
        p_mean, p_p99 = [256, 1024, 2048, 512][i % 4], [1024, 4096, 8192, 4096][i % 4]
        if catalog is not None:
            p_p99 = min(p_p99, catalog.model(model).max_context_tokens - out_p99)
            p_mean = min(p_mean, p_p99 // 2)
        workloads.append({
            "name": f"svc{i:02d}", "model": model,
            "qps": [5, 20, 60, 150][i % 4] * (4 if small else 1),
            "prompt_tokens": {"mean": p_mean, "p99": p_p99},
            "output_tokens": {"mean": out_mean, "p99": out_p99},
            "slo": {"ttft_p99_ms": [500, 1000, 2000, 3000][(i + 1) % 4], "tpot_p99_ms": [50, 100, 150, 200][i % 4]},
            "precisions": PRECISIONS, "min_replicas": 1 + i % 2,
        })
    return parse_plan({"name": "bench", "objective": "tco", "workloads": workloads}, "bench")


def run_milp(label: str, cset, plan, time_limit_s: float, repeat: int = 1) -> None:
    problem = fleet_problem(cset, plan)
    totals = []
    for _ in range(repeat):
        sol = solve_fleet(problem, time_limit_s=time_limit_s, gap=1e-3)
        totals.append(sol.build_seconds + sol.solve_seconds)
        gap = "—" if sol.gap is None else f"{sol.gap * 100:.3f} %"
        print(f"{label:>16}: {len(problem.options):5d} options, {sol.n_variables:6d} vars "
              f"({sol.n_integer_variables} integer), {sol.n_constraints:5d} constraints | build {sol.build_seconds:6.2f} s, "
              f"solve {sol.solve_seconds:6.2f} s | {sol.status} gap {gap} | objective ${sol.objective_usd or 0:,.2f}")
    if repeat > 1:
        print(f"{label:>16}: build + solve median {statistics.median(totals):.2f} s over {repeat} runs "
              f"(min {min(totals):.2f}, max {max(totals):.2f})")


def cpu_s() -> float:
    """User + system CPU seconds of this process and of its reaped children (the worker pools)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _stages(result) -> str:
    return ", ".join(f"{k} {v:.1f} s" for k, v in (result.timings_s or {}).items())


def _screened(cset) -> str:
    """How many colocated candidates the screening marked dominated without evaluating them."""
    every = [c for wc in cset.workloads for c in wc.candidates]
    screened = sum(NOT_EVALUATED in (c.pruned_reason or "") for c in every)
    return f"{screened:,} of {len(every):,} screened (dominated, not evaluated)"


def _single(result) -> str:
    return f"{result.single_device_best.objective_usd:,.0f}" if result.single_device_best else "—"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=20)
    ap.add_argument("--buckets", type=int, default=4)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--repeat", type=int, default=1, help="solve the pruned problem this many times")
    ap.add_argument("--no-unpruned", action="store_true", help="skip the solve without dominance pruning")
    ap.add_argument("--end-to-end", action="store_true", help="optimize_plan on the large plan, stage timings")
    args = ap.parse_args()

    catalog = load_catalog()
    params = load_params(None)

    t0, c0 = time.perf_counter(), cpu_s()
    plan = load_plan(REPO / "examples" / "chat-fleet.yaml")
    result = optimize_plan(plan, resolve_catalog(plan, catalog, "chat-fleet.yaml"), params, verify=None)
    t1 = time.perf_counter()
    print(f"chat fleet end to end: {t1 - t0:.2f} s, CPU {cpu_s() - c0:.2f} s ({result.status}, solve {result.solve_seconds:.2f} s, "
          f"${result.objective_usd:,.0f}); stages {_stages(result)}")

    plan = big_plan(args.workloads, catalog)
    catalog = resolve_catalog(plan, catalog, "bench")
    if args.end_to_end:
        t0, c0 = time.perf_counter(), cpu_s()
        result = optimize_plan(plan, catalog, params, verify=None)
        print(f"{args.workloads} workloads end to end: {time.perf_counter() - t0:.1f} s, CPU {cpu_s() - c0:.1f} s ({result.status}, "
              f"${result.objective_usd or 0:,.0f}, one-device ${_single(result)}; {result.status_detail}); "
              f"stages {_stages(result)}")
        return
    t0, c0 = time.perf_counter(), cpu_s()
    pruned = model_candidates(plan, catalog, params, n_buckets=args.buckets)  # screened, as optimize_plan runs it
    t1, c1 = time.perf_counter(), cpu_s()
    n_kept = sum(len(wc.kept) for wc in pruned.workloads)
    print(f"{args.workloads} workloads × {args.buckets} buckets: {n_kept} candidates after dominance pruning, "
          f"{_screened(pruned)}; models {t1 - t0:.1f} s, CPU {c1 - c0:.1f} s ({parallel_workers()} worker processes)")
    if not args.no_unpruned:
        t0, c0 = time.perf_counter(), cpu_s()
        full = model_candidates(plan, catalog, params, n_buckets=args.buckets, prune=False)
        n_all = sum(len(wc.candidates) for wc in full.workloads)
        n_full = sum(len(wc.kept) for wc in full.workloads)
        print(f"without pruning (nor screening): {n_all} candidates enumerated, {n_full} runnable with capacity; "
              f"models {time.perf_counter() - t0:.1f} s, CPU {cpu_s() - c0:.1f} s")
    whole = sum(len(wc.buckets) == 1 for wc in pruned.workloads)
    dearer = sum(d.code == "planned_whole" for d in pruned.diagnostics)
    print(f"served whole (optimizer/planning/bucketing.py): {whole} of {args.workloads} workloads, {dearer} of them "
          f"because splitting costs more, the others because it saves nothing")
    if not args.no_unpruned:
        run_milp("before pruning", full, plan, args.time_limit)
    run_milp("after pruning", pruned, plan, args.time_limit, args.repeat)


if __name__ == "__main__":
    main()
