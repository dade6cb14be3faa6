"""Speculative decoding and multi-token prediction (MTP): the cost of a verify step and its yield.

A step of speculative decoding (Leviathan et al., arXiv 2211.17192; EAGLE, arXiv 2401.15077;
DeepSeek-V3 MTP, arXiv 2412.19437 §2.2) drafts k tokens per running sequence and verifies
them in one pass of the target, which then emits the accepted prefix plus one token of its
own. With every draft token accepted independently with probability a (the chain stops at
the first rejection), the tokens emitted per sequence per step are

    A(k, a) = 1 + a + a² + … + a^k = (1 − a^(k+1)) / (1 − a)      (k + 1 when a = 1).

Cost of the step, for a batch of b sequences at mean context c (added to the ordinary decode
step by :func:`optimizer.models.perf.decode_step_s` when ``Configs.speculative`` is set):

- verify: the target processes b·(k+1) tokens instead of b — the same weight and KV bytes
  (read once per step), k+1 times the GEMM FLOPs and attention queries, a larger all-reduce;
- draft: k sequential passes, each a roofline over the replica's t·p GPUs::

      t_pass = max((f·W(b) + W_x)/(t·p)/bw + b·c·(f·kv + kv_x)/(kv_gpus·bw),
                   2·(f·active + P_x)·b/(t·p)/flops)

  MTP and EAGLE: one extra layer of the target (f = 1/layers of its weights, KV and active
  parameters) plus the LM head (W_x = vocab·hidden weights, P_x = vocab·hidden FLOP/2 per token);
  a separate draft model: f = 0 and its own weights, active parameters and KV per token.

So at batch 1 (memory-bound, verify ≈ one ordinary step) the speed-up approaches A(k, a) less
the draft's share; as the batch grows the verify step turns compute-bound and costs up to
(k+1)× an ordinary step, so the gain shrinks and can turn into a loss (``acceptance 0`` never
helps: A = 1 for a strictly larger step).

Prefill: the draft must hold the prompt's KV too, so it prefills every prompt token the
target prefills (:func:`optimizer.models.perf.draft_prefill_s`, added to any step that carries
prefill tokens n at mean span s̄)::

    t_draft_prefill = p·( n·(f·(φ_dense/F_gemm + φ_expert/F_moe) + 2·P_p/G/F_gemm)
                          + r_a·n·s̄·F_pre/G/(peak·e) )

(φ the target's GEMM FLOPs per token per GPU, F the achieved FLOP/s per GPU, G = e·t·p).

MTP and EAGLE: one extra layer of the target (f = 1/layers of its GEMMs, r_a = f of its prefill
attention; the LM head runs on the last token only, P_p = 0); a separate draft model: f = 0,
P_p its active parameters less its embedding and LM head (as the target's GEMMs count them)
and r_a = its prefill attention FLOPs per context token / the target's (Llama-3.1-8B drafting
for Llama-3.1-70B: (8.03 − 1.05)/(70.6 − 2.10) = 10.2 % more GEMM FLOPs, 32·32/(80·64) = 20 %
more attention). FLOPs only: the step's draft passes already read the draft's weights.

Memory: a draft model's weights and KV (and the MTP/EAGLE layer's) are held next to the
target's, which lowers the KV capacity (:func:`with_speculative`).

Pure: no I/O. Units: bytes, seconds, FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.schema import Model
from optimizer.models.attention import attention_flops_per_context_token


def accepted_tokens_per_step(tokens: int, acceptance_rate: float) -> float:
    """A(k, a) = (1 − a^(k+1))/(1 − a): tokens a sequence emits per verify step (k + 1 at a = 1)."""
    k, a = int(tokens), float(acceptance_rate)
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


@dataclass(frozen=True)
class SpeculativeCost:
    """What a speculative step adds to an ordinary decode step, for one target model.

    Scalars, the same for every configuration of the target (bytes follow each
    configuration's weight format and KV dtype): ``draft_tokens`` k; ``layer_fraction`` f of
    the target's weights/KV/active params read per draft pass (MTP, EAGLE);
    ``extra_weight_params`` and ``extra_active_params`` read and computed per pass on top
    (the LM head, or a whole draft model); ``extra_kv_ratio`` = the draft model's KV bytes
    per token / the target's; ``held_weight_params`` and ``held_kv_ratio``: the memory the
    draft occupies next to the target; ``tokens_per_step`` = A(k, a); ``prefill_active_params``
    P_p computed per prompt token on top of f of the target's when the draft prefills the prompt
    and ``prefill_attn_ratio`` r_a, its prefill attention FLOPs per context token / the target's.
    """

    method: str
    draft_tokens: int
    acceptance_rate: float
    tokens_per_step: float
    layer_fraction: float
    extra_weight_params: float
    extra_active_params: float
    extra_kv_ratio: float
    held_weight_params: float
    held_kv_ratio: float
    prefill_active_params: float = 0.0
    prefill_attn_ratio: float = 0.0


def speculative_cost(method: str, tokens: int, acceptance_rate: float, target: Model,
                     draft: Model | None = None) -> SpeculativeCost:
    """The :class:`SpeculativeCost` of ``method`` with k = ``tokens`` on ``target``.

    MTP/EAGLE: f = 1/layers, plus the LM head (vocab·hidden params, shared with the target
    so not held twice); the draft layer holds f of the target's weights and KV per token.
    Draft model: its total params read per pass (active params for the FLOPs), its own KV
    per token, all held in memory. Prefill of the prompt: MTP/EAGLE one layer (f of the target's
    GEMMs and prefill attention, no LM head per token); a draft model its active params per token
    and r_a = its prefill attention FLOPs per context token / the target's.
    """
    a_tok = accepted_tokens_per_step(tokens, acceptance_rate)
    if method == "draft":
        if draft is None:
            raise ValueError("method 'draft' needs a draft model")
        ratio = draft.kv_bytes_per_token(1.0) / target.kv_bytes_per_token(1.0)
        params = draft.total_params_b * 1e9
        attn = attention_flops_per_context_token(draft) / attention_flops_per_context_token(target)
        return SpeculativeCost(method, tokens, acceptance_rate, a_tok, 0.0, params, draft.active_params_b * 1e9,
                               ratio, params, ratio,
                               prefill_active_params=draft.active_params_b * 1e9 - draft.embedding_params,
                               prefill_attn_ratio=attn)
    f = 1.0 / target.num_layers
    head = float(target.vocab_size) * target.hidden_size
    return SpeculativeCost(method, tokens, acceptance_rate, a_tok, f, head, head, 0.0,
                           f * target.total_params_b * 1e9, f, prefill_active_params=0.0, prefill_attn_ratio=f)
