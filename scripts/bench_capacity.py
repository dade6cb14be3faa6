"""Benchmark of ``serving.capacity_at_slo`` over the configurations the optimizer sees.

Usage: python scripts/bench_capacity.py [--repeat 3]

llama-3.1-70b on every catalog device × bf16/fp8 × tp 1/2/4/8 × pp 1/2 (432 configs, the
runnable ones evaluated), the chat workload (prompt 1024/p99 4096, output 256/p99 1024,
TTFT p99 2 s, TPOT p99 200 ms). Prints the best wall time of ``--repeat`` calls.
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
from optimizer.models.params import load_params  # noqa: E402
from workloads.spec import SLO, LengthDist  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    cat, params = load_catalog(None), load_params()
    combos = [(d, cat.precision(p), t, pp) for d in cat.devices.values() for p in ("bf16", "fp8")
              for t in (1, 2, 4, 8) for pp in (1, 2)]
    c = build_configs(cat.model("llama-3.1-70b"), combos, params)
    prompt, output = LengthDist(mean=1024, p99=4096), LengthDist(mean=256, p99=1024)
    slo = SLO(ttft_p99_ms=2000, tpot_p99_ms=200)
    serving.capacity_at_slo(c, prompt, output, slo, params)  # warm-up
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        cap = serving.capacity_at_slo(c, prompt, output, slo, params)
        times.append(time.perf_counter() - t0)
    servable = int(np.sum(cap.max_qps > 0))
    print(f"{len(c)} configs ({int(np.sum(c.runnable))} runnable, {servable} servable): "
          f"capacity_at_slo best {min(times):.3f} s of {args.repeat}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
