"""The capacity search's first probe at the offline ceiling (``capacity._probe_ceiling``).

A row feasible at its ceiling (``SERVER_OFFLINE_CEILING`` × the offline request rate) is capped there without a
search; an infeasible one searches below it. Either way the answer must be what the search without the ceiling
finds, capped: ``min(capacity without ceiling, ceiling)`` within the search's own tolerance (CAPACITY_RTOL), with
the same binding limits. MoE rows take no such probe: their analytic TPOT p99 can hump at mid load, and a top
inside the hump would end the search at the lower root.
"""

from __future__ import annotations

import numpy as np

from catalog import load_catalog
from optimizer.models import serving
from optimizer.models.configs import build_configs
from optimizer.models.params import load_params
from optimizer.models.serving import capacity as capacity_module
from optimizer.models.serving.state import CAPACITY_RTOL
from tests.conftest import EXAMPLES
from workloads import load_plan, resolve_catalog
from workloads.spec import SLO, LengthDist

PARAMS = load_params(None)
CATALOG = load_catalog()


def test_capped_capacity_is_the_uncapped_search_capped_at_the_ceiling():
    plan = load_plan(EXAMPLES / "chat-fleet.yaml")
    catalog = resolve_catalog(plan, CATALOG, "chat-fleet.yaml")
    for w in plan.workloads[:2]:  # chat (llama-3.1-70b) and code-completion (llama-3.1-8b)
        c = build_configs(catalog.model(w.model), [
            (catalog.device(d), catalog.precision(q), t, 1)
            for d in ("h100-sxm", "a100-80gb-sxm", "l40s", "mi300x", "b200", "l4")
            for q in ("bf16", "fp8") for t in (1, 2, 4, 8)
            if catalog.precision(q).unsupported_reason(catalog.device(d)) is None], PARAMS)
        capped = serving.capacity_at_slo(c, w.prompt_tokens, w.output_tokens, w.slo, PARAMS)
        free = serving.capacity_at_slo(c, w.prompt_tokens, w.output_tokens, w.slo, PARAMS, offline_ceiling=None)
        lens = capacity_module.tiled_rows(c, [(w.prompt_tokens, w.output_tokens)])[1]
        ceiling = capacity_module.SERVER_OFFLINE_CEILING * capacity_module._offline_qps(c, lens)
        expected = np.minimum(free.max_qps, np.where(ceiling > 0, ceiling, np.inf))
        np.testing.assert_allclose(capped.max_qps, expected, rtol=2 * CAPACITY_RTOL, atol=0.0)
        at_ceiling = np.array([lim == "utilization" for lim in capped.limited_by])
        assert at_ceiling.any() and (~at_ceiling & (capped.max_qps > 0)).any(), w.name  # both paths are exercised
        np.testing.assert_array_equal(capped.max_qps[at_ceiling], ceiling[at_ceiling])  # capped exactly
        assert [lim for lim, cap in zip(capped.limited_by, at_ceiling, strict=True) if not cap] == \
            [lim for lim, cap in zip(free.limited_by, at_ceiling, strict=True) if not cap]


def test_moe_rows_keep_the_upper_root_past_the_mid_load_hump():
    """mixtral-8x7b int8 tp2 on l40s, prompts and outputs lognormal 256 / p99 1,024, TPOT p99 ≤ 50 ms.

    The analytic TPOT p99 humps: 54.1 ms at 0.50 req/s, 48.2 at 1.36, 50.0 at 2.44 (so a probe inside the hump
    sees an infeasible top and a search below it ends at the lower root, 0.436 req/s). The simulator's p99 rises
    monotonically (`gpuplan simulate --model mixtral-8x7b --device l40s --precision int8 --tp 2 --input-tokens 256
    --input-p99 1024 --output-tokens 256 --output-p99 1024 --qps Q`, 20,000 requests, seed 0): 43.6 ms at 0.50,
    47.5 at 1.36, 50.2 at 2.44 req/s — its capacity is ~2.4 req/s. The search must not stop at the hump: above
    1.5 req/s, within 10 % of the simulator's 2.4. (With the size-biased MoE step, moehump, the analytic p99 no
    longer humps above 50 ms: 46.3 ms at 0.50 req/s, 47.2 at 1.36, 50.0 at 2.45 — one root; the case stays pinned.)"""
    c = build_configs(CATALOG.model("mixtral-8x7b"), [(CATALOG.device("l40s"), CATALOG.precision("int8"), 2, 1)],
                      PARAMS)
    lengths = LengthDist(mean=256, p99=1024)
    cap = serving.capacity_at_slo(c, lengths, lengths, SLO(ttft_p99_ms=1000, tpot_p99_ms=50), PARAMS)
    assert cap.limited_by == ["tpot"]
    assert abs(float(cap.max_qps[0]) / 2.4 - 1.0) <= 0.10, cap.max_qps
