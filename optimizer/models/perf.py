"""Step rooflines of one replica (one model copy on tp·pp·ep devices), vectorised over :class:`Configs`.

Pure: no I/O, no printing. The configurations come from ``optimizer.models.configs.build_configs``
(import it, ``Configs`` and ``config_key`` from there); every function below evaluates all of
them at once. Physics per ``DESIGN.md`` §1/§5
(t = tp, p = pp, e = ep, G = e·t·p GPUs; with e > 1 attention runs data-parallel over e ranks
of t GPUs and the routed experts are split e ways, as TensorRT-LLM's "DEP" does):

- MoE: bytes read per step = dense body + lm_head + experts touched · bytes per expert,
  experts touched per layer E·(1 − (1 − k/E)^B) for B tokens in the step (split e ways).
- a decode step is a **sum of per-operator rooflines**, each a smooth max
  ``smax(a, b) = (a^n + b^n)^(1/n)`` of its memory and compute times (``smooth_max_exponent``):
  for one pipeline stage and a micro-batch of b/p sequences and n/p prefill tokens (T tokens),
  ``t_gemm = smax(dense bytes/GPU / (bw·e_bw), 2·dense active·T/G / (peak[gemm]·e_c)) +
  smax(touched expert bytes/GPU / (bw·e_bw), 2·k·expert·T/G / (peak[gemm]·e_c·e_moe)) +
  T·k·hidden·moe_layers·g/(p·e) / (bw·e_bw) + 2·vocab·hidden·b/(p·e·t) / (peak[16 bit]·e_c)`` (dense GEMMs,
  MoE grouped GEMMs, the MoE routing glue — permute, quantize, un-permute and weighted sum, g bytes per routed
  token-expert pair and hidden element, ``moe_glue_bytes_per_element`` — and lm_head),
  ``t_attn = smax(b·c·kv/(kv_shards·p·e) / (bw·e_bw), F_dec·b·c/G / (peak[attn]·e_attn))``,
  ``t_prefill_attn = F_pre·n·span/G / (peak[attn]·e_prefill_attn)`` with F the attention FLOPs
  per context token (``4·L·H·d``; MLA: absorbed in decode, ``2·L·H·(2·r + d_rope)``, per head
  in prefill, ``2·L·H·(2·d + d_rope)``: ``optimizer.models.attention``),
  ``t_comm = L/p · 2 · (2·(t−1)/t · T/e·hidden·act / link + latency)`` (tensor parallel)
  ``+ moe_layers/p · 2 · (r·T/e·hidden·act / link + latency)`` (dispatch and combine all-to-alls,
  r = the other ranks a token goes to, ≤ e − 1: ``moe_routing.remote_ranks_per_token``; with
  ``CalibrationParams.ep_allgather`` r = e − 1 and act = (dispatch bytes + 2)/2, the all-gather of the
  quantized tokens and the BF16 reduce-scatter of TensorRT-LLM's attention-DP MoE: ``moe_routing``),
  ``t_hop = T·hidden·act/link + hop latency`` (p > 1 only);
  the step (every sequence advances one token) = ``p·(t_gemm + t_attn + t_prefill_attn +
  t_comm + t_hop) + t_host`` with ``t_host = step_overhead + (b/e)·sequence_overhead +
  [p > 1]·p·microbatch_overhead``.

Units: bytes, seconds, FLOPs in arrays; ``_ms`` / ``_gb`` only where the name says so.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from optimizer.models.attention import effective_context
from optimizer.models.configs import Configs, column
from optimizer.models.moe_routing import experts_touched

HARD_MAX_EXPONENT = 64.0  # smooth_max_exponent at or above which smax is np.maximum


def smooth_max(a, b, n: float):
    """``(a^n + b^n)^(1/n)`` for a, b >= 0 (= max(a, b) when n >= 64): the roofline of one
    operator whose memory and compute phases overlap imperfectly near the ridge."""
    if n >= HARD_MAX_EXPONENT:
        return np.maximum(a, b)
    hi = np.maximum(a, b)
    lo = np.minimum(a, b)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.where(hi > 0, lo / hi, 0.0)
        k = int(round(np.log2(n)))
        if 2.0**k == n:  # a power of two: k squarings and k square roots, much cheaper than pow
            x = r
            for _ in range(k):
                x = x * x
            y = 1.0 + x
            for _ in range(k):
                y = np.sqrt(y)
            return hi * y
        return hi * (1.0 + r**n) ** (1.0 / n)



def _prep(c: Configs, *xs) -> tuple[int, list[np.ndarray]]:
    arrs = [np.asarray(x, dtype=float) for x in xs]
    ndim = max([1] + [a.ndim for a in arrs])
    return ndim, arrs



def _expert_bytes_read_per_gpu(c: Configs, tokens: np.ndarray, ndim: int):
    """Routed-expert bytes one GPU reads for one pass of ``tokens`` tokens of its stage (all
    ranks): E·(1 − (1 − k/E)^T)/e · expert/(t·p); 0 for a dense model."""
    m = c.model
    if not m.is_moe:
        return 0.0
    k = c.stage.shaped(ndim)
    touched = experts_touched(m.num_experts, m.experts_per_token, np.maximum(tokens, 1.0))
    return touched / k.ep * k.expert_read_per_gpu


def _weight_bytes_read_per_gpu(c: Configs, tokens: np.ndarray, ndim: int) -> np.ndarray:
    """Weight bytes one GPU reads for one pass of ``tokens`` tokens: dense/(t·p) + routed experts
    touched (``_expert_bytes_read_per_gpu``); for a dense model the (N, 1, ...) column."""
    return c.stage.shaped(ndim).dense_read_per_gpu + _expert_bytes_read_per_gpu(c, tokens, ndim)


def _gemm_s(c: Configs, tokens: np.ndarray, ndim: int,
            expert_tokens: np.ndarray | None = None, sides: bool = True
            ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(time, memory side, compute side) of the GEMMs of one stage pass of ``tokens`` tokens: one
    roofline for the dense GEMMs (dense bytes vs 2·dense active·T FLOPs) plus one for the routed
    experts' grouped GEMMs (touched expert bytes vs 2·expert·max(k·T, touched·tile) FLOPs: each
    touched expert computes at least one M tile of ``moe_tile_tokens`` rows), each a smooth max, plus
    the routing glue kernels' memory time T·k·hidden·moe_layers·g/(p·e) / (bw·e_bw) (counted on the
    memory side).
    ``expert_tokens`` (default ``tokens``): the tokens the grouped GEMMs see, when they differ from
    the dense GEMMs' (the busiest attention rank sets the dense time, all ranks' tokens the experts').
    ``sides=False``: the time only (the two sides are None; what a step time needs)."""
    k = c.stage.shaped(ndim)
    n = c.smooth_max_exponent
    dense_mem = k.dense_read_per_gpu / k.memory_bytes_s
    dense_comp = tokens * k.gemm_flops_per_token / k.gemm_flops_s
    time = smooth_max(dense_mem, dense_comp, n)
    if not c.model.is_moe:
        return (time, dense_mem + 0.0 * tokens, dense_comp) if sides else (time, None, None)
    m = c.model
    tokens = tokens if expert_tokens is None else expert_tokens
    touched = experts_touched(m.num_experts, m.experts_per_token, np.maximum(tokens, 1.0))
    exp_mem = touched / k.ep * k.expert_read_per_gpu / k.memory_bytes_s
    padded = np.maximum(tokens, touched * c.moe_tile_tokens / m.experts_per_token)  # rows padded to tiles
    exp_comp = padded * k.expert_flops_per_token / k.moe_flops_s
    time = time + smooth_max(exp_mem, exp_comp, n)
    if c.moe_glue_bytes_per_element > 0:
        glue = tokens * k.moe_glue_bytes_per_token / k.memory_bytes_s
        time = time + glue
        exp_mem = exp_mem + glue
    return (time, dense_mem + exp_mem, dense_comp + exp_comp) if sides else (time, None, None)



