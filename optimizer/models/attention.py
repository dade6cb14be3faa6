"""Attention arithmetic of one model: FLOPs per context token (prefill and decode kernels) and
the context a sliding-window model attends.

Pure: no I/O. Used by ``configs.stage_constants`` (the per-stage attention times), by the step
rooflines of ``optimizer.models.perf`` and by the simulator.
"""

from __future__ import annotations

from catalog.schema import Model

ATTENTION_FLOPS_PER_QK_ELEMENT = 4.0  # QK^T and A·V: 2 matmuls x 2 FLOPs per multiply-add


def effective_context(model: Model, context_tokens):
    """Context tokens attended (and cached) per sequence, averaged over the layers: windowed
    layers see at most the window (``Model.effective_kv_tokens``: (full·c + windowed·min(c, W))/layers)."""
    return model.effective_kv_tokens(context_tokens)


def attention_flops_per_context_token(model: Model) -> float:
    """FLOPs of attention for one query token per token of context, all layers, as a prefill
    (context) kernel computes it: ``2·layers·heads·(d_qk + d_v)`` = 4·layers·heads·head_dim for
    MHA/GQA. MLA runs its prefill un-absorbed, every head with its own keys: d_qk = head_dim +
    qk_rope_head_dim (DeepSeek-V3: 128 + 64), d_v = head_dim (DeepSeek-V2, arXiv 2405.04434, §2.1)."""
    if model.is_mla:
        return 2.0 * model.num_layers * model.num_attention_heads * (2 * model.head_dim + model.qk_rope_head_dim)
    return ATTENTION_FLOPS_PER_QK_ELEMENT * model.num_layers * model.num_attention_heads * model.head_dim


def decode_attention_flops_per_context_token(model: Model) -> float:
    """FLOPs of decode attention for one query token per token of context, all layers.

    MHA/GQA as in prefill (4·layers·heads·head_dim). MLA decodes *absorbed* (W_UK folded into the
    query, W_UV into the output: DeepSeek-V2 §2.1.2): every head attends the shared latent, keys
    of kv_lora_rank + qk_rope_head_dim and values of kv_lora_rank, so
    ``2·layers·heads·(2·kv_lora_rank + qk_rope_head_dim)`` — DeepSeek-V3: 2·61·128·1088 =
    16.99 MFLOP, 4.25× the 4·61·128·128 a per-head layout would give (FlashMLA's decode kernel
    takes K of width 576 and V of width 512: https://github.com/deepseek-ai/FlashMLA, 2025-02).
    """
    if model.is_mla:
        return 2.0 * model.num_layers * model.num_attention_heads * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
    return attention_flops_per_context_token(model)
