"""Benchmark of ``serving.capacity_at_slo`` over the configurations the optimizer sees.

Usage: python scripts/bench_capacity.py [--repeat 5] [--fleet PLAN.yaml] [--model KEY]

llama-3.1-70b (or ``--model KEY``, e.g. qwen3-30b-a3b for the MoE rows) on every catalog device × bf16/fp8 × tp 1/2/4/8 × pp 1/2 (432 configs, the
runnable ones evaluated), the chat workload (prompt 1024/p99 4096, output 256/p99 1024,
TTFT p99 2 s, TPOT p99 200 ms). ``--fleet PLAN``: instead, the ``capacity_at_slo_sets`` searches
the plan's candidate generation runs (recorded from one ``model_candidates`` call, one worker, no
disk cache), replayed. Prints the best wall time and the median CPU time (user + system of this
process: the figure to compare on a shared machine) of ``--repeat`` runs after a warm-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from catalog import load_catalog  # noqa: E402
from optimizer.models import serving  # noqa: E402
from optimizer.models.configs import build_configs  # noqa: E402
from optimizer.models.params import load_params  # noqa: E402
from optimizer.planning.candidates import model_candidates  # noqa: E402
from workloads import load_plan, resolve_catalog  # noqa: E402
from workloads.spec import SLO, LengthDist  # noqa: E402


def catalog_call(model: str = "llama-3.1-70b"):
    """The default benchmark: one ``capacity_at_slo`` call (a closure) and its description."""
    cat, params = load_catalog(None), load_params()
    combos = [(d, cat.precision(p), t, pp) for d in cat.devices.values() for p in ("bf16", "fp8")
              for t in (1, 2, 4, 8) for pp in (1, 2)]
    c = build_configs(cat.model(model), combos, params)
    prompt, output = LengthDist(mean=1024, p99=4096), LengthDist(mean=256, p99=1024)
    slo = SLO(ttft_p99_ms=2000, tpot_p99_ms=200)

    def run():
        return serving.capacity_at_slo(c, prompt, output, slo, params)

    cap = run()
    servable = int(np.sum(cap.max_qps > 0))
    return run, f"{model}: {len(c)} configs ({int(np.sum(c.runnable))} runnable, {servable} servable): capacity_at_slo"


def fleet_calls(path: str):
    """The ``capacity_at_slo_sets`` searches of ``path``'s candidate generation (a closure replaying them)."""
    os.environ["GPUPLAN_WORKERS"] = "1"  # every search in this process
    os.environ["GPUPLAN_CACHE_DIR"] = ""  # computed, not read from the disk cache
    plan = load_plan(path)
    cat = resolve_catalog(plan, load_catalog(None), path)
    recorded, search = [], serving.capacity_at_slo_sets

    def record(*args, **kwargs):
        recorded.append((args, kwargs))
        return search(*args, **kwargs)

    serving.capacity_at_slo_sets = record  # the module attribute optimizer.planning.evaluate calls
    try:
        model_candidates(plan, cat, load_params(None))
    finally:
        serving.capacity_at_slo_sets = search

    def run():
        for args, kwargs in recorded:
            search(*args, **kwargs)

    rows = sum(len(args[0]) * len(args[1]) for args, _ in recorded)
    return run, f"{Path(path).name}: {len(recorded)} capacity_at_slo_sets searches ({rows} rows)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--fleet", default=None, help="a plan file: replay its candidates' capacity searches")
    ap.add_argument("--model", default="llama-3.1-70b", help="the catalog model of the default benchmark")
    args = ap.parse_args(argv)
    run, label = fleet_calls(args.fleet) if args.fleet else catalog_call(args.model)
    run()  # warm-up (and, for the default, the call above)
    walls, cpus = [], []
    for _ in range(args.repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        run()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    print(f"{label}: best {min(walls):.3f} s wall, median {statistics.median(cpus):.3f} s CPU of {args.repeat}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