def _comm_s(c: Configs, tokens: np.ndarray, ndim: int) -> np.ndarray:
    """Communication of one stage pass of ``tokens`` tokens (all ranks): tensor-parallel ring
    all-reduces (2·(t−1)/t · T/e·hidden·act / link + latency each), expert-parallel all-to-alls
    (r·T/e·hidden·act / link + latency each, r = ``moe_routing.ranks_receiving_token``) and the pipeline hop
    to the next stage.

    A term that is 0 for every configuration (no all-to-all at e = 1, no hop at p = 1, no
    all-reduce at t = 1) is left out of the sum: adding its zeros would give the same bits (for
    finite token counts; an infinite one would have made the left-out term 0·inf = NaN)."""
    k = c.stage.shaped(ndim)
    terms = []
    if np.any(k.allreduces):
        terms.append(k.allreduces * (k.ring_factor * tokens / k.link_bytes_s + k.allreduce_latency_s))
    if np.any(k.alltoalls):
        terms.append(k.alltoalls * (k.a2a_factor * tokens / k.link_bytes_s + k.alltoall_latency_s))
    if np.any(k.hop_on) or np.any(k.hop_s_fixed):
        terms.append(k.hop_on * tokens / k.link_bytes_s + k.hop_s_fixed)
    if not terms:
        return np.zeros(np.broadcast_shapes(np.shape(tokens), np.shape(k.link_bytes_s)))
    out = terms[0]
    for term in terms[1:]:
        out = out + term
    return out


