"""Analytic vs simulated TTFT and TPOT p99 at 0.7 / 0.9 / 1.0 x the SLO capacity, the simulation pooled over seeds.

    python scripts/knee_scan.py [--seeds 8] [--requests 20000] [--rows 0,7]

Rows (indices into ROWS, default all): expert-parallel MoE replicas (docs/benchmarks.md "TTFT at the MoE EP knee
(knee10)") and the dense svc01 replicas of ``scripts/bench_optimizer.py`` whose TPOT tail drove its verification
re-size rounds. The reference is the p99 of the requests of ``--seeds`` runs (seeds 0..N-1) pooled: near the knee
one run's p99 spreads by a factor of 2 between seeds. Prints the capacity, then each load's p99s and the relative
difference analytic/simulated − 1 (positive = the analytic model is conservative), and the mean batches.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from catalog import load_catalog  # noqa: E402
from optimizer.models.configs import build_configs  # noqa: E402
from optimizer.models.params import load_params  # noqa: E402
from optimizer.models.serving import capacity_at_slo, serve_at_rate  # noqa: E402
from optimizer.models.simulate import simulate, step_time_for  # noqa: E402
from workloads.spec import SLO, LengthDist  # noqa: E402

# (model, device, precision, tp, ep, prompt (mean, p99), output (mean, p99), SLO)
ROWS = [
    ("deepseek-v3", "mi355x", "fp4", 1, 2, (1024, 4096), (128, 512), SLO(ttft_p99_ms=2000, tpot_p99_ms=100)),
    ("deepseek-v3", "mi355x", "fp4", 1, 4, (1024, 4096), (128, 512), SLO(ttft_p99_ms=2000, tpot_p99_ms=100)),
    ("deepseek-v3", "mi355x", "fp4", 1, 4, (2048, 8192), (512, 2048), SLO(ttft_p99_ms=1000, tpot_p99_ms=150)),
    ("deepseek-v3", "b200", "fp4", 1, 8, (1024, 4096), (128, 512), SLO(ttft_p99_ms=2000, tpot_p99_ms=100)),
    ("qwen3-235b-a22b", "h200-sxm", "fp8", 1, 4, (1024, 4096), (256, 1024), SLO(ttft_p99_ms=1000, tpot_p99_ms=50)),
    ("qwen3-30b-a3b", "h100-sxm", "fp8", 1, 2, (2048, 8192), (128, 512), SLO(ttft_p99_ms=1000, tpot_p99_ms=50)),
    ("mixtral-8x7b", "h100-sxm", "fp8", 1, 2, (1024, 4096), (256, 1024), SLO(ttft_p99_ms=1000, tpot_p99_ms=50)),
    ("llama-3.1-70b", "rtx_pro_6000", "fp4", 1, 1, (1024, 4096), (128, 512), SLO(ttft_p99_ms=2000, tpot_p99_ms=100)),
    ("llama-3.1-70b", "l40s", "fp8", 2, 1, (1024, 4096), (128, 512), SLO(ttft_p99_ms=2000, tpot_p99_ms=100)),
]
LOADS = (0.7, 0.9, 1.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--rows", default=None, help="comma-separated indices into ROWS (default: all)")
    args = ap.parse_args(argv)
    cat, params = load_catalog(None), load_params(None)
    rows = range(len(ROWS)) if args.rows is None else [int(x) for x in args.rows.split(",")]
    for i in rows:
        mk, dk, pk, tp, ep, (pm, pp), (om, op), slo = ROWS[i]
        c = build_configs(cat.model(mk), [(cat.device(dk), cat.precision(pk), tp, 1)], params, ep=[ep])
        prompt, output = LengthDist(mean=pm, p99=pp), LengthDist(mean=om, p99=op)
        cap = capacity_at_slo(c, prompt, output, slo, params)
        mu = float(cap.max_qps[0])
        print(f"{mk} {dk} {pk} tp{tp} ep{ep} L={pm}/{pp} O={om}/{op}: capacity {mu:.2f} req/s ({cap.limited_by[0]})",
              flush=True)
        if mu <= 0:
            continue
        st = step_time_for(c, 0)
        for f in LOADS:
            q = f * mu
            runs = [simulate(c, 0, q, prompt, output, requests=args.requests, seed=s, step_time=st)
                    for s in range(args.seeds)]
            sim_ttft, sim_tpot = (float(np.percentile(np.concatenate([getattr(r, a) for r in runs]), 99.0)) * 1e3
                                  for a in ("ttft_s", "tpot_s"))
            a = serve_at_rate(c, q, prompt, output)
            an_ttft, an_tpot = float(a.ttft_p99_ms[0]), float(a.tpot_p99_ms[0])
            print(f"   {f:.1f}x {q:8.2f} req/s: TTFT p99 sim {sim_ttft:7.0f} an {an_ttft:7.0f} ({an_ttft / sim_ttft - 1:+.1%})"
                  f" | TPOT p99 sim {sim_tpot:6.1f} an {an_tpot:6.1f} ({an_tpot / sim_tpot - 1:+.1%})"
                  f" | batch sim {np.mean([r.mean_batch for r in runs]):.0f} an {float(a.running_batch[0]):.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
