"""MoE TPOT p99 against the simulator: capacity at TPOT SLOs of k × the zero-load p99, and monotonicity.

Usage: python scripts/moe_tpot_capacity.py [--cases qwen3-30b-a3b mixtral-8x7b] [--k 2 3] [--simulate]

tpot11's method (docs/model-accuracy.md, "MoE TPOT p99 at mid load, second attempt (tpot11)", "Method"), on the
MoE cases of tests/models/test_ttft_wait_atom.py (and its dense ones by name):

- SLO: k × the analytic TPOT p99 at 1e-3 req/s.
- Analytic capacity: the first rate of a 400-point geometric grid (1e-3 req/s to 0.999 × saturation) whose
  ``tpot_p99_ms`` exceeds the SLO, refined by 30 bisections against the grid point before it (the first crossing:
  a p99 that falls gives the lower root).
- Monotonicity: the smallest ratio of consecutive p99s on ``_p99_up_to_saturation``'s 30 rates (1 = never falls).
- ``--simulate``: the simulated capacity, the p99 of the TPOTs of ``simulate(c, 0, λ, prompt, output,
  requests=20_000, seed=s)``, s = 0, 1, 2 pooled, bisected on λ (bracket 0.6-1.6 × the analytic capacity, widened
  until it brackets, 6 bisections, then linear interpolation in the last bracket). ~3-5 min CPU a case and k.

Prints one line per case and k, and the CPU time (process time).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from catalog import load_catalog  # noqa: E402
from optimizer.models.configs import build_configs  # noqa: E402
from optimizer.models.params import load_params  # noqa: E402
from optimizer.models.serving import serve_at_rate  # noqa: E402
from optimizer.models.simulate import simulate  # noqa: E402
from workloads.spec import LengthDist  # noqa: E402

LOGNORMAL_512 = LengthDist(mean=512, p99=4096)
CASES = {  # model: (device, precision, tp, prompt, output), as tests/models/test_ttft_wait_atom.py CASES
    "qwen2.5-72b": ("h100-nvl", "fp8", 1, LOGNORMAL_512, LengthDist(mean=128)),
    "llama-3.1-70b": ("h100-sxm", "fp8", 2, LengthDist(mean=2048, p99=16384), LengthDist(mean=256)),
    "llama-3.1-8b": ("h100-sxm", "fp8", 1, LengthDist(mean=1024, p99=8192), LengthDist(mean=256, p99=1024)),
    "qwen3-30b-a3b": ("h100-sxm", "fp8", 1, LOGNORMAL_512, LengthDist(mean=128)),
    "mixtral-8x7b": ("h100-sxm", "fp8", 2, LengthDist(mean=1024, p99=8192), LengthDist(mean=256)),
}
SEEDS = (0, 1, 2)


def _configs(cat, params, model, n=1):
    device, precision, tp, _, _ = CASES[model]
    return build_configs(cat.model(model), [(cat.device(device), cat.precision(precision), tp, 1)] * n, params)


def _saturation_rate(c, prompt, output) -> float:
    """The largest unsaturated rate, by geometric bisection to 1e-6 relative (as the test file's)."""
    lo = hi = 1e-3
    while not serve_at_rate(c, hi, prompt, output, percentiles=False).saturated[0]:
        lo, hi = hi, hi * 2.0
    while hi / lo > 1.0 + 1e-6:
        mid = float(np.sqrt(lo * hi))
        lo, hi = (lo, mid) if serve_at_rate(c, mid, prompt, output, percentiles=False).saturated[0] else (mid, hi)
    return lo


def _p99(c1, qps, prompt, output) -> float:
    return float(serve_at_rate(c1, qps, prompt, output).tpot_p99_ms[0])


def analytic_capacity(c1, cn, top, slo_ms, prompt, output) -> float:
    """The first crossing of ``slo_ms`` on the 400-point grid, refined by 30 bisections (req/s; 0.999·top if none)."""
    rates = np.geomspace(1e-3, 0.999 * top, 400)
    p99 = serve_at_rate(cn(len(rates)), rates, prompt, output).tpot_p99_ms
    over = np.flatnonzero(p99 > slo_ms)
    if not len(over):
        return float(rates[-1])
    if over[0] == 0:
        return 0.0
    lo, hi = float(rates[over[0] - 1]), float(rates[over[0]])
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _p99(c1, mid, prompt, output) > slo_ms else (mid, hi)
    return lo


def simulated_p99(c1, qps, prompt, output) -> float:
    """The TPOT p99 (ms) of seeds 0-2 pooled, 20,000 requests each."""
    x = np.concatenate([simulate(c1, 0, qps, prompt, output, requests=20_000, seed=s).tpot_s for s in SEEDS])
    return float(np.nanpercentile(x, 99) * 1e3)


def simulated_capacity(c1, guess, slo_ms, prompt, output) -> float:
    lo, hi = 0.6 * guess, 1.6 * guess
    p_lo, p_hi = simulated_p99(c1, lo, prompt, output), simulated_p99(c1, hi, prompt, output)
    while p_lo > slo_ms:
        lo, p_lo = 0.6 * lo, simulated_p99(c1, 0.6 * lo, prompt, output)
    while p_hi <= slo_ms:
        hi, p_hi = 1.6 * hi, simulated_p99(c1, 1.6 * hi, prompt, output)
    for _ in range(6):
        mid = 0.5 * (lo + hi)
        p = simulated_p99(c1, mid, prompt, output)
        lo, p_lo, hi, p_hi = (lo, p_lo, mid, p) if p > slo_ms else (mid, p, hi, p_hi)
    return lo + (slo_ms - p_lo) / (p_hi - p_lo) * (hi - lo)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["qwen3-30b-a3b", "mixtral-8x7b"], choices=sorted(CASES))
    ap.add_argument("--k", nargs="+", type=float, default=[2.0, 3.0])
    ap.add_argument("--simulate", action="store_true")
    args = ap.parse_args()
    cat, params = load_catalog(None), load_params(None)
    cpu = time.process_time()
    for model in args.cases:
        _, _, _, prompt, output = CASES[model]
        c1 = _configs(cat, params, model)

        def cn(n, model=model):
            return _configs(cat, params, model, n)

        top = _saturation_rate(c1, prompt, output)
        rates = np.geomspace(1e-3, 0.999 * top, 30)
        grid = serve_at_rate(cn(len(rates)), rates, prompt, output).tpot_p99_ms
        ratio = grid[1:] / grid[:-1]
        zero = _p99(c1, 1e-3, prompt, output)
        print(f"{model}: zero-load TPOT p99 {zero:.4f} ms, saturation {top:.4f} req/s, smallest p99 ratio "
              f"{ratio.min():.4f} at {rates[1 + int(np.argmin(ratio))]:.3g} req/s")
        for k in args.k:
            cap = analytic_capacity(c1, cn, top, k * zero, prompt, output)
            line = f"  {k:g}x ({k * zero:.3f} ms): analytic {cap:.4f} req/s"
            if args.simulate:
                sim = simulated_capacity(c1, cap, k * zero, prompt, output)
                line += f", simulated {sim:.4f} ({cap / sim - 1.0:+.1%})"
            print(line, flush=True)
    print(f"CPU {time.process_time() - cpu:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
