"""Analytic serving model vs the discrete-event simulator: p99 TTFT/TPOT and capacity at SLO.

Usage: python scripts/agreement.py [--requests 20000] [--seeds 5] [--no-capacity] [--no-pools]

Grid: several models, devices, precisions and tp degrees, with fixed and lognormal
lengths, at 20 %-90 % of each configuration's analytic capacity (the largest rate at
which the replica is not saturated and the KV cache holds its p99 occupancy). Prints
one row per point and the median / worst relative difference |analytic − sim| / sim,
for p99 TTFT, p99 TPOT and p99 KV-cache occupancy (tokens; the simulator's occupancy is
sampled once per step while the measured requests arrive). ``--seeds N`` (default 5) pools the requests of
N runs (seeds 1..N) for each point's simulated p99s (and averages the runs' KV p99s): at 90 % load one run's
p99 is noisy (TPOT p99 of llama-3.1-8b on a100 at 90 %: 85.5-129.7 ms over seeds 0-9 of 20,000 requests;
seed 1, the old single run, 89.0 ms against the ten runs pooled, 104.7 ms; knee10). ``--seeds 1`` is the
old single run (seed 1).
Then capacity at an SLO: the analytic bisection vs a bisection on the simulator. Both grids use
the model's own limits, without the planning ceiling (``offline_ceiling=None``; see
``serving.capacity.SERVER_OFFLINE_CEILING``).
Then disaggregated pairs (``optimizer.models.disagg`` vs ``simulate_pools``): end-to-end p99
TTFT (prefill pool + KV transfer at the slower side + the decode wait) and TPOT (decode pool) at 30 %-90 % of each pool's capacity
at the pair's SLO.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from catalog import load_catalog  # noqa: E402
from optimizer.models import serving  # noqa: E402
from optimizer.models.configs import build_configs  # noqa: E402
from optimizer.models.disagg import (  # noqa: E402
    decode_pool_capacity,
    decode_side,
    decode_technique,
    decode_wait_ms,
    prefill_pool_capacity,
    prefill_queue,
)
from optimizer.models.params import load_params  # noqa: E402
from optimizer.models.simulate import simulate  # noqa: E402
from optimizer.models.simulate_pools import simulate_pools  # noqa: E402
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
# disaggregated pairs: (model, precision, (prefill device, tp), (decode device, tp), prompt, output, SLO)
POOL_PAIRS = [
    ("llama-3.1-70b", "fp8", ("b200", 2), ("h20", 2), LengthDist(mean=4000, p99=12000), LengthDist(mean=300, p99=1000),
     SLO(ttft_p99_ms=1000, tpot_p99_ms=50)),
    ("llama-3.1-70b", "fp8", ("h100-sxm", 8), ("mi300x", 2), LengthDist(mean=4000, p99=12000),
     LengthDist(mean=300, p99=1000), SLO(ttft_p99_ms=1000, tpot_p99_ms=50)),
    ("llama-3.1-70b", "fp8", ("h100-sxm", 8), ("h20", 2), LengthDist(mean=6000, p99=12000),
     LengthDist(mean=800, p99=2000), SLO(ttft_p99_ms=1000, tpot_p99_ms=50)),
    ("llama-3.1-8b", "bf16", ("h100-sxm", 1), ("a100-80gb-sxm", 1), LengthDist(mean=2000, p99=8000),
     LengthDist(mean=200, p99=800), SLO(ttft_p99_ms=500, tpot_p99_ms=30)),
]
POOL_LOADS = (0.3, 0.6, 0.9)
CAPACITY_SLO = {"tpot_p99_ms": 1.6, "ttft_p99_ms": 6.0}  # multiples of the zero-load values
# MoE: the experts one step reads grow from k to ~E between batch 1 and ~4, so TPOT jumps
# from 6.3 ms to ~15 ms by batch 2 and then stays flat. 1.6x the zero-load TPOT sits on that
# step (capacity < 0.4 req/s, set by rare batch fluctuations); 3x puts the SLO on the plateau.
CAPACITY_SLO_BY_MODEL = {"mixtral-8x7b": {"tpot_p99_ms": 3.0, "ttft_p99_ms": 6.0}}


def configs(cat, params, row):
    mk, dk, pk, tp, p, o = row
    c = build_configs(cat.model(mk), [(cat.device(dk), cat.precision(pk), tp, 1)], params)
    return c, p, o, f"{mk} {dk} {pk} tp{tp} L={_d(p)} O={_d(o)}"


def _d(x: LengthDist) -> str:
    return f"{x.mean_tokens:g}" if x.kind == "fixed" else f"{x.mean_tokens:g}/p99 {x.p99_tokens:g}"


def grid_points(cat, params, rows=CONFIGS, loads=LOADS):
    """(configs, prompt, output, label, qps, load) for every grid point."""
    for row in rows:
        c, p, o, label = configs(cat, params, row)
        cap = serving.capacity_at_slo(c, p, o, SLO(), offline_ceiling=None).max_qps[0]
        for f in loads:
            yield c, p, o, label, cap * f, f


def _pooled_p99_ms(samples) -> float:
    """p99 (ms) of the runs' latencies (s) pooled; one run: its own p99 (``SimResult``'s)."""
    return float(np.percentile(np.concatenate(samples), 99.0)) * 1e3


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
    ap.add_argument("--seeds", type=int, default=5, help="runs pooled per grid point (seeds 1..N; 1 = the old single run)")
    ap.add_argument("--capacity-requests", type=int, default=8_000)
    ap.add_argument("--no-capacity", action="store_true")
    ap.add_argument("--no-pools", action="store_true")
    ap.add_argument("--params", default=None, help="calibration parameters (default: the shipped ones)")
    args = ap.parse_args(argv)
    cat, params = load_catalog(None), load_params(args.params)
    t0 = time.perf_counter()
    rows, d_ttft, d_tpot, d_kv = [], [], [], []
    print(f"{'configuration':58s} {'load':>5s} {'qps':>8s} | {'TTFT p99 ms an/sim':>19s} {'diff':>6s} | "
          f"{'TPOT p99 ms an/sim':>19s} {'diff':>6s} | {'KV p99 ktok an/sim':>17s} {'diff':>6s}")
    for c, p, o, label, q, f in grid_points(cat, params):
        a = serving.serve_at_rate(c, q, p, o)
        runs = [simulate(c, 0, q, p, o, requests=args.requests, seed=1 + k) for k in range(args.seeds)]
        at, st = float(a.ttft_p99_ms[0]), _pooled_p99_ms([r.ttft_s for r in runs])
        ap_, sp = float(a.tpot_p99_ms[0]), _pooled_p99_ms([r.tpot_s for r in runs])
        d_ttft.append(rel(at, st))
        d_tpot.append(rel(ap_, sp))
        ak, sk = float(a.kv_p99_tokens[0]) / 1e3, float(np.mean([r.kv_p99_tokens for r in runs])) / 1e3
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
            cap = serving.capacity_at_slo(c, p, o, slo, offline_ceiling=None)
            a = float(cap.max_qps[0])
            s = sim_capacity(c, p, o, slo, a, args.capacity_requests)
            diffs.append(rel(a, s))
            print(f"{label:58s} analytic {a:8.2f} req/s ({cap.limited_by[0]:6s}) sim {s:8.2f} diff {diffs[-1]:6.1%}")
        print(f"capacity: median {np.median(diffs):.1%}, worst {np.max(diffs):.1%} (target within 15 %)")
    if not args.no_pools:
        pool_agreement(cat, params, args.requests)
    print(f"\n[{time.perf_counter() - t0:.0f} s]")
    return 0


def pool_agreement(cat, params, requests: int) -> None:
    """Two-pool mode: analytic end-to-end p99s vs ``simulate_pools`` on POOL_PAIRS at POOL_LOADS."""
    print("\ndisaggregated pairs: TTFT p99 = prefill pool + KV transfer (the slower side) + decode wait (one decode "
          "step), TPOT p99 = decode pool, analytic vs simulator")
    d_ttft, d_tpot, under_ttft, under_tpot = [], [], 0, 0
    for mk, pk, (dp, tp_p), (dd, tp_d), p, o, slo in POOL_PAIRS:
        m, q = cat.model(mk), cat.precision(pk)
        cp = build_configs(m, [(cat.device(dp), q, tp_p, 1)], params)
        cd = build_configs(m, [(cat.device(dd), q, tp_d, 1)], params)
        nic_p, nic_d = cat.device(dp).scaleout_nic_gbps_per_gpu, cat.device(dd).scaleout_nic_gbps_per_gpu
        pc = prefill_pool_capacity(cp, p, slo, [nic_p], decode=decode_side(cd, [nic_d]), output=o)
        dc = decode_pool_capacity(cd, p, o, slo, [nic_d])
        label = f"{mk} {pk} prefill {dp} tp{tp_p} / decode {dd} tp{tp_d} L={_d(p)} O={_d(o)}"
        for f in POOL_LOADS:
            lp, ld = f * float(pc.max_qps[0]), f * float(dc.max_qps[0])
            sim = simulate_pools(cp, 0, cd, 0, lp, ld, p, o, nic_p, requests=requests, seed=1,
                                 decode_nic_gbps_per_gpu=nic_d)
            dec = serving.serve_at_rate(cd, ld, p, o, technique=decode_technique(None))
            wait_p99 = float(decode_wait_ms(dec.step_ms)[1][0])
            at = float(prefill_queue(cp, p).ttft_p99_ms(np.array([lp]))[0] + pc.kv_transfer_p99_ms[0]) + wait_p99
            ap_ = float(dec.tpot_p99_ms[0])
            st, sp = sim.ttft[99.0].value_ms, sim.tpot[99.0].value_ms
            d_ttft.append(rel(at, st))
            d_tpot.append(rel(ap_, sp))
            under_ttft += at < st
            under_tpot += ap_ < sp
            print(f"{label:86s} {f:4.0%} | TTFT {at:8.1f} {st:8.1f} {at / st - 1:+6.1%} | "
                  f"TPOT {ap_:7.2f} {sp:7.2f} {ap_ / sp - 1:+6.1%}")
    print(f"{len(d_ttft)} pool points; TTFT p99: median {np.median(d_ttft):.1%}, worst {np.max(d_ttft):.1%}, "
          f"analytic under in {under_ttft}; TPOT p99: median {np.median(d_tpot):.1%}, worst {np.max(d_tpot):.1%}, "
          f"under in {under_tpot} (targets: median <= 10 %; signed per point: analytic / simulated − 1)")


if __name__ == "__main__":
    raise SystemExit(main())
