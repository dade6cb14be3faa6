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


_TAIL = pytest.mark.xfail(strict=True, reason=(
    "dense TPOT p99 optimistic under long-tailed prompts (docs/model-accuracy.md, tpottail): analytic / simulated "
    "0.900 / 0.845 / 0.774 at 0.3 / 0.5 / 0.7 of saturation (20 seeds, prompts cut to the context window, ctxwin; "
    "0.893 / 0.839 / 0.770 before the contexts' drift, latency._context_drift_var; 0.885 / 0.826 / 0.757 before the "
    "MoE routing glue refit, 0.867 / 0.779 / 0.649 uncut); XPASS (a failure) once a change brings it within 10 %"))


# 0.3 of saturation: 0.9003 since the dense drift's third cumulant and the contexts' drift (within the 10 %, by 0.0003;
# 0.893 before them): a pass, not a strict xfail, so a change that takes it back under 0.90 is seen
@pytest.mark.parametrize("load", [0.3, pytest.param(0.5, marks=_TAIL), pytest.param(0.7, marks=_TAIL)])
def test_long_tailed_prompts_tpot_p99_agrees(load):
    assert _ratio(LengthDist(mean=1024, p99=8192), load, 20) == pytest.approx(1.0, abs=0.10)