@dataclass(frozen=True)
class StepParts:
    """Components of one decode step (seconds): per pipeline stage the per-operator times
    (``gemm_s``, ``attn_s`` decode attention, ``prefill_attn_s``, ``comm_s`` incl. the hop),
    the host time of the step, and the full step time; ``mem_s``/``compute_s`` are the memory
    and compute sides of the stage summed over the operators (for the roofline view)."""

    gemm_s: np.ndarray
    attn_s: np.ndarray
    prefill_attn_s: np.ndarray
    comm_s: np.ndarray
    host_s: np.ndarray
    step_s: np.ndarray
    mem_s: np.ndarray
    compute_s: np.ndarray


def _decode_step(c: Configs, batch, context_tokens, prefill_tokens, prefill_context_tokens,
                 busiest_prefill_tokens=None, sides: bool = True) -> StepParts:
    """``decode_parts``, each part at its own broadcast shape: terms that do not depend on the
    prefill tokens stay as small as the batch (N, 1, ...), so (N, K, ...) prefill grids cost less.

    ``busiest_prefill_tokens`` (default ``prefill_tokens``): e × the prefill tokens of the busiest
    attention data-parallel rank. The ranks run each layer in lockstep (the MoE collectives join
    them), so that rank sets the dense GEMMs, attention and communication of the step, while the
    routed experts see every rank's tokens (``prefill_tokens``).

    ``sides=False`` leaves out the roofline sides ``mem_s`` and ``compute_s`` (None), which a step
    time does not need; operations whose operand is exactly neutral for every configuration
    (division and product by p = 1, the verify tokens of a step without speculative decoding) are
    skipped: the same bits, fewer passes over the (N, K, ...) grids."""
    ndim, (b, ctx, npre, pctx) = _prep(c, batch, context_tokens, prefill_tokens, prefill_context_tokens)
    k = c.stage.shaped(ndim)
    n = c.smooth_max_exponent
    pp1 = bool(np.all(k.pp == 1.0))  # x / 1 and 1 · x are x itself
    micro_b = b if pp1 else b / k.pp
    busiest = npre if busiest_prefill_tokens is None else np.asarray(busiest_prefill_tokens, dtype=float)
    micro_n = busiest if pp1 else busiest / k.pp
    tokens = micro_b + micro_n
    spec = c.speculative
    verify = micro_b * spec.draft_tokens if spec is not None else 0.0  # draft tokens checked in the same pass
    if spec is not None:
        tokens = tokens + verify
    expert_tokens = None if busiest_prefill_tokens is None else micro_b + (npre if pp1 else npre / k.pp) + verify
    gemm, weights_mem, gemm_comp = _gemm_s(c, tokens, ndim, expert_tokens, sides)
    lm_head = (micro_b + verify) * k.lm_head_s_per_sequence
    gemm_s = gemm + lm_head
    seq_ctx = effective_context(c.model, ctx)
    decode_ctx = micro_b * seq_ctx  # context tokens the decoding micro-batch attends to
    kv_mem = decode_ctx * k.kv_read_per_ctx_token / k.memory_bytes_s  # verify tokens reuse the same KV reads
    attn_comp = (decode_ctx + verify * seq_ctx) * k.attn_s_per_ctx_token
    attn_s = smooth_max(kv_mem, attn_comp, n)
    prefill_attn_s = micro_n * effective_context(c.model, pctx) * k.prefill_attn_s_per_ctx_token
    if spec is not None and (spec.layer_fraction > 0 or spec.prefill_active_params > 0):
        draft_gemm, draft_attn = draft_prefill_s(c, micro_n, prefill_attn_s, ndim)
        gemm_s, prefill_attn_s = gemm_s + draft_gemm, prefill_attn_s + draft_attn
        if sides:
            gemm_comp = gemm_comp + draft_gemm
    comm_s = _comm_s(c, tokens, ndim)
    host_s = k.step_overhead_s + b * k.sequence_overhead_s
    stage_s = gemm_s + attn_s + prefill_attn_s + comm_s
    step_s = (stage_s if pp1 else k.pp * stage_s) + host_s
    if spec is not None:
        step_s = step_s + draft_s(c, b, ctx, ndim)
    if not sides:
        return StepParts(gemm_s, attn_s, prefill_attn_s, comm_s, host_s, step_s, None, None)  # type: ignore[arg-type]
    return StepParts(gemm_s, attn_s, prefill_attn_s, comm_s, host_s, step_s,
                     weights_mem + kv_mem, gemm_comp + lm_head + attn_comp + prefill_attn_s)


