"""Analytic serving model vs the discrete-event simulator: p99 TTFT/TPOT and capacity at SLO.

Usage: python scripts/agreement.py [--requests 20000] [--no-capacity]

Grid: several models, devices, precisions and tp degrees, with fixed and lognormal
lengths, at 20 %-90 % of each configuration's analytic capacity (the largest rate at
which the replica is not saturated and the KV cache holds its p99 occupancy). Prints
one row per point and the median / worst relative difference |analytic − sim| / sim,
for p99 TTFT, p99 TPOT and p99 KV-cache occupancy (tokens; the simulator's occupancy is
sampled once per step while the measured requests arrive).
Then capacity at an SLO: the analytic bisection vs a bisection on the simulator.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from catalog import load_catalog  # noqa: E402
from optimizer.models import (
    perf,  # noqa: E402
    serving,  # noqa: E402
)
from optimizer.models.params import load_params  # noqa: E402
from optimizer.models.simulate import simulate  # noqa: E402
from workloads.spec import SLO, LengthDist  # noqa: E402

# (model, device, precision, tp, prompt, output)
CONFIGS = [
    ("llama-3.1-8b", "h100-sxm", "bf16", 1, LengthDist(mean=467), LengthDist(mean=256)),
    ("llama-3.1-8b", "a100-80gb-sxm", "bf16", 1, LengthDist(mean=1000, p99=4000), LengthDist(mean=200, p99=800)),
    ("llama-3.1-8b", "l40s", "fp8", 1, LengthDist(mean=2000), LengthDist(mean=128)),
    ("llama-3.1-70b", "h100-sxm", "fp8", 4, LengthDist(mean=1000, p99=4000), LengthDist(mean=200, p99=800)),
    ("llama-3.1-70b", "h100-sxm", "bf16", 8, LengthDist(mean=202), LengthDist(mean=214)),
    ("mixtral-8x7b", "h100-sxm", "fp8", 2, LengthDist(mean=512), LengthDist(mean=256, p99=1024)),
    ("qwen2.5-72b", "mi300x", "fp8", 2, LengthDist(mean=800), LengthDist(mean=300)),
    ("mistral-7b", "l4", "fp8", 1, LengthDist(mean=300, p99=1200), LengthDist(mean=150)),
]
LOADS = (0.2, 0.5, 0.7, 0.9)
CAPACITY_SLO = {"tpot_p99_ms": 1.6, "ttft_p99_ms": 6.0}  # multiples of the zero-load values
# MoE: the experts one step reads grow from k to ~E between batch 1 and ~4, so TPOT jumps
# from 6.3 ms to ~15 ms by batch 2 and then stays flat. 1.6x the zero-load TPOT sits on that
# step (capacity < 0.4 req/s, set by rare batch fluctuations); 3x puts the SLO on the plateau.
CAPACITY_SLO_BY_MODEL = {"mixtral-8x7b": {"tpot_p99_ms": 3.0, "ttft_p99_ms": 6.0}}


def configs(cat, params, row):
    mk, dk, pk, tp, p, o = row
    c = perf.build_configs(cat.model(mk), [(cat.device(dk), cat.precision(pk), tp, 1)], params)
    return c, p, o, f"{mk} {dk} {pk} tp{tp} L={_d(p)} O={_d(o)}"


def _d(x: LengthDist) -> str:
    return f"{x.mean_tokens:g}" if x.kind == "fixed" else f"{x.mean_tokens:g}/p99 {x.p99_tokens:g}"


def grid_points(cat, params, rows=CONFIGS, loads=LOADS):
    """(configs, prompt, output, label, qps, load) for every grid point."""
    for row in rows:
        c, p, o, label = configs(cat, params, row)
        cap = serving.capacity_at_slo(c, p, o, SLO()).max_qps[0]
        for f in loads:
            yield c, p, o, label, cap * f, f


def rel(a, b):
    return abs(a - b) / b


def sim_capacity(c, p, o, slo: SLO, lam_hi: float, requests: int, seed: int = 1) -> float:
    """Bisection on the simulator's p99s (12 steps, geometric)."""
    lo, hi = lam_hi * 0.05, lam_hi * 1.5
    for _ in range(12):
        mid = (lo * hi) ** 0.5
        r = simulate(c, 0, mid, p, o, requests=requests, seed=seed)
        ok = r.preemptions == 0
        if slo.ttft_p99_ms is not None:
            ok &= r.ttft[99.0].value_ms <= slo.ttft_p99_ms
        if slo.tpot_p99_ms is not None:
            ok &= r.tpot[99.0].value_ms <= slo.tpot_p99_ms
        lo, hi = (mid, hi) if ok else (lo, mid)
    return (lo * hi) ** 0.5


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--capacity-requests", type=int, default=8_000)
    ap.add_argument("--no-capacity", action="store_true")
    args = ap.parse_args(argv)
    cat, params = load_catalog(None), load_params()
    t0 = time.perf_counter()
    rows, d_ttft, d_tpot, d_kv = [], [], [], []
    print(f"{'configuration':58s} {'load':>5s} {'qps':>8s} | {'TTFT p99 ms an/sim':>19s} {'diff':>6s} | "
          f"{'TPOT p99 ms an/sim':>19s} {'diff':>6s} | {'KV p99 ktok an/sim':>17s} {'diff':>6s}")
    for c, p, o, label, q, f in grid_points(cat, params):
        a = serving.serve_at_rate(c, q, p, o)
        s = simulate(c, 0, q, p, o, requests=args.requests, seed=1)
        at, st = float(a.ttft_p99_ms[0]), s.ttft[99.0].value_ms
        ap_, sp = float(a.tpot_p99_ms[0]), s.tpot[99.0].value_ms
        d_ttft.append(rel(at, st))
        d_tpot.append(rel(ap_, sp))
        ak, sk = float(a.kv_p99_tokens[0]) / 1e3, s.kv_p99_tokens / 1e3
        d_kv.append(rel(ak, sk))
        rows.append((label, f, q, at, st, ap_, sp, ak, sk))
        print(f"{label:58s} {f:5.0%} {q:8.2f} | {at:9.1f} {st:9.1f} {d_ttft[-1]:6.1%} | "
              f"{ap_:9.2f} {sp:9.2f} {d_tpot[-1]:6.1%} | {ak:8.1f} {sk:8.1f} {d_kv[-1]:6.1%}")
    print(f"\n{len(rows)} points; TTFT p99: median {np.median(d_ttft):.1%}, worst {np.max(d_ttft):.1%}; "
          f"TPOT p99: median {np.median(d_tpot):.1%}, worst {np.max(d_tpot):.1%}  "
          "(targets: median <= 10 %, worst <= 25 %)")
    print(f"KV p99 occupancy: median {np.median(d_kv):.1%}, worst {np.max(d_kv):.1%}")
    if not args.no_capacity:
        print("\ncapacity at SLO (tpot_p99 = 1.6 x (mixtral 3 x) and ttft_p99 = 6 x the zero-load p99s), "
              "analytic vs simulator bisection")
        diffs = []
        for row in CONFIGS:
            c, p, o, label = configs(cat, params, row)
            zero = serving.serve_at_rate(c, 1e-3, p, o)
            mult = CAPACITY_SLO_BY_MODEL.get(row[0], CAPACITY_SLO)
            slo = SLO(tpot_p99_ms=float(zero.tpot_p99_ms[0]) * mult["tpot_p99_ms"],
                      ttft_p99_ms=float(zero.ttft_p99_ms[0]) * mult["ttft_p99_ms"])
            cap = serving.capacity_at_slo(c, p, o, slo)
            a = float(cap.max_qps[0])
            s = sim_capacity(c, p, o, slo, a, args.capacity_requests)
            diffs.append(rel(a, s))
            print(f"{label:58s} analytic {a:8.2f} req/s ({cap.limited_by[0]:6s}) sim {s:8.2f} diff {diffs[-1]:6.1%}")
        print(f"capacity: median {np.median(diffs):.1%}, worst {np.max(diffs):.1%} (target within 15 %)")
    print(f"\n[{time.perf_counter() - t0:.0f} s]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
