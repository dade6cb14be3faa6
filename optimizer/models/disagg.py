"""Disaggregated serving: a prefill pool and a decode pool, the KV cache sent between them.

Prefill is compute-bound and decode bandwidth-bound (``DESIGN.md`` §1), so serving stacks
(Dynamo, llm-d, SGLang, vLLM; DistServe, arXiv 2401.09670; Splitwise, arXiv 2311.18677) run
them on separate replicas. Per request: a prefill replica processes the prompt and emits the
first token, its KV cache goes over the scale-out network to a decode replica, which
generates the rest without prefill chunks in its steps.

- **KV transfer** of a prompt of L tokens (L − N with a shared prefix held on both sides):
  ``t_kv = L · kv_bytes_per_token / link``, ``link = g_kv · nic_gbps · 1e9/8 · NIC_EFFICIENCY``
  with g_kv = kv_shards · pp the GPUs that hold distinct KV (each sends its shard on its own
  NIC). The p99 transfer uses the p99 prompt.
- **Prefill pool** capacity (req/s per replica) at the TTFT SLO: the serving model of a
  replica whose requests have two output tokens (the first, and one step to retire; its queueing, chunked prefill and front-end
  time; ``capacity_at_slo``) against ``ttft_p99_ms − t_kv(L_p99)``, and at most the rate its
  NICs can send: ``link / (E[L] · kv_bytes_per_token)``.
- **Decode pool** capacity at the TPOT SLO (and E2E − TTFT when both are given): the serving
  model of a replica whose prompts arrive cached (prefill work one token; context and KV of
  the whole prompt), so its steps carry no prefill chunks; at most the rate its NICs can
  receive. Both pools' memory fit is that of the serving model (KV at p99 within capacity).
- **End to end**: TTFT = prefill pool TTFT + t_kv; TPOT = decode pool TPOT; E2E ≤ TTFT p99 +
  the decode pool's E2E p99 (a sum of p99s: an upper bound).

Pure: no I/O. ``NIC_EFFICIENCY`` is an assumption (RDMA writes of multi-MB KV blocks run near
line rate; NIXL/UCX and Mooncake report 80-95 % of it), not a fitted figure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from optimizer.models.lengths import quantile_tokens
from optimizer.models.perf import Configs
from optimizer.models.serving import Capacity, capacity_at_slo
from optimizer.models.techniques import ServingTechnique
from workloads.spec import SLO, LengthDist

NIC_EFFICIENCY = 0.85
# A prefill replica's requests: the first token plus one decode step that retires the request
# (the serving model brackets its search by the decode-step rate, which needs one step).
PREFILL_OUTPUT = LengthDist(mean=2)
POOL_STAGES = ("prefill", "decode")


def kv_link_bytes_s(c: Configs, nic_gbps_per_gpu) -> np.ndarray:
    """Scale-out bytes/s a replica sends or receives KV at: kv_shards · pp · nic · 1e9/8 · η (0 without a NIC)."""
    nic = np.nan_to_num(np.asarray(nic_gbps_per_gpu, dtype=float), nan=0.0)
    return c.kv_shards * c.pp * nic * 1e9 / 8.0 * NIC_EFFICIENCY


def sent_tokens(prompt_tokens: float, technique: ServingTechnique | None) -> float:
    """Prompt tokens whose KV crosses the network: L − N (a shared prefix already sits on the decode side)."""
    shared = technique.shared_prefix_tokens if technique is not None else 0.0
    return max(float(prompt_tokens) - min(shared, float(prompt_tokens) - 1.0), 1.0)


def kv_transfer_ms(c: Configs, tokens: float, link_bytes_s: np.ndarray) -> np.ndarray:
    """t_kv = tokens · kv_bytes_per_token / link (ms); inf where there is no link."""
    with np.errstate(divide="ignore"):
        return np.where(link_bytes_s > 0, tokens * c.kv_bytes_per_token / link_bytes_s * 1e3, np.inf)


def link_limit_qps(c: Configs, prompt: LengthDist, link_bytes_s: np.ndarray,
                   technique: ServingTechnique | None) -> np.ndarray:
    """Requests/s whose KV the replica's NICs can carry: link / (E[tokens sent] · kv_bytes_per_token)."""
    return link_bytes_s / (sent_tokens(prompt.mean_tokens, technique) * c.kv_bytes_per_token)


def prefill_technique(t: ServingTechnique | None) -> ServingTechnique | None:
    """A prefill replica uses the prefix cache but never decodes (no speculation)."""
    return None if t is None else replace(t, speculative=None)


def decode_technique(t: ServingTechnique | None) -> ServingTechnique:
    """A decode replica receives the prompt's KV: prefill work of one token over the full context."""
    base = t if t is not None else ServingTechnique()
    return replace(base, prefix_hit_fraction=1.0)