def draft_s(c: Configs, batch, context_tokens, ndim: int = 1) -> np.ndarray:
    """Time (s) of the k draft passes of a speculative step (0 without ``c.speculative``).

    One pass = the per-operator rooflines of the step for the whole batch b (one token per
    sequence), scaled to the share of the target the draft reads: ``f·(t_gemm(b) + t_attn(b, c)·(1 + r_x/f))``
    plus the extra draft weights ``max(P_x·β/(t·p)/bw, 2·P_a·b/(t·p)/flops)``, with f the layer
    fraction, r_x the draft's KV ratio, β the stored bytes per parameter and P_x, P_a the extra
    (LM head or draft-model) parameters read and computed (``optimizer.models.speculative``).
    """
    spec = c.speculative
    if spec is None:
        return np.zeros(np.shape(batch))
    k = c.stage.shaped(ndim)
    n = c.smooth_max_exponent
    b = np.maximum(np.asarray(batch, dtype=float), 1.0)
    micro_b = b / k.pp
    gemm, _, _ = _gemm_s(c, micro_b, ndim, sides=False)
    decode_ctx = micro_b * effective_context(c.model, context_tokens)
    kv_share = spec.layer_fraction + spec.extra_kv_ratio
    attn = smooth_max(decode_ctx * k.kv_read_per_ctx_token * kv_share / k.memory_bytes_s,
                      decode_ctx * k.attn_s_per_ctx_token * kv_share, n)
    bytes_per_param = k.weight_bytes_per_gpu * k.tp_pp / (c.model.total_params_b * 1e9)
    extra = smooth_max(spec.extra_weight_params * bytes_per_param / k.tp_pp / k.memory_bytes_s,
                       2.0 * spec.extra_active_params * micro_b / k.tp_pp / k.gemm_flops_s, n)
    return spec.draft_tokens * k.pp * (spec.layer_fraction * gemm + attn + extra)


