"""Parameter counts from a decoder's shapes (the ones a Hugging Face ``config.json`` states).

Shared by the catalog (``Model.architecture_params``, a consistency check of the shipped
shapes against each model's published total) and the ``config.json`` reader. Counts the
matrices; norms, biases, attention sinks and vision towers are left out (each well under
2 % of the models in the catalog).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParamCounts:
    """Parameters (not billions) of a decoder, split the way serving reads them."""

    embedding: float  # input embedding (+ untied LM head): vocab · hidden · (1 if tied else 2)
    attention: float  # all layers
    dense_ffn: float  # dense (non-MoE) layers
    moe: float  # MoE layers: routed + shared experts + router
    inactive_experts: float  # routed experts a token does not use: moe_layers · (E − k) · expert FFN

    @property
    def total(self) -> float:
        """Every parameter: embedding + attention + dense FFN + MoE."""
        return self.embedding + self.attention + self.dense_ffn + self.moe

    @property
    def active(self) -> float:
        """Parameters one token uses: total − inactive routed experts (embedding counted)."""
        return self.total - self.inactive_experts


def attention_params(*, hidden: int, heads: int, kv_heads: int, head_dim: int, kv_lora_rank: int = 0,
                     q_lora_rank: int = 0, qk_rope_head_dim: int = 0, qk_nope_head_dim: int | None = None,
                     v_head_dim: int | None = None) -> float:
    """Attention weights of one layer.

    GQA/MHA: q and o = hidden · heads · head_dim each, k and v = hidden · kv_heads · head_dim each.
    MLA (kv_lora_rank > 0): q = hidden·q_lora + q_lora·heads·(nope + rope) (or hidden·heads·(nope + rope)
    without a query low rank), kv_a = hidden·(kv_lora + rope), kv_b = kv_lora·heads·(nope + v),
    o = heads·v·hidden; nope and v default to head_dim.
    """
    if not kv_lora_rank:
        return 2.0 * hidden * heads * head_dim + 2.0 * hidden * kv_heads * head_dim
    nope = qk_nope_head_dim or head_dim
    v_dim = v_head_dim or head_dim
    qk = heads * (nope + qk_rope_head_dim)
    q_proj = hidden * q_lora_rank + q_lora_rank * qk if q_lora_rank else hidden * qk
    return float(q_proj + hidden * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank * heads * (nope + v_dim)
                 + heads * v_dim * hidden)


def parameter_counts(*, layers: int, hidden: int, vocab: int, attention_per_layer: float, intermediate: int,
                     tied_embeddings: bool = False, experts: int = 0, experts_per_token: int = 0,
                     moe_layers: int = 0, moe_intermediate: int = 0, shared_intermediate: int = 0) -> ParamCounts:
    """Parameters of a decoder: embedding + layers · attention + dense FFN layers + MoE layers.

    A SwiGLU FFN of width f holds 3 · hidden · f; an MoE layer holds experts · 3·hidden·moe_f
    + 3·hidden·shared_f (shared experts, always on) + hidden · experts (router).
    """
    expert_ffn = 3.0 * hidden * moe_intermediate
    moe_layers = moe_layers if experts else 0
    moe_layer = experts * expert_ffn + 3.0 * hidden * shared_intermediate + hidden * experts
    return ParamCounts(
        embedding=float(vocab) * hidden * (1 if tied_embeddings else 2),
        attention=layers * attention_per_layer,
        dense_ffn=(layers - moe_layers) * 3.0 * hidden * intermediate,
        moe=moe_layers * moe_layer,
        inactive_experts=moe_layers * max(experts - experts_per_token, 0) * expert_ffn,
    )
