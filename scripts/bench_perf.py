"""Benchmark: evaluate 100,000 replica configurations with the vectorised performance model.

Run: python scripts/bench_perf.py [N]
Prints the time to build the configuration arrays and to evaluate decode step time,
prefill time, memory fit and offline throughput for all of them at once.
"""

from __future__ import annotations

import itertools
import sys
import time

from catalog import load_catalog
from optimizer.models.configs import build_configs
from optimizer.models.params import load_params
from optimizer.models.perf import (
    decode_step_s,
    max_sequences,
    offline_throughput_tokens_s,
    prefill_s,
    tpot_bound_ms,
)


def main(n: int = 100_000) -> None:
    cat = load_catalog()
    params = load_params()
    model = cat.model("llama-3.1-70b")
    base = list(itertools.product(cat.devices.values(), cat.precisions.values(), (1, 2, 4, 8), (1, 2, 4)))
    combos = list(itertools.islice(itertools.cycle(base), n))
    t0 = time.perf_counter()
    c = build_configs(model, combos, params)
    t1 = time.perf_counter()
    step = decode_step_s(c, 64, 1500)
    pre = prefill_s(c, 1000)
    seqs = max_sequences(c, 2000)
    bound = tpot_bound_ms(c)
    batch, tput = offline_throughput_tokens_s(c, 1000, 1000)
    t2 = time.perf_counter()
    print(f"{len(c):,} configurations ({int(c.runnable.sum()):,} runnable) of {model.key}")
    print(f"build_configs: {t1 - t0:.3f} s")
    print(f"evaluate (decode step, prefill, max sequences, tpot bound, offline throughput): {t2 - t1:.3f} s")
    print(f"total: {t2 - t0:.3f} s")
    _ = (step, pre, seqs, bound, batch, tput)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
