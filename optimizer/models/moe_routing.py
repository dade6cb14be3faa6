"""Routing arithmetic of a mixture-of-experts layer: how many distinct experts a step's tokens
touch (the expert bytes read) and how many other expert-parallel ranks one token is sent to
(the all-to-all bytes).

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
