"""A stated scheduler cap (``--max-batch``: vLLM max_num_seqs, TensorRT-LLM max_batch_size) bounds the serving
model and the simulator, not only the offline throughput.

Bound on paper: at most B sequences decode at once and a request holds its slot for E[O−1] decode steps, each
at least D(b) for the b sequences then running, so the request rate is at most max over b <= B of
b / (E[O−1]·D(b)) = B / (E[O−1]·D(B)) (b/D(b) grows with b: the weights are read once per step whatever b).
"""

from __future__ import annotations

import json

import numpy as np

from catalog import load_catalog
from optimizer.models import perf
from optimizer.models.configs import build_configs
from optimizer.models.params import load_params
from optimizer.models.serving import capacity_at_slo, serve_at_rate
from workloads.spec import SLO, LengthDist

CAT = load_catalog(None)
PARAMS = load_params(None)
PROMPT, OUTPUT = LengthDist(mean=1024), LengthDist(mean=256)
CAP = 16


def _configs(max_batch):
    return build_configs(CAT.model("llama-3.1-8b"), [(CAT.device("h100-sxm"), CAT.precision("fp8"), 1, 1)], PARAMS,
                         max_batch=max_batch)


def test_capacity_at_slo_stays_under_the_paper_bound_of_the_cap():
    capped, free = _configs(CAP), _configs(None)
    bound = CAP / ((OUTPUT.mean - 1) * float(perf.decode_step_s(capped, np.array([float(CAP)]), np.array([1152.0]))[0]))
    slo = SLO(ttft_p99_ms=60_000, tpot_p99_ms=200)
    with_cap = float(capacity_at_slo(capped, PROMPT, OUTPUT, slo).max_qps[0])
    without = float(capacity_at_slo(free, PROMPT, OUTPUT, slo).max_qps[0])
    assert 0 < with_cap <= bound * 1.0001
    assert without > 2 * bound  # the cap is what binds: the uncapped replica serves far more


def test_a_rate_the_cap_cannot_carry_is_saturated_analytically():
    # uncapped at 30 req/s the running batch is ~80 (Little: 30 · 255 · ~10.5 ms): above a cap of 16
    assert not bool(serve_at_rate(_configs(None), 30.0, PROMPT, OUTPUT).saturated[0])
    assert bool(serve_at_rate(_configs(CAP), 30.0, PROMPT, OUTPUT).saturated[0])


def test_estimate_and_simulate_honour_max_batch(run_cli):
    args = ["--model", "llama-3.1-8b", "--device", "h100-sxm", "--precision", "fp8", "--qps", "30",
            "--input-tokens", "1024", "--output-tokens", "256"]
    est = json.loads(run_cli("estimate", *args, "--max-batch", str(CAP), "--json").stdout)
    assert est["saturated"] is True
    r = run_cli("simulate", *args, "--requests", "2000", "--max-batch", str(CAP), "--json")
    sim = json.loads(r.stdout)
    assert sim["max_batch_sequences"] == CAP
    assert sim["simulated_mean_batch"] <= CAP


def test_capacity_at_a_binding_cap_meets_the_ttft_slo_in_the_simulator():
    """The running batch is held at p99.9 against the cap, as the KV cache is: at p99 a full batch made ~1 % of the
    arrivals wait for a slot, the TTFT p99 itself, which the analytic TTFT leaves out. 70B fp8 on 4 × H100, cap 32,
    lognormal prompts 1,000 (p99 3,000) and answers 1,000 (p99 3,000), TTFT p99 1 s: the old capacity 1.41 req/s
    (batch 20.2 + 2.33·√20.2 = 30.7 <= 32) simulated to a TTFT p99 of 1.41 s; now b + 3.09·√b <= 32, b <= 18.4."""
    from optimizer.models.simulate import simulate

    c = build_configs(CAT.model("llama-3.1-70b"), [(CAT.device("h100-sxm"), CAT.precision("fp8"), 4, 1)], PARAMS,
                      max_batch=32)
    prompt, output = LengthDist(mean=1000, p99=3000), LengthDist(mean=1000, p99=3000)
    cap = capacity_at_slo(c, prompt, output, SLO(ttft_p99_ms=1000))
    assert cap.limited_by[0] == "batch_cap"
    mu = float(cap.max_qps[0])
    b = float(serve_at_rate(c, mu, prompt, output).running_batch[0])
    assert b + 3.0902 * np.sqrt(b) <= 32 * 1.001
    sim = simulate(c, 0, mu, prompt, output, requests=20_000, seed=1)
    assert float(np.percentile(sim.ttft_s, 99)) * 1e3 <= 1000
