"""The step(s) that carry a prompt into its first token: the time ``own`` of those steps with J other
prompts riding along (``carrying_step_sums``, the TTFT's T_next in ``latency._ttft_moments``).

Formulas: see :mod:`optimizer.models.serving` (the tails part of its docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optimizer.models import perf
from optimizer.models.configs import Configs
from optimizer.models.serving.fixed_point import State
from optimizer.models.serving.rows import RowLengths
from optimizer.models.serving.state import (
    GRID_BLOCK_ELEMENTS,
    group_k_max,
    poisson_pmf,
    prompts_k_max,
)


def _prompt_chunks_extra_s(c: Configs, b: np.ndarray, ctx: np.ndarray, grid: _CarryGrid, group: np.ndarray,
                           d: np.ndarray) -> np.ndarray:
    """Σ_chunks [t(b, c̄, n_j, min(j·C + n_j/2, L)) − D(b)] for the n = L + J·E[L] tokens of ``grid`` cut into
    chunks of C, each row at its length set ``group``.

    ``n = K·C + r``: K full chunks and a partial one of r tokens. Full chunk k attends to
    ``min(k·C + C/2, L)``, which is L from ``k_L = ceil((L − C/2)/C)`` on, so the K full
    chunks cost a cumulative sum over k < k_max (k_max = max k_L) plus (K − k_max)⁺ times
    the chunk at span L: two step-time evaluations instead of one per chunk, all in one call.
    Shapes: b, ctx (N, 1); d (N, 1, 1); the result (N, QL, J). Every chunk also attends to the cached
    tokens (prefix caching, ``span_offset``). k_max is over every row: a row whose own is smaller has its
    chunks from its own k_L on at span L, the same step time.
    """
    # one step-time evaluation of every chunk, (N, columns): full chunk k at span k·C + C/2 (K), at
    # span L (QL) — min(k·C + C/2, L) is one of the two —, the partial chunks (QL·J)
    t = perf.decode_step_s(c, b, ctx, grid.tokens[group], grid.spans[group])
    k_max = grid.k_max
    n, q_l, n_j = len(group), grid.chunks.shape[1], grid.chunks.shape[2]
    t_k, t_l, t_rem = t[:, :k_max + 1], t[:, k_max + 1:k_max + 1 + q_l], t[:, k_max + 1 + q_l:].reshape(n, q_l, n_j)
    per_chunk = np.where(grid.own_span[group], t_k[:, None, :], t_l[:, :, None]) - d
    cum = np.concatenate([np.zeros(per_chunk.shape[:-1] + (1,)), np.cumsum(per_chunk, axis=-1)], axis=-1)
    total = np.take_along_axis(cum, grid.full_before[group], axis=-1) + grid.beyond[group] * per_chunk[..., -1:]
    return total + np.where(grid.partial[group], t_rem - d, 0.0)


@dataclass(frozen=True)
class _CarryGrid:
    """What the carrying-step grid of J = 0..j_max other prompts needs that does not depend on the load,
    per length set (``lens.base`` rows, G): the n = L + J·E[L] tokens (L the prompt nodes) cut into chunks
    of C, ``n = K·C + r``. Arrays (G, QL, J) unless noted."""

    k_max: int  # full chunks resolved at their own span (``_prompt_chunks_extra_s``)
    chunks: np.ndarray  # ⌈n/C⌉, the steps that carry the prompt
    tokens: np.ndarray  # (G, k_max + 1 + QL + QL·J) prefill tokens of every step-time column
    spans: np.ndarray  # the same columns' spans
    own_span: np.ndarray  # (G, QL, k_max + 1) full chunk k attends to k·C + C/2 (not yet L)
    full_before: np.ndarray  # int min(K, k_max + 1): the full chunks in the cumulative sum
    beyond: np.ndarray  # (K − k_max − 1)⁺, the full chunks past it (at span L)
    partial: np.ndarray  # r > 0


def _prompt_top(lens: RowLengths, chunk: int) -> np.ndarray:
    """max(L − C/2) over the prompt nodes of each length set (G,) (cached on ``lens.grids``)."""
    key = ("prompt_top", chunk)
    if key not in lens.grids:
        lens.grids[key] = np.max(lens.base.l_nodes - chunk / 2.0, axis=1)
    return lens.grids[key]


def _carry_grid(lens: RowLengths, j_max: int, k_max: int, chunk: int) -> _CarryGrid:
    """The :class:`_CarryGrid` of every length set for J up to ``j_max`` (cached on ``lens.grids``)."""
    key = ("carry", j_max, k_max, chunk)
    if key in lens.grids:
        return lens.grids[key]
    base = lens.base
    j = np.arange(j_max + 1)
    n_tok = base.l_nodes[:, :, None] + j[None, None, :] * base.mean_l[:, None, None]  # (G, QL, J)
    prompt_tokens = base.l_nodes[:, :, None]
    full = np.floor(n_tok / chunk)
    rem = n_tok - full * chunk
    k = np.arange(k_max + 1, dtype=float)[None, None, :]
    n, q_l, _ = n_tok.shape
    offset = base.span_offset[:, None]
    spans = [k[0] * chunk + chunk / 2.0 + offset, prompt_tokens[:, :, 0] + offset,
             (np.minimum(full * chunk + rem / 2.0, prompt_tokens) + offset[:, :, None]).reshape(n, -1)]
    tokens = [np.full((n, k_max + 1 + q_l), float(chunk)), rem.reshape(n, -1)]
    lens.grids[key] = _CarryGrid(
        k_max=k_max, chunks=np.ceil(n_tok / chunk), tokens=np.concatenate(tokens, axis=1),
        spans=np.concatenate(spans, axis=1), own_span=k * chunk + chunk / 2.0 <= prompt_tokens,
        full_before=np.minimum(full, k_max + 1).astype(np.int64), beyond=np.maximum(full - k_max - 1, 0.0),
        partial=rem > 0,
    )
    return lens.grids[key]


def _row_blocks(n: int, elements_per_row: int):
    """Slices of the rows of an (n, ...) array, each of at most GRID_BLOCK_ELEMENTS elements
    (at least one row). Row-wise computations on large grids go by blocks: the temporaries
    stay in cache and out of fresh memory pages, and the result is that of one pass."""
    step = max(1, GRID_BLOCK_ELEMENTS // max(elements_per_row, 1))
    for start in range(0, n, step):
        yield slice(start, min(start + step, n))


def carrying_step_sums(c: Configs, s: State, lens: RowLengths, chunk: int, mj: np.ndarray):
    """E[own], E[own²], E[own³] and E[own·(J − m_J)] (each (N, QL)) of the time ``own`` of the
    step(s) that carry a prompt of each node length L with J ~ Poisson(m_J) others:
    ``own = ceil(n/C)·D(b) + g(n)``, n = L + J·E[L] (``_prompt_chunks_extra_s``; what does not depend on
    the load, per length set: ``_carry_grid``).

    The (N, QL, J) grid is the largest array of the serving model; it is evaluated by blocks
    of rows in order of their J (``_sorted_blocks``), each row with J up to its ``_carrying_j_max``
    (the Poisson tail beyond folds into it).
    """
    n = len(c)
    j_rows = _carrying_j_max(mj, lens)
    order = np.lexsort((mj, j_rows))
    sums = np.empty((4, n, lens.l_nodes.shape[1]))
    blocks = list(_sorted_blocks(j_rows[order] + 1, lens.l_nodes.shape[1]))
    # one block: every row at once in its own order (each row's figures are its own whatever the order)
    top = _prompt_top(lens, chunk)
    for rows in [order[block] for block in blocks] if len(blocks) > 1 else [slice(None)]:
        m = mj[rows]
        j_max = int(np.max(j_rows[rows]))
        pj3 = poisson_pmf(m, j_max, j_rows[rows])[:, None, :]  # (rows, 1, J)
        j = np.arange(j_max + 1)
        group = lens.group[rows]
        # k_max of the rows' prompts (``_prompt_chunks_extra_s``): the largest ⌈(L − C/2)/C⌉ of their sets
        grid = _carry_grid(lens, j_max, max(int(math.ceil(float(np.max(top[group])) / chunk)), 0), chunk)
        d3 = s.steps.d[rows, None, None]
        g = _prompt_chunks_extra_s(c if len(blocks) == 1 else c.take(rows), s.b[rows, None], lens.ctx[rows, None],
                                   grid, group, d3)
        own = grid.chunks[group] * d3 + g  # (rows, QL, J)
        p_own = pj3 * own
        sums[0, rows] = np.sum(p_own, axis=2)
        own2 = own * own
        sums[1, rows] = np.sum(pj3 * own2, axis=2)
        sums[2, rows] = np.sum(pj3 * own2 * own, axis=2)
        sums[3, rows] = np.sum(p_own * (j[None, None, :] - m[:, None, None]), axis=2)
    return sums[0], sums[1], sums[2], sums[3]


def _sorted_blocks(width: np.ndarray, per_column: int):
    """Slices of rows whose grid is ``width[i]·per_column`` elements (``width`` ascending), each of at most
    GRID_BLOCK_ELEMENTS elements at the width of its last row (at least one row)."""
    start, n = 0, len(width)
    while start < n:
        # rows start..stop−1 cost (stop − start)·width[stop − 1]·per_column
        cost = (np.arange(1, n - start + 1) * width[start:] * per_column)
        stop = start + max(1, int(np.searchsorted(cost, GRID_BLOCK_ELEMENTS, side="right")))
        yield slice(start, stop)
        start = stop


def _carrying_j_max(mj: np.ndarray, lens: RowLengths) -> np.ndarray:
    """The count J each row resolves (ints (N,)): as when its group's rows ran alone, sorted by m_J
    (stable) and cut into ``_row_blocks`` of ``QL·(prompts_k_max of the group + 1)`` elements (QL
    the group's prompt nodes), ``prompts_k_max`` of the row's block."""
    out = np.zeros(len(mj), dtype=np.int64)
    order = np.lexsort((mj, lens.group))
    k_group = group_k_max(mj, lens)
    start = 0
    while start < len(order):  # one pass per group (G ≤ the buckets of a workload)
        g = lens.group[order[start]]
        stop = start + int(np.searchsorted(lens.group[order[start:]], g, side="right"))
        members = order[start:stop]
        q_l = int(lens.l_count[members[0]])
        for block in _row_blocks(len(members), q_l * (int(k_group[members[0]]) + 1)):
            out[members[block]] = prompts_k_max(mj[members[block]])
        start = stop
    return out
