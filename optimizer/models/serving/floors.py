"""Physical floors of the p99s (no load can beat them) and the throughput of batch workloads."""

from __future__ import annotations

import numpy as np

from catalog.errors import ModelError
from optimizer.models import perf
from optimizer.models.configs import Configs
from optimizer.models.lengths import quantile_tokens, window_pair
from optimizer.models.params import CalibrationParams
from optimizer.models.serving.capacity import slo_targets
from workloads.spec import SLO, LengthDist


def batch_throughput(
    c: Configs,
    prompt: LengthDist,
    output: LengthDist,
    params: CalibrationParams | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(output tokens/s, requests/s) per configuration for a batch workload at full load.

    The replica runs the memory-limited batch continuously (``perf.offline_throughput_tokens_s``
    at the mean prompt and output lengths: batch = min(scheduler cap, sequences whose KV
    fits), each step decodes the batch and prefills its amortised prompts).
    requests/s = tokens/s / E[O]. Zero where not even one sequence fits. Lengths cut to the context window
    (``lengths.window_pair``).
    """
    prompt, output = window_pair(prompt, output, c.model.max_context_tokens)
    el, eo = prompt.mean_tokens, output.mean_tokens
    _, tok_s = perf.offline_throughput_tokens_s(c, el, eo)
    tok_s = np.where(np.asarray(c.supported, dtype=bool), np.nan_to_num(tok_s, nan=0.0), 0.0)
    return tok_s, tok_s / eo


def slo_floor_ms(c: Configs, prompt: LengthDist, output: LengthDist) -> dict[str, np.ndarray]:
    """Physical lower bounds (ms) on each p99 per configuration, whatever the load.

    - ``tpot``: ``tpot_bound_ms`` (weights / peak memory bandwidth at batch 1);
    - ``ttft``: one prefill of the p99 prompt plus the front-end time,
      ``prefill_s(L_p99) + request_overhead_s`` (1 % of the prompts are at least that long,
      and no schedule prefills them faster);
    - ``e2e``: ``(O_p99 − 1)·tpot_bound_ms`` (1 % of the requests decode at least O_p99 − 1
      tokens, each no faster than the TPOT bound).

    Lengths cut to the context window (``lengths.window_pair``).
    """
    prompt, output = window_pair(prompt, output, c.model.max_context_tokens)
    l99 = float(quantile_tokens(prompt, 0.99))
    o99 = float(quantile_tokens(output, 0.99))
    tpot = perf.tpot_bound_ms(c)
    return {"tpot": tpot, "ttft": (perf.prefill_s(c, l99) + c.request_overhead_s) * 1e3,
            "e2e": max(o99 - 1.0, 0.0) * tpot}


def check_slo_floors(c: Configs, slo: SLO, prompt: LengthDist, output: LengthDist) -> None:
    """Raise ModelError naming the bound and the gap when an SLO is below configuration 0's floor.

    The floors are ``slo_floor_ms``; the CLI checks its single configuration with this.
    """
    floors = slo_floor_ms(c, prompt, output)
    why = {"tpot": "weights / peak memory bandwidth at batch 1",
           "ttft": f"one prefill of the p99 prompt, {float(quantile_tokens(prompt, 0.99)):,.0f} tokens"
                   + (f", plus {c.request_overhead_s * 1e3:.1f} ms front-end time" if c.request_overhead_s else ""),
           "e2e": f"(p99 output {float(quantile_tokens(output, 0.99)):,.0f} − 1) tokens at the TPOT bound"}
    for k, target in slo_targets(slo).items():
        floor = float(floors[k][0])
        if np.isfinite(floor) and target < floor:
            raise ModelError(
                f"{k}_p99_ms {target:g} is below the physical floor of {c.keys[0]}: {floor:.2f} ms "
                f"({why[k]}), short by {floor - target:.2f} ms; relax the SLO, raise tp or use a smaller precision")
