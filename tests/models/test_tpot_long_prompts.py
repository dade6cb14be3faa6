"""Dense TPOT p99 under long-tailed prompts against the simulator (docs/model-accuracy.md, "Dense TPOT p99 under
long-tailed prompts (tpottail)").

llama-3.1-8b fp8 tp1 on h100-sxm, output lognormal mean 256 / p99 1,024 (the dense case of
tests/models/test_ttft_wait_atom.py). With fixed 1,024-token prompts the analytic TPOT p99 is within 1.2 % of the
simulator's at 0.3-0.7 of saturation; with lognormal prompts of mean 1,024 / p99 8,192 (σ = 1.21) it is 11-23 %
under it (13-35 % before the prompts were cut to the context window, ctxwin; a planner buying GPUs for a TPOT SLO
from it buys too few): a prompt from the lognormal's far tail (tens of thousands of tokens, a prefill quadratic in
its length) stalls every decoding request for seconds, and each such stall hits hundreds of requests, so prompts
rarer than the quadrature resolves (1 in 10⁴) set the p99.
The simulated figures pool seeds 0-19 of 20,000 requests: one run's p99 is set by its longest prompt (at 0.5 of
saturation 12.5-32.2 ms over the 20 seeds; seeds 0-2 pooled 19.14 ms, all 20 15.27 before the prompts were cut to
the 131,072-token context window, ctxwin; cut: all 20 pooled 14.39 ms; with the parameters refitted with the MoE
routing glue, saturation 40.56 → 39.78 req/s, at 0.5 of it 12.0-20.4 ms over the 20 seeds, seeds 0-2 pooled 14.45,
all 20 pooled 14.12).
"""

from __future__ import annotations

import numpy as np
import pytest

from catalog import load_catalog
from optimizer.models.configs import build_configs
from optimizer.models.params import load_params
from optimizer.models.serving import serve_at_rate
from optimizer.models.simulate import simulate
from workloads.spec import LengthDist

CAT = load_catalog(None)
OUTPUT = LengthDist(mean=256, p99=1024)
# the analytic saturation rate of both prompt laws (scripts/tpot_tail.py, to 1e-4: 39.78 fixed, 39.79 lognormal
# prompts; 40.56 before the MoE routing glue refit)
SATURATION_QPS = 39.78


def _configs():
    return build_configs(CAT.model("llama-3.1-8b"), [(CAT.device("h100-sxm"), CAT.precision("fp8"), 1, 1)],
                         load_params(None))


def _ratio(prompt: LengthDist, load: float, seeds: int) -> float:
    """analytic TPOT p99 / the simulator's (seeds 0..seeds−1 pooled) at ``load`` × the saturation rate."""
    c, qps = _configs(), load * SATURATION_QPS
    assert not serve_at_rate(c, SATURATION_QPS * 0.999, prompt, OUTPUT, percentiles=False).saturated[0]
    analytic = float(serve_at_rate(c, qps, prompt, OUTPUT).tpot_p99_ms[0])
    pooled = np.concatenate([simulate(c, 0, qps, prompt, OUTPUT, requests=20_000, seed=s).tpot_s for s in range(seeds)])
    return analytic / (float(np.percentile(pooled, 99)) * 1e3)


@pytest.mark.parametrize("load", [0.3, 0.5, 0.7])
def test_fixed_prompts_tpot_p99_agrees(load):
    # measured (scripts/tpot_tail.py --seeds 3), analytic/simulated: 6.84/6.87, 9.13/9.17, 13.54/13.61 ms at
    # 0.3/0.5/0.7 (6.80/6.83, 9.11/9.15, 13.62/13.67 before the MoE routing glue refit)
    assert _ratio(LengthDist(mean=1024), load, 3) == pytest.approx(1.0, abs=0.03)


LONG_TAILED_OPEN = pytest.mark.xfail(strict=True, reason=(
    "dense TPOT p99 optimistic under long-tailed prompts (docs/model-accuracy.md, tpottail): analytic / simulated "
    "0.926 / 0.880 / 0.824 at 0.3 / 0.5 / 0.7 of saturation (20 seeds, prompts cut to the context window, ctxwin; "
    "0.913 / 0.870 / 0.819 before the contexts' drift and the dense drift's third cumulant, poolbias; "
    "0.893 / 0.839 / 0.770 before the chunks past the 4th were charged their own attention span, planner-23; "
    "0.885 / 0.826 / 0.757 before the MoE routing glue refit, 0.867 / 0.779 / 0.649 uncut); XPASS (a failure) once a "
    "change brings it within 10 %"))


@pytest.mark.parametrize("load", [0.3, pytest.param(0.5, marks=LONG_TAILED_OPEN), pytest.param(0.7, marks=LONG_TAILED_OPEN)])
def test_long_tailed_prompts_tpot_p99_agrees(load):
    assert _ratio(LengthDist(mean=1024, p99=8192), load, 20) == pytest.approx(1.0, abs=0.10)


@pytest.mark.parametrize("prompt_tokens", [16384, 24000])
def test_long_fixed_prompts_tpot_p99_within_the_stall_error(prompt_tokens):
    """Fixed prompts of 8-12 chunks (C = 2,048) on qwen3-32b fp8 / b200, outputs 400 tokens, at 0.6 of the analytic
    saturation rate (bisected on serve_at_rate's flag): the chunks past MAX_EXPLICIT_CHUNKS were charged the 4th
    chunk's attention span (3.5·C) instead of their own, so a long prompt's step-time extra was too small, the
    utilisation too (0.533 against 0.569 at 24,000 tokens) and the TPOT p99 came out 19 % / 31 % under the
    simulator's at 16,384 / 24,000 tokens (analytic / simulated 0.806 / 0.686; a RAG plan of 24k-token prompts sized
    on it missed its TPOT SLO in simulation, 56 ms against 50: docs/planner-review-23.md S05). Charged at the rest's
    mean span: 0.912 / 0.932. What is left is the stall the per-step noise law misses (a prompt of L ≫ C tokens is
    one event of L/C steps every decoding request shares: tpottail's cause (1)), under 10 % here; bounds 0.87-1.05
    (3 seeds of 16,000 requests pooled: about ±3 % on the simulated p99)."""
    c = build_configs(CAT.model("qwen3-32b"), [(CAT.device("b200"), CAT.precision("fp8"), 1, 1)], load_params(None))
    prompt, output = LengthDist(mean=prompt_tokens), LengthDist(mean=400)
    lo, hi = 0.01, 10.0
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if serve_at_rate(c, mid, prompt, output, percentiles=False).saturated[0] else (mid, hi)
    qps = 0.6 * lo
    analytic = float(serve_at_rate(c, qps, prompt, output).tpot_p99_ms[0])
    pooled = np.concatenate([simulate(c, 0, qps, prompt, output, requests=16_000, seed=s).tpot_s for s in range(3)])
    assert 0.87 <= analytic / (float(np.percentile(pooled, 99)) * 1e3) <= 1.05
