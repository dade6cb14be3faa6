"""Routing arithmetic of a mixture-of-experts layer: how many distinct experts a step's tokens
touch (the expert bytes read), how many other expert-parallel ranks one token is sent to and
with how many bytes per element (the dispatch and combine bytes).

Pure: no I/O. Used by ``configs.stage_constants`` and the step rooflines of ``optimizer.models.perf``.
"""

from __future__ import annotations

import numpy as np


def experts_touched(num_experts: int, experts_per_token: int, tokens) -> np.ndarray:
    """Expected distinct experts per MoE layer for ``tokens`` routed tokens: E·(1 − (1 − k/E)^B)."""
    tokens = np.asarray(tokens, dtype=float)
    if num_experts <= 0:
        return np.zeros_like(tokens)
    return num_experts * (1.0 - (1.0 - experts_per_token / num_experts) ** np.maximum(tokens, 0.0))


def remote_ranks_per_token(num_experts: int, experts_per_token: int, ep) -> np.ndarray:
    """Expected other expert-parallel ranks one token is dispatched to (and combined from):
    ``(e − 1)·(1 − P0)`` with ``P0 = C(E − E/e, k)/C(E, k) = Π_{i<k} (E − E/e − i)/(E − i)`` the
    chance that none of the token's k distinct experts sits on a given rank (E/e experts each).

    The dispatch sends a token once to every rank that holds at least one of its experts, not
    once per expert (DeepEP ``get_dispatch_layout`` -> ``is_token_in_rank``,
    https://github.com/deepseek-ai/DeepEP, 2025-02; the combine returns one partial sum per
    rank), so it is at most e − 1 whatever k is. Qwen3-235B (E 128, k 8) at e 4:
    P0 = Π (96 − i)/(128 − i) = 0.0927, 3·0.9073 = 2.72 copies, where one copy per expert is
    k·(e − 1)/e = 6; at k = 1 both are (e − 1)/e. 0 at e = 1 or for a dense model.
    """
    e = np.asarray(ep, dtype=float)
    if num_experts <= 0 or experts_per_token <= 0:
        return np.zeros_like(e)
    per_rank = num_experts / e
    none_here = np.ones_like(e)
    for i in range(experts_per_token):
        none_here = none_here * np.clip(num_experts - per_rank - i, 0.0, None) / (num_experts - i)
    return (e - 1.0) * (1.0 - none_here)


COMBINE_BYTES_PER_ELEMENT = 2.0  # the experts' outputs return in BF16 (reduce-scatter / combine of partial sums)


def ranks_receiving_token(num_experts: int, experts_per_token: int, ep, allgather: bool) -> np.ndarray:
    """Other expert-parallel ranks one token's hidden state is sent to (and its partial output
    returned from): ``e − 1`` for an all-gather dispatch (every rank receives every token, whatever
    the routing: TensorRT-LLM's attention-DP MoE without its all-to-all path), else
    ``remote_ranks_per_token`` (a dispatch to the ranks holding one of its experts). 0 at e = 1.
    DeepSeek-R1 (E 256, k 8) at e 8: all-gather 7, per-rank dispatch 7·(1 − C(224, 8)/C(256, 8)) = 4.6."""
    if not allgather:
        return remote_ranks_per_token(num_experts, experts_per_token, ep)
    e = np.asarray(ep, dtype=float)
    if num_experts <= 0 or experts_per_token <= 0:
        return np.zeros_like(e)
    return e - 1.0


def dispatch_bytes_per_element(compute_dtype: str, weight_only: bool, weight_bytes_per_param: float) -> float:
    """Bytes per hidden-state element of an all-gather dispatch: the activations are quantized to the
    experts' GEMM input format before the gather, so FP8/INT8 GEMMs send 1 byte, FP4 GEMMs the block
    format's bytes (NVFP4: E2M1 + one E4M3 scale per 16 = 4.5 bits = 0.5625 B, the same format as
    the weights: ``weight_bytes_per_param``), 16-bit and weight-only (W4A16) GEMMs 2 bytes.
    TensorRT-LLM ``CutlassFusedMoE.forward_chunk`` quantizes the input (FP8 per-tensor, NVFP4) and
    then all-gathers it with the routing with attention data parallelism; the output comes back by a
    reduce-scatter in BF16 (``COMBINE_BYTES_PER_ELEMENT``)
    (https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py, 2025-09;
    recalled from that source, not re-read here: the machine had no network). DeepSeek's block-scaled FP8
    quantizes inside the MoE kernel, after the gather, so its dispatch is really 16 bit: not distinguished here."""
    if weight_only:
        return 2.0
    if compute_dtype in ("fp8", "int8"):
        return 1.0
    if compute_dtype == "fp4":
        return float(weight_bytes_per_param)
    return 2.0