def pool_slos(slo: SLO, transfer_p99_ms: float = 0.0) -> tuple[SLO | None, SLO | None]:
    """(prefill SLO, decode SLO): TTFT − t_kv for the prefill pool; TPOT and E2E − TTFT for the
    decode pool. None where the workload's SLO cannot be split (no TTFT target)."""
    if slo.ttft_p99_ms is None:
        return None, None
    decode_e2e = slo.e2e_p99_ms - slo.ttft_p99_ms if slo.e2e_p99_ms is not None else None
    if decode_e2e is not None and decode_e2e <= 0:
        return None, None
    if slo.tpot_p99_ms is None and decode_e2e is None:
        decode = None
    else:
        decode = SLO(tpot_p99_ms=slo.tpot_p99_ms, e2e_p99_ms=decode_e2e)
    budget = slo.ttft_p99_ms - transfer_p99_ms
    return (SLO(ttft_p99_ms=budget) if budget > 0 else None), decode


@dataclass(frozen=True)
class PoolCapacity:
    """Capacity (req/s per replica) of N configurations as one pool's replicas, and what limits it."""

    stage: str
    max_qps: np.ndarray
    limited_by: list[str]
    why: list[str | None]
    kv_transfer_p99_ms: np.ndarray
    link_limit_qps: np.ndarray
    serving: Capacity | None


def prefill_pool_capacity(c: Configs, prompt: LengthDist, slo: SLO, nic_gbps_per_gpu,
                          technique: ServingTechnique | None = None, params=None) -> PoolCapacity:
    """Prefill replicas at ``slo.ttft_p99_ms`` less the p99 KV transfer, capped by their NICs."""
    link = kv_link_bytes_s(c, nic_gbps_per_gpu)
    l99 = sent_tokens(float(quantile_tokens(prompt, 0.99)), technique)
    t_kv = kv_transfer_ms(c, l99, link)
    limit = link_limit_qps(c, prompt, link, technique)
    n = len(c)
    qps, limited, why = np.zeros(n), ["unservable"] * n, [None] * n
    serving_cap = None
    if slo.ttft_p99_ms is None:
        return PoolCapacity("prefill", qps, limited, ["the workload has no ttft_p99_ms to split"] * n, t_kv, limit, None)
    # one serving-model search per distinct transfer time (configurations differ by their NICs)
    for budget in np.unique(np.round(slo.ttft_p99_ms - t_kv, 9)):
        rows = np.flatnonzero(np.round(slo.ttft_p99_ms - t_kv, 9) == budget)
        if not np.isfinite(budget) or budget <= 0:
            for i in rows:
                why[i] = (f"{c.keys[i]}: KV transfer of the p99 prompt takes {t_kv[i]:.1f} ms, "
                          f"the whole TTFT budget of {slo.ttft_p99_ms:g} ms" if np.isfinite(t_kv[i])
                          else f"{c.keys[i]}: no scale-out NIC figure (scaleout_nic_gbps_per_gpu)")
            continue
        sub = c.take(rows)
        cap = capacity_at_slo(sub, prompt, PREFILL_OUTPUT, SLO(ttft_p99_ms=float(budget)), params,
                              technique=prefill_technique(technique))
        serving_cap = cap if len(rows) == n else serving_cap
        for j, i in enumerate(rows):
            qps[i] = min(float(cap.max_qps[j]), float(limit[i]))
            limited[i] = "kv_link" if limit[i] < cap.max_qps[j] else cap.limited_by[j]
            why[i] = cap.why[j]
    return PoolCapacity("prefill", qps, limited, why, t_kv, limit, serving_cap)


def decode_pool_capacity(c: Configs, prompt: LengthDist, output: LengthDist, slo: SLO, nic_gbps_per_gpu,
                         technique: ServingTechnique | None = None, params=None) -> PoolCapacity:
    """Decode replicas at the decode SLO of :func:`pool_slos`, no prefill in their steps, capped by their NICs."""
    link = kv_link_bytes_s(c, nic_gbps_per_gpu)
    limit = link_limit_qps(c, prompt, link, technique)
    t_kv = kv_transfer_ms(c, sent_tokens(float(quantile_tokens(prompt, 0.99)), technique), link)
    n = len(c)
    _, decode_slo = pool_slos(slo)
    if decode_slo is None:
        return PoolCapacity("decode", np.zeros(n), ["unservable"] * n,
                            ["the workload's SLO has no ttft_p99_ms with a tpot_p99_ms or e2e_p99_ms to split"] * n,
                            t_kv, limit, None)
    cap = capacity_at_slo(c, prompt, output, decode_slo, params, technique=decode_technique(technique))
    qps = np.minimum(cap.max_qps, limit)
    limited = ["kv_link" if limit[i] < cap.max_qps[i] else cap.limited_by[i] for i in range(n)]
    why = [cap.why[i] if limited[i] == "unservable" else None for i in range(n)]
    for i in range(n):
        if link[i] <= 0:
            qps[i], limited[i], why[i] = 0.0, "unservable", f"{c.keys[i]}: no scale-out NIC figure (scaleout_nic_gbps_per_gpu)"
    return PoolCapacity("decode", qps, limited, why, t_kv, limit, cap)
