"""Simulator speed: 20,000 requests on one configuration, wall time printed.

Usage: python scripts/bench_simulator.py [--requests 20000] [--load 0.7]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from catalog import load_catalog  # noqa: E402
from optimizer.models import serving  # noqa: E402
from optimizer.models.configs import build_configs  # noqa: E402
from optimizer.models.params import load_params  # noqa: E402
from optimizer.models.simulate import simulate  # noqa: E402
from workloads.spec import SLO, LengthDist  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--load", type=float, default=0.7, help="fraction of the analytic capacity")
    args = ap.parse_args(argv)
    cat, params = load_catalog(None), load_params()
    c = build_configs(cat.model("llama-3.1-8b"), [(cat.device("h100-sxm"), cat.precision("bf16"), 1, 1)], params)
    p, o = LengthDist(mean=1000, p99=4000), LengthDist(mean=256, p99=1024)
    qps = float(serving.capacity_at_slo(c, p, o, SLO(), offline_ceiling=None).max_qps[0]) * args.load
    for label in ("low load (0.2 req/s: many idle steps)", f"{args.load:.0%} of capacity ({qps:.1f} req/s)"):
        q = 0.2 if label.startswith("low") else qps
        t0 = time.perf_counter()
        r = simulate(c, 0, q, p, o, requests=args.requests, seed=0)
        dt = time.perf_counter() - t0
        print(f"{label}: {args.requests} requests, {r.steps:,} steps, {dt:.2f} s wall "
              f"({r.steps / dt:,.0f} steps/s); p99 TTFT {r.ttft[99.0].value_ms:.1f} ms, "
              f"p99 TPOT {r.tpot[99.0].value_ms:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
