"""Disaggregated serving: a prefill pool and a decode pool, the KV cache sent between them.

Prefill is compute-bound and decode bandwidth-bound (``DESIGN.md`` §1), so serving stacks
(Dynamo, llm-d, SGLang, vLLM; DistServe, arXiv 2401.09670; Splitwise, arXiv 2311.18677) run
them on separate replicas. Per request: a prefill replica processes the prompt and emits the
first token, its KV cache goes over the scale-out network to a decode replica, which
generates the rest without prefill chunks in its steps.

- **KV transfer** of a prompt of L tokens (L − N with a shared prefix held on both sides):
  ``t_kv = L · kv_bytes_per_token / min(link_send, link_receive)``, each side's
  ``link = g_kv · nic_gbps · 1e9/8 · NIC_EFFICIENCY`` with g_kv = kv_shards · pp the GPUs that
  hold distinct KV (each sends or receives its shard on its own NIC): the transfer runs at the
  slower side (a tp8 prefill replica sending 12,000 tokens of 70B KV to a tp2 decode replica:
  23.1 ms at the decode side's 2 NICs, not 5.8 ms at the prefill side's 8). The p99 transfer
  uses the p99 prompt.
- **Decode wait**: a request whose KV has arrived joins the decode replica's running batch at
  its next step boundary: a residual of the step in progress, uniform over it, so
  ``E[wait] = t̄/2`` and ``wait_p99 ≈ t̄`` (t̄ the decode replica's mean step). It delays the first
  token the user sees from the decode replica, so it is part of TTFT.
- **Pairing** by receive-link tier: the workload's decode candidates receive at a few distinct
  links r_1 < … < r_T (:func:`receive_tiers`). A prefill candidate of send link s is offered once
  per tier r it can use (:func:`prefill_tiers`: every r < s, and the smallest r ≥ s — the faster
  ones would budget the same min(s, r) = s and feed fewer receivers), its TTFT budgeting the
  transfer at min(s, r) (:class:`DecodeSide`); the MILP lets a tier-r prefill replica feed only
  decode replicas receiving at ≥ r (``milp.problem.pairing_rows``). The wait budgets a decode step
  of at most ``A · tpot_p99_ms`` (a decode pool at its TPOT SLO steps no longer on average; A
  tokens per step with speculation, else 1; without a TPOT target
  ``A · (e2e_p99_ms − ttft_p99_ms)/(O_p99 − 1)``), whatever the tier.
- **Prefill pool** capacity (req/s per replica) at the TTFT SLO: a replica that only prefills
  serves prompt work first come first served, an M/G/1 queue (:class:`PrefillQueue`: service
  S(L) = its chunked prefill steps, waiting time by Pollaczek–Khinchine/Takács moments and a
  shifted-gamma tail), plus the fill of a prompt's last step by the next prompt's first tokens
  (the scheduler fills a step's C-token budget in order, :meth:`PrefillQueue.mixture`), against ``ttft_p99_ms − t_kv(L_p99) − wait_p99`` (:class:`DecodeSide`), and at most the rate its NICs can send:
  ``link / (E[L] · kv_bytes_per_token)``. (The colocated serving model's TTFT assumes a
  decoding batch whose steps the prompts ride in; with no decode it under-states the queue.)
- **Decode pool** capacity at the TPOT SLO (and E2E − TTFT when both are given): the serving
  model of a replica whose prompts arrive cached (prefill work one token; context and KV of
  the whole prompt), so its steps carry no prefill chunks; at most the rate its NICs can
  receive. Both pools' memory fit is that of the serving model (KV at p99 within capacity).
- **End to end**: TTFT = prefill pool TTFT + t_kv + decode wait (p99: the sum of the three
  p99s, an upper bound); TPOT = decode pool TPOT; E2E ≤ TTFT p99 + the decode pool's E2E p99
  (a sum of p99s: an upper bound; the decode pool's E2E already holds its wait and first step).

Pure: no I/O. ``NIC_EFFICIENCY`` is an assumption (RDMA writes of multi-MB KV blocks run near
line rate; NIXL/UCX and Mooncake report 80-95 % of it), not a fitted figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from optimizer.models import perf
from optimizer.models.configs import Configs
from optimizer.models.constants import DEFAULT_PREFILL_CHUNK_TOKENS
from optimizer.models.lengths import quantile_tokens
from optimizer.models.serving import CAPACITY_RTOL, Capacity, capacity_at_slo, serve_at_rate
from optimizer.models.serving.state import lengths_for
from optimizer.models.serving.tails import mixture_quantile
from optimizer.models.techniques import ServingTechnique
from workloads.spec import SLO, LengthDist

NIC_EFFICIENCY = 0.85
PREFILL_OUTPUT = LengthDist(mean=1)  # a prefill replica's requests end with the first token
POOL_STAGES = ("prefill", "decode")


def kv_link_bytes_s(c: Configs, nic_gbps_per_gpu) -> np.ndarray:
    """Scale-out bytes/s a replica sends or receives KV at: kv_shards · pp · nic · 1e9/8 · η (0 without a NIC)."""
    nic = np.nan_to_num(np.asarray(nic_gbps_per_gpu, dtype=float), nan=0.0)
    return c.kv_shards * c.pp * nic * 1e9 / 8.0 * NIC_EFFICIENCY


def pair_link_bytes_s(send_bytes_s, receive_bytes_s) -> np.ndarray:
    """Bytes/s the KV of a disaggregated pair crosses at: the slower side, min(link_send, link_receive)."""
    return np.minimum(np.asarray(send_bytes_s, dtype=float), np.asarray(receive_bytes_s, dtype=float))


@dataclass(frozen=True)
class DecodeSide:
    """What a prefill pool budgets for the decode pools it feeds: ``receive_link_bytes_s``, the slowest
    receive link (:func:`kv_link_bytes_s`) of the decode replicas it may feed (its tier: the MILP pairs it
    only with decode replicas receiving at least that fast), and ``tokens_per_step`` A, the most tokens
    a decode step emits (speculative decoding; 1 without)."""

    receive_link_bytes_s: float
    tokens_per_step: float = 1.0

    def wait_p99_ms(self, slo: SLO, output: LengthDist) -> float:
        """p99 wait for the decode replica's next step boundary ≈ one step t̄ ≤ A · tpot_p99_ms (a
        decode pool at its TPOT SLO); without a TPOT target A · (e2e_p99_ms − ttft_p99_ms)/(O_p99 − 1)
        (the p99 answer's decode steps within the decode pool's E2E share); 0 without either."""
        if slo.tpot_p99_ms is not None:
            return self.tokens_per_step * float(slo.tpot_p99_ms)
        if slo.e2e_p99_ms is not None and slo.ttft_p99_ms is not None:
            steps = max(float(quantile_tokens(output, 0.99)) - 1.0, 1.0)
            return self.tokens_per_step * max(float(slo.e2e_p99_ms - slo.ttft_p99_ms), 0.0) / steps
        return 0.0


def decode_side(c: Configs, nic_gbps_per_gpu, tokens_per_step: float = 1.0) -> DecodeSide:
    """The :class:`DecodeSide` of decode candidates ``c`` (their NICs): the slowest receive link of them all."""
    links = kv_link_bytes_s(c, nic_gbps_per_gpu)
    return DecodeSide(float(np.min(links)) if len(links) else 0.0, float(tokens_per_step))


def receive_tiers(c: Configs, nic_gbps_per_gpu) -> tuple[float, ...]:
    """The distinct receive links (B/s, ascending, > 0) of decode candidates ``c``: :func:`kv_link_bytes_s`."""
    links = kv_link_bytes_s(c, nic_gbps_per_gpu)
    return tuple(sorted({float(x) for x in links if x > 0}))


def prefill_tiers(send_bytes_s: float, tiers: tuple[float, ...]) -> tuple[float, ...]:
    """The tiers a prefill replica of send link s budgets a variant for: every r < s, and the smallest
    r ≥ s. A faster tier r' > that one gives the same transfer time (min(s, r') = s) and may feed
    fewer decode replicas (those at ≥ r'), so it is dominated and left out."""
    below = tuple(r for r in tiers if r < send_bytes_s)
    above = [r for r in tiers if r >= send_bytes_s]
    return below + ((above[0],) if above else ())


def tier_label(link_bytes_s: float) -> str:
    """A receive tier as its line rate in a candidate key: ``rx{kv_shards·pp·nic_gbps}gbps`` (link / η)."""
    return f"rx{round(link_bytes_s * 8.0 / 1e9 / NIC_EFFICIENCY):d}gbps"


def decode_wait_ms(step_ms) -> tuple[np.ndarray, np.ndarray]:
    """(mean, p99) wait (ms) of a request at a decode replica of mean step t̄ for its next step boundary:
    a uniform residual of the step in progress, t̄/2 and 0.99·t̄ ≈ t̄ (taken as t̄)."""
    t = np.asarray(step_ms, dtype=float)
    return t / 2.0, t


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


def prefill_service_s(c: Configs, prompt_nodes: np.ndarray, chunk: int, span_offset: float = 0.0) -> np.ndarray:
    """S(L) (s), (N, QL): a prefill replica's time to process one prompt of L tokens alone, in
    chunks of C: Σ_j t(b = 0, n_j, span_j), n_j = min(C, L − j·C), span_j = j·C + n_j/2 (+ cached tokens)."""
    total = np.zeros((len(c), len(prompt_nodes)))
    for j in range(int(math.ceil(float(np.max(prompt_nodes)) / chunk))):
        n_j = np.clip(prompt_nodes - j * chunk, 0.0, float(chunk))
        step = perf.decode_step_s(c, 0.0, 0.0, n_j[None, :], (j * chunk + n_j / 2.0 + span_offset)[None, :])
        total += np.where(n_j[None, :] > 0, step, 0.0)
    return total


FILL_NODES = 32  # midpoints of the uniform position of a prompt's last token in its step (``step_fill_moments``)


def step_fill_s(c: Configs, last_tokens: np.ndarray, chunk: int, span_offset: float = 0.0) -> np.ndarray:
    """R(p) (s), (N, K): how much longer a step carrying a prompt's last p tokens lasts when the next prompt
    fills its other C − p tokens than when it carries the p alone:
    ``t(C, 0) − t(p, 0) + a_pre·((C − p)²/2 + (C − p)·offset)`` (tokens-only steps, b = 0; the filler's first piece
    attends to offset + (C − p)/2 tokens on average, offset = its cached tokens, ``span_offset``, as in
    ``prefill_service_s``; the p tokens' own attention is in both and cancels, the attention term being linear
    in n·span)."""
    p = np.asarray(last_tokens, dtype=float)[None, :]
    zero = np.zeros_like(p)
    fill = float(chunk) - p
    full = perf.decode_step_s(c, 0.0, 0.0, np.full_like(p, float(chunk)), zero)
    own = perf.decode_step_s(c, 0.0, 0.0, p, zero)
    attn = (perf.decode_step_s(c, 0.0, 0.0, np.ones_like(p), fill**2 / 2.0 + fill * span_offset)
            - perf.decode_step_s(c, 0.0, 0.0, np.ones_like(p), zero))
    return np.where(fill > 0, full - own + attn, 0.0)


def _moments3(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(mean, variance, third central moment) over the last axis of ``x`` with weights ``w`` (sum 1)."""
    m = (x * w).sum(-1)
    d = x - m[..., None]
    return np.stack([m, (d**2 * w).sum(-1), (d**3 * w).sum(-1)], axis=-1)


@dataclass(frozen=True)
class PrefillQueue:
    """A prefill replica as an M/G/1 FCFS queue of prompts (the scheduler spends every step's
    token budget on waiting prompts in order, so it serves prompt work one after another), and
    the fill of each prompt's last step by the prompts queued behind it (:meth:`ttft_p99_ms`)."""

    weights: np.ndarray  # (QL,) prompt-length nodes
    service_s: np.ndarray  # (N, QL) S(L)
    stratum_var_s2: np.ndarray  # (N, QL) spread of S inside each node's stratum, at its per-token rate
    overhead_s: np.ndarray  # (N,) front-end time per request
    before_last_s: np.ndarray  # (N, QL) time from the start of its first step to the start of its last one
    fill_own_s: np.ndarray  # (N, QL, 3) moments of R when its steps start at its first token (an idle replica)
    fill_busy_s: np.ndarray  # (N, 3) moments of R when its last token sits anywhere in its step (a busy replica)

    def moments(self, r: int) -> np.ndarray:
        return (self.service_s ** r) @ self.weights

    def ttft_p99_ms(self, lam: np.ndarray) -> np.ndarray:
        """p99 of TTFT = W + S(L) + F + front-end time (ms), inf when ρ = λ·E[S] ≥ 1: the quantile of
        :meth:`mixture` (shifted gammas of its means, variances and third cumulants)."""
        lam = np.asarray(lam, dtype=float)
        stable, w, mean, var, k3 = self.mixture(lam)
        q = np.array([mixture_quantile(0.99, w[i], mean[i:i + 1], var[i:i + 1], k3[i:i + 1])[0]
                      for i in range(len(lam))]) if len(lam) else np.zeros(0)
        return np.where(stable, q * 1e3, np.inf)

    def ttft_mean_ms(self, lam: np.ndarray) -> np.ndarray:
        """E[TTFT] (ms) = E[S] + front-end time + E[W] + E[F] (:meth:`mixture`'s mean), inf when ρ ≥ 1."""
        lam = np.asarray(lam, dtype=float)
        stable, w, mean, _, _ = self.mixture(lam)
        return np.where(stable, np.sum(w * mean, axis=1) * 1e3, np.inf)

    def mixture(self, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """TTFT = W + S(L) + F + front-end time (s) as a mixture over (L node, W = 0 or not, followed or not):
        (stable (N,), weights, means, variances, third cumulants (N, 4·QL)); ρ = λ·E[S] < 1 where stable.

        W, the wait for the prompt work ahead, FCFS (M/G/1): Pollaczek–Khinchine and Takács,
        E[W] = λE[S²]/(2(1−ρ)), E[W²] = 2E[W]² + λE[S³]/(3(1−ρ)),
        E[W³] = λ/(1−ρ)·(3/2·E[S²]E[W²] + E[S³]E[W] + E[S⁴]/4); W = 0 with probability 1 − ρ, else the
        shifted gamma of its conditional mean, variance and third cumulant (moments E[W^k]/ρ); W independent of
        the request's own S(L). (With the gamma of the first two moments only, the p99 of the four prefill replicas
        of ``scripts/agreement.py`` at 0.6-0.9 of their capacity was −3.1 … +0.2 % off an exact M/G/1 of 2,000,000
        requests; with the third, −2.0 … +0.3 %.)

        F, the fill of its last step: the scheduler spends a step's whole budget of C tokens on the
        prompts in order, so when a prompt's last p tokens leave room and another prompt is waiting,
        that one's first C − p tokens ride in the same step, and the first token comes at the end of
        the longer step: F = R(p) (:func:`step_fill_s`) if a prompt arrived before its last step
        began, else 0. A prompt served from an idle replica (W = 0) starts its steps at its first
        token, p = L mod C (over its stratum), and is followed with probability
        1 − e^{−λ·B(L)} (B = ``before_last_s``: arrivals during its last step join the next one);
        one that waited (W > 0) starts inside a step its predecessor began, so p is uniform on
        (0, C], and it is followed with probability 1 − E[e^{−λ(W + B(L))} | W > 0] =
        1 − (1 + λθ)^{−k}·e^{−λ·B(L)} (k, θ: the gamma of W's first two conditional moments). The
        fill is time spent on the follower's work, so the queue's W is unchanged (its predecessors'
        fills are prompt work that S already counts). Without F the TTFT p99 of the simulator's prefill
        replica was 1-9 % over this model at 30-90 % of its capacity on every pool pair of
        ``scripts/agreement.py`` (the M/G/1 alone matched an M/G/1 of the same draws to 1-4 %).
        """
        lam = np.asarray(lam, dtype=float)
        s1, s2, s3, s4 = (self.moments(r) for r in (1, 2, 3, 4))
        rho = lam * s1
        stable = rho < 1.0
        free = np.where(stable, 1.0 - rho, 1.0)
        w1 = lam * s2 / (2.0 * free)
        w2 = 2.0 * w1**2 + lam * s3 / (3.0 * free)
        w3 = lam / free * (1.5 * s2 * w2 + s3 * w1 + s4 / 4.0)
        p_wait = np.clip(rho, 1e-12, 1.0)
        m_plus = w1 / p_wait
        v_plus = np.maximum(w2 / p_wait - m_plus**2, 1e-18)
        k3_plus = np.maximum(w3 / p_wait - 3.0 * m_plus * v_plus - m_plus**3, 0.0)  # κ3 of W | W > 0
        theta = v_plus / np.maximum(m_plus, 1e-18)
        laplace_w = (1.0 + lam * theta) ** (-m_plus / np.maximum(theta, 1e-300))  # E[e^{−λW} | W > 0], gamma
        lead = np.exp(-lam[:, None] * self.before_last_s)
        follow_idle = 1.0 - lead
        follow_busy = 1.0 - laplace_w[:, None] * lead
        base = self.service_s + self.overhead_s[:, None]
        var0 = self.stratum_var_s2
        fo, fb = self.fill_own_s, self.fill_busy_s[:, None, :]
        wait_mean, wait_var = base + m_plus[:, None], var0 + v_plus[:, None]
        k3w = np.broadcast_to(k3_plus[:, None], base.shape)
        mean = np.concatenate([base, base + fo[..., 0], wait_mean, wait_mean + fb[..., 0]], axis=1)
        var = np.concatenate([var0, var0 + fo[..., 1], wait_var, wait_var + fb[..., 1]], axis=1)
        k3 = np.concatenate([np.zeros_like(base), fo[..., 2], k3w, k3w + fb[..., 2]], axis=1)
        idle = (1.0 - p_wait)[:, None] * self.weights[None, :]
        busy = p_wait[:, None] * self.weights[None, :]
        w = np.concatenate([idle * (1.0 - follow_idle), idle * follow_idle,
                            busy * (1.0 - follow_busy), busy * follow_busy], axis=1)
        return stable, w, mean, var, k3


def prefill_queue(c: Configs, prompt: LengthDist, technique: ServingTechnique | None = None,
                  chunk: int = DEFAULT_PREFILL_CHUNK_TOKENS) -> PrefillQueue:
    """The :class:`PrefillQueue` of every configuration on the prompt distribution (uncached tokens):
    S(L) by :func:`prefill_service_s`; the fill moments over p = ((L − 1) mod C) + 1 at five Gauss–Hermite points
    of each stratum (normal, the stratum's variance; a fixed length: its own p), and over p uniform on (0, C]
    (``FILL_NODES`` midpoints)."""
    lens = lengths_for(prompt, PREFILL_OUTPUT, prefill_technique(technique))
    service = prefill_service_s(c, lens.l_nodes, chunk, lens.span_offset)
    per_token = service / lens.l_nodes[None, :]
    gh_x, gh_w = np.polynomial.hermite_e.hermegauss(5)
    gh_w = gh_w / gh_w.sum()
    ls = np.maximum(lens.l_nodes[:, None] + np.sqrt(np.maximum(lens.l_var, 0.0))[:, None] * gh_x[None, :], 1.0)
    last = np.mod(np.round(ls) - 1.0, chunk) + 1.0  # (QL, 5)
    fill_own = _moments3(step_fill_s(c, last.ravel(), chunk, lens.span_offset).reshape(len(c), *last.shape), gh_w)
    uniform = (np.arange(FILL_NODES) + 0.5) / FILL_NODES * chunk
    fill_busy = _moments3(step_fill_s(c, uniform, chunk, lens.span_offset), np.full(FILL_NODES, 1.0 / FILL_NODES))
    last_node = np.mod(np.round(lens.l_nodes) - 1.0, chunk) + 1.0
    last_step = perf.decode_step_s(c, 0.0, 0.0, last_node[None, :],
                                   (lens.l_nodes - last_node / 2.0 + lens.span_offset)[None, :])
    return PrefillQueue(lens.l_w, service, per_token**2 * lens.l_var[None, :], np.full(len(c), c.request_overhead_s),
                        np.maximum(service - last_step, 0.0), fill_own, fill_busy)


def prefill_capacity_qps(queue: PrefillQueue, budget_ms: np.ndarray) -> np.ndarray:
    """Largest λ (req/s) with TTFT p99 ≤ ``budget_ms`` per configuration (0 if not even at λ → 0):
    geometric bisection on (0, 1/E[S]) to CAPACITY_RTOL (the p99 grows with λ)."""
    s1 = queue.moments(1)
    hi = 1.0 / s1
    lo = hi * 1e-6
    ok_lo = queue.ttft_p99_ms(lo) <= budget_ms
    for _ in range(60):
        if np.all(hi <= lo * (1.0 + CAPACITY_RTOL)):
            break
        mid = np.sqrt(lo * hi) if np.any(hi > 4 * lo) else 0.5 * (lo + hi)
        ok = queue.ttft_p99_ms(mid) <= budget_ms
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return np.where(ok_lo, lo, 0.0)


def prefill_pool_capacity(c: Configs, prompt: LengthDist, slo: SLO, nic_gbps_per_gpu,
                          technique: ServingTechnique | None = None, params=None, *, decode: DecodeSide,
                          output: LengthDist | None = None) -> PoolCapacity:
    """Prefill replicas at ``slo.ttft_p99_ms`` less the p99 KV transfer at the slower side
    (:func:`pair_link_bytes_s` with ``decode.receive_link_bytes_s``) and the decode wait
    (``decode.wait_p99_ms``; ``output``: the answers, needed only without a TPOT target)
    (:class:`PrefillQueue`), capped by the rate their NICs can send and by the KV cache of one attention rank
    (kv_capacity / ep) holding the p99 prompt."""
    link = kv_link_bytes_s(c, nic_gbps_per_gpu)
    l99 = float(quantile_tokens(prompt, 0.99))
    t_kv = kv_transfer_ms(c, sent_tokens(l99, technique), pair_link_bytes_s(link, decode.receive_link_bytes_s))
    limit = link_limit_qps(c, prompt, link, technique)
    n = len(c)
    if slo.ttft_p99_ms is None:
        return PoolCapacity("prefill", np.zeros(n), ["unservable"] * n,
                            ["the workload has no ttft_p99_ms to split"] * n, t_kv, limit, None)
    wait = decode.wait_p99_ms(slo, output if output is not None else PREFILL_OUTPUT)
    budget = slo.ttft_p99_ms - t_kv - wait
    runnable = np.asarray(c.runnable, dtype=bool) & (c.kv_capacity_tokens / c.ep >= l99)  # on one attention rank
    queue = prefill_queue(c, prompt, technique)
    with np.errstate(all="ignore"):
        cap = np.where(runnable & (budget > 0), prefill_capacity_qps(queue, np.where(budget > 0, budget, 0.0)), 0.0)
    floor_ms = queue.ttft_p99_ms(np.full(n, 1e-9))
    qps = np.minimum(cap, limit)
    limited, why = [], []
    for i in range(n):
        if not np.isfinite(t_kv[i]):
            limited.append("unservable")
            why.append(f"{c.keys[i]}: no scale-out NIC figure (scaleout_nic_gbps_per_gpu)")
        elif not runnable[i]:
            limited.append("unservable")
            why.append(c.reason[i] or f"{c.keys[i]}: the KV cache cannot hold the p99 prompt ({l99:,.0f} tokens)")
        elif cap[i] <= 0:
            limited.append("unservable")
            why.append(f"{c.keys[i]}: prefill pool ttft_p99_ms {slo.ttft_p99_ms:g} is below the best it reaches, "
                       f"{floor_ms[i] + t_kv[i] + wait:.1f} ms ({t_kv[i]:.1f} ms of it KV transfer, {wait:.1f} ms "
                       "the wait for a decode step)")
        else:
            limited.append("kv_link" if limit[i] < cap[i] else "ttft")
            why.append(None)
    return PoolCapacity("prefill", qps, limited, why, t_kv, limit, None)


def decode_pool_capacity(c: Configs, prompt: LengthDist, output: LengthDist, slo: SLO, nic_gbps_per_gpu,
                         technique: ServingTechnique | None = None, params=None) -> PoolCapacity:
    """Decode replicas at the decode SLO of :func:`pool_slos`, no prefill in their steps, capped by their NICs."""
    link = kv_link_bytes_s(c, nic_gbps_per_gpu)
    limit = link_limit_qps(c, prompt, link, technique)
    t_kv = kv_transfer_ms(c, sent_tokens(float(quantile_tokens(prompt, 0.99)), technique), link)
    n = len(c)
    _, decode_slo = pool_slos(slo)
    if decode_slo is None:
        if slo.ttft_p99_ms is not None and slo.e2e_p99_ms is not None and slo.e2e_p99_ms <= slo.ttft_p99_ms:
            why = (f"e2e_p99_ms {slo.e2e_p99_ms:g} is not above ttft_p99_ms {slo.ttft_p99_ms:g}: no time is left "
                   "for the decode pool; raise e2e_p99_ms or drop it and give tpot_p99_ms")
        else:
            why = "the workload's SLO has no ttft_p99_ms with a tpot_p99_ms or e2e_p99_ms to split"
        return PoolCapacity("decode", np.zeros(n), ["unservable"] * n, [why] * n, t_kv, limit, None)
    cap = capacity_at_slo(c, prompt, output, decode_slo, params, technique=decode_technique(technique))
    qps = np.minimum(cap.max_qps, limit)
    limited = ["kv_link" if limit[i] < cap.max_qps[i] else cap.limited_by[i] for i in range(n)]
    why = [cap.why[i] if limited[i] == "unservable" else None for i in range(n)]
    for i in range(n):
        if link[i] <= 0:
            qps[i], limited[i], why[i] = 0.0, "unservable", f"{c.keys[i]}: no scale-out NIC figure (scaleout_nic_gbps_per_gpu)"
    return PoolCapacity("decode", qps, limited, why, t_kv, limit, cap)


def pool_p99_ms(stage: str, c: Configs, qps: float, prompt: LengthDist, output: LengthDist, nic_gbps_per_gpu: float,
                technique: ServingTechnique | None = None, params=None, *, slo: SLO | None = None,
                decode: DecodeSide | None = None) -> tuple[float | None, float | None, float | None]:
    """(TTFT, TPOT, E2E) p99s (ms) of a one-configuration pool replica at ``qps`` req/s.

    Prefill: TTFT = the :class:`PrefillQueue` p99 + the p99 KV transfer at the slower side + the
    p99 decode wait, both as budgeted by ``decode`` (:class:`DecodeSide`, its wait bound from
    ``slo``; required for a prefill pool) (TPOT, E2E: None).
    Decode: TPOT and E2E of the decode replica (its E2E counts from the KV's arrival; the
    request's E2E adds the prefill pool's TTFT to it).
    """
    if stage == "prefill":
        if decode is None or slo is None:
            raise ValueError("a prefill pool's TTFT needs the decode side it feeds (decode=, slo=)")
        link = pair_link_bytes_s(kv_link_bytes_s(c, [nic_gbps_per_gpu]), decode.receive_link_bytes_s)
        t_kv = kv_transfer_ms(c, sent_tokens(float(quantile_tokens(prompt, 0.99)), technique), link)
        wait = decode.wait_p99_ms(slo, output)
        return float(prefill_queue(c, prompt, technique).ttft_p99_ms(np.array([qps]))[0] + t_kv[0] + wait), None, None
    r = serve_at_rate(c, qps, prompt, output, params, technique=decode_technique(technique))
    return None, float(r.tpot_p99_ms[0]), float(r.e2e_p99_ms[0])


def estimate_pair(prefill: Configs, decode: Configs, prompt: LengthDist, output: LengthDist, slo: SLO,
                  prefill_nic_gbps: float | None, decode_nic_gbps: float | None, qps: float | None = None,
                  technique: ServingTechnique | None = None, params=None) -> dict:
    """One disaggregated pair (configuration 0 of each) as a JSON-ready dict (``gpuplan estimate
    --prefill-device/--decode-device``): each pool's capacity at its share of the SLO
    (:func:`pool_slos`) and what limits it, the p99 KV transfer, the KV traffic per req/s, the
    prefill replicas one decode replica needs (μ_decode/μ_prefill); with ``qps`` (req/s per
    replica of each pool) the end-to-end p99s there (None where a pool is saturated, named in
    ``saturated_pools``).

    The pair is known, so the KV transfer runs at min(prefill send, this decode replica's receive
    link); the prefill pool's capacity budgets the decode wait as the optimizer does
    (``DecodeSide.wait_p99_ms``, the step a decode pool at its SLO may take), while the TTFT at
    ``qps`` adds the wait at this decode replica's own mean step there (``decode_wait_ms``)."""
    side = decode_side(decode, [decode_nic_gbps or np.nan],
                       technique.tokens_per_step if technique is not None else 1.0)
    pc = prefill_pool_capacity(prefill, prompt, slo, [prefill_nic_gbps or np.nan], technique, params,
                               decode=side, output=output)
    dc = decode_pool_capacity(decode, prompt, output, slo, [decode_nic_gbps or np.nan], technique, params)
    kv_bytes = float(prefill.kv_bytes_per_token[0]) * sent_tokens(prompt.mean_tokens, technique)
    mu_p, mu_d = float(pc.max_qps[0]), float(dc.max_qps[0])
    out: dict = {
        "prefill": {"key": prefill.keys[0], "max_qps_at_slo": round(mu_p, 4), "limited_by": pc.limited_by[0],
                    "kv_transfer_p99_ms": _round(pc.kv_transfer_p99_ms[0]), "why": pc.why[0]},
        "decode": {"key": decode.keys[0], "max_qps_at_slo": round(mu_d, 4), "limited_by": dc.limited_by[0],
                   "why": dc.why[0]},
        "kv_link_gb_s_per_qps": round(kv_bytes * 8.0 / 1e9, 4),
        "prefill_replicas_per_decode_replica": round(mu_d / mu_p, 3) if mu_p > 0 else None,
    }
    if qps is not None:
        with np.errstate(all="ignore"):
            queue_ms = float(prefill_queue(prefill, prompt, technique).ttft_p99_ms(np.array([qps]))[0])
            step_ms = float(serve_at_rate(decode, qps, prompt, output, params,
                                          technique=decode_technique(technique)).step_ms[0])
        handoff = queue_ms + float(pc.kv_transfer_p99_ms[0])
        ttft = handoff + float(decode_wait_ms(step_ms)[1])
        _, tpot, e2e = pool_p99_ms("decode", decode, qps, prompt, output, decode_nic_gbps or float("nan"),
                                   technique, params)
        # the decode replica's E2E counts from the KV's arrival: its wait and first step are in it already
        out.update(ttft_p99_ms=_round(ttft), tpot_p99_ms=_round(tpot),
                   e2e_p99_ms=_round(handoff + e2e) if e2e is not None else None)
        # a pool past its saturation has no steady state, so no p99: say which, not only None
        out["saturated_pools"] = [pool for pool, v in (("prefill", queue_ms), ("decode", tpot))
                                  if v is None or not np.isfinite(v)]
    return out


def _round(x, digits: int = 3) -> float | None:
    x = float(x) if x is not None else float("nan")
    return round(x, digits) if np.isfinite(x) else None
