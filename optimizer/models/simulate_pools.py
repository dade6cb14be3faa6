"""Two-pool mode of the simulator: one prefill replica and one decode replica of a disaggregated pair.

The check on :mod:`optimizer.models.disagg`. Each pool's replica is simulated by the same
scheduler as a colocated one (``optimizer.models.simulate``) at its own per-replica rate,
with Poisson arrivals (requests spread over many replicas of a pool thin and superpose into
Poisson streams, the analytic model's assumption too):

- prefill replica: requests of the sampled prompt and one output token (``PREFILL_OUTPUT``: the analytic
  prefill pool's requests), TTFT as the colocated simulator measures it;
- KV transfer of request i: ``(L_i − N) · kv_bytes_per_token / min(link_prefill, link_decode)``
  (the slower side's NICs, ``disagg.pair_link_bytes_s``);
- decode replica: the same requests (same seed, so the same sampled lengths) arriving with
  their KV (prefill work one token over the whole prompt), TPOT as measured there; the wait
  of request i for the decode replica's next step boundary, ``wait_i`` = the start of the first
  step that carries it − its arrival (the end of the step before it; 0 on an idle replica).

End to end per request: TTFT_i = prefill TTFT_i + transfer_i + wait_i; TPOT_i from the decode
replica; E2E_i = prefill TTFT_i + transfer_i + decode E2E_i − request_overhead (the decode
replica's E2E counts from the KV's arrival, its wait and first step in it; the front-end time
counts once).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optimizer.models.configs import Configs
from optimizer.models.disagg import PREFILL_OUTPUT, kv_link_bytes_s, pair_link_bytes_s
from optimizer.models.lengths import fit_window, sample_tokens
from optimizer.models.sim_result import PERCENTILES, Percentile, SimResult, percentile_ci
from optimizer.models.simulate import simulate
from workloads.spec import LengthDist


@dataclass(frozen=True)
class PoolSimResult:
    """End-to-end percentiles (ms) of a disaggregated pair, with each pool's own simulation."""

    ttft: dict[float, Percentile]
    tpot: dict[float, Percentile]
    e2e: dict[float, Percentile]
    kv_transfer_p99_ms: float
    decode_wait_mean_ms: float
    decode_wait_p99_ms: float
    prefill: SimResult
    decode: SimResult


def simulate_pools(cp: Configs, ip: int, cd: Configs, idx: int, prefill_qps: float, decode_qps: float,
                   prompt: LengthDist, output: LengthDist, nic_gbps_per_gpu: float, *, requests: int = 20_000,
                   seed: int = 0, shared_prefix_tokens: int = 0, prefix_hit_fraction: float = 0.0,
                   decode_nic_gbps_per_gpu: float | None = None) -> PoolSimResult:
    """Simulate prefill configuration ``ip`` of ``cp`` at ``prefill_qps`` and decode configuration
    ``idx`` of ``cd`` at ``decode_qps`` (req/s per replica) on the same sampled requests (the pair's laws cut to
    the context window, ``lengths.fit_window``, before the prefill pool sees the prompts alone).
    ``nic_gbps_per_gpu``: the prefill devices' NIC, ``decode_nic_gbps_per_gpu`` the decode devices' (default the same)."""
    window = fit_window(prompt, output, cd.model.max_context_tokens)
    prompt, output = window.prompt, window.output
    pre = simulate(cp, ip, prefill_qps, prompt, PREFILL_OUTPUT, requests=requests, seed=seed,
                   prefix_hit_fraction=prefix_hit_fraction, shared_prefix_tokens=shared_prefix_tokens)
    dec = simulate(cd, idx, decode_qps, prompt, output, requests=requests, seed=seed,
                   prefix_hit_fraction=1.0, shared_prefix_tokens=shared_prefix_tokens)
    rng = np.random.default_rng(seed)  # the same draws as simulate(): gaps, then prompts
    rng.exponential(1.0, requests)
    prompts = sample_tokens(prompt, requests, rng, window.prompt_cut_tokens)
    warm = requests - len(pre.ttft_s)
    sent = np.maximum(prompts[warm:] - np.minimum(shared_prefix_tokens, prompts[warm:] - 1), 1)
    nic_d = nic_gbps_per_gpu if decode_nic_gbps_per_gpu is None else decode_nic_gbps_per_gpu
    link = float(pair_link_bytes_s(kv_link_bytes_s(cp.take([ip]), [nic_gbps_per_gpu]),
                                   kv_link_bytes_s(cd.take([idx]), [nic_d]))[0])
    transfer = sent * float(cp.kv_bytes_per_token[ip]) / link
    wait = decode_wait_s(dec, decode_qps, requests, seed, float(cd.request_overhead_s))
    handoff = pre.ttft_s + transfer
    ttft = handoff + wait
    e2e = handoff + dec.e2e_s - float(cd.request_overhead_s)
    return PoolSimResult(
        ttft={q: percentile_ci(ttft, q) for q in PERCENTILES},
        tpot=dec.tpot,
        e2e={q: percentile_ci(e2e, q) for q in PERCENTILES},
        kv_transfer_p99_ms=float(np.percentile(transfer, 99.0)) * 1e3,
        decode_wait_mean_ms=float(wait.mean()) * 1e3, decode_wait_p99_ms=float(np.percentile(wait, 99.0)) * 1e3,
        prefill=pre, decode=dec,
    )


def decode_wait_s(dec: SimResult, qps: float, requests: int, seed: int, request_overhead_s: float) -> np.ndarray:
    """Per measured request of a decode replica's simulation ``dec`` (run at ``qps`` with ``requests``,
    ``seed`` and ``request_overhead_s``): the time (s) from its arrival a_i to the start of the first step
    that carries it — the end of the step before the one that emitted its first token (at
    a_i + TTFT_i − overhead), 0 if the replica was idle when it arrived."""
    gaps = np.random.default_rng(seed).exponential(1.0 / qps, requests)  # the simulation's arrival draws
    arrivals = np.cumsum(gaps)[requests - len(dec.ttft_s):]
    first_end = arrivals + dec.ttft_s - request_overhead_s
    ends = np.asarray(dec.step_end_s, dtype=float)
    before = np.searchsorted(ends, first_end, side="left") - 1
    start = np.where(before >= 0, ends[np.maximum(before, 0)], -np.inf)
    return np.maximum(start - arrivals, 0.0)