def draft_prefill_s(c: Configs, prefill_tokens, prefill_attn_s, ndim: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(GEMM, attention) time (s) per pipeline stage the draft adds to a step that prefills
    ``prefill_tokens`` n prompt tokens per stage (0 without ``c.speculative``): the draft holds the
    prompt's KV too, so it prefills it (``optimizer.models.speculative``)::

        GEMM = n·(f·(φ_dense/F_gemm + φ_expert/F_moe) + 2·P_p/G/F_gemm),   attention = r_a·t_prefill_attn

    with f the target's layer fraction (MTP/EAGLE: one layer), P_p the draft model's body
    parameters per token, r_a its prefill attention FLOPs per context token over the target's;
    FLOPs only (the step's draft passes read the draft's weights, ``draft_s``).
    """
    spec = c.speculative
    n = np.asarray(prefill_tokens, dtype=float)
    if spec is None:
        return np.zeros(np.shape(n)), np.zeros(np.shape(prefill_attn_s))
    k = c.stage.shaped(ndim)
    per_token = 2.0 * spec.prefill_active_params / k.gpus / k.gemm_flops_s
    if spec.layer_fraction > 0:
        layer = k.gemm_flops_per_token / k.gemm_flops_s
        if c.model.is_moe:
            layer = layer + k.expert_flops_per_token / k.moe_flops_s
        per_token = per_token + spec.layer_fraction * layer
    return n * per_token, spec.prefill_attn_ratio * prefill_attn_s


def decode_parts(c: Configs, batch, context_tokens, prefill_tokens=0.0,
                 prefill_context_tokens=0.0) -> StepParts:
    """Per-operator stage times and step time of a decode step (see module docstring for the
    formulas), all of the same (broadcast) shape.

    ``prefill_context_tokens`` is the mean context (attention span) of the prefill tokens;
    a prompt of length L processed whole has mean span L/2.
    """
    parts = _decode_step(c, batch, context_tokens, prefill_tokens, prefill_context_tokens)
    shape = parts.step_s.shape
    return StepParts(*(np.broadcast_to(getattr(parts, f.name), shape) for f in fields(parts)))


def decode_step_s(c: Configs, batch, context_tokens, prefill_tokens=0.0,
                  prefill_context_tokens=0.0) -> np.ndarray:
    """Wall time (s) of one scheduler step in which each of ``batch`` running sequences
    (mean context ``context_tokens``) advances one token and ``prefill_tokens`` prompt
    tokens are processed (chunked prefill).

    ``= pp · (t_gemm + t_attn + t_prefill_attn + t_comm) + t_host`` with per-stage
    micro-batches of batch/pp (see module docstring). Broadcasts against (N,) or (N, K)
    inputs; NaN where the device cannot compute in the precision.
    """
    return _decode_step(c, batch, context_tokens, prefill_tokens, prefill_context_tokens, sides=False).step_s


def tpot_s(c: Configs, batch, context_tokens) -> np.ndarray:
    """Time per output token (s) of every sequence at ``batch`` = one decode step."""
    return decode_step_s(c, batch, context_tokens)


def bound_kind(c: Configs, batch, context_tokens) -> np.ndarray:
    """'memory', 'compute' or 'communication': the largest side of a decode stage."""
    parts = decode_parts(c, batch, context_tokens)
    mem, comp, comm = np.broadcast_arrays(parts.mem_s, parts.compute_s, parts.comm_s)
    out = np.where(comp > mem, "compute", "memory").astype(object)
    out = np.where(comm > np.maximum(mem, comp), "communication", out)
    return out.astype(str)


def prefill_s(c: Configs, prompt_tokens, batch_prompts=1) -> np.ndarray:
    """Time (s) to prefill ``batch_prompts`` prompts of ``prompt_tokens`` tokens each, in one pass.

    The GEMMs (smooth max of weight reads and 2·active·L·n FLOPs) plus causal attention
    (span L/2 per token, 4·layers·heads·head_dim FLOPs per element) plus communication, through
    the pp stages in series, plus the fixed step overhead; the prompts of one pass run on one
    attention rank (ep ranks do not split one prompt).
    """
    ndim, (L, nb) = _prep(c, prompt_tokens, batch_prompts)
    k = c.stage.shaped(ndim)
    tokens = L * nb
    # the prompt occupies one attention rank: its per-GPU work is that of e·T tokens spread over the group
    rank_tokens = tokens * k.ep
    gemm = _gemm_s(c, rank_tokens, ndim, sides=False)[0]  # the lm_head of the last token is neglected, as in a step
    attn_s = rank_tokens * effective_context(c.model, L / 2.0) * k.prefill_attn_s_per_ctx_token
    return k.pp * (gemm + attn_s + _comm_s(c, tokens, ndim)) + k.step_overhead_s


def max_sequences(c: Configs, tokens_per_sequence) -> np.ndarray:
    """Sequences of ``tokens_per_sequence`` tokens whose KV fits in the replica (>= 0): e · floor(capacity/e /
    sequence) over its e attention data-parallel ranks, each holding whole sequences of its own (an ep8 replica
    whose ranks each hold a quarter of one sequence holds none, not floor(8/4) = 2)."""
    ndim, (tok,) = _prep(c, tokens_per_sequence)
    e = column(c.ep.astype(float), ndim)
    per_rank = column(c.kv_capacity_tokens, ndim) / e
    return (e * np.floor(per_rank / np.maximum(effective_context(c.model, tok), 1.0))).astype(np.int64)


def tpot_bound_ms(c: Configs) -> np.ndarray:
    """Pure bandwidth bound on time per token at batch 1 (ms), no efficiency factor.

    = weight bytes each GPU reads per token / its peak bandwidth, summed over the pp stages
    a token passes in series: pp · (W/(t·pp)) / bw = W/(t·bw); W counts the body and the lm_head
    (embedding bytes), MoE the dense part and the k experts one token touches.
    70e9 params · 2 B / 2.0 TB/s = 70 ms.
    """
    w = _weight_bytes_read_per_gpu(c, np.ones(len(c)), 1)
    return c.pp * w / c.memory_bandwidth_bytes_s * 1e3


def compute_bound_tokens_s(c: Configs) -> np.ndarray:
    """Decode throughput roof (tokens/s) when compute-bound: eff·peak·G / (2·active)."""
    return c.peak_flops * c.compute_efficiency * c.gpus / (2.0 * c.model.active_params_b * 1e9)


# ---------------------------------------------------------------------------------------
# Offline max-throughput (all requests at once), as trtllm-bench / vLLM throughput measure


def offline_batch(c: Configs, input_tokens, output_tokens) -> np.ndarray:
    """Running sequences in an offline run: min(scheduler cap ``batch_cap``, sequences whose KV fits).

    A sequence reserves KV for input + f·output tokens (f = ``kv_reserved_output_fraction``),
    windowed layers for at most their window (``effective_context``).
    """
    ndim, (inp, out) = _prep(c, input_tokens, output_tokens)
    cap = column(c.kv_capacity_tokens, ndim)
    fit = np.floor(cap / np.maximum(effective_context(c.model, inp + c.kv_reserved_output_fraction * out), 1.0))
    return np.minimum(fit, column(c.batch_cap, ndim))


def busiest_rank_prompts(prompts_per_rank, ranks) -> tuple[np.ndarray, np.ndarray]:
    """(P0, n1) of the prompts started in one step on the busiest of e attention ranks, each rank
    starting N_r ~ Poisson(λ) prompts: P0 = P(max_r N_r = 0) = e^(−λ·e), and
    n1 = E[max_r N_r | max ≥ 1] = Σ_{n≥0} (1 − F(n)^e) / (1 − P0), F the Poisson CDF.
    One rank (e = 1): n1 = λ/(1 − e^(−λ)); λ 0.5, e 8: P0 = e^(−4) = 0.0183, E[max] = 1.637."""
    lam = np.asarray(prompts_per_rank, dtype=float)
    e = np.broadcast_to(np.asarray(ranks, dtype=float), lam.shape)
    e_max = lam.copy()  # one rank: E[N] = λ
    many = e > 1.0
    if np.any(many):  # the CDF sum, only where several ranks race (kmax covers λ + 8 sd)
        flat, ef = lam[many][:, None], e[many][:, None]
        top = float(np.max(flat))
        n = np.arange(int(np.ceil(top + 8.0 * np.sqrt(top) + 8.0)), dtype=float)[None, :]
        pmf = np.exp(-flat) * np.cumprod(np.where(n > 0, flat / np.maximum(n, 1.0), 1.0), axis=1)
        cdf = np.minimum(np.cumsum(pmf, axis=1), 1.0)
        e_max[many] = np.sum(1.0 - cdf**ef, axis=1)
    p0 = np.exp(-lam * e)
    return p0, np.where(p0 < 1.0, e_max / np.maximum(1.0 - p0, 1e-300), 1.0)


def offline_step_s(c: Configs, batch, input_tokens, output_tokens) -> np.ndarray:
    """Mean step time (s) of the offline steady state: ``batch`` sequences decode (mean context
    input + output/2) and prompts start whole, not spread over the steps (a step is convex in its
    tokens: flat while memory-bound, linear once compute-bound, so the mean of the steps exceeds
    the step of the mean tokens). Each of e attention ranks starts N_r ~ Poisson(λ) prompts per step,
    λ = (b/e)/output (every sequence is replaced after its output tokens); the ranks run in lockstep,
    so a step costs ``P0·t(b, 0) + (1 − P0)·t(b, mean n, busiest e·n1·input)``
    (``busiest_rank_prompts``; the routed experts see the mean b·input/output tokens less the
    P0 share, the dense part and attention the busiest rank's e·n1·input; attention span input/2).
    A scheduler that balances prompts over the ranks (TensorRT-LLM ``attention_dp_config
    enable_balance``) is not modelled: there the busiest rank is the mean one.

    With ``CalibrationParams.offline_prefill_chunk_tokens`` = M a prompt is prefilled in chunks of
    u = min(input, M) tokens, one chunk per rank and step at most (chunked prefill under the engine's
    per-rank token budget): the unit that starts is a chunk, λ = (b/e)·(input/u)/output chunks per rank
    and step, and the busiest rank's tokens are e·n1·u (a 32k prompt under M = 8192: 4 chunks)."""
    ndim, (b, inp, out) = _prep(c, batch, input_tokens, output_tokens)
    e = column(c.ep.astype(float), ndim)
    if c.offline_prefill_chunk_tokens is None:  # whole prompts: one unit per prompt (and no 0/0 at input 0)
        unit, starts = inp, b / e / np.maximum(out, 1.0)
    else:
        unit = np.minimum(inp, c.offline_prefill_chunk_tokens)
        starts = b / e * (inp / np.maximum(unit, 1e-300)) / np.maximum(out, 1.0)
    p0, n1 = busiest_rank_prompts(starts, e)
    ctx = inp + out / 2.0
    idle = decode_step_s(c, b, ctx)
    mean_tokens = b * inp / np.maximum(out, 1.0) / np.maximum(1.0 - p0, 1e-300)  # in a step that has prompts
    busy = _decode_step(c, b, ctx, mean_tokens, inp / 2.0, e * n1 * unit, sides=False).step_s
    return p0 * idle + (1.0 - p0) * busy


def offline_throughput_tokens_s(c: Configs, input_tokens, output_tokens) -> tuple[np.ndarray, np.ndarray]:
    """(batch, output tokens/s of the replica) when all requests arrive at once.

    Steady state of continuous batching with fixed lengths: ``batch`` sequences decode (mean
    context input + output/2) and each step also prefills input·batch/output prompt tokens
    (every sequence's prompt amortised over its output tokens; attention span input/2), or,
    with ``CalibrationParams.offline_whole_prompts``, whole prompts start as sequences finish
    (``offline_step_s``). Throughput = batch / (mean) step time. Zero where not even one
    sequence fits.
    """
    ndim, (inp, out) = _prep(c, input_tokens, output_tokens)
    b = offline_batch(c, inp, out)
    bb = np.maximum(b, 1.0)
    if c.offline_whole_prompts:
        step = offline_step_s(c, bb, inp, out)
    else:
        step = decode_step_s(c, bb, inp + out / 2.0, bb * inp / np.maximum(out, 1.0), inp / 2.0)
    tput = np.where(b >= 1, bb / step, 0.0)
    return b, tput


# ---------------------------------------------------------------------------------------
# One configuration as a plain dict (what `gpuplan estimate --json` prints)


def finite_round(x, digits: int = 4) -> float | None:
    """``x`` rounded for JSON output, or None when it is NaN or infinite (JSON has neither)."""
    x = float(x)
    return round(x, digits) if np.isfinite(x) else None
