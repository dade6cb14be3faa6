"""The simulator's fast paths give the same bits as the plain step-by-step loop (tests/models/sim_reference.py).

Every case runs ``simulate`` and the reference loop on the same sampled requests and compares every
float with ``==`` (not a tolerance): the decode-only stretches, the completion heap, the whole-token KV
limit and the tabulated step terms must not move a single step time, arrival test or statistic.
The cases cover what each path must handle: idle gaps (low load), dense arrivals, preemptions under
KV pressure (and a KV capacity that is not a whole number of tokens), a sliding-window model, an MoE
model, prefix caching (hit fraction, shared prefix), a decode pool's requests (hit fraction 1), a
running-sequence cap, one-token outputs and no warm-up.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from catalog import load_catalog
from optimizer.models import simulate as sim
from optimizer.models.configs import build_configs
from optimizer.models.params import load_params
from tests.models.sim_reference import reference_run
from workloads.spec import LengthDist

CAT = load_catalog(None)
PARAMS = load_params()
P, OUT = LengthDist(mean=800, p99=3000), LengthDist(mean=200, p99=900)


def cfg(model="llama-3.1-8b", device="h100-sxm", prec="bf16", tp=1, kv_tokens=None):
    c = build_configs(CAT.model(model), [(CAT.device(device), CAT.precision(prec), tp, 1)], PARAMS)
    if kv_tokens is not None:
        c = c.__class__(**{**c.__dict__, "kv_capacity_tokens": np.array([kv_tokens])})
    return c


CASES = {
    "low load": (cfg(), 0.5, P, OUT, {}),
    "dense": (cfg(), 20.0, P, OUT, {}),
    "preemptions": (cfg(kv_tokens=20_000.0), 40.0, LengthDist(mean=2000), LengthDist(mean=400), {}),
    "fractional kv capacity": (cfg(kv_tokens=45_123.5), 15.0, P, OUT, {}),
    "sliding window": (cfg("gemma-3-27b"), 3.0, LengthDist(mean=3000, p99=8000), OUT, {"prefill_chunk_tokens": 4096}),
    "moe": (cfg("mixtral-8x7b", "h100-sxm", "fp8", 2), 8.0, P, OUT, {}),
    "prefix hit fraction": (cfg(), 10.0, P, OUT, {"prefix_hit_fraction": 0.6}),
    "shared prefix": (cfg(), 10.0, P, OUT, {"shared_prefix_tokens": 500}),
    "decode pool": (cfg(), 30.0, P, OUT, {"prefix_hit_fraction": 1.0}),
    "max sequences": (cfg(), 10.0, P, OUT, {"max_sequences": 8}),
    "one-token outputs, no warm-up": (cfg(), 3.0, LengthDist(mean=100), LengthDist(mean=1), {"warmup_fraction": 0.0}),
}


def _spy_on_run(monkeypatch) -> tuple[list, Callable]:
    """Record the (args, kwargs) of every ``simulate._run`` call (the step loop's inputs), running it as before;
    returns (the record, the real ``_run``)."""
    seen = []
    real = sim._run

    def spy(*args, **kw):
        seen.append((args, kw))
        return real(*args, **kw)

    monkeypatch.setattr(sim, "_run", spy)
    return seen, real


@pytest.mark.parametrize("case", list(CASES))
def test_simulate_equals_the_step_by_step_loop(case, monkeypatch):
    c, qps, prompt, output, kwargs = CASES[case]
    seen, real = _spy_on_run(monkeypatch)
    got = sim.simulate(c, 0, qps, prompt, output, requests=1500, seed=11, **kwargs)
    [(args, kw)] = seen
    want = reference_run(*args, **kw)
    arrivals, outputs, warmup_fraction, overhead = args[1], args[3], args[7], args[8]
    warm = int(len(arrivals) * warmup_fraction)
    ttft = np.asarray(want["first"][warm:]) - arrivals[warm:] + overhead
    e2e = np.asarray(want["finish"][warm:]) - arrivals[warm:] + overhead
    multi = outputs[warm:] > 1
    assert np.array_equal(got.ttft_s, ttft) and np.array_equal(got.e2e_s, e2e)
    assert np.array_equal(got.tpot_s, (e2e[multi] - ttft[multi]) / (outputs[warm:][multi] - 1))
    assert (got.steps, got.preemptions, got.backlog_at_end) == (want["steps"], want["preemptions"], max(want["backlog"], 0))
    assert (got.duration_s, got.max_kv_tokens) == (want["t"], want["max_kv"])
    assert got.mean_batch == want["batch_time"] / want["t"]
    assert got.output_tokens_per_s == want["out_tokens"] / want["t"]
    assert got.step_end_s == want["t_steps"] and got.step_kv_tokens == want["kv_steps"]
    if case == "preemptions":
        assert got.preemptions > 0


def test_statistics_are_computed_when_read_and_kept():
    """The percentiles and KV statistics are cached properties: the first read computes them from the
    stored latencies and step samples, later reads return the same objects."""
    c, qps, prompt, output, _ = CASES["dense"]
    r = sim.simulate(c, 0, qps, prompt, output, requests=800, seed=2)
    assert "ttft" not in r.__dict__ and "steady_kv_tokens" not in r.__dict__
    p99 = r.ttft[99.0]
    assert p99.value_ms == float(np.percentile(r.ttft_s, 99.0)) * 1e3
    assert r.ttft is r.ttft and r.kv_p99_tokens == float(np.percentile(r.steady_kv_tokens, 99.0))
    assert r.steady_kv_tokens is r.steady_kv_tokens
    assert 0 < r.kv_mean_tokens <= r.kv_p99_tokens <= r.max_kv_tokens


@pytest.mark.parametrize("case", ["low load", "dense", "moe", "shared prefix"])
def test_ranks_whose_kv_never_binds_run_as_one(case, monkeypatch):
    """The per-rank loop (ep > 1: the general step for decode-only stretches too, a queue per rank, admission of the
    earliest head that fits) with KV that never binds is the one-rank loop bit for bit: admission stays FCFS and a
    decode-only step costs the same in either path. 4 ranks of K/4 each against one of K, the same requests."""
    c, qps, prompt, output, kwargs = CASES[case]
    seen, real = _spy_on_run(monkeypatch)
    one = sim.simulate(c, 0, qps, prompt, output, requests=1500, seed=11, **kwargs)
    [(args, kw)] = seen
    args = list(args)
    args[4] = args[4] / 4.0  # each rank's cache: a quarter of the replica's, still never full here
    four = real(*args, **{**kw, "ranks": 4, "rank_of": [i % 4 for i in range(len(args[1]))]})
    assert one.preemptions == four.preemptions == 0
    assert np.array_equal(one.ttft_s, four.ttft_s) and np.array_equal(one.e2e_s, four.e2e_s)
    assert (one.steps, one.duration_s, one.mean_batch) == (four.steps, four.duration_s, four.mean_batch)
    assert one.step_kv_tokens == four.step_kv_tokens
    per_rank = np.asarray(four.step_rank_kv_tokens).reshape(-1, 4)
    assert np.array_equal(per_rank.sum(axis=1), np.asarray(four.step_kv_tokens))
